"""A mixture's cost: per batch against one dataset, and startup against the shard count.

**Cost per batch** (``--cost DATA``): a three-source mixture (``DATA`` opened three times:
web, code, books, weights 5:3:2) through ``MixtureSampler`` + ``MixedDataset.__getitems__`` +
``collate``, for each ``unit``, beside ``EpochSampler`` + ``WindowDataset`` + ``collate`` on
``DATA``, same B, each through a ``DataLoader`` with 0 workers (so the sampler, the gather and
the collate all run in the timed process). Every map is touched once before the clock starts
(the page cache is warm). Then the configurations take turns batch by batch, in a rotating
order, for ``--batches`` batches a round, a new sampler (seed = the round) each round, and each
batch's CPU time (``time.process_time``) and wall time are added to its configuration's: every
configuration meets the same machine at the same moments, whatever else it runs. A cost is the
median over rounds of the round's time per batch over ``EpochSampler``'s. With ``--before
DIR`` (a checkout of an earlier commit) the same configurations with DIR's ``reader`` (and
this tree's ``transforms``) take turns with them, so before and after are the same run.

    python bench/bench_mixture.py --cost out/sample [--batch-size 32] [--batches 800]
        [--rounds 9] [--before DIR]

**Startup** builds 50 sources of tiny shards (bytes tokenizer, W = 32, ``--docs-per-shard``
documents a shard, written by :func:`transforms.testing.write_dataset`, the job's own writer
without Beam) at 2, 20 and 200 shards a source (100, 1,000 and 10,000 shards in all) under
``bench/work/mixture/``, reused by later runs. Then, for each size, in a fresh process each
(so that nothing is cached in memory but the operating system's page cache):

* **prepare**: open every source and build its layout (once per dataset; the cache is kept);
* **open**: ``MixedDataset({name: WindowDataset(path), …})`` of the prepared sources;
* **first batch**: ``MixtureSampler(…, unit="targets")``'s first batch of 64 windows through
  ``__getitems__`` and ``collate`` (every source's order read ahead and its window sizes
  read from the layout).

    python bench/bench_mixture.py [--sources 50] [--shards 2,20,200] [--rounds 3]

**Weights of every form** (``--weights``): the sampler alone (no data read: 60 stand-in
sources whose window sizes are computed from the index), CPU time per global batch of
``--batch-size`` windows, for weights given as small integers (the table path), as token
counts and as float shares, each ``unit``. With ``--before DIR`` the same with DIR's
``reader`` turn by turn in the same process, and the ratio before / after.

    python bench/bench_mixture.py --weights [--batch-size 1024] [--seconds 1] [--before DIR]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transforms.dataset.manifest import TokenizerInfo  # noqa: E402
from transforms.params import WindowSpec  # noqa: E402
from transforms.testing import write_dataset  # noqa: E402

__all__ = ["batch_cost", "build", "main"]

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


# -- cost per batch ------------------------------------------------------------------------


def _reader_from(tree: Path | None) -> Any:
    """The classes of ``reader`` (this tree's, or another checkout's imported beside it:
    its modules are registered under ``reader`` only while they import)."""
    names = ("EpochSampler", "MixedDataset", "MixtureSampler", "WindowDataset", "collate")
    if tree is None:
        module = importlib.import_module("reader")
        return argparse.Namespace(**{n: getattr(module, n) for n in names})
    ours = {k: m for k, m in sys.modules.items() if k == "reader" or k.startswith("reader.")}
    for k in ours:
        del sys.modules[k]
    sys.path.insert(0, str(tree))
    try:
        module = importlib.import_module("reader")
        return argparse.Namespace(**{n: getattr(module, n) for n in names})
    finally:
        sys.path.remove(str(tree))
        for k in [k for k in sys.modules if k == "reader" or k.startswith("reader.")]:
            del sys.modules[k]
        sys.modules.update(ours)


def _configurations(lib: Any, data: Path, batch_size: int, tag: str
                    ) -> dict[str, Callable[[int], Iterator[Any]]]:
    """name → (round → the batches of a fresh DataLoader), every map touched once."""
    from torch.utils.data import DataLoader

    ds = lib.WindowDataset(data)
    mixed = lib.MixedDataset({name: lib.WindowDataset(data, cache_dir=ds.cache_dir)
                              for name in ("web", "code", "books")})
    for d in (ds, mixed):
        for a in range(0, len(d), 4096):
            d.__getitems__(list(range(a, min(a + 4096, len(d)))))
    pad = functools.partial(lib.collate, pad_id=ds.eos_id)
    weights = {"web": 5, "code": 3, "books": 2}
    out = {f"EpochSampler{tag}": lambda r: iter(DataLoader(
        ds, batch_sampler=lib.EpochSampler(len(ds), batch_size, seed=r), collate_fn=pad))}
    for unit in ("windows", "targets"):
        out[f"MixtureSampler unit={unit}{tag}"] = functools.partial(
            lambda r, unit: iter(DataLoader(mixed, batch_sampler=lib.MixtureSampler(
                mixed, weights, batch_size, seed=r, unit=unit), collate_fn=pad)), unit=unit)
    return out


def batch_cost(data: Path, batch_size: int, batches: int, rounds: int,
               before: Path | None = None) -> dict[str, Any]:
    """The mixture's cost per batch against ``EpochSampler`` (see the module docstring)."""
    configs = _configurations(_reader_from(None), data, batch_size, "")
    if before is not None:
        configs.update(_configurations(_reader_from(before), data, batch_size, " (before)"))
    count = max(1, min(batches, len(_reader_from(None).WindowDataset(data)) // batch_size - 2))
    names = list(configs)
    spent: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for r in range(rounds):
        its = {n: make(r) for n, make in configs.items()}
        for it in its.values():
            next(it)  # the first batch (the first draws) is not timed
        cpu, wall = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)
        for i in range(count):
            k = i % len(names)
            for n in names[k:] + names[:k]:
                c, w = time.process_time(), time.perf_counter()
                next(its[n])
                cpu[n] += time.process_time() - c
                wall[n] += time.perf_counter() - w
        for n in names:
            spent[n].append((cpu[n] / count, wall[n] / count))
    def base(n: str) -> str:
        return "EpochSampler" + (" (before)" if n.endswith(" (before)") else "")
    out = {n: {"us_cpu": 1e6 * statistics.median(c for c, _ in v),
               "us_wall": 1e6 * statistics.median(w for _, w in v),
               "cost_cpu": statistics.median(c / b[0] for (c, _), b in zip(
                   v, spent[base(n)], strict=True)),
               "cost_wall": statistics.median(w / b[1] for (_, w), b in zip(
                   v, spent[base(n)], strict=True))} for n, v in spent.items()}
    print(f"\nB = {batch_size}, 0 workers, {count} batches a round, turn by turn, medians of "
          f"{rounds} rounds; cost per batch against `EpochSampler` of the same code:\n")
    print("| configuration | µs per batch (CPU) | cost (CPU) | µs per batch (wall) | cost (wall) |"
          "\n|---|---:|---:|---:|---:|")
    for n, v in out.items():
        print(f"| {n} | {v['us_cpu']:,.0f} | {v['cost_cpu']:.3f} | {v['us_wall']:,.0f} | "
              f"{v['cost_wall']:.3f} |")
    return {"batch_size": batch_size, "batches": count, "rounds": rounds, "configurations": out}


# -- weights of every form -----------------------------------------------------------------


class _Standin:
    """A source with what the sampler reads of a WindowDataset, sizes computed from the index."""

    def __init__(self, n: int, salt: int) -> None:
        self.n, self.window, self.salt = n, WINDOW, salt
        # What a mixture reads of a manifest: its tokenizer record.
        self.manifest = types.SimpleNamespace(tokenizer=TokenizerInfo(
            kind="bytes", vocab_size=258, bos_id=256, eos_id=257, sha256=None))
        self.fingerprint = f"standin-{n}-{salt}"

    def __len__(self) -> int:
        return self.n

    def window_sizes(self, local: Any) -> Any:
        import numpy as np

        i = np.asarray(local, dtype=np.uint64) + np.uint64(self.salt)
        lengths = (1 + (i * np.uint64(2654435761)) % np.uint64(WINDOW)).astype(np.int64)
        return lengths, 1 + ((i * np.uint64(40503)).astype(np.int64) % lengths)


def weight_forms(batch_size: int, seconds: float, before: Path | None = None,
                 sources: int = 60) -> dict[str, Any]:
    """CPU seconds per global batch for each form of weights (see the module docstring)."""
    rng = random.Random(0)
    names = [f"s{k}" for k in range(sources)]
    forms = {"small integers": {n: rng.randrange(1, 20) for n in names},
             "token counts": {n: rng.randrange(10**8, 10**10) for n in names},
             "float shares": {n: rng.random() for n in names}}
    libs = {"after": _reader_from(None)}
    if before is not None:
        libs["before"] = _reader_from(before)
    out: dict[str, Any] = {}
    for unit in ("windows", "targets"):
        for form, weights in forms.items():
            row = {}
            for tag, lib in libs.items():
                mixed = lib.MixedDataset({n: _Standin(100_000 + k, k)
                                          for k, n in enumerate(names)})
                it = iter(lib.MixtureSampler(mixed, weights, batch_size, seed=0, unit=unit))
                next(it)  # the first batch (a period's table, the read-ahead) is not timed
                began, count = time.process_time(), 0
                while time.process_time() - began < seconds:
                    next(it)
                    count += 1
                row[tag] = (time.process_time() - began) / count
            out[f"{unit}, {form}"] = row
            print(f"{unit}, {form}: {row}", file=sys.stderr)
    print(f"\n{sources} sources, global batch {batch_size}, CPU seconds per batch "
          f"(at least {seconds} s of batches each)\n")
    print("| unit, weights | after (ms) |" + (" before (ms) | before / after |"
                                              if before else "")
          + "\n|---|---:|" + ("---:|---:|" if before else ""))
    for key, row in out.items():
        line = f"| {key} | {1e3 * row['after']:,.2f} |"
        if before is not None:
            line += f" {1e3 * row['before']:,.2f} | {row['before'] / row['after']:,.1f} |"
        print(line)
    return out


# -- startup ---------------------------------------------------------------------------------


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
    p.add_argument("--cost", type=Path, default=None, metavar="DATA",
                   help="measure the cost per batch on this finished output instead")
    p.add_argument("--batch-size", type=int, default=32, help="with --cost: B (32)")
    p.add_argument("--batches", type=int, default=800, help="with --cost: batches a round (800)")
    p.add_argument("--before", type=Path, default=None, metavar="DIR",
                   help="with --cost or --weights: also the reader of this checkout")
    p.add_argument("--weights", action="store_true",
                   help="measure the sampler alone for weights of every form instead")
    p.add_argument("--seconds", type=float, default=1.0,
                   help="with --weights: CPU seconds of batches a configuration (1)")
    args = p.parse_args(argv)
    if args.weights:
        return weight_forms(1024 if args.batch_size == 32 else args.batch_size, args.seconds,
                            args.before)
    if args.cost is not None:
        import torch

        torch.set_num_threads(1)
        return batch_cost(args.cost, args.batch_size, args.batches, args.rounds, args.before)
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
