"""The package boundaries of docs/architecture.md#three-packages-arrows-pointing-inward, and
lint."""

import ast
import shutil
import subprocess
import sys

import pytest

from tests.common.paths import ROOT


def imported_after(statement: str) -> set[str]:
    code = f"{statement}\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=120)
    return {m.split(".")[0] for m in out.stdout.split()}


def modules_of(package: str) -> list[str]:
    """Every module of a package, sub-packages included, as dotted names."""
    return sorted(".".join(p.relative_to(ROOT).with_suffix("").parts)
                  for p in (ROOT / package).rglob("*.py") if p.stem != "__init__")


def test_transforms_imports_neither_beam_nor_torch():
    modules = modules_of("transforms")
    assert {"transforms.shards.parcels", "transforms.inputs.chunks", "transforms.dataset.manifest",
            "transforms.plan.windows"} <= set(modules)
    mods = imported_after("import " + ", ".join(modules))
    assert "transforms" in mods
    assert "apache_beam" not in mods and "torch" not in mods


@pytest.mark.slow  # a fresh interpreter per package
def test_reader_does_not_import_beam():
    modules = modules_of("reader")
    assert {"reader.data.dataset", "reader.inspect", "reader.order.sampler"} <= set(modules)
    mods = imported_after("import reader, " + ", ".join(modules))
    assert "reader" in mods and "torch" in mods
    assert "apache_beam" not in mods


# The folders of docs/architecture.md#the-folders and what each may import besides itself and
# its package's top-level modules that are not folders' consumers (the arrows point one way).
# Imports only for annotations (under ``if TYPE_CHECKING:``) are not arrows.
BELOW = {
    "transforms.dataset": set(),
    "transforms.plan": {"transforms.dataset"},
    "transforms.inputs": {"transforms.dataset"},
    "transforms.tokenize": {"transforms.dataset"},
    "transforms.dedup": {"transforms.dataset", "transforms.inputs"},
    "transforms.shards": {"transforms.dataset", "transforms.inputs", "transforms.plan",
                          "transforms.tokenize"},
    "pipeline.files": set(),
    "pipeline.steps": {"pipeline.files"},
    "pipeline.launch": {"pipeline.files", "pipeline.steps"},
    "reader.data": set(),
    "reader.order": set(),
    "reader.mixture": {"reader.data", "reader.order"},
    "reader.tools": {"reader.data", "reader.mixture"},
}
# The top-level modules every folder may use: the base of each package.
BASE = {"transforms.errors", "transforms.json_fields", "transforms.params", "transforms.file_kinds"}


def _runtime_imports(path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(node) for branch in ast.walk(tree) if isinstance(branch, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(branch.test) for node in ast.walk(branch)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top = node.module in ("transforms", "pipeline", "reader")
            found |= {f"{node.module}.{a.name}" for a in node.names} if top else {node.module}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def _folder(module: str) -> str:
    """The folder a module is in (``transforms.inputs``), or the module itself at the top."""
    parts = module.split(".")
    in_folder = len(parts) > 1 and (ROOT / parts[0] / parts[1]).is_dir()
    return ".".join(parts[:2]) if in_folder else module


def test_the_folders_import_one_way():
    wrong = []
    for folder, below in BELOW.items():
        assert (ROOT / folder.replace(".", "/") / "__init__.py").is_file(), folder
        for path in sorted((ROOT / folder.replace(".", "/")).rglob("*.py")):
            for name in _runtime_imports(path):
                if name.split(".")[0] not in ("transforms", "pipeline", "reader"):
                    continue
                target = _folder(name)
                if name.split(".")[0] != folder.split(".")[0]:
                    continue  # another package: the tests above hold those arrows
                if target == folder or target in below or name in BASE:
                    continue
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_each_module_is_in_the_architecture_page():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [m for p in ("transforms", "pipeline", "reader") for m in modules_of(p)
               if f"{m.rsplit('.', 1)[-1]}.py" not in page]
    assert not missing


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
