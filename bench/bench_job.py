"""Throughput of the job next to a one-process script and the Hugging Face datasets recipe.

Builds (once, cached in ``bench/work/``) corpora of real text that packages ship, or of
yours (``--source``), and a 32 000-piece SentencePiece model trained on the 100 MB one (see
``corpus.py``), then runs, alternating tools within each round and repeating the rounds:

* ``job``: ``python -m pipeline`` with its defaults (the FnApiRunner in one process);
* ``reference``: ``bench/reference.py``, the same work as a plain one-process script: the
  practical limit, and what every ratio divides by;
* ``datasets``: ``bench/hf_recipe.py`` (when the ``bench`` extra is installed);
* ``job mp×N``: the job with ``--direct_running_mode=multi_processing
  --direct_num_workers=N`` for each ``--workers`` N (on the largest corpus only).

All with window 512, stride 256. For every run it measures the wall time of the whole
command (interpreter start-up and imports included), the peak RSS summed over its process
tree (sampled every 50 ms: a sample costs about 1 ms of CPU, which a tool that keeps every
core busy would otherwise pay), the CPU time of the tree, how busy the rest of the machine
was meanwhile, the cores the hypervisor held back on a virtual machine (steal time: neither
the tool nor other processes had them), and the cores left idle (the table's ``if never
idle`` is the ratio to the reference that the tool's CPU time would give with no core idle:
what better overlap could reach at most). Each tool's output is read back to count
documents, windows and tokens, and (first round) to hash every window in one order and one
type: the tools must agree. A warm-up round (``--warmup``, 1 by default) runs first and is
left out of the figures: a machine's first run of a tool also pays for what is not yet
cached (on a virtual machine, memory the host has to hand back), for one tool more than
another. Tokens are the documents' own (Σ M = Σ |z|), the same number for every tool
whatever the window overlap; MB are MB (10^6 bytes) of UTF-8 text.

It prints a markdown table (medians over the repeats, and each tool's ratio to the
reference paired within rounds), a fit of wall time against corpus size per tool (fixed
seconds + marginal MB/s, to check that time grows linearly), and writes every measurement
to ``bench/work/results-<time>.json``::

    pip install -e '.[bench]'
    python bench/bench_job.py                       # 25, 50, 100 MB; 3 rounds; workers 1, 2
    python bench/bench_job.py --sizes 100 --repeats 5 --no-datasets
    python bench/bench_job.py --source my_corpus/   # your JSONL instead of the packages

    # The figures in the README: the job and the reference in a virtualenv holding only
    # this project (as `pip install token-windows` gives it), datasets in this one.
    python -m venv bench/work/venv && bench/work/venv/bin/pip install -e '.[job]'
    python bench/bench_job.py --python bench/work/venv/bin/python
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import psutil
import pyarrow.parquet as pq

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from corpus import (  # noqa: E402
    MODEL_CORPUS_MB,
    WORK,
    build_corpus,
    corpus_stats,
    ensure_model,
    is_built,
    load_documents,
)

WINDOW, STRIDE = 512, 256
SAMPLE_SECONDS = 0.05


@dataclass
class Run:
    tool: str
    size_mb: float
    round: int
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    processes: int
    others_cores: float
    idle_cores: float = 0.0  # cores neither the tool's tree nor other processes used
    stolen_cores: float = 0.0  # cores the hypervisor held back (the kernel's steal time)
    documents: int = 0
    windows: int = 0
    doc_tokens: int = 0
    text_mb: float = 0.0
    output_mb: float = 0.0
    cache_mb: float = 0.0
    warmup: bool = False  # a warm-up round's run: checked, recorded, left out of the figures
    extra: dict = field(default_factory=dict)


def _machine_seconds() -> tuple[float, float]:
    """(busy, stolen) CPU seconds of every core so far. Busy leaves out idle, I/O wait and
    steal: on a virtual machine the host's other guests take time from its cores (steal),
    which no process here used; guest time is already inside user time."""
    t = psutil.cpu_times()
    steal = getattr(t, "steal", 0.0)
    guest = getattr(t, "guest", 0.0) + getattr(t, "guest_nice", 0.0)
    return sum(t) - t.idle - getattr(t, "iowait", 0.0) - steal - guest, steal


class Measured(NamedTuple):
    """One command's run (`measure`)."""

    wall_s: float
    cpu_s: float  # of its process tree
    peak_rss_mb: float  # summed over its process tree
    processes: int  # the most at once
    others_cores: float  # what other processes used meanwhile
    stolen_cores: float  # what the hypervisor held back meanwhile (steal time)
    stdout: str


