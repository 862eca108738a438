"""The fixed cost of a small job: the README's sample job, code trees and environments side by side.

Runs README command 1 (``python -m pipeline --input 'samples/corpus/*.jsonl' --tokenizer
samples/spm.model --id-field id --window 512 --output … --overwrite``: 2.1 MB, one shard)
once per code tree (``--tree NAME=PATH``, run with ``PYTHONPATH=PATH``) and per Python
environment (``--python NAME=PATH``, e.g. a virtualenv holding only ``pip install -e
'.[job]'``, as the README installs it), alternating within each round, after one warm-up
run of each. It prints every run's wall and CPU seconds (the job's process), per tree and
environment the medians and, against the first tree, the median of the per-round ratios, and
checks that every run of one environment wrote the same bytes. Bytecode is cached as an
installed package's is (``PYTHONDONTWRITEBYTECODE`` is dropped for the job).

``--phases`` adds, per tree and environment, one run that says where the time goes: the
interpreter's start, importing the job (Beam, then its own modules), the checks before any
work, the launcher's chunk plan, building the graph, and ``Pipeline.run`` (translation and
stages; of it, the time in the stages' bundles), and counts the graph's ParDo steps and the
stages the runner ran (each a fixed cost on the FnApiRunner), and the tokenizer's loads
(how many in the job's process, and their seconds: the launcher's runs on a helper thread).
``--phase-rounds N`` makes that N alternating runs of each, after one unrecorded, and prints
each phase's median per tree and, against the first tree, the median paired difference (a
phase of tens of milliseconds stands out there, where whole runs vary by more)::

    python bench/bench_startup.py --tree before=/tmp/before --tree after=.
    python bench/bench_startup.py --python lean=/tmp/leanvenv/bin/python --python env=python \\
        --tree before=/tmp/before --tree after=. --rounds 7 --phases

``--corpus PATTERN --model MODEL`` runs another job the same way (window 512, stride 256), e.g.
the 100 MB bench corpus, whose fixed cost is what lies outside its two longest stages::

    python bench/bench_startup.py --python lean=/tmp/leanvenv/bin/python \\
        --tree before=/tmp/before --tree after=. --rounds 3 --phases \\
        --corpus 'bench/work/corpus-v1-pkg-100mb/*.jsonl' \\
        --model bench/work/spm-corpus-v1-pkg-100mb-32000.model
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
WORK = BENCH / "work"
SAMPLE = ["--input", str(ROOT / "samples" / "corpus" / "*.jsonl"), "--tokenizer",
          str(ROOT / "samples" / "spm.model"), "--id-field", "id", "--window", "512"]

# Run in the job's environment: the launcher's phases, each wrapped in a timer.
PHASES = r"""
import json, sys, time
t0 = time.perf_counter()
try:
    from pipeline.__main__ import settle_process  # the command's own process, as it runs
    settle_process()
except ImportError:  # a tree from before the command settled its process
    pass
import pipeline
try:
    import pipeline.job as r  # Beam first, then the job's modules
except ModuleNotFoundError:  # a tree from before `pipeline.run` became `pipeline.job`
    r = sys.modules["pipeline.run"]
t1 = time.perf_counter()
import apache_beam as beam
import pipeline.launch.chunk_plan as la
spent = {}
def timed(owner, name, label):
    inner = getattr(owner, name)
    def wrapper(*a, **k):
        s = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            spent[label] = spent.get(label, 0) + time.perf_counter() - s
    setattr(owner, name, wrapper)
timed(r, "_prepare", "checks before any work")
if hasattr(la, "plan_local"):
    timed(la, "plan_local", "the launcher's chunk plan")
