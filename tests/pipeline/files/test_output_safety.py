"""Nothing is written or deleted outside OUTPUT (docs/integrity.md#the-job).

A symbolic link anywhere below OUTPUT is refused before any work (exit 2, naming the link);
a link made while the job runs is refused by the system call that would follow it; object
store keys with empty, '.' or '..' segments are refused. Every test hashes the tree outside
OUTPUT before and after and asserts it is byte-identical.
"""

from __future__ import annotations

import importlib
import os
import pathlib

import pytest

from pipeline.files import confine, fs
from tests.common.jobs import run_main, tree_digest, write_jsonl


@pytest.fixture
def victim(tmp_path: pathlib.Path) -> pathlib.Path:
    """A directory outside OUTPUT holding someone's files, with a reject file's name."""
    v = tmp_path / "victim"
    v.mkdir()
    (v / "empty.jsonl").write_text("precious\n")
    (v / "part-00000-of-00001.parquet").write_bytes(b"not a shard")
    (v / "notes").mkdir()
    (v / "notes" / "a.txt").write_text("keep me")
    return v


@pytest.fixture
def job_input(tmp_path: pathlib.Path) -> pathlib.Path:
    return write_jsonl(tmp_path / "in.jsonl", [{"text": ""}, {"text": "ok"}, {"text": "more"}])


@pytest.mark.parametrize("overwrite", [False, True])
def test_rejects_dir_linked_outside_is_refused_and_the_target_untouched(
        tmp_path, victim, job_input, overwrite):
    # The reproduction of the report: OUTPUT/_rejects -> a directory of the user's.
    out = tmp_path / "out"
    out.mkdir()
    (out / "_rejects").symlink_to(victim)
    before = tree_digest(victim)
    code, err = run_main("--input", str(job_input), "--tokenizer", "bytes", "--output", str(out),
                      *(["--overwrite"] if overwrite else []))
    assert code == 2, err
    assert f"{out}/_rejects is a symbolic link (to {victim}) inside --output {out}" in err
    assert f"rm '{out}/_rejects'" in err
    assert tree_digest(victim) == before
    assert sorted(p.name for p in out.iterdir()) == ["_rejects"]  # no claim, nothing written


@pytest.mark.parametrize("where", [".tmp", "_manifest.json", ".claim",
                                   "part-00000-of-00001.parquet", "deep/below/link"])
def test_any_link_below_output_is_refused_before_any_work(tmp_path, victim, job_input, where):
    out = tmp_path / "out"
    link = out / where
    link.parent.mkdir(parents=True)
    target = victim if where in (".tmp", "deep/below/link") else victim / "empty.jsonl"
    link.symlink_to(target)
    before = tree_digest(victim)
    code, err = run_main("--input", str(job_input), "--tokenizer", "bytes", "--output", str(out),
                      "--overwrite")
    assert code == 2, err
    assert f"{link} is a symbolic link (to {target})" in err, err
    assert tree_digest(victim) == before


@pytest.mark.slow
def test_a_linked_split_dir_is_refused_by_a_split_job_with_overwrite(tmp_path, job_input):
    # The second reproduction: a split job's OUT/val moved away and linked back; rerunning
    # with --overwrite used to delete the dataset there and write the new split into it.
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": f"document {i}"} for i in range(40)])
    out = tmp_path / "out"
    args = ["--input", str(corpus), "--tokenizer", "bytes", "--split", "val=0.3", "--seed", "1"]
    code, err = run_main(*args, "--output", str(out))
    assert code == 0, err
    elsewhere = tmp_path / "elsewhere"
    (out / "val").rename(elsewhere)
    (out / "val").symlink_to(elsewhere)
    before = tree_digest(elsewhere)
    assert "_manifest.json" in before
    code, err = run_main(*args, "--seed", "2", "--output", str(out), "--overwrite")
    assert code == 2, err
    assert f"{out}/val is a symbolic link (to {elsewhere})" in err, err
    assert tree_digest(elsewhere) == before


@pytest.mark.slow
def test_a_link_made_while_the_job_runs_is_not_followed(tmp_path, victim, job_input,
                                                        monkeypatch):
    # After the launch checked OUTPUT: the link appears where the rejects will be written.
    run = importlib.import_module("pipeline.job")
    out = tmp_path / "out"
    checked = run.preflight

    def then_link(config, options, **kwargs):
        plan = checked(config, options, **kwargs)
        (out / "_rejects").symlink_to(victim)
        return plan

    monkeypatch.setattr(run, "preflight", then_link)
    before = tree_digest(victim)
    code, err = run_main("--input", str(job_input), "--tokenizer", "bytes", "--output", str(out))
    assert code == 1, err
    assert f"{out}/_rejects is a symbolic link (to {victim})" in err, err
    assert tree_digest(victim) == before
    # Its shard, temporary files and claim removed; the link left for the user to see.
    assert sorted(p.name for p in out.iterdir()) == ["_rejects"]


