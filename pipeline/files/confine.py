"""Writes and deletes that never leave the output directory (docs/integrity.md#the-job).

Every file the job writes or deletes lies below OUTPUT: its shards, ``_rejects/``, the
manifests, ``_splits.json`` and the split directories, the claim, ``.tmp/`` and the spill
files in it, and what ``--overwrite`` deletes. Two rules keep them there.

* **Local disks: no link below OUTPUT is followed.** OUTPUT itself may be a link (the user
  named it); nothing below it may be. The job never makes a link, so a link in OUTPUT was
  put there by someone else, and following it (``OUTPUT/_rejects -> ~/data``) would replace
  or delete files outside. `check_output_tree` refuses a job whose OUTPUT holds one, before
  any work. While the job runs, every write, rename and delete opens the directories from
  OUTPUT down one at a time with ``O_NOFOLLOW`` and acts on the last one's descriptor
  (``openat``, ``renameat``, ``unlinkat``; `shutil.rmtree` with ``dir_fd``, which never
  follows a link either): a link made in OUTPUT after the launch checked it is refused by
  the system call itself, with no moment between a check and the use for it to slip in.
  A final component that is a link is never followed: a file is created new
  (``O_EXCL | O_NOFOLLOW``: no existing file, nor a hard link's, is opened for writing), a
  rename replaces the link itself, a delete removes the link itself.
* **Object stores: keys are confined by their text.** There are no links; a key lies below
  OUTPUT's prefix and has no empty, ``.`` or ``..`` segment, which some clients and
  servers resolve (``out/../victim/x`` would land beside OUTPUT).

Example: with ``out/_rejects -> /home/me/data``, ``python -m pipeline … --output out`` stops
with ``error: out/_rejects is a symbolic link (to /home/me/data) inside --output out: …``
and exit status 2, and nothing in ``/home/me/data`` is touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from apache_beam.io.filesystems import FileSystems

from pipeline.files.errors import OutputRefused
from transforms.file_kinds import file_kind

__all__ = [
    "NotRegularFileError",
    "OutsideOutputError",
    "check_output_path",
    "check_output_tree",
    "create",
    "delete",
    "is_local",
    "kind_of",
    "not_regular",
    "relative_parts",
    "rename",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_ODD_SEGMENTS = ("", ".", "..")


class OutsideOutputError(OutputRefused):
    """A path the job would write or delete leads out of OUTPUT (a link, or a key's ``..``)."""


class NotRegularFileError(OutputRefused):
    """A path the job would open below OUTPUT is a FIFO, a socket, a device, a directory or a
    link: opening it could block for ever (a FIFO with no writer) or never end
    (``/dev/zero``)."""


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words ("a FIFO (named pipe)" …)."""
    return file_kind(mode) or "a regular file"


def not_regular(path: str, mode: int) -> NotRegularFileError:
    """The error for ``path``, which is not a regular file, naming what it is and the fix."""
    return NotRegularFileError(
        f"{path} is {kind_of(mode)}, not a regular file: the job opens only regular files "
        "below --output (a FIFO would hold it up for ever); remove it "
        f"(rm '{path}') or choose another --output")


def is_local(path: str) -> bool:
    """Whether ``path`` is on the local file system (no scheme, or ``file://``)."""
    return FileSystems.get_scheme(path) in (None, "file")


def _local(path: str) -> str:
    return path.removeprefix("file://")


def _link_message(link: str, target: str, root: str) -> str:
    return (f"{link} is a symbolic link (to {target}) inside --output {root}: the job never "
            "writes or deletes through a link, which would reach files outside the output; "
            f"remove the link itself (rm '{link}', no trailing slash) or choose another "
            "--output")


def check_output_path(output: str) -> None:
    """Refuse an object-store OUTPUT whose key prefix has an empty, ``.`` or ``..`` segment.

    Raises:
        OutsideOutputError: naming the segment and the fix.
    """
    if is_local(output):
        return  # the system resolves a local path once, the way the user meant it
    scheme, _, rest = output.partition("://")
    segments = rest.rstrip("/").split("/")
    odd = [s for s in segments[1:] if s in _ODD_SEGMENTS]
    if odd or not segments[0]:
        shown = repr(odd[0]) if odd else "an empty bucket"
        raise OutsideOutputError(
            f"--output {output} has {shown} as a segment: {scheme} takes keys literally, "
            "and clients that resolve such segments would write beside the output; write the "
            f"prefix without it (e.g. {scheme}://BUCKET/data/run1)")


def relative_parts(root: str, path: str) -> list[str]:
    """The segments of ``path`` below ``root``; each is a plain name.

    Raises:
        OutsideOutputError: ``path`` is not below ``root``, or a segment is empty, ``.`` or
            ``..``.
    """
    base = root.rstrip("/")
    if not path.startswith(base + "/"):
        raise OutsideOutputError(f"{path} is not below the output {root}: the job writes "
                                 "and deletes only there; this is a bug, please report it")
    parts = path[len(base) + 1 :].split("/")
    if any(p in _ODD_SEGMENTS for p in parts):
        raise OutsideOutputError(
            f"{path} has an empty, '.' or '..' segment below the output {root}, which could "
            "lead out of it; nothing was written or deleted there: rename what holds it")
    return parts


def check_output_tree(output: str, entries: Sequence[str] | None = None) -> None:
    """Before any work: refuse an OUTPUT holding a symbolic link anywhere below it, or
    anything that is neither a regular file nor a directory (a FIFO, a socket, a device:
    nothing is opened to find out) (local), or, on an object store, a key below it with an
    empty, ``.`` or ``..`` segment.

    Args:
        output: ``--output``.
        entries: the object store's keys below ``output`` (`pipeline.files.fs.list_dir`); unused
            locally, where the tree is walked without following links.

    Raises:
        OutsideOutputError: naming the link (and where it leads) or the key, and the fix.
        NotRegularFileError: naming the FIFO (socket, device) and the fix.
    """
    if not is_local(output):
        check_output_path(output)
        for entry in entries or ():
            relative_parts(output, entry)
        return
    top = _local(output)
    if not os.path.isdir(top):
        return
    for directory, dirs, files in os.walk(top, followlinks=False):
        for name in sorted(dirs + files):
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                raise OutsideOutputError(_link_message(path, os.readlink(path), output))
            if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
                raise not_regular(path, mode)


@contextlib.contextmanager
def _directory(root: str, parts: Sequence[str], *, make: bool) -> Iterator[int]:
    """A descriptor of the directory ``root/parts…``, each part opened with O_NOFOLLOW from
    the one before (made if missing and ``make``)."""
    top = _local(root)
    if make:
        os.makedirs(top, exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            try:
                if make:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                below = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                _refuse_link(fd, part, os.path.join(top, *parts[: i + 1]), root)
                raise
            os.close(fd)
            fd = below
        yield fd
    finally:
        os.close(fd)


def _refuse_link(fd: int, name: str, shown: str, root: str) -> None:
    """Raise OutsideOutputError if ``name`` (in the directory ``fd``) is a link."""
    try:
        mode = os.lstat(name, dir_fd=fd).st_mode
    except OSError:  # not there: the caller's own error says so
        return
    if stat.S_ISLNK(mode):
        raise OutsideOutputError(_link_message(shown, os.readlink(name, dir_fd=fd), root))


def create(root: str, path: str) -> BinaryIO:
    """A new local file to write, never through a link below ``root``.

    Only new files: ``O_EXCL`` (every name the job writes to is unique, and files reach their
    final name by `rename`), so no existing file, nor one that a hard link shares, is ever
    opened for writing.

    Raises:
        FileExistsError: ``path`` exists.
    """
    parts = relative_parts(root, path)
    with _directory(root, parts[:-1], make=True) as d:
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, 0o644, dir_fd=d)
        except OSError:
            _refuse_link(d, parts[-1], _local(path), root)
            raise
    return os.fdopen(fd, "wb")


def rename(root: str, src: str, dst: str) -> None:
    """Move the local file ``src`` to ``dst`` (replacing it), both below ``root``, through no
    link; a link at ``dst`` itself is replaced, never followed."""
    s, d = relative_parts(root, src), relative_parts(root, dst)
    with _directory(root, s[:-1], make=False) as sfd, _directory(root, d[:-1], make=True) as dfd:
        os.rename(s[-1], d[-1], src_dir_fd=sfd, dst_dir_fd=dfd)


def delete(root: str, path: str) -> None:
    """Delete the local file or directory tree ``path`` below ``root``, through no link (a
    link at ``path`` itself is removed, never followed).

    Raises:
        FileNotFoundError: nothing is there.
    """
    parts = relative_parts(root, path)
    with _directory(root, parts[:-1], make=False) as d:
        if stat.S_ISDIR(os.lstat(parts[-1], dir_fd=d).st_mode):
            shutil.rmtree(parts[-1], dir_fd=d)
        else:
            os.unlink(parts[-1], dir_fd=d)
