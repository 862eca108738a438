"""What ``--split`` and ``--sample`` cost: the job on one corpus with and without them.

Runs, alternating within each round (and rotating which goes first), the job with window 512,
stride 256 and the corpus's SentencePiece model

* ``plain``: no split, no sample;
* ``split``: ``--split val=0.01,test=0.01`` (three datasets from one pass);
* ``sample``: ``--sample 0.1 --split val=0.05`` (a tenth of the documents, split);

and prints the median wall time (the whole command) of each and its ratio to ``plain`` in the
same round::

    python bench/bench_splits.py                        # bench/work/corpus-v1-pkg-100mb
    python bench/bench_splits.py --corpus DIR --model M.model --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / "work"
MODES = {
    "plain": [],
    "split": ["--split", "val=0.01,test=0.01"],
    "sample": ["--sample", "0.1", "--split", "val=0.05"],
}


def _run(python: str, corpus: Path, model: Path, out: Path, extra: list[str]) -> float:
    started = time.monotonic()
    subprocess.run([python, "-m", "pipeline", "--input", str(corpus / "*.jsonl"), "--tokenizer",
                    str(model), "--window", "512", "--stride", "256", "--output", str(out),
                    "--overwrite", *extra], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=WORK / "corpus-v1-pkg-100mb")
    parser.add_argument("--model", type=Path,
                        default=WORK / "spm-corpus-v1-pkg-100mb-32000.model")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    names = list(MODES)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    ratios: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            order = names[r % len(names):] + names[:r % len(names)]
            got = {n: _run(args.python, args.corpus, args.model, Path(tmp) / n, MODES[n])
                   for n in order}
            for n in names:
                seconds[n].append(got[n])
                ratios[n].append(got[n] / got["plain"])
            print(f"round {r + 1}: " + ", ".join(f"{n} {got[n]:.1f} s" for n in names),
                  file=sys.stderr)
    print("| job | median s | range s | × plain (median, same round) |")
    print("|---|---|---|---|")
    for n in names:
        print(f"| {n} | {statistics.median(seconds[n]):.1f} | {min(seconds[n]):.1f}–"
              f"{max(seconds[n]):.1f} | {statistics.median(ratios[n]):.2f} |")


if __name__ == "__main__":
    main()
