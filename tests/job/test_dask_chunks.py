"""One input file on a real Dask cluster: the launcher cuts it into chunks, both workers
encode them, and the bytes are the local runner's (docs/cost.md#dask).

The cluster is tests/job/test_runners.py's: a ``dask scheduler`` and two single-thread ``dask
worker`` processes on 127.0.0.1, whose logs say which chunks each worker encoded.
"""

from __future__ import annotations

import contextlib
import json
import re

import pytest

from tests.common.jobs import dir_bytes, run_job, write_jsonl
from tests.common.paths import SAMPLES
from tests.common.runners import needs_dask


def _worker_cpu(pids: list[int]) -> list[float]:
    """CPU seconds (user + system) of each process and its children so far."""
    import psutil

    out = []
    for pid in pids:
        root = psutil.Process(pid)
        total = 0.0
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                t = proc.cpu_times()
                total += t.user + t.system
        out.append(total)
    return out


@needs_dask
@pytest.mark.slow
def test_one_file_spreads_over_both_dask_workers_with_either_shuffle(tmp_path, dask_cluster):
    """One input file, cut by the launcher into byte ranges (counted by a job of their own,
    then numbered): both workers encode, each at least a third of the chunks, every chunk
    once, and the bytes are those of the local runner reading the file as one chunk; with
    the runner's shuffle and with the file shuffle (whose spill list reaches the writers
    through a GroupByKey, not as a side input that would encode the corpus again)."""
    from pipeline.launch.context import Tuning

    address, pids, worker_logs = dask_cluster
    texts = [json.loads(line)["text"] for f in sorted((SAMPLES / "corpus").glob("*.jsonl"))
             for line in f.read_text(encoding="utf-8").splitlines()]
    corpus = write_jsonl(tmp_path / "in" / "one.jsonl",
                         [{"text": f"{texts[i % len(texts)]} ({i})"} for i in range(600)])
    size = corpus.stat().st_size
    args = ["--input", str(corpus), "--tokenizer", str(SAMPLES / "spm.model"),
            "--window", "64", "--stride", "48", "--num-shards", "4", "--seed", "3"]
    run_job(tmp_path / "local", *args)  # 64 MiB chunks: the file is one chunk
    expected = dir_bytes(tmp_path / "local")

    chunk_bytes = size // 12 + 1
    want = {f"{corpus}@{start}" for start in range(0, size, chunk_bytes)}
    assert len(want) == 12
    dask = ["--runner=DaskRunner", f"--dask_client_address={address}",
            "--dask_npartitions=4"]
    seen = [0] * len(worker_logs)
    for shuffle in ("runner", "files"):
        before = _worker_cpu(pids[1:])
        run_job(tmp_path / shuffle, *args, *dask, "--shuffle", shuffle,
                tuning=Tuning(chunk_bytes=chunk_bytes))
        cpu = [b - a for a, b in zip(before, _worker_cpu(pids[1:]), strict=True)]
        assert dir_bytes(tmp_path / shuffle) == expected, shuffle

        logs = [p.read_text(errors="replace") for p in worker_logs]
        encoded = [re.findall(r"encoded chunk (\S+): ", log) for log in logs]
        mine = [e[s:] for e, s in zip(encoded, seen, strict=True)]  # this job's lines
        seen = [len(e) for e in encoded]
        print(f"--shuffle {shuffle}: chunks encoded per worker {[len(m) for m in mine]}, "
              f"worker CPU s {[round(c, 1) for c in cpu]} "
              f"(shares {[round(c / sum(cpu), 2) for c in cpu]})")
        assert sorted(c for m in mine for c in m) == sorted(want), (shuffle, mine)  # once each
        for m in mine:
            assert 3 * len(m) >= len(want), (shuffle, [len(m) for m in mine])
        # The byte ranges' lines were counted once, by the count job.
        counted = [c for log in logs for c in re.findall(r"counted chunk (\S+): ", log)]
        assert sorted(counted) == sorted([*want] * (1 + (shuffle == "files"))), counted
        shards = re.findall(r"wrote (part-\d+-of-00004\.parquet)", "".join(logs))
        assert len(shards) == 4 * (1 + (shuffle == "files")), shards  # each written once