def measure(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path = ROOT,
            watch: Path | None = None) -> Measured:
    """Run ``cmd`` in ``cwd`` and measure it (`Measured`). With ``watch``, the largest size the
    directory reached (sampled every second) is left in ``measure.watched_mb``."""
    busy0, stolen0 = _machine_seconds()
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peak, most = [0], [1]
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            rss = 0
            for p in procs:
                with contextlib.suppress(psutil.NoSuchProcess):
                    rss += p.memory_info().rss
            peak[0] = max(peak[0], rss)
            most[0] = max(most[0], len(procs))
            done.wait(SAMPLE_SECONDS)

    watched = [0.0]

    def watch_dir() -> None:
        while not done.wait(1.0):
            with contextlib.suppress(FileNotFoundError):
                watched[0] = max(watched[0], _dir_mb(watch))  # type: ignore[arg-type]

    threads = [threading.Thread(target=sample, daemon=True)]
    if watch is not None:
        threads.append(threading.Thread(target=watch_dir, daemon=True))
    for t in threads:
        t.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    done.set()
    for t in threads:
        t.join()
    measure.watched_mb = watched[0]  # type: ignore[attr-defined]
    # The child's rusage covers every descendant it waited for (workers, pool processes).
    tree_cpu = _children_cpu_delta.pop()
    busy1, stolen1 = _machine_seconds()
    others = max(0.0, (busy1 - busy0 - tree_cpu) / wall)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-3000:]}")
    return Measured(wall, tree_cpu, peak[0] / 1e6, most[0], others, (stolen1 - stolen0) / wall,
                    out)


class _ChildrenCpu:
    """CPU seconds of reaped children (and theirs) since the last call, from getrusage."""

    def __init__(self) -> None:
        self._last = self._now()

    @staticmethod
    def _now() -> float:
        import resource

        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    def pop(self) -> float:
        now = self._now()
        delta, self._last = now - self._last, now
        return delta


_children_cpu_delta = _ChildrenCpu()


def read_counts(output: Path) -> dict[str, int]:
    """Documents, windows and Σ M read back from any tool's Parquet output."""
    docs = windows = tokens = 0
    for f in sorted(output.glob("part-*.parquet")):
        t = pq.read_table(f, columns=["window_index", "doc_tokens"])
        first = t.column("window_index").to_numpy() == 0
        docs += int(first.sum())
        windows += t.num_rows
        tokens += int(t.column("doc_tokens").to_numpy()[first].sum())
    return {"documents": docs, "windows": windows, "doc_tokens": tokens}


def rows_digest(output: Path) -> str:
    """SHA-256 of every window (doc_id, start, length, loss_start, doc_tokens, tokens), in
    one order and one type whatever the tool: equal digests mean exactly the same windows."""
    import hashlib

    import pyarrow as pa

    columns = ["doc_id", "start", "length", "loss_start", "doc_tokens", "tokens"]
    table = pa.concat_tables(
        [pq.read_table(f, columns=columns) for f in sorted(output.glob("part-*.parquet"))]
    )
    table = table.cast(pa.schema([
        ("doc_id", pa.string()), ("start", pa.int64()), ("length", pa.int64()),
        ("loss_start", pa.int64()), ("doc_tokens", pa.int64()), ("tokens", pa.list_(pa.int64())),
    ])).sort_by([("doc_id", "ascending"), ("start", "ascending")]).combine_chunks()
    digest = hashlib.sha256()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    digest.update(sink.getvalue())
    return digest.hexdigest()


