"""The job in a subprocess, and what a runner's test needs (Dask installed)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from tests.common.paths import ROOT

JOB_TIMEOUT = 300  # seconds; each job here takes a few


def worker_env() -> dict[str, str]:
    """The environment for subprocesses: this interpreter first on PATH (the worker pool
    starts SDK workers as plain ``python``), the project importable from its root."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH")] if p)
    return env


def cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m pipeline ARGS`` in a subprocess, from the repository's root."""
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
    )


try:  # only with apache-beam[dask]
    import distributed
except ImportError:
    distributed = None

needs_dask = pytest.mark.skipif(
    distributed is None,
    reason="the Dask test needs dask and distributed (pip install -e '.[test]')",
)


def listening(pid: int) -> list[str]:
    """The addresses the process and its children listen on (TCP)."""
    import psutil

    root = psutil.Process(pid)
    found = []
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            found += [c.laddr.ip for c in proc.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN]
    return found
