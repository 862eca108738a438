"""The same job on each engine this machine can run, and one code tree against another.

Engines (each on the same corpus, window 512, stride 256, runner shuffle where the engine
has no file shuffle default): ``in_memory`` (the FnApiRunner in one process),
``multi_processing`` with two workers, ``portable`` (a job submitted over the Job API to an
embedded job server, executed by SDK workers that a separate worker pool starts, as on
Flink), and ``dask`` (a ``dask scheduler`` and two ``dask worker`` processes, started here on
127.0.0.1). Wall time is the whole command's; peak RSS is summed over the job's process tree
and, for ``portable`` and ``dask``, the pool's or the cluster's processes (sampled every
50 ms). Engines alternate within each round::

    python bench/bench_engines.py --corpus bench/work/corpus-v1-pkg-100mb \\
        --model bench/work/spm-corpus-v1-pkg-100mb-32000.model --repeats 2

``--compare DIR`` instead runs the job on in_memory from this tree and from the tree DIR
(e.g. a checkout of main), alternating, and prints the ratio: before/after figures from one
run of one machine. ``--job-args`` adds flags to every job (``--shuffle runner``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_SECONDS = 0.05


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(code: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(code)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.update(extra)
    return env


def measure(cmd: list[str], env: dict[str, str], also: list[int]) -> tuple[float, float]:
    """Run ``cmd``: (wall s, peak MB of its tree plus the trees of the ``also`` pids)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            rss = 0
            for pid in [proc.pid, *also]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    root = psutil.Process(pid)
                    for p in [root, *root.children(recursive=True)]:
                        with contextlib.suppress(psutil.NoSuchProcess):
                            rss += p.memory_info().rss
            peak[0] = max(peak[0], rss)
            done.wait(SAMPLE_SECONDS)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - started
    done.set()
    thread.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return wall, peak[0] / 1e6


class Cluster:
    """A dask scheduler and two workers on 127.0.0.1 (``--nthreads 1`` each), by PID."""

    def __init__(self, code: Path, tmp: Path) -> None:
        self.procs: list[subprocess.Popen] = []
        info = tmp / "scheduler.json"
        env = _env(code)
        self.procs.append(subprocess.Popen(
            ["dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
             "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(info)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 60
        while not info.exists() or not info.stat().st_size:
            if time.monotonic() > deadline:
                raise RuntimeError("the dask scheduler did not start in 60 s")
            time.sleep(0.2)
        time.sleep(0.5)
        self.address = json.loads(info.read_text())["address"]
        for i in range(2):
            self.procs.append(subprocess.Popen(
                ["dask", "worker", self.address, "--host", "127.0.0.1", "--nthreads", "1",
                 "--dashboard-address", "127.0.0.1:0", "--name", f"w{i}"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client

        with Client(self.address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def engine_args(engine: str, port: int, address: str) -> list[str]:
    return {
        "in_memory": ["--direct_running_mode=in_memory"],
        "multi_processing": ["--direct_running_mode=multi_processing",
                             "--direct_num_workers=2"],
        "portable": ["--runner=PortableRunner", "--job_endpoint=embed",
                     "--environment_type=EXTERNAL", f"--environment_config=localhost:{port}"],
        "dask": ["--runner=DaskRunner", f"--dask_client_address={address}",
                 "--dask_npartitions=8"],
    }[engine]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="a directory of *.jsonl")
    parser.add_argument("--model", type=Path, required=True, help="a SentencePiece .model")
    parser.add_argument("--repeats", type=int, default=2, help="rounds (default 2)")
    parser.add_argument("--engines", default="in_memory,multi_processing,portable,dask",
                        help="comma-separated (default: all four)")
    parser.add_argument("--compare", type=Path, default=None,
                        help="another code tree: in_memory from it and from this one")
    parser.add_argument("--job-args", default="",
                        help="more flags for every job, e.g. '--shuffle runner'")
    args = parser.parse_args(argv)
    corpus = args.corpus.resolve()
    common = ["--input", str(corpus / "*.jsonl"), "--tokenizer", str(args.model.resolve()),
              "--id-field", "id", "--window", "512", "--stride", "256", "--overwrite",
              *args.job_args.split()]
    results: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp_name:
        tmp = Path(tmp_name)
        if args.compare is not None:
            trees = {"this tree": ROOT, f"{args.compare}": args.compare.resolve()}
            for _ in range(args.repeats):
                for name, code in trees.items():
                    cmd = [sys.executable, "-m", "pipeline", *common, "--output",
                           str(tmp / "out")]
                    results.setdefault(name, []).append(measure(cmd, _env(code), []))
        else:
            engines = args.engines.split(",")
            port = _free_port()
            pool = subprocess.Popen(
                [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                 f"--service_port={port}"], cwd=ROOT, env=_env(ROOT),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            cluster = Cluster(ROOT, tmp) if "dask" in engines else None
            try:
                for _ in range(args.repeats):
                    for engine in engines:
                        also = {"portable": [pool.pid],
                                "dask": [p.pid for p in cluster.procs] if cluster else []}
                        cmd = [sys.executable, "-m", "pipeline", *common, "--output",
                               str(tmp / engine), *engine_args(
                                   engine, port, cluster.address if cluster else "")]
                        results.setdefault(engine, []).append(
                            measure(cmd, _env(ROOT), also.get(engine, [])))
            finally:
                if cluster is not None:
                    cluster.stop()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pool.pid, 15)
                pool.wait(timeout=20)
    size = sum(f.stat().st_size for f in corpus.glob("*.jsonl")) / 1e6
    base = statistics.median(w for w, _ in next(iter(results.values())))
    print(f"corpus {size:.0f} MB, {args.repeats} rounds, medians; ratio = wall / first row's")
    print("| engine | wall s | peak RSS MB | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for name, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        rss = statistics.median(r for _, r in runs)
        print(f"| {name} | {wall:.1f} | {rss:.0f} | {wall / base:.2f} |")


if __name__ == "__main__":
    main()
