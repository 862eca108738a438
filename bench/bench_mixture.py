"""Startup of a mixture at scale: open time and first-batch time against the shard count.

Builds 50 sources of tiny shards (bytes tokenizer, W = 32, ``--docs-per-shard`` documents a
shard, written by :func:`transforms.testing.write_dataset`, the job's own writer without
Beam) at 2, 20 and 200 shards a source (100, 1,000 and 10,000 shards in all) under
``bench/work/mixture/``, reused by later runs. Then, for each size, in a fresh process each
(so that nothing is cached in memory but the operating system's page cache):

* **prepare**: open every source and build its layout (once per dataset; the cache is kept);
* **open**: ``MixedDataset({name: WindowDataset(path), …})`` of the prepared sources;
* **first batch**: ``MixtureSampler(…, unit="targets")``'s first batch of 64 windows through
  ``__getitems__`` and ``collate`` (every source's order read ahead and its window sizes
  read from the layout).

    python bench/bench_mixture.py [--sources 50] [--shards 2,20,200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transforms.params import WindowSpec  # noqa: E402
from transforms.testing import write_dataset  # noqa: E402

__all__ = ["build", "main"]

WORK = ROOT / "bench" / "work" / "mixture"
WINDOW = 32


def build(sources: int, shards: int, docs_per_shard: int) -> list[Path]:
    """``sources`` datasets of ``shards`` shards each (written once, then reused)."""
    out = []
    for s in range(sources):
        root = WORK / f"{shards}-shards" / f"source-{s:02d}"
        if not (root / "_manifest.json").exists():
            rng = random.Random(s * 100_003 + shards)
            docs = [(f"s{s}-d{i}", [256, *rng.choices(range(32, 127), k=rng.randrange(20, 90)),
                                    257]) for i in range(shards * docs_per_shard)]
            write_dataset(root, docs, windows=WindowSpec(window=WINDOW, stride=WINDOW,
                                                         seed=s), num_shards=shards)
        out.append(root)
    return out


_CHILD = """
import functools, json, sys, time
began = time.perf_counter()
from reader import MixedDataset, MixtureSampler, WindowDataset, collate
imported = time.perf_counter()
paths, cache, prepare = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
if prepare:
    for p in paths:
        WindowDataset(p, cache_dir=cache).prepare()
    print(json.dumps({"prepare_s": time.perf_counter() - imported}))
    raise SystemExit
t0 = time.perf_counter()
mixed = MixedDataset({f"s{k}": WindowDataset(p, cache_dir=cache) for k, p in enumerate(paths)})
t1 = time.perf_counter()
sampler = MixtureSampler(mixed, {n: k + 1 for k, n in enumerate(mixed.names)}, 64, seed=0,
                         unit="targets")
batch = collate(mixed.__getitems__(next(iter(sampler))), pad_id=mixed.eos_id)
t2 = time.perf_counter()
print(json.dumps({"import_s": imported - began, "open_s": t1 - t0, "first_batch_s": t2 - t1,
                  "windows": len(mixed), "targets": batch["num_targets"]}))
"""


def _child(paths: list[Path], cache: Path, prepare: bool) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([str(p) for p in paths]),
                           str(cache), "1" if prepare else "0"], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; prints a markdown table and returns the figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sources", type=int, default=50, help="sources (50)")
    p.add_argument("--shards", type=str, default="2,20,200", help="shards a source (2,20,200)")
    p.add_argument("--docs-per-shard", type=int, default=3, help="documents a shard (3)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; medians reported (3)")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.shards.split(",")]
    results: dict[int, dict[str, Any]] = {}
    for shards in sizes:
        began = time.perf_counter()
        paths = build(args.sources, shards, args.docs_per_shard)
        built = time.perf_counter() - began
        cache = WORK / "cache"
        prep = _child(paths, cache, prepare=True)
        runs = [_child(paths, cache, prepare=False) for _ in range(args.rounds)]
        results[shards] = {"shards": shards * args.sources, "build_s": built, **prep,
                           **{k: statistics.median(r[k] for r in runs)
                              for k in ("import_s", "open_s", "first_batch_s")},
                           "windows": runs[0]["windows"]}
        print(f"{shards * args.sources} shards: {results[shards]}", file=sys.stderr)
    print(f"\n{args.sources} sources, W = {WINDOW}, {args.docs_per_shard} documents a shard, "
          f"{os.cpu_count()} CPUs; medians of {args.rounds} fresh processes, prepared layouts\n")
    print("| shards | windows | open (s) | per shard (ms) | first batch (s) | prepare, once "
          "(s) |\n|---:|---:|---:|---:|---:|---:|")
    for r in results.values():
        print(f"| {r['shards']:,} | {r['windows']:,} | {r['open_s']:.2f} | "
              f"{1000 * r['open_s'] / r['shards']:.2f} | {r['first_batch_s']:.3f} | "
              f"{r['prepare_s']:.1f} |")
    return {str(k): v for k, v in results.items()}


if __name__ == "__main__":
    main()
