"""Test servers started by the tests: waiting for them, stopping them, addressing them."""

from __future__ import annotations

import contextlib
import pathlib
import socket
import subprocess
import time

import pytest


def wait_listening(proc: subprocess.Popen, port: int, what: str, log: pathlib.Path) -> None:
    """Wait until ``proc`` accepts connections on 127.0.0.1:``port``; fail the test, showing
    its log, if it exits first or is not listening within 60 s."""
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited ({proc.returncode}):\n"
                        f"{log.read_text(errors='replace')}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not listen on port {port} in 60 s")
            time.sleep(0.2)


def stop_processes(procs: list[subprocess.Popen], timeout: float = 20) -> None:
    """Stop each process by its PID, the last started first: politely, then for sure."""
    for proc in reversed(procs):
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def reader_s3_uri(endpoint: str, key: str) -> str:
    """The reader's URI of ``key`` in `moto_bucket`'s bucket (pyarrow's S3 options inline)."""
    return (f"s3://test:test@bucket/{key}?endpoint_override={endpoint}&scheme=http"
            "&region=us-east-1")
