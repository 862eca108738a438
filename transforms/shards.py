"""Documents → shard rows, and the manifest's exact counts (SPEC §4–5).

Documents cross the shuffle packed. `pack_document` packs one: its key, id, source, the
whole ``z`` (uint16 when the vocabulary fits, else int32) and its window plan. The job packs
many at once into a *block* (`pack_block`, or one block per shard: `pack_blocks`): the same
fields as columns, so that a shard is ordered and cut into rows (`ShardRows`) with
a few array operations rather than a Python step per document; a block still iterates as
`pack_document` strings (`PackedDocuments`). `ShardRows` orders a shard's documents by
(doc_key, doc_id), rejects duplicate ids deterministically, and slices every window's
``tokens`` out of ``z``. `write_shard` writes rows as Parquet (zstd, small row groups for
random access) to any binary file object while hashing what it writes; `write_rows` hands
it a shard piece by piece, so a shard's rows never sit in memory all at once.

Example: a document ``abcde`` (bytes tokenizer) with windows (0, 2), (2, 2), (4, 2) becomes
three rows whose ``tokens`` are [256, 97, 98], [98, 99, 100], [100, 101, 257].
"""

from __future__ import annotations

import hashlib
import struct
import typing
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.documents import Reject, source_order
from transforms.keys import shard_of
from transforms.schema import ARROW_SCHEMA, FORMAT, FORMAT_VERSION
from transforms.windows import WindowPlan, WindowPlans

__all__ = [
    "PIECE_ROW_GROUPS",
    "ROW_GROUP_BYTES",
    "Block",
    "PackedDocument",
    "PackedDocuments",
    "ShardBuild",
    "ShardRows",
    "build_manifest",
    "build_shard",
    "block_documents",
    "pack_block",
    "pack_blocks",
    "pack_document",
    "read_block",
    "row_group_rows",
    "unpack_document",
    "write_rows",
    "write_shard",
]

# Row groups of about this many bytes of tokens: small enough that a reader fetching one
# window reads little, large enough that Parquet's per-group cost stays negligible.
ROW_GROUP_BYTES = 1 << 20
# doc_key, M, covered pairs, windows, len(doc_id), len(source), flags; then doc_id, source,
# z, starts, lengths, loss_starts.
_HEADER = struct.Struct("<QqqIIIB")
_WIDE = 1  # flag: tokens are int32 (else uint16)
_REPAIRED = 2  # flag: the text had undecodable bytes, replaced


class PackedDocument(typing.NamedTuple):
    """A document as it leaves the shuffle."""

    doc_key: int
    doc_id: str
    source: str
    tokens: npt.NDArray[np.int32]  # the whole z
    plan: WindowPlan
    repaired: bool


def pack_document(
    *,
    doc_key: int,
    doc_id: str,
    source: str,
    tokens: npt.NDArray[np.int32],
    plan: WindowPlan,
    repaired: bool,
) -> bytes:
    """One document and its windows as a compact, deterministic byte string.

    Token ids travel as uint16 when they all fit (any vocabulary up to 65536), else int32.
    """
    wide = len(tokens) > 0 and int(tokens.max()) >= 1 << 16
    ids, src = doc_id.encode("utf-8"), source.encode("utf-8")
    flags = (_WIDE if wide else 0) | (_REPAIRED if repaired else 0)
    head = _HEADER.pack(doc_key, len(tokens), plan.covered, len(plan.starts), len(ids),
                        len(src), flags)
    return b"".join(
        (
            head,
            ids,
            src,
            tokens.astype("<i4" if wide else "<u2", copy=False).tobytes(),
            plan.starts.astype("<i8", copy=False).tobytes(),
            plan.lengths.astype("<i4", copy=False).tobytes(),
            plan.loss_starts.astype("<i4", copy=False).tobytes(),
        )
    )


