"""Which documents the job removes before tokenizing them: copies and benchmark text.

The job's side of ``--dedup`` and ``--decontaminate`` (docs/dedup.md#in-the-job); the
hashing, signatures, bands and the evaluation index are `transforms.dedup.duplicates` and
`transforms.dedup.contamination`. Everything here is pure and deterministic, so the removed set
depends only on the corpus and these parameters (never on the runner, bundles, seed, window
or tokenizer).

The job's dedup pass (`pipeline.steps.dedup`) works in three steps:

1. `chunk_keys`: one chunk's documents → the contaminated ones (removed at once) and, for
   every other document, its exact key and (``near``) its band keys, as one `KeyBlock` per
   band, holding the chunk's keys end to end, never the texts.
2. `bucket_edges`: every block of one band → edges from each document of a bucket
   (documents sharing that band's key) to the bucket's first. Only documents with a copy
   produce edges; `named` then gives those documents' doc_ids from their chunk's `ChunkIds`
   (the only place a doc_id travels: once per document, not once per band).
   `component_edge_block` does it for every band at once (read one band at a time) and
   keeps only a spanning star of each component: at most two edges per document. Edges
   travel packed (`EdgeBlock`), a few arrays instead of a tuple per edge.
3. `cluster_removals`: every edge of the job → connected components; each component keeps
   its smallest member (by doc_id, then chunk and position), every other member is
   `Removed`: ``exact_duplicate`` when its normalized text equals the kept one's, else
   ``near_duplicate``.

A document is ``(chunk, position)`` (`Ref`): the chunk's ``(path, start)`` and its position
among the chunk's documents (rejects not counted), which the encoding step counts again to
skip it (`drop_removed`).

Example: documents ``a`` = "x y z", ``b`` = "x  y z" (one more space), ``c`` = "q": with
``--dedup exact``, ``a`` and ``b`` share an exact key; ``b`` is removed as
``exact_duplicate`` with ``kept == "a"``; ``c`` is kept.
"""

from __future__ import annotations

import dataclasses
import queue
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from transforms.dedup import kernel
from transforms.dedup.contamination import DEFAULT_NGRAM, EvalNgramIndex
from transforms.dedup.duplicates import (
    MAX_NGRAM,
    DedupSpec,
    Scratch,
    band_key_matrix,
    exact_key,
    signatures,
)
from transforms.inputs.documents import MAX_REJECT_RECORD_CHARS, Document, Reject
from transforms.json_fields import JsonObject
from transforms.params import check_positive_int

__all__ = [
    "CONTAMINATED",
    "DECONTAMINATE_NGRAM",
    "EXACT",
    "EXACT_DUPLICATE",
    "MAX_DECONTAMINATE_NGRAM",
    "NEAR_DUPLICATE",
    "REMOVAL_REASONS",
    "ChunkIds",
    "check_removals_kept_aside",
    "ChunkRef",
    "EdgeBlock",
    "KeyBlock",
    "Ref",
    "Removal",
    "RemovalSpec",
    "Removed",
    "bucket_edges",
    "chunk_keys",
    "cluster_removals",
    "component_edge_block",
    "drop_removed",
    "named",
]

EXACT_DUPLICATE = "exact_duplicate"
NEAR_DUPLICATE = "near_duplicate"
CONTAMINATED = "contaminated"
REMOVAL_REASONS = (CONTAMINATED, EXACT_DUPLICATE, NEAR_DUPLICATE)
# The band label of the exact keys (bands are numbered 0 … bands − 1).
EXACT = -1
# GPT-3's rule: a 13-gram of words shared with an evaluation text.
DECONTAMINATE_NGRAM = DEFAULT_NGRAM
MAX_DECONTAMINATE_NGRAM = MAX_NGRAM

ChunkRef = tuple[str, int]  # a chunk's (path, start): which chunk a member was read from
Ref = tuple[ChunkRef, int]  # (chunk, position among its documents): a document in the pass


