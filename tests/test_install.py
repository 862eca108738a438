"""A reader without Beam: what ``.[reader]`` installs, and the job's entry point without Beam.

The trainer's environment gets the reader, numpy, pyarrow and torch, never Apache Beam (whose
pins collide with training stacks); where Beam is missing, ``python -m pipeline`` and
``token-windows`` say in one line what to install and exit 2 (refused before any work).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Runs CODE in a fresh interpreter in which `import apache_beam` fails as if not installed.
WITHOUT_BEAM = "import sys; sys.modules['apache_beam'] = None\n"


def without_beam(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_BEAM + code, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("entry", [
    # python -m pipeline …
    "import runpy; sys.argv = ['pipeline', *sys.argv[1:]]; "
    "runpy.run_module('pipeline', run_name='__main__', alter_sys=True)",
    # the token-windows console script (setup.py's entry point)
    "from pipeline.__main__ import main; main()",
])
def test_without_beam_the_job_says_what_to_install(entry: str) -> None:
    done = without_beam(entry, "--input", "x.jsonl", "--tokenizer", "bytes", "--output", "out")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "needs Apache Beam" in lines[0] and "pip install -e '.[job]'" in lines[0]
    assert done.stdout == ""


def test_without_beam_the_python_api_says_what_to_install() -> None:
    done = without_beam("import pipeline\ntry:\n    pipeline.run\nexcept ModuleNotFoundError "
                        "as e:\n    print(e)\n")
    assert done.returncode == 0, done.stderr
    assert "needs Apache Beam" in done.stdout and "'.[job]'" in done.stdout


@pytest.mark.slow  # subprocesses in an environment without Beam
def test_the_reader_runs_without_beam(tmp_path: Path) -> None:
    code = (
        "from tests.reader_data import random_docs, write_docs\n"
        "from reader import WindowDataset, collate\n"
        f"write_docs(__import__('pathlib').Path({str(tmp_path / 'ds')!r}), random_docs(5), "
        "window=8)\n"
        f"ds = WindowDataset({str(tmp_path / 'ds')!r}, cache_dir={str(tmp_path / 'c')!r})\n"
        "b = collate(ds.__getitems__(list(range(len(ds)))), pad_id=ds.eos_id)\n"
        "print(b['num_targets'] == ds.scored_targets, 'apache_beam' in sys.modules "
        "and sys.modules['apache_beam'] is not None)\n"
    )
    done = without_beam(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


def resolve(tmp_path: Path, extra: str, *first: str) -> set[str]:
    """The distributions a fresh ``pip install *first -e '.[extra]'`` would install.

    pip's own resolver on the project's metadata, with nothing installed counted
    (``--ignore-installed``), in a copy of the project so that no metadata is written here.
    """
    project = tmp_path / f"project-{extra}"
    project.mkdir()
    shutil.copy(REPO / "setup.py", project)
    for package in ("transforms", "pipeline", "reader"):
        shutil.copytree(REPO / package, project / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    report = tmp_path / f"{extra}.json"
    subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                    "--no-build-isolation", "--quiet", "--report", str(report),
                    *first, "-e", f".[{extra}]"],
                   cwd=project, check=True, timeout=900, capture_output=True)
    return {item["metadata"]["name"].lower()
            for item in json.loads(report.read_text())["install"]}


@pytest.mark.slow
def test_a_reader_install_has_no_beam_and_a_job_install_has(tmp_path: Path) -> None:
    reader = resolve(tmp_path, "reader", "torch==2.13.0")  # the README's CPU wheel first
    assert {"torch", "numpy", "pyarrow", "token-windows"} <= reader
    assert "apache-beam" not in reader
    job = resolve(tmp_path, "job")
    assert "apache-beam" in job and "torch" not in job


def test_beams_bigquery_notice_is_dropped_and_its_other_records_printed(capsys) -> None:
    # Where the gcp extra is not installed (README command 1's `job` extra), Beam logs that
    # BigQuery's client libraries are missing as it loads: not the job's concern. Any other
    # record Beam logs while loading still reaches stderr.
    from pipeline import _BeamImportNotices

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("root", logging.WARNING, __file__, 1, message, None, None)

    notices = _BeamImportNotices()
    notices.emit(record("apitools not found, and bigquery client libraries are not available "
                        "despite the import not raising an ImportError."))
    notices.emit(record("another notice"))
    assert capsys.readouterr().err == "another notice\n"


# `apache_beam.io` in a fresh interpreter, after FIRST and then LOOK (a way of looking a name
# up), as JSON: {"modules": the connectors loaded then, "names": {every name dir() lists: the
# object's module and name}}. The loader is left out: the job's loads the package in two steps.
BEAM_IO = """
import json, sys
{first}
import apache_beam.io as io
{look}
def ident(value):
    return [getattr(value, "__module__", None),
            getattr(value, "__qualname__", getattr(value, "__name__", type(value).__name__))]
