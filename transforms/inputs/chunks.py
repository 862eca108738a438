"""Input files → chunks → records, every file read exactly once.

What a record becomes: docs/format.md#documents; what fails the job: docs/running.md#bad-input.

A *chunk* is the piece of one input file that one worker parses: a whole file (text,
compressed files, small line files), a byte range of an uncompressed line file larger than
the chunk size, a run of row groups of a Parquet file, or a run of small whole files
(`group_files`: where the launcher plans the chunks of a local job). Reading goes in four
pure steps, each a function here, so that the pipeline only wires them:

1. `plan_chunks`: a matched file → its chunks. Byte-range chunks do not yet know the number
   of their first line.
2. `count_lines`: how many lines begin in a byte-range chunk; `number_chunks` then gives each
   chunk of a file its first line number, so ids keep true line numbers.
3. `read_chunk`: a chunk → its documents and rejects (`transforms.inputs.documents`).
4. `transforms.inputs.receipts.account_inputs`: the chunks' `Receipt`s → the number of records,
   after checking that the pieces of every file tile it exactly once.

Nothing here knows a file system: each step that reads takes ``open_file(path)``, which must
return a seekable binary file of the raw bytes (the pipeline passes Beam's FileSystems, so
``gs://`` works; tests pass `open_local`). Compressed files are decompressed by
`transforms.inputs.codecs`; file names become id prefixes in `transforms.inputs.names`.

Example: a 150 MB ``big.jsonl`` with 64 MiB chunks becomes chunks [0, 64 MiB), [64, 128 MiB)
and [128 MiB, 150 MB); if 40,000 lines begin in the first, the second's first line is 40,001.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO, NamedTuple

import pyarrow.parquet as pq

from transforms.inputs.codecs import BOM, CountingReader, compression_of, stream_reader
from transforms.inputs.documents import (
    TOO_LARGE_HEAD,
    Document,
    Reject,
    parse_lines,
    parse_parquet,
    parse_text_file,
    record_limit,
    too_large_record,
)
from transforms.inputs.names import shown_name
from transforms.inputs.parquet import (
    PAGE_FLOOR,
    DamagedInput,
    Oversized,
    oversized_groups,
    page_limit,
    read_row_groups,
)
from transforms.inputs.receipts import InputChanged, Receipt, check_unchanged
from transforms.params import ReadSpec

__all__ = [
    "CHUNK_BYTES",
    "GROUP_BYTES",
    "STREAM_BLOCK",
    "Chunk",
    "Opener",
    "count_lines",
    "detect_format",
    "group_files",
    "line_starts_in",
    "number_chunks",
    "open_local",
    "plan_chunks",
    "read_chunk",
]

# An uncompressed line-oriented file is read in ranges of this many bytes, in parallel.
CHUNK_BYTES = 64 << 20
# Whole files smaller than this are read in runs of up to this many bytes (`group_files`).
GROUP_BYTES = 8 << 20
_EXTENSIONS = {
    ".txt": "text",
    ".text": "text",
    ".md": "text",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
}
# Line and text files are read this many bytes at a time (`read_chunk`).
STREAM_BLOCK = 4 << 20

Opener = Callable[[str], BinaryIO]


def open_local(path: str) -> BinaryIO:
    """The `Opener` for local files (tests, and scripts that need no Beam)."""
    return open(path, "rb")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Chunk:
    """A piece of one input file that one worker parses.

    Attributes:
        path: the file's full path; rel: its id prefix (relative to its pattern's base).
        fmt: text, lines, jsonl or parquet; compression: gzip, bzip2, zstd or None.
        start, end: the byte range, or the row groups for Parquet.
        first: the first line (1-based) or row (0-based); None while still to be counted.
        size: the file's size in bytes, as matched.
        extent: what start/end range over: the size, or the number of row groups.
        mtime: the file's modification time as matched (seconds), or None if unknown.
            `read_chunk` checks that the file it reads still has this size and mtime, so a
            receipt stands for bytes actually read from the file as matched.
        files: for a run of small whole files read as one chunk (`group_files`), each
            file's own chunk, in path order; the run's path, rel and fmt are its first
            file's, its range [0, Σ sizes). Empty for a piece of one file.
    """

    path: str
    rel: str
    fmt: str
    compression: str | None
    start: int
    end: int
    first: int | None
    size: int
    extent: int
    mtime: float | None = None
    files: tuple[Chunk, ...] = ()

    def receipt(self, records: int, sampled_out: int = 0) -> Receipt:
        """What reading this chunk showed: ``records`` read, ``sampled_out`` of them left out
        by the sample; a run of files says it read each of them whole."""
        return Receipt(path=self.path, size=self.size, extent=self.extent, start=self.start,
                       end=self.end, records=records, mtime=self.mtime,
                       sampled_out=sampled_out,
                       files=tuple(f.receipt(0) for f in self.files))


def detect_format(path: str, forced: str | None) -> tuple[str, str | None]:
    """(format, compression) of a file from its extension, unless ``forced``.

    Raises:
        ValueError: the extension says nothing and no format was given.
    """
    compression = compression_of(path)
    stem = path if compression is None else path[: path.rfind(".")]  # .gz, .bz2, .zst
    if forced is not None:
        return forced, compression
    dot = stem.rfind(".")
    fmt = _EXTENSIONS.get(stem[dot:].lower()) if dot > stem.rfind("/") else None
    if fmt is None:
        raise ValueError(
            f"cannot tell the format of {path} from its extension; pass --format "
            "text|lines|jsonl|parquet"
        )
    return fmt, compression


def plan_chunks(
    path: str, *, rel: str, size: int, spec: ReadSpec, open_file: Opener,
    chunk_bytes: int = CHUNK_BYTES, mtime: float | None = None,
) -> Iterator[Chunk]:
    """The chunks of one matched file of ``size`` bytes (modified at ``mtime``, if known).

    Raises:
        ValueError: the format cannot be told, or a Parquet file is compressed around.
        OSError: a Parquet file's footer cannot be read (truncated, not Parquet); the
            message names the file.
    """
    fmt, compression = detect_format(shown_name(path), spec.format)
    whole = {"path": path, "rel": rel, "fmt": fmt, "compression": compression, "size": size,
             "mtime": mtime}
    if fmt == "parquet":
        if compression is not None:
            raise ValueError(
                f"{path}: compress Parquet inside the file (its codecs), not around it")
        yield from _parquet_chunks(whole, open_file, chunk_bytes)
    elif fmt == "text" or compression is not None or size <= chunk_bytes:
        yield Chunk(**whole, start=0, end=size, first=1, extent=size)
    else:
        for start in range(0, size, chunk_bytes):
            yield Chunk(**whole, start=start, end=min(start + chunk_bytes, size), first=None,
                        extent=size)


def _parquet_chunks(whole: dict, open_file: Opener, chunk_bytes: int) -> Iterator[Chunk]:
    try:
        with open_file(whole["path"]) as f:
            meta = pq.ParquetFile(f).metadata
    except Exception as e:  # pyarrow raises ArrowInvalid (a ValueError) for a bad footer
        raise OSError(
            f"cannot read input file {shown_name(whole['path'])}: {e}; it is not a complete "
            "Parquet file (truncated or still being written?): replace it or leave it out of "
            "--input"
        ) from e
    groups = meta.num_row_groups
    row, first_group, first_row, size = 0, 0, 0, 0
    for group in range(groups):
        if size >= chunk_bytes:
            yield Chunk(**whole, start=first_group, end=group, first=first_row, extent=groups)
            first_group, first_row, size = group, row, 0
        size += meta.row_group(group).total_byte_size
        row += meta.row_group(group).num_rows
    yield Chunk(**whole, start=first_group, end=groups, first=first_row, extent=groups)


def group_files(chunks: Iterable[Chunk], *, max_bytes: int = GROUP_BYTES) -> list[Chunk]:
    """The chunks, in path order, with each run of small whole files read as one chunk.

    A chunk of a whole file (not Parquet) smaller than ``max_bytes`` joins the run before it,
    until the run would hold ``max_bytes`` of files as stored; any other chunk ends the run.
    A run of one file stays that file's chunk. Each file is still read, checked and receipted
    on its own (`read_chunk`, `Chunk.receipt`); what a run saves is the per-chunk work of
    the job's steps (a batch, a flush, a receipt, a progress report per file). A run's files
    are consecutive in path order, so a run keeps its rejects in input order.

    >>> tiny = [Chunk(path=f"d/{n}", rel=n, fmt="jsonl", compression=None, start=0, end=5,
    ...               first=1, size=5, extent=5) for n in "cab"]
    >>> [[f.rel for f in c.files] for c in group_files(tiny, max_bytes=11)]
    [['a', 'b'], []]
    """
    out: list[Chunk] = []
    run: list[Chunk] = []
    held = 0  # bytes of the run's files

    def end_run() -> None:
        nonlocal held
        held = 0
        if len(run) == 1:
            out.append(run[0])
        elif run:
            total, first = sum(c.size for c in run), run[0]
            out.append(Chunk(path=first.path, rel=first.rel, fmt=first.fmt, compression=None,
                             start=0, end=total, first=1, size=total, extent=total,
                             files=tuple(run)))
        run.clear()

    for chunk in sorted(chunks, key=lambda c: (c.path, c.start)):
        whole = (chunk.fmt != "parquet" and not chunk.files and chunk.start == 0
                 and chunk.end == chunk.extent == chunk.size and chunk.first == 1)
        if not whole or chunk.size >= max_bytes:
            end_run()
            out.append(chunk)
            continue
        if held + chunk.size > max_bytes:
            end_run()
        run.append(chunk)
        held += chunk.size
    end_run()
    return out


def line_starts_in(data: bytes, start: int, end: int) -> int:
    """How many lines of a file begin at a byte offset in [start, end).

    ``data`` holds the file's bytes ``[max(start − 1, 0), end)``: the byte before the range
    tells whether the range begins a line. Lines begin at offset 0 and after every newline
    that is not the file's last byte; a newline at offset ``end − 1`` begins a line in the
    next range, so it is not counted here.
    """
    first = 1 if start == 0 and end > 0 else 0
    return first + data.count(b"\n", 0, end - 1 - max(start - 1, 0))


def count_lines(chunk: Chunk, open_file: Opener) -> int:
    """The number of lines that begin in a chunk still to be numbered (else 0)."""
    if chunk.first is not None:
        return 0
    first = max(chunk.start - 1, 0)
    try:
        with open_file(chunk.path) as f:
            f.seek(first)
            data = f.read(chunk.end - first)
    except Exception as e:  # an object store's error names no file: this one does
        raise OSError(f"cannot read input file {shown_name(chunk.path)}: {e}") from e
    return line_starts_in(data, chunk.start, chunk.end)


def number_chunks(counted: Iterable[tuple[Chunk, int]]) -> Iterator[Chunk]:
    """The chunks of one file, each with its first line, from (chunk, `count_lines`) pairs."""
    line = 1
    for chunk, lines in sorted(counted, key=lambda c: c[0].start):
        yield chunk if chunk.first is not None else dataclasses.replace(chunk, first=line)
        line += lines


class _Long(NamedTuple):
    """A line longer than the limit, streamed through: its length (without its newline) and
    its first bytes."""

    size: int
    head: bytes


def _bounded_lines(read: Callable[[int], bytes], *, limit: int,
                   block: int) -> Iterator[bytes | _Long]:
    r"""The lines of a stream as pieces of whole lines, each newline-terminated except perhaps
    the stream's last; a line that grows past ``limit`` bytes before its newline is a
    `_Long` instead, and the rest of it is read through, a block at a time, never held.

    At most about ``block`` + ``limit`` bytes are held at once, whatever the lines' lengths.
    A line longer than ``limit`` that happens to end inside a block is in a piece like any
    other (the parser rejects it unparsed, `transforms.inputs.documents.record_limit`). A line's
    length counts its bytes up to its newline (a ``\r`` included).
    """
    parts: list[bytes] = []  # the pieces of the line not yet ended
    held = 0
    data = read(block)
    while data:
        cut = data.rfind(b"\n") + 1
        if cut:
            yield b"".join([*parts, data[:cut]]) if parts else data[:cut]
            parts, held, data = [], 0, data[cut:]
        if held + len(data) > limit:  # the line not yet ended is too long already
            head = _head([*parts, data])
            size = held + len(data)
            parts, held = [], 0
            while data := read(block):
                newline = data.find(b"\n")
                if len(head) < TOO_LARGE_HEAD:  # a limit below it: the head goes on
                    end = len(data) if newline == -1 else newline
                    head += data[: min(TOO_LARGE_HEAD - len(head), end)]
                if newline != -1:
                    size += newline
                    data = data[newline + 1 :] or read(block)
                    break
                size += len(data)
            yield _Long(size, head)
            continue
        if data:
            parts.append(data)
            held += len(data)
        data = read(block)
    if parts:
        yield b"".join(parts)


def _head(parts: list[bytes]) -> bytes:
    """The first `TOO_LARGE_HEAD` bytes of ``parts`` end to end, joining no more of them."""
    head = b""
    for part in parts:
        head += part[: TOO_LARGE_HEAD - len(head)]
        if len(head) >= TOO_LARGE_HEAD:
            break
    return head


class _LineRange:
    """A ``read(n)`` over the lines of an uncompressed file that begin at a byte offset in
    [start, end), read a block at a time.

    The byte before ``start`` tells whether ``start`` begins a line (else the line that
    began before is passed over); the last line is read past ``end`` to its newline.
    Consecutive ranges thus hold every line once. ``consumed``: how many bytes of
    ``[start, end)`` the file held, once the reads have reached ``end``.
    """

    def __init__(self, f: BinaryIO, start: int, end: int) -> None:
        self._f = f
        self._start = start
        self._end = end
        self._at = max(start - 1, 0)  # the file offset of the next byte read
        self._skipping = start > 0  # still in the line begun before ``start``
        self._last = b"\n"  # the last byte read
        self._finished = False
        self.consumed = 0
        f.seek(self._at)

    def read(self, size: int) -> bytes:
        while not self._finished:
            data = self._next(size)
            if not data:
                self._finished = True
                break
            if self._skipping:
                newline = data.find(b"\n")
                if newline == -1:
                    continue
                self._skipping = False
                data = data[newline + 1 :]
                if not data:
                    continue
            return data
        return b""

    def _next(self, size: int) -> bytes:
        """The next bytes of the file: of [start − 1, end), then past ``end`` up to the
        newline that ends the range's last line."""
        if self._at < self._end:
            data = self._f.read(min(size, self._end - self._at))
            if data:  # else the file ends before the range does
                self.consumed += len(data) - max(self._start - self._at, 0)
                self._at += len(data)
                self._last = data[-1:]
            return data
        if self._skipping or self._last == b"\n":  # no line begins in the range, or it ended
            return b""
        data = self._f.read(size)
        newline = data.find(b"\n")
        if newline != -1:
            data = data[: newline + 1]
        self._at += len(data)
        self._last = data[-1:]
        return data


