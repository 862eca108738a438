"""The fixtures every test folder may use (loaded by tests/conftest.py as a pytest plugin)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.common.jobs import train_bpe, write_jsonl
from tests.common.reader_data import random_docs, write_docs
from tests.common.runners import distributed, worker_env
from tests.common.servers import stop_processes


@pytest.fixture
def moto_bucket() -> Iterator[tuple[Any, str]]:
    """A moto S3 server on 127.0.0.1 holding an empty bucket ``bucket``: (boto3 client,
    endpoint); a dataset in it opens as `reader_s3_uri` names it. Stopped afterwards."""
    moto_server = pytest.importorskip("moto.server", reason="moto (an S3 test server) is not "
                                                            "installed")
    boto3 = pytest.importorskip("boto3", reason="boto3 is not installed")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                          aws_secret_access_key="test", region_name="us-east-1")
        s3.create_bucket(Bucket="bucket")
        yield s3, endpoint
    finally:
        server.stop()


@pytest.fixture
def corpus(tmp_path: pathlib.Path) -> pathlib.Path:
    """A small JSONL corpus of varied lengths, English and Chinese."""
    texts = [
        "abcde",
        "abcd",
        "",
        "The grapes are sour, and not ripe as I thought. " * 7,
        "道可道，非常道。名可名，非常名。" * 5,
        "x",
        "Slow but steady wins the race.",
    ]
    return write_jsonl(tmp_path / "in" / "c.jsonl", [{"text": t} for t in texts])


@pytest.fixture(scope="session")
def bpe(tmp_path_factory) -> pathlib.Path:
    """`train_bpe` once per session, with a tokenizer_config.json naming <s> and </s>."""
    pytest.importorskip("tokenizers", reason="the hf extra (tokenizers) is not installed")
    return train_bpe(tmp_path_factory.mktemp("bpe"),
                     config={"bos_token": {"content": "<s>", "lstrip": False},
                             "eos_token": "</s>"})


@pytest.fixture
def dask_cluster(tmp_path: pathlib.Path):
    """A ``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1 (the project
    importable in each, as a cluster must have it): yields (address, [the scheduler's and
    the workers' PIDs], [each worker's log]); always stopped by their PIDs."""
    env = worker_env()
    env["DASK_LOGGING__TOKEN_WINDOWS"] = "debug"  # the workers log each chunk and shard
    info = tmp_path / "scheduler.json"
    procs: list[subprocess.Popen] = []
    logs = [tmp_path / "scheduler.log", tmp_path / "worker-0.log", tmp_path / "worker-1.log"]
    local = ["--dashboard-address", "127.0.0.1:0"]  # without it, dashboards bind 0.0.0.0
    try:
        with logs[0].open("wb") as log:
            procs.append(subprocess.Popen(
                ["dask", "scheduler", "--host", "127.0.0.1", "--port", "0", *local,
                 "--scheduler-file", str(info)],
                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 60
        while not (info.exists() and info.stat().st_size):
            if procs[0].poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the dask scheduler did not start:\n{logs[0].read_text()}")
            time.sleep(0.2)
        time.sleep(0.2)  # the file is written in one go, but not atomically
        address = json.loads(info.read_text())["address"]
        for i, path in enumerate(logs[1:]):
            with path.open("wb") as log:
                procs.append(subprocess.Popen(
                    ["dask", "worker", address, "--host", "127.0.0.1", *local,
                     "--nthreads", "1", "--name", f"worker-{i}",
                     "--local-directory", str(tmp_path / f"worker-{i}")],
                    cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT))
        with distributed.Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
        yield address, [p.pid for p in procs], logs[1:]
    finally:
        stop_processes(procs)


@pytest.fixture
def isolated_cache(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> Path:
    """A layout cache of the test's own (DataLoader workers inherit the variable): every test
    below tests/reader/ has one (tests/reader/conftest.py)."""
    directory = tmp_path_factory.mktemp("layout-cache")
    monkeypatch.setenv("TOKEN_WINDOWS_CACHE", str(directory))
    return directory


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, list[dict]]:
    """A 3-shard dataset of 30 documents, W=6, S=4, score=new; and its rows in global order."""
    root = tmp_path / "ds"
    rows = write_docs(root, random_docs(30), window=6, stride=4, score_new=True, num_shards=3)
    return root, rows


@pytest.fixture
def three(tmp_path: Path) -> Any:
    """Three datasets of 12, 17 and 22 documents (W = 8, S = 6, score=new, 2 shards), named
    web, code and books, as one `reader.MixedDataset`."""
    from reader import MixedDataset, WindowDataset

    sources = {}
    for k, name in enumerate(("web", "code", "books")):
        write_docs(tmp_path / name, random_docs(12 + 5 * k, seed=k, max_len=40), window=8,
                   stride=6, score_new=True, num_shards=2)
        sources[name] = WindowDataset(tmp_path / name)
    return MixedDataset(sources)
