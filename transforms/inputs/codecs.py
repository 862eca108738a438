"""The compressed inputs: which codec a file name says, and its decompressed bytes.

Python's own codecs report a stream that ends early: a truncated ``.gz``, ``.bz2`` or
``.zst`` raises ``EOFError`` (the job fails instead of losing the file's tail). Reading
through `CountingReader` tells how many bytes of the compressed file were used.
`stream_reader` gives the decompressed bytes a block at a time, so that no more than a block
is ever held, whatever the compression ratio (a few MB of gzip can hold a 6 GiB line).

Example: ``compression_of("c/part-0.jsonl.zst") == "zstd"``; ``compression_of("a.txt")`` is
None.
"""

from __future__ import annotations

import bz2
import gzip
import io
from typing import BinaryIO

__all__ = ["BOM", "COMPRESSED_TEXT_RATIO", "COMPRESSIONS", "CountingReader", "compression_of",
           "decompressed", "stream_reader"]

# A compressed input is taken to hold this many times its size in text where that must be
# guessed before it is read: the weight of its chunks at launch, the shard plan's parts.
COMPRESSED_TEXT_RATIO = 4

COMPRESSIONS = {".gz": "gzip", ".bz2": "bzip2", ".zst": "zstd"}
BOM = b"\xef\xbb\xbf"


def compression_of(path: str) -> str | None:
    """gzip, bzip2 or zstd, as the file name's last extension says; None: not compressed."""
    for ext, kind in COMPRESSIONS.items():
        if path.endswith(ext):
            return kind
    return None


class CountingReader(io.RawIOBase):
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


def decompressed(f: BinaryIO, compression: str | None) -> BinaryIO:
    """A stream of the decompressed bytes of ``f`` (``f`` itself when not compressed).

    gzip and bzip2 streams that end early raise EOFError; a zstd stream reader does not:
    `stream_reader` checks every zstd frame's end, and is what reading records uses.
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


def stream_reader(f: BinaryIO, compression: str | None) -> BinaryIO:
    """The decompressed bytes of ``f`` as a stream whose ``read(n)`` returns at most ``n``
    bytes (``f`` itself when not compressed): a stream that ends early raises EOFError at
    its end, for every codec.

    zstandard's stream reader stops quietly at a truncated frame, so the compressed bytes
    it takes are walked frame by frame and block by block on their way (`_ZstdFrames`,
    headers only: RFC 8878's layout), and an end inside a frame raises.
    """
    if compression != "zstd":
        return decompressed(f, compression)
    import zstandard

    frames = _ZstdFrames(f)
    reader = zstandard.ZstdDecompressor().stream_reader(frames, read_across_frames=True)
    return _CheckedEnd(reader, frames)  # type: ignore[return-value]


class _CheckedEnd(io.RawIOBase):
    """A zstd stream reader whose end raises EOFError if the input ended inside a frame."""

    def __init__(self, reader: BinaryIO, frames: _ZstdFrames) -> None:
        self._reader = reader
        self._frames = frames

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._reader.read(size)
        # At the end: an empty read, or a read of everything (``size`` below 0).
        if (size < 0 or not data) and size != 0 and not self._frames.complete():
            raise EOFError("zstd stream ended before the end of its frame")
        return data


_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE = 0x184D2A50  # … to 0x184D2A5F


class _ZstdFrames(io.RawIOBase):
    """The compressed bytes of a zstd stream, passed on as read, with the structure of their
    frames followed (magic, frame header, block headers, checksum: never the content), so
    that `complete` tells whether the stream ended between frames."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._want = 4  # bytes still needed of the header being read
        self._header = bytearray()
        self._state = "magic"
        self._skip = 0  # bytes of block content (or of a skippable frame) to pass over
        self._checksum = False  # the current frame ends with a 4-byte checksum

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        data = self._f.read() if size is None or size < 0 else self._f.read(size)
        self._follow(data)
        return data

    def complete(self) -> bool:
        """Whether the bytes so far end between frames (or hold none)."""
        return self._state == "magic" and not self._header and not self._skip

    def _follow(self, data: bytes) -> None:
        pos, end = 0, len(data)
        while pos < end:
            if self._skip:
                step = min(self._skip, end - pos)
                self._skip -= step
                pos += step
                continue
            step = min(self._want - len(self._header), end - pos)
            self._header += data[pos : pos + step]
            pos += step
            if len(self._header) == self._want:
                header = bytes(self._header)
                self._header.clear()
                self._next(header)

    def _next(self, header: bytes) -> None:
        """Act on a complete header of the current state."""
        if self._state == "magic":
            magic = int.from_bytes(header, "little")
            if magic == _ZSTD_MAGIC:
                self._state, self._want = "descriptor", 1
            elif magic & 0xFFFFFFF0 == _SKIPPABLE:
                self._state, self._want = "skippable", 4
            else:
                raise OSError(f"not a zstd frame (magic number {magic:#010x})")
        elif self._state == "skippable":
            self._skip = int.from_bytes(header, "little")
            self._state, self._want = "magic", 4
        elif self._state == "descriptor":
            (flags,) = header
            single = flags >> 5 & 1
            content_size = (1 if single else 0, 2, 4, 8)[flags >> 6]
            dictionary = (0, 1, 2, 4)[flags & 3]
            self._checksum = bool(flags >> 2 & 1)
            self._skip = (0 if single else 1) + dictionary + content_size
            self._state, self._want = "block", 3
        else:  # a block header: last-block bit, type, size
            value = int.from_bytes(header, "little")
            kind, size = value >> 1 & 3, value >> 3
            if kind == 3:
                raise OSError("not a zstd stream (a reserved block type)")
            self._skip = 1 if kind == 1 else size  # an RLE block holds one byte
            if value & 1:  # the frame's last block
                self._skip += 4 if self._checksum else 0
                self._state, self._want = "magic", 4
