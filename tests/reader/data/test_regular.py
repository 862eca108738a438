"""`reader.data.regular`: only regular files are read (a FIFO or a device refused at once, by
name), and URLs are shown without their credentials (docs/integrity.md#the-reader)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from reader.data.regular import NotRegularFileError, check_regular, masked, open_regular, shown_url


@pytest.mark.parametrize(("url", "shown"), [
    ("s3://AKIA:SECRET@bucket/x?endpoint_override=h&secret_key=s",
     "s3://***@bucket/x?endpoint_override=h&secret_key=***"),
    ("gs://tok3n@bucket/a/b.model", "gs://***@bucket/a/b.model"),
    ("https://host/m?X-Amz-Signature=abc&X-Amz-Credential=AK%2F1&region=eu&flag",
     "https://host/m?X-Amz-Signature=***&X-Amz-Credential=***&region=eu&flag"),
    ("s3://bucket/plain/path", "s3://bucket/plain/path"),
    ("/local/path?token=not-a-url", "/local/path?token=not-a-url"),
])
def test_a_url_is_shown_without_its_credentials(url: str, shown: str) -> None:
    assert shown_url(url) == shown
    assert masked(f"could not open '{url}': refused") == f"could not open '{shown}': refused"


def test_only_a_regular_file_is_opened(tmp_path: Path) -> None:
    regular = tmp_path / "file"
    regular.write_bytes(b"abc")
    with open_regular(str(regular)) as f:
        assert f.read() == b"abc"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opened without a writer: refused at once, never waited on
    for path, kind in ((fifo, "a FIFO (named pipe)"), ("/dev/zero", "a character device"),
                       (tmp_path, "a directory")):
        with pytest.raises(NotRegularFileError, match=re.escape(
                f"{path} is not a regular file but {kind}; the reader reads only regular "
                "files: fix it")):
            open_regular(str(path), fix="fix it")
    with pytest.raises(FileNotFoundError):
        open_regular(str(tmp_path / "missing"))
    fs = pafs.LocalFileSystem()
    assert check_regular(fs, str(regular), shown="r") is True
    assert check_regular(fs, str(tmp_path / "missing"), shown="m") is False
    with pytest.raises(NotRegularFileError,
                       match=r"^the fifo is not a regular file but a FIFO \(named pipe\)"):
        check_regular(fs, str(fifo), shown="the fifo")
