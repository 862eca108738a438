"""Many tiny input files: the file shuffle (the local default) against ``--shuffle runner``.

Writes (once, cached in ``bench/work/small-<N>/``) ``N`` tiny JSONL files of three short
documents each (300 characters cut from the bundled samples), one in about seven with a
broken line (20,000 files: 2,880 broken lines), then runs ``python -m pipeline`` on them with
the sample SentencePiece model, window 512, alternating within each round:

* ``files``: the job with its defaults (the file shuffle);
* ``runner``: the same job with ``--shuffle runner``.

With ``--tree NAME=PATH`` (repeatable) each tool runs once per code tree (``PYTHONPATH=PATH``),
so that a tree before a change and one after it are measured in the same rounds. It prints
every run's wall and CPU time, and per tree the median over rounds of the ratio files /
runner (the machine may be shared: a ratio of two runs next to each other is steadier than
either time), and checks that every run wrote the same bytes::

    python bench/bench_small_files.py                        # 20,000 files, 3 rounds
    python bench/bench_small_files.py --files 4000 --rounds 5
    python bench/bench_small_files.py --tree before=/tmp/old --tree after=.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
WORK = BENCH / "work"
BROKEN_SHARE = 0.144  # 2,880 of 20,000 files have a broken line


def build_files(n: int) -> Path:
    """``n`` tiny files under ``bench/work/small-<n>/``, written once."""
    directory = WORK / f"small-{n}"
    done = directory / ".complete"
    if done.exists():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    texts = [json.loads(line)["text"]
             for path in sorted((ROOT / "samples" / "corpus").glob("*.jsonl"))
             for line in path.read_text(encoding="utf-8").splitlines()]
    broken = round(n * BROKEN_SHARE)
    broken_files = {k * n // broken for k in range(broken)} if broken else set()
    for i in range(n):
        lines = []
        for j in range(3):
            text = texts[(3 * i + j) % len(texts)]
            at = (7919 * i + 104729 * j) % max(1, len(text) - 300)
            lines.append(json.dumps({"id": f"d{i}-{j}", "text": text[at : at + 300]},
                                    ensure_ascii=False))
        if i in broken_files:
            lines.insert(1, f'{{"id": "broken-{i}", "text": "unterminated')
        (directory / f"f{i:05d}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    done.write_text(f"{n} files, {len(broken_files)} broken lines\n")
    return directory


def tree_digest(output: Path) -> str:
    """A hash of every file below ``output`` (relative path and bytes)."""
    h = hashlib.sha256()
    for p in sorted(output.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(output)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def run_job(tree: Path, inputs: Path, output: Path, shuffle: str) -> dict[str, float | str]:
    """One job; its wall and CPU seconds (the process and its children) and output digest."""
    shutil.rmtree(output, ignore_errors=True)
    cmd = [sys.executable, "-m", "pipeline", "--input", str(inputs / "*.jsonl"),
           "--tokenizer", str(ROOT / "samples" / "spm.model"), "--id-field", "id",
           "--window", "512", "--output", str(output)]
    if shuffle == "runner":
        cmd += ["--shuffle", "runner"]
    # Bytecode cached, as Python does by default (bench_job.py says why).
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = psutil.Process().cpu_times()
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree)
    wall = time.perf_counter() - start
    after = psutil.Process().cpu_times()
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    cpu = (after.children_user - before.children_user
           + after.children_system - before.children_system)
    return {"wall": wall, "cpu": cpu, "digest": tree_digest(output)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", action="append", default=[],
                        help="NAME=PATH: a code tree to run (default: this one, as 'this')")
    args = parser.parse_args(argv)
    trees = dict(t.split("=", 1) for t in args.tree) or {"this": str(ROOT)}
    trees = {name: Path(path).resolve() for name, path in trees.items()}
    inputs = build_files(args.files)
    print(f"{args.files:,} files in {inputs} ({(inputs / '.complete').read_text().strip()}); "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    runs: list[dict[str, object]] = []
    for r in range(args.rounds):
        for name, tree in trees.items():
            for shuffle in ("files", "runner"):
                got = run_job(tree, inputs, WORK / f"small-out-{name}-{shuffle}", shuffle)
                runs.append({"round": r, "tree": name, "shuffle": shuffle, **got,
                             "load": os.getloadavg()[0]})
                print(f"round {r} {name:>8} {shuffle:>6}: {got['wall']:6.1f} s wall, "
                      f"{got['cpu']:6.1f} s CPU, load {os.getloadavg()[0]:.1f}", flush=True)
    digests = {run["digest"] for run in runs}
    print(f"bytes: {'identical in every run' if len(digests) == 1 else 'DIFFER'}")
    print("\n| tree | files wall s | runner wall s | files / runner (median of rounds) |"
          "\n|---|---:|---:|---:|")
    for name in trees:
        def walls(shuffle: str, name: str = name) -> list[float]:
            return [float(run["wall"]) for run in runs  # type: ignore[arg-type]
                    if run["tree"] == name and run["shuffle"] == shuffle]
        files, runner = walls("files"), walls("runner")
        ratios = [f / r for f, r in zip(files, runner, strict=True)]
        print(f"| {name} | {statistics.median(files):.1f} | {statistics.median(runner):.1f} | "
              f"{statistics.median(ratios):.2f} ({', '.join(f'{x:.2f}' for x in ratios)}) |")
    WORK.mkdir(exist_ok=True)
    out = WORK / f"small-files-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(runs, indent=1))
    print(f"runs written to {out}")
    if len(digests) != 1:
        raise SystemExit("the runs wrote different bytes")


if __name__ == "__main__":
    main()