timed(r, "build_pipeline", "building the graph")
timed(beam.Pipeline, "run", "Pipeline.run (translation, stages)")
from apache_beam.runners.portability.fn_api_runner import fn_runner
timed(fn_runner.FnApiRunner, "_execute_bundle", "  of which the stages' bundles")
timed(r, "print_summary", "the summary")
counts = {}
import pipeline.steps.encode as enc
inner_load = enc.tokenizer_from_bytes
def load(*a, **k):  # the launcher's (on a helper thread) and each step's that loads its own
    counts["tokenizers loaded (count)"] = counts.get("tokenizers loaded (count)", 0) + 1
    s = time.perf_counter()
    try:
        return inner_load(*a, **k)
    finally:
        spent["loading the tokenizer (each load)"] = (
            spent.get("loading the tokenizer (each load)", 0) + time.perf_counter() - s)
enc.tokenizer_from_bytes = load
inner_run = fn_runner.FnApiRunner.run_via_runner_api
def counted(self, proto, options):
    transforms = proto.components.transforms.values()
    counts["ParDo steps (count)"] = sum(t.spec.urn == "beam:transform:pardo:v1"
                                        for t in transforms)
    return inner_run(self, proto, options)
fn_runner.FnApiRunner.run_via_runner_api = counted
inner_bundle = fn_runner.FnApiRunner._execute_bundle
each = []
def bundle(*a, **k):
    counts["stages run (count)"] = counts.get("stages run (count)", 0) + 1
    s = time.perf_counter()
    try:
        return inner_bundle(*a, **k)
    finally:
        each.append(time.perf_counter() - s)
fn_runner.FnApiRunner._execute_bundle = bundle
sys.modules.setdefault("IPython", None)  # as the command does (pipeline.job.cli)
r.main(sys.argv[1:])
total = time.perf_counter() - t0
order = ["checks before any work", "the launcher's chunk plan", "building the graph",
         "Pipeline.run (translation, stages)", "  of which the stages' bundles", "the summary",
         "loading the tokenizer (each load)"]
spent["  of which the two longest stages"] = sum(sorted(each)[-2:])
order.insert(5, "  of which the two longest stages")
print(json.dumps({"importing the job (Beam and its modules)": t1 - t0,
                  **{k: spent[k] for k in order if k in spent}, "whole job after start-up": total,
                  **counts}), file=sys.stderr)