@dataclasses.dataclass(frozen=True, kw_only=True)
class RemovalSpec:
    """What the job removes before tokenizing: ``--dedup`` and ``--decontaminate``.

    Attributes:
        dedup: the dedup parameters (mode off, exact or near;
            `transforms.dedup.duplicates.DedupSpec`).
        eval_files: ``(path, name, size)`` of each evaluation file the launcher matched, in
            name order: ``name`` is the path relative to its pattern's directory (what the
            manifest and the kept-aside records show).
        eval_ngram: the n of the word n-grams shared with an evaluation text.
    """

    dedup: DedupSpec = dataclasses.field(default_factory=lambda: DedupSpec(mode="off"))
    eval_files: tuple[tuple[str, str, int], ...] = ()
    eval_ngram: int = DECONTAMINATE_NGRAM

    def __post_init__(self) -> None:
        check_positive_int("decontaminate_ngram", self.eval_ngram)
        if self.eval_ngram > MAX_DECONTAMINATE_NGRAM:
            raise ValueError(f"`decontaminate_ngram` must be at most "
                             f"{MAX_DECONTAMINATE_NGRAM}, but got {self.eval_ngram}")
        names = [name for _, name, _ in self.eval_files]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"two evaluation files are both named {twice[0]} (relative to "
                             "their patterns): give each --decontaminate pattern files of "
                             "distinct names")

    @property
    def dedup_active(self) -> bool:
        return self.dedup.mode != "off"

    @property
    def active(self) -> bool:
        """Whether the job removes anything: without either flag it has no dedup pass."""
        return self.dedup_active or bool(self.eval_files)

    def fingerprint_json(self) -> JsonObject:
        """What the job's fingerprint holds of it: the parameters and each evaluation file's
        name and size (not its path, which differs between machines)."""
        out = self.to_json()
        if self.eval_files:
            out["decontaminate"]["files"] = {name: size for _, name, size in self.eval_files}
        return out

    def to_json(self, removed_by_file: Mapping[str, int] | None = None) -> JsonObject:
        """The manifest's ``dedup`` object: the parameters and, given them, how many documents
        each evaluation file removed (every file listed, zeros too)."""
        out: JsonObject = {"mode": self.dedup.mode}
        if self.dedup.mode == "near":  # exact copies need no parameter
            out.update({k: v for k, v in self.dedup.to_json().items() if k != "mode"})
        if self.eval_files:
            counts = removed_by_file or {}
            out["decontaminate"] = {
                "ngram": self.eval_ngram,
                "files": {name: int(counts.get(name, 0)) for _, name, _ in self.eval_files},
            }
        return out


class Removed(NamedTuple):
    """A document removed before tokenization, kept aside like a reject
    (``_rejects/<reason>.jsonl``): a `transforms.inputs.documents.Reject` with what it was removed
    for. ``record`` is the document's text."""

    reason: str
    source: str
    detail: str
    record: str
    truncated: bool = False
    doc_id: str = ""  # the removed document's
    kept: str | None = None  # the doc_id of the document kept in its place (copies)
    eval_file: str | None = None  # where the shared n-gram was found (contaminated)
    eval_line: int | None = None
    ngram: str | None = None

    def to_json(self) -> JsonObject:
        """`Reject.to_json` plus ``doc_id`` and ``kept`` (copies) or ``eval_file``,
        ``eval_line`` and ``ngram`` (contaminated)."""
        out = Reject.to_json(self)  # type: ignore[arg-type]
        out["doc_id"] = self.doc_id
        if self.kept is not None:
            out["kept"] = self.kept
        if self.eval_file is not None:
            out.update(eval_file=self.eval_file, eval_line=self.eval_line, ngram=self.ngram)
        return out

    def to_line(self) -> bytes:
        """Its line of ``_rejects/<reason>.jsonl``: `Reject.to_line` of this `to_json`."""
        return Reject.to_line(self)  # type: ignore[arg-type]


