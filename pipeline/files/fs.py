"""Every file access of the job, through Beam's FileSystems: any path may be local, gs://, s3://…

The pure code in `transforms` never opens a file; it takes `open_raw` (an
`transforms.inputs.chunks.Opener`) where it must read.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import re
import stat
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO, NamedTuple

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.files import confine
from transforms.dataset.schema import TMP_DIR
from transforms.file_kinds import file_kind

__all__ = [
    "DiskFullError",
    "Matched",
    "NotRegularFileError",
    "abort_uploads",
    "broken_links",
    "claim",
    "create",
    "delete",
    "is_file",
    "is_regular",
    "open_regular_fd",
    "read_regular",
    "rename",
    "match_files",
    "exists",
    "join",
    "list_dir",
    "match",
    "not_regular",
    "special_kind",
    "open_raw",
    "read_bytes",
    "scheme",
    "set_options",
    "write_atomically",
]


STAGE = "new"  # the staging directory's name in the job's temporary one (`pipeline.files.commit`)


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
        rel = path[len(root.rstrip('/')):].lstrip('/')
        # A staged file is named as it will be in OUTPUT (`pipeline.files.commit`).
        rel = re.sub(rf"^{re.escape(TMP_DIR)}/[^/]+/{STAGE}/", "", rel)
        raise DiskFullError(
            f"no space left on the device holding --output {root} while writing "
            f"{rel}: the shards, the reject files and, "
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
            (a FIFO, a device, a socket: `special_kind`), naming it; it is never opened.
    """
    found = [Matched(m.path, m.size_in_bytes, getattr(m, "last_updated_in_seconds", None))
             for m in FileSystems.match([pattern])[0].metadata_list]
    for path, size, _ in found:
        kind = special_kind(path) if size == 0 else None  # such files all say 0 bytes
        if kind is not None:
            raise ValueError(
                f"--input {pattern} matches {path}, {kind}, not a regular file: the job reads "
                "only regular files (a FIFO would wait for a writer, a device never ends); "
                "remove it or narrow the pattern")
    return found


def special_kind(path: str) -> str | None:
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
    return None if stat.S_ISDIR(mode) else file_kind(mode)


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
    """Create ``path`` (below ``root``, `pipeline.files.confine`) holding ``content`` only if it
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
    """A file's raw bytes, seekable, never decompressed (`transforms.inputs.chunks`
    decompresses)."""
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def read_bytes(path: str) -> bytes:
    """The whole raw content of a file."""
    with open_raw(path) as f:
        return f.read()


NotRegularFileError = confine.NotRegularFileError
not_regular = confine.not_regular


def is_regular(path: str) -> bool:
    """Whether ``path`` is a regular file: locally itself, not through a link (never opened);
    on an object store, a key."""
    if scheme(path) not in (None, "file"):
        return is_file(path)
    try:
        return stat.S_ISREG(os.lstat(path.removeprefix("file://")).st_mode)
    except OSError:
        return False


def open_regular_fd(path: str) -> int:
    """A read-only descriptor of the local regular file ``path``, which is checked with
    ``lstat`` before it is opened (``O_NOFOLLOW | O_NONBLOCK``: a FIFO swapped in meanwhile
    neither blocks the open nor passes the ``fstat`` after it).

    Raises:
        FileNotFoundError: nothing is there.
        NotRegularFileError: it is a FIFO, socket, device, directory or link.
    """
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        raise not_regular(path, mode)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise not_regular(path, mode)
    return fd


def read_regular(path: str) -> bytes:
    """`read_bytes`, of a regular file only: a local path is checked before it is opened
    (`open_regular_fd`); an object store's keys are all regular."""
    if scheme(path) not in (None, "file"):
        return read_bytes(path)
    with os.fdopen(open_regular_fd(path.removeprefix("file://")), "rb") as f:
        return f.read()


def abort_uploads(prefix: str) -> int:
    """``s3://`` only: abort the multipart uploads still open below ``prefix`` (a stopped
    job's writers had begun them: S3 keeps, and bills, their parts until they are aborted);
    returns how many. 0 elsewhere: GCS's resumable uploads expire by themselves within a week,
    and a local file is removed with its directory.

    Beam's S3 file system has no abort; this asks boto3 with the client Beam would use (its
    endpoint, keys and region from the job's options).
    """
    if scheme(prefix) != "s3":
        return 0
    from apache_beam.io.aws import s3io

    options = getattr(FileSystems.get_filesystem(prefix), "_options", None)
    client = s3io.S3IO(options=options).client.client
    bucket, _, key = prefix.removeprefix("s3://").partition("/")
    aborted = 0
    for page in client.get_paginator("list_multipart_uploads").paginate(
            Bucket=bucket, Prefix=key.rstrip("/") + "/"):
        for upload in page.get("Uploads", []):
            client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"],
                                          UploadId=upload["UploadId"])
            aborted += 1
    return aborted


def rename(src: str, dst: str, *, root: str) -> None:
    """Move the file ``src`` to ``dst``, both below ``root`` (`pipeline.files.confine`), replacing
    ``dst``: a rename locally; a copy and a delete on an object store."""
    if confine.is_local(src):
        confine.rename(root, src, dst)
        return
    confine.relative_parts(root, src)
    confine.relative_parts(root, dst)
    _ensure_dir(dst.rsplit("/", 1)[0])
    FileSystems.rename([src], [dst])


def create(path: str, *, root: str) -> BinaryIO:
    """A new file to write, raw (the caller closes it); its directory is made if needed.

    ``path`` must lie below ``root`` (the output directory), and is never reached through a
    link below it (`pipeline.files.confine`); locally it must not exist yet (every name the job
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
    (`pipeline.files.confine`)."""
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
    below it (`pipeline.files.confine`). A failed attempt leaves only its temporary file, which the
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