"""


def digest(output: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(output.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(output)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(tree)}


def run_once(python: str, tree: Path, output: Path, job: list[str]) -> dict[str, float | str]:
    cmd = [python, "-m", "pipeline", *job, "--output", str(output), "--overwrite"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, env=_env(tree), capture_output=True, text=True, cwd=tree)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"wall": wall, "cpu": cpu, "digest": digest(output)}


def phases(python: str, tree: Path, output: Path, job: list[str]) -> dict[str, float]:
    start = time.perf_counter()
    subprocess.run([python, "-c", "pass"], env=_env(tree), check=True)
    bare = time.perf_counter() - start
    done = subprocess.run([python, "-c", PHASES, *job, "--output", str(output),
                           "--overwrite"], env=_env(tree), capture_output=True, text=True,
                          cwd=tree)
    if done.returncode:
        raise SystemExit(f"phases failed:\n{done.stderr[-2000:]}")
    return {"interpreter start (python -c pass)": bare,
            **json.loads(done.stderr.strip().splitlines()[-1])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[],
                        help="NAME=PATH: a code tree (default: this one, as 'this')")
    parser.add_argument("--python", action="append", default=[],
                        help="NAME=PATH: a Python environment (default: this one, as 'env')")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--phases", action="store_true", help="break one run of each down")
    parser.add_argument("--phase-rounds", type=int, default=1,
                        help="with --phases: that many alternating runs of each (medians)")
    parser.add_argument("--corpus", help="PATTERN: another job's input instead of the sample's "
                        "(with --model; window 512, stride 256, ids from 'id')")
    parser.add_argument("--model", help="that job's tokenizer")
    args = parser.parse_args(argv)
    # Absolute: each tree's job runs in that tree.
    model = os.path.abspath(args.model) if args.model else "bytes"
    job = SAMPLE if args.corpus is None else [
        "--input", os.path.abspath(args.corpus), "--tokenizer", model, "--id-field", "id",
        "--window", "512", "--stride", "256"]
    trees = {n: Path(p).resolve() for n, p in (t.split("=", 1) for t in args.tree)} or {
        "this": ROOT}
    pythons = dict(p.split("=", 1) for p in args.python) or {"env": sys.executable}
    combos = [(py, tree) for py in pythons for tree in trees]
    out = {c: WORK / "startup-out" / f"{c[0]}-{c[1]}" for c in combos}
    print(f"load average {os.getloadavg()[0]:.1f}; warming up", flush=True)
    for (py, tree), output in out.items():
        run_once(pythons[py], trees[tree], output, job)  # bytecode written, caches warm
    runs: list[dict[str, object]] = []
    for r in range(args.rounds):
        for (py, tree), output in out.items():
            got = run_once(pythons[py], trees[tree], output, job)
            runs.append({"round": r, "python": py, "tree": tree, **got})
            print(f"round {r} {py:>6} {tree:>8}: {got['wall']:5.2f} s wall, "
                  f"{got['cpu']:5.2f} s CPU, load {os.getloadavg()[0]:.1f}", flush=True)
    base = next(iter(trees))
    print(f"\n| environment | tree | wall s | CPU s | wall / {base} | CPU / {base} |"
          "\n|---|---|---:|---:|---:|---:|")
    for py, tree in combos:
        mine = [x for x in runs if x["python"] == py and x["tree"] == tree]
        ref = [x for x in runs if x["python"] == py and x["tree"] == base]
        ratio = {k: statistics.median(float(a[k]) / float(b[k])  # type: ignore[arg-type]
                                      for a, b in zip(mine, ref, strict=True))
                 for k in ("wall", "cpu")}
        print(f"| {py} | {tree} | {statistics.median(float(x['wall']) for x in mine):.2f} | "
              f"{statistics.median(float(x['cpu']) for x in mine):.2f} | "
              f"{ratio['wall']:.2f} | {ratio['cpu']:.2f} |")
    for py in pythons:
        same = len({x["digest"] for x in runs if x["python"] == py}) == 1
        print(f"{py}: bytes {'identical in every run' if same else 'DIFFER'}")
        if not same:
            raise SystemExit("the runs wrote different bytes")
    if args.phases:
        n = args.phase_rounds
        seen: dict[tuple[str, str], list[dict[str, float]]] = {c: [] for c in combos}
        for r in range(n + (n > 1)):  # with several, a first unrecorded round
            for py, tree in combos:
                got = phases(pythons[py], trees[tree], out[(py, tree)], job)
                if n == 1 or r:
                    seen[(py, tree)].append(got)
        for py, tree in combos:
            mine, ref = seen[(py, tree)], seen[(py, base)]
            print(f"\nwhere {py} / {tree} spends its time (seconds, "
                  f"{'one run' if n == 1 else f'median of {n} runs'}"
                  f"{'' if n == 1 or tree == base else f'; paired difference from {base}'}):")
            for name, first in mine[0].items():
                # Counts stay whole: the lower median is one of them.
                median = statistics.median_low if isinstance(first, int) else statistics.median
                form = "d" if isinstance(first, int) else ".3f"
                value = median(x[name] for x in mine)
                diff = "" if n == 1 or tree == base else " " + format(median(
                    x[name] - y[name] for x, y in zip(mine, ref, strict=True)), "+7" + form)
                print(f"  {name:<40} {value:6{form}}{diff}")
    WORK.mkdir(exist_ok=True)
    saved = WORK / f"startup-{time.strftime('%Y%m%d-%H%M%S')}.json"
    saved.write_text(json.dumps(runs, indent=1))
    print(f"runs written to {saved}")


if __name__ == "__main__":
    main()