connectors = {{"apache_beam.io.avroio", "apache_beam.io.mongodbio",
              "apache_beam.io.gcp.bigquery", "apache_beam.io.gcp.pubsub"}}
modules = sorted(connectors & set(sys.modules))
names = {{name: ident(getattr(io, name)) for name in dir(io) if name != "__loader__"}}
print(json.dumps({{"modules": modules, "names": names}}))
"""


def beam_io(first: str, look: str = "") -> dict:
    done = subprocess.run([sys.executable, "-c", BEAM_IO.format(first=first, look=look)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def beam_alone() -> dict:
    return beam_io("import apache_beam")


@pytest.mark.slow  # fresh interpreters
def test_the_job_loads_beam_without_its_connectors(beam_alone: dict) -> None:
    # Loaded without them, until a name is looked up.
    assert beam_alone["modules"] == ["apache_beam.io.avroio", "apache_beam.io.gcp.bigquery",
                                     "apache_beam.io.gcp.pubsub", "apache_beam.io.mongodbio"]
    looked_up = "io.WriteToText; from apache_beam.io import filesystems"
    assert beam_io("import pipeline", looked_up)["modules"] == []
    assert beam_io("import pipeline.run", looked_up)["modules"] == []


@pytest.mark.slow  # fresh interpreters
@pytest.mark.parametrize("look", [
    "",  # dir(io)
    "from apache_beam.io import ReadFromBigQuery",
    "import apache_beam as beam; beam.io.WriteToAvro",
    "exec('from apache_beam.io import *', found := {}); assert 'ReadFromMongoDB' in found",
    "assert not hasattr(io, 'NoSuchName')",
])
def test_beams_io_names_are_all_there_once_looked_up(beam_alone: dict, look: str) -> None:
    assert beam_io("import pipeline", look)["names"] == beam_alone["names"]


COLLECTOR = """
import gc, json, sys
{first}
during = []  # collections while Beam loaded
gc.callbacks.append(lambda phase, info: phase == "start" and "apache_beam" in sys.modules
                    and "pipeline.run" not in sys.modules and during.append(info))
import pipeline
print(json.dumps([len(during), gc.isenabled(), gc.get_freeze_count() > 0]))
"""


@pytest.mark.slow  # fresh interpreters
@pytest.mark.parametrize(("first", "want"), [
    ("", [0, True, True]),  # paused while Beam loads, what it loaded left out afterwards
    ("gc.disable()", [0, False, False]),  # a program that has it off keeps it off
])
def test_the_collector_is_paused_while_beam_loads(first: str, want: list) -> None:
    done = subprocess.run([sys.executable, "-c", COLLECTOR.format(first=first)], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == want


ALLOCATOR = """
import json, os, sys
{first}
import pipeline
import pyarrow as pa
print(json.dumps([pa.default_memory_pool().backend_name,
                  os.environ.get("ARROW_DEFAULT_MEMORY_POOL")]))
"""


@pytest.mark.slow  # fresh interpreters
@pytest.mark.parametrize(("first", "chosen", "want"), [
    ("", None, ["system", "system"]),  # the job's processes, and the workers they start
    ("", "mimalloc", ["mimalloc", "mimalloc"]),  # the user's choice is kept
    ("import pyarrow", None, ["default", None]),  # a program's pyarrow is left as it is
])
def test_the_job_takes_arrows_buffers_from_the_system_allocator(first: str, chosen: str | None,
                                                                want: list) -> None:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    if chosen is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    done = subprocess.run([sys.executable, "-c", ALLOCATOR.format(first=first)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    if want[0] == "default":  # pyarrow's own default on this platform
        default = subprocess.run(
            [sys.executable, "-c", "import pyarrow; print(pyarrow.default_memory_pool()"
             ".backend_name)"], capture_output=True, text=True, timeout=300,
            env=env, check=True).stdout.strip()
        assert default != "system"
        want = [default, *want[1:]]
    assert json.loads(done.stdout) == want


BLAS_THREADS = """
import ctypes, json, os, sys
{first}
import pipeline
import numpy
# OpenBLAS as numpy's wheels bundle it (its symbols carry a prefix and suffix there).
lib = next(line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line)
lib = ctypes.CDLL(lib)
get = next(getattr(lib, name) for name in ("scipy_openblas_get_num_threads64_",
           "scipy_openblas_get_num_threads", "openblas_get_num_threads")
           if hasattr(lib, name))
