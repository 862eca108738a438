"""The job's PTransforms. Each DoFn is a few lines around a pure function of `transforms`.

    ReadDocuments ─▶ TokenizeDocuments ─▶ CutWindows ─▶ ShuffleDocuments ─▶ WriteShards
          │                                                                    │
          └──────────── rejects ──────────▶ WriteRejects ◀── duplicate ids ────┘
                                                 │
                       FinalizeDataset (manifest.json, written last) ◀─ counts

Order never comes from arrival: documents are keyed by `transforms.keys.doc_key` and
sorted inside their shard, so runners, worker counts and bundle sizes do not change a byte.
`beam.Reshuffle` appears only as a fusion break (to spread file chunks over workers).

Speed: documents travel from parsing to packing as Beam batches (lists, through Batched
DoFns: one call per list, not per document), and cross the shuffle as a few large blocks
of packed documents under Beam's bytes coder. Batch and block boundaries never reach the
output. `bench/bench_job.py` measures the job against a one-process script.
"""

from __future__ import annotations

import json
import logging
import math
import os
import typing
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
from apache_beam import typehints
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
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
)
from transforms.keys import doc_key
from transforms.params import ReadSpec, WindowSpec
from transforms.schema import MANIFEST_NAME, REJECTS_DIR, dumps_manifest, shard_file_name
from transforms.shards import (
    PackedDocuments,
    ShardRows,
    build_manifest,
    pack_block,
    shard_blocks,
    write_rows,
)
from transforms.tokenizers import Tokenizer, tokenizer_from_bytes
from transforms.windows import WindowPlan, plan_windows_batch

__all__ = [
    "BATCH_CHARS",
    "BATCH_DOCS",
    "CHUNK_BYTES",
    "TARGET_SHARD_BYTES",
    "CutWindows",
    "FinalizeDataset",
    "ReadDocuments",
    "ShuffleDocuments",
    "TokenizeDocuments",
    "WriteRejects",
    "WriteShards",
    "load_tokenizer",
]

_LOG = logging.getLogger("token_windows")

# An uncompressed line-oriented file is read in ranges of this many bytes, in parallel.
CHUNK_BYTES = 64 << 20
# Documents move from parsing to packing in lists of at most this many documents and
# characters (Beam batches: one call per list, not per document).
BATCH_DOCS = 4096
BATCH_CHARS = 4 << 20
# Without --num-shards, aim at this many bytes of int32 token ids per shard.
TARGET_SHARD_BYTES = 256 << 20
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


class TokenizedDocument(typing.NamedTuple):
    doc: Document
    tokens: Any  # np.ndarray[int32], the whole z


class WindowedDocument(typing.NamedTuple):
    doc: Document
    tokens: Any
    plan: WindowPlan


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
    def process(self, item: tuple[int, str]) -> Iterator[tuple[str, tuple[int, str]]]:
        index, pattern = item
        found = FileSystems.match([pattern])[0].metadata_list
        if not found:
            raise ValueError(f"--input {pattern} matches no file; check the path and quoting")
        for meta in found:
            yield meta.path, (index, relative_name(meta.path, pattern_base(pattern)))


