"""`reader.data.opening`: the one path by which WindowDataset, inspect, prepare and --mix open a
dataset."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from reader import WindowDataset
from reader.prepare import main as prepare_main
from reader.tools import inspect
from tests.common.jobs import manifest_bytes, run_job, write_jsonl
from tests.common.paths import ROOT as REPO
from tests.common.reader_data import random_docs, write_docs
from tests.common.servers import reader_s3_uri
from transforms.dataset.manifest import LEGACY_MANIFEST_NAME, MANIFEST_NAME


@pytest.fixture(scope="module")
def split_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("split")
    src = write_jsonl(tmp / "in.jsonl", [{"text": f"doc {i} " * (1 + i % 7)} for i in range(80)])
    run_job(tmp / "out", "--input", str(src), "--tokenizer", "bytes", "--window", "8",
            "--split", "val=0.3")
    return tmp / "out"


def test_a_split_without_its_jobs_record_is_unfinished(split_job: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    shutil.copytree(split_job, out)
    assert len(WindowDataset(out / "val")) > 0
    (out / "_splits.json").unlink()  # a job killed between the splits and its record
    message = (rf"{out}/val is the split 'val' of a --split job, but {out}/_splits\.json, "
               rf"which the job writes after every split, is missing: the job did not finish; "
               rf"rerun the job that wrote {out} \(with --overwrite\), or pass "
               r"allow_unfinished=True")
    with pytest.raises(FileNotFoundError, match=message):
        WindowDataset(out / "val")
    with pytest.raises(FileNotFoundError, match=message):
        prepare_main([str(out / "val")])
    assert inspect.run([str(out / "val")]) == 2
    assert "the job did not finish" in capsys.readouterr().err
    ds = WindowDataset(out / "val", allow_unfinished=True)  # forensics
    assert len(ds) == json.loads((out / "val" / MANIFEST_NAME).read_text())["counts"]["windows"]
    assert inspect.run([str(out / "val"), "--allow-unfinished"]) == 0


def test_a_split_from_another_run_is_refused(split_job: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(split_job, out)
    record = json.loads((out / "_splits.json").read_text())
    record["splits"][0]["manifest_sha256"] = "0" * 64
    (out / "_splits.json").write_text(json.dumps(record))
    name = record["splits"][0]["name"]
    with pytest.raises(ValueError, match=rf"_splits\.json does not record .*{name}/_manifest"
                                         rf"\.json .* as its split '{name}'"):
        WindowDataset(out / name)


def test_one_path_for_every_reader(small: tuple[Path, list]) -> None:
    from reader.data.opening import locate, open_files

    root, rows = small
    local, uri = open_files(root), open_files(root.as_uri())
    assert local.manifest == uri.manifest and local.fingerprint == uri.fingerprint
    assert [s.file for s in local.shards] == [s.file for s in uri.shards]
    assert [s.stamp for s in local.shards] == [s.stamp for s in uri.shards]
    ds = WindowDataset(root)
    assert ds.fingerprint == local.fingerprint and ds.manifest == local.manifest
    assert inspect.open_dataset(str(root)).manifest == ds.manifest
    assert locate("s3://KEY:SECRET@bucket/a/b?region=x").shown == "s3://bucket/a/b"


def test_the_legacy_manifest_name_is_refused_by_every_reader(small: tuple[Path, list]) -> None:
    from reader.data.opening import open_files

    root, _ = small
    (root / MANIFEST_NAME).rename(root / LEGACY_MANIFEST_NAME)
    for open_ in (WindowDataset, open_files, lambda p: inspect.open_dataset(str(p))):
        with pytest.raises(FileNotFoundError, match=r"holds manifest\.json, the name "
                                                    r"token-windows 0\.1\.0 gave the manifest"):
            open_(root)


class _Counting(pafs.FileSystemHandler):
    """A local filesystem that counts the files opened for reading."""

    def __init__(self) -> None:
        self.fs, self.opened = pafs.LocalFileSystem(), []

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def get_type_name(self) -> str:
        return "counting"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths):  # type: ignore[no-untyped-def]
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector):  # type: ignore[no-untyped-def]
        return self.fs.get_file_info(selector)

    def open_input_stream(self, path):  # type: ignore[no-untyped-def]
        self.opened.append(path.rsplit("/", 1)[-1])
        return self.fs.open_input_stream(path)

    def open_input_file(self, path):  # type: ignore[no-untyped-def]
        self.opened.append(path.rsplit("/", 1)[-1])
        return self.fs.open_input_file(path)

    def _refuse(self, *args):  # type: ignore[no-untyped-def]
        raise NotImplementedError("the reader never writes to a dataset")

    copy_file = create_dir = delete_dir = delete_dir_contents = delete_file = _refuse
    delete_root_dir_contents = move = open_append_stream = open_output_stream = _refuse


def test_opening_reads_the_manifest_alone_and_verify_reads_every_shard(
        tmp_path: Path) -> None:
    """Open cost does not grow with the shards: no footer is read until a shard is."""
    from reader.data.opening import open_files, verify_files

    write_docs(tmp_path / "ds", random_docs(40), window=6, num_shards=8)
    handler = _Counting()
    fs = pafs.PyFileSystem(handler)
    ds = WindowDataset(str(tmp_path / "ds"), filesystem=fs, cache_dir=tmp_path / "cache")
    assert handler.opened == [MANIFEST_NAME] and len(ds) > 0
    handler.opened.clear()
    verify_files(open_files(str(tmp_path / "ds"), filesystem=fs))
    shards = {f"part-{i:05d}-of-00008.parquet" for i in range(8)}
    assert set(handler.opened) == {MANIFEST_NAME, *shards}


@pytest.mark.slow
def test_on_s3_a_split_needs_its_record_and_a_bad_sha256_deletes_nothing(
        split_job: Path, tmp_path: Path, moto_bucket: tuple[Any, str]) -> None:
    """The same rules on an object store (the moto S3 server, on 127.0.0.1)."""
    s3, endpoint = moto_bucket
    for p in split_job.rglob("*"):
        if p.is_file() and not p.relative_to(split_job).parts[0].startswith("_rejects"):
            s3.put_object(Bucket="bucket", Key=f"job/{p.relative_to(split_job)}",
                          Body=p.read_bytes())

    def uri(key: str) -> str:
        return reader_s3_uri(endpoint, key)

    cache = tmp_path / "cache"
    assert len(WindowDataset(uri("job/val"), cache_dir=cache)) > 0
    s3.delete_object(Bucket="bucket", Key="job/_splits.json")
    with pytest.raises(FileNotFoundError, match=r"s3://bucket/job/val is the split 'val' .*"
                                                r"s3://bucket/job/_splits\.json.* is missing"):
        WindowDataset(uri("job/val"), cache_dir=cache)
    assert len(WindowDataset(uri("job/val"), cache_dir=cache, allow_unfinished=True)) > 0
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("precious\n")
    manifest = json.loads((split_job / "train" / MANIFEST_NAME).read_text())
    manifest["shards"][0]["sha256"] = str(victim).ljust(64, "/")[:64]
    s3.put_object(Bucket="bucket", Key=f"job/train/{MANIFEST_NAME}",
                  Body=json.dumps(manifest).encode())
    with pytest.raises(ValueError, match=r"shards\[0\]\.sha256 must be 64 lowercase hex"):
        WindowDataset(uri("job/train"), cache_dir=cache, allow_unfinished=True)[0]
    assert (victim / "precious.txt").read_text() == "precious\n"


def test_what_open_finds_of_each_shard(small: tuple[Path, list]) -> None:
    import hashlib

    import pyarrow.parquet as pq

    from reader.data.opening import open_files, read_column, row_groups, sha256_of

    root, rows = small
    files = open_files(root)
    assert files.location.root == str(root) and files.location.shown == str(root)
    assert files.fingerprint == hashlib.sha256(
        "".join(s.sha256 for s in files.manifest.shards).encode()).hexdigest()
    for s, shard in enumerate(files.shards):
        path = root / shard.file
        entry = files.manifest.shards[s]
        assert (shard.index, shard.path, shard.where, shard.rows, shard.sha256) == (
            s, str(path), f"{root}/{shard.file}", entry.rows, entry.sha256)
        assert shard.stamp == (path.stat().st_size, path.stat().st_mtime_ns)
        assert sha256_of(files.location.fs, shard.path) == entry.sha256
        meta = pq.read_metadata(path)
        assert row_groups(files, s) == tuple(meta.row_group(g).num_rows
                                             for g in range(meta.num_row_groups))
        assert read_column(files, s, "doc_id").tolist() == pq.read_table(
            path, columns=["doc_id"]).column("doc_id").to_pylist()
    assert sum(s.rows for s in files.shards) == len(rows)


def test_a_missing_shard_and_a_cache_inside_the_dataset_are_refused(
        small: tuple[Path, list]) -> None:
    from reader.data.opening import locate, open_files

    root, _ = small
    loc = locate(root)
    assert loc.outside(root.parent / "cache") == str(root.parent / "cache")
    with pytest.raises(ValueError, match=f"`cache_dir` must be outside the dataset directory "
                                         f"{root}, but got {root}/cache"):
        loc.outside(root / "cache")
    (root / "part-00001-of-00003.parquet").unlink()
    with pytest.raises(FileNotFoundError, match=f"^shard {root}/part-00001-of-00003.parquet, "
                                                "listed in the manifest, does not exist$"):
        open_files(root)


def test_locate_names_a_place_without_its_credentials(tmp_path: Path) -> None:
    from reader.data.opening import locate

    assert locate("relative/ds").root == str(Path("relative/ds").absolute())
    assert locate(f"file://{tmp_path}/ds/").shown == f"file://{tmp_path}/ds"
    mem = locate("a/b/", filesystem=pafs.LocalFileSystem())
    assert (mem.root, mem.shown, mem.where("x")) == ("a/b", "local:a/b", "local:a/b/x")



def _in_a_process(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` run in a fresh interpreter (a FIFO that hangs it fails the test, not the run)."""
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_a_fifo_shard_is_named_not_a_regular_file(small: tuple[Path, list]) -> None:
    root, _ = small
    (root / "part-00001-of-00003.parquet").unlink()
    os.mkfifo(root / "part-00001-of-00003.parquet")
    done = _in_a_process("import sys; from reader.data.opening import open_files\n"
                         "try:\n    open_files(sys.argv[1])\n"
                         "except OSError as e:\n    print(e)\n", str(root))
    assert done.stdout.strip() == (
        f"shard {root}/part-00001-of-00003.parquet is not a regular file but a FIFO (named "
        "pipe); the reader reads only regular files: a shard is a Parquet file the job "
        "wrote; restore it, or rerun the job")
    os.unlink(root / "part-00001-of-00003.parquet")
    (root / MANIFEST_NAME).unlink()
    os.mkfifo(root / MANIFEST_NAME)
    done = _in_a_process("import sys; from reader.data.opening import open_files\n"
                         "try:\n    open_files(sys.argv[1])\n"
                         "except OSError as e:\n    print(e)\n", str(root))
    assert done.stdout.startswith(
        f"{root}/{MANIFEST_NAME} is not a regular file but a FIFO (named pipe)")