def unpack_document(data: bytes) -> PackedDocument:
    """The inverse of `pack_document`."""
    key, m, covered, n, id_len, src_len, flags = _HEADER.unpack_from(data)
    pos = _HEADER.size
    doc_id = bytes(data[pos : pos + id_len]).decode("utf-8")
    pos += id_len
    source = bytes(data[pos : pos + src_len]).decode("utf-8")
    pos += src_len

    def take(dtype: str, count: int) -> np.ndarray:
        nonlocal pos
        arr = np.frombuffer(data, dtype=dtype, count=count, offset=pos)
        pos += arr.nbytes
        return arr

    tokens = take("<i4" if flags & _WIDE else "<u2", m).astype(np.int32)
    starts = take("<i8", n).astype(np.int64)
    lengths = take("<i4", n).astype(np.int32)
    loss = take("<i4", n).astype(np.int32)
    plan = WindowPlan(starts, lengths, loss, covered)
    return PackedDocument(key, doc_id, source, tokens, plan, bool(flags & _REPAIRED))


# ---------------------------------------------------------------------------- blocks
#
# Between packing and writing, documents travel in *blocks*: many documents in columns (their
# keys, sizes, ids, sources, then all their z and all their windows end to end), so that
# splitting a block by shard and ordering a shard cost a few array operations, not a Python
# step per document. A block iterates as `pack_document` byte strings (`PackedDocuments`).

# magic, flags, documents, tokens (Σ M), windows (Σ n), bytes of ids, bytes of sources
_BLOCK = struct.Struct("<4sIqqqqq")
_MAGIC = b"TWB1"


class Block(typing.NamedTuple):
    """The columns of a block (see `pack_block`), as read-only views of its bytes."""

    keys: npt.NDArray[np.uint64]
    m: npt.NDArray[np.int64]  # M of each document
    n: npt.NDArray[np.int64]  # windows of each document
    covered: npt.NDArray[np.int64]
    repaired: npt.NDArray[np.uint8]
    id_ends: npt.NDArray[np.int64]  # end of each doc_id in ``ids``
    src_ends: npt.NDArray[np.int64]
    ids: bytes  # the doc_ids, UTF-8, end to end
    sources: bytes
    tokens: np.ndarray  # every z end to end, uint16 (or int32 when some id is ≥ 2**16)
    starts: npt.NDArray[np.int64]  # every window, document after document
    lengths: npt.NDArray[np.int32]
    loss_starts: npt.NDArray[np.int32]


def _pad(size: int) -> bytes:
    return b"\0" * (-size % 8)


def _block_bytes(block: Block) -> bytes:
    wide = block.tokens.dtype.itemsize == 4
    parts: list[bytes] = [
        _BLOCK.pack(_MAGIC, _WIDE if wide else 0, len(block.keys), len(block.tokens),
                    len(block.starts), len(block.ids), len(block.sources))
    ]
    for array, dtype in (
        (block.keys, "<u8"), (block.m, "<i8"), (block.n, "<i8"), (block.covered, "<i8"),
        (block.id_ends, "<i8"), (block.src_ends, "<i8"), (block.repaired, "u1"),
    ):
        data = np.ascontiguousarray(array, dtype=dtype).tobytes()
        parts += (data, _pad(len(data)))
    parts += (block.ids, _pad(len(block.ids)), block.sources, _pad(len(block.sources)))
    for array, dtype in (
        (block.tokens, "<i4" if wide else "<u2"), (block.starts, "<i8"),
        (block.lengths, "<i4"), (block.loss_starts, "<i4"),
    ):
        data = np.ascontiguousarray(array, dtype=dtype).tobytes()
        parts += (data, _pad(len(data)))
    return b"".join(parts)


def pack_block(
    *,
    doc_keys: Sequence[int],
    doc_ids: Sequence[str],
    sources: Sequence[str],
    tokens: Sequence[npt.NDArray[np.int32]],
    plans: WindowPlans | Sequence[WindowPlan],
    repaired: Sequence[bool],
) -> bytes:
    """Many documents and their windows as one compact, deterministic byte string.

    Token ids travel as uint16 when every id of the block fits (any vocabulary up to 65536),
    else int32. `read_block` gives the columns back; iterating `PackedDocuments` gives each
    document as `pack_document` would have packed it.
    """
    return _pack(_Batch.of(doc_keys, doc_ids, sources, tokens, plans, repaired))


