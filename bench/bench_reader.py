"""Reader throughput in random order, beside a flat memmap and Megatron's IndexedDataset.

The dataset is real text: the sample corpus (``samples/corpus/*.jsonl``, English novels and
classical Chinese) repeated ``--repeats-of-corpus`` times with suffixed ids (520: 1.05 GB of
UTF-8, 2.28 M windows, 1.03 G tokens: 4.1 GB as int32, 31× the 128 MiB row-group cache of
earlier readers), tokenised by the job itself (``python -m pipeline --tokenizer bytes
--window 512``, 32 shards), written once under ``bench/work/`` and reused. Then, in one
process, on the same windows:

* **prepare**: ``WindowDataset(...).prepare()`` into an empty cache directory (the first open:
  hash, check and convert every shard), its time and the layout's size on disk, then the
  time of a second open that reuses it (the cheap check);
* **baselines** built from the same Parquet rows: a flat ``numpy.memmap`` (tokens ``uint16`` +
  int64 offsets, what the reader's layout also stores) and megatron-core's ``IndexedDataset``
  (its ``.bin``/``.idx``, written with its ``IndexedDatasetBuilder``), each a map-style
  ``Dataset`` whose ``__getitem__`` returns the window dict and read in a ``torch.randperm``
  order (``RandomSampler``) with the same :func:`reader.collate`;
* **ours**: ``WindowDataset`` + ``EpochSampler`` in ``global`` order and in ``blocks`` order
  (by row group, k = 16; by shard, k = 4), through ``DataLoader`` with 0 and 2 workers.

Each configuration reads ``--batches`` batches of B windows (the clock starts after the first
batch, so worker start-up is not counted); rounds alternate the configurations and the table
gives medians over ``--rounds`` rounds; a ratio is the median over rounds of the rate over the
memmap's rate (same workers) in the same round. Tokens are real input positions (Σ length).
The page cache is warm (the layouts fit in RAM here): this measures the reader's own cost, not
the disk's. Also printed: how well each order mixes.

    pip install --no-deps megatron-core      # the bench extra; imports on CPU with warnings
    python bench/bench_reader.py [--rounds 3] [--batches 3000] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import functools
import glob
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("reader") is None:
    sys.path.insert(0, str(ROOT))

from reader import (  # noqa: E402
    EpochSampler,
    PackedSampler,
    WindowDataset,
    collate,
    collate_packed,
)

__all__ = ["build_dataset", "main", "mixing"]

WORK = ROOT / "bench" / "work"
OLD_CACHE_BYTES = 128 * 2**20  # the row-group cache of the reader this replaces


def build_dataset(out: Path, *, repeats: int, window: int = 512, num_shards: int = 32) -> Path:
    """Write the sample corpus ``repeats`` times (ids suffixed ``~rN``) and run the job on it."""
    if (out / "manifest.json").exists():
        return out
    corpus = out.parent / f"corpus-x{repeats}"
    if not corpus.exists():
        tmp = Path(tempfile.mkdtemp(dir=out.parent))
        docs = []
        for name in sorted(glob.glob(str(ROOT / "samples/corpus/*.jsonl"))):
            with open(name, encoding="utf-8") as f:
                docs += [json.loads(line) for line in f]
        parts = 10
        for part in range(parts):
            with open(tmp / f"part-{part}.jsonl", "w", encoding="utf-8") as f:
                for r in range(part * repeats // parts, (part + 1) * repeats // parts):
                    for d in docs:
                        f.write(json.dumps({"id": f"{d['id']}~r{r}", "text": d["text"]},
                                           ensure_ascii=False) + "\n")
        tmp.rename(corpus)
    subprocess.run([sys.executable, "-m", "pipeline", "--input", str(corpus / "*.jsonl"),
                    "--format", "jsonl", "--id-field", "id", "--tokenizer", "bytes",
                    "--window", str(window), "--num-shards", str(num_shards),
                    "--output", str(out)], check=True, cwd=ROOT)
    return out


# -- baselines: the same windows as a flat memmap and as Megatron's .bin/.idx -----------------


def _parquet_windows(ds: WindowDataset) -> Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(flat tokens, lengths + 1, loss_start) of every row group, in dataset order."""
    for name in ds.shard_files:
        pf = pq.ParquetFile(os.path.join(ds._root, name))
        for g in range(pf.metadata.num_row_groups):
            t = pf.read_row_group(g, columns=["tokens", "loss_start"])
            tokens = t.column("tokens").combine_chunks()
            off = np.asarray(tokens.offsets, dtype=np.int64)
            yield (np.asarray(tokens.values)[off[0] : off[-1]], np.diff(off),
                   t.column("loss_start").to_numpy())