def read_chunk(chunk: Chunk, spec: ReadSpec, open_file: Opener, *,
               block_bytes: int = STREAM_BLOCK,
               page_floor: int = PAGE_FLOOR) -> Iterator[Document | Reject]:
    """The documents and rejects of one chunk, in record order.

    A line file (plain or compressed) or a text file is read ``block_bytes`` at a time as
    its records are taken: no more than a block and one record of at most `record_limit`
    bytes is held, and a longer record is a ``too_large`` reject, read through unheld
    (docs/running.md#bad-input). Parquet row groups are read at once, except those holding
    a page larger than `transforms.inputs.parquet.page_limit` (with ``page_floor``), whose
    rows are ``too_large`` rejects (`transforms.inputs.parquet.oversized_groups`). Tests
    shrink the block and the floor to reach the paths a huge record takes.

    Raises:
        ValueError: every record would fail the same way (a Parquet file without the text
            column); the message names the file and the fix.
        OSError: the file cannot be opened (at once), or read or decompressed (truncated,
            corrupt: as its records are taken); the message names it.
    """
    if chunk.files:  # a run of small files: each read (and checked) in turn, when reached
        return itertools.chain.from_iterable(
            read_chunk(f, spec, open_file, block_bytes=block_bytes, page_floor=page_floor)
            for f in chunk.files)
    first = 1 if chunk.first is None else chunk.first
    where = {"path": shown_name(chunk.path), "rel": chunk.rel, "spec": spec}
    if chunk.fmt == "parquet":
        return _read_parquet(chunk, open_file, first=first, where=where,
                             limit=page_limit(spec.max_doc_bytes, page_floor))
    try:
        f = open_file(chunk.path)
    except Exception as e:  # an object store's error names no file: this one does
        raise OSError(f"cannot read input file {shown_name(chunk.path)}: {e}") from e
    return _stream_records(chunk, f, first=first, where=where, block=block_bytes)


