"""Throughput of the torch reader: ``collate`` alone and the full ``DataLoader`` path.

Writes a synthetic dataset (default 8192 windows, W = 512, vocabulary 32000, most windows
full and one in six a short tail, 1024 rows per row group) to a temporary directory, then
measures windows/s and tokens/s at B = 32 for:

* ``collate`` on batches already in memory;
* ``DataLoader(WindowDataset, batch_sampler=EpochSampler, collate_fn=collate)`` over one
  shuffled epoch with ``num_workers`` 0 and 2, once with a cache that holds the dataset and
  once with a cache of two row groups (every window of a random order then costs most of a
  row group read: the price of a global shuffle over Parquet, bounded memory).

Tokens are real input positions (Σ length, padding excluded). The clock starts after the
first batch, so worker start-up is not counted. Prints a markdown table::

    python bench/bench_reader.py [--windows 8192] [--window 512] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader

if importlib.util.find_spec("reader") is None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reader import EpochSampler, WindowDataset, collate  # noqa: E402
from transforms.manifest import MANIFEST_NAME, dumps_manifest  # noqa: E402
from transforms.schema import ARROW_SCHEMA, FORMAT, FORMAT_VERSION, shard_file_name  # noqa: E402

__all__ = ["main", "write_synthetic"]

VOCAB, BOS, EOS = 32000, 1, 2


def write_synthetic(root: Path, *, windows: int, window: int, shards: int = 4,
                    row_group: int = 1024, seed: int = 0) -> Path:
    """Write a valid dataset of random windows (not real documents: one window each)."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    lengths = np.where(rng.random(windows) < 5 / 6, window,
                       rng.integers(1, window + 1, windows)).astype(np.int32)
    entries, first = [], 0
    for s in range(shards):
        rows = windows // shards + (s < windows % shards)
        lens = lengths[first : first + rows]
        offsets = np.concatenate([[0], np.cumsum(lens.astype(np.int64) + 1)])
        values = rng.integers(3, VOCAB, int(offsets[-1]), dtype=np.int32)
        keys = np.sort(rng.integers(0, 2**63, rows, dtype=np.uint64))
        table = pa.table({
            "doc_id": pa.array([f"synthetic:{first + i}" for i in range(rows)]),
            "doc_key": pa.array(keys, pa.uint64()),
            "window_index": pa.array(np.zeros(rows, np.int32)),
            "start": pa.array(np.zeros(rows, np.int64)),
            "length": pa.array(lens),
            "loss_start": pa.array(np.zeros(rows, np.int32)),
            "doc_tokens": pa.array(lens.astype(np.int64) + 1),
            "tokens": pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)),
                                               pa.array(values)),
        }).cast(ARROW_SCHEMA)
        name = shard_file_name(s, shards)
        pq.write_table(table, root / name, row_group_size=row_group)
        data = (root / name).read_bytes()
        entries.append({"file": name, "rows": rows, "scored_targets": int(lens.sum()),
                        "sha256": hashlib.sha256(data).hexdigest(), "documents": rows,
                        "tokens": int(offsets[-1]), "bytes": len(data)})
        first += rows
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "tokenizer": {"kind": "synthetic", "vocab_size": VOCAB, "bos_id": BOS, "eos_id": EOS,
                      "sha256": None},
        "windows": {"window": window, "stride": window, "tail": "keep", "min_tail": 1,
                    "score": "all", "offset": "zero", "seed": seed},
        "inputs": ["synthetic"],
        "counts": {"documents": windows, "skipped": {}, "windows": windows,
                   "tokens": sum(e["tokens"] for e in entries),
                   "pairs": int(lengths.sum()), "scored_targets": int(lengths.sum()),
                   "uncovered_pairs": 0},
        "shards": entries,
    }
    (root / MANIFEST_NAME).write_bytes(dumps_manifest(manifest))
    return root


def _rate(batches: Iterable[dict[str, Any]]) -> tuple[float, float]:
    """(windows/s, tokens/s) over ``batches``, timed from the first batch on."""
    it = iter(batches)
    next(it)
    began = time.perf_counter()
    windows = tokens = 0
    for batch in it:
        windows += batch["input_ids"].shape[0]
        tokens += int(batch["lengths"].sum())
    seconds = time.perf_counter() - began
    return windows / seconds, tokens / seconds


def _collate_only(ds: WindowDataset, batch_size: int, repeat: int) -> Iterable[dict[str, Any]]:
    order = EpochSampler(len(ds), batch_size, seed=0).permutation(0).tolist()
    batches = [[ds[i] for i in order[k : k + batch_size]]
               for k in range(0, min(len(order), 64 * batch_size), batch_size)]
    for _ in range(repeat):
        for windows in batches:
            yield collate(windows, pad_id=ds.eos_id)


def _loader(root: Path, batch_size: int, workers: int, cache_bytes: int) -> DataLoader:
    ds = WindowDataset(root, cache_bytes=cache_bytes)
    return DataLoader(ds, batch_sampler=EpochSampler(len(ds), batch_size, seed=0),
                      num_workers=workers, collate_fn=functools.partial(collate, pad_id=EOS))


def main(argv: Sequence[str] | None = None) -> list[tuple[str, float, float]]:
    """Run the benchmark; prints a markdown table and returns its rows."""
    p = argparse.ArgumentParser(description="Throughput of collate and the DataLoader path.")
    p.add_argument("--windows", type=int, default=8192, help="windows to write (8192)")
    p.add_argument("--window", type=int, default=512, help="window W (512)")
    p.add_argument("--batch-size", type=int, default=32, help="batch size B (32)")
    p.add_argument("--row-group", type=int, default=1024, help="rows per row group (1024)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = write_synthetic(Path(tmp) / "ds", windows=args.windows, window=args.window,
                               row_group=args.row_group)
        ds = WindowDataset(root)
        group_bytes = args.row_group * (args.window + 1) * 4
        rows.append(("`collate` (windows in memory)",
                     *_rate(_collate_only(ds, args.batch_size, repeat=10))))
        for cache, label in ((2**30, "cache holds all"), (2 * group_bytes, "cache 2 row groups")):
            for workers in (0, 2):
                loader = _loader(root, args.batch_size, workers, cache)
                rows.append((f"DataLoader, {workers} workers, {label}", *_rate(loader)))
    print(f"W = {args.window}, B = {args.batch_size}, {args.windows} windows, "
          f"{args.row_group} rows per row group, {os.cpu_count()} CPUs\n")
    print("| path | windows/s | tokens/s |")
    print("|---|---:|---:|")
    for name, wps, tps in rows:
        print(f"| {name} | {wps:,.0f} | {tps:,.0f} |")
    return rows


if __name__ == "__main__":
    main()