def write_baselines(ds: WindowDataset, out: Path) -> dict[str, Any]:
    """The flat memmap (``tokens.bin`` + ``offsets.npy``) and ``loss_start.npy`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    sizes, loss = [], []
    with open(out / "tokens.bin", "wb") as f:
        for values, size, ls in _parquet_windows(ds):
            f.write(values.astype(np.uint16).tobytes())
            sizes.append(size)
            loss.append(ls)
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(sizes))]).astype(np.int64)
    np.save(out / "offsets.npy", offsets)
    np.save(out / "loss_start.npy", np.concatenate(loss).astype(np.int64))
    return {"bytes": (out / "tokens.bin").stat().st_size + offsets.nbytes}


def write_megatron(flat: Path, prefix: Path) -> str | None:
    """Megatron's .bin/.idx of the flat windows (one document per window); None if unavailable."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    except Exception as e:  # megatron-core is optional: say why it is missing
        return f"megatron-core unavailable: {type(e).__name__}: {e}"
    tokens = np.memmap(flat / "tokens.bin", dtype=np.uint16, mode="r")
    offsets = np.load(flat / "offsets.npy")
    builder = IndexedDatasetBuilder(str(prefix) + ".bin", dtype=np.uint16)
    step = 65536
    for lo in range(0, len(offsets) - 1, step):
        hi = min(lo + step, len(offsets) - 1)
        builder.add_document(torch.from_numpy(np.asarray(tokens[offsets[lo] : offsets[hi]])
                                              .astype(np.int32)),
                             np.diff(offsets[lo : hi + 1]).tolist())
    builder.finalize(str(prefix) + ".idx")
    return None


class MemmapWindows(Dataset):
    """A flat memmap of tokens + offsets: what a hand-written Megatron-style reader does."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.offsets = np.load(directory / "offsets.npy", mmap_mode="r")
        self.loss = np.load(directory / "loss_start.npy", mmap_mode="r")
        self.tokens = np.memmap(directory / "tokens.bin", dtype=np.uint16, mode="r")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> dict[str, Any]:
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return {"tokens": np.asarray(self.tokens[lo:hi], dtype=np.int32), "length": hi - lo - 1,
                "loss_start": int(self.loss[i])}


class MegatronWindows(Dataset):
    """megatron-core's ``IndexedDataset`` (mmap), one sequence per window."""

    def __init__(self, prefix: Path, flat: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.datasets.indexed_dataset import IndexedDataset
        self.data = IndexedDataset(str(prefix))
        self.loss = np.load(flat / "loss_start.npy", mmap_mode="r")

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, Any]:
        tokens = np.asarray(self.data[i], dtype=np.int32)
        return {"tokens": tokens, "length": len(tokens) - 1, "loss_start": int(self.loss[i])}


# -- measuring -------------------------------------------------------------------------------


def _rate(batches: Iterable[dict[str, Any]], count: int) -> tuple[float, float]:
    """(windows/s, tokens/s) over ``count`` batches after the first."""
    it = iter(batches)
    next(it)
    began = time.perf_counter()
    windows = tokens = 0
    for _, batch in zip(range(count), it, strict=False):
        windows += batch["input_ids"].shape[0]
        tokens += int(batch["lengths"].sum())
    seconds = time.perf_counter() - began
    return windows / seconds, tokens / seconds


def _loader(dataset: Dataset, batch_sampler: Iterable[list[int]], workers: int,
            pad_id: int) -> DataLoader:
    return DataLoader(dataset, batch_sampler=batch_sampler, num_workers=workers,
                      collate_fn=functools.partial(collate, pad_id=pad_id))