def _read_parquet(chunk: Chunk, open_file: Opener, *, first: int, where: dict,
                  limit: int) -> Iterator[Document | Reject]:
    """The rows of a chunk's row groups: read at once, except the groups holding a page too
    large to hold (`transforms.inputs.parquet.oversized_groups`), whose rows are ``too_large``
    rejects, unread."""
    spec: ReadSpec = where["spec"]
    name = shown_name(chunk.path)
    out: list[Iterable[Document | Reject]] = []
    try:
        with open_file(chunk.path) as f:
            meta = pq.ParquetFile(f).metadata  # the footer, read once
            refused = oversized_groups(f, start=chunk.start, end=chunk.end,
                                       limit=limit, metadata=meta)
            row, group = first, chunk.start
            while group < chunk.end:  # runs of readable groups, and each refused one
                if group in refused:
                    rows = meta.row_group(group).num_rows
                    out.append(_refused_rows(refused[group], group=group, first_row=row,
                                             rows=rows, name=name, spec=spec, limit=limit))
                    row, group = row + rows, group + 1
                    continue
                stop = next((g for g in range(group, chunk.end) if g in refused), chunk.end)
                try:
                    table = read_row_groups(f, start=group, end=stop, first_row=row, name=name,
                                            metadata=meta)
                except DamagedInput:
                    check_unchanged(chunk, f, None)  # rewritten under the job: not damaged
                    raise
                out.append(parse_parquet(table, first_row=row, **where))
                row, group = row + table.num_rows, stop
            check_unchanged(chunk, f, None)
    except (InputChanged, DamagedInput):
        raise
    except Exception as e:  # a file that cannot be read fails the job, naming it
        raise OSError(f"cannot read input file {name}: {e}") from e
    return itertools.chain.from_iterable(out)


