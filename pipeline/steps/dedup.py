"""The dedup pass: which documents the job removes, found before any is tokenized.

With ``--dedup`` or ``--decontaminate`` (`transforms.dedup.removal.RemovalSpec`), `FindRemovals`
reads the chunks once more before EncodeChunks does, and `JoinRemovals` hands each chunk to
EncodeChunks with the removals of its documents::

    chunks ─▶ KeyChunks ─(band, KeyBlock)─▶ GroupByBand ─▶ BucketEdges ─ edges ──────┐
                 │ └──(chunk, doc_ids)──▶ GroupIdsByChunk ◀─ wanted ─┘               │
                 │                            └─▶ Names ─ (chunk, ChunkIds) ─────────┤
                 └──────────── contaminated (chunk, [Removal]) ──────────────────────┤
                                                        Clusters (one process) ◀─────┘
    chunks ─┬──────────────────────────────────────── JoinRemovals ◀── (chunk, [Removal])
            └▶ EncodeChunks (chunk, {position: Removal}) ─▶ …

* **KeyChunks**: a chunk → its contaminated documents (`transforms.dedup.contamination`'s index
  of the evaluation texts, built once per worker process) and, for every other document,
  its exact key and band keys (`transforms.dedup.removal.chunk_keys`): one element per band per
  chunk, keys and positions end to end (20 bytes a document, no doc_id, never a text),
  and one with the chunk's doc_ids.
* **GroupByBand**, **BucketEdges**: the runner's GroupByKey by band, then in each band the
  documents sharing a key, as edges to the bucket's first (`transforms.dedup.removal.bucket_edges`),
  and the documents with an edge, whose doc_ids are wanted.
* **GroupIdsByChunk**, **Names**: each chunk's doc_ids with its wanted positions: the
  doc_ids of the documents that have a candidate copy (`transforms.dedup.removal.named`). A doc_id
  crosses a shuffle once, not once per band.
* **Clusters**: every edge, name and contaminated document under one key, in one process:
  the connected components, each keeping its smallest doc_id
  (`transforms.dedup.removal.cluster_removals`). It holds only documents that have a candidate
  copy (or are contaminated), and emits the removals keyed by chunk and one
  `RemovalSummary`.
* With the file shuffle (the local runner's default, whose GroupByKey holds its input in
  memory), KeyChunks writes each bundle's blocks and doc_ids to a key spill file
  (`transforms.dedup.key_spill`) and only its path goes on; **BucketEdges** then reads one band
  at a time from every file and joins all bands' buckets before anything goes on
  (`transforms.dedup.removal.component_edge_block`: at most two edges per document, not one per band
  a copy shares), and **Names** reads a chunk's doc_ids back only if one of its documents
  has an edge.
* Edges, wanted positions, names and removals travel in lists (per band, per chunk), not
  one element each: on a corpus with many copies, the runner's cost per element was most
  of the pass. What the runner's coder handles slowly does not travel: edges go packed
  (`transforms.dedup.removal.EdgeBlock`: a chunk table and int32 arrays, not a tuple and
  a path string per end), names as a chunk's `ChunkIds`, removals as plain tuples (a
  NamedTuple in a list is pickled one by one).
* **JoinRemovals**: the chunks and the removals grouped by chunk (a GroupByKey, not a side
  input, which Beam's DaskRunner would compute again inside every task reading it).

Every step emits from ``process`` only, one output per step or (tag, value) pairs split by
`pipeline.steps.tagged.SplitTags` (Beam's DaskRunner mixes a multi-output ParDo's outputs and
drops what ``finish_bundle`` emits). Nothing depends on arrival order: buckets and clusters
keep their smallest member, and removals are looked up by position.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import queue
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils import shared

from pipeline.files import fs
from pipeline.steps.tagged import SplitTags, StepFn
from transforms.dedup import kernel
from transforms.dedup.contamination import EvalNgramIndex
from transforms.dedup.key_spill import IDS_BAND, KeySpillWriter, read_band, read_record
from transforms.dedup.removal import (
    CONTAMINATED,
    EXACT,
    ChunkIds,
    ChunkRef,
    EdgeBlock,
    KeyBlock,
    Removal,
    RemovalSpec,
    bucket_edges,
    chunk_keys,
    cluster_removals,
    component_edge_block,
    named,
)
from transforms.inputs.chunks import Chunk, detect_format, plan_chunks, read_chunk
from transforms.inputs.documents import Document, source_order
from transforms.params import ReadSpec

if TYPE_CHECKING:
    from pipeline.launch.context import JobContext

__all__ = ["FindRemovals", "JoinRemovals", "RemovalSummary", "check_eval_files", "chunk_ref",
           "eval_index"]

_LOG = logging.getLogger("token_windows")

# The tags of the dedup pass's multi-output steps (`pipeline.steps.tagged`).
BLOCKS, IDS, REMOVALS, SUMMARY = "blocks", "ids", "removals", "summary"
EDGES, WANTED, NAMES, SPILLS = "edges", "wanted", "names", "spills"
# The one element the clusters' group always has, so that a job without a copy or a
# contaminated document still gets its summary (a GroupByKey of nothing runs nothing).
_START = "start"
# Evaluation files are read whole: one chunk per file (row groups for Parquet).
_EVAL_CHUNK_BYTES = 1 << 62


@dataclasses.dataclass(frozen=True)
class RemovalSummary:
    """What the dedup pass removed: {reason: documents} and, for ``--decontaminate``,
    {evaluation file: documents it removed} (the manifest's ``dedup``)."""

    by_reason: dict[str, int]
    by_eval_file: dict[str, int]


def chunk_ref(chunk: Chunk) -> ChunkRef:
    """The chunk's (path, start): its name in the dedup pass (unique within a job)."""
    return chunk.path, chunk.start


def eval_index(spec: RemovalSpec, read: ReadSpec) -> EvalNgramIndex:
    """The n-gram index of every evaluation text (`RemovalSpec.eval_files`), read through
    FileSystems: JSONL and Parquet records by ``read``'s text field, a plain-text file
    (``.txt``) line by line. Records that are not texts (empty, malformed) are not indexed.
    """

    def items() -> Iterator[tuple[str, int, str]]:
        for path, name, size in spec.eval_files:
            for item in _eval_records(path, name, size, read):
                if isinstance(item, Document):
                    yield name, source_order(item.source)[1], item.text

    return EvalNgramIndex.build(items(), n=spec.eval_ngram)


def _eval_records(path: str, name: str, size: int, read: ReadSpec) -> Iterator[Any]:
    """An evaluation file's documents and rejects, read as `eval_index` reads them."""
    fmt, _ = detect_format(path, None)
    spec_of = dataclasses.replace(read, format="lines" if fmt == "text" else fmt,
                                  id_field=None, keep_empty=False)
    for chunk in plan_chunks(path, rel=name, size=size, spec=spec_of, open_file=fs.open_raw,
                             chunk_bytes=_EVAL_CHUNK_BYTES):
        yield from read_chunk(chunk, spec_of, fs.open_raw)


def check_eval_files(spec: RemovalSpec, read: ReadSpec) -> None:
    """Refuse an evaluation file that holds no text the index would take (a wrong
    ``--text-field`` would otherwise remove nothing, silently).

    Raises:
        ValueError: naming the file, what its records were instead, and the fix.
    """
    for path, name, size in spec.eval_files:
        texts, why = 0, {}
        for item in _eval_records(path, name, size, read):
            if isinstance(item, Document):
                texts += 1
                break
            why[item.reason] = why.get(item.reason, 0) + 1
        if not texts:
            found = ", ".join(f"{k} {v}" for k, v in sorted(why.items())) or "no records"
            raise ValueError(
                f"--decontaminate file {name} holds no text to compare with ({found}): its "
                f"records need the text in --text-field {read.text_field!r} (JSONL, Parquet) "
                "or one text per line (.txt)")


class _KeyChunkFn(StepFn):
    """A chunk → (BLOCKS, (band, KeyBlock)) per band, (IDS, (chunk, (IDS, ChunkIds))) once
    and (REMOVALS, (chunk, rows of its `Removal`s)) once if it has contaminated documents."""

    def __init__(self, context: JobContext) -> None:
        self._spec = context.removal
        self._read = context.config.read
        self._handle = shared.Shared()
        self._documents = Metrics.counter("dedup", "documents")
        # As many hashing threads as the encoding has (--encode-threads: cores per process).
        self._threads = max(1, context.config.encode_threads)
        # With the file shuffle, each bundle's blocks go to a key spill file.
        self._spill_dir = spill_dir(context)
        self._root = context.output
        self._spill: _KeySpill | None = None

    def setup(self) -> None:
        if self._spec.dedup_active and not kernel.available:
            _say_numpy_hashes()
        # Signatures of the next batches on helper threads while this one parses the chunk.
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="dedup")
        # The hashing threads' work arrays, reused from batch to batch and chunk to chunk
        # (at most one per thread; fresh arrays for every batch cost page faults).
        self._scratches: queue.SimpleQueue = queue.SimpleQueue()
        # One index per worker process, shared by its threads and DoFn instances.
        if self._spec.eval_files:
            spec, read = self._spec, self._read
            # Shared holds weak references: a plain object (not the index itself) is kept.
            self._holder = self._handle.acquire(lambda: _Holder(eval_index(spec, read)),
                                                tag=spec)
            self._index = self._holder.value
        else:
            self._index = None

    def teardown(self) -> None:
        pool = getattr(self, "_pool", None)  # None when setup failed
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
            self._scratches = queue.SimpleQueue()
        self._abandon()

    def start_bundle(self) -> None:
        self._abandon()  # a failed bundle's file, if finish_bundle never came

    def finish_bundle(self) -> None:
        # Nothing is emitted here (Beam's DaskRunner drops it): the file's path went on
        # with the bundle's first chunk; the index and footer are written now.
        spill, self._spill = self._spill, None
        if spill is not None:
            try:
                spill.writer.finish()
                spill.file.close()
            except BaseException:
                spill.abandon()
                raise

    def _abandon(self) -> None:
        spill, self._spill = getattr(self, "_spill", None), None
        if spill is not None:
            spill.abandon()

    def process(self, chunk: Chunk) -> Iterator[tuple[str, Any]]:
        ref = chunk_ref(chunk)
        docs = (d for d in read_chunk(chunk, self._read, fs.open_raw) if isinstance(d, Document))
        removals, blocks, ids = chunk_keys(docs, chunk=ref, spec=self._spec,
                                           index=self._index, pool=self._pool,
                                           ahead=self._threads, scratches=self._scratches)
        if removals:
            Metrics.counter("dedup", CONTAMINATED).inc(len(removals))
            yield REMOVALS, (ref, _rows(removals))
        if ids is not None:
            self._documents.inc(len(ids.ids))
        if self._spill_dir is None:
            for block in blocks:
                yield BLOCKS, block
            if ids is not None:
                yield IDS, (ref, (IDS, ids))
            return
        if ids is None:
            return
        if self._spill is None:  # the bundle's first keys: its file's path goes on now
            self._spill = _KeySpill(self._spill_dir, root=self._root, first=chunk)
            yield SPILLS, self._spill.path
        at = self._spill.writer.write(IDS_BAND, ids)
        for band, block in blocks:
            self._spill.writer.write(band, block._replace(ids_at=at))


