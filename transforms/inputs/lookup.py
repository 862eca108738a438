"""Records read back by their source (``file:line``, ``file#row=N``, or a whole file).

A ``duplicate_id`` reject is found after the shuffle, where documents are tokens, not text;
its record is read back from the input here, so the reject keeps what was dropped. Each file
is streamed once, line by line (decompressed on the fly) or row group by row group, so memory
does not depend on the file's size.

Example: ``read_records(["/c/a.jsonl:2"], spec=ReadSpec(), open_file=open_local)`` is
``{"/c/a.jsonl:2": '{"id": "x", "text": "two"}'}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import BinaryIO

import pyarrow.parquet as pq

from transforms.inputs.chunks import Opener, detect_format
from transforms.inputs.codecs import decompressed
from transforms.params import ReadSpec

__all__ = ["read_records"]


def _position(source: str) -> tuple[str, str, int | None]:
    """(path, kind, number): kind is ``line``, ``row`` or ``file``."""
    path, mark, row = source.rpartition("#row=")
    if mark and row.isdigit():
        return path, "row", int(row)
    path, mark, line = source.rpartition(":")
    if mark and path and line.isdigit():
        return path, "line", int(line)
    return source, "file", None


def _lines(f: BinaryIO, wanted: set[int]) -> Iterator[tuple[int, str]]:
    for number, raw in enumerate(f, start=1):
        if number in wanted:
            line = raw.rstrip(b"\n").removesuffix(b"\r")
            yield number, line.decode("utf-8", errors="replace")
            wanted.discard(number)
            if not wanted:
                return


def _rows(f: BinaryIO, wanted: set[int], spec: ReadSpec) -> Iterator[tuple[int, str]]:
    pf = pq.ParquetFile(f, page_checksum_verification=True)  # as `read_chunk` read it
    first = 0
    for group in range(pf.metadata.num_row_groups):
        rows = pf.metadata.row_group(group).num_rows
        here = sorted(r for r in wanted if first <= r < first + rows)
        if here:
            texts = pf.read_row_group(group, columns=[spec.text_field]).column(0).to_pylist()
            for r in here:
                text = texts[r - first]
                yield r, text if isinstance(text, str) else repr(text)
        first += rows


def read_records(sources: Iterable[str], *, spec: ReadSpec,
                 open_file: Opener) -> dict[str, str]:
    """The raw record (a line, a row's text, a whole text file) at each source found.

    Sources that are no longer there (a line past the file's end) are left out; the caller
    keeps its reject without the record.
    """
    by_file: dict[tuple[str, str], set[int]] = {}
    for source in sources:
        path, kind, number = _position(source)
        by_file.setdefault((path, kind), set()).add(-1 if number is None else number)
    found: dict[str, str] = {}
    for (path, kind), numbers in sorted(by_file.items()):
        _, compression = detect_format(path, spec.format or "text")
        with open_file(path) as raw:
            if kind == "file":
                data = decompressed(raw, compression).read()
                found[path] = data.decode("utf-8", errors="replace")
            elif kind == "row":
                found.update((f"{path}#row={r}", text) for r, text in _rows(raw, numbers, spec))
            else:
                found.update((f"{path}:{n}", line)
                             for n, line in _lines(decompressed(raw, compression), set(numbers)))
    return found
