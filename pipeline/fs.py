"""Every file access of the job, through Beam's FileSystems: any path may be local, gs://, s3://…

The pure code in `transforms` never opens a file; it takes `open_raw` (an
`transforms.chunks.Opener`) where it must read.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import stat
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO, NamedTuple

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline import confine
from transforms.schema import TMP_DIR

__all__ = [
    "DiskFullError",
    "Matched",
    "broken_links",
    "claim",
    "create",
    "delete",
    "is_file",
    "match_files",
    "exists",
    "join",
    "list_dir",
    "match",
    "not_regular",
    "open_raw",
    "read_bytes",
    "scheme",
    "set_options",
    "write_atomically",
]


class DiskFullError(OSError):
    """No space left on the device (ENOSPC), naming the job's directory that filled and what
    to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.errno = errno.ENOSPC


@contextlib.contextmanager
def _naming_a_full_disk(root: str, path: str) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        if e.errno != errno.ENOSPC or isinstance(e, DiskFullError):
            raise
        raise DiskFullError(
            f"no space left on the device holding --output {root} while writing "
            f"{path[len(root.rstrip('/')):].lstrip('/')}: the shards, the reject files and, "
            f"with --shuffle files, the spill files in {join(root, TMP_DIR)} all live there; "
            "free space on that disk or choose an --output on a larger one") from e


def set_options(options: PipelineOptions) -> None:
    """Give FileSystems the job's options (S3 endpoint and keys, GCS settings …) before any
    path is touched; on a worker Beam does this itself."""
    FileSystems.set_options(options)


def join(base: str, *parts: str) -> str:
    """``base/part/…`` on any file system."""
    return FileSystems.join(base.rstrip("/"), *parts)


def split(path: str) -> tuple[str, str]:
    """(the directory holding ``path``, its last component), on any file system."""
    return FileSystems.split(path.rstrip("/"))


def scheme(path: str) -> str | None:
    """The path's scheme (``gs``, ``s3`` …), or None for a plain local path."""
    return FileSystems.get_scheme(path)


def match(pattern: str) -> list[tuple[str, int]]:
    """(path, size in bytes) of every file the pattern matches; [] if none."""
    return [(m.path, m.size_in_bytes) for m in FileSystems.match([pattern])[0].metadata_list]


class Matched(NamedTuple):
    """A matched file: path, size in bytes, and modification time in seconds (or None)."""

    path: str
    size: int
    mtime: float | None


def match_files(pattern: str) -> list[Matched]:
    """`match`, with each file's modification time (``last_updated_in_seconds``).

    Raises:
        ValueError: the ``--input`` pattern matches something other than a regular file
            (a FIFO, a device, a socket: `not_regular`), naming it; it is never opened.
    """
    found = [Matched(m.path, m.size_in_bytes, getattr(m, "last_updated_in_seconds", None))
             for m in FileSystems.match([pattern])[0].metadata_list]
    for path, size, _ in found:
        kind = not_regular(path) if size == 0 else None  # such files all say 0 bytes
        if kind is not None:
            raise ValueError(
                f"--input {pattern} matches {path}, {kind}, not a regular file: the job reads "
                "only regular files (a FIFO would wait for a writer, a device never ends); "
                "remove it or narrow the pattern")
    return found


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def not_regular(path: str) -> str | None:
    """What a local ``path`` is (through links) if it is a FIFO, a device or a socket, which
    reading would block on or never finish; None for a regular file, a directory, a path
    that is not there, and any object-store path (objects are regular by nature). Only
    ``stat`` is called: the file is not opened."""
    if scheme(path) not in (None, "file"):
        return None
    try:
        mode = os.stat(path.removeprefix("file://")).st_mode
    except OSError:
        return None
    return next((kind for test, kind in _KINDS if test(mode)), None)