@functools.cache
def _say_numpy_hashes() -> None:
    """Once per worker process: this one hashes with the NumPy code (the same keys)."""
    _LOG.warning(
        "--dedup hashes with NumPy here, about 2.6 times slower than with the C kernel, which "
        "was not built when token-windows was installed (no C compiler): install gcc and "
        "reinstall the package (pip install .) to build transforms/dedup/_kernel.c")


def spill_dir(context: JobContext) -> str | None:
    """Where the dedup pass spills its keys (with the file shuffle), else None."""
    return None if context.spill_dir is None else fs.join(context.tmp_dir, "dedup")


class _KeySpill:
    """One bundle's key spill file (`transforms.dedup.key_spill`), below the output directory."""

    def __init__(self, directory: str, *, root: str, first: Chunk) -> None:
        # A name of the bundle's first chunk and a random attempt id: a retried bundle never
        # touches the file of an attempt the runner may still use. It never reaches the
        # output.
        name = hashlib.sha256(f"{first.path}@{first.start}".encode()).hexdigest()[:16]
        self.path = fs.join(directory, f"{name}-{uuid.uuid4().hex[:12]}.keys")
        self.file = fs.create(self.path, root=root)
        self.writer = KeySpillWriter(self.file, self.path)

    def abandon(self) -> None:
        with contextlib.suppress(Exception):
            self.file.close()