class Removal(NamedTuple):
    """Why the document at ``position`` of its chunk is removed: what the encoding step
    needs to skip it and keep it aside (the text it has)."""

    position: int
    doc_id: str
    reason: str
    kept: str | None = None
    eval_file: str | None = None
    eval_line: int | None = None
    ngram: str | None = None

    def removed(self, doc: Document) -> Removed:
        """The kept-aside record of ``doc``, the document this removal names."""
        if self.reason == CONTAMINATED:
            detail = (f"shares the word {len(self.ngram.split())}-gram {self.ngram!r} with "
                      f"{self.eval_file}:{self.eval_line}")
        elif self.reason == EXACT_DUPLICATE:
            detail = f"the same normalized text as {self.kept!r}, which is kept"
        else:
            detail = f"a near copy of {self.kept!r} (same cluster), which is kept"
        return Removed(reason=self.reason, source=doc.source, detail=detail,
                       record=doc.text[:MAX_REJECT_RECORD_CHARS],
                       truncated=len(doc.text) > MAX_REJECT_RECORD_CHARS,
                       doc_id=doc.doc_id, kept=self.kept,
                       eval_file=self.eval_file, eval_line=self.eval_line, ngram=self.ngram)


class KeyBlock(NamedTuple):
    """One chunk's keys for one band: the documents' keys end to end (each ``width`` bytes)
    and their positions in the chunk (int32, end to end), in the chunk's order. No doc_id:
    only the documents that turn out to have a copy are named (`ChunkIds`)."""

    chunk: ChunkRef
    positions: bytes
    keys: bytes
    width: int
    ids_at: tuple[str, int, int] | None = None  # where the chunk's doc_ids were spilled

    @property
    def size(self) -> int:
        """How many documents it holds."""
        return len(self.positions) // 4


class ChunkIds(NamedTuple):
    """One chunk's clustered documents: their positions and doc_ids, in the chunk's order."""

    positions: list[int]
    ids: list[str]


class EdgeBlock(NamedTuple):
    """(band, document, document) edges as they travel between the dedup pass's steps: the
    chunks they name and two int32 arrays, not a tuple per edge. (The runner's coder rebuilds
    every tuple and path string of a list of edges: on a corpus of copies, that was most of
    the pass's time after the hashing, and most of its memory.)

    ``chunks`` are sorted; ``ends`` holds, per edge, the index in ``chunks`` and the position
    of its first document, then those of its second.
    """

    chunks: tuple[ChunkRef, ...]
    bands: bytes
    ends: bytes

    @classmethod
    def of(cls, edges: Iterable[tuple[int, Ref, Ref]]) -> EdgeBlock:
        """The edges, packed (in their order)."""
        edges = list(edges)
        chunks = sorted({ref[0] for _, a, b in edges for ref in (a, b)})
        at = {chunk: i for i, chunk in enumerate(chunks)}
        bands = np.array([band for band, _, _ in edges], dtype=np.int32)
        ends = np.array([(at[a[0]], a[1], at[b[0]], b[1]) for _, a, b in edges],
                        dtype=np.int32).reshape(-1, 4)
        return cls(tuple(chunks), bands.tobytes(), ends.tobytes())

    @property
    def size(self) -> int:
        """How many edges it holds."""
        return len(self.bands) // 4

    def edges(self) -> Iterator[tuple[int, Ref, Ref]]:
        """The edges, unpacked, in their order."""
        bands = np.frombuffer(self.bands, dtype=np.int32).tolist()
        ends = np.frombuffer(self.ends, dtype=np.int32).reshape(-1, 4).tolist()
        chunks = self.chunks
        for band, (a, a_at, b, b_at) in zip(bands, ends, strict=True):
            yield band, (chunks[a], a_at), (chunks[b], b_at)

    def wanted(self) -> dict[ChunkRef, list[int]]:
        """{chunk: the positions of its documents at either end of an edge, ascending}, for
        every chunk with one."""
        ends = np.frombuffer(self.ends, dtype=np.int32).reshape(-1, 2).astype(np.int64)
        keys = np.unique(ends[:, 0] << 32 | ends[:, 1])
        chunk_of = keys >> 32
        cuts = np.flatnonzero(chunk_of[1:] != chunk_of[:-1]) + 1
        wanted: dict[ChunkRef, set[int]] = {}
        for part in np.split(keys, cuts):
            if len(part):  # a chunk named twice in ``chunks`` gets the positions of both
                chunk = self.chunks[int(part[0] >> 32)]
                wanted.setdefault(chunk, set()).update((part & 0xFFFFFFFF).tolist())
        return {chunk: sorted(positions) for chunk, positions in wanted.items()}


