"""`pipeline.files.confine`: writes and deletes that never leave the output directory
(docs/integrity.md#the-job), one call at a time (the whole job's refusals:
tests/pipeline/files/test_output_safety.py)."""

from __future__ import annotations

import os
import pathlib

import pytest

from pipeline.files import confine


@pytest.fixture
def out(tmp_path: pathlib.Path) -> pathlib.Path:
    """OUTPUT holding ``sub``, a link to a directory outside it that holds ``keep.txt``."""
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "keep.txt").write_text("keep me")
    o = tmp_path / "out"
    o.mkdir()
    (o / "sub").symlink_to(tmp_path / "victim")
    return o


def test_is_local() -> None:
    assert [confine.is_local(p) for p in ("/a/b", "a", "file:///a", "s3://b/a", "gs://b/a")] == [
        True, True, True, False, False]


def test_relative_parts_are_plain_names_below_the_root() -> None:
    assert confine.relative_parts("s3://b/out/", "s3://b/out/_rejects/e.jsonl") == [
        "_rejects", "e.jsonl"]
    assert confine.relative_parts("/o", "/o/a/b/c") == ["a", "b", "c"]
    with pytest.raises(confine.OutsideOutputError, match=r"^/ox/y is not below the output /o"):
        confine.relative_parts("/o", "/ox/y")
    with pytest.raises(confine.OutsideOutputError, match="'..' segment"):
        confine.relative_parts("s3://b/out", "s3://b/out/../victim/x")


def test_paths_outside_the_root_or_with_dot_segments_are_refused(tmp_path):
    root = str(tmp_path / "out")
    for path in (f"{tmp_path}/elsewhere/x", f"{root}/../x", f"{root}/a//x", f"{root}/./x",
                 f"{root}x/y"):
        with pytest.raises(confine.OutsideOutputError):
            confine.create(root, path)
        with pytest.raises(confine.OutsideOutputError):
            confine.delete(root, path)
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.parametrize("output, segment", [
    ("s3://bucket/data/../victim", "'..'"), ("gs://bucket/./data", "'.'"),
    ("s3://bucket//data", "''"), ("s3:///data", "an empty bucket")])
def test_object_store_outputs_with_odd_segments_are_refused(output, segment):
    with pytest.raises(confine.OutsideOutputError, match=f"has {segment} as a segment"):
        confine.check_output_path(output)
    confine.check_output_path("s3://bucket/data/run1/")  # a trailing slash is fine
    confine.check_output_path("/local/../is/resolved/by/the/system")


def test_the_tree_check_names_the_link_and_where_it_leads(out, tmp_path):
    with pytest.raises(confine.OutsideOutputError) as info:
        confine.check_output_tree(str(out))
    assert str(info.value) == (
        f"{out}/sub is a symbolic link (to {tmp_path}/victim) inside --output {out}: the job "
        "never writes or deletes through a link, which would reach files outside the output; "
        f"remove the link itself (rm '{out}/sub', no trailing slash) or choose another --output")
    (out / "sub").unlink()
    (out / "a" / "b").mkdir(parents=True)
    confine.check_output_tree(str(out))  # no link: nothing to say
    confine.check_output_tree(str(tmp_path / "absent"))
    with pytest.raises(confine.OutsideOutputError, match="has '..' as a segment"):
        confine.check_output_tree("s3://b/o/..", [])
    with pytest.raises(confine.OutsideOutputError, match="'.' or '..' segment"):
        confine.check_output_tree("s3://b/o", ["s3://b/o/x/./y"])


def test_create_makes_the_directories_and_only_new_files(out):
    with confine.create(str(out), f"{out}/a/b/f.bin") as f:
        f.write(b"data")
    assert (out / "a" / "b" / "f.bin").read_bytes() == b"data"
    with pytest.raises(FileExistsError):
        confine.create(str(out), f"{out}/a/b/f.bin")


def test_nothing_is_created_renamed_or_deleted_through_a_link(out, tmp_path):
    (out / "f").write_bytes(b"x")
    with pytest.raises(confine.OutsideOutputError, match="sub is a symbolic link"):
        confine.create(str(out), f"{out}/sub/new")
    with pytest.raises(confine.OutsideOutputError, match="sub is a symbolic link"):
        confine.rename(str(out), f"{out}/f", f"{out}/sub/keep.txt")
    with pytest.raises(confine.OutsideOutputError, match="sub is a symbolic link"):
        confine.delete(str(out), f"{out}/sub/keep.txt")
    assert sorted(os.listdir(tmp_path / "victim")) == ["keep.txt"]
    assert (tmp_path / "victim" / "keep.txt").read_text() == "keep me"


def test_a_link_as_the_last_component_is_replaced_or_removed_itself(out, tmp_path):
    (out / "f").write_bytes(b"new")
    (out / "m").symlink_to(tmp_path / "victim" / "keep.txt")
    confine.rename(str(out), f"{out}/f", f"{out}/m")
    assert not (out / "m").is_symlink() and (out / "m").read_bytes() == b"new"
    confine.delete(str(out), f"{out}/sub")
    assert not (out / "sub").exists()
    assert (tmp_path / "victim" / "keep.txt").read_text() == "keep me"


def test_delete_removes_a_file_or_a_whole_tree(out):
    (out / "d" / "e").mkdir(parents=True)
    (out / "d" / "e" / "x").write_bytes(b"x")
    (out / "g").write_bytes(b"g")
    confine.delete(str(out), f"{out}/g")
    confine.delete(str(out), f"{out}/d")
    assert sorted(os.listdir(out)) == ["sub"]
    with pytest.raises(FileNotFoundError):
        confine.delete(str(out), f"{out}/g")
