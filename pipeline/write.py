"""The shuffle, the shards, the reject files and the manifest.

`ShuffleDocuments` is the job's one shuffle: blocks grouped by shard. `WriteShards` turns
each shard's blocks into rows (`transforms.rows.ShardRows`) and Parquet
(`transforms.parquet.write_rows`). `WriteRejects` writes ``_rejects/<reason>.jsonl`` in input
order. `FinalizeDataset` checks that every input was read exactly once, writes
``_manifest.json`` last (`transforms.manifest.build_manifest`) and removes temporary files.
Every file is written to a temporary name under ``OUTPUT/.tmp`` and renamed.
"""

from __future__ import annotations

import json
import logging
import os
import typing
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils import shared

from pipeline import fs
from pipeline.encode import REJECTS, load_tokenizer
from transforms.chunks import Receipt, account_inputs
from transforms.documents import Reject, source_order
from transforms.manifest import MANIFEST_NAME, WrittenShard, build_manifest, dumps_manifest
from transforms.params import WindowSpec
from transforms.parquet import row_group_rows, write_rows
from transforms.rows import ShardRows
from transforms.schema import REJECTS_DIR, TMP_DIR, shard_file_name

__all__ = [
    "SHARDS_AT_ONCE",
    "FinalizeDataset",
    "ShuffleDocuments",
    "WriteRejects",
    "WriteShards",
]

_LOG = logging.getLogger("token_windows")

# A worker process writes at most this many shards at once (and no more than it has cores).
SHARDS_AT_ONCE = 4


class ShuffleDocuments(beam.PTransform):
    """(shard, block) → (shard, [its blocks]): the one shuffle of the job.

    Documents cross it packed in blocks (`transforms.blocks`), one per batch and shard, each
    a byte string under Beam's bytes coder, so the runner moves a few large elements, not one
    per document. What a block holds depends on batching, what a shard holds does not, and
    `WriteShards` orders each shard by key.
    """

    def expand(self, blocks: beam.PCollection) -> beam.PCollection:
        return blocks | "GroupByShard" >> beam.GroupByKey()


def _write_shard_file(*, output: str, index: int, num_shards: int, rows: ShardRows,
                      window: int) -> WrittenShard:
    name = shard_file_name(index, num_shards)
    sha, size = typing.cast(
        tuple[str, int],
        fs.write_atomically(
            fs.join(output, name),
            lambda f: write_rows(rows, f, window=window),
            fs.join(output, TMP_DIR),
        ),
    )
    # Progress: one line per shard (the launcher prints the summary at the end).
    _LOG.info("wrote %s: %d documents, %d windows, %.1f MB", name, rows.counts.documents,
              rows.counts.rows, size / 1e6)
    return WrittenShard(file=name, index=index, sha256=sha, bytes=size, counts=rows.counts)


class _WriteShardFn(beam.DoFn):
    """Writes each shard on a helper thread (pyarrow encodes and compresses off the GIL),
    up to `SHARDS_AT_ONCE` at a time per worker process (and no more than it has cores),
    and emits its counts and rejects as it finishes, in arrival order; the last ones when
    the bundle ends. Metrics are bumped here, on the bundle thread."""

    def __init__(self, *, output: str, window: int) -> None:
        self._output = output
        self._window = window
        self._handle = shared.Shared()

    def setup(self) -> None:
        # One pool per worker process, shared by its threads: a process never holds more
        # than that many shards being written.
        self._at_once = max(1, min(SHARDS_AT_ONCE, os.cpu_count() or 1))
        self._pool = self._handle.acquire(
            lambda: ThreadPoolExecutor(self._at_once, thread_name_prefix="write-shard"),
            tag="write-shard")

    def start_bundle(self) -> None:
        self._writing: list[Future] = []

    def process(self, item: tuple[int, Iterable[bytes]], num_shards: int) -> Iterator[Any]:
        index, blocks = item
        # The grouped values are taken here, on the bundle thread, before a helper sees them.
        self._writing.append(self._pool.submit(self._write, index, list(blocks), num_shards))
        while self._writing and (self._writing[0].done() or len(self._writing) > self._at_once):
            yield from self._finished(self._writing.pop(0))

    def finish_bundle(self) -> Iterator[Any]:
        # The job runs in the global window (a batch job), as Beam's own file sinks assume.
        while self._writing:
            yield from self._finished(self._writing.pop(0))

    def _write(self, index: int, blocks: list[bytes],
               num_shards: int) -> tuple[list[Reject], WrittenShard]:
        rows = ShardRows(blocks)
        return rows.rejects, _write_shard_file(output=self._output, index=index,
                                               num_shards=num_shards, rows=rows,
                                               window=self._window)

    def _finished(self, future: Future) -> Iterator[Any]:
        rejects, shard = future.result()
        Metrics.counter("write", "shards").inc()
        for reject in rejects:
            Metrics.counter("rejects", reject.reason).inc()
            yield beam.pvalue.TaggedOutput(REJECTS, GlobalWindows.windowed_value(reject))
        yield GlobalWindows.windowed_value(shard)


