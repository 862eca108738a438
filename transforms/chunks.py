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
from transforms.params import ReadSpec

__all__ = [
    "CHUNK_BYTES",
    "COMPRESSIONS",
    "Chunk",
    "Opener",
    "Receipt",
    "account_inputs",
    "count_lines",
    "detect_format",
    "line_starts_in",
    "number_chunks",
    "open_local",
    "pattern_base",
    "plan_chunks",
    "read_chunk",
    "relative_name",
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

    def receipt(self, records: int) -> Receipt:
        return Receipt(path=self.path, size=self.size, extent=self.extent, start=self.start,
                       end=self.end, records=records)


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
    """The path of a matched file relative to its pattern's base (stable across machines)."""
    return path[len(base) :] if base and path.startswith(base) else path.rsplit("/", 1)[-1]


def detect_format(path: str, forced: str | None) -> tuple[str, str | None]:
    """(format, compression) of a file from its extension, unless ``forced``.

    Raises:
        ValueError: the extension says nothing and no format was given.
    """
    stem, compression = path, None
    for ext, kind in COMPRESSIONS.items():
        if path.endswith(ext):
            stem, compression = path[: -len(ext)], kind
            break
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
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[Chunk]:
    """The chunks of one matched file of ``size`` bytes.

    Raises:
        ValueError: the format cannot be told, or a Parquet file is compressed around.
    """
    fmt, compression = detect_format(path, spec.format)
    whole = {"path": path, "rel": rel, "fmt": fmt, "compression": compression, "size": size}
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
    with open_file(whole["path"]) as f:
        meta = pq.ParquetFile(f).metadata
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
    with open_file(chunk.path) as f:
        f.seek(first)
        data = f.read(chunk.end - first)
    return line_starts_in(data, chunk.start, chunk.end)


def number_chunks(counted: Iterable[tuple[Chunk, int]]) -> Iterator[Chunk]:
    """The chunks of one file, each with its first line, from (chunk, `count_lines`) pairs."""
    line = 1
    for chunk, lines in sorted(counted, key=lambda c: c[0].start):
        yield chunk if chunk.first is not None else dataclasses.replace(chunk, first=line)
        line += lines


def _read_line_range(f: BinaryIO, start: int, end: int) -> bytes:
    """The whole lines of an uncompressed file that begin at a byte offset in [start, end).

    The byte before ``start`` is read to tell whether ``start`` begins a line; the last line
    is read past ``end`` to its newline. Consecutive ranges thus hold every line once.
    """
    first = max(start - 1, 0)
    f.seek(first)
    data = f.read(end - first)
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
    return data


def _decompress(f: BinaryIO, compression: str | None) -> bytes:
    """The whole decompressed content; a stream that ends early raises EOFError."""
    if compression is None:
        return f.read()
    if compression == "gzip":
        return gzip.GzipFile(fileobj=f, mode="rb").read()
    if compression == "bzip2":
        return bz2.BZ2File(f, mode="rb").read()
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
    where = {"path": chunk.path, "rel": chunk.rel, "spec": spec}
    try:
        with open_file(chunk.path) as f:
            if chunk.fmt == "parquet":
                table = pq.ParquetFile(f).read_row_groups(range(chunk.start, chunk.end))
            elif chunk.compression is not None or chunk.fmt == "text":
                data = _decompress(f, chunk.compression)
            else:
                data = _read_line_range(f, chunk.start, chunk.end)
    except Exception as e:  # a file that cannot be read fails the job, naming it
        raise OSError(f"cannot read input file {chunk.path}: {e}") from e
    if chunk.fmt == "parquet":
        return iter(parse_parquet(table, first_row=first, **where))
    if chunk.fmt == "text":
        return iter([parse_text_file(data, **where)])
    return parse_lines(data, fmt=chunk.fmt, first_line=first, **where)


def account_inputs(receipts: Iterable[Receipt], expected: dict[str, int] | None) -> int:
    """The number of records read, after checking that every input was read exactly once.

    The pieces of each file must tile ``[0, extent)`` with no gap and no overlap, and, when
    ``expected`` ({path: size} as matched before the job started) is given, every expected
    file must be there with its size and no other. A runner that lost or repeated work
    thus fails the job instead of writing a dataset that silently lacks (or doubles) part of
    its input.

    Raises:
        RuntimeError: naming the file and what is wrong with it.
    """
    by_path: dict[str, list[Receipt]] = {}
    for r in receipts:
        by_path.setdefault(r.path, []).append(r)
    if expected is not None:
        missing = sorted(set(expected) - set(by_path))
        if missing:
            raise RuntimeError(
                f"{len(missing)} input files were never read (e.g. {missing[0]}): the runner "
                "lost work; no manifest was written, rerun the job"
            )
        extra = sorted(set(by_path) - set(expected))
        if extra:
            raise RuntimeError(
                f"{extra[0]} was read but did not match when the job started: inputs changed "
                "while the job ran; no manifest was written"
            )
    total = 0
    for path, pieces in sorted(by_path.items()):
        pieces.sort(key=lambda r: (r.start, r.end))
        sizes = {(r.size, r.extent) for r in pieces}
        if len(sizes) != 1 or (expected is not None and pieces[0].size != expected[path]):
            raise RuntimeError(
                f"{path} changed size while the job ran ({sorted(sizes)}, expected "
                f"{expected.get(path) if expected else '?'} bytes); no manifest was written"
            )
        position = 0
        for r in pieces:
            if r.start != position:
                what = "was read twice" if r.start < position else "was never read"
                raise RuntimeError(
                    f"{path}: the range [{min(r.start, position)}, {max(r.start, position)}) "
                    f"{what}: the runner lost or repeated work; no manifest was written"
                )
            position = r.end
            total += r.records
        if position != pieces[0].extent:
            raise RuntimeError(
                f"{path}: the range [{position}, {pieces[0].extent}) was never read: the "
                "runner lost work; no manifest was written"
            )
    return total
