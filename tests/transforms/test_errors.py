"""Typed refusals (`transforms.errors`, exported by `reader`; docs/reader.md#errors): each kind
of refusal raises its class, every class is a ``ValueError`` (so ``except ValueError`` still
catches it, and the two that were ``FileNotFoundError`` and the ``OSError`` still are), the
messages are the ones the reader always gave, and a wrong argument stays a plain
``ValueError``."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

import reader
from reader import (
    DamagedDataset,
    DatasetError,
    EpochSampler,
    ForeignDataset,
    MissingShard,
    NotRegularFileError,
    PackedSampler,
    SamplerStateError,
    UnfinishedDataset,
    WindowDataset,
)
from tests.common.reader_data import BOS, EOS
from transforms import errors
from transforms.dataset.manifest import MANIFEST_NAME
from transforms.params import WindowSpec
from transforms.testing import write_dataset

CLASSES = (DatasetError, DamagedDataset, MissingShard, NotRegularFileError, ForeignDataset,
           UnfinishedDataset, SamplerStateError)
SHARD = "part-00001-of-00002.parquet"


def _write(root: Path, fingerprint: str) -> None:
    docs = [(f"d{i:02d}", [BOS, *range(10, 13 + i % 9), EOS]) for i in range(20)]
    write_dataset(root, docs, windows=WindowSpec(window=8, stride=8), num_shards=2,
                  fingerprint=fingerprint)


@pytest.fixture
def two_jobs(tmp_path: Path) -> tuple[Path, Path]:
    """Two datasets of the same documents written by two jobs (two fingerprints)."""
    _write(tmp_path / "a", "a" * 64)
    _write(tmp_path / "b", "b" * 64)
    return tmp_path / "a", tmp_path / "b"


def _edit_manifest(root: Path, edit) -> None:
    path = root / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def _refusal(call) -> ValueError:
    with pytest.raises(ValueError) as info:  # every refusal below is still a ValueError
        call()
    return info.value


def test_the_tree_is_one_set_of_classes_exported_by_reader() -> None:
    for cls in CLASSES:
        assert issubclass(cls, ValueError), cls
        assert cls.__name__ in reader.__all__
    assert {c for c in CLASSES if c.__module__ == "transforms.errors"} == {
        getattr(errors, name) for name in errors.__all__}
    assert issubclass(MissingShard, DamagedDataset) and issubclass(MissingShard, FileNotFoundError)
    assert issubclass(NotRegularFileError, DamagedDataset) and issubclass(NotRegularFileError,
                                                                          OSError)
    assert issubclass(UnfinishedDataset, DatasetError)
    assert issubclass(UnfinishedDataset, FileNotFoundError)
    assert not issubclass(SamplerStateError, DatasetError)
    assert not issubclass(ForeignDataset, DamagedDataset)


def test_no_manifest_is_an_unfinished_dataset(two_jobs: tuple[Path, Path]) -> None:
    a, _ = two_jobs
    (a / MANIFEST_NAME).unlink()  # a job still running, or killed, has not written it
    e = _refusal(lambda: WindowDataset(a))
    assert type(e) is UnfinishedDataset and isinstance(e, FileNotFoundError)
    assert str(e) == (f"{a}/{MANIFEST_NAME} not found: a directory without a manifest is not a "
                      "finished dataset (the pipeline writes the manifest last, after every "
                      "shard is complete)")


def test_a_path_that_names_nothing_stays_a_plain_file_not_found(tmp_path: Path) -> None:
    """A typo is not a job still running: a retry loop on UnfinishedDataset would wait for
    ever."""
    with pytest.raises(FileNotFoundError) as info:
        WindowDataset(tmp_path / "no-such-dir")
    assert type(info.value) is FileNotFoundError
    assert str(info.value).startswith(f"{tmp_path}/no-such-dir/{MANIFEST_NAME} not found: ")
    (tmp_path / "empty").mkdir()  # the directory of a job that has not written its manifest
    assert type(_refusal(lambda: WindowDataset(tmp_path / "empty"))) is UnfinishedDataset


@pytest.mark.usefixtures("isolated_cache")
def test_damaged_bytes_are_a_damaged_dataset(two_jobs: tuple[Path, Path]) -> None:
    a, _ = two_jobs
    shard = a / SHARD
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    e = _refusal(lambda: WindowDataset(a, verify=True))
    assert type(e) is DamagedDataset, repr(e)
    assert re.search(rf"shard .*{SHARD}", str(e))


def test_an_edited_manifest_is_a_damaged_dataset(two_jobs: tuple[Path, Path]) -> None:
    a, _ = two_jobs
    _edit_manifest(a, lambda m: m["counts"].update(tokens=999))
    e = _refusal(lambda: WindowDataset(a))
    assert type(e) is DamagedDataset
    assert "counts.tokens is 999" in str(e) and str(e).endswith("the dataset is damaged")


def test_another_format_version_is_a_dataset_error_not_damage(two_jobs: tuple[Path, Path]) -> None:
    a, _ = two_jobs
    _edit_manifest(a, lambda m: m.update(format_version=99))
    e = _refusal(lambda: WindowDataset(a))
    assert type(e) is DatasetError
    assert "has format_version 99, but this reader reads version" in str(e)


def test_a_missing_shard_is_damaged_and_still_not_found(two_jobs: tuple[Path, Path]) -> None:
    a, _ = two_jobs
    (a / SHARD).unlink()
    e = _refusal(lambda: WindowDataset(a))
    assert type(e) is MissingShard and isinstance(e, FileNotFoundError)
    assert isinstance(e, DamagedDataset)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_shard_is_damaged_and_still_an_oserror(two_jobs: tuple[Path, Path]) -> None:
    a, _ = two_jobs
    (a / SHARD).unlink()
    os.mkfifo(a / SHARD)
    e = _refusal(lambda: WindowDataset(a))
    assert type(e) is NotRegularFileError and isinstance(e, OSError)
    assert isinstance(e, DamagedDataset)
    assert "is not a regular file but a FIFO" in str(e)


@pytest.mark.usefixtures("isolated_cache")
def test_another_jobs_shard_is_a_foreign_dataset(two_jobs: tuple[Path, Path]) -> None:
    a, b = two_jobs
    shutil.copy(b / SHARD, a / SHARD)
    theirs = json.loads((b / MANIFEST_NAME).read_text())["shards"][1]
    _edit_manifest(a, lambda m: m["shards"].__setitem__(1, theirs))  # even with its SHA-256
    ds = WindowDataset(a)
    e = _refusal(lambda: ds[len(ds) - 1])
    assert type(e) is ForeignDataset
    assert f"{SHARD} was written by another job (fingerprint {'b' * 64}" in str(e)


def test_a_sampler_state_of_another_dataset_is_a_sampler_state_error() -> None:
    state = EpochSampler(40, 4, seed=0, fingerprint="a" * 64).state_dict()
    e = _refusal(lambda: EpochSampler(40, 4, seed=0, fingerprint="b" * 64).load_state_dict(state))
    assert type(e) is SamplerStateError
    assert f"saved for the dataset with fingerprint {'a' * 64}" in str(e)
    packed = PackedSampler([3, 4, 5, 6], 2, 8, seed=0).state_dict()
    e = _refusal(lambda: PackedSampler([3, 4, 5, 6], 2, 8, seed=0).load_state_dict(
        {**packed, "version": -1}))
    assert type(e) is SamplerStateError
    assert str(e) == ("PackedSampler state version -1 is not 1; resume with the release that "
                      "saved it")


@pytest.mark.parametrize("call", [
    lambda: EpochSampler(40, 0, seed=0),
    lambda: EpochSampler(40, 4, seed=0, order="sorted"),
    lambda: PackedSampler([3, 9], 2, 8, seed=0),
], ids=["batch_size", "order", "seq_len"])
def test_a_wrong_argument_stays_a_plain_value_error(call) -> None:
    e = _refusal(call)
    assert type(e) is ValueError, repr(e)
    assert not isinstance(e, (DatasetError, SamplerStateError))


def test_a_wrong_argument_to_the_dataset_stays_plain(two_jobs: tuple[Path, Path]) -> None:
    a, _ = two_jobs
    e = _refusal(lambda: WindowDataset(a).blocks("row-group-ish"))
    assert type(e) is ValueError


def _job(tmp_path: Path, output: Path, *flags: str) -> list[str]:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": "hello world"}) + "\n")
    return ["--input", str(src), "--tokenizer", "bytes", "--output", str(output), *flags]


def test_the_jobs_output_refusals_are_typed_with_the_same_exit_status(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pipeline
    from pipeline.files.confine import OutsideOutputError
    from pipeline.files.errors import OutputInUse, OutputRefused
    from tests.common.jobs import exit_code

    assert pipeline.OutputRefused is OutputRefused and pipeline.OutputInUse is OutputInUse
    assert issubclass(OutputInUse, OutputRefused) and issubclass(OutputRefused, ValueError)
    assert issubclass(OutsideOutputError, OutputRefused)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / ".claim").write_text('{"attempt": "a1", "pid": 1, "host": "h"}')  # a job runs
    e = _refusal(lambda: pipeline.run(_job(tmp_path, busy)))
    assert type(e) is OutputInUse
    assert str(e).startswith(f"--output {busy} is claimed by another job (attempt a1, pid 1 on h")
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    e = _refusal(lambda: pipeline.run(_job(tmp_path, full)))
    assert type(e) is OutputRefused
    assert str(e) == (f"--output {full} already holds 1 files (e.g. notes.txt); pass --overwrite "
                      "to replace that dataset, or choose another directory")
    for output in (busy, full):  # the command's exit status is what it was: refused, 2
        code, err = exit_code(capsys, *_job(tmp_path, output))
        assert code == 2 and err.startswith(f"error: --output {output} ")
    e = _refusal(lambda: pipeline.run(_job(tmp_path, tmp_path / "new", "--window", "0")))
    assert type(e) is ValueError  # a wrong flag stays plain
