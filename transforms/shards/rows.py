"""A shard's parcels → its rows in order, its duplicate-id rejects and its exact counts.

What the rows are and how they are ordered: docs/format.md#shuffle-and-shards.

Rows are ordered by (doc_key, doc_id, start). Two documents with the same ``doc_id``
(possible only with ``--id-field``) would make the order depend on arrival; the first in input
order (`transforms.inputs.documents.source_order`) is kept and the others are rejected as
``duplicate_id``. Row ``i`` holds ``tokens = z[start : start + length + 1]`` of its document.

Example: documents ``b`` (key 5, z of "abcd") and ``a`` (key 9, z of "abcde"), window 2,
stride 2, give rows b/0, b/1, b/2, a/0, a/1, a/2, and a's rows hold the tokens
[256, 97, 98], [98, 99, 100], [100, 101, 257].

Only the parcel headers are read per parcel; the columns are built with a few vectorised
operations, for any range of rows (`ShardRows.table`, `ShardRows.tables`), so a writer takes a
shard a piece at a time without ever holding all its rows as Arrow data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from transforms.dataset.schema import ARROW_SCHEMA
from transforms.inputs.documents import Reject, source_order
from transforms.shards.parcels import Parcel, read_parcel

__all__ = ["ShardCounts", "ShardRows"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardCounts:
    """The exact counts of a shard's rows (or, summed with ``+``, of several shards).

    Attributes:
        rows: windows.
        documents: documents kept (duplicates are not counted).
        documents_without_windows: kept documents that have no window (tail=drop, or
            min_tail).
        tokens: Σ (length + 1) over rows: the token ids stored.
        pairs: Σ P = Σ (M − 1) over documents.
        scored_targets: Σ (length − loss_start) over rows.
        uncovered_pairs: pairs that no window holds.
        repaired_invalid_utf8: documents whose undecodable bytes were replaced.
    """

    rows: int = 0
    documents: int = 0
    documents_without_windows: int = 0
    tokens: int = 0
    pairs: int = 0
    scored_targets: int = 0
    uncovered_pairs: int = 0
    repaired_invalid_utf8: int = 0

    def __add__(self, other: ShardCounts) -> ShardCounts:
        return ShardCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                              for f in dataclasses.fields(self)})


class ShardRows:
    """A shard's documents in row order, cut into Parquet rows on demand.

    Args:
        parcels: the shard's parcels (`transforms.shards.parcels.pack_parcels`), in any order and
            batching: the rows do not depend on either.

    Attributes:
        num_rows: the number of rows (windows).
        counts: the shard's exact counts (`ShardCounts`).
        rejects: the documents rejected as duplicates.

    Raises:
        ValueError: the shard would hold 2**31 tokens or more (Parquet list<int32> offsets), or
            2 GiB of ids; the message says to raise ``--num-shards``.
    """

    def __init__(self, parcels: Iterable[bytes]) -> None:
        parts = [read_parcel(b) for b in parcels]
        keys = _cat(parts, "keys", np.uint64)
        m = _cat(parts, "doc_tokens", np.int64)
        n = _cat(parts, "doc_windows", np.int64)
        wide = any(b.tokens.dtype.itemsize == 4 for b in parts)
        self._z = (np.concatenate([b.tokens.astype("<i4") if wide else b.tokens for b in parts])
                   if parts else np.empty(0, np.int32))
        starts = _cat(parts, "starts", np.int64)
        lengths = _cat(parts, "lengths", np.int32)
        loss = _cat(parts, "loss_starts", np.int32)
        ids = _strings(parts, "ids", "id_ends")
        sources = _strings(parts, "sources", "src_ends")

        # Row order: by key; documents with equal keys (the same doc_id twice, or a 64-bit
        # collision) by (doc_id, source), and of one doc_id only the first is kept.
        order = np.argsort(keys, kind="stable")
        self.rejects: list[Reject] = []
        ties = np.flatnonzero(keys[order][1:] == keys[order][:-1])
        if len(ties):
            order, dropped = _break_ties(order, ties, ids, sources, self.rejects)
            order = order[~np.isin(order, dropped)]

        n_sorted, m_sorted = n[order], m[order]
        rows = self.num_rows = int(n_sorted.sum())
        doc_of_row = np.repeat(order, n_sorted)  # the (unsorted) document of each row
        first_row = np.zeros(len(order), np.int64)  # its first row, after sorting
        np.cumsum(n_sorted[:-1], out=first_row[1:])
        window = np.arange(rows) - np.repeat(first_row, n_sorted)
        w_start = np.cumsum(n) - n  # each document's first window in the parcels
        z_start = np.cumsum(m) - m
        src_row = w_start[doc_of_row] + window  # where each row's window is in the parcels
        starts, lengths, loss = starts[src_row], lengths[src_row], loss[src_row]
        self._offsets = np.zeros(rows + 1, np.int64)
        np.cumsum(lengths.astype(np.int64) + 1, out=self._offsets[1:])
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
        covered = _cat(parts, "covered", np.int64)[order]
        repaired = _cat(parts, "repaired", np.uint8)[order]
        self.counts = ShardCounts(
            rows=rows,
            documents=len(order),
            documents_without_windows=int((n_sorted == 0).sum()),
            tokens=total,
            pairs=int((m_sorted - 1).sum()),
            scored_targets=int((lengths.astype(np.int64) - loss).sum()),
            uncovered_pairs=int((m_sorted - 1 - covered).sum()),
            repaired_invalid_utf8=int(repaired.astype(np.int64).sum()),
        )

    def table(self, lo: int, hi: int) -> pa.Table:
        """Rows ``[lo, hi)`` as a table of `ARROW_SCHEMA` (each column one chunk)."""
        first = self._first[lo:hi]
        spans = np.diff(self._offsets[lo : hi + 1])
        # One slice of z per row, joined by one concatenation: cheaper than a fancy-index
        # gather, whose index would take 8 bytes a token.
        # Straight into int32 (z may be uint16): one pass, no temporary of z's type.
        tokens = (
            np.concatenate(
                [self._z[a:b] for a, b in zip(first.tolist(), (first + spans).tolist(),
                                                strict=True)],
                dtype=np.int32,
            )
            if hi > lo
            else np.empty(0, np.int32)
        )
        offsets = (self._offsets[lo : hi + 1] - self._offsets[lo]).astype(np.int32)
        key, index, start, length, loss, doc_tokens = (c[lo:hi] for c in self._row_columns)
        arrays = [
            _take_strings(self._ids, self._doc[lo:hi]),
            pa.array(key, pa.uint64()),
            pa.array(index, pa.int32()),
            pa.array(start, pa.int64()),
            pa.array(length, pa.int32()),
            pa.array(loss, pa.int32()),
            pa.array(doc_tokens, pa.int64()),
            pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(tokens, pa.int32()),
                                     type=ARROW_SCHEMA.field("tokens").type),
        ]
        return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)

    def tables(self, rows_per_table: int) -> Iterator[pa.Table]:
        """All rows, as consecutive tables of ``rows_per_table`` rows (the last may be short;
        a shard without rows is one empty table, so that its file has its one empty row
        group as ``pq.write_table`` writes it)."""
        for lo in range(0, max(self.num_rows, 1), rows_per_table):
            yield self.table(lo, min(lo + rows_per_table, self.num_rows))


def _cat(parts: list[Parcel], name: str, dtype: type) -> np.ndarray:
    arrays = [getattr(b, name) for b in parts]
    return np.concatenate(arrays) if arrays else np.empty(0, dtype)


def _take_strings(strings: pa.StringArray, index: np.ndarray) -> pa.StringArray:
    """``strings.take(index)`` by pyarrow's own kernel, called through ``pyarrow._compute``.

    ``Array.take`` first imports ``pyarrow.compute``, which builds a Python wrapper for each of
    its some 280 kernels: 27-32 ms in every process that writes shards, where the kernels'
    module alone loads in about 5 ms. (A NumPy gather would load nothing, but costs about
    three times the kernel's CPU time: 80 ms against 30 ms in a 288 MB job.)
    """
    try:
        from pyarrow._compute import call_function
    except ImportError:  # a pyarrow that has moved it: the public module, slower to load
        from pyarrow.compute import call_function
    return call_function("take", [strings, pa.array(index, pa.int64())])


def _strings(parts: list[Parcel], blob: str, ends: str) -> pa.StringArray:
    """The strings of several parcels' blobs (UTF-8 end to end, with end offsets) as one array."""
    offsets, base = [np.zeros(1, np.int64)], 0
    for part in parts:
        offsets.append(getattr(part, ends) + base)
        base += len(getattr(part, blob))
    if base >= 1 << 31:
        raise ValueError("a shard's doc_ids or sources exceed 2 GiB; raise --num-shards")
    return pa.StringArray.from_buffers(
        sum(len(getattr(p, ends)) for p in parts),
        pa.py_buffer(np.concatenate(offsets).astype(np.int32)),
        pa.py_buffer(b"".join(getattr(p, blob) for p in parts)),
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
                        reason="duplicate_id",
                        source=sources[doc].as_py(),
                        detail=f"doc_id {ids[doc].as_py()!r} is also at "
                        f"{sources[kept].as_py()}, which was kept",
                        record="",
                    )
                )
                dropped.append(doc)
            else:
                kept = doc
    return order, dropped