def _refused_rows(found: Oversized, *, group: int, first_row: int, rows: int, name: str,
                  spec: ReadSpec, limit: int) -> Iterator[Reject]:
    """A ``too_large`` reject for each row of a row group holding a page too large to hold."""
    detail = (f"row group {group} (rows {first_row} to {first_row + rows - 1}) holds a page "
              f"of {found.size} bytes uncompressed in column {found.column!r}, more than the "
              f"{limit} bytes a page may take with --max-doc-bytes="
              f"{spec.max_doc_bytes}; its rows are not read")
    for row in range(first_row, first_row + rows):
        yield Reject(reason="too_large", source=f"{name}#row={row}", detail=detail, record="",
                     truncated=True)


def _stream_records(chunk: Chunk, f: BinaryIO, *, first: int, where: dict,
                    block: int) -> Iterator[Document | Reject]:
    """The records of a line or text chunk of the open file ``f``, read a block at a time;
    the file is checked (`check_unchanged`) and closed once they are all taken."""
    spec: ReadSpec = where["spec"]
    name = where["path"]
    limit = record_limit(spec, chunk.fmt)
    with f:
        try:
            if chunk.compression is not None or chunk.fmt == "text":
                counted = CountingReader(f)
                read = stream_reader(counted, chunk.compression).read
                reads: CountingReader | _LineRange = counted
            else:
                reads = _LineRange(f, chunk.start, chunk.end)
                read = reads.read
            if chunk.fmt == "text":
                yield _whole_file(read, limit=limit, block=block, **where)
            else:
                line, at_start = first, chunk.start == 0
                for piece in _bounded_lines(read, limit=limit, block=block):
                    if isinstance(piece, _Long):
                        yield too_large_record(size=piece.size, head=piece.head,
                                               source=f"{name}:{line}", spec=spec,
                                               fmt=chunk.fmt)
                        line, at_start = line + 1, False
                        continue
                    if at_start and piece.startswith(BOM):
                        piece = piece[len(BOM) :]  # not part of the first record
                    at_start = False
                    yield from parse_lines(piece, fmt=chunk.fmt, first_line=line, **where)
                    line += piece.count(b"\n") + (not piece.endswith(b"\n"))
            check_unchanged(chunk, f, reads.consumed)
        except (InputChanged, DamagedInput):
            raise
        except Exception as e:  # a file that cannot be read fails the job, naming it
            raise OSError(f"cannot read input file {name}: {e}") from e


def _whole_file(read: Callable[[int], bytes], *, limit: int, block: int, path: str, rel: str,
                spec: ReadSpec) -> Document | Reject:
    """A text file's one document, or its ``too_large`` reject once it passes ``limit``
    bytes (the rest read through, unheld, to its length)."""
    parts: list[bytes] = []
    held = 0
    while data := read(block):
        parts.append(data)
        held += len(data)
        if held > limit:
            head = _head(parts)
            parts.clear()
            while data := read(block):
                held += len(data)
                if len(head) < TOO_LARGE_HEAD:  # a limit below it: the head goes on
                    head += data[: TOO_LARGE_HEAD - len(head)]
            return too_large_record(size=held, head=head, source=path, spec=spec, fmt="text")
    data = b"".join(parts)
    if data.startswith(BOM):
        data = data[len(BOM) :]  # not part of the text
    return parse_text_file(data, path=path, rel=rel, spec=spec)
