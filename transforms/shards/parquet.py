"""Shard rows → Parquet bytes, hashed as they are written (docs/format.md#shard-format).

The bytes depend only on the rows, the row-group size, the footer metadata and the pyarrow
version: zstd level 3, a dictionary for ``doc_id`` only, statistics for the sort columns,
CRC-32 page checksums, no timestamps. Row groups
hold about `ROW_GROUP_BYTES` of tokens (`row_group_rows`): small enough that a reader
fetching one window reads little, large enough that Parquet's per-group cost stays
negligible.

Example: ``write_rows(ShardRows(blocks), f, window=512)`` writes the shard to the binary file
``f`` in row groups of 511 rows and returns its SHA-256 and size.

Threads: `write_shard` encodes a piece on one helper thread of its own while the caller
builds the next piece (pyarrow releases the GIL while it encodes and compresses).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.dataset.schema import ARROW_SCHEMA
from transforms.shards.rows import ShardRows

__all__ = ["PIECE_ROW_GROUPS", "ROW_GROUP_BYTES", "row_group_rows", "write_rows", "write_shard"]

ROW_GROUP_BYTES = 1 << 20
# What pyarrow's writer hands the sink at a time (`write_shard`).
SINK_BUFFER_BYTES = 1 << 20
Metadata = dict[str, str] | Callable[[], dict[str, str]]
# Row groups a piece of a shard holds when `write_rows` hands a shard to the writer piece by
# piece: big enough to keep the writer busy, small enough to bound memory.
PIECE_ROW_GROUPS = 8


def row_group_rows(window: int) -> int:
    """Rows per Parquet row group for windows of up to ``window`` pairs."""
    return max(16, ROW_GROUP_BYTES // (4 * (window + 1)))


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


def write_shard(table: pa.Table | Iterable[pa.Table], sink: BinaryIO, *,
                rows_per_group: int,
                metadata: Metadata | None = None) -> tuple[str, int]:
    """Write rows as Parquet to ``sink``; returns (SHA-256 hex, bytes written).

    Args:
        table: one table, or consecutive pieces of one; pieces whose lengths are multiples of
            ``rows_per_group`` (but the last) give the very bytes of the whole table.
        sink: a writable binary file; it is not closed.
        rows_per_group: rows per row group (`row_group_rows` of the window in the job).
        metadata: key-value pairs for the footer
            (`transforms.shards.manifest_build.shard_metadata`), or a function giving them
            once every row is written (a shard written part by part knows its counts only
            then).
    """
    out = _HashingWriter(sink)
    pieces = [table] if isinstance(table, pa.Table) else table
    with (
        # pyarrow's writer writes each page (thousands a shard) to ``out``, a Python object:
        # every call takes the GIL from the thread building the next piece. A native buffer
        # in front of it passes on the same bytes in a few large writes; closing it (on
        # leaving the block, after the writer's footer) writes the rest.
        pa.output_stream(out, buffer_size=SINK_BUFFER_BYTES) as stream,
        pq.ParquetWriter(
            stream,
            ARROW_SCHEMA,
            compression="zstd",
            compression_level=3,
            use_dictionary=["doc_id"],
            write_statistics=["doc_id", "doc_key", "window_index", "start"],
            store_schema=True,
            # A CRC-32 in every page header: the reader verifies it, so a flipped byte is an
            # error naming the shard and row group, never wrong tokens.
            write_page_checksum=True,
        ) as writer,
        ThreadPoolExecutor(1, thread_name_prefix="write-shard") as pool,
    ):
        writing = None
        for piece in pieces:
            if writing is not None:
                writing.result()
            writing = pool.submit(writer.write_table, piece, row_group_size=rows_per_group)
        if writing is not None:
            writing.result()
        if callable(metadata):
            metadata = metadata()
        if metadata:
            writer.add_key_value_metadata(dict(sorted(metadata.items())))
    return out.sha256.hexdigest(), out.bytes


def write_rows(rows: ShardRows | Iterable[ShardRows], sink: BinaryIO, *, window: int,
               rows_per_group: int | None = None,
               metadata: Metadata | None = None) -> tuple[str, int]:
    """`write_shard` of a shard's rows, built a piece at a time while the last one is written.

    Args:
        rows: the shard's rows, or its parts' rows in part order (`transforms.shards.spill`), taken
            one part at a time.
        sink, window, metadata: as `write_shard`; ``rows_per_group`` defaults to
            ``row_group_rows(window)`` (tests make it small).

    The same bytes as writing all the rows as one table, with a fraction of the memory:
    pieces hold whole row groups, whatever the parts' sizes.
    """
    group = row_group_rows(window) if rows_per_group is None else rows_per_group
    parts = [rows] if isinstance(rows, ShardRows) else rows
    return write_shard(_pieces(parts, PIECE_ROW_GROUPS * group), sink, rows_per_group=group,
                       metadata=metadata)


def _pieces(parts: Iterable[ShardRows], size: int) -> Iterator[pa.Table]:
    """The rows of the parts, end to end, as tables of ``size`` rows (the last may be short;
    no rows at all is one empty table, as ``pq.write_table`` writes an empty table)."""
    pending: list[pa.Table] = []
    need, made = size, False
    for part in parts:
        lo = 0
        while lo < part.num_rows:
            take = min(need, part.num_rows - lo)
            pending.append(part.table(lo, lo + take))
            lo, need = lo + take, need - take
            if need == 0:
                yield _one_table(pending)
                pending, need, made = [], size, True
        del part  # not held while the next part is read
    if pending or not made:
        yield _one_table(pending) if pending else ShardRows([]).table(0, 0)


def _one_table(tables: list[pa.Table]) -> pa.Table:
    # One chunk per column, as a single part's table has, so the bytes do not depend on
    # where parts end.
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()