@pytest.mark.slow
def test_a_link_made_while_the_job_runs_to_an_empty_directory_leaves_no_claim(
        tmp_path, job_input, monkeypatch):
    run = importlib.import_module("pipeline.job")
    out, empty = tmp_path / "out", tmp_path / "empty"
    empty.mkdir()
    checked = run.preflight

    def then_link(config, options, **kwargs):
        plan = checked(config, options, **kwargs)
        (out / "_rejects").symlink_to(empty)
        return plan

    monkeypatch.setattr(run, "preflight", then_link)
    code, err = run_main("--input", str(job_input), "--tokenizer", "bytes", "--output", str(out))
    assert code == 1, err
    assert sorted(p.name for p in out.iterdir()) == ["_rejects"]
    assert list(empty.iterdir()) == []


# ---------------------------------------------------------------- pipeline.files.fs, one call each


@pytest.fixture
def linked(tmp_path, victim) -> pathlib.Path:
    """OUTPUT with ``sub`` linked to the victim directory."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "sub").symlink_to(victim)
    return out


def test_write_atomically_never_writes_through_a_link(linked, victim):
    before = tree_digest(victim)
    with pytest.raises(confine.OutsideOutputError, match="sub is a symbolic link"):
        fs.write_atomically(f"{linked}/sub/empty.jsonl", lambda f: f.write(b"x"),
                            f"{linked}/.tmp/a", root=str(linked))
    with pytest.raises(confine.OutsideOutputError, match="sub is a symbolic link"):
        fs.write_atomically(f"{linked}/x.jsonl", lambda f: f.write(b"x"), f"{linked}/sub",
                            root=str(linked))
    assert tree_digest(victim) == before


def test_create_claim_and_delete_never_go_through_a_link(linked, victim):
    before = tree_digest(victim)
    with pytest.raises(confine.OutsideOutputError):
        fs.create(f"{linked}/sub/new.spill", root=str(linked))
    with pytest.raises(confine.OutsideOutputError):
        fs.claim(f"{linked}/sub/.claim", b"{}", root=str(linked))
    for path in ("sub/empty.jsonl", "sub/notes", "sub/notes/a.txt"):
        with pytest.raises(confine.OutsideOutputError):
            fs.delete([f"{linked}/{path}"], root=str(linked))
    assert tree_digest(victim) == before


def test_a_link_as_the_last_component_is_replaced_or_removed_never_followed(linked, victim):
    before = tree_digest(victim)
    (linked / "_manifest.json").symlink_to(victim / "empty.jsonl")
    fs.write_atomically(f"{linked}/_manifest.json", lambda f: f.write(b"{}"),
                        f"{linked}/.tmp/a", root=str(linked))
    assert not (linked / "_manifest.json").is_symlink()
    assert (linked / "_manifest.json").read_bytes() == b"{}"
    with pytest.raises(confine.OutsideOutputError):  # created with O_NOFOLLOW
        fs.create(f"{linked}/sub", root=str(linked))
    fs.delete([f"{linked}/sub"], root=str(linked))  # the link itself
    assert not (linked / "sub").exists()
    assert tree_digest(victim) == before


def test_a_hard_link_in_output_is_replaced_never_written_into(tmp_path, victim):
    # A hard link cannot be told from a file; the job never opens an existing file for
    # writing (new files only, renamed into place), so the other name keeps its bytes.
    out = tmp_path / "out"
    (out / "_rejects").mkdir(parents=True)
    os.link(victim / "empty.jsonl", out / "_rejects" / "empty.jsonl")
    before = tree_digest(victim)
    fs.write_atomically(f"{out}/_rejects/empty.jsonl", lambda f: f.write(b"reject\n"),
                        f"{out}/.tmp/a", root=str(out))
    assert (out / "_rejects" / "empty.jsonl").read_bytes() == b"reject\n"
    with pytest.raises(FileExistsError):
        fs.create(f"{out}/_rejects/empty.jsonl", root=str(out))
    assert tree_digest(victim) == before
