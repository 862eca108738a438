"""What a file that is not a regular file is, in words, for the messages that refuse it.

The job and the reader open only regular files: a FIFO with no writer would hold them up for
ever, a device such as ``/dev/zero`` never ends. Each refusal names what it found, from the
file's ``st_mode`` (``os.stat`` or ``os.fstat``; the file itself is never read):

    >>> import stat
    >>> file_kind(stat.S_IFIFO | 0o644)
    'a FIFO (named pipe)'
    >>> file_kind(stat.S_IFREG | 0o644) is None
    True
"""

from __future__ import annotations

import stat

__all__ = ["file_kind"]

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"))


def file_kind(mode: int) -> str | None:
    """What a file of this ``st_mode`` is ("a FIFO (named pipe)", "a directory" …); None for a
    regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")