def pack_blocks(
    *,
    doc_keys: Sequence[int],
    doc_ids: Sequence[str],
    sources: Sequence[str],
    tokens: Sequence[npt.NDArray[np.int32]],
    plans: WindowPlans | Sequence[WindowPlan],
    repaired: Sequence[bool],
    num_shards: int,
) -> list[tuple[int, bytes]]:
    """The documents packed by the shard of their key: (shard, `pack_block` of its
    documents, in their order), in shard order; shards without documents are left out."""
    batch = _Batch.of(doc_keys, doc_ids, sources, tokens, plans, repaired)
    if not len(batch.keys):
        return []
    if num_shards == 1:
        return [(0, _pack(batch))]
    shards = np.fromiter((shard_of(k, num_shards) for k in batch.keys.tolist()), np.int64,
                         len(batch.keys))
    present = np.unique(shards)
    if len(present) == 1:
        return [(int(present[0]), _pack(batch))]
    return [(int(shard), _pack(batch.select(shards == shard))) for shard in present]


class _Batch(typing.NamedTuple):
    """Documents to pack, as columns."""

    keys: npt.NDArray[np.uint64]
    m: npt.NDArray[np.int64]
    ids: list[bytes]
    sources: list[bytes]
    z: npt.NDArray[np.int32]  # every z end to end
    plans: WindowPlans
    repaired: npt.NDArray[np.uint8]

    @classmethod
    def of(cls, doc_keys: Sequence[int], doc_ids: Sequence[str], sources: Sequence[str],
           tokens: Sequence[npt.NDArray[np.int32]], plans: WindowPlans | Sequence[WindowPlan],
           repaired: Sequence[bool]) -> _Batch:
        count = len(doc_ids)
        return cls(
            np.array(doc_keys, dtype=np.uint64).reshape(-1),
            np.fromiter(map(len, tokens), np.int64, count),
            [d.encode("utf-8") for d in doc_ids],
            [s.encode("utf-8") for s in sources],
            np.concatenate(tokens) if count else np.empty(0, np.int32),
            plans if isinstance(plans, WindowPlans) else WindowPlans.of(plans),
            np.fromiter(repaired, np.uint8, count),
        )

    def select(self, mask: npt.NDArray[np.bool_]) -> _Batch:
        """The documents where ``mask`` holds, in their order."""
        windows = np.repeat(mask, self.plans.counts)
        which = np.flatnonzero(mask).tolist()
        return _Batch(
            self.keys[mask], self.m[mask], [self.ids[i] for i in which],
            [self.sources[i] for i in which], self.z[np.repeat(mask, self.m)],
            WindowPlans(*(a[mask] for a in self.plans[:2]),
                        *(a[windows] for a in self.plans[2:])),
            self.repaired[mask],
        )


def _pack(batch: _Batch) -> bytes:
    wide = len(batch.z) > 0 and int(batch.z.max()) >= 1 << 16
    return _block_bytes(
        Block(
            keys=batch.keys,
            m=batch.m,
            n=batch.plans.counts,
            covered=batch.plans.covered,
            repaired=batch.repaired,
            id_ends=np.cumsum(np.fromiter(map(len, batch.ids), np.int64, len(batch.ids))),
            src_ends=np.cumsum(np.fromiter(map(len, batch.sources), np.int64,
                                           len(batch.sources))),
            ids=b"".join(batch.ids),
            sources=b"".join(batch.sources),
            tokens=batch.z.astype("<i4" if wide else "<u2"),
            starts=batch.plans.starts,
            lengths=batch.plans.lengths,
            loss_starts=batch.plans.loss_starts,
        )
    )