def chunk_keys(docs: Iterable[Document], *, chunk: ChunkRef, spec: RemovalSpec,
               index: EvalNgramIndex | None, batch: int = 512,
               pool: Executor | None = None,
               ahead: int = 2,
               scratches: queue.SimpleQueue[Scratch] | None = None,
               ) -> tuple[list[Removal], list[tuple[int, KeyBlock]], ChunkIds | None]:
    """A chunk's documents → the contaminated ones, (band, `KeyBlock`) for every band
    (`EXACT` first, then 0 … bands − 1; none without ``--dedup``) over the others, and
    those others' doc_ids (None if there are none).

    ``index`` is the evaluation texts' n-gram index, None without ``--decontaminate``.
    Documents are looked up (`EvalNgramIndex.first_matches`) and hashed ``batch`` at a time
    (`transforms.dedup.duplicates.exact_key`, `transforms.dedup.duplicates.signatures`) on
    ``pool``'s threads if given, at most ``ahead`` batches at once, while this thread parses; only
    their keys are held, never their texts. The hashing is `transforms.dedup.kernel`'s where
    it is built: it holds the GIL only to read its arguments, so the hashing threads run
    beside this one's parsing. (The NumPy code does not: with the exact keys taken on this
    thread, two hashing threads took as long as one, each NumPy step waiting for the GIL
    while this thread ran Python code.) The NumPy code hashes each batch with a
    `Scratch` taken from ``scratches`` (a new one if none is free) and put back after: give
    the same queue to every call of a worker to reuse its work arrays from chunk to chunk.
    """
    free: queue.SimpleQueue[Scratch] = queue.SimpleQueue() if scratches is None else scratches
    removals: list[Removal] = []
    ids: list[str] = []
    positions: list[int] = []
    keyed: list[_Keys | Future[_Keys]] = []

    def take(batch_docs: list[Document], first: int) -> None:
        """A batch of documents, the first at ``first`` among the chunk's."""
        matches = (index.first_matches([d.text for d in batch_docs]) if index is not None
                   else [None] * len(batch_docs))
        texts = []
        for position, (doc, match) in enumerate(zip(batch_docs, matches, strict=True), first):
            if match is not None:
                removals.append(Removal(position=position, doc_id=doc.doc_id,
                                        reason=CONTAMINATED, eval_file=match.eval_file,
                                        eval_line=match.eval_line, ngram=match.ngram))
            elif spec.dedup_active:
                ids.append(doc.doc_id)
                positions.append(position)
                texts.append(doc.text)
        if texts:
            keyed.append(_start(pool, texts, spec.dedup, free))
            if pool is not None and len(keyed) > ahead:  # the oldest in flight, done
                keyed[-ahead - 1] = _done(keyed[-ahead - 1])

    pending: list[Document] = []
    read = 0
    for doc in docs:
        pending.append(doc)
        if len(pending) >= batch:
            take(pending, read)
            read += len(pending)
            pending = []
    if pending:
        take(pending, read)
    if not ids:
        return removals, [], None
    done = [_done(k) for k in keyed]
    exact = [key for batch_keys in done for key in batch_keys.exact]
    at = np.array(positions, np.int32).tobytes()
    blocks = [(EXACT, KeyBlock(chunk=chunk, positions=at, keys=b"".join(exact),
                               width=len(exact[0])))]
    if spec.dedup.mode == "near":
        keys = band_key_matrix(np.concatenate([k.sigs for k in done]), spec.dedup)
        for band in range(spec.dedup.bands):
            blocks.append((band, KeyBlock(chunk=chunk, positions=at,
                                          keys=keys[:, band].tobytes(), width=16)))
    return removals, blocks, ChunkIds(positions=positions, ids=ids)