def is_file(path: str) -> bool:
    """Whether ``path`` itself is a file (not a directory, not merely a prefix)."""
    if scheme(path) in (None, "file"):
        return os.path.isfile(path.removeprefix("file://"))
    try:
        found = FileSystems.match([path])[0].metadata_list
    except Exception:  # nothing there
        return False
    return any(m.path == path for m in found)


def broken_links(pattern: str) -> list[str]:
    """Symbolic links a local pattern matches that lead nowhere (dangling, or a loop).

    Beam's LocalFileSystem skips them without a word; object stores have no links.
    """
    if scheme(pattern) not in (None, "file"):
        return []
    local = pattern.removeprefix("file://")
    return sorted(p for p in glob.glob(local, recursive=True)
                  if os.path.islink(p) and not os.path.exists(p))


def claim(path: str, content: bytes, *, root: str) -> None:
    """Create ``path`` (below ``root``, `pipeline.confine`) holding ``content`` only if it
    does not exist yet.

    Locally this is ``O_CREAT | O_EXCL``: of two jobs, exactly one creates the file. Beam's
    FileSystems offers no create-if-absent precondition on object stores (its GCS ``create``
    takes no generation precondition), so there the best it gives is check, create, read
    back: a second job that starts within the same second may not be stopped here, and the
    last step's check that the claim still holds this job's id catches it instead.

    Raises:
        FileExistsError: the file exists (another job holds the claim, or a killed one left
            it).
        confine.OutsideOutputError: the path leads out of ``root``.
    """
    if confine.is_local(path):
        with confine.create(root, path) as f:
            f.write(content)
        return
    confine.relative_parts(root, path)
    if FileSystems.exists(path):
        raise FileExistsError(path)
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(content)
    if read_bytes(path) != content:
        raise FileExistsError(path)


def open_raw(path: str) -> BinaryIO:
    """A file's raw bytes, seekable, never decompressed (`transforms.chunks` decompresses)."""
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def read_bytes(path: str) -> bytes:
    """The whole raw content of a file."""
    with open_raw(path) as f:
        return f.read()


def create(path: str, *, root: str) -> BinaryIO:
    """A new file to write, raw (the caller closes it); its directory is made if needed.

    ``path`` must lie below ``root`` (the output directory), and is never reached through a
    link below it (`pipeline.confine`); locally it must not exist yet (every name the job
    writes to is unique).
    """
    if confine.is_local(path):
        return confine.create(root, path)
    confine.relative_parts(root, path)
    _ensure_dir(path.rsplit("/", 1)[0])
    return FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def exists(path: str) -> bool:
    return FileSystems.exists(path)


def delete(paths: Sequence[str], *, root: str) -> None:
    """Delete files (or a local directory tree) below ``root``, never through a link
    (`pipeline.confine`)."""
    for path in paths:
        confine.relative_parts(root, path)
    local = [p for p in paths if confine.is_local(p)]
    for path in local:
        try:
            confine.delete(root, path)
        except FileNotFoundError:
            raise OSError(f"cannot delete {path}: it is not there") from None
    remote = [p for p in paths if not confine.is_local(p)]
    if remote:
        FileSystems.delete(remote)


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


def write_atomically(path: str, write: Callable[[BinaryIO], object], tmp_dir: str, *,
                     root: str) -> object:
    """Write ``path`` through a uniquely named temporary file in ``tmp_dir``, then rename.

    Both lie below ``root`` (the output directory) and are never reached through a link
    below it (`pipeline.confine`). A failed attempt leaves only its temporary file, which the
    job's last step removes. The random part of the name never reaches the output.
    """
    tmp = join(tmp_dir, f"{path.rsplit('/', 1)[-1]}.{uuid.uuid4().hex}")
    if confine.is_local(path):
        with _naming_a_full_disk(root, path):
            with confine.create(root, tmp) as f:
                result = write(f)
            confine.rename(root, tmp, path)
        return result
    confine.relative_parts(root, path)
    confine.relative_parts(root, tmp)
    with FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        result = write(f)
    _ensure_dir(path.rsplit("/", 1)[0])
    FileSystems.rename([tmp], [path])
    return result
