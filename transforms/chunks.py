"""Input files → chunks → records, every file read exactly once (SPEC §2, §7).

A *chunk* is the piece of one input file that one worker parses: a whole file (text,
compressed files, small line files), a byte range of an uncompressed line file larger than
the chunk size, or a run of row groups of a Parquet file. Reading goes in four pure steps,
each a function here, so that the pipeline only wires them:

1. `plan_chunks`: a matched file → its chunks. Byte-range chunks do not yet know the number
   of their first line.
2. `count_lines`: how many lines begin in a byte-range chunk; `number_chunks` then gives each
   chunk of a file its first line number, so ids keep true line numbers.
3. `read_chunk`: a chunk → its documents and rejects (`transforms.documents`).
4. `account_inputs`: the chunks' `Receipt`s → the number of records, after checking that the
   pieces of every file tile it exactly once.

Nothing here knows a file system: each step that reads takes ``open_file(path)``, which must
return a seekable binary file of the raw bytes (the pipeline passes Beam's FileSystems, so
``gs://`` works; tests pass `open_local`). Compressed files are decompressed here, with Python's
own codecs, which report a stream that ends early: a truncated ``.gz``, ``.bz2`` or ``.zst``
fails the job instead of losing its tail.

Example: a 150 MB ``big.jsonl`` with 64 MiB chunks becomes chunks [0, 64 MiB), [64, 128 MiB)
and [128 MiB, 150 MB); if 40,000 lines begin in the first, the second's first line is 40,001.
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import io
import os
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

import pyarrow.parquet as pq

from transforms.documents import (
    Document,
    Reject,
    parse_lines,
    parse_parquet,
    parse_text_file,
)
from transforms.input_parquet import DamagedInput, read_row_groups
from transforms.params import ReadSpec

__all__ = [
    "BOM",
    "CHUNK_BYTES",
    "COMPRESSIONS",
    "Chunk",
    "InputChanged",
    "Opener",
    "Receipt",
    "account_inputs",
    "common_base",
    "compression_of",
    "count_lines",
    "decompressed",
    "detect_format",
    "disambiguated_name",
    "line_starts_in",
    "number_chunks",
    "open_local",
    "pattern_base",
    "plan_chunks",
    "read_chunk",
    "relative_name",
    "shown_name",
]

# An uncompressed line-oriented file is read in ranges of this many bytes, in parallel.
CHUNK_BYTES = 64 << 20
COMPRESSIONS = {".gz": "gzip", ".bz2": "bzip2", ".zst": "zstd"}
_EXTENSIONS = {
    ".txt": "text",
    ".text": "text",
    ".md": "text",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
}
_READ_BLOCK = 1 << 20
BOM = b"\xef\xbb\xbf"

Opener = Callable[[str], BinaryIO]


def open_local(path: str) -> BinaryIO:
    """The `Opener` for local files (tests, and scripts that need no Beam)."""
    return open(path, "rb")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Receipt:
    """What one parsed chunk says about itself.

    ``start``/``end`` are byte offsets, or row-group indices for Parquet, in ``[0, extent)``;
    ``extent`` is the file's size in bytes, or its number of row groups.
    """

    path: str
    size: int
    extent: int
    start: int
    end: int
    records: int
    mtime: float | None = None
    sampled_out: int = 0  # records left out by --sample (`transforms.splits`), of ``records``


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

    def receipt(self, records: int, sampled_out: int = 0) -> Receipt:
        return Receipt(path=self.path, size=self.size, extent=self.extent, start=self.start,
                       end=self.end, records=records, mtime=self.mtime,
                       sampled_out=sampled_out)


def pattern_base(pattern: str) -> str:
    """The directory part of a pattern before its first glob character, with a final '/'.

    >>> pattern_base("gs://b/corpus/*/part-*.jsonl.gz")
    'gs://b/corpus/'
    """
    cut = len(pattern)
    for ch in "*?[":
        i = pattern.find(ch)
        if i != -1:
            cut = min(cut, i)
    return pattern[: pattern.rfind("/", 0, cut) + 1]


def relative_name(path: str, base: str) -> str:
    """The path of a matched file relative to its pattern's base (stable across machines).

    A name that is not valid UTF-8 (a local file name Python holds with surrogate escapes)
    is shown with its undecodable bytes escaped: ``caf\\xe9.jsonl``.
    """
    rel = path[len(base) :] if base and path.startswith(base) else path.rsplit("/", 1)[-1]
    return shown_name(rel)


def shown_name(path: str) -> str:
    """``path`` with bytes that are not UTF-8 (surrogate escapes) shown as ``\\xNN``."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def common_base(bases: Iterable[str]) -> str:
    """The longest directory prefix (ending in '/') shared by pattern bases, or ''.

    >>> common_base(["c/en/", "c/zh/"])
    'c/'
    """
    bases = list(bases)
    prefix = os.path.commonprefix(bases) if bases else ""
    return prefix[: prefix.rfind("/") + 1]


