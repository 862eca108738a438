"""The job on a Dask cluster: how one input file spreads, and each worker's memory by corpus.

Starts a ``dask scheduler`` and ``--workers`` single-thread ``dask worker`` processes on
127.0.0.1, builds JSONL corpora of the bundled samples repeated to each ``--sizes`` MB (ids
suffixed), each corpus ONE file, and runs the job on the cluster from this process
(``--runner DaskRunner``, the launcher cutting the file into chunks of ``--chunk-mb``), once
per shuffle (``runner``: the blocks go through Dask's task shuffle; ``files``: spilled to
files, only their paths through Dask). The workers are restarted before each job, so each
job's peak is its own. Per job: wall s; each worker's CPU s and its share; each worker's
peak RSS (the worker process tree, sampled every 50 ms) and its growth over the restarted
worker's. ::

    python bench/bench_dask.py --sizes 10,20,40 --chunk-mb 4
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

import psutil

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLE_SECONDS = 0.05


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _rss(pid: int) -> int:
    total = 0
    for p in _tree(pid):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += p.memory_info().rss
    return total


def _cpu(pid: int) -> float:
    total = 0.0
    for p in _tree(pid):
        with contextlib.suppress(psutil.NoSuchProcess):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def _corpus(directory: pathlib.Path, mb: int) -> pathlib.Path:
    path = directory / f"one-{mb}mb.jsonl"
    records = [json.loads(line) for f in sorted((ROOT / "samples" / "corpus").glob("*.jsonl"))
               for line in f.read_text(encoding="utf-8").splitlines()]
    with path.open("w", encoding="utf-8") as f:
        i = 0
        while f.tell() < mb * 1_000_000:
            r = records[i % len(records)]
            f.write(json.dumps({"id": f"{r['id']}-{i}", "text": r["text"]},
                               ensure_ascii=False) + "\n")
            i += 1
    return path


def _cluster(tmp: pathlib.Path, workers: int) -> tuple[str, list[subprocess.Popen]]:
    # The workers import the code the launcher imports (PYTHONPATH, else this tree).
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH") or str(ROOT))
    info = tmp / "scheduler.json"
    local = ["--dashboard-address", "127.0.0.1:0"]
    procs = [subprocess.Popen(["dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
                               *local, "--scheduler-file", str(info)], cwd=tmp, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    while not (info.exists() and info.stat().st_size):
        time.sleep(0.2)
    time.sleep(0.2)
    address = json.loads(info.read_text())["address"]
    for i in range(workers):
        procs.append(subprocess.Popen(
            ["dask", "worker", address, "--host", "127.0.0.1", *local, "--nthreads", "1",
             "--name", f"worker-{i}", "--local-directory", str(tmp / f"worker-{i}")],
            cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return address, procs


def _job(argv: list[str], pids: list[int], tuning: object) -> dict:
    from pipeline.job import run

    base = [_rss(pid) for pid in pids]
    peak = list(base)
    before = [_cpu(pid) for pid in pids]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for i, pid in enumerate(pids):
                peak[i] = max(peak[i], _rss(pid))
            done.wait(SAMPLE_SECONDS)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    started = time.perf_counter()
    manifest = run(argv, tuning=tuning)
    wall = time.perf_counter() - started
    done.set()
    thread.join()
    cpu = [_cpu(pid) - b for pid, b in zip(pids, before, strict=True)]
    return {"wall": wall, "cpu": cpu, "peak": peak, "base": base,
            "documents": manifest["counts"]["documents"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,20,40", help="corpus sizes, MB, comma-separated")
    parser.add_argument("--chunk-mb", type=float, default=4, help="the launcher's chunk size")
    parser.add_argument("--workers", type=int, default=2, help="dask workers (1 thread each)")
    parser.add_argument("--tokenizer", default=str(ROOT / "samples" / "spm.model"))
    args = parser.parse_args()

    import distributed

    from pipeline.launch.context import Tuning

    tuning = Tuning(chunk_bytes=int(args.chunk_mb * (1 << 20)))
    with tempfile.TemporaryDirectory(prefix="bench-dask-") as name:
        tmp = pathlib.Path(name)
        address, procs = _cluster(tmp, args.workers)
        try:
            with distributed.Client(address, timeout=60) as client:
                client.wait_for_workers(args.workers, timeout=120)
                print(f"{args.workers} workers x 1 thread; chunks of {args.chunk_mb} MiB; "
                      f"tokenizer {pathlib.Path(args.tokenizer).name}")
                print("corpus MB | shuffle | chunks | wall s | worker CPU s (shares) | "
                      "worker peak RSS MB (growth)")
                for mb in [int(s) for s in args.sizes.split(",")]:
                    corpus = _corpus(tmp, mb)
                    chunks = -(-corpus.stat().st_size // tuning.chunk_bytes)
                    for shuffle in ("runner", "files"):
                        client.restart()
                        client.wait_for_workers(args.workers, timeout=120)
                        pids = [p.pid for p in procs[1:]]
                        out = tmp / f"out-{mb}-{shuffle}"
                        try:
                            r = _job(["--input", str(corpus), "--tokenizer", args.tokenizer,
                                      "--id-field", "id", "--window", "512", "--stride", "256",
                                      "--output", str(out), "--shuffle", shuffle,
                                      "--runner=DaskRunner", f"--dask_client_address={address}",
                                      f"--dask_npartitions={2 * args.workers}"], pids, tuning)
                        except ValueError as e:  # a tree that refuses --shuffle files on Dask
                            print(f"{mb} | {shuffle} | refused: {e}", flush=True)
                            continue
                        shares = ", ".join(f"{c:.1f} ({c / sum(r['cpu']):.2f})"
                                           for c in r["cpu"])
                        peaks = ", ".join(f"{p / 1e6:.0f} (+{(p - b) / 1e6:.0f})"
                                          for p, b in zip(r["peak"], r["base"], strict=True))
                        print(f"{mb} | {shuffle} | {chunks} | {r['wall']:.1f} | {shares} | "
                              f"{peaks}", flush=True)
        finally:
            for proc in reversed(procs):
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()


if __name__ == "__main__":
    sys.exit(main())
