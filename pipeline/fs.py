"""Every file access of the job, through Beam's FileSystems: any path may be local, gs://, s3://…

The pure code in `transforms` never opens a file; it takes `open_raw` (an
`transforms.chunks.Opener`) where it must read.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import BinaryIO

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

__all__ = [
    "create",
    "delete",
    "exists",
    "join",
    "list_dir",
    "match",
    "open_raw",
    "read_bytes",
    "scheme",
    "write_atomically",
]


def join(base: str, *parts: str) -> str:
    """``base/part/…`` on any file system."""
    return FileSystems.join(base.rstrip("/"), *parts)


def scheme(path: str) -> str | None:
    """The path's scheme (``gs``, ``s3`` …), or None for a plain local path."""
    return FileSystems.get_scheme(path)


def match(pattern: str) -> list[tuple[str, int]]:
    """(path, size in bytes) of every file the pattern matches; [] if none."""
    return [(m.path, m.size_in_bytes) for m in FileSystems.match([pattern])[0].metadata_list]


def open_raw(path: str) -> BinaryIO:
    """A file's raw bytes, seekable, never decompressed (`transforms.chunks` decompresses)."""
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def read_bytes(path: str) -> bytes:
    """The whole raw content of a file."""
    with open_raw(path) as f:
        return f.read()


def create(path: str) -> BinaryIO:
    """A new file to write, raw (the caller closes it); its directory is made if needed."""
    _ensure_dir(path.rsplit("/", 1)[0])
    return FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def exists(path: str) -> bool:
    return FileSystems.exists(path)


def delete(paths: Sequence[str]) -> None:
    if paths:
        FileSystems.delete(list(paths))


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

    A failed attempt leaves only its temporary file, which the job's last step removes. The
    random part of the name never reaches the output.
    """
    tmp = join(tmp_dir, f"{path.rsplit('/', 1)[-1]}.{uuid.uuid4().hex}")
    with FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        result = write(f)
    _ensure_dir(path.rsplit("/", 1)[0])
    FileSystems.rename([tmp], [path])
    return result
