"""Memory follows ``--max-doc-bytes``, not the record: a record far over the limit (a line of
a plain or compressed file, a Parquet value) is rejected as ``too_large`` after reading at
most the limit and a block, and the job goes on (docs/running.md#bad-input).

Each job runs in a subprocess of a small wrapper that reports its children's peak RSS
(``ru_maxrss``), so that nothing else this test session ran counts. The job reading a small
corpus peaks at about 225 MB; before the limit was enforced while reading, a 300 MB line
took 2.0 GB, a 320 MB line inside a ``.gz`` 2.1 GB, and a 1 GiB Parquet value 3.3 GB.
"""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
LIMIT = 1_000_000  # --max-doc-bytes
PEAK_MB = 600  # the bound: the job's usual peak plus a 64 MiB chunk, with room to spare
GOOD = b'{"text": "a good document"}\n'

_WRAPPER = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
print(json.dumps({"code": done.returncode, "peak_mb": peak, "err": done.stderr[-3000:]}))
"""


def run_measured(*args: str) -> dict:
    """``python -m pipeline ARGS`` in a subprocess: its exit status, peak RSS in MB, stderr."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _WRAPPER, sys.executable, "-m", "pipeline",
                           *args], capture_output=True, text=True, env=env, cwd=REPO,
                          check=True)
    return json.loads(done.stdout)


def job(tmp_path: pathlib.Path, source: pathlib.Path) -> tuple[dict, dict, list[dict]]:
    """The job on ``source`` with the bytes tokenizer and the limit: (measures, manifest,
    too_large rejects)."""
    out = tmp_path / "out"
    measured = run_measured("--input", str(source), "--tokenizer", "bytes", "--max-doc-bytes",
                            str(LIMIT), "--output", str(out))
    assert measured["code"] == 0, measured["err"]
    manifest = json.loads((out / "_manifest.json").read_text())
    rejects = [json.loads(line) for line in
               (out / "_rejects" / "too_large.jsonl").read_text().splitlines()]
    return measured, manifest, rejects


def write_gzip_line(path: pathlib.Path, size: int) -> None:
    """A ``.jsonl.gz`` of a good line, a line of ``size`` bytes of text, a good line; built a
    gzip member at a time (gzip members concatenate), so it is a few MB on disk."""
    block = b"a" * (64 << 20)
    member = gzip.compress(block, compresslevel=9)
    with path.open("wb") as f:
        f.write(gzip.compress(GOOD + b'{"text": "'))
        for _ in range(size // len(block)):
            f.write(member)
        f.write(gzip.compress(b'"}\n' + GOOD))


@pytest.mark.slow
def test_a_300_mb_jsonl_line_is_rejected_within_the_usual_memory(tmp_path):
    source = tmp_path / "big.jsonl"
    size = 300_000_000
    with source.open("wb") as f:
        f.write(GOOD + b'{"text": "')
        block = b"a" * (1 << 24)
        for at in range(0, size, len(block)):
            f.write(block[: size - at])
        f.write(b'"}\n' + GOOD)
    measured, manifest, rejects = job(tmp_path, source)
    source.unlink()
    assert measured["peak_mb"] < PEAK_MB, measured
    assert manifest["counts"]["documents"] == 2
    (reject,) = rejects
    assert reject["source"] == f"{source}:2"
    assert reject["detail"].startswith(f"a line of {size + 12} bytes, more than the 5048576 bytes")
    assert reject["truncated"] and len(reject["record"]) == 4096


@pytest.mark.slow
@pytest.mark.parametrize("size", [2 << 30, 6 << 30], ids=["2GiB", "6GiB"])
def test_a_huge_line_in_a_small_gzip_file_is_rejected_within_the_usual_memory(tmp_path, size):
    source = tmp_path / "big.jsonl.gz"
    write_gzip_line(source, size)
    assert source.stat().st_size < 8 << 20
    measured, manifest, rejects = job(tmp_path, source)
    assert measured["peak_mb"] < PEAK_MB, measured
    assert manifest["counts"]["documents"] == 2
    (reject,) = rejects
    assert reject["source"] == f"{source}:2"
    assert reject["detail"].startswith(f"a line of {size + 12} bytes")


@pytest.mark.slow
def test_a_1_gib_parquet_value_is_rejected_unread(tmp_path):
    source = tmp_path / "big.parquet"
    size = 1 << 30
    # The value's bytes are a zero-filled buffer that is never written to: the test holds
    # no GiB either (the pages stay the kernel's shared zero page).
    big = pa.Array.from_buffers(pa.string(), 1, [
        None, pa.py_buffer(np.array([0, size], np.int32)), pa.py_buffer(bytes(size))])
    good = pa.array(["a good document", "another"])
    with pq.ParquetWriter(source, pa.schema([("text", pa.string())]), compression="zstd") as w:
        for texts in (good, big, good):
            w.write_table(pa.table({"text": texts}))
    del big
    assert source.stat().st_size < 1 << 20
    measured, manifest, rejects = job(tmp_path, source)
    assert measured["peak_mb"] < PEAK_MB, measured
    assert manifest["counts"]["documents"] == 4
    (reject,) = rejects
    assert reject["source"] == f"{source}#row=2"
    assert reject["detail"].startswith("row group 1 (rows 2 to 2) holds a page of 1073741")
