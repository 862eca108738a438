"""Input Parquet read with its page checksums verified (docs/integrity.md#the-job).

A Parquet writer may store a CRC-32 of every data page in the page's header (Spark and
parquet-mr do by default, pyarrow with ``write_page_checksum=True``). A flipped bit in such
a file is then detectable, and a job that read it without checking would silently turn a
damaged record into a changed text. Every input row group is read with
``page_checksum_verification=True``: a page that fails its CRC fails the job, naming the
file, the row group (with its rows) and the column. Pages written without a CRC are read as
they are; the cost of checking the ones that have one is measured by
``bench/bench_checksums.py``.

Example: row 1500 of ``web/a.parquet`` (1000 rows per group) damaged on disk stops the job
with ``input file web/a.parquet is damaged: row group 1 (rows 1000 to 1999), column 'text'
fails its page checksum (…)``.

pyarrow decompresses a page whole and cannot skip one, so a single value of 1 GiB (which a
33 KB file can hold) would be held whole, three times over, before its size could be
checked. `oversized_groups` finds, before anything is decompressed, the row groups holding a
page larger than `page_limit` (from the page headers, read only in column chunks larger than
the limit, as the footer tells); the job rejects their rows as ``too_large``, unread.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["PAGE_FLOOR", "DamagedInput", "Oversized", "oversized_groups", "page_limit",
           "read_row_groups"]

# A Parquet page is read when it holds at most max(4 × --max-doc-bytes + 1 MiB, this) bytes
# uncompressed (`page_limit`): writers cut pages at about 1 MiB, or after a run of values.
PAGE_FLOOR = 256 << 20


class DamagedInput(OSError):
    """An input file whose bytes fail their own checksums (a Parquet page's CRC)."""


def read_row_groups(f: BinaryIO, *, start: int, end: int, first_row: int, name: str,
                    metadata: pq.FileMetaData | None = None) -> pa.Table:
    """Row groups ``[start, end)`` of the Parquet file ``f``, every page that carries a CRC
    checked against it.

    Args:
        f: the file, seekable. start, end: the row groups. first_row: the file's row number
            of the first row of group ``start``. name: the file as messages show it.
        metadata: the file's footer, if read already (else it is read).

    Raises:
        DamagedInput: a page fails its checksum; the message names the file, the row group
            and its rows, the column and the fix.
    """
    pf = pq.ParquetFile(f, page_checksum_verification=True, metadata=metadata)
    try:
        return pf.read_row_groups(range(start, end))
    except OSError as e:
        if "checksum" not in str(e).lower():
            raise
        raise DamagedInput(_damage(pf, start=start, end=end, first_row=first_row, name=name,
                                   error=e)) from e


def _damage(pf: pq.ParquetFile, *, start: int, end: int, first_row: int, name: str,
            error: OSError) -> str:
    """Where the first page failing its checksum is: each column of each row group read
    alone (only after a failure, so it costs nothing otherwise)."""
    where = f"one of row groups {start} to {end - 1}"
    row = first_row
    for group in range(start, end):
        rows = pf.metadata.row_group(group).num_rows
        bad = [column for column in pf.schema_arrow.names if not _verifies(pf, group, column)]
        if bad:
            where = f"row group {group} (rows {row} to {row + rows - 1}), column {bad[0]!r}"
            break
        row += rows
    return (f"input file {name} is damaged: {where} fails its page checksum ({error}); its "
            "bytes are not what its writer wrote (a bad disk, copy or download): restore the "
            "file from its source, or leave it out of --input; no manifest was written")


def _verifies(pf: pq.ParquetFile, group: int, column: str) -> bool:
    try:
        pf.read_row_group(group, columns=[column])
    except OSError:
        return False
    return True


def page_limit(max_doc_bytes: int, floor: int = PAGE_FLOOR) -> int:
    """The most bytes a page of an input Parquet file may hold uncompressed to be read:
    max(4 × ``max_doc_bytes`` + 1 MiB, ``floor``).

    A page holds at least one whole value, and pyarrow decompresses it whole: a value over
    the limit cannot be rejected without holding it. The floor keeps the pages writers cut
    after a run of long values (pyarrow checks a page's size every 1024 values) readable.
    """
    return max(4 * max_doc_bytes + (1 << 20), floor)


class Oversized(NamedTuple):
    """A row group holding a page too large to read: the column, and the page's size
    uncompressed."""

    column: str
    size: int


def oversized_groups(f: BinaryIO, *, start: int, end: int, limit: int,
                     metadata: pq.FileMetaData | None = None) -> dict[int, Oversized]:
    """The row groups in ``[start, end)`` of the Parquet file ``f`` that hold a page of more
    than ``limit`` bytes uncompressed, by row group, read from the footer and the page
    headers: nothing is decompressed. Only column chunks larger than ``limit`` uncompressed
    (the footer says) have their page headers read; a header that cannot be parsed is left to
    pyarrow, which reports a damaged file its own way. ``metadata``: the file's footer, if
    read already.
    """
    meta = metadata if metadata is not None else pq.ParquetFile(f).metadata
    found: dict[int, Oversized] = {}
    for group in range(start, end):
        rg = meta.row_group(group)
        for c in range(rg.num_columns):
            col = rg.column(c)
            if col.total_uncompressed_size <= limit:
                continue
            begin = col.data_page_offset
            if col.has_dictionary_page and col.dictionary_page_offset is not None:
                begin = min(begin, col.dictionary_page_offset)
            try:
                largest = max(_page_sizes(f, begin, begin + col.total_compressed_size), default=0)
            except (EOFError, IndexError, ValueError):
                continue
            if largest > limit:
                found[group] = Oversized(col.path_in_schema, largest)
                break
    return found


def _page_sizes(f: BinaryIO, begin: int, end: int) -> Iterator[int]:
    """The uncompressed size of each page of the column chunk at ``[begin, end)``, from its
    page headers (Thrift compact protocol: 2 is ``uncompressed_page_size``, 3
    ``compressed_page_size``)."""
    at = begin
    while at < end:
        header = _Compact(f, at)
        sizes = {2: 0, 3: 0}
        for field, kind in header.fields():
            if field in sizes and kind == 5:  # i32
                sizes[field] = header.zigzag()
            else:
                header.skip(kind)
        if sizes[3] < 0 or sizes[2] < 0:
            raise ValueError("a page header with a negative size")
        yield sizes[2]
        at += header.used + sizes[3]


class _Compact:
    """A reader of Thrift's compact protocol from a file at an offset, enough to walk a
    struct and skip what it does not need."""

    def __init__(self, f: BinaryIO, at: int) -> None:
        self._f = f
        f.seek(at)
        self._buffer = b""
        self._i = 0
        self.used = 0  # bytes taken so far

    def byte(self) -> int:
        if self._i >= len(self._buffer):
            self._buffer, self._i = self._f.read(1 << 12), 0
            if not self._buffer:
                raise EOFError("a Parquet page header ends early")
        self._i += 1
        self.used += 1
        return self._buffer[self._i - 1]

    def varint(self) -> int:
        shift = value = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
            if shift > 70:
                raise ValueError("a varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def fields(self) -> Iterator[tuple[int, int]]:
        """(field id, type) of each field of a struct; the caller reads or skips the value."""
        last = 0
        while True:
            head = self.byte()
            if head == 0:  # STOP
                return
            delta, kind = head >> 4, head & 0x0F
            last = last + delta if delta else self.zigzag()
            yield last, kind

    def skip(self, kind: int) -> None:
        if kind in (1, 2):  # a boolean field: its value is in the type
            return
        if kind == 3:
            self.byte()
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self._skip_bytes(8)
        elif kind == 8:
            self._skip_bytes(self.varint())
        elif kind in (9, 10):  # list, set
            head = self.byte()
            size, element = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            for _ in range(size):
                self.byte() if element in (1, 2) else self.skip(element)
        elif kind == 11:  # map
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4)
                    self.skip(types & 0x0F)
        elif kind == 12:  # struct
            for _, inner in self.fields():
                self.skip(inner)
        else:
            raise ValueError(f"Thrift type {kind} in a Parquet page header")

    def _skip_bytes(self, n: int) -> None:
        if n < 0:
            raise ValueError("a negative length")
        for _ in range(n):
            self.byte()