class _PlanChunksFn(beam.DoFn):
    def __init__(self, spec: ReadSpec, chunk_bytes: int) -> None:
        self._spec = spec
        self._chunk_bytes = chunk_bytes

    def process(self, item: tuple[str, tuple[int, str]]) -> Iterator[Chunk]:
        path, (_, rel) = item
        fmt, compression = detect_format(path, self._spec.format)
        size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
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
    first = max(chunk.start - 1, 0)
    with FileSystems.open(chunk.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.seek(first)
        data = f.read(chunk.end - first)
    return chunk.path, (chunk, line_starts_in(data, chunk.start, chunk.end))


def _number_chunks(item: tuple[str, Iterable[tuple[Chunk, int]]]) -> Iterator[Chunk]:
    line = 1
    for chunk, lines in sorted(item[1], key=lambda c: c[0].start):
        yield chunk._replace(first=line)
        line += lines


class _ParseChunkFn(beam.DoFn):
    """A chunk → its documents in Beam batches (lists the steps after it take whole), plus
    its rejects (a batch) and its record count as tagged outputs."""

    def __init__(self, spec: ReadSpec) -> None:
        self._spec = spec
        self._records = Metrics.counter("read", "records")

    def infer_output_type(self, input_type: Any) -> Any:
        return Any

    def get_output_batch_type(self, input_element_type: Any) -> Any:
        return typehints.List[Any]

    @beam.DoFn.yields_batches
    def process(self, chunk: Chunk) -> Iterator[Any]:
        docs: list[Document] = []
        rejects: list[Reject] = []
        count = chars = 0
        for item in self._parse(chunk):
            count += 1
            if isinstance(item, Reject):
                Metrics.counter("rejects", item.reason).inc()
                rejects.append(item)
                continue
            docs.append(item)
            chars += len(item.text)
            if len(docs) >= BATCH_DOCS or chars >= BATCH_CHARS:
                yield docs
                docs, chars = [], 0
        if docs:
            yield docs
        if rejects:
            yield beam.pvalue.TaggedOutput(REJECTS, rejects)
        self._records.inc(count)
        yield beam.pvalue.TaggedOutput(RECORDS, [chunk.receipt(count)])

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


class ReadDocuments(beam.PTransform):
    """Input patterns → documents, plus tagged ``rejects`` and per-chunk ``records`` counts.

    Files are matched on the workers (nothing is listed while the graph is built), files
    matched by several patterns are read once (as the first pattern's), and uncompressed
    line files larger than `CHUNK_BYTES` are parsed in parallel ranges, after a parallel pass
    that counts each range's lines so that ids keep true line numbers.
    """

    def __init__(self, patterns: Iterable[str], spec: ReadSpec, chunk_bytes: int = CHUNK_BYTES):
        super().__init__()
        self._patterns = list(patterns)
        self._spec = spec
        self._chunk_bytes = chunk_bytes

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.pvalue.DoOutputsTuple:
        chunks = (
            pbegin
            | "Patterns" >> beam.Create(list(enumerate(self._patterns)))
            | "MatchFiles" >> beam.ParDo(_MatchPatternFn())
            | "ReadEachFileOnce" >> beam.CombinePerKey(min)
            | "PlanChunks" >> beam.ParDo(_PlanChunksFn(self._spec, self._chunk_bytes))
            | "SpreadChunks" >> beam.Reshuffle()
        )
        counted = (
            chunks
            | "NeedsLineCount" >> beam.Filter(lambda c: c.first is None)
            | "CountLines" >> beam.Map(_count_lines)
            | "GroupChunksOfFile" >> beam.GroupByKey()
            | "NumberLines" >> beam.FlatMap(_number_chunks)
        )
        numbered = chunks | "AlreadyNumbered" >> beam.Filter(lambda c: c.first is not None)
        return (
            (numbered, counted)
            | "AllChunks" >> beam.Flatten()
            | "SpreadNumberedChunks" >> beam.Reshuffle()
            | "ParseChunks"
            >> beam.ParDo(_ParseChunkFn(self._spec)).with_outputs(REJECTS, RECORDS, main="docs")
        )


# ------------------------------------------------------------------------ tokenizing
#
# Documents travel through TokenizeDocuments, CutWindows and the packing step of
# ShuffleDocuments as Beam *batches* (lists of up to a few thousand documents): Batched DoFns
# (`process_batch`) hand a list from one step to the next without a per-document call, and
# Beam explodes a batch into elements only for a consumer that wants elements. The batch
# boundaries never reach the output: each document is encoded, planned and packed alone.


class _BatchedFn(beam.DoFn):
    """A DoFn over lists of elements of whatever type its input has."""

    def get_input_batch_type(self, input_element_type: Any) -> Any:
        return typehints.List[input_element_type]

    def get_output_batch_type(self, input_element_type: Any) -> Any:
        return typehints.List[Any]


class _TokenizeFn(_BatchedFn):
    def __init__(
        self, tokenizer_path: str | None, handle: shared.Shared, threads: int | None
    ) -> None:
        self._path = tokenizer_path
        self._handle = handle
        self._threads = threads
        self._tokens = Metrics.counter("tokenize", "tokens")

    def setup(self) -> None:
        # One model per worker process, however many threads or DoFn instances it runs; by
        # default as many SentencePiece threads as the worker's machine has cores.
        threads = self._threads or os.cpu_count() or 1
        self._tokenizer = self._handle.acquire(
            lambda: _Holder(load_tokenizer(self._path, threads)),
            tag=f"{self._path or 'bytes'}@{threads}",
        ).tokenizer

    def process_batch(self, batch: list[Document]) -> Iterator[list[TokenizedDocument]]:
        encoded = self._tokenizer.encode_batch([d.text for d in batch])
        self._tokens.inc(sum(map(len, encoded)))
        yield list(map(TokenizedDocument, batch, encoded))


class _Holder:
    """A weak-referenceable box (``shared.Shared`` needs one)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer


class TokenizeDocuments(beam.PTransform):
    """Documents → (document, z) with ``z = [BOS, ids…, EOS]`` as an int32 array.

    Args:
        tokenizer_path: a SentencePiece ``.model`` path, or None for the bytes tokenizer.
        threads: SentencePiece threads per worker process (None: as many as the worker's
            machine has cores). Each document is encoded alone, so the ids do not depend
            on it.
    """

    def __init__(self, tokenizer_path: str | None, threads: int | None = None):
        super().__init__()
        self._path = tokenizer_path
        self._threads = threads

    def expand(self, docs: beam.PCollection) -> beam.PCollection:
        return docs | "Encode" >> beam.ParDo(
            _TokenizeFn(self._path, shared.Shared(), self._threads)
        )


# ------------------------------------------------------------------------- windowing


class _CutWindowsFn(_BatchedFn):
    def __init__(self, spec: WindowSpec) -> None:
        self._spec = spec
        self._windows = Metrics.counter("windows", "windows")

    def process_batch(self, batch: list[TokenizedDocument]) -> Iterator[list[WindowedDocument]]:
        plans = plan_windows_batch(
            [len(t.tokens) - 1 for t in batch], self._spec, [t.doc.doc_id for t in batch]
        )
        self._windows.inc(sum(len(p.starts) for p in plans))
        yield [WindowedDocument(t.doc, t.tokens, p) for t, p in zip(batch, plans, strict=True)]


class CutWindows(beam.PTransform):
    """(document, z) → (document, z, window plan) by `transforms.windows.plan_windows`."""

    def __init__(self, spec: WindowSpec):
        super().__init__()
        self._spec = spec

    def expand(self, docs: beam.PCollection) -> beam.PCollection:
        return docs | "PlanWindows" >> beam.ParDo(_CutWindowsFn(self._spec))


# ------------------------------------------------------------------ shuffle and write


def _shard_count(stored_tokens: int) -> int:
    return max(1, math.ceil(stored_tokens * 4 / TARGET_SHARD_BYTES))


class _PackFn(_BatchedFn):
    """A batch of windowed documents → (token ids its rows will store, one block of them)."""

    def __init__(self, seed: int) -> None:
        self._seed = seed

    def infer_output_type(self, input_type: Any) -> Any:
        return typehints.Tuple[int, bytes]

    def get_output_batch_type(self, input_element_type: Any) -> Any:
        return None

    @beam.DoFn.yields_elements
    def process_batch(self, batch: list[WindowedDocument]) -> Iterator[tuple[int, bytes]]:
        docs = [w.doc for w in batch]
        plans = [w.plan for w in batch]
        block = pack_block(
            doc_keys=[doc_key(self._seed, d.doc_id) for d in docs],
            doc_ids=[d.doc_id for d in docs],
            sources=[d.source for d in docs],
            tokens=[w.tokens for w in batch],
            plans=plans,
            repaired=[d.repaired for d in docs],
        )
        lengths = np.concatenate([p.lengths for p in plans]) if plans else np.empty(0)
        yield int(lengths.sum(dtype=np.int64)) + len(lengths), block


def _shard_blocks(block: tuple[int, bytes], num_shards: int) -> list[tuple[int, bytes]]:
    return shard_blocks(block[1], num_shards)


def _collect_blocks(item: tuple[int, Iterable[bytes]]) -> tuple[int, PackedDocuments]:
    shard, blocks = item
    return shard, PackedDocuments(blocks)


class ShuffleDocuments(beam.PTransform):
    """Windowed documents → (shard, packed documents) by seeded key ranges.

    Documents cross the shuffle packed in blocks (`transforms.shards.pack_block`): one per
    batch and shard, each a byte string under Beam's bytes coder, so the runner moves a few
    large elements, not one per document. What a block holds depends on batching, what a
    shard holds does not, and `WriteShards` orders each shard by key. The packed documents
    of a shard come as `transforms.shards.PackedDocuments`: an iterable of
    `pack_document` byte strings that `ShardRows` reads block by block.

    The output also carries the shard count as ``.num_shards`` (a singleton PCollection):
    ``--num-shards``, or chosen from the data so a shard holds about `TARGET_SHARD_BYTES`
    of token ids.
    """

    def __init__(self, seed: int, num_shards: int | None):
        super().__init__()
        self._seed = seed
        self._num_shards = num_shards
        self.num_shards: beam.PCollection | None = None

    def expand(self, docs: beam.PCollection) -> beam.PCollection:
        blocks = docs | "PackDocuments" >> beam.ParDo(_PackFn(self._seed))
        if self._num_shards is not None:
            self.num_shards = docs.pipeline | "NumShards" >> beam.Create([self._num_shards])
        else:
            self.num_shards = (
                blocks
                | "StoredTokens" >> beam.Map(lambda block: block[0]).with_output_types(int)
                | "SumStoredTokens" >> beam.CombineGlobally(sum)
                | "ChooseNumShards" >> beam.Map(_shard_count)
            )
        return (
            blocks
            | "AssignShards"
            >> beam.FlatMap(_shard_blocks, beam.pvalue.AsSingleton(self.num_shards))
            .with_output_types(typehints.Tuple[int, bytes])
            | "GroupByShard" >> beam.GroupByKey()
            | "CollectBlocks" >> beam.Map(_collect_blocks)
        )


class _WriteShardFn(beam.DoFn):
    def __init__(self, output: str, window: int) -> None:
        self._output = output
        self._window = window

    def process(self, item: tuple[int, Iterable[bytes]], num_shards: int) -> Iterator[Any]:
        index, packed = item
        rows = ShardRows(packed)
        for reject in rows.rejects:
            Metrics.counter("rejects", reject.reason).inc()
            yield beam.pvalue.TaggedOutput(REJECTS, reject)
        yield _write_one(self._output, index, num_shards, rows, self._window)


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
    Metrics.counter("write", "shards").inc()
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
    rows = sorted(rejects, key=lambda r: (r.source, r.detail))
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
    """Rejects → ``OUTPUT/rejects/<reason>.jsonl`` (sorted by source); emits (reason, count)."""

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