def mixing(ds: WindowDataset, order: np.ndarray, batch_size: int) -> dict[str, float]:
    """How well an epoch's order mixes, and how local its reads are (from the whole order).

    ``doc_gap``: the mean distance, as a share of the epoch, between consecutive windows of one
    document (documents of ≥ 2 windows; a uniform permutation gives ≈ 1/3, file order ≈ 0).
    ``same_doc_batches``: the share of batches holding two windows of one document.
    ``shards_per_batch`` / ``groups_per_batch``: distinct shards / row groups a batch reads.
    """
    n = len(order)
    doc = np.empty(n, np.int64)
    first = 0
    for s in range(len(ds.shard_files)):
        layout = ds._layout(s)
        doc[ds._shard_starts[s] : ds._shard_starts[s] + layout.rows] = first + np.repeat(
            np.arange(len(layout.doc_rows) - 1), np.diff(layout.doc_rows))
        first += len(layout.doc_rows) - 1
    position = np.empty(n, np.int64)
    position[order] = np.arange(n)
    same = doc[1:] == doc[:-1]  # consecutive windows (in dataset order) of one document
    gaps = np.abs(position[1:][same] - position[:-1][same]) / n
    usable = n // batch_size * batch_size

    def distinct_per_batch(label: np.ndarray) -> tuple[float, np.ndarray]:
        by_batch = np.sort(label[order[:usable]].reshape(-1, batch_size), axis=1)
        changes = by_batch[:, 1:] != by_batch[:, :-1]
        return float(1 + changes.sum(axis=1).mean()), changes

    _, doc_changes = distinct_per_batch(doc)
    shards, _ = distinct_per_batch(np.repeat(np.arange(len(ds.shard_files)), ds.blocks("shard")))
    groups, _ = distinct_per_batch(np.repeat(np.arange(len(ds.blocks("row_group"))),
                                             ds.blocks("row_group")))
    return {"doc_gap": float(gaps.mean()),
            "same_doc_batches": float((~doc_changes).any(axis=1).mean()),
            "shards_per_batch": shards, "groups_per_batch": groups}


MIXES = (("global", None, 0), ("blocks", "row_group", 16), ("blocks", "row_group", 256),
         ("blocks", "row_group", 1024), ("blocks", "shard", 1), ("blocks", "shard", 4),
         ("file order (no shuffle)", None, 0))


def cold_stream(root: Path, cache: Path, batch_size: int, *, k: int = 2, shards_kept: int = 4,
                buffers: int = 3) -> dict[str, float]:
    """A remote-style first epoch: ``blocks`` by shard from an empty cache bounded to
    ``shards_kept`` shards' layouts, every shard fetched through a non-local ``pyarrow.fs``
    filesystem (the download path) and converted when first needed; ``buffers`` buffers of k
    shards read, timed from the start (fetches and conversions included)."""
    remote = pafs.SubTreeFileSystem(str(root.parent), pafs.LocalFileSystem())
    ds = WindowDataset(root.name, filesystem=remote, cache_dir=cache / "bounded")
    # A shard's layout: ≤ W + 1 uint16 tokens and a 48-byte record per window, plus doc ids.
    rows = max(ds.blocks("shard"))
    limit = int(shards_kept * 1.05 * rows * ((ds.window + 1) * 2 + 48))
    ds = WindowDataset(root.name, filesystem=remote, cache_dir=cache / "bounded",
                       cache_limit=limit)
    sampler = EpochSampler(len(ds), batch_size, seed=0, order="blocks", blocks=ds.blocks("shard"),
                           buffer_blocks=k)
    loader = _loader(ds, sampler, 0, ds.eos_id)
    batches = buffers * k * len(ds) // len(ds.shard_files) // batch_size
    began = time.perf_counter()
    windows = 0
    for _, batch in zip(range(batches), loader, strict=False):
        windows += batch["input_ids"].shape[0]
    seconds = time.perf_counter() - began
    kept = sum(size for _, size, _ in ds._layouts.entries())
    return {"windows_per_s": windows / seconds, "windows": windows, "seconds": seconds,
            "builds": ds.layout_builds, "limit_bytes": limit, "kept_bytes": kept}


def _packed_rate(batches: Iterable[dict[str, Any]], count: int) -> dict[str, float]:
    """Batches/s, real tokens/s and the padding share over ``count`` batches after the first."""
    it = iter(batches)
    next(it)
    began = time.perf_counter()
    done = tokens = positions = 0
    for _, batch in zip(range(count), it, strict=False):
        done += 1
        positions += batch["input_ids"].numel()
        real = batch["segment_ids"] >= 0 if "segment_ids" in batch else batch["attention_mask"]
        tokens += int(real.sum())
    seconds = time.perf_counter() - began
    return {"batches_s": done / seconds, "tokens_s": tokens / seconds,
            "padding": 1 - tokens / positions}


