"""The job's PTransforms. Each DoFn is a few lines around a pure function of `transforms`.

    SplitInputs ─▶ EncodeChunks ─▶ ShuffleDocuments ─▶ WriteShards
     (chunks)       │ ▲        (blocks by shard)            │
                    │ └── ChooseNumShards (from the chunks)  │
                    ├── rejects ─────────▶ WriteRejects ◀────┤ duplicate ids
                    └── input receipts ─▶ FinalizeDataset ◀──┘ shard and reject counts
                                          (manifest.json, written last)

Order never comes from arrival: documents are keyed by `transforms.keys.doc_key` and
sorted inside their shard, so runners, worker counts and bundle sizes do not change a byte.
`beam.Reshuffle` appears only as a fusion break (to spread file chunks over workers).

Speed: a document is never a Beam element. `EncodeChunks` parses, encodes, plans and packs
a chunk's documents in batches (encoding one batch while it parses and packs others), and
they cross the shuffle as a few large blocks of packed documents under Beam's bytes coder.
Batch and block boundaries never reach the output. `bench/bench_job.py` measures the job
against a one-process script.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import typing
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils import shared

from pipeline import fs
from transforms.documents import (
    Document,
    Receipt,
    Reject,
    account_inputs,
    detect_format,
    line_starts_in,
    parse_lines,
    parse_parquet,
    parse_text_file,
    pattern_base,
    relative_name,
    source_order,
)
from transforms.keys import doc_keys
from transforms.params import ReadSpec, WindowSpec
from transforms.schema import MANIFEST_NAME, REJECTS_DIR, dumps_manifest, shard_file_name
from transforms.shards import (
    PackedDocuments,
    ShardRows,
    build_manifest,
    pack_blocks,
    write_rows,
)
from transforms.tokenizers import Tokenizer, tokenizer_from_bytes
from transforms.windows import plan_windows_batch

__all__ = [
    "BATCH_CHARS",
    "BATCH_DOCS",
    "CHUNK_BYTES",
    "TARGET_SHARD_INPUT_BYTES",
    "Chunk",
    "ChooseNumShards",
    "EncodeChunks",
    "FinalizeDataset",
    "ShuffleDocuments",
    "SplitInputs",
    "WriteRejects",
    "WriteShards",
    "load_tokenizer",
]

_LOG = logging.getLogger("token_windows")

# An uncompressed line-oriented file is read in ranges of this many bytes, in parallel.
CHUNK_BYTES = 64 << 20
# Documents are encoded, planned and packed in batches of at most this many documents and
# characters.
BATCH_DOCS = 4096
BATCH_CHARS = 1 << 20
# Batches being encoded at once, each on its own helper thread: two keep the cores busy
# when one batch's documents split unevenly across SentencePiece's threads.
ENCODING_AHEAD = 2
# Without --num-shards: one shard per this many bytes of input files.
TARGET_SHARD_INPUT_BYTES = 64 << 20
# A worker writes at most this many shards at once (and no more than it has cores).
SHARDS_AT_ONCE = 4
TMP_DIR = ".tmp"
REJECTS = "rejects"
RECORDS = "records"


class Chunk(typing.NamedTuple):
    """A piece of one input file that one worker parses."""

    path: str
    rel: str
    fmt: str
    compression: str | None
    start: int  # byte offset, or first row group for Parquet
    end: int
    first: int | None  # first line (1-based) or row (0-based); None: still to be counted
    size: int  # the file's size in bytes
    extent: int  # what start/end range over: the size, or the number of row groups

    def receipt(self, records: int) -> Receipt:
        return Receipt(self.path, self.size, self.extent, self.start, self.end, records)


def load_tokenizer(path: str | None, num_threads: int = 1) -> Tokenizer:
    """The tokenizer named by ``--tokenizer`` (None: bytes), read through FileSystems.

    Raises:
        ValueError: the model cannot be read or is not a usable SentencePiece model.
    """
    if path is None:
        return tokenizer_from_bytes(None, where="bytes")
    try:
        model = fs.read_bytes(path)
    except Exception as e:  # FileSystems raises BeamIOError, OSError, or a cloud error
        raise ValueError(
            f"--tokenizer {path} cannot be read ({e}); pass the path of a SentencePiece "
            ".model file or --tokenizer bytes"
        ) from e
    return tokenizer_from_bytes(model, where=path, num_threads=num_threads)


# ----------------------------------------------------------------------------- reading


class _MatchPatternFn(beam.DoFn):
    def process(self, item: tuple[int, str]) -> Iterator[tuple[str, tuple[int, str, int]]]:
        index, pattern = item
        found = FileSystems.match([pattern])[0].metadata_list
        if not found:
            raise ValueError(f"--input {pattern} matches no file; check the path and quoting")
        for meta in found:
            rel = relative_name(meta.path, pattern_base(pattern))
            yield meta.path, (index, rel, meta.size_in_bytes)


class _PlanChunksFn(beam.DoFn):
    """(path, [(pattern index, rel, size) of each pattern that matched it]) → the file's
    chunks, read as the first pattern's."""

    def __init__(self, spec: ReadSpec, chunk_bytes: int) -> None:
        self._spec = spec
        self._chunk_bytes = chunk_bytes

    def process(self, item: tuple[str, Iterable[tuple[int, str, int]]]) -> Iterator[Chunk]:
        path, matches = item
        _, rel, size = min(matches)  # the size the match found: no second look-up
        fmt, compression = detect_format(path, self._spec.format)
        if fmt == "parquet":
            yield from _parquet_chunks(path, rel, compression, size, self._chunk_bytes)
            return
        if fmt == "text" or compression is not None or size <= self._chunk_bytes:
            yield Chunk(path, rel, fmt, compression, 0, size, 1, size, size)
            return
        for start in range(0, size, self._chunk_bytes):
            end = min(start + self._chunk_bytes, size)
            yield Chunk(path, rel, fmt, None, start, end, None, size, size)


