"""`pipeline.files.fs`: the job's file access, through Beam's FileSystems (here on local disk)."""

from __future__ import annotations

import os

import pytest

from pipeline.files import fs


def test_write_atomically_renames_a_complete_temporary_file(tmp_path):
    target = tmp_path / "out" / "sub" / "file.bin"
    result = fs.write_atomically(str(target), lambda f: f.write(b"payload") and 42,
                                 str(tmp_path / "out" / ".tmp"), root=str(tmp_path / "out"))
    assert result == 42 and target.read_bytes() == b"payload"
    assert list((tmp_path / "out" / ".tmp").iterdir()) == []


def test_a_failed_write_leaves_only_its_temporary_file(tmp_path):
    def fail(f):
        f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        fs.write_atomically(str(tmp_path / "file.bin"), fail, str(tmp_path / ".tmp"),
                            root=str(tmp_path))
    assert not (tmp_path / "file.bin").exists()
    (left,) = (tmp_path / ".tmp").iterdir()
    assert left.name.startswith("file.bin.")


def test_match_list_read_and_delete(tmp_path):
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "a.txt").write_bytes(b"abc")
    (tmp_path / "d" / "e" / "b.txt").write_bytes(b"hello")
    assert fs.match(str(tmp_path / "d" / "*.txt")) == [(str(tmp_path / "d" / "a.txt"), 3)]
    assert fs.match(str(tmp_path / "none*")) == []
    found = fs.list_dir(str(tmp_path / "d"))
    assert found == [str(tmp_path / "d" / "a.txt"), str(tmp_path / "d" / "e" / "b.txt")]
    assert fs.list_dir(str(tmp_path / "missing")) == []
    assert fs.read_bytes(found[1]) == b"hello"
    with fs.open_raw(found[1]) as f:
        f.seek(1)
        assert f.read(2) == b"el"
    fs.delete(found, root=str(tmp_path / "d"))
    fs.delete([], root=str(tmp_path / "d"))
    assert not fs.exists(found[0]) and fs.list_dir(str(tmp_path / "d")) == []
    assert fs.scheme("gs://b/x") == "gs" and fs.scheme(str(tmp_path)) is None
    assert fs.join(str(tmp_path) + "/", "part", "x") == f"{tmp_path}/part/x"


def test_special_kind_names_fifos_and_devices_without_opening_them(tmp_path):
    from pipeline.files.fs import special_kind

    os.mkfifo(tmp_path / "pipe")  # opening it to read would wait for a writer
    (tmp_path / "file").write_text("x")
    (tmp_path / "zero").symlink_to("/dev/zero")
    assert special_kind(str(tmp_path / "pipe")) == "a FIFO (named pipe)"
    assert special_kind(f"file://{tmp_path / 'pipe'}") == "a FIFO (named pipe)"
    assert special_kind(str(tmp_path / "zero")) == "a character device"  # through the link
    assert special_kind("/dev/null") == "a character device"
    for regular in (tmp_path / "file", tmp_path, tmp_path / "missing"):
        assert special_kind(str(regular)) is None
    assert special_kind("s3://bucket/pipe") is None  # objects are regular by nature