class _Keys(NamedTuple):
    """A batch's exact keys and, with ``near``, its signatures."""

    exact: list[bytes]
    sigs: np.ndarray | None


def _start(pool: Executor | None, texts: list[str], spec: DedupSpec,
           free: queue.SimpleQueue[Scratch]) -> _Keys | Future[_Keys]:
    return (_keys(texts, spec, free) if pool is None
            else pool.submit(_keys, texts, spec, free))


def _keys(texts: list[str], spec: DedupSpec, free: queue.SimpleQueue[Scratch]) -> _Keys:
    """The exact keys and `signatures` of a batch: in C where the extension is built
    (`transforms.dedup.kernel`, the same keys), else with a free `Scratch` (one batch at a
    time uses each)."""
    if kernel.available:
        return _Keys(kernel.exact_keys(texts),
                     kernel.signatures(texts, spec) if spec.mode == "near" else None)
    exact = [exact_key(text) for text in texts]
    if spec.mode != "near":
        return _Keys(exact, None)
    try:
        scratch = free.get_nowait()
    except queue.Empty:
        scratch = Scratch()
    try:
        return _Keys(exact, signatures(texts, spec, scratch=scratch))
    finally:
        free.put(scratch)


def _done(keys: _Keys | Future[_Keys]) -> _Keys:
    return keys.result() if isinstance(keys, Future) else keys


def bucket_edges(blocks: Iterable[KeyBlock]) -> Iterator[tuple[Ref, Ref]]:
    """Every block of one band → (document, the first document of its bucket) for each
    other document of a bucket of two or more (documents sharing the band's key).

    Buckets are found by sorting the band's keys (NumPy), so a band of n documents costs
    O(n log n) and holds 20 bytes per document; only documents with a candidate copy yield
    an edge. The edges' components do not depend on the blocks' order (which member a
    bucket links to does not matter: `cluster_removals` keeps each component's smallest).
    """
    blocks = sorted(blocks)  # the edges themselves, too, whatever the runner's order
    if not blocks:
        return
    ref = _Refs(blocks)
    rows, firsts = _band_pairs(blocks)
    for row, first in zip(rows.tolist(), firsts.tolist(), strict=True):
        yield ref(row), ref(first)