class WriteShards(beam.PTransform):
    """(shard, [blocks]) → one Parquet file each; emits a `transforms.manifest.WrittenShard`
    per shard. Rejects (duplicate ids) leave by the tagged output ``rejects``.

    Args:
        output: the output directory.
        window: W, which sets the row-group size.
        num_shards: the shard count, a singleton PCollection.
    """

    def __init__(self, *, output: str, window: int, num_shards: beam.PCollection) -> None:
        super().__init__()
        self._output = output
        self._window = window
        self._num_shards = num_shards

    def expand(self, groups: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return groups | "WriteShard" >> beam.ParDo(
            _WriteShardFn(output=self._output, window=self._window),
            num_shards=beam.pvalue.AsSingleton(self._num_shards),
        ).with_outputs(REJECTS, main="shards")


def _key_by_reason(reject: Reject) -> tuple[str, Reject]:
    return reject.reason, reject


def _write_rejects(item: tuple[str, Iterable[Reject]], output: str) -> tuple[str, int]:
    reason, rejects = item
    rows = sorted(rejects, key=lambda r: (source_order(r.source), r.detail))
    body = b"".join(
        (json.dumps(r.to_json(), ensure_ascii=False, sort_keys=True) + "\n").encode()
        for r in rows
    )
    fs.write_atomically(
        fs.join(output, REJECTS_DIR, f"{reason}.jsonl"),
        lambda f: f.write(body),
        fs.join(output, TMP_DIR),
    )
    return reason, len(rows)


class WriteRejects(beam.PTransform):
    """Rejects → ``OUTPUT/_rejects/<reason>.jsonl`` (in input order, `source_order`); emits
    (reason, count)."""

    def __init__(self, output: str) -> None:
        super().__init__()
        self._output = output

    def expand(self, rejects: beam.PCollection) -> beam.PCollection:
        return (
            rejects
            | "KeyByReason" >> beam.Map(_key_by_reason)
            | "GroupByReason" >> beam.GroupByKey()
            | "WriteReasonFile" >> beam.Map(_write_rejects, self._output)
        )


class _FinalizeFn(beam.DoFn):
    def __init__(self, *, output: str, windows: WindowSpec, inputs: list[str],
                 reading: dict[str, Any], tokenizer_path: str | None,
                 expected_files: dict[str, int] | None) -> None:
        self._output = output
        self._windows = windows
        self._inputs = inputs
        self._reading = reading
        self._tokenizer_path = tokenizer_path
        self._expected_files = expected_files

    def process(self, _: Any, shards: list[WrittenShard], rejects: dict[str, int],
                receipts: list[Receipt], num_shards: int) -> Iterator[dict]:
        # Before anything is written: every input was read exactly once.
        records = account_inputs(receipts, self._expected_files)
        shards = list(shards)
        done = {s.index for s in shards}
        if len(done) != len(shards) or not done <= set(range(num_shards)):
            raise RuntimeError(f"shards were written twice or out of range: {sorted(done)}")
        window = self._windows.window
        for index in sorted(set(range(num_shards)) - done):
            # A key range that no document fell in still gets its (empty) file.
            shards.append(_write_shard_file(output=self._output, index=index,
                                            num_shards=num_shards, rows=ShardRows([]),
                                            window=window))
        manifest = build_manifest(
            tokenizer=load_tokenizer(self._tokenizer_path).info(),
            windows=self._windows.to_json(),
            inputs=self._inputs,
            reading=self._reading,
            shards=shards,
            skipped=dict(rejects),
            records=records,
            row_group_rows=row_group_rows(window),
            versions=_versions(),
        )
        tmp = fs.join(self._output, TMP_DIR)
        fs.write_atomically(fs.join(self._output, MANIFEST_NAME),
                            lambda f: f.write(dumps_manifest(manifest)), tmp)
        # Temporary files of failed attempts (and, on local disks, their directory).
        fs.delete(fs.list_dir(tmp) + ([tmp] if fs.exists(tmp) else []))
        yield manifest


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("token-windows", "apache-beam", "pyarrow", "numpy", "sentencepiece"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


class FinalizeDataset(beam.PTransform):
    """Writes ``_manifest.json`` once every shard and reject file is written, then cleans up.

    The shards, reject counts and input receipts arrive as side inputs, so the runner cannot
    start this step before they are complete. It fails the job, writing no manifest, if any
    input was not read exactly once (`transforms.chunks.account_inputs`, checked against
    ``expected_files`` when the launcher matched the inputs), or if records read ≠ documents
    written + records skipped.

    Args:
        output: the output directory.
        windows: the window parameters (the manifest's ``windows``).
        inputs: the ``--input`` patterns; reading: the manifest's ``reading`` object.
        tokenizer_path: the SentencePiece model, or None for bytes (the manifest's
            ``tokenizer``).
        expected_files: {path: size} as matched at launch, or None (a dry run).
        shards, reject_counts, receipts, num_shards: what the other steps emit.
    """

    def __init__(self, *, output: str, windows: WindowSpec, inputs: list[str],
                 reading: dict[str, Any], tokenizer_path: str | None,
                 expected_files: dict[str, int] | None, shards: beam.PCollection,
                 reject_counts: beam.PCollection, receipts: beam.PCollection,
                 num_shards: beam.PCollection) -> None:
        super().__init__()
        self._fn = _FinalizeFn(output=output, windows=windows, inputs=inputs, reading=reading,
                               tokenizer_path=tokenizer_path, expected_files=expected_files)
        self._side_inputs = {
            "shards": beam.pvalue.AsList(shards),
            "rejects": beam.pvalue.AsDict(reject_counts),
            "receipts": beam.pvalue.AsList(receipts),
            "num_shards": beam.pvalue.AsSingleton(num_shards),
        }

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        return (
            pbegin
            | "Once" >> beam.Create([None])
            | "WriteManifest" >> beam.ParDo(self._fn, **self._side_inputs)
        )