print(json.dumps([get(), os.environ.get("OPENBLAS_NUM_THREADS")]))
"""


def _openblas_threads(first: str, env: dict[str, str]) -> list:
    done = subprocess.run([sys.executable, "-c", BLAS_THREADS.format(first=first)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env=env)
    if "StopIteration" in done.stderr:
        pytest.skip("this numpy is not built on OpenBLAS")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow  # fresh interpreters
def test_numpy_loads_for_the_job_with_one_blas_thread_and_the_environment_is_left_as_it_was(
) -> None:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    # The job's process: one BLAS thread; the processes it starts see no variable of ours.
    assert _openblas_threads("", env) == [1, None]
    # The user's choice is kept, and so is a program's numpy loaded before the job's.
    assert _openblas_threads("", {**env, "OPENBLAS_NUM_THREADS": "2"}) == [2, "2"]
    threads, variable = _openblas_threads("import numpy", env)
    assert variable is None
    assert threads > 1 if (os.cpu_count() or 1) > 1 else threads == 1  # a thread per core


def test_two_libraries_beam_loads_are_imported_on_first_use() -> None:
    import importlib.util

    import dateutil

    from pipeline import _DeferConnectors

    spec = _DeferConnectors.find_spec("dateutil.parser", dateutil.__path__)
    assert isinstance(spec.loader, importlib.util.LazyLoader)
    assert _DeferConnectors.find_spec("dateutil.tz", dateutil.__path__) is None


LAZY = """
import json, sys
import pipeline
lazy = sorted(n for n in ("httplib2", "dateutil.parser")
              if type(sys.modules.get(n)).__name__ == "_LazyModule")
from apache_beam.internal.http_client import get_new_http
from apache_beam.utils.timestamp import Timestamp
import httplib2
assert isinstance(get_new_http(), httplib2.Http)
assert Timestamp.from_rfc3339("2020-01-01T00:00:00Z") == Timestamp(1577836800)
print(json.dumps([lazy, type(sys.modules["httplib2"]).__name__]))
"""


@pytest.mark.slow  # a fresh interpreter
def test_what_loads_on_first_use_works_once_used() -> None:
    # Lazy where nothing else imported them first (a lean environment: ['dateutil.parser',
    # 'httplib2']; with the gcp extra, Google's clients load both as Beam loads).
    done = subprocess.run([sys.executable, "-c", LAZY], cwd=REPO, capture_output=True,
                          text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    lazy, loaded = json.loads(done.stdout)
    assert loaded == "module"
    assert lazy in ([], ["dateutil.parser", "httplib2"])


BEARTYPE = """
import json, sys
{first}
import pipeline
import apache_beam.typehints.typehints as th
loaded = "beartype" in sys.modules
{look}
class A: pass
class B(A): pass
checks = [th.is_consistent_with(B, A), th.is_consistent_with(A, B)]
from beartype.door import is_subhint
from beartype.roar import BeartypeDoorException
print(json.dumps([loaded, checks, th.is_subhint is is_subhint,
                  th.BeartypeDoorException is BeartypeDoorException]))
"""


@pytest.mark.slow  # fresh interpreters
@pytest.mark.parametrize(("first", "look", "loaded"), [
    ("", "", False),  # loaded by the first comparison Beam hands to beartype
    ("", "from apache_beam.typehints.typehints import BeartypeDoorException", False),
    ("import beartype.door", "", True),  # loaded already: Beam's module as it is
])
def test_beartype_loads_when_beams_type_hints_first_need_it(first: str, look: str,
                                                            loaded: bool) -> None:
    done = subprocess.run([sys.executable, "-c", BEARTYPE.format(first=first, look=look)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [loaded, [True, False], True, True]