def read_block(data: bytes) -> Block:
    """The columns of a block written by `pack_block`."""
    magic, flags, count, tokens, windows, id_bytes, src_bytes = _BLOCK.unpack_from(data)
    if magic != _MAGIC:
        raise ValueError(f"not a block of packed documents (magic {magic!r})")
    pos = _BLOCK.size

    def take(dtype: str, size: int) -> np.ndarray:
        nonlocal pos
        array = np.frombuffer(data, dtype=dtype, count=size, offset=pos)
        pos += array.nbytes + (-array.nbytes % 8)
        return array

    def blob(size: int) -> bytes:
        nonlocal pos
        out = bytes(data[pos : pos + size])
        pos += size + (-size % 8)
        return out

    keys, m, n, covered = take("<u8", count), take("<i8", count), take("<i8", count), take(
        "<i8", count)
    id_ends, src_ends, repaired = take("<i8", count), take("<i8", count), take("u1", count)
    ids, sources = blob(id_bytes), blob(src_bytes)
    return Block(keys, m, n, covered, repaired, id_ends, src_ends, ids, sources,
                 take("<i4" if flags & _WIDE else "<u2", tokens), take("<i8", windows),
                 take("<i4", windows), take("<i4", windows))


def block_documents(data: bytes) -> Iterator[bytes]:
    """Each document of a block, as `pack_document` packs it."""
    block = read_block(data)
    z_at = w_at = id_at = src_at = 0
    for i in range(len(block.keys)):
        m, n = int(block.m[i]), int(block.n[i])
        id_end, src_end = int(block.id_ends[i]), int(block.src_ends[i])
        plan = WindowPlan(block.starts[w_at : w_at + n], block.lengths[w_at : w_at + n],
                          block.loss_starts[w_at : w_at + n], int(block.covered[i]))
        yield pack_document(
            doc_key=int(block.keys[i]),
            doc_id=block.ids[id_at:id_end].decode("utf-8"),
            source=block.sources[src_at:src_end].decode("utf-8"),
            tokens=block.tokens[z_at : z_at + m].astype(np.int32),
            plan=plan,
            repaired=bool(block.repaired[i]),
        )
        z_at, w_at, id_at, src_at = z_at + m, w_at + n, id_end, src_end


class PackedDocuments:
    """A shard's documents as they leave the shuffle: blocks that iterate as packed documents.

    `ShardRows` reads the blocks whole; anything else sees an iterable of byte strings that
    `unpack_document` takes.
    """

    def __init__(self, blocks: Iterable[bytes]) -> None:
        self.blocks = list(blocks)

    def __iter__(self) -> Iterator[bytes]:
        for data in self.blocks:
            yield from block_documents(data)


def _block_of_documents(packed: Iterable[bytes]) -> bytes:
    docs = [unpack_document(p) for p in packed]
    return pack_block(
        doc_keys=[d.doc_key for d in docs], doc_ids=[d.doc_id for d in docs],
        sources=[d.source for d in docs], tokens=[d.tokens for d in docs],
        plans=[d.plan for d in docs], repaired=[d.repaired for d in docs],
    )


