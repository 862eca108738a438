"""What opening a dataset and reusing its layout cache cost, beside another checkout's reader.

Two measurements, each run once per code tree (``--compare DIR`` adds another checkout, e.g.
the previous release, measured in the same run on the same files):

* **open**: ``WindowDataset(path)`` on local datasets of 100, 1,000 and 10,000 tiny shards
  (written by the job's own writer, `transforms.testing.write_dataset`, with a fingerprint so
  that every footer check applies), then the first read of one window. Median of
  ``--rounds`` opens in a fresh process per tree.
* **cache check**: with every layout already built (a dataset of ``--cache-mb`` MB of
  ``tokens.bin``), the time to open it and map every shard's layout again (what a training
  process, or each DataLoader worker, pays before its first batch), by default and with
  ``verify=True``.

    python bench/bench_open.py --compare /path/to/previous/checkout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_OPEN = """
import json, sys, time, statistics
from reader import WindowDataset
path, rounds = sys.argv[1], int(sys.argv[2])
times = []
for _ in range(rounds):
    t = time.perf_counter(); ds = WindowDataset(path); times.append(time.perf_counter() - t)
t = time.perf_counter(); ds[0]; first = time.perf_counter() - t
print(json.dumps({"open_s": statistics.median(times), "first_read_s": first}))
"""

_CACHE = """
import json, sys, time, statistics, warnings
from reader import WindowDataset
path, cache, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
WindowDataset(path, cache_dir=cache).prepare()
out = {}
for verify in (False, True):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        try:
            ds = WindowDataset(path, verify, cache_dir=cache)
        except TypeError:
            ds = WindowDataset(path, verify=verify, cache_dir=cache)
        r = ds.prepare()
        times.append(time.perf_counter() - t)
        assert r["built"] == 0, r
    out["verify" if verify else "default"] = statistics.median(times)
print(json.dumps(out))
"""


def _write(root: Path, shards: int, docs: int, length: int) -> None:
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from transforms.params import WindowSpec
    from transforms.testing import write_dataset

    rng = np.random.default_rng(0)
    documents = [(f"d{i}", [256, *rng.integers(0, 256, length).tolist(), 257])
                 for i in range(docs)]
    write_dataset(root, documents, windows=WindowSpec(window=512, stride=512),
                  num_shards=shards, fingerprint="f" * 64)


def _run(tree: Path, code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=tempfile.gettempdir(),
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compare", action="append", default=[], help="another checkout to measure")
    p.add_argument("--shards", default="100,1000,10000")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cache-mb", type=int, default=200)
    args = p.parse_args()
    trees = {"this": ROOT, **{Path(c).name or c: Path(c) for c in args.compare}}
    work = Path(tempfile.mkdtemp(prefix="bench-open-"))
    print("open: WindowDataset(path), median of rounds; first read: ds[0]")
    print(f"{'shards':>7}  " + "  ".join(f"{name + ' open':>14} {name + ' ds[0]':>14}"
                                         for name in trees))
    for n in map(int, args.shards.split(",")):
        root = work / f"open-{n}"
        _write(root, n, docs=2 * n, length=20)
        cells = []
        for tree in trees.values():
            os.environ["TOKEN_WINDOWS_CACHE"] = str(work / f"cache-{n}-{len(cells)}")
            r = _run(tree, _OPEN, str(root), str(args.rounds))
            cells.append(f"{r['open_s']:>12.3f} s {r['first_read_s']:>12.3f} s")
        print(f"{n:>7}  " + "  ".join(cells), flush=True)
    root = work / "cache"
    docs = args.cache_mb * 2**20 // 2 // 4000
    t = time.perf_counter()
    _write(root, 16, docs=docs, length=4000)
    print(f"\ncache check: {docs} documents in 16 shards ({time.perf_counter() - t:.0f} s to "
          "write); open + map every cached layout again, median of rounds")
    for name, tree in trees.items():
        r = _run(tree, _CACHE, str(root), str(work / f"layout-cache-{name}"), str(args.rounds))
        print(f"{name:>10}: default {r['default']:.3f} s, verify=True {r['verify']:.3f} s",
              flush=True)


if __name__ == "__main__":
    main()