class _Holder:
    """A strong-referenceable box for `shared.Shared` (which keeps weak references)."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _edges(item: tuple[int, Iterable[KeyBlock]]) -> Iterator[tuple[str, Any]]:
    """A band's blocks → (EDGES, `EdgeBlock`) with all its edges and, per chunk with a
    document with an edge, (WANTED, (chunk, (WANTED, [position, …], where the chunk's doc_ids
    were spilled))): a few elements, not one per edge (each costs the runner more than the
    edge's own work)."""
    band, blocks = item
    blocks = list(blocks)
    ids_at = {block.chunk: block.ids_at for block in blocks}
    edges = EdgeBlock.of((band, a, b) for a, b in bucket_edges(blocks))
    yield from _edges_and_wanted(edges, ids_at)


def _edges_and_wanted(edges: EdgeBlock, ids_at: dict[ChunkRef, tuple[str, int, int] | None]
                      ) -> Iterator[tuple[str, Any]]:
    """The edges as one (EDGES, edges) and each chunk's documents with an edge as one
    (WANTED, (chunk, (WANTED, positions, ids_at)))."""
    if not edges.size:
        return
    yield EDGES, edges
    for chunk, positions in sorted(edges.wanted().items()):
        yield WANTED, (chunk, (WANTED, positions, ids_at[chunk]))


def _band_jobs(item: tuple[None, Iterable[str]], bands: list[int]
               ) -> Iterator[tuple[list[int], list[str]]]:
    """Every key spill file → (every band, every file): one job, so that the edges of all
    bands are joined before they go on (`transforms.dedup.removal.component_edge_block`)."""
    yield bands, sorted(item[1])


def _spilled_bands(item: tuple[list[int], list[str]]) -> Iterator[tuple[str, Any]]:
    """Every band's blocks, read one band at a time from every key spill file → the edges
    with the components of all bands' buckets (at most two per document), and the wanted
    documents, as `_edges` gives them."""
    bands, paths = item
    ids_at: dict[ChunkRef, tuple[str, int, int] | None] = {}

    def each() -> Iterator[tuple[int, list[KeyBlock]]]:
        for band in bands:
            blocks = list(read_band(paths, band, fs.open_raw))
            ids_at.update((block.chunk, block.ids_at) for block in blocks)
            yield band, blocks

    yield from _edges_and_wanted(component_edge_block(each()), ids_at)


def _names(item: tuple[ChunkRef, Iterable[tuple[str, Any]]]) -> Iterator[tuple[str, Any]]:
    """A chunk's doc_ids and the positions wanted → (NAMES, (chunk, `ChunkIds` of those
    positions))."""
    chunk, values = item
    ids, wanted, at = None, [], None
    for value in values:
        if value[0] == IDS:
            ids = value[1]
        else:
            wanted.extend(value[1])
            at = value[2]
    if wanted:
        if ids is None and at is not None:  # spilled: read back for this chunk only
            ids = read_record(at, fs.open_raw)
        if ids is None:
            raise RuntimeError(f"the dedup pass lost the doc_ids of chunk {chunk}")
        yield NAMES, (chunk, named(ids, wanted))


def _tagged_edge(value: EdgeBlock) -> tuple[str, EdgeBlock]:
    return EDGES, value


def _tagged_removal(value: tuple[ChunkRef, list[tuple]]
                    ) -> tuple[str, tuple[ChunkRef, list[tuple]]]:
    return REMOVALS, value


def _rows(removals: list[Removal]) -> list[tuple]:
    """Removals as plain tuples, as they travel between steps: the runner's coder pickles a
    NamedTuple in a list one by one, several times slower (`_removals` makes them again)."""
    return [tuple(removal) for removal in removals]


def _removals(rows: list[tuple]) -> list[Removal]:
    return [Removal._make(row) for row in rows]


def _one_key(value: Any) -> tuple[None, Any]:
    return None, value


def _clusters(item: tuple[None, Iterable[tuple[str, Any]]]) -> Iterator[tuple[str, Any]]:
    """Every edge, name and contaminated removal → (REMOVALS, (chunk, rows of its
    `Removal`s)) per chunk with a document removed, and one (SUMMARY, RemovalSummary)."""
    edges: list[EdgeBlock] = []
    names: list[tuple[ChunkRef, ChunkIds]] = []
    by_reason: dict[str, int] = {}
    by_file: dict[str, int] = {}
    by_chunk: dict[ChunkRef, list[Removal]] = {}
    for tag, value in item[1]:
        if tag == EDGES:
            edges.append(value)
            continue
        if tag == NAMES:
            names.append(value)
            continue
        if tag == _START:
            continue
        ref, rows = value
        for removal in _removals(rows):
            by_reason[CONTAMINATED] = by_reason.get(CONTAMINATED, 0) + 1
            by_file[removal.eval_file] = by_file.get(removal.eval_file, 0) + 1
            by_chunk.setdefault(ref, []).append(removal)
    for ref, removal in cluster_removals(edges, names):
        by_reason[removal.reason] = by_reason.get(removal.reason, 0) + 1
        by_chunk.setdefault(ref, []).append(removal)
    for ref in sorted(by_chunk):
        yield REMOVALS, (ref, _rows(by_chunk[ref]))
    yield SUMMARY, RemovalSummary(by_reason=dict(sorted(by_reason.items())),
                                  by_eval_file=dict(sorted(by_file.items())))


class FindRemovals(beam.PTransform):
    """Chunks → `pipeline.steps.tagged.Outputs`: ``removals`` ((chunk, [`Removal`, …]) per chunk
    with a document the job removes) and ``summary`` (one `RemovalSummary`).

    What it reads of the `pipeline.launch.context.JobContext`: how to read the inputs and the
    removal parameters (``removal``: the dedup mode, n-gram, bands and rows; the
    evaluation files and their n-gram)."""

    def __init__(self, context: JobContext) -> None:
        super().__init__()
        self._context = context

    def expand(self, chunks: beam.PCollection) -> Any:
        spilled = spill_dir(self._context) is not None
        keyed = (chunks
                 | "KeyChunks" >> beam.ParDo(_KeyChunkFn(self._context))
                 | "KeysByTag" >> SplitTags([SPILLS, REMOVALS] if spilled
                                            else [BLOCKS, IDS, REMOVALS]))
        if spilled:
            # Only the key spill files' paths go on; each band is read from all of them.
            removal = self._context.removal
            bands = [EXACT, *range(removal.dedup.bands if removal.dedup.mode == "near" else 0)]
            found = (keyed[SPILLS]
                     | "KeySpills" >> beam.Map(_one_key)
                     | "AllKeySpills" >> beam.GroupByKey()
                     | "EveryBand" >> beam.FlatMap(_band_jobs, bands)
                     | "BucketEdges" >> beam.FlatMap(_spilled_bands)
                     | "EdgesByTag" >> SplitTags([EDGES, WANTED]))
            wanted = found[WANTED]
        else:
            found = (keyed[BLOCKS]
                     | "GroupByBand" >> beam.GroupByKey()
                     | "BucketEdges" >> beam.FlatMap(_edges)
                     | "EdgesByTag" >> SplitTags([EDGES, WANTED]))
            wanted = (keyed[IDS], found[WANTED]) | "IdsAndWanted" >> beam.Flatten()
        names = (wanted
                 | "GroupIdsByChunk" >> beam.GroupByKey()
                 | "Names" >> beam.FlatMap(_names))
        contaminated = keyed[REMOVALS] | "Tagged" >> beam.Map(_tagged_removal)
        start = chunks.pipeline | "Start" >> beam.Create([(_START, None)])
        return ((found[EDGES] | "TaggedEdges" >> beam.Map(_tagged_edge), names, contaminated,
                 start)
                | "EdgesAndContaminated" >> beam.Flatten()
                | "OneKey" >> beam.Map(_one_key)
                | "AllAtOnce" >> beam.GroupByKey()
                | "Clusters" >> beam.FlatMap(_clusters)
                | "ByTag" >> SplitTags([REMOVALS, SUMMARY]))


def _key_chunk(chunk: Chunk) -> tuple[ChunkRef, tuple[str, Chunk]]:
    return chunk_ref(chunk), ("chunk", chunk)


def _key_removal(item: tuple[ChunkRef, list[tuple]]) -> tuple[ChunkRef, tuple[str, list[tuple]]]:
    return item[0], ("removal", item[1])


def _joined(item: tuple[ChunkRef, Iterable[tuple[str, Any]]]
            ) -> Iterator[tuple[Chunk, dict[int, Removal]]]:
    chunks, removals = [], {}
    for kind, value in item[1]:
        if kind == "chunk":
            chunks.append(value)
        else:
            removals.update((removal.position, removal) for removal in _removals(value))
    if len(chunks) != 1:
        raise RuntimeError(f"the dedup pass named chunk {item[0]}, which the job has "
                           f"{len(chunks)} times")
    yield chunks[0], removals


class JoinRemovals(beam.PTransform):
    """(chunks, removals: (chunk, [`Removal`, …])) → (chunk, {position: `Removal`}) for each
    chunk, through a GroupByKey by chunk (not a side input)."""

    def expand(self, pcolls: tuple[beam.PCollection, beam.PCollection]) -> beam.PCollection:
        chunks, removals = pcolls
        return ((chunks | "KeyChunk" >> beam.Map(_key_chunk),
                 removals | "KeyRemoval" >> beam.Map(_key_removal))
                | "ChunksAndRemovals" >> beam.Flatten()
                | "GroupByChunk" >> beam.GroupByKey()
                | "Joined" >> beam.FlatMap(_joined))
