"""The package boundaries of docs/architecture.md#three-packages-arrows-pointing-inward, and
lint."""

import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def imported_after(statement: str) -> set[str]:
    code = f"{statement}\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=120)
    return {m.split(".")[0] for m in out.stdout.split()}


def test_transforms_imports_neither_beam_nor_torch():
    modules = sorted(p.stem for p in (ROOT / "transforms").glob("*.py") if p.stem != "__init__")
    assert {"parcels", "chunks", "manifest", "rows", "schema", "windows"} <= set(modules)
    mods = imported_after("import " + ", ".join(f"transforms.{m}" for m in modules))
    assert "transforms" in mods
    assert "apache_beam" not in mods and "torch" not in mods


@pytest.mark.slow  # a fresh interpreter per package
def test_reader_does_not_import_beam():
    modules = sorted(p.stem for p in (ROOT / "reader").glob("*.py") if p.stem != "__init__")
    assert {"dataset", "inspect", "integrity", "layout", "sampler"} <= set(modules)
    mods = imported_after("import reader, " + ", ".join(f"reader.{m}" for m in modules))
    assert "reader" in mods and "torch" in mods
    assert "apache_beam" not in mods


def test_inspect_and_prepare_need_no_torch():
    """They run in the job's lean environment: `reader` loads its torch side on first use."""
    mods = imported_after("import reader.inspect")
    assert "reader" in mods
    assert "torch" not in mods and "apache_beam" not in mods


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed")
def test_ruff_clean():
    r = subprocess.run(["ruff", "check", "."], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
