"""The compressed inputs: which codec a file name says, and its decompressed bytes.

Python's own codecs report a stream that ends early: a truncated ``.gz``, ``.bz2`` or
``.zst`` raises ``EOFError`` (the job fails instead of losing the file's tail). Reading
through `CountingReader` tells how many bytes of the compressed file were used.

Example: ``compression_of("c/part-0.jsonl.zst") == "zstd"``; ``compression_of("a.txt")`` is
None.
"""

from __future__ import annotations

import bz2
import gzip
import io
from typing import BinaryIO

__all__ = ["BOM", "COMPRESSIONS", "CountingReader", "compression_of", "decompress", "decompressed"]

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

    gzip and bzip2 streams that end early raise EOFError; a zstd stream reader does not, so
    a whole-file read goes through `decompress`, which checks every zstd frame's end.
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


def decompress(f: BinaryIO, compression: str | None) -> bytes:
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