def disambiguated_name(path: str, bases: Iterable[str]) -> str:
    """The id prefix of a file whose `relative_name` is shared by another file of the job:
    its path relative to the common base of every pattern (the full path if there is none),
    so ``en/part-0.jsonl`` and ``zh/part-0.jsonl`` stay apart."""
    base = common_base(bases)
    return shown_name(path[len(base) :] if base and path.startswith(base) else path)


def compression_of(path: str) -> str | None:
    """gzip, bzip2 or zstd, as the file name's last extension says; None: not compressed."""
    for ext, kind in COMPRESSIONS.items():
        if path.endswith(ext):
            return kind
    return None


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


def _read_line_range(f: BinaryIO, start: int, end: int) -> tuple[bytes, int]:
    """The whole lines of an uncompressed file that begin at a byte offset in [start, end).

    The byte before ``start`` is read to tell whether ``start`` begins a line; the last line
    is read past ``end`` to its newline. Consecutive ranges thus hold every line once.
    Returns the lines and how many bytes of ``[start, end)`` the file held.
    """
    first = max(start - 1, 0)
    f.seek(first)
    data = f.read(end - first)
    consumed = max(len(data) - (start - first), 0)  # bytes of [start, end) the file had
    if start > 0:
        newline = data.find(b"\n")
        data = b"" if newline == -1 else data[newline + 1 :]
    if data and not data.endswith(b"\n"):
        parts = [data]
        while block := f.read(_READ_BLOCK):
            i = block.find(b"\n")
            if i != -1:
                parts.append(block[: i + 1])
                break
            parts.append(block)
        data = b"".join(parts)
    return data, consumed