def test_a_manifest_of_many_shards_is_checked_against_the_listing_before_it_is_parsed(
        small: tuple[Path, list], monkeypatch: pytest.MonkeyPatch) -> None:
    # A manifest listing 20,000 shards over a directory holding 3 of them: the first missing
    # shard is named from the listing and the first shard's name, before any entry is parsed
    # (at 10**7 entries, parsing took minutes and gigabytes before this message).
    import reader.data.opening
    from reader.data.opening import open_files

    root, _ = small
    manifest = json.loads((root / MANIFEST_NAME).read_text())
    entries = manifest["shards"]
    n = 20_000
    for i, entry in enumerate(entries):
        name = f"part-{i:05d}-of-{n:05d}.parquet"
        (root / entry["file"]).rename(root / name)
    manifest["shards"] = [{**entries[i % 3], "file": f"part-{i:05d}-of-{n:05d}.parquet"}
                          for i in range(n)]
    manifest["num_shards"] = n
    (root / MANIFEST_NAME).write_bytes(manifest_bytes(manifest))

    def parsed(*args: Any, **kw: Any) -> None:
        raise AssertionError("the manifest was parsed before the listing was checked")

    monkeypatch.setattr(reader.data.opening, "read_manifest", parsed)
    with pytest.raises(FileNotFoundError, match=f"^shard {root}/part-00003-of-20000.parquet, "
                                                "listed in the manifest, does not exist$"):
        open_files(root)
