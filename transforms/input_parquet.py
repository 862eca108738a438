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
"""

from __future__ import annotations

from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["DamagedInput", "read_row_groups"]


class DamagedInput(OSError):
    """An input file whose bytes fail their own checksums (a Parquet page's CRC)."""


def read_row_groups(f: BinaryIO, *, start: int, end: int, first_row: int,
                    name: str) -> pa.Table:
    """Row groups ``[start, end)`` of the Parquet file ``f``, every page that carries a CRC
    checked against it.

    Args:
        f: the file, seekable. start, end: the row groups. first_row: the file's row number
            of the first row of group ``start``. name: the file as messages show it.

    Raises:
        DamagedInput: a page fails its checksum; the message names the file, the row group
            and its rows, the column and the fix.
    """
    pf = pq.ParquetFile(f, page_checksum_verification=True)
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