def row_group_rows(window: int) -> int:
    """Rows per Parquet row group for windows of up to ``window`` pairs."""
    return max(16, ROW_GROUP_BYTES // (4 * (window + 1)))


class ShardBuild(typing.NamedTuple):
    """A shard's rows, its exact counts, and the documents rejected as duplicates."""

    table: pa.Table
    counts: dict[str, int]
    rejects: list[Reject]


def build_shard(packed: Iterable[bytes]) -> ShardBuild:
    """Order a shard's documents by (doc_key, doc_id) and cut their rows into one table.

    See `ShardRows`, which does the work and can also hand the rows out a piece at a time.
    """
    rows = ShardRows(packed)
    return ShardBuild(rows.table(0, rows.num_rows), rows.counts, rows.rejects)


class ShardRows:
    """A shard's documents in row order, cut into Parquet rows on demand.

    Two documents with the same ``doc_id`` (possible only with ``--id-field``) would make
    the row order depend on arrival; the first in input order (`source_order`) is kept and
    the others are rejected as ``duplicate_id``.

    Only the headers are read one document at a time; the columns are built with a few
    vectorised operations, for any range of rows (`table`, `tables`), so a writer can take
    a shard piece by piece without ever holding all its rows.

    Attributes:
        num_rows: the number of rows (windows).
        counts: the shard's exact counts, for the manifest.
        rejects: the documents rejected as duplicates.
    """

    def __init__(self, packed: Iterable[bytes]) -> None:
        blocks = [
            read_block(b)
            for b in (packed.blocks if isinstance(packed, PackedDocuments)
                      else [_block_of_documents(packed)])
        ]
        keys = np.concatenate([b.keys for b in blocks])
        m = np.concatenate([b.m for b in blocks])
        n = np.concatenate([b.n for b in blocks])
        wide = any(b.tokens.dtype.itemsize == 4 for b in blocks)
        self._z = np.concatenate([b.tokens.astype("<i4") if wide else b.tokens for b in blocks])
        starts = np.concatenate([b.starts for b in blocks])
        lengths = np.concatenate([b.lengths for b in blocks])
        loss = np.concatenate([b.loss_starts for b in blocks])
        ids = _strings([b.ids for b in blocks], [b.id_ends for b in blocks])
        sources = _strings([b.sources for b in blocks], [b.src_ends for b in blocks])

        # Row order: by key; documents with equal keys (the same doc_id twice, or a 64-bit
        # collision) by (doc_id, source), and of one doc_id only the first is kept.
        order = np.argsort(keys, kind="stable")
        self.rejects: list[Reject] = []
        ties = np.flatnonzero(keys[order][1:] == keys[order][:-1])
        if len(ties):
            order, dropped = _break_ties(order, ties, ids, sources, self.rejects)
            order = order[~np.isin(order, dropped)]

        count = len(order)
        n_sorted, m_sorted = n[order], m[order]
        rows = self.num_rows = int(n_sorted.sum())
        doc_of_row = np.repeat(order, n_sorted)  # the (unsorted) document of each row
        first_row = np.zeros(count, np.int64)  # its first row, after sorting
        np.cumsum(n_sorted[:-1], out=first_row[1:])
        window = np.arange(rows) - np.repeat(first_row, n_sorted)
        w_start = np.cumsum(n) - n  # each document's first window in the blocks
        z_start = np.cumsum(m) - m
        src_row = w_start[doc_of_row] + window  # where each row's window is in the blocks
        starts, lengths, loss = starts[src_row], lengths[src_row], loss[src_row]
        spans = lengths.astype(np.int64) + 1
        self._offsets = np.zeros(rows + 1, np.int64)
        np.cumsum(spans, out=self._offsets[1:])
        total = int(self._offsets[-1])
        if total >= 1 << 31:
            raise ValueError(
                f"a shard would hold {total} tokens, more than Parquet list<int32> offsets "
                "allow; raise --num-shards"
            )
        self._first = z_start[doc_of_row] + starts  # row i stores z[first_i : first_i + span_i]
        self._doc = doc_of_row
        self._ids = ids
        self._row_columns = (
            keys[doc_of_row],
            window.astype(np.int32),
            starts.astype(np.int64),
            lengths.astype(np.int32),
            loss.astype(np.int32),
            m[doc_of_row],
        )
        covered = np.concatenate([b.covered for b in blocks])[order]
        repaired = np.concatenate([b.repaired for b in blocks])[order]
        self.counts = {
            "rows": rows,
            "documents": count,
            "documents_without_windows": int((n_sorted == 0).sum()),
            "tokens": total,
            "pairs": int((m_sorted - 1).sum()),
            "scored_targets": int((lengths.astype(np.int64) - loss).sum()),
            "uncovered_pairs": int((m_sorted - 1 - covered).sum()),
            "repaired_invalid_utf8": int(repaired.astype(np.int64).sum()),
        }

    def table(self, lo: int, hi: int) -> pa.Table:
        """Rows ``[lo, hi)`` as a table of `ARROW_SCHEMA` (each column one chunk)."""
        first = self._first[lo:hi]
        spans = np.diff(self._offsets[lo : hi + 1])
        # One slice of z per row, joined by one concatenation: cheaper than a fancy-index
        # gather, whose index would take 8 bytes a token.
        tokens = (
            np.concatenate(
                [self._z[a:b] for a, b in zip(first.tolist(), (first + spans).tolist(),
                                                strict=True)]
            )
            if hi > lo
            else np.empty(0, np.int32)
        ).astype(np.int32, copy=False)
        offsets = (self._offsets[lo : hi + 1] - self._offsets[lo]).astype(np.int32)
        key, index, start, length, loss, doc_tokens = (c[lo:hi] for c in self._row_columns)
        arrays = [
            self._ids.take(pa.array(self._doc[lo:hi], pa.int64())),
            pa.array(key, pa.uint64()),
            pa.array(index, pa.int32()),
            pa.array(start, pa.int64()),
            pa.array(length, pa.int32()),
            pa.array(loss, pa.int32()),
            pa.array(doc_tokens, pa.int64()),
            pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(tokens, pa.int32()))
            .cast(ARROW_SCHEMA.field("tokens").type),
        ]
        return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)

    def tables(self, rows_per_table: int) -> Iterator[pa.Table]:
        """All rows, as consecutive tables of ``rows_per_table`` rows (the last may be short;
        a shard without rows is one empty table, so that its file has its one empty row
        group as ``pq.write_table`` writes it)."""
        for lo in range(0, max(self.num_rows, 1), rows_per_table):
            yield self.table(lo, min(lo + rows_per_table, self.num_rows))


