"""File access through Beam's FileSystems only, so every path may be local, gs://, s3:// …"""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

__all__ = [
    "READ_BLOCK",
    "join",
    "list_dir",
    "read_bytes",
    "read_line_range",
    "write_atomically",
]

READ_BLOCK = 1 << 20


def join(base: str, *parts: str) -> str:
    """``base/part/…`` on any file system."""
    return FileSystems.join(base.rstrip("/"), *parts)


def read_bytes(path: str, compression: str | None = None) -> bytes:
    """The whole (decompressed) content of a file."""
    kind = compression or CompressionTypes.UNCOMPRESSED
    with FileSystems.open(path, compression_type=kind) as f:
        return f.read()


def _read_to_newline(f: BinaryIO) -> bytes:
    """Read from ``f``'s position up to and including the next newline (or the end)."""
    parts = []
    while True:
        block = f.read(READ_BLOCK)
        if not block:
            break
        i = block.find(b"\n")
        if i != -1:
            parts.append(block[: i + 1])
            break
        parts.append(block)
    return b"".join(parts)


def read_line_range(path: str, start: int, end: int) -> bytes:
    """The whole lines of an uncompressed file that begin at a byte offset in [start, end).

    The byte before ``start`` is read to tell whether ``start`` begins a line; the last line
    is read past ``end`` to its newline. Consecutive ranges thus hold every line once.
    """
    first = max(start - 1, 0)
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.seek(first)
        data = f.read(end - first)
        if start > 0:
            newline = data.find(b"\n")
            data = b"" if newline == -1 else data[newline + 1 :]
        if data and not data.endswith(b"\n"):
            data += _read_to_newline(f)
    return data


def list_dir(path: str) -> list[str]:
    """Every file below the directory ``path`` (recursively), or [] if there is none."""
    base = path.rstrip("/")
    found = FileSystems.match([base + "/**"])[0].metadata_list
    # LocalFileSystem's '**' does not match files directly under the base on every version.
    found += FileSystems.match([base + "/*"])[0].metadata_list
    return sorted({m.path for m in found if not m.path.endswith("/")})


def _ensure_dir(path: str) -> None:
    """Make a directory where the file system has them (object stores have none)."""
    if FileSystems.exists(path):
        return
    try:
        FileSystems.mkdirs(path)
    except OSError:  # LocalFileSystem raises OSError, others BeamIOError (a subclass)
        if not FileSystems.exists(path):  # another worker made it meanwhile: fine
            raise


def write_atomically(path: str, write: Callable[[BinaryIO], object], tmp_dir: str) -> object:
    """Write ``path`` through a uniquely named temporary file in ``tmp_dir``, then rename.

    A failed attempt leaves only its temporary file, which the job's last step removes.
    """
    import uuid

    tmp = join(tmp_dir, f"{path.rsplit('/', 1)[-1]}.{uuid.uuid4().hex}")
    with FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        result = write(f)
    _ensure_dir(path.rsplit("/", 1)[0])
    FileSystems.rename([tmp], [path])
    return result