def component_edge_block(bands: Iterable[tuple[int, Iterable[KeyBlock]]]) -> EdgeBlock:
    """Every band's blocks (one band at a time) → (band, document, document) edges with the
    same connected components as every band's `bucket_edges`, both for the `EXACT` band's
    edges alone and for all of them: each document of a component of two or more, but its
    first, linked to that first, once (labelled `EXACT` for the exact band's components and
    with the smallest other band for all bands' components). So `cluster_removals` gets at
    most two edges per document, not one per band its copy shares: on a corpus whose
    documents have many copies, the edges were most of the pass's cost.

    Each band's blocks must hold the same documents (as `chunk_keys` makes them: one block
    per band per chunk). Holds 20 bytes per document of the band being read and two 8-byte
    labels per document.

    Raises:
        RuntimeError: two bands hold different documents.
    """
    layout: list[tuple[ChunkRef, bytes]] | None = None
    blocks: list[KeyBlock] = []
    every: NDArray[np.intp] | None = None
    exact: NDArray[np.intp] | None = None
    near_band: int | None = None
    for band, band_blocks in bands:
        blocks = sorted(band_blocks)
        shape = [(b.chunk, b.positions) for b in blocks]
        if layout is None:
            layout = shape
            every = np.arange(sum(b.size for b in blocks))
        elif shape != layout:
            raise RuntimeError(f"the dedup pass's band {band} holds other documents than its "
                               "first band")
        rows, firsts = _band_pairs(blocks) if blocks else (every[:0], every[:0])
        if band == EXACT:
            exact = np.arange(len(every))
            _union(exact, rows, firsts)
        else:
            near_band = band if near_band is None else min(near_band, band)
        _union(every, rows, firsts)
    if layout is None or not blocks:
        return EdgeBlock.of([])
    labels, rows, roots = [], [], []
    for label, parent in ((EXACT, exact), (near_band, every)):
        if label is None or parent is None:
            continue
        root = _roots(parent, np.arange(len(parent)))
        linked = np.flatnonzero(root != np.arange(len(root)))
        labels.append(np.full(len(linked), label, dtype=np.int32))
        rows.append(linked)
        roots.append(root[linked])
    row, root = np.concatenate(rows), np.concatenate(roots)
    # Blocks are sorted by chunk, one per chunk: a block's index is its chunk's.
    block_of = np.repeat(np.arange(len(blocks)), [b.size for b in blocks])
    within = np.frombuffer(b"".join(b.positions for b in blocks), dtype=np.int32)
    ends = np.stack([block_of[row], within[row], block_of[root], within[root]], axis=1)
    return EdgeBlock(tuple(b.chunk for b in blocks), np.concatenate(labels).tobytes(),
                     ends.astype(np.int32).tobytes())


class _Refs:
    """A row of sorted blocks' documents (end to end) → its `Ref`."""

    def __init__(self, blocks: list[KeyBlock]) -> None:
        self._chunks = [b.chunk for b in blocks]
        self._block_of = np.repeat(np.arange(len(blocks)), [b.size for b in blocks]).tolist()
        self._within = np.frombuffer(b"".join(b.positions for b in blocks), np.int32).tolist()

    def __call__(self, row: int) -> Ref:
        return self._chunks[self._block_of[row]], self._within[row]


def _band_pairs(blocks: list[KeyBlock]) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Sorted blocks of one band → (rows, firsts): every document of a bucket of two or more
    but its first, and that first, by row of the blocks' documents end to end (whose order
    is their `Ref` order, as positions rise within a block); buckets in key order, each
    bucket's rows in row order."""
    columns = _key_columns(b"".join(b.keys for b in blocks), blocks[0].width)
    order = _byte_order(columns)
    ranked = columns[order]
    first = np.empty(len(order), dtype=bool)
    first[:1] = True
    np.any(ranked[1:] != ranked[:-1], axis=1, out=first[1:])
    start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    rest = ~first
    return order[rest], order[start[rest]]


def _roots(parent: NDArray[np.intp], rows: NDArray[np.intp]) -> NDArray[np.intp]:
    """The root of each row in the forest ``parent``."""
    at = parent[rows]
    while True:
        up = parent[at]
        if np.array_equal(up, at):
            return at
        at = up


def _union(parent: NDArray[np.intp], a: NDArray[np.intp], b: NDArray[np.intp]) -> None:
    """Join the trees of ``a[i]`` and ``b[i]`` for every i, in place, in the forest
    ``parent`` whose roots are always their trees' smallest rows (``parent[i] <= i``): each
    round hooks every larger root to the smallest root it is paired with, until every pair
    shares a root (each round joins at least one pair's trees)."""
    while len(a):
        ra, rb = _roots(parent, a), _roots(parent, b)
        low, high = np.minimum(ra, rb), np.maximum(ra, rb)
        apart = low != high
        if not apart.any():
            return
        a, b = a[apart], b[apart]
        np.minimum.at(parent, high[apart], low[apart])