def packing(ds: WindowDataset, rows: int, batches: int, rounds: int,
            big_n: int) -> dict[str, Any]:
    """Packed (PackedSampler + collate_packed, B rows of W) beside unpacked (EpochSampler +
    collate, B windows padded to the longest), same B, 0 workers; the whole epoch's padding
    share of each; and the packer's time and memory for one epoch of ``big_n`` windows."""
    w, eos = ds.window, ds.eos_id
    lengths = ds.lengths
    count = min(batches, -(-len(ds) // rows) - 1)
    unpacked_pad = functools.partial(collate, pad_id=eos)
    packed_pad = functools.partial(collate_packed, seq_len=w, pad_id=eos)
    out: dict[str, list[dict[str, float]]] = {"unpacked": [], "packed": []}
    for r in range(rounds):
        out["unpacked"].append(_packed_rate(DataLoader(
            ds, batch_sampler=EpochSampler(len(ds), rows, seed=r), collate_fn=unpacked_pad),
            count))
        out["packed"].append(_packed_rate(DataLoader(
            ds, batch_sampler=PackedSampler(lengths, rows, w, seed=r), collate_fn=packed_pad),
            count))
    # Whole-epoch padding shares (every batch, not a timed sample).
    sampler = EpochSampler(len(ds), rows, seed=0)
    padded = sum(len(b) * int(lengths[b].max()) for b in sampler)
    epoch_unpacked = 1 - int(lengths.sum()) / padded
    packed_rows = len(PackedSampler(lengths, rows, w, seed=0).rows(0))
    epoch_packed = 1 - int(lengths.sum()) / (packed_rows * w)
    # The packer at scale: big_n windows with the dataset's length distribution, in a fresh
    # process whose peak RSS above its state after loading the lengths is the packer's.
    big = np.random.default_rng(0).choice(lengths, size=big_n).astype(np.int32)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "lengths.npy"), big)
        code = (
            "import json, resource, sys, time\n"
            "import numpy as np\n"
            "from reader import PackedSampler\n"
            "lengths = np.load(sys.argv[1])\n"
            "sampler = PackedSampler(lengths, int(sys.argv[2]), int(sys.argv[3]), seed=0)\n"
            "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "began = time.perf_counter()\n"
            "rows = len(sampler.rows(0))\n"
            "seconds = time.perf_counter() - began\n"
            "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base\n"
            "print(json.dumps({'seconds': seconds, 'peak_kib': peak, 'rows': rows}))\n")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-c", code, os.path.join(tmp, "lengths.npy"),
                               str(rows), str(w)], env=env, check=True, capture_output=True,
                              text=True)
    big_run = json.loads(done.stdout.strip().splitlines()[-1])
    pack_s, peak = big_run["seconds"], big_run["peak_kib"] * 1024
    med = {k: {m: statistics.median(x[m] for x in v) for m in v[0]} for k, v in out.items()}
    print(f"\nPacking, W = {w}, B = {rows} (windows or rows), 0 workers, {count} batches, "
          f"medians of {rounds} rounds:\n")
    print("| batches | batches/s | real tokens/s | padding share (timed) | padding share "
          "(epoch) |\n|---|---:|---:|---:|---:|")
    for name, share in (("unpacked", epoch_unpacked), ("packed", epoch_packed)):
        m = med[name]
        print(f"| {name} | {m['batches_s']:,.0f} | {m['tokens_s']:,.0f} | {m['padding']:.1%} | "
              f"{share:.1%} |")
    print(f"\nPacking one epoch of {big_n:,} windows (this length distribution): "
          f"{pack_s:.1f} s (the epoch's order and the first-fit), peak RSS +{peak / 2**20:,.0f} "
          f"MiB, {big_run['rows']:,} rows.")
    return {"timed": med, "epoch_padding": {"unpacked": epoch_unpacked, "packed": epoch_packed},
            "pack_seconds": pack_s, "pack_peak_bytes": peak, "big_n": big_n}