class _CountingReader(io.RawIOBase):
    """A read-only view of a binary file that counts the bytes read through it (codecs read
    the compressed file through it, so the receipt knows how much of the file was used)."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        data = self._f.read(len(b))
        b[: len(data)] = data
        self.consumed += len(data)
        return len(data)

    def read(self, size: int = -1) -> bytes:
        data = self._f.read() if size is None or size < 0 else self._f.read(size)
        self.consumed += len(data)
        return data


class InputChanged(OSError):
    """An input file is not the file that was matched when the job started."""


def _seen(f: BinaryIO) -> tuple[int, float | None]:
    """(size, mtime) of an open file as it is now; mtime None where the file system gives
    no descriptor (object stores: their size is still seen)."""
    position = f.tell()
    size = f.seek(0, io.SEEK_END)
    f.seek(position)
    try:
        mtime: float | None = os.fstat(f.fileno()).st_mtime
    except (AttributeError, OSError, io.UnsupportedOperation, ValueError):
        mtime = None
    return size, mtime


def _check_unchanged(chunk: Chunk, f: BinaryIO, consumed: int | None) -> None:
    """Fail unless the open file still is the file that was matched (size, mtime) and the
    read consumed what the chunk planned."""
    size, mtime = _seen(f)
    changed = size != chunk.size or (
        mtime is not None and chunk.mtime is not None and mtime != chunk.mtime)
    if consumed is not None and consumed != (chunk.end - chunk.start):
        changed = True
    if changed:
        raise InputChanged(
            f"input file {shown_name(chunk.path)} changed while the job ran: matched with "
            f"{chunk.size} bytes (mtime {chunk.mtime}), read with {size} bytes (mtime "
            f"{mtime}); no manifest was written: rerun once the input stops changing"
        )


def decompressed(f: BinaryIO, compression: str | None) -> BinaryIO:
    """A stream of the decompressed bytes of ``f`` (``f`` itself when not compressed).

    gzip and bzip2 streams that end early raise EOFError; a zstd stream reader does not, so
    a whole-file read goes through `_decompress`, which checks every zstd frame's end.
    """
    if compression is None:
        return f
    if compression == "gzip":
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    if compression == "bzip2":
        return bz2.BZ2File(f, mode="rb")  # type: ignore[return-value]
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
    return io.BufferedReader(reader)  # type: ignore[arg-type]


def _decompress(f: BinaryIO, compression: str | None) -> bytes:
    """The whole decompressed content; a stream that ends early raises EOFError."""
    if compression != "zstd":
        return decompressed(f, compression).read()
    import zstandard

    data, out = f.read(), []
    while data:
        frame = zstandard.ZstdDecompressor().decompressobj()
        out.append(frame.decompress(data))
        if not frame.eof:
            raise EOFError("zstd stream ended before the end of its frame")
        data = frame.unused_data
    return b"".join(out)


def read_chunk(chunk: Chunk, spec: ReadSpec, open_file: Opener) -> Iterator[Document | Reject]:
    """The documents and rejects of one chunk, in record order.

    The chunk's bytes (or Parquet row groups) are read at once; its records are parsed as
    they are taken.

    Raises:
        ValueError: every record would fail the same way (a Parquet file without the text
            column); the message names the file and the fix.
        OSError: the file cannot be read or decompressed (truncated, corrupt); the message
            names it.
    """
    first = 1 if chunk.first is None else chunk.first
    where = {"path": shown_name(chunk.path), "rel": chunk.rel, "spec": spec}
    try:
        with open_file(chunk.path) as f:
            consumed: int | None = None
            if chunk.fmt == "parquet":
                try:
                    table = read_row_groups(f, start=chunk.start, end=chunk.end,
                                            first_row=first, name=shown_name(chunk.path))
                except DamagedInput:
                    _check_unchanged(chunk, f, None)  # rewritten under the job: not damaged
                    raise
            elif chunk.compression is not None or chunk.fmt == "text":
                counted = _CountingReader(f)
                data = _decompress(counted, chunk.compression)
                consumed = counted.consumed
            else:
                data, consumed = _read_line_range(f, chunk.start, chunk.end)
            _check_unchanged(chunk, f, consumed)
    except (InputChanged, DamagedInput):
        raise
    except Exception as e:  # a file that cannot be read fails the job, naming it
        raise OSError(f"cannot read input file {shown_name(chunk.path)}: {e}") from e
    if chunk.start == 0 and chunk.fmt != "parquet" and data.startswith(BOM):
        data = data[len(BOM) :]  # a UTF-8 byte order mark is not part of the first record
    if chunk.fmt == "parquet":
        return iter(parse_parquet(table, first_row=first, **where))
    if chunk.fmt == "text":
        return iter([parse_text_file(data, **where)])
    return parse_lines(data, fmt=chunk.fmt, first_line=first, **where)


def account_inputs(
    receipts: Iterable[Receipt],
    expected: dict[str, int] | dict[str, tuple[int, float | None]] | None,
) -> int:
    """The number of records read, after checking that every input was read exactly once.

    The pieces of each file must tile ``[0, extent)`` with no gap and no overlap, and, when
    ``expected`` ({path: size} or {path: (size, mtime)} as matched before the job started)
    is given, every expected file must be there with its size (and mtime, where both are
    known) and no other. A runner that lost or repeated work, or an input that changed
    after the launcher matched it, thus fails the job instead of writing a dataset that
    silently lacks (or doubles) part of its input.

    Raises:
        RuntimeError: naming the file and what is wrong with it.
    """
    by_path: dict[str, list[Receipt]] = {}
    for r in receipts:
        by_path.setdefault(r.path, []).append(r)
    launch: dict[str, tuple[int, float | None]] | None = None
    if expected is not None:
        launch = {p: (v, None) if isinstance(v, int) else (v[0], v[1])
                  for p, v in expected.items()}
        missing = sorted(set(launch) - set(by_path))
        if missing:
            raise RuntimeError(
                f"{len(missing)} input files were never read (e.g. {shown_name(missing[0])}): "
                "the runner lost work, or the file disappeared while the job ran; no manifest "
                "was written, rerun the job"
            )
        extra = sorted(set(by_path) - set(launch))
        if extra:
            raise RuntimeError(
                f"{shown_name(extra[0])} was read but did not match when the job started: "
                "inputs changed while the job ran; no manifest was written"
            )
    total = 0
    for path, pieces in sorted(by_path.items()):
        pieces.sort(key=lambda r: (r.start, r.end))
        seen = {(r.size, r.extent, r.mtime) for r in pieces}
        name = shown_name(path)
        if len(seen) != 1:
            raise RuntimeError(
                f"input file {name} changed while the job ran (its chunks saw (size, extent, "
                f"mtime) {sorted(seen, key=repr)}); no manifest was written: rerun once the "
                "input stops changing"
            )
        if launch is not None:
            size, mtime = launch[path]
            read = pieces[0]
            if read.size != size or (
                    mtime is not None and read.mtime is not None and read.mtime != mtime):
                raise RuntimeError(
                    f"input file {name} changed while the job ran: {size} bytes (mtime {mtime}) "
                    f"when the job started, {read.size} bytes (mtime {read.mtime}) when it was "
                    "read; no manifest was written: rerun once the input stops changing"
                )
        position = 0
        for r in pieces:
            if r.start != position:
                what = "was read twice" if r.start < position else "was never read"
                raise RuntimeError(
                    f"{name}: the range [{min(r.start, position)}, {max(r.start, position)}) "
                    f"{what}: the runner lost or repeated work; no manifest was written"
                )
            position = r.end
            total += r.records
        if position != pieces[0].extent:
            raise RuntimeError(
                f"{name}: the range [{position}, {pieces[0].extent}) was never read: the "
                "runner lost work; no manifest was written"
            )
    return total
