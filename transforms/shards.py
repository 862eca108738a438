"""Documents → shard rows, and the manifest's exact counts (SPEC §4–5).

A document crosses the shuffle as one compact byte string (`pack_document`): its key, id,
source, the whole ``z`` (uint16 when the vocabulary fits, else int32) and its window plan.
`build_shard` unpacks a shard's documents, orders them by (doc_key, doc_id), rejects
duplicate ids deterministically, and slices every window's ``tokens`` out of ``z`` in one
vectorised gather per document. `write_shard` writes the table as Parquet (zstd, small row
groups for random access) to any binary file object while hashing what it writes.

Example: a document ``abcde`` (bytes tokenizer) with windows (0, 2), (2, 2), (4, 2) becomes
three rows whose ``tokens`` are [256, 97, 98], [98, 99, 100], [100, 101, 257].
"""

from __future__ import annotations

import hashlib
import struct
import typing
from collections.abc import Iterable
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.documents import Reject
from transforms.schema import ARROW_SCHEMA, FORMAT, FORMAT_VERSION
from transforms.windows import WindowPlan

__all__ = [
    "ROW_GROUP_BYTES",
    "PackedDocument",
    "ShardBuild",
    "build_manifest",
    "build_shard",
    "pack_document",
    "row_group_rows",
    "unpack_document",
    "write_shard",
]

# Row groups of about this many bytes of tokens: small enough that a reader fetching one
# window reads little, large enough that Parquet's per-group cost stays negligible.
ROW_GROUP_BYTES = 1 << 20
_HEADER = struct.Struct("<QqIIIB")  # doc_key, M, windows, len(doc_id), len(source), flags
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
    head = _HEADER.pack(doc_key, len(tokens), len(plan.starts), len(ids), len(src), flags)
    return b"".join(
        (
            head,
            ids,
            src,
            tokens.astype("<i4" if wide else "<u2", copy=False).tobytes(),
            plan.starts.astype("<i8", copy=False).tobytes(),
            plan.lengths.astype("<i4", copy=False).tobytes(),
            plan.loss_starts.astype("<i4", copy=False).tobytes(),
            struct.pack("<q", plan.covered),
        )
    )


def unpack_document(data: bytes) -> PackedDocument:
    """The inverse of `pack_document`."""
    key, m, n, id_len, src_len, flags = _HEADER.unpack_from(data)
    pos = _HEADER.size
    doc_id = data[pos : pos + id_len].decode("utf-8")
    pos += id_len
    source = data[pos : pos + src_len].decode("utf-8")
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
    (covered,) = struct.unpack_from("<q", data, pos)
    plan = WindowPlan(starts, lengths, loss, covered)
    return PackedDocument(key, doc_id, source, tokens, plan, bool(flags & _REPAIRED))