def _strings(blobs: list[bytes], ends: list[np.ndarray]) -> pa.StringArray:
    """The strings of several blobs (UTF-8 end to end, with end offsets) as one array."""
    offsets, base = [np.zeros(1, np.int64)], 0
    for blob, end in zip(blobs, ends, strict=True):
        offsets.append(end + base)
        base += len(blob)
    if base >= 1 << 31:
        raise ValueError("a shard's doc_ids or sources exceed 2 GiB; raise --num-shards")
    return pa.StringArray.from_buffers(
        sum(len(e) for e in ends),
        pa.py_buffer(np.concatenate(offsets).astype(np.int32)),
        pa.py_buffer(b"".join(blobs)),
    )


def _break_ties(
    order: np.ndarray, ties: np.ndarray, ids: pa.StringArray, sources: pa.StringArray,
    rejects: list[Reject],
) -> tuple[np.ndarray, list[int]]:
    """Order runs of equal keys by doc_id, then input order (`source_order`); of one doc_id
    keep the first only."""
    order = order.copy()
    dropped: list[int] = []
    # Runs of equal keys: positions p where sorted key p equals key p + 1, grouped.
    run_starts = ties[np.concatenate(([True], np.diff(ties) > 1))]
    run_ends = np.concatenate((ties[np.flatnonzero(np.diff(ties) > 1)], ties[-1:])) + 2
    for lo, hi in zip(run_starts.tolist(), run_ends.tolist(), strict=True):
        docs = sorted(order[lo:hi].tolist(),
                      key=lambda d: (ids[d].as_py(), source_order(sources[d].as_py())))
        order[lo:hi] = docs
        kept = docs[0]
        for doc in docs[1:]:
            if ids[doc].as_py() == ids[kept].as_py():
                rejects.append(
                    Reject(
                        "duplicate_id",
                        sources[doc].as_py(),
                        f"doc_id {ids[doc].as_py()!r} is also at {sources[kept].as_py()}, "
                        "which was kept",
                        "",
                    )
                )
                dropped.append(doc)
            else:
                kept = doc
    return order, dropped


class _HashingWriter:
    """A write-only binary file that hashes and counts what passes through it."""

    def __init__(self, sink: BinaryIO) -> None:
        self._sink = sink
        self.sha256 = hashlib.sha256()
        self.bytes = 0
        self.closed = False

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        self.sha256.update(view)
        self.bytes += view.nbytes
        self._sink.write(view)
        return view.nbytes

    def flush(self) -> None:
        self._sink.flush()

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self.bytes