def _dir_mb(path: Path) -> float:
    total = 0
    for p in path.rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # a temp file removed meanwhile
            if p.is_file():
                total += p.stat().st_size
    return total / 1e6


def commands(tool: str, corpus: Path, model: Path, out: Path, cache: Path,
             python: str) -> list[str]:
    """The command line of a tool; the job and the reference run under ``python``."""
    pattern = str(corpus / "*.jsonl")
    common = ["--input", pattern, "--tokenizer", str(model), "--output", str(out),
              "--window", str(WINDOW), "--stride", str(STRIDE)]
    if tool == "reference":
        return [python, str(BENCH / "reference.py"), *common]
    if tool == "datasets":
        return [sys.executable, str(BENCH / "hf_recipe.py"), *common, "--cache-dir", str(cache)]
    job = [python, "-m", "pipeline", *common, "--id-field", "id", "--overwrite"]
    if tool.startswith("job mp×"):
        n = tool.removeprefix("job mp×")
        job += ["--direct_running_mode=multi_processing", f"--direct_num_workers={n}"]
    return job


def wait_idle(limit_s: float, threshold: float = 10.0) -> float:
    """Wait up to ``limit_s`` for the machine's CPU use to fall below ``threshold`` %."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if psutil.cpu_percent(interval=1.0) < threshold:
            break
    return time.monotonic() - started


# With --before DIR: the tool "job before" is the job with the code in DIR (a checkout of an
# earlier commit), run beside "job" in the same rounds.
BEFORE: list[Path] = []


def check_code(python: str, code: Path, env: dict[str, str]) -> None:
    """Fail unless a job started in ``code`` with ``env`` imports its pipeline from there."""
    found = subprocess.run([python, "-c", "import pipeline; print(pipeline.__file__)"],
                           cwd=code, env=env, capture_output=True, text=True, check=True)
    where = Path(found.stdout.strip()).resolve()
    if not where.is_relative_to(code.resolve()):
        raise SystemExit(f"job before would import {where}, not the code in {code}")


def run_one(tool: str, size: float, rnd: int, corpus: Path, model: Path, idle_s: float,
            verify: bool, python: str, warmup: bool = False) -> Run:
    scratch = WORK / "runs" / tool.replace(" ", "_").replace("×", "x")
    out, cache = scratch / "out", scratch / "hf-cache"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    if idle_s:
        wait_idle(idle_s)
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               HF_DATASETS_CACHE=str(cache), TOKENIZERS_PARALLELISM="false")
    # Bytecode is cached, as Python does by default and an installed package has it: with
    # PYTHONDONTWRITEBYTECODE set (some containers set it) every job would compile the
    # project's modules again, which the one-file reference never does.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # `python -m` puts its working directory first on sys.path, before PYTHONPATH: each tree's
    # job runs from that tree, or "job before" would import this one.
    code = BEFORE[0] if tool == "job before" else ROOT
    env["PYTHONPATH"] = str(code)
    if tool == "job before" and verify:  # the first round
        check_code(python, code, env)
    m = measure(commands(tool.removesuffix(" before"), corpus, model, out, cache, python),
                env=env, cwd=code)
    wall, cpu, rss = m.wall_s, m.cpu_s, m.peak_rss_mb
    stats = corpus_stats(corpus)
    idle = max(0.0, (os.cpu_count() or 1) - cpu / wall - m.others_cores - m.stolen_cores)
    run = Run(tool=tool, size_mb=size, round=rnd, wall_s=wall, cpu_s=cpu, peak_rss_mb=rss,
              processes=m.processes, others_cores=m.others_cores, idle_cores=idle,
              stolen_cores=m.stolen_cores, warmup=warmup, text_mb=stats["text_bytes"] / 1e6,
              output_mb=sum(f.stat().st_size for f in out.glob("part-*.parquet")) / 1e6,
              cache_mb=_dir_mb(cache) if cache.exists() else 0.0, **read_counts(out))
    if verify:
        run.extra["rows_sha256"] = rows_digest(out)
    shutil.rmtree(scratch, ignore_errors=True)
    rate = run.doc_tokens / wall / 1e6
    label = "warm-up" if warmup else f"round {rnd}"
    print(f"  {tool:12s} {size:5g} MB {label}: {wall:6.2f} s, {rate:5.2f} M tokens/s, "
          f"peak RSS {rss:6.0f} MB, CPU {cpu:5.1f} s, idle {idle:.2f} cores, "
          f"others {m.others_cores:.2f} cores, stolen {m.stolen_cores:.2f} cores",
          file=sys.stderr, flush=True)
    return run


def _median(runs: list[Run], attr: str) -> float:
    return statistics.median(getattr(r, attr) for r in runs)


def table(runs: list[Run]) -> str:
    """The medians per tool and corpus. ``idle cores``: what the run left unused (a tool
    that keeps every core busy is bound by its CPU time); ``stolen cores``: what the
    hypervisor held back (steal time); ``if never idle``: the ratio to
    the reference that the tool's CPU time would give on these cores with none left idle,
    the most that spreading its work better could reach; ``paired ratio``: the reference's
    wall time over the tool's within each round (the two ran minutes apart at most), median
    and range, which a machine whose speed drifts from round to round moves less than the
    ratio of the medians."""
    cores = os.cpu_count() or 1
    by: dict[tuple[str, float], list[Run]] = {}
    for r in runs:
        by.setdefault((r.tool, r.size_mb), []).append(r)
    ref = {size: _median(rs, "wall_s") for (tool, size), rs in by.items() if tool == "reference"}
    ref_cpu = {size: _median(rs, "cpu_s") for (tool, size), rs in by.items()
               if tool == "reference"}
    ref_by_round = {(r.size_mb, r.round): r.wall_s for r in runs if r.tool == "reference"}
    lines = [
        "| tool | corpus | documents | tokens | wall s | M tokens/s | MB/s | peak RSS MB "
        "| ratio to reference | paired ratio (range) | CPU s | CPU ratio | idle cores "
        "| stolen cores | if never idle |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    order = {"reference": 0, "job before": 1, "job": 2, "datasets": 3}
    for (tool, size), rs in sorted(by.items(), key=lambda kv: (kv[0][1],
                                                              order.get(kv[0][0], 3), kv[0][0])):
        wall = _median(rs, "wall_s")
        tokens, mb = rs[0].doc_tokens, rs[0].text_mb
        ratio = f"{ref[size] / wall:.2f}" if size in ref else "–"
        paired = sorted(ref_by_round[(size, r.round)] / r.wall_s for r in rs
                        if (size, r.round) in ref_by_round)
        pairs = (f"{statistics.median(paired):.2f} ({paired[0]:.2f}–{paired[-1]:.2f})"
                 if paired else "–")
        cpu = _median(rs, "cpu_s")
        cpu_ratio = f"{ref_cpu[size] / cpu:.2f}" if size in ref_cpu else "–"
        ceiling = f"{ref[size] / (cpu / cores):.2f}" if size in ref else "–"
        cache = f" (+{_median(rs, 'cache_mb'):.0f} MB cache)" if rs[0].cache_mb else ""
        lines.append(
            f"| {tool} | {mb:.0f} MB | {rs[0].documents:,} | {tokens / 1e6:.1f} M | {wall:.2f} "
            f"| {tokens / wall / 1e6:.2f} | {mb / wall:.1f} | {_median(rs, 'peak_rss_mb'):.0f}"
            f"{cache} | {ratio} | {pairs} | {cpu:.1f} | {cpu_ratio} "
            f"| {_median(rs, 'idle_cores'):.2f} | {_median(rs, 'stolen_cores'):.2f} | {ceiling} |"
        )
    return "\n".join(lines)


def linearity(runs: list[Run]) -> str:
    """Least-squares wall = a + b·MB per tool, over the sizes it ran at."""
    lines = ["| tool | fixed s | marginal MB/s | marginal M tokens/s | R² |",
             "|---|---:|---:|---:|---:|"]
    tools = sorted({r.tool for r in runs})
    for tool in tools:
        pts: dict[float, list[Run]] = {}
        for r in runs:
            if r.tool == tool:
                pts.setdefault(r.size_mb, []).append(r)
        if len(pts) < 2:
            continue
        xs = [rs[0].text_mb for rs in pts.values()]
        ys = [_median(rs, "wall_s") for rs in pts.values()]
        ts = [rs[0].doc_tokens for rs in pts.values()]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        a = my - b * mx
        ss = sum((y - my) ** 2 for y in ys)
        r2 = 1 - sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True)) / ss if ss else 1
        tokens_per_mb = sum(ts) / sum(xs)
        lines.append(f"| {tool} | {a:.2f} | {1 / b:.1f} | {tokens_per_mb / b / 1e6:.2f} "
                     f"| {r2:.4f} |")
    return "\n".join(lines)


def check_same_work(runs: list[Run]) -> list[str]:
    problems = []
    for size in sorted({r.size_mb for r in runs}):
        seen = {(r.documents, r.windows, r.doc_tokens) for r in runs if r.size_mb == size}
        if len(seen) != 1:
            problems.append(f"{size:g} MB: tools disagree on (documents, windows, tokens): {seen}")
        digests = {r.tool: r.extra["rows_sha256"] for r in runs
                   if r.size_mb == size and "rows_sha256" in r.extra}
        if len(set(digests.values())) > 1:
            problems.append(f"{size:g} MB: the tools' windows differ: {digests}")
    return problems


def job_environment(python: str) -> dict[str, object]:
    """What the job's interpreter imports along with Beam, and what that costs.

    Beam imports every optional library it finds (pandas, the Google Cloud clients of the
    gcp extra), which can double the job's start-up; the table says which case it shows.
    """
    probe = (
        "import importlib.util as u, json, time; t = time.perf_counter(); "
        "import apache_beam; s = time.perf_counter() - t; "
        "print(json.dumps({'python': __import__('sys').executable, "
        "'import_apache_beam_s': round(s, 2), 'pandas': bool(u.find_spec('pandas')), "
        "'google_cloud': bool(u.find_spec('google')) and "
        "bool(u.find_spec('google.cloud'))}))"
    )
    runs = [json.loads(subprocess.run([python, "-c", probe], capture_output=True, text=True,
                                      check=True).stdout) for _ in range(3)]
    info = runs[-1]
    info["import_apache_beam_s"] = statistics.median(r["import_apache_beam_s"] for r in runs)
    return info


def machine() -> dict[str, object]:
    import apache_beam
    import sentencepiece

    info: dict[str, object] = {
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu": next((line.split(":", 1)[1].strip() for line in
                     Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")), platform.processor()),
        "apache-beam": apache_beam.__version__,
        "pyarrow": pq.__name__ and __import__("pyarrow").__version__,
        "sentencepiece": getattr(sentencepiece, "__version__", "?"),
    }
    try:
        import datasets

        info["datasets"] = datasets.__version__
    except ImportError:
        info["datasets"] = None
    return info


def memory_sweep(base_mb: float, multiples: list[int], source: Path | None, python: str,
                 idle_s: float, runner_up_to: int) -> list[dict[str, object]]:
    """Peak RSS of the job at each multiple of a corpus, for the 32k model and for bytes, with
    the default (file) shuffle and, up to ``runner_up_to``×, the runner's in-memory shuffle
    beside it; plus the temporary space the file shuffle used."""
    sizes = [base_mb * k for k in multiples]
    wanted = [*sizes, MODEL_CORPUS_MB]
    sources = None if all(is_built(s, source) for s in wanted) else load_documents(source)
    corpora = {size: build_corpus(size, source, sources) for size in sizes}
    model = ensure_model(build_corpus(MODEL_CORPUS_MB, source, sources))
    rows: list[dict[str, object]] = []
    for k, size in zip(multiples, sizes, strict=True):
        corpus = corpora[size]
        for tokenizer in (str(model), "bytes"):
            for shuffle in ("files", "runner"):
                if shuffle == "runner" and k > runner_up_to:
                    continue
                scratch = WORK / "runs" / "memory"
                shutil.rmtree(scratch, ignore_errors=True)
                scratch.mkdir(parents=True)
                out = scratch / "out"
                cmd = [python, "-m", "pipeline", "--input", str(corpus / "*.jsonl"),
                       "--tokenizer", tokenizer, "--output", str(out), "--window", str(WINDOW),
                       "--stride", str(STRIDE), "--id-field", "id", "--shuffle", shuffle]
                if idle_s:
                    wait_idle(idle_s)
                m = measure(cmd, watch=out / ".tmp")
                wall, cpu, rss, others = m.wall_s, m.cpu_s, m.peak_rss_mb, m.others_cores
                row = {"multiple": k, "text_mb": corpus_stats(corpus)["text_bytes"] / 1e6,
                       "tokenizer": "32k" if tokenizer != "bytes" else "bytes",
                       "shuffle": shuffle, "wall_s": wall, "peak_rss_mb": rss,
                       "temp_mb": measure.watched_mb,  # type: ignore[attr-defined]
                       "output_mb": sum(f.stat().st_size for f in out.glob("part-*.parquet"))
                       / 1e6, "others_cores": others, "cpu_s": cpu}
                rows.append(row)
                print(f"  {k}x {row['text_mb']:7.1f} MB {row['tokenizer']:5s} {shuffle:6s}: "
                      f"{wall:6.1f} s, peak RSS {rss:6.0f} MB, temp {row['temp_mb']:7.0f} MB",
                      file=sys.stderr, flush=True)
                shutil.rmtree(scratch, ignore_errors=True)
    return rows


def memory_table(rows: list[dict[str, object]]) -> str:
    lines = ["| corpus | tokenizer | shuffle | wall s | peak RSS MB | vs 1× | temp MB "
             "| output MB |", "|---:|---|---|---:|---:|---:|---:|---:|"]
    first = {(r["tokenizer"], r["shuffle"]): r["peak_rss_mb"] for r in rows
             if r["multiple"] == 1}
    for r in rows:
        ratio = r["peak_rss_mb"] / first[(r["tokenizer"], r["shuffle"])]  # type: ignore[operator]
        lines.append(f"| {r['multiple']}× ({r['text_mb']:.0f} MB) | {r['tokenizer']} | "
                     f"{r['shuffle']} | {r['wall_s']:.1f} | {r['peak_rss_mb']:.0f} | "
                     f"{ratio:.2f} | {r['temp_mb']:.0f} | {r['output_mb']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="25,50,100", help="corpus sizes in MB of text")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per size")
    parser.add_argument("--warmup", type=int, default=1,
                        help="rounds run first and left out of the figures (default 1): a "
                        "machine's first runs of a tool also pay for what it has not yet "
                        "cached (bytecode, libraries, on a virtual machine its memory)")
    parser.add_argument("--workers", default="1,2",
                        help="multi_processing worker counts to run on the largest corpus "
                        "('' for none)")
    parser.add_argument("--source", type=Path, default=None,
                        help="a JSONL file or directory of your own instead of the packages")
    parser.add_argument("--no-datasets", action="store_true", help="skip the datasets recipe")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter that runs the job and the reference (default: "
                        "this one), e.g. a virtualenv with only this project installed")
    parser.add_argument("--wait-idle", type=float, default=30.0,
                        help="before each run, wait up to this many seconds for the machine "
                        "to be idle (< 10 %% CPU); 0 to not wait")
    parser.add_argument("--before", type=Path, default=None, metavar="DIR",
                        help="also run the job with the code in DIR (e.g. `git archive` of an "
                        "earlier commit) as 'job before', alternating with the others")
    parser.add_argument("--memory", default=None, metavar="MB",
                        help="instead: the memory sweep, peak RSS of the job at --multiples "
                        "of a corpus of MB megabytes, for the 32k model and for bytes")
    parser.add_argument("--multiples", default="1,2,4,8", help="with --memory (default 1,2,4,8)")
    parser.add_argument("--runner-shuffle-up-to", type=int, default=2,
                        help="with --memory, also run --shuffle runner up to this multiple")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        parser.error("--repeats must be at least 1 and --warmup at least 0")
    if args.memory is not None:
        rows = memory_sweep(float(args.memory), [int(k) for k in args.multiples.split(",")],
                            args.source, args.python, args.wait_idle, args.runner_shuffle_up_to)
        path = WORK / f"memory-{time.strftime('%Y%m%d-%H%M%S')}.json"
        path.write_text(json.dumps({"machine": machine(), "runs": rows}, indent=2) + "\n")
        print(memory_table(rows))
        print(f"\nAll measurements: {path.relative_to(ROOT)}")
        return
    sizes = [float(s) for s in args.sizes.split(",") if s]
    workers = [int(w) for w in args.workers.split(",") if w]

    wanted = [*sizes, MODEL_CORPUS_MB]
    sources = (None if all(is_built(s, args.source) for s in wanted)
               else load_documents(args.source))
    corpora = {size: build_corpus(size, args.source, sources) for size in sizes}
    # One model for every size (trained on the 100 MB corpus), so sizes compare alike.
    model = ensure_model(build_corpus(MODEL_CORPUS_MB, args.source, sources))
    tools = ["reference", "job"]
    if args.before is not None:
        BEFORE.append(args.before.resolve())
        tools.append("job before")
    try:
        import datasets  # noqa: F401

        if not args.no_datasets:
            tools.append("datasets")
    except ImportError:
        print("datasets is not installed (pip install -e '.[bench]'): skipping its recipe",
              file=sys.stderr)
    plan = [(tool, size) for size in sizes for tool in tools]
    plan += [(f"job mp×{n}", max(sizes)) for n in workers]

    environment = job_environment(args.python)
    runs: list[Run] = []
    for i in range(args.warmup + args.repeats):
        # Alternate the order from round to round so that drift hits every tool alike. The
        # first round (a warm-up one, unless there are none) also checks the tools' windows.
        warmup, rnd = i < args.warmup, i - args.warmup
        for tool, size in plan if i % 2 == 0 else list(reversed(plan)):
            runs.append(run_one(tool, size, rnd, corpora[size], model, args.wait_idle,
                                verify=i == 0, python=args.python, warmup=warmup))
    measured = [r for r in runs if not r.warmup]

    report = {
        "when": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(),
        "job_environment": environment,
        "settings": {"window": WINDOW, "stride": STRIDE, "repeats": args.repeats,
                     "warmup": args.warmup,
                     "sizes_mb": sizes, "workers": workers, "source": str(args.source or
                                                                          "packages")},
        "corpora": {str(s): corpus_stats(c) for s, c in corpora.items()},
        "model": model.name,
        "runs": [asdict(r) for r in runs],
    }
    path = WORK / f"results-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")

    print(f"\nMachine: {report['machine']}")
    print(f"Job and reference environment: {report['job_environment']}\n")
    print(table(measured))
    print("\nWall time against corpus size (least squares, medians):\n")
    print(linearity([r for r in measured if r.tool in tools]))
    busy = max(r.others_cores for r in measured)
    if busy > 0.25:
        print(f"\nWARNING: other processes used up to {busy:.2f} cores during some runs; "
              "the figures are noisy (see others_cores in the JSON).")
    stolen = max(r.stolen_cores for r in measured)
    if stolen > 0.05:
        print(f"\nNOTE: the hypervisor held back up to {stolen:.2f} cores during some runs "
              "(steal time): a tool that keeps every core busy loses more of its wall time to "
              "that than one that leaves a core idle (see stolen_cores in the JSON).")
    problems = check_same_work(runs)
    for problem in problems:
        print(f"\nWARNING: {problem}")
    if not problems:
        print("\nEvery tool wrote exactly the same windows (documents, tokens and a digest of "
              "all rows agree).")
    print(f"\nAll measurements: {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
