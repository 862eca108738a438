"""Shared fixtures: helpers that run the job into a temporary directory and read it back."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pathlib
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# One torch (OpenMP/MKL) thread, here and in every subprocess a test starts: the suite's
# tensors are tiny, so a second intra-op thread only contends with the other process on a
# 2-core machine (and with DataLoader workers). Set before torch is first imported, which
# reads these at start-up; `pytest_configure` also tells a torch that is already loaded.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def pytest_configure(config: pytest.Config) -> None:
    # `python -m pytest -q` runs everything; `-m "not slow"` is the quick inner loop.
    config.addinivalue_line(
        "markers", "slow: runs a Beam pipeline (the whole job, in process or not, or one step "
                   "on the FnApiRunner), starts a server, a cluster, torchrun or worker "
                   "processes, runs a transformers model, or replays whole streams (every "
                   "resume cut, pinned batches, an engine against its reference library over "
                   "many texts) (left out by -m 'not slow')")
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


@pytest.fixture(autouse=True, scope="session")
def _layout_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The reader's layout cache for the whole run, in a temporary directory rather than the
    user's ~/.cache (subprocesses, such as the examples, inherit it)."""
    old = os.environ.get("TOKEN_WINDOWS_CACHE")
    os.environ["TOKEN_WINDOWS_CACHE"] = str(tmp_path_factory.mktemp("layout-cache"))
    yield
    if old is None:
        os.environ.pop("TOKEN_WINDOWS_CACHE", None)
    else:
        os.environ["TOKEN_WINDOWS_CACHE"] = old


DATA = ROOT / "tests" / "data"
SAMPLES = ROOT / "samples"


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


def run_job(output: pathlib.Path, *args: str, tuning: Any = None) -> dict[str, Any]:
    """Run the job in this process (FnApiRunner) and return its manifest; ``tuning``: its
    knobs (`pipeline.launch.context.Tuning`)."""
    from pipeline.job import run

    manifest = run(["--output", str(output), *args], tuning=tuning)
    assert manifest is not None
    return manifest


def exit_code(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run the command line (`pipeline.job.main`) in this process, expecting it to exit;
    return its status and the last line it printed on stderr, which is never a traceback."""
    from pipeline.job import main

    with pytest.raises(SystemExit) as info:
        main(list(args))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return info.value.code, err.strip().splitlines()[-1]


def run_main(*args: str, tuning: Any = None) -> tuple[int, str]:
    """``python -m pipeline ARGS`` in this process (`pipeline.job.main`), whether it exits or
    returns: (exit status, everything it printed on stderr); ``tuning``: the job's knobs."""
    from pipeline.job import main

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            main(list(args), tuning=tuning)
    except SystemExit as e:
        return int(e.code or 0), err.getvalue()
    return 0, err.getvalue()


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


def reader_s3_uri(endpoint: str, key: str) -> str:
    """The reader's URI of ``key`` in `moto_bucket`'s bucket (pyarrow's S3 options inline)."""
    return (f"s3://test:test@bucket/{key}?endpoint_override={endpoint}&scheme=http"
            "&region=us-east-1")


def read_rows(output: pathlib.Path) -> list[dict[str, Any]]:
    """Every row of every shard, in shard order."""
    from transforms.dataset.manifest import MANIFEST_NAME

    manifest = json.loads((output / MANIFEST_NAME).read_text())
    rows: list[dict[str, Any]] = []
    for shard in manifest["shards"]:
        rows.extend(pq.read_table(output / shard["file"]).to_pylist())
    return rows


def write_jsonl(path: pathlib.Path, records: list[Any]) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n")
    return path


def tree_digest(root: pathlib.Path, *, leave_out: pathlib.Path | None = None) -> dict[str, str]:
    """Every file, directory and link below ``root`` (links not followed; ``leave_out`` and
    what is below it left out): its SHA-256, or what it is."""
    found = {}
    for path in sorted(root.rglob("*")):
        if leave_out is not None and (path == leave_out or leave_out in path.parents):
            continue
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = "link -> " + os.readlink(path)
        elif path.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def dir_bytes(output: pathlib.Path) -> dict[str, bytes]:
    """Every file below ``output`` by relative path, for byte-equality checks."""
    return {
        str(p.relative_to(output)): p.read_bytes() for p in sorted(output.rglob("*")) if p.is_file()
    }


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


def parcel_documents(data: bytes) -> list[dict[str, Any]]:
    """Each document of a parcel (`transforms.shards.parcels`), as plain values, for assertions."""
    from transforms.shards.parcels import read_parcel

    b = read_parcel(data)
    out, z, w, i, s = [], 0, 0, 0, 0
    for k in range(len(b.keys)):
        m, n = int(b.doc_tokens[k]), int(b.doc_windows[k])
        id_end, src_end = int(b.id_ends[k]), int(b.src_ends[k])
        out.append({
            "doc_key": int(b.keys[k]), "doc_id": b.ids[i:id_end].decode(),
            "source": b.sources[s:src_end].decode(), "tokens": b.tokens[z : z + m].tolist(),
            "starts": b.starts[w : w + n].tolist(), "lengths": b.lengths[w : w + n].tolist(),
            "loss_starts": b.loss_starts[w : w + n].tolist(), "covered": int(b.covered[k]),
            "repaired": bool(b.repaired[k]),
        })
        z, w, i, s = z + m, w + n, id_end, src_end
    return out


def fn_api_pipeline() -> Any:
    """A pipeline on Beam's FnApiRunner (never the Prism-first DirectRunner)."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    return beam.Pipeline(runner=fn_runner.FnApiRunner())


def train_bpe(directory: pathlib.Path, *, config: dict[str, Any] | None = None) -> pathlib.Path:
    """A small byte-level BPE ``tokenizer.json`` trained on the sample corpus (no download),
    with ``<s>``, ``</s>`` and ``<|endoftext|>`` as special tokens, and optionally a
    ``tokenizer_config.json`` beside it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = [json.loads(line)["text"]
             for f in sorted((SAMPLES / "corpus").glob("*.jsonl"))
             for line in f.read_text(encoding="utf-8").splitlines()[:40]]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>", "<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    tok.save(str(path))
    if config is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="session")
def bpe(tmp_path_factory) -> pathlib.Path:
    """`train_bpe` once per session, with a tokenizer_config.json naming <s> and </s>."""
    pytest.importorskip("tokenizers", reason="the hf extra (tokenizers) is not installed")
    return train_bpe(tmp_path_factory.mktemp("bpe"),
                     config={"bos_token": {"content": "<s>", "lstrip": False},
                             "eos_token": "</s>"})