def row_group_rows(window: int) -> int:
    """Rows per Parquet row group for windows of up to ``window`` pairs."""
    return max(16, ROW_GROUP_BYTES // (4 * (window + 1)))


class ShardBuild(typing.NamedTuple):
    """A shard's rows, its exact counts, and the documents rejected as duplicates."""

    table: pa.Table
    counts: dict[str, int]
    rejects: list[Reject]


def build_shard(packed: Iterable[bytes]) -> ShardBuild:
    """Order a shard's documents by (doc_key, doc_id) and cut their rows.

    Two documents with the same ``doc_id`` (possible only with ``--id-field``) would make
    the row order depend on arrival; the one whose source sorts first is kept and the
    others are rejected as ``duplicate_id``.
    """
    docs = sorted(
        (unpack_document(p) for p in packed), key=lambda d: (d.doc_key, d.doc_id, d.source)
    )
    kept: list[PackedDocument] = []
    rejects: list[Reject] = []
    for doc in docs:
        if kept and kept[-1].doc_id == doc.doc_id:
            rejects.append(
                Reject(
                    "duplicate_id",
                    doc.source,
                    f"doc_id {doc.doc_id!r} is also at {kept[-1].source}, which was kept",
                    "",
                )
            )
            continue
        kept.append(doc)

    columns: dict[str, list[np.ndarray]] = {name: [] for name in (*ARROW_SCHEMA.names, "spans")}
    doc_ids: list[str] = []
    counts = dict.fromkeys(
        (
            "rows",
            "documents",
            "documents_without_windows",
            "tokens",
            "pairs",
            "scored_targets",
            "uncovered_pairs",
            "repaired_invalid_utf8",
        ),
        0,
    )
    for doc in kept:
        z, plan = doc.tokens, doc.plan
        n = len(plan.starts)
        counts["documents"] += 1
        counts["pairs"] += len(z) - 1
        counts["uncovered_pairs"] += len(z) - 1 - plan.covered
        counts["repaired_invalid_utf8"] += int(doc.repaired)
        if n == 0:
            counts["documents_without_windows"] += 1
            continue
        spans = plan.lengths.astype(np.int64) + 1
        offsets = np.concatenate(([0], np.cumsum(spans)))
        # One gather: row i takes z[start_i : start_i + span_i].
        index = np.arange(offsets[-1]) + np.repeat(plan.starts - offsets[:-1], spans)
        columns["tokens"].append(z[index])
        columns["spans"].append(spans)
        columns["doc_key"].append(np.full(n, doc.doc_key, dtype=np.uint64))
        columns["window_index"].append(np.arange(n, dtype=np.int32))
        columns["start"].append(plan.starts)
        columns["length"].append(plan.lengths)
        columns["loss_start"].append(plan.loss_starts)
        columns["doc_tokens"].append(np.full(n, len(z), dtype=np.int64))
        doc_ids.extend([doc.doc_id] * n)
        counts["rows"] += n
        counts["tokens"] += int(spans.sum())
        counts["scored_targets"] += int((plan.lengths - plan.loss_starts).sum())

    table = _table(columns, doc_ids)
    return ShardBuild(table, counts, rejects)


def _table(columns: dict[str, list[np.ndarray]], doc_ids: list[str]) -> pa.Table:
    def cat(name: str, dtype: Any) -> np.ndarray:
        parts = columns.get(name) or []
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)

    offsets = np.concatenate(([0], np.cumsum(cat("spans", np.int64))))
    if offsets[-1] >= 1 << 31:
        raise ValueError(
            f"a shard would hold {offsets[-1]} tokens, more than Parquet list<int32> offsets "
            "allow; raise --num-shards"
        )
    tokens = pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32), pa.int32()), pa.array(cat("tokens", np.int32), pa.int32())
    )
    arrays = [
        pa.array(doc_ids, pa.string()),
        pa.array(cat("doc_key", np.uint64), pa.uint64()),
        pa.array(cat("window_index", np.int32), pa.int32()),
        pa.array(cat("start", np.int64), pa.int64()),
        pa.array(cat("length", np.int32), pa.int32()),
        pa.array(cat("loss_start", np.int32), pa.int32()),
        pa.array(cat("doc_tokens", np.int64), pa.int64()),
        tokens.cast(ARROW_SCHEMA.field("tokens").type),
    ]
    return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)


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


def write_shard(table: pa.Table, sink: BinaryIO, *, window: int) -> tuple[str, int]:
    """Write ``table`` as Parquet to ``sink``; returns (SHA-256 hex, bytes written).

    The bytes depend only on the rows and the pyarrow version: no timestamps, fixed
    compression and row-group size.
    """
    out = _HashingWriter(sink)
    pq.write_table(
        table,
        out,
        row_group_size=row_group_rows(window),
        compression="zstd",
        compression_level=3,
        use_dictionary=["doc_id"],
        write_statistics=["doc_id", "doc_key", "window_index", "start"],
        store_schema=True,
    )
    return out.sha256.hexdigest(), out.bytes


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