# Row groups a piece of a shard holds when `write_rows` hands a shard to the writer piece by
# piece: big enough to keep the writer busy, small enough to bound memory.
PIECE_ROW_GROUPS = 8


def write_shard(table: pa.Table | Iterable[pa.Table], sink: BinaryIO, *,
                window: int) -> tuple[str, int]:
    """Write rows as Parquet to ``sink``; returns (SHA-256 hex, bytes written).

    ``table`` is one table or consecutive pieces of one; pieces whose lengths are multiples
    of `row_group_rows` (but the last) give the very bytes of the whole table. A piece is
    written on a helper thread while the caller builds the next one (pyarrow releases the
    GIL while it encodes and compresses).

    The bytes depend only on the rows and the pyarrow version: no timestamps, fixed
    compression and row-group size.
    """
    out = _HashingWriter(sink)
    rows = row_group_rows(window)
    pieces = [table] if isinstance(table, pa.Table) else table
    with (
        pq.ParquetWriter(
            out,
            ARROW_SCHEMA,
            compression="zstd",
            compression_level=3,
            use_dictionary=["doc_id"],
            write_statistics=["doc_id", "doc_key", "window_index", "start"],
            store_schema=True,
        ) as writer,
        ThreadPoolExecutor(1, thread_name_prefix="write-shard") as pool,
    ):
        writing = None
        for piece in pieces:
            if writing is not None:
                writing.result()
            writing = pool.submit(writer.write_table, piece, row_group_size=rows)
        if writing is not None:
            writing.result()
    return out.sha256.hexdigest(), out.bytes


def write_rows(rows: ShardRows, sink: BinaryIO, *, window: int) -> tuple[str, int]:
    """`write_shard` of a shard's rows, built a piece at a time while the last one is written.

    The same bytes as ``write_shard(build_shard(…).table, …)``, with a fraction of the memory.
    """
    return write_shard(rows.tables(PIECE_ROW_GROUPS * row_group_rows(window)), sink,
                       window=window)


def build_manifest(
    *,
    tokenizer: dict[str, Any],
    windows: dict[str, Any],
    inputs: list[str],
    reading: dict[str, Any],
    shards: list[dict[str, Any]],
    skipped: dict[str, int],
    records: int,
    versions: dict[str, str],
) -> dict[str, Any]:
    """The manifest, with counts summed from the shards' own counts.

    Raises:
        RuntimeError: records read ≠ documents written + records skipped: something was
            lost, and the dataset must not look finished.
    """
    shards = sorted(shards, key=lambda s: s["file"])
    total = {k: sum(s[k] for s in shards) for k in shards[0] if isinstance(shards[0][k], int)}
    skipped = {k: v for k, v in sorted(skipped.items()) if v}
    if total["documents"] + sum(skipped.values()) != records:
        raise RuntimeError(
            f"accounting failed: {records} records were read but {total['documents']} "
            f"documents were written and {sum(skipped.values())} skipped ({skipped}); "
            "no manifest was written"
        )
    counts = {
        "records": records,
        "documents": total["documents"],
        "documents_without_windows": total["documents_without_windows"],
        "skipped": skipped,
        "repaired": {"invalid_utf8": total["repaired_invalid_utf8"]},
        "windows": total["rows"],
        "tokens": total["tokens"],
        "pairs": total["pairs"],
        "scored_targets": total["scored_targets"],
        "uncovered_pairs": total["uncovered_pairs"],
    }
    shard_rows = [
        {
            k: s[k]
            for k in ("file", "rows", "documents", "tokens", "scored_targets", "bytes", "sha256")
        }
        for s in shards
    ]
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tokenizer": tokenizer,
        "windows": windows,
        "inputs": inputs,
        "reading": reading,
        "counts": counts,
        "num_shards": len(shards),
        "row_group_rows": row_group_rows(windows["window"]),
        "shards": shard_rows,
        "versions": versions,
    }
