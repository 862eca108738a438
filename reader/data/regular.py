"""Only regular files are read, and a URL is shown without its credentials
(docs/integrity.md#the-reader).

The reader opens files that others may have placed: a layout cache shared between jobs, the
paths a manifest names. A FIFO there would block ``open`` until some writer comes (forever),
and a device such as ``/dev/zero`` would be read without end. So every such file is opened
without blocking, checked to be a regular file, and only then read; anything else is refused
at once, naming the path and what it is. A URL that reaches a message loses its user and
password and the values of query parameters that carry secrets.

Example::

    with open_regular("cache/layouts-v3/ab…/layout.json") as f:   # a FIFO: refused at once
        meta = json.loads(f.read())
    shown_url("s3://AKIA:SECRET@bucket/x?endpoint_override=h&secret_key=s")
    # 's3://***@bucket/x?endpoint_override=h&secret_key=***'
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import urllib.parse
from typing import BinaryIO

import pyarrow.fs as pafs

from transforms.errors import DamagedDataset
from transforms.file_kinds import file_kind

__all__ = ["NotRegularFileError", "check_regular", "file_kind", "masked", "open_regular",
           "shown_url"]

# Query parameters whose values are secrets (matched anywhere in the name, any case).
_SECRET = re.compile(r"secret|token|key|passw|signature|credential|auth|session", re.I)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


class NotRegularFileError(DamagedDataset, OSError):
    """A path the reader would read is not a regular file (a FIFO, a device, a directory).

    A `DamagedDataset` (so ``except reader.DamagedDataset`` and ``except ValueError`` catch
    it) and an ``OSError``, as it always was (so ``except OSError`` still does)."""


def _refusal(shown: str, kind: str, fix: str) -> NotRegularFileError:
    return NotRegularFileError(f"{shown} is not a regular file but {kind}; the reader reads "
                               f"only regular files: {fix}")


def open_regular(path: str, *, shown: str | None = None,
                 fix: str = "remove or replace it") -> BinaryIO:
    """Open a local file for reading, refusing at once anything but a regular file.

    Opened with ``O_NONBLOCK`` (so that a FIFO does not wait for a writer), checked with
    ``fstat`` on the open descriptor (no window between the check and the read), then
    switched back to blocking reads.

    Raises:
        NotRegularFileError: naming the path, what it is, and ``fix``.
        OSError: it cannot be opened (missing, no permission).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refusal(shown or path, file_kind(mode), fix)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(fs: pafs.FileSystem, path: str, *, shown: str,
                  fix: str = "remove or replace it") -> bool:
    """Whether ``path`` exists in ``fs``; raises if it exists but is not a regular file.

    Raises:
        NotRegularFileError: naming ``shown`` and ``fix``.
    """
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        return False
    if info.type != pafs.FileType.File:
        kind = "a directory" if info.type == pafs.FileType.Directory else "not a regular file"
        if isinstance(fs, pafs.LocalFileSystem):
            with contextlib.suppress(OSError):  # the kind is for the message only
                kind = file_kind(os.stat(path).st_mode)
        raise _refusal(shown, kind, fix)
    return True


def shown_url(text: str) -> str:
    """``text`` as it may appear in a message: a URL's user and password, and the values of
    query parameters that carry secrets (``secret``, ``token``, ``key`` …), as ``***``."""
    if "://" not in text:
        return text
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError:
        return text.split("://", 1)[0] + "://***"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = "&".join(
        f"{k}={'***' if _SECRET.search(k) else v}" if sep else k
        for k, sep, v in (item.partition("=") for item in parts.query.split("&") if item))
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def masked(text: str) -> str:
    """``text`` (a message) with every URL in it shown as :func:`shown_url` shows it."""
    return _URL.sub(lambda m: shown_url(m.group(0)), text)