def _parquet_chunks(
    path: str, rel: str, compression: str | None, file_size: int, chunk_bytes: int
) -> Iterator[Chunk]:
    if compression is not None:
        raise ValueError(f"{path}: compress Parquet inside the file (its codecs), not around it")
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        meta = pq.ParquetFile(f).metadata
    groups = meta.num_row_groups
    row, group, first_group, first_row, size = 0, 0, 0, 0, 0
    for group in range(groups):
        if size >= chunk_bytes:
            yield Chunk(path, rel, "parquet", None, first_group, group, first_row, file_size,
                        groups)
            first_group, first_row, size = group, row, 0
        size += meta.row_group(group).total_byte_size
        row += meta.row_group(group).num_rows
    yield Chunk(path, rel, "parquet", None, first_group, groups, first_row, file_size, groups)


def _count_lines(chunk: Chunk) -> tuple[str, tuple[Chunk, int]]:
    """(path, (chunk, the number of lines that start in it)); 0 for a chunk already numbered
    (a whole file, or Parquet row groups)."""
    if chunk.first is not None:
        return chunk.path, (chunk, 0)
    first = max(chunk.start - 1, 0)
    with FileSystems.open(chunk.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.seek(first)
        data = f.read(chunk.end - first)
    return chunk.path, (chunk, line_starts_in(data, chunk.start, chunk.end))


def _number_chunks(item: tuple[str, Iterable[tuple[Chunk, int]]]) -> Iterator[Chunk]:
    line = 1
    for chunk, lines in sorted(item[1], key=lambda c: c[0].start):
        yield chunk if chunk.first is not None else chunk._replace(first=line)
        line += lines


class SplitInputs(beam.PTransform):
    """Input patterns → the chunks (`Chunk`) that workers parse, each file's exactly once.

    Files are matched on the workers (nothing is listed while the graph is built), files
    matched by several patterns are read once (as the first pattern's), and uncompressed
    line files larger than `CHUNK_BYTES` become byte ranges, after a parallel pass that
    counts each range's lines so that ids keep true line numbers.
    """

    def __init__(self, patterns: Iterable[str], spec: ReadSpec, chunk_bytes: int = CHUNK_BYTES):
        super().__init__()
        self._patterns = list(patterns)
        self._spec = spec
        self._chunk_bytes = chunk_bytes

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        return (
            pbegin
            | "Patterns" >> beam.Create(list(enumerate(self._patterns)))
            | "MatchFiles" >> beam.ParDo(_MatchPatternFn())
            | "ReadEachFileOnce" >> beam.GroupByKey()
            | "PlanChunks" >> beam.ParDo(_PlanChunksFn(self._spec, self._chunk_bytes))
            | "SpreadChunks" >> beam.Reshuffle()
            | "CountLines" >> beam.Map(_count_lines)
            | "GroupChunksOfFile" >> beam.GroupByKey()
            | "NumberLines" >> beam.FlatMap(_number_chunks)
            | "SpreadNumberedChunks" >> beam.Reshuffle()
        )


def _shards_for_sizes(item: tuple[None, Iterable[int]], target_bytes: int) -> int:
    return max(1, math.ceil(sum(item[1]) / target_bytes))


class ChooseNumShards(beam.PTransform):
    """Chunks → the shard count (a singleton): ``num_shards``, or one shard per
    ``target_bytes`` of input files (their sizes as stored, each file once)."""

    def __init__(self, num_shards: int | None, target_bytes: int = TARGET_SHARD_INPUT_BYTES):
        super().__init__()
        self._num_shards = num_shards
        self._target = target_bytes

    def expand(self, chunks: beam.PCollection) -> beam.PCollection:
        if self._num_shards is not None:
            return chunks.pipeline | "Given" >> beam.Create([self._num_shards])
        return (
            chunks
            | "FileSizes" >> beam.Map(lambda c: (None, c.size if c.start == 0 else 0))
            | "AllSizes" >> beam.GroupByKey()
            | "FromInputBytes" >> beam.Map(_shards_for_sizes, self._target)
        )


# ------------------------------------------------------------------------- encoding


class _EncodeChunkFn(beam.DoFn):
    """A chunk → blocks of its documents, encoded, planned and packed by shard; plus its
    rejects and its receipt as tagged outputs.

    The chunk's documents go through in batches of about `BATCH_CHARS` characters. While
    SentencePiece encodes batches (up to `ENCODING_AHEAD` at once on helper threads, off the
    GIL, each with its own threads), this thread parses the batches after them and plans and
    packs the ones before, so the worker's cores stay busy. Each document is encoded, planned
    and packed alone: batches never show in the output.
    """

    def __init__(self, spec: ReadSpec, windows: WindowSpec, tokenizer_path: str | None,
                 handle: shared.Shared, threads: int | None, batch_chars: int) -> None:
        self._batch_chars = batch_chars
        self._spec = spec
        self._windows = windows
        self._path = tokenizer_path
        self._handle = handle
        self._threads = threads
        self._records = Metrics.counter("read", "records")
        self._tokens = Metrics.counter("tokenize", "tokens")
        self._windows_made = Metrics.counter("windows", "windows")

    def setup(self) -> None:
        # One model per worker process, however many threads or DoFn instances it runs; by
        # default as many SentencePiece threads as the worker's machine has cores.
        threads = self._threads or os.cpu_count() or 1
        self._tokenizer = self._handle.acquire(
            lambda: _Holder(load_tokenizer(self._path, threads)),
            tag=f"{self._path or 'bytes'}@{threads}",
        ).tokenizer
        self._pool = ThreadPoolExecutor(ENCODING_AHEAD, thread_name_prefix="encode")

    def teardown(self) -> None:
        pool = getattr(self, "_pool", None)  # None when setup failed
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def process(self, chunk: Chunk, num_shards: int) -> Iterator[Any]:
        pending: collections.deque[tuple[list[Document], Future]] = collections.deque()
        records = 0
        for batch in self._batches(chunk):
            if isinstance(batch, Reject):
                records += 1
                Metrics.counter("rejects", batch.reason).inc()
                yield beam.pvalue.TaggedOutput(REJECTS, batch)
                continue
            records += len(batch)
            pending.append((batch, self._pool.submit(self._encode, batch)))
            if len(pending) > ENCODING_AHEAD:
                yield from self._pack(*pending.popleft(), num_shards)
        while pending:
            yield from self._pack(*pending.popleft(), num_shards)
        self._records.inc(records)
        yield beam.pvalue.TaggedOutput(RECORDS, chunk.receipt(records))

    def _batches(self, chunk: Chunk) -> Iterator[list[Document] | Reject]:
        """The chunk's documents in batches, and its rejects as they come."""
        docs: list[Document] = []
        chars = 0
        for item in self._parse(chunk):
            if isinstance(item, Reject):
                yield item
                continue
            docs.append(item)
            chars += len(item.text)
            if len(docs) >= BATCH_DOCS or chars >= self._batch_chars:
                yield docs
                docs, chars = [], 0
        if docs:
            yield docs

    def _encode(self, docs: list[Document]) -> list[Any]:
        return self._tokenizer.encode_batch([d.text for d in docs])

    def _pack(self, docs: list[Document], encoding: Future,
              num_shards: int) -> Iterator[tuple[int, bytes]]:
        tokens = encoding.result()
        ids = [d.doc_id for d in docs]
        m = np.fromiter(map(len, tokens), np.int64, len(tokens))
        plans = plan_windows_batch(m - 1, self._windows, ids)
        self._tokens.inc(int(m.sum()))
        self._windows_made.inc(len(plans.starts))
        yield from pack_blocks(
            doc_keys=doc_keys(self._windows.seed, ids),
            doc_ids=ids,
            sources=[d.source for d in docs],
            tokens=tokens,
            plans=plans,
            repaired=[d.repaired for d in docs],
            num_shards=num_shards,
        )

    def _parse(self, c: Chunk) -> Iterable[Document | Reject]:
        spec, first = self._spec, (1 if c.first is None else c.first)
        try:
            if c.fmt == "text":
                return [parse_text_file(fs.read_bytes(c.path, c.compression), path=c.path,
                                        rel=c.rel, spec=spec)]
            if c.fmt == "parquet":
                with FileSystems.open(c.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                    table = pq.ParquetFile(f).read_row_groups(range(c.start, c.end))
                return list(parse_parquet(table, path=c.path, rel=c.rel, first_row=first,
                                          spec=spec))
            data = (
                fs.read_bytes(c.path, c.compression)
                if c.compression is not None
                else fs.read_line_range(c.path, c.start, c.end)
            )
            return parse_lines(data, fmt=c.fmt, path=c.path, rel=c.rel, first_line=first,
                               spec=spec)
        except ValueError:
            raise
        except Exception as e:  # a file that cannot be read fails the job, naming it
            raise OSError(f"cannot read input file {c.path}: {e}") from e


class _Holder:
    """A weak-referenceable box (``shared.Shared`` needs one)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer


class _Pool(ThreadPoolExecutor):
    """A thread pool that ``shared.Shared`` can hold (it needs a weak reference)."""


class EncodeChunks(beam.PTransform):
    """Chunks → (shard, block of packed documents), with tagged ``rejects`` and ``records``
    (one `transforms.documents.Receipt` per chunk).

    Each chunk is parsed (`transforms.documents`), each document encoded as
    ``z = [BOS, ids…, EOS]`` (`transforms.tokenizers`), its windows planned
    (`transforms.windows.plan_windows`) and the document packed with its seeded key into the
    block of its shard (`transforms.shards.pack_blocks`): one step, so documents never
    exist as Beam elements.

    Args:
        spec: how to read the inputs.
        windows: the window parameters (and the seed of the keys).
        tokenizer_path: a SentencePiece ``.model`` path, or None for the bytes tokenizer.
        num_shards: the shard count, a singleton PCollection (`ChooseNumShards`).
        threads: SentencePiece threads per worker process (None: as many as the worker's
            machine has cores). Each document is encoded alone, so the ids do not depend
            on it.
        batch_chars: documents are encoded in batches of about this many characters (the
            output does not depend on it either).
    """

    def __init__(self, spec: ReadSpec, windows: WindowSpec, tokenizer_path: str | None,
                 num_shards: beam.PCollection, threads: int | None = None,
                 batch_chars: int = BATCH_CHARS):
        super().__init__()
        self._fn = _EncodeChunkFn(spec, windows, tokenizer_path, shared.Shared(), threads,
                                  batch_chars)
        self._num_shards = num_shards

    def expand(self, chunks: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return chunks | "Encode" >> beam.ParDo(
            self._fn, num_shards=beam.pvalue.AsSingleton(self._num_shards)
        ).with_outputs(REJECTS, RECORDS, main="blocks")


# ------------------------------------------------------------------ shuffle and write


def _collect_blocks(item: tuple[int, Iterable[bytes]]) -> tuple[int, PackedDocuments]:
    shard, blocks = item
    return shard, PackedDocuments(blocks)


class ShuffleDocuments(beam.PTransform):
    """(shard, block) → (shard, its packed documents): the one shuffle of the job.

    Documents cross it packed in blocks (`transforms.shards.pack_blocks`), one per batch and
    shard, each a byte string under Beam's bytes coder, so the runner moves a few large
    elements, not one per document. What a block holds depends on batching, what a shard
    holds does not, and `WriteShards` orders each shard by key. The packed documents of a
    shard come as `transforms.shards.PackedDocuments`: an iterable of `pack_document` byte
    strings that `ShardRows` reads block by block.
    """

    def expand(self, blocks: beam.PCollection) -> beam.PCollection:
        return (
            blocks
            | "GroupByShard" >> beam.GroupByKey()
            | "CollectBlocks" >> beam.Map(_collect_blocks)
        )


class _WriteShardFn(beam.DoFn):
    """Writes each shard on a helper thread (pyarrow encodes and compresses off the GIL),
    up to `SHARDS_AT_ONCE` at a time per worker process (and no more than it has cores),
    and emits its counts and rejects as it finishes, in arrival order; the last ones when
    the bundle ends."""

    def __init__(self, output: str, window: int) -> None:
        self._output = output
        self._window = window
        self._handle = shared.Shared()

    def setup(self) -> None:
        # One pool per worker process, shared by its threads: a process never holds more
        # than that many shards being written.
        self._at_once = max(1, min(SHARDS_AT_ONCE, os.cpu_count() or 1))
        self._pool = self._handle.acquire(
            lambda: _Pool(self._at_once, thread_name_prefix="write-shard"), tag="write-shard")

    def start_bundle(self) -> None:
        self._writing: list[Future] = []

    def process(self, item: tuple[int, Iterable[bytes]], num_shards: int) -> Iterator[Any]:
        index, packed = item
        self._writing.append(self._pool.submit(self._write, index, packed, num_shards))
        while self._writing and (self._writing[0].done() or len(self._writing) > self._at_once):
            yield from self._finished(self._writing.pop(0))

    def finish_bundle(self) -> Iterator[Any]:
        # The job runs in the global window (a batch job), as Beam's own file sinks assume.
        while self._writing:
            yield from self._finished(self._writing.pop(0))

    def _write(self, index: int, packed: Iterable[bytes],
               num_shards: int) -> tuple[list[Reject], dict]:
        rows = ShardRows(packed)
        return rows.rejects, _write_one(self._output, index, num_shards, rows, self._window)

    def _finished(self, future: Future) -> Iterator[Any]:
        rejects, shard = future.result()
        Metrics.counter("write", "shards").inc()
        for reject in rejects:
            Metrics.counter("rejects", reject.reason).inc()
            yield beam.pvalue.TaggedOutput(REJECTS, GlobalWindows.windowed_value(reject))
        yield GlobalWindows.windowed_value(shard)


def _write_one(output: str, index: int, num_shards: int, rows: ShardRows, window: int) -> dict:
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
    _LOG.info("wrote %s: %d documents, %d windows, %.1f MB", name, rows.counts["documents"],
              rows.counts["rows"], size / 1e6)
    return {"file": name, "index": index, "sha256": sha, "bytes": size, **rows.counts}


class WriteShards(beam.PTransform):
    """(shard, [packed documents]) → one Parquet file each; emits the shard's counts.

    Rejects (duplicate ids) leave by the tagged output ``rejects``.
    """

    def __init__(self, output: str, window: int, num_shards: beam.PCollection):
        super().__init__()
        self._output = output
        self._window = window
        self._num_shards = num_shards

    def expand(self, groups: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return groups | "WriteShard" >> beam.ParDo(
            _WriteShardFn(self._output, self._window),
            num_shards=beam.pvalue.AsSingleton(self._num_shards),
        ).with_outputs(REJECTS, main="shards")


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
    """Rejects → ``OUTPUT/rejects/<reason>.jsonl`` (in input order, `source_order`); emits
    (reason, count)."""

    def __init__(self, output: str):
        super().__init__()
        self._output = output

    def expand(self, rejects: beam.PCollection) -> beam.PCollection:
        return (
            rejects
            | "KeyByReason" >> beam.Map(lambda r: (r.reason, r))
            | "GroupByReason" >> beam.GroupByKey()
            | "WriteReasonFile" >> beam.Map(_write_rejects, self._output)
        )


class _FinalizeFn(beam.DoFn):
    def __init__(self, *, output: str, window_spec: WindowSpec, inputs: list[str],
                 reading: dict[str, Any], tokenizer_path: str | None,
                 expected_files: dict[str, int] | None) -> None:
        self._expected_files = expected_files
        self._output = output
        self._spec = window_spec
        self._inputs = inputs
        self._reading = reading
        self._tokenizer_path = tokenizer_path

    def process(self, _: Any, shards: list[dict], rejects: dict[str, int],
                receipts: list[Receipt], num_shards: int) -> Iterator[dict]:
        # Before anything is written: every input was read exactly once.
        records = account_inputs(receipts, self._expected_files)
        shards = list(shards)
        done = {s["index"] for s in shards}
        if len(done) != len(shards) or not done <= set(range(num_shards)):
            raise RuntimeError(f"shards were written twice or out of range: {sorted(done)}")
        for index in sorted(set(range(num_shards)) - done):
            # A key range that no document fell in still gets its (empty) file.
            shards.append(
                _write_one(self._output, index, num_shards, ShardRows([]), self._spec.window)
            )
        manifest = build_manifest(
            tokenizer=load_tokenizer(self._tokenizer_path).info(),
            windows=self._spec.to_json(),
            inputs=self._inputs,
            reading=self._reading,
            shards=shards,
            skipped=dict(rejects),
            records=records,
            versions=_versions(),
        )
        fs.write_atomically(
            fs.join(self._output, MANIFEST_NAME),
            lambda f: f.write(dumps_manifest(manifest)),
            fs.join(self._output, TMP_DIR),
        )
        # Temporary files of failed attempts (and, on local disks, their directory).
        tmp = fs.join(self._output, TMP_DIR)
        leftovers = fs.list_dir(tmp) + ([tmp] if FileSystems.exists(tmp) else [])
        if leftovers:
            FileSystems.delete(leftovers)
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
    """Writes ``manifest.json`` once every shard and reject file is written, then cleans up.

    The shard counts, reject counts and input receipts arrive as side inputs, so the runner
    cannot start this step before they are complete. It fails the job, writing no manifest,
    if any input was not read exactly once (`transforms.documents.account_inputs`, checked
    against ``expected_files`` when the launcher matched the inputs), or if records read ≠
    documents written + records skipped.
    """

    def __init__(self, *, output: str, window_spec: WindowSpec, inputs: list[str],
                 reading: dict[str, Any], tokenizer_path: str | None,
                 expected_files: dict[str, int] | None,
                 shards: beam.PCollection, reject_counts: beam.PCollection,
                 receipts: beam.PCollection, num_shards: beam.PCollection):
        super().__init__()
        self._fn = _FinalizeFn(output=output, window_spec=window_spec, inputs=inputs,
                               reading=reading, tokenizer_path=tokenizer_path,
                               expected_files=expected_files)
        self._shards = shards
        self._reject_counts = reject_counts
        self._receipts = receipts
        self._num_shards = num_shards

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        return (
            pbegin
            | "Once" >> beam.Create([None])
            | "WriteManifest"
            >> beam.ParDo(
                self._fn,
                shards=beam.pvalue.AsList(self._shards),
                rejects=beam.pvalue.AsDict(self._reject_counts),
                receipts=beam.pvalue.AsList(self._receipts),
                num_shards=beam.pvalue.AsSingleton(self._num_shards),
            )
        )
