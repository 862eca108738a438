"""A reader without Beam: what ``.[reader]`` installs, and the job's entry point without Beam.

The trainer's environment gets the reader, numpy, pyarrow and torch, never Apache Beam (whose
pins collide with training stacks); where Beam is missing, ``python -m pipeline`` and
``token-windows`` say in one line what to install and exit 2 (refused before any work).
"""

from __future__ import annotations

import json
import logging
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
        "from tests.common.reader_data import random_docs, write_docs\n"
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


# A fresh interpreter: what the process looks like before and after IMPORT, as JSON. FIRST runs
# before the first look (e.g. Beam's own import, whose effects are Beam's, not ours).
PROCESS = """
import gc, json, logging, os, sys, typing  # typing registers two non-module entries
{first}
def look():
    loggers = [logging.getLogger(), *(v for v in logging.Logger.manager.loggerDict.values()
                                      if isinstance(v, logging.Logger))]
    return {{"environ": dict(os.environ), "gc": [gc.isenabled(), gc.get_threshold(),
                                                 gc.get_freeze_count()],
            "meta_path": [repr(f) for f in sys.meta_path],
            "path_hooks": [repr(h) for h in sys.path_hooks],
            "stubs": sorted(n for n, m in sys.modules.items()
                            if not isinstance(m, type(sys))),
            "handlers": sorted(f"{{lg.name}}:{{h!r}}" for lg in loggers for h in lg.handlers),
            "root_level": logging.getLogger().level}}
before = look()
{imports}
print(json.dumps([before, look()]))
"""


@pytest.mark.slow  # fresh interpreters
@pytest.mark.parametrize(("first", "imports"), [
    ("", "import transforms"),
    ("", "import pipeline"),
    ("", "import reader"),
    # The job's modules and the trainer's, their libraries loaded first (what Beam's or
    # transformers' own import does is theirs).
    ("import transformers.trainer_utils; transformers.Trainer", "import reader.hf, reader.inspect"),
    ("import apache_beam", "import pipeline; pipeline.build_pipeline, pipeline.run"),
    ("import apache_beam", "import pipeline.job, pipeline.steps.encode, pipeline.steps.write"),
])
def test_importing_a_package_changes_nothing_in_the_process(first: str, imports: str) -> None:
    done = subprocess.run([sys.executable, "-c", PROCESS.format(first=first, imports=imports)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout)
    assert after == before


def test_the_public_names_are_the_functions_whichever_module_loads_first() -> None:
    # `pipeline.run` is the function, also once the module that defines it is loaded.
    import pipeline.job
    from pipeline import build_pipeline, main, run
    from pipeline.graph import build_pipeline as built_in_graph

    assert run is pipeline.job.run and main is pipeline.job.main
    assert build_pipeline is built_in_graph
    assert pipeline.run is pipeline.job.run
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pipeline.nope  # noqa: B018


# The command's process (`pipeline.__main__.settle_process`, before its imports): the pool
# Arrow's buffers come from, and the environment after.
ALLOCATOR = """
import json, os, sys
{first}
from pipeline.__main__ import settle_process
settle_process()
import pyarrow as pa
print(json.dumps([pa.default_memory_pool().backend_name,
                  os.environ.get("ARROW_DEFAULT_MEMORY_POOL")]))
"""


@pytest.mark.slow  # fresh interpreters
@pytest.mark.parametrize(("chosen", "want"), [
    (None, ["system", "system"]),  # the command's process, and the workers it starts
    ("mimalloc", ["mimalloc", "mimalloc"]),  # the user's choice is kept
])
def test_the_command_takes_arrows_buffers_from_the_system_allocator(chosen: str | None,
                                                                    want: list) -> None:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    if chosen is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    done = subprocess.run([sys.executable, "-c", ALLOCATOR.format(first="")], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == want


@pytest.mark.slow  # a fresh interpreter
def test_a_program_that_imports_the_job_keeps_pyarrows_default_allocator() -> None:
    code = ("import json, pipeline.job, pyarrow as pa; "
            "print(json.dumps([pa.default_memory_pool().backend_name, "
            "pa.jemalloc_memory_pool is None]))")
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    default = subprocess.run(
        [sys.executable, "-c", "import pyarrow; print(pyarrow.default_memory_pool()"
         ".backend_name)"], capture_output=True, text=True, timeout=300,
        env=env, check=True).stdout.strip()
    assert json.loads(done.stdout)[0] == default != "system"


BLAS_THREADS = """
import ctypes, json, os, sys
from pipeline.__main__ import settle_process
settle_process()
import numpy
# OpenBLAS as numpy's wheels bundle it (its symbols carry a prefix and suffix there).
lib = next(line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line)
lib = ctypes.CDLL(lib)
get = next(getattr(lib, name) for name in ("scipy_openblas_get_num_threads64_",
           "scipy_openblas_get_num_threads", "openblas_get_num_threads")
           if hasattr(lib, name))
print(json.dumps([get(), os.environ.get("OPENBLAS_NUM_THREADS")]))
"""


def _openblas_threads(env: dict[str, str]) -> list:
    done = subprocess.run([sys.executable, "-c", BLAS_THREADS], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env=env)
    if "StopIteration" in done.stderr:
        pytest.skip("this numpy is not built on OpenBLAS")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow  # fresh interpreters
def test_the_command_loads_numpy_with_one_blas_thread_unless_told_otherwise() -> None:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    assert _openblas_threads(env) == [1, "1"]  # and the workers it starts inherit it
    assert _openblas_threads({**env, "OPENBLAS_NUM_THREADS": "2"}) == [2, "2"]


def test_the_command_leaves_beams_bigquery_notice_out_of_its_log() -> None:
    # Where the gcp extra is not installed (README command 1's `job` extra), Beam logs that
    # BigQuery's client libraries are missing as it loads: not the job's concern. Any other
    # record still reaches the log.
    from pipeline.__main__ import _not_bigquery_notice

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("root", logging.WARNING, __file__, 1, message, None, None)

    assert not _not_bigquery_notice(record(
        "apitools not found, and bigquery client libraries are not available despite the "
        "import not raising an ImportError."))
    assert _not_bigquery_notice(record("another notice"))
