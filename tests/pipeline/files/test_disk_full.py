"""A full disk names the directory that filled and what to do (docs/integrity.md#the-job).

The real thing first: OUTPUT on a 1 MiB tmpfs (skipped where mounting is not permitted),
filled by the file shuffle's spill files, then by the shards. Then the same messages with the
error injected at the file's write, which runs everywhere.
"""

from __future__ import annotations

import errno
import importlib
import io
import pathlib
import random
import re
import subprocess

import pytest

from pipeline.files import fs
from tests.common.jobs import run_main, write_jsonl
from transforms.inputs.chunks import Chunk


@pytest.fixture
def small_disk(tmp_path: pathlib.Path):
    """A 1 MiB tmpfs mounted at ``tmp_path/disk``, unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                                 capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"cannot mount a tmpfs here: {e}")
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True, timeout=60)


@pytest.fixture
def corpus(tmp_path: pathlib.Path) -> pathlib.Path:
    """1.2 MB of text that compresses poorly: its spill and its shards exceed 1 MiB."""
    rng = random.Random(0)
    texts = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(1000))
             for _ in range(1200)]
    return write_jsonl(tmp_path / "in" / "c.jsonl", [{"text": t} for t in texts])


@pytest.mark.slow
def test_a_full_disk_under_the_spill_names_it_and_the_knobs(small_disk, corpus):
    out = small_disk / "out"
    code, err = run_main("--input", str(corpus), "--tokenizer", "bytes", "--output", str(out),
                      "--shuffle", "files")
    assert code == 1, err
    assert re.search(
        rf"error: the job failed: no space left on the device holding {out}/\.tmp/\w+/shuffle,"
        r" where the file shuffle spills the encoded documents", err), err
    assert "2.3x with --tokenizer bytes" in err and "pass --shuffle runner" in err, err
    assert not out.exists()  # its temporary files, its claim and the OUTPUT it made gone


@pytest.mark.slow
def test_a_full_disk_under_the_shards_names_the_output(small_disk, corpus):
    out = small_disk / "out"
    code, err = run_main("--input", str(corpus), "--tokenizer", "bytes", "--output", str(out),
                      "--shuffle", "runner")
    assert code == 1, err
    assert (f"error: the job failed: no space left on the device holding --output {out} while "
            "writing part-00000-of-00001.parquet: the shards, the reject files and, with "
            f"--shuffle files, the spill files in {out}/.tmp all live there; free space on "
            "that disk or choose an --output on a larger one") in err, err
    assert not out.exists()


# ---------------------------------------------------------------- injected at the write


class _Full(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


_CHUNK = Chunk(path="in/a.jsonl", rel="a.jsonl", fmt="jsonl", compression=None, start=0,
               end=10, first=1, size=10, extent=10)


def test_spill_files_name_their_directory_when_the_write_fails(tmp_path, monkeypatch):
    encode = importlib.import_module("pipeline.steps.encode")
    monkeypatch.setattr(fs, "create", lambda path, *, root: _Full())
    spill_dir = f"{tmp_path}/out/.tmp/a/shuffle"
    bundle = encode._BundleSpill(spill_dir, root=f"{tmp_path}/out", first=_CHUNK, num_parts=1)
    with pytest.raises(fs.DiskFullError) as e:  # the index and footer, at the bundle's end
        bundle.close()
    assert str(e.value).startswith(f"no space left on the device holding {spill_dir}, ")
    assert e.value.errno == errno.ENOSPC
    other = encode._BundleSpill(spill_dir, root=f"{tmp_path}/out", first=_CHUNK, num_parts=1)
    with (pytest.raises(fs.DiskFullError, match=f"holding {spill_dir}, "),  # a block
          encode._naming_a_full_disk(spill_dir)):
        other.writer.write(0, b"blocks")


def test_the_first_error_is_kept_when_closing_fails_too(tmp_path, monkeypatch):
    # An object-store upload closed after a failure fails too; that must not hide the first.
    class _BadClose(io.BytesIO):
        def close(self) -> None:
            raise OSError("CompleteMultipartUpload: MalformedXML")

    encode = importlib.import_module("pipeline.steps.encode")
    monkeypatch.setattr(fs, "create", lambda path, *, root: _BadClose())
    bundle = encode._BundleSpill(f"{tmp_path}/s", root=str(tmp_path), first=_CHUNK, num_parts=1)
    bundle.add_rejects([], order=(_CHUNK.path, 0))  # opens the rejects file too
    with pytest.raises(OSError, match="cannot read input file a.jsonl"):
        try:
            raise OSError("cannot read input file a.jsonl: NoSuchBucket")
        finally:
            bundle.abandon()  # what teardown does with a failed bundle's files: no error


def test_shards_name_the_output_when_the_write_fails(tmp_path):
    def full(f):
        raise OSError(errno.ENOSPC, "No space left on device")

    out = str(tmp_path / "out")
    with pytest.raises(fs.DiskFullError, match=(
            f"no space left on the device holding --output {out} while writing "
            "_rejects/empty.jsonl: ")):
        fs.write_atomically(f"{out}/_rejects/empty.jsonl", full, f"{out}/.tmp/a", root=out)