def _key_columns(keys: bytes, width: int) -> NDArray[np.uint64]:
    """The keys (``width`` bytes each, end to end) as rows of big-endian 64-bit words, zero
    padded: rows compare (lexicographically) as the keys' bytes do, and sort in a few
    integer passes instead of string comparisons."""
    words = -(-width // 8)
    if width != words * 8:
        keys = b"".join(keys[i : i + width].ljust(words * 8, b"\0")
                        for i in range(0, len(keys), width))
    return np.frombuffer(keys, dtype=">u8").reshape(-1, words).astype(np.uint64)


def _byte_order(columns: NDArray[np.uint64]) -> NDArray[np.intp]:
    """The rows of ``columns`` in the order of their bytes, equal rows in row order (the
    order np.unique ranks the keys in): one fast unstable sort of the first word, then each
    run of equal first words in row order (the keys are hashes: equal first words are
    copies' equal keys, but for a 2**-64 chance, which gets a full sort of the runs)."""
    order = np.argsort(columns[:, 0])
    first = columns[order, 0]
    tied = np.flatnonzero(first[1:] == first[:-1])
    if not len(tied):
        return order
    # The slots of every run of equal first words (runs are in first-word order already).
    slots = np.zeros(len(order), dtype=bool)
    slots[tied] = True
    slots[tied + 1] = True
    at = np.flatnonzero(slots)
    rows = order[at]
    # A run starts after a gap between slots or where the first word changes.
    starts = np.ones(len(at), dtype=bool)
    starts[1:] = (np.diff(at) > 1) | (first[at[1:]] != first[at[:-1]])
    run = np.cumsum(starts) - 1
    rest = columns[rows, 1:]
    if (rest == rest[np.flatnonzero(starts)[run]]).all():
        # Every run's keys are equal (copies, the usual tie): by run, then by row.
        order[at] = rows[np.argsort(run.astype(np.int64) << 32 | rows)]
    else:  # equal first words of different keys too: sort the runs by all words, then row
        order[at] = rows[np.lexsort((rows, *columns[rows].T[::-1]))]
    return order


def named(ids: ChunkIds, wanted: Iterable[int]) -> ChunkIds:
    """The doc_ids of a chunk's ``wanted`` positions (those with an edge), in position
    order."""
    of = dict(zip(ids.positions, ids.ids, strict=True))
    positions = sorted(set(wanted))
    return ChunkIds(positions=positions, ids=[of[p] for p in positions])


def cluster_removals(edges: Iterable[EdgeBlock], names: Iterable[tuple[ChunkRef, ChunkIds]]
                     ) -> Iterator[tuple[ChunkRef, Removal]]:
    """Every edge of the job and the doc_ids of their documents (per chunk) → (chunk,
    `Removal`) for every document that is not its cluster's smallest (by doc_id, then chunk
    and position), in that order.

    Clusters are the connected components of every edge (a chain of copies is one
    cluster); a removed member is an ``exact_duplicate`` when it is in the same component
    of the `EXACT` edges alone as the member kept, else a ``near_duplicate``. A document is
    one integer here (its chunk's rank among the chunks, then its position), the documents
    are ranked in keeper order once, and the components found in NumPy (`_union`: each
    tree's root is its smallest rank, so its smallest member).

    Raises:
        RuntimeError: a document of an edge has no doc_id in ``names``.
    """
    edges, names = [e for e in edges if e.size], list(names)
    if not edges:
        return
    chunks = sorted({c for block in edges for c in block.chunks} | {c for c, _ in names})
    rank_of_chunk = {chunk: i for i, chunk in enumerate(chunks)}
    ends, bands = [], []
    for block in edges:
        chunk_rank = np.array([rank_of_chunk[c] for c in block.chunks], dtype=np.int64)
        pairs = np.frombuffer(block.ends, dtype=np.int32).reshape(-1, 2).astype(np.int64)
        ends.append(chunk_rank[pairs[:, 0]] << 32 | pairs[:, 1])
        bands.append(np.frombuffer(block.bands, dtype=np.int32))
    # The documents in (chunk, position) order, and each edge end's among them.
    docs, end_doc = np.unique(np.concatenate(ends), return_inverse=True)
    exact = np.concatenate(bands) == EXACT
    named_docs = np.concatenate([rank_of_chunk[c] << 32 | np.array(ids.positions, np.int64)
                                 for c, ids in names] or [np.empty(0, np.int64)])
    named_ids = [doc_id for _, ids in names for doc_id in ids.ids]
    by_doc = np.argsort(named_docs, kind="stable")
    at = np.searchsorted(named_docs[by_doc], docs)
    hit = at < len(by_doc)
    hit[hit] = named_docs[by_doc[at[hit]]] == docs[hit]
    if not hit.all():
        lost = int(docs[~hit][0])
        raise RuntimeError(f"the dedup pass lost the doc_id of document {lost & 0xFFFFFFFF} "
                           f"of chunk {chunks[lost >> 32]}")
    doc_ids = [named_ids[i] for i in by_doc[at].tolist()]
    # Keeper order: doc_id, then (stable sort) chunk and position.
    order = sorted(range(len(docs)), key=doc_ids.__getitem__)
    rank = np.empty(len(order), dtype=np.intp)
    rank[order] = np.arange(len(order))
    pairs = rank[end_doc.reshape(-1)].reshape(-1, 2)
    everyone = np.arange(len(order))
    kept, same_text = everyone.copy(), everyone.copy()
    _union(kept, pairs[:, 0], pairs[:, 1])
    _union(same_text, pairs[exact, 0], pairs[exact, 1])
    kept, same_text = _roots(kept, everyone), _roots(same_text, everyone)
    for r in np.flatnonzero(kept != everyone).tolist():
        keeper = int(kept[r])
        # A document without an exact edge is its own root there, never the keeper's.
        reason = EXACT_DUPLICATE if same_text[r] == same_text[keeper] else NEAR_DUPLICATE
        doc = int(docs[order[r]])
        yield chunks[doc >> 32], Removal(position=doc & 0xFFFFFFFF, doc_id=doc_ids[order[r]],
                                         reason=reason, kept=doc_ids[order[keeper]])


def drop_removed(docs: Sequence[Document], first: int, removals: Mapping[int, Removal]
                 ) -> tuple[list[Document], list[Removed]]:
    """A batch of a chunk's documents (the first at position ``first`` of the chunk) → those
    kept, and the kept-aside records of those removed.

    Raises:
        RuntimeError: a removal names another document than the one at its position (the
            chunk was read differently in the two passes).
    """
    if not removals or not any(p in removals for p in range(first, first + len(docs))):
        return list(docs), []
    kept: list[Document] = []
    gone: list[Removed] = []
    for position, doc in enumerate(docs, first):
        removal = removals.get(position)
        if removal is None:
            kept.append(doc)
            continue
        if removal.doc_id != doc.doc_id:
            raise RuntimeError(
                f"the dedup pass found {removal.doc_id!r} at {doc.source}, where the job now "
                f"reads {doc.doc_id!r}: the input changed while the job ran; rerun it")
        gone.append(removal.removed(doc))
    return kept, gone


def check_removals_kept_aside(removed: Mapping[str, int], kept_aside: Mapping[str, int]) -> None:
    """Every document the dedup pass removed was kept aside by the encoding step, by reason:
    ``removed`` the pass's counts, ``kept_aside`` the job's skipped counts.

    Raises:
        RuntimeError: the two differ (a removal the encoding step never reached: the input
            changed while the job ran, or a runner lost or repeated work).
    """
    decided = {r: removed.get(r, 0) for r in REMOVAL_REASONS}
    done = {r: kept_aside.get(r, 0) for r in REMOVAL_REASONS}
    if decided != done:
        raise RuntimeError(
            f"the dedup pass removed {decided}, but the encoding step kept aside {done}: the "
            "input changed while the job ran, or the runner lost work; no manifest was "
            "written: rerun the job")