def mixture(ds: WindowDataset, batch_size: int, batches: int, rounds: int,
            before: Path | None = None) -> dict[str, Any]:
    """A three-source mixture beside ``EpochSampler`` on the dataset, batch by batch in turns
    (:func:`bench_mixture.batch_cost`)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_mixture import batch_cost

    return batch_cost(Path(ds.path), batch_size, batches, rounds, before)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; prints markdown tables and returns the figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=None,
                   help="an existing dataset (default: build bench/work/reader-x500)")
    p.add_argument("--repeats-of-corpus", type=int, default=520,
                   help="copies of samples/corpus in the built dataset (520: 1.05 GB)")
    p.add_argument("--batch-size", type=int, default=32, help="batch size B (32)")
    p.add_argument("--batches", type=int, default=3000, help="batches timed per run (3000)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; medians are reported (3)")
    p.add_argument("--keep-cache", action="store_true",
                   help="keep the layout cache and baselines in bench/work for the next run")
    p.add_argument("--packing-only", action="store_true",
                   help="only the packed-vs-unpacked comparison (e.g. --data out/sample)")
    p.add_argument("--pack-n", type=int, default=10_000_000,
                   help="windows in the packer's cost measurement (10,000,000)")
    p.add_argument("--mixture-only", action="store_true",
                   help="only the mixture-vs-EpochSampler comparison (e.g. --data out/sample)")
    p.add_argument("--before", type=Path, default=None, metavar="DIR",
                   help="with --mixture-only: also the reader of this checkout, in turns")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.mixture_only:
        if args.data is None:
            p.error("--mixture-only needs --data (a finished output, e.g. out/sample)")
        return mixture(WindowDataset(args.data), args.batch_size, args.batches, args.rounds,
                       args.before)
    if args.packing_only:
        if args.data is None:
            p.error("--packing-only needs --data (a finished output, e.g. out/sample)")
        return packing(WindowDataset(args.data), args.batch_size, args.batches, args.rounds,
                       args.pack_n)
    WORK.mkdir(parents=True, exist_ok=True)
    root = args.data or build_dataset(WORK / f"reader-x{args.repeats_of_corpus}",
                                      repeats=args.repeats_of_corpus)
    scratch = Path(tempfile.mkdtemp(dir=WORK, prefix="bench-reader-"))
    try:
        return _run(root, scratch, args)
    finally:
        if not args.keep_cache:
            shutil.rmtree(scratch, ignore_errors=True)


def _run(root: Path, scratch: Path, args: argparse.Namespace) -> dict[str, Any]:
    cache = scratch / "cache"
    began = time.perf_counter()
    ds = WindowDataset(root, cache_dir=cache)
    opened = time.perf_counter() - began
    report = ds.prepare()
    began = time.perf_counter()
    again = WindowDataset(root, cache_dir=cache)
    reuse = again.prepare()
    reopen = time.perf_counter() - began
    manifest = ds.manifest
    parquet_bytes = sum(os.path.getsize(os.path.join(ds._root, f)) for f in ds.shard_files)
    decoded = 4 * manifest.counts.tokens
    prep = {"windows": len(ds), "tokens": manifest.counts.tokens,
            "shards": len(ds.shard_files), "parquet_bytes": parquet_bytes,
            "decoded_int32_bytes": decoded, "x_old_cache": decoded / OLD_CACHE_BYTES,
            "open_s": opened, "prepare_s": report["seconds"], "layout_bytes": report["bytes"],
            "reopen_s": reopen, "rebuilt_on_reopen": reuse["built"]}
    flat = scratch / "flat"
    began = time.perf_counter()
    write_baselines(ds, flat)
    prep["flat_write_s"] = time.perf_counter() - began
    began = time.perf_counter()
    megatron_missing = write_megatron(flat, scratch / "megatron")
    prep["megatron_write_s"] = time.perf_counter() - began

    b, n, eos = args.batch_size, len(ds), ds.eos_id
    memmap = MemmapWindows(flat)

    def ours(order: str, unit: str = "", k: int = 0) -> Callable[[int, int], DataLoader]:
        def make(workers: int, seed: int) -> DataLoader:
            kw: dict[str, Any] = {} if order == "global" else {
                "order": "blocks", "blocks": ds.blocks(unit), "buffer_blocks": k}
            return _loader(ds, EpochSampler(n, b, seed=seed, **kw), workers, eos)
        return make

    def randperm(dataset: Dataset) -> Callable[[int, int], DataLoader]:
        def make(workers: int, seed: int) -> DataLoader:
            g = torch.Generator().manual_seed(seed)
            return _loader(dataset, BatchSampler(RandomSampler(dataset, generator=g), b, False),
                           workers, eos)
        return make

    configs: dict[str, Callable[[int, int], DataLoader]] = {
        "flat `numpy.memmap` + `collate`, randperm order": randperm(memmap)}
    if megatron_missing is None:
        configs["megatron-core `IndexedDataset` + `collate`, randperm order"] = randperm(
            MegatronWindows(scratch / "megatron", flat))
    configs["`WindowDataset`, `global` order"] = ours("global")
    configs["`WindowDataset`, `blocks` order (row groups, k = 256)"] = ours(
        "blocks", "row_group", 256)
    configs["`WindowDataset`, `blocks` order (shards, k = 4)"] = ours("blocks", "shard", 4)
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for r in range(args.rounds):
        for workers in (0, 2):
            for name, make in configs.items():
                results.setdefault((name, workers), []).append(
                    _rate(make(workers, r), args.batches))
                print(f"round {r} {workers} workers {name}: "
                      f"{results[(name, workers)][-1][0]:,.0f} windows/s", file=sys.stderr)

    def median(name: str, workers: int, k: int) -> float:
        return statistics.median(x[k] for x in results[(name, workers)])

    def ratio(name: str, workers: int) -> float:
        """The median over rounds of the rate over the memmap's in the same round."""
        return statistics.median(a[0] / m[0] for a, m in zip(
            results[(name, workers)], results[(base, workers)], strict=True))

    base = next(iter(configs))
    print(f"\n{n:,} windows, {prep['tokens']:,} tokens, W = {ds.window}, B = {b}, "
          f"{os.cpu_count()} CPUs; {args.batches} batches per run, medians of {args.rounds} "
          "rounds\n")
    print("| path | windows/s, 0 workers | tokens/s, 0 workers | vs memmap | "
          "windows/s, 2 workers | tokens/s, 2 workers | vs memmap |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    table = []
    for name in configs:
        row = [name]
        for workers in (0, 2):
            wps, tps = median(name, workers, 0), median(name, workers, 1)
            row += [f"{wps:,.0f}", f"{tps:,.0f}", f"{ratio(name, workers):.2f}"]
        table.append(row)
        print("| " + " | ".join(row) + " |")
    if megatron_missing:
        print(f"\n{megatron_missing}")
    cold = cold_stream(root, scratch / "cold", b)
    print(f"\nCold start, remote-style (download path), `blocks` by shard (k = 2), cache bounded "
          f"to {cold['limit_bytes'] / 1e9:.2f} GB (4 shards of {len(ds.shard_files)}): "
          f"{cold['windows_per_s']:,.0f} windows/s over the first {cold['windows']:,} windows "
          f"({cold['seconds']:.1f} s, {cold['builds']} shards fetched and converted, "
          f"{cold['kept_bytes'] / 1e9:.2f} GB kept).")
    print(f"\nParquet {parquet_bytes / 1e6:,.0f} MB in {prep['shards']} shards; decoded as int32 "
          f"{decoded / 1e9:.2f} GB = {prep['x_old_cache']:.0f}× the old 128 MiB cache. "
          f"First open: {opened:.2f} s; prepare (hash, check, convert): "
          f"{prep['prepare_s']:.1f} s; layout {prep['layout_bytes'] / 1e9:.2f} GB; reopen "
          f"(cheap check, {reuse['built']} rebuilt): {reopen:.2f} s. Baselines written in "
          f"{prep['flat_write_s']:.1f} s (memmap) and {prep['megatron_write_s']:.1f} s "
          "(IndexedDataset).")
    print("\n| order | buffer (windows) | doc gap (share of epoch) | batches with 2 windows "
          "of a document | shards per batch | row groups per batch |")
    print("|---|---:|---:|---:|---:|---:|")
    mixes = {}
    for order, unit, k in MIXES:
        if order == "global":
            label, buffer, perm = "global", n, EpochSampler(n, b, seed=0).permutation(0).numpy()
        elif unit is None:
            label, buffer, perm = order, 0, np.arange(n)
        else:
            blocks = ds.blocks(unit)
            label = f"blocks, {unit.replace('_', ' ')}s, k = {k}"
            buffer = round(k * n / len(blocks))
            perm = EpochSampler(n, b, seed=0, order="blocks", blocks=blocks,
                                buffer_blocks=k).permutation(0).numpy()
        m = mixing(ds, perm, b)
        mixes[label] = m
        print(f"| {label} | {buffer:,} | {m['doc_gap']:.3f} | {m['same_doc_batches']:.2%} | "
              f"{m['shards_per_batch']:.1f} | {m['groups_per_batch']:.1f} |")
    packed = packing(ds, b, args.batches, args.rounds, args.pack_n)
    mixed = mixture(ds, b, args.batches, args.rounds)
    return {"prepare": prep, "table": table, "mixture": mixed, "results": {f"{k[0]} / {k[1]}": v
                                                          for k, v in results.items()},
            "mixing": mixes, "megatron": megatron_missing, "cold": cold, "packing": packed}


if __name__ == "__main__":
    main()
