"""Tests of reader.data.layout: the cache of memory-mapped shard layouts, and remote datasets."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from reader import WindowDataset
from reader.data.layout import LAYOUT_VERSION, LayoutCache, default_cache_dir
from tests.common.paths import ROOT as REPO
from tests.common.reader_data import check_window, edit_manifest, random_docs, write_docs
from tests.common.servers import reader_s3_uri


def layout_dir(cache: Path, ds: WindowDataset, s: int) -> Path:
    return cache / f"layouts-v{LAYOUT_VERSION}" / ds._shards[s].sha256


def all_windows(ds: WindowDataset) -> list[dict]:
    return [ds[i] for i in range(len(ds))]


def plain(windows: list[dict]) -> list[dict]:
    return [{**w, "tokens": w["tokens"].tolist()} for w in windows]


def test_the_first_open_builds_once_and_later_opens_reuse(small: tuple[Path, list],
                                                          isolated_cache: Path) -> None:
    root, rows = small
    ds = WindowDataset(root)
    assert ds.cache_dir == str(isolated_cache)
    report = ds.prepare()
    assert report["built"] == 3 and report["shards"] == 3 and report["bytes"] > 0
    for s in range(3):
        meta = json.loads((layout_dir(isolated_cache, ds, s) / "layout.json").read_text())
        assert meta["sha256"] == ds._shards[s].sha256 and meta["token_dtype"] == "uint16"
    again = WindowDataset(root)
    assert again.prepare()["built"] == 0  # reuse: the cheap check, no rebuild
    for i, row in enumerate(rows):
        check_window(again[i], row, i)
    assert len(ds.fingerprint) == 64 and ds.fingerprint == again.fingerprint
    assert not any(p.name.startswith("layouts") for p in root.iterdir())  # never in the dataset


@pytest.mark.parametrize("damage", ["truncate_tokens", "garbage_meta", "no_meta", "stale_version",
                                    "wrong_rows", "missing_records", "bad_npy"])
def test_a_stale_or_corrupt_layout_is_rebuilt(small: tuple[Path, list], isolated_cache: Path,
                                              damage: str) -> None:
    root, rows = small
    WindowDataset(root).prepare()
    ds = WindowDataset(root)
    target = layout_dir(isolated_cache, ds, 1)
    meta_path = target / "layout.json"
    meta = json.loads(meta_path.read_text())
    if damage == "truncate_tokens":
        with open(target / "tokens.bin", "r+b") as f:
            f.truncate(meta["files"]["tokens.bin"]["bytes"] - 2)
    elif damage == "garbage_meta":
        meta_path.write_text("{not json")
    elif damage == "no_meta":
        meta_path.unlink()  # as a build that stopped before its last write
    elif damage == "stale_version":
        meta_path.write_text(json.dumps({**meta, "version": LAYOUT_VERSION - 1}))
    elif damage == "wrong_rows":
        meta_path.write_text(json.dumps({**meta, "rows": meta["rows"] + 1}))
    elif damage == "missing_records":
        (target / "windows.npy").unlink()
    elif damage == "bad_npy":
        size = (target / "windows.npy").stat().st_size
        (target / "windows.npy").write_bytes(b"x" * size)  # the size check passes; loading fails
    assert not ds._layouts.is_ready(ds._source(1))
    if damage in ("truncate_tokens", "missing_records", "bad_npy"):  # files that fail: said
        with pytest.warns(RuntimeWarning, match=r"part-00001-of-00003\.parquet in .* is "
                                                r"damaged .* rebuilt from the shard"):
            assert ds.prepare()["built"] == 1
    else:  # stale or partial: rebuilt without a word
        assert ds.prepare()["built"] == 1
    assert ds._layouts.is_ready(ds._source(1))
    for i, row in enumerate(rows):
        check_window(ds[i], row, i)


@pytest.mark.parametrize("damage", ["truncate", "meta", "absent"])
def test_the_dataset_index_is_built_once_and_rebuilt_when_damaged(
        small: tuple[Path, list], isolated_cache: Path, damage: str) -> None:
    root, rows = small
    ds = WindowDataset(root)
    before = ds.__getitems__(list(range(len(rows))))  # shard by shard: no index yet
    assert ds._dataset_index() is not None  # every shard is local now: the index was built
    directory = isolated_cache / f"layouts-v{LAYOUT_VERSION}" / "datasets" / ds.fingerprint
    if damage == "truncate":
        with open(directory / "windows.npy", "r+b") as f:
            f.truncate(100)
    elif damage == "meta":
        (directory / "index.json").write_text("[]")
    else:
        for p in directory.iterdir():
            p.unlink()
        directory.rmdir()
    again = WindowDataset(root)
    if damage == "truncate":
        with pytest.warns(RuntimeWarning, match=r"the cached dataset index .* is damaged"):
            assert again._dataset_index() is None  # refused by the cheap check
    else:
        assert again._dataset_index() is None
    assert again.prepare()["built"] == 0  # the shards' layouts are fine; only the index is new
    assert again._dataset_index() is not None
    after = again.__getitems__(list(range(len(rows))))
    for i, row in enumerate(rows):
        check_window(before[i], row, i)
        check_window(after[i], row, i)


def test_a_partial_build_is_swept_and_rebuilt(small: tuple[Path, list],
                                              isolated_cache: Path) -> None:
    root, rows = small
    ds = WindowDataset(root)
    sha = ds._shards[0].sha256
    leftover = isolated_cache / f"layouts-v{LAYOUT_VERSION}" / "tmp" / f"{sha}.999.dead"
    leftover.mkdir(parents=True)
    (leftover / "tokens.bin").write_bytes(b"\0" * 10)  # a crashed build's temporary directory
    check_window(ds[0], rows[0], 0)
    assert not leftover.exists()
    assert [p.name for p in (isolated_cache / f"layouts-v{LAYOUT_VERSION}" / "tmp").iterdir()] == []


def test_a_shard_that_does_not_hash_to_the_manifest_is_refused(small: tuple[Path, list]) -> None:
    root, rows = small
    edit_manifest(root, lambda m: m["shards"][2].update(sha256="0" * 64))
    ds = WindowDataset(root)
    check_window(ds[0], rows[0], 0)  # other shards read fine
    with pytest.raises(ValueError, match=r"part-00002-of-00003\.parquet has SHA-256 [0-9a-f]{64}, "
                                         r"but the manifest says 0{64}"):
        ds[len(rows) - 1]


def test_a_manifest_without_a_usable_sha256_is_refused(small: tuple[Path, list]) -> None:
    root, _ = small
    edit_manifest(root, lambda m: m["shards"][0].update(sha256=None))
    with pytest.raises(ValueError, match=r"shards\[0\]\.sha256 must be a string, but got None"):
        WindowDataset(root)  # transforms.dataset.manifest.read_manifest's check
    edit_manifest(root, lambda m: m["shards"][0].update(sha256="abc"))
    with pytest.raises(ValueError, match=r"shards\[0\]\.sha256 must be 64 lowercase hex "
                                         r"digits \(a SHA-256\), but got 'abc'"):
        WindowDataset(root)


def test_the_cache_is_never_inside_the_dataset(small: tuple[Path, list]) -> None:
    root, _ = small
    with pytest.raises(ValueError, match="`cache_dir` must be outside the dataset directory"):
        WindowDataset(root, cache_dir=root / "cache")
    with pytest.raises(ValueError, match="`cache_dir` must be outside the dataset directory"):
        WindowDataset(root, cache_dir=root)


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TOKEN_WINDOWS_CACHE", str(tmp_path / "a"))
    assert default_cache_dir() == str(tmp_path / "a")
    monkeypatch.delenv("TOKEN_WINDOWS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == str(tmp_path / "xdg" / "token-windows")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "token-windows")


def test_a_bounded_cache_keeps_the_latest_layouts(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    rows = write_docs(root, random_docs(60), window=6, num_shards=4)
    probe = WindowDataset(root, cache_dir=tmp_path / "probe")
    probe.prepare()
    one = max(size for _, size, _ in probe._layouts.entries())
    ds = WindowDataset(root, cache_dir=tmp_path / "bounded", cache_limit=2 * one)
    for i, row in enumerate(rows):  # shard by shard, as the blocks order by shard reads
        check_window(ds[i], row, i)
    entries = ds._layouts.entries()
    assert 1 <= len(entries) < 4 and sum(size for _, size, _ in entries) <= 2 * one
    assert ds._shards[-1].sha256 in {sha for sha, _, _ in entries}  # the latest stays
    fresh = WindowDataset(root, cache_dir=tmp_path / "bounded", cache_limit=2 * one)
    for i, row in enumerate(rows):  # evicted layouts are rebuilt on demand
        check_window(fresh[i], row, i)
    with pytest.raises(ValueError, match="`limit_bytes` must be a positive integer or None, but "
                                         "got 0"):
        LayoutCache(tmp_path, limit_bytes=0)


def test_a_file_uri_gives_the_windows_of_the_local_path(small: tuple[Path, list]) -> None:
    root, rows = small
    local = all_windows(WindowDataset(root))
    uri = WindowDataset(root.as_uri())
    assert uri.path == root.as_uri() and len(uri) == len(rows)
    assert plain(all_windows(uri)) == plain(local)
    for i, row in enumerate(rows):
        check_window(local[i], row, i)


def test_a_remote_filesystem_downloads_each_shard_once(small: tuple[Path, list],
                                                       tmp_path: Path) -> None:
    root, rows = small
    # Not a LocalFileSystem: the reader takes the download path, as for s3:// or gs://.
    remote = pafs.SubTreeFileSystem(str(root.parent), pafs.LocalFileSystem())
    ds = WindowDataset(root.name, filesystem=remote, cache_dir=tmp_path / "cache")
    assert ds.path == f"subtree:{root.name}"
    for i, row in enumerate(rows):
        check_window(ds[i], row, i)
    assert ds.layout_builds == 3
    cache = tmp_path / "cache" / f"layouts-v{LAYOUT_VERSION}"
    assert not list(cache.glob("**/*.parquet"))  # downloads are removed once converted
    again = WindowDataset(root.name, filesystem=remote, cache_dir=tmp_path / "cache")
    assert again.prepare()["built"] == 0
    batch = again.__getitems__(list(range(len(rows))))
    for i, row in enumerate(rows):
        check_window(batch[i], row, i)


def test_a_damaged_remote_shard_is_refused(small: tuple[Path, list], tmp_path: Path) -> None:
    root, _ = small
    edit_manifest(root, lambda m: m["shards"][0].update(sha256="f" * 64))
    remote = pafs.SubTreeFileSystem(str(root.parent), pafs.LocalFileSystem())
    ds = WindowDataset(root.name, filesystem=remote, cache_dir=tmp_path / "cache")
    with pytest.raises(ValueError, match=r"subtree:ds/part-00000-of-00003\.parquet has SHA-256"):
        ds[0]
    assert list((tmp_path / "cache" / f"layouts-v{LAYOUT_VERSION}" / "tmp").iterdir()) == []


@pytest.mark.slow
def test_an_s3_dataset_gives_the_windows_of_the_local_path(
        small: tuple[Path, list], tmp_path: Path, moto_bucket: tuple[Any, str]) -> None:
    s3, endpoint = moto_bucket
    root, rows = small
    for p in root.iterdir():
        s3.put_object(Bucket="bucket", Key=f"data/ds/{p.name}", Body=p.read_bytes())
    ds = WindowDataset(reader_s3_uri(endpoint, "data/ds"), cache_dir=tmp_path / "cache")
    assert ds.path == "s3://bucket/data/ds"  # no credentials in messages
    assert plain(all_windows(ds)) == plain(all_windows(WindowDataset(root)))
    assert ds.layout_builds == 3
    batch = ds.__getitems__(list(range(len(rows))))
    for i, row in enumerate(rows):
        check_window(batch[i], row, i)


def test_a_shard_changed_after_its_layout_was_built_is_read_again(small: tuple[Path, list],
                                                                  tmp_path: Path) -> None:
    root, rows = small
    WindowDataset(root).prepare()
    shard = root / "part-00001-of-00003.parquet"
    os.utime(shard, ns=(1, 1))  # same bytes, another stamp: rebuilt, not trusted
    ds = WindowDataset(root)
    assert ds.prepare()["built"] == 1
    for i, row in enumerate(rows):
        check_window(ds[i], row, i)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x5A  # damaged after the layout was built: never served
    shard.write_bytes(bytes(data))
    with pytest.raises((ValueError, OSError), match=r"part-00001-of-00003\.parquet"):
        WindowDataset(root).prepare()  # at open (footer) or at the rebuild (pages, hash)


def _big(root: Path, seed: int) -> list[dict]:
    """A one-shard dataset whose tokens.bin is far larger than the sampled pages."""
    rng = __import__("random").Random(seed)
    docs = [(f"doc-{i:03d}", bytes(rng.randrange(32, 127) for _ in range(2000)))
            for i in range(60)]
    return write_docs(root, docs, window=64, num_shards=1, rows_per_group=1000)


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("verify", [False, True])
def test_a_flipped_byte_in_a_cached_file_is_never_served(small: tuple[Path, list],
                                                         isolated_cache: Path,
                                                         verify: bool) -> None:
    """A small layout's files are hashed whole by the cheap check; verify=True hashes all."""
    root, rows = small
    WindowDataset(root).prepare()
    ds = WindowDataset(root, verify=verify)
    tokens = layout_dir(isolated_cache, ds, 0) / "tokens.bin"
    _flip(tokens, 7)
    with pytest.warns(RuntimeWarning, match=r"part-00000-of-00003\.parquet in .* is damaged "
                                            r"\(tokens\.bin.*rebuilt from the shard"):
        got = [ds[i] for i in range(len(rows))]
    for i, row in enumerate(rows):
        check_window(got[i], row, i)
    assert ds.layout_builds == 1


def test_same_size_tokens_from_another_dataset_are_caught(tmp_path: Path,
                                                          isolated_cache: Path) -> None:
    rows_a = _big(tmp_path / "a", 1)
    _big(tmp_path / "b", 2)
    a, b = WindowDataset(tmp_path / "a"), WindowDataset(tmp_path / "b")
    a.prepare()
    b.prepare()
    mine, theirs = (layout_dir(isolated_cache, d, 0) / "tokens.bin" for d in (a, b))
    assert mine.stat().st_size == theirs.stat().st_size > 16 * 4096 * 2
    mine.write_bytes(theirs.read_bytes())
    again = WindowDataset(tmp_path / "a")
    with pytest.warns(RuntimeWarning, match=r"tokens\.bin's sampled pages are not the ones"):
        got = again.__getitems__(list(range(len(rows_a))))
    for i, row in enumerate(rows_a):
        check_window(got[i], row, i)


def test_a_flip_between_sampled_pages_needs_verify(tmp_path: Path, isolated_cache: Path) -> None:
    """The cheap check reads 16 pages; verify=True hashes every byte of every cached file."""
    rows = _big(tmp_path / "a", 1)
    WindowDataset(tmp_path / "a").prepare()
    tokens = layout_dir(isolated_cache, WindowDataset(tmp_path / "a"), 0) / "tokens.bin"
    size = tokens.stat().st_size
    _flip(tokens, (size - 4096) // 15 // 2)  # between the first two sampled pages
    assert WindowDataset(tmp_path / "a").prepare()["built"] == 0  # not seen by default
    ds = WindowDataset(tmp_path / "a", verify=True)
    with pytest.warns(RuntimeWarning, match=r"tokens\.bin does not hash to the SHA-256"):
        got = ds.__getitems__(list(range(len(rows))))
    for i, row in enumerate(rows):
        check_window(got[i], row, i)


def test_a_full_disk_names_the_cache_and_the_knobs(small: tuple[Path, list],
                                                   isolated_cache: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import reader.data.layout_build

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reader.data.layout_build.np, "save", full)
    root, _ = small
    with pytest.raises(OSError, match=rf"no space left in the layout cache {isolated_cache} "
                                      r".*`cache_dir=` \(or \$TOKEN_WINDOWS_CACHE.*`cache_limit=`"):
        WindowDataset(root)[0]
    assert list((isolated_cache / f"layouts-v{LAYOUT_VERSION}" / "tmp").iterdir()) == []


@pytest.mark.parametrize("where", ["layout.json", "doc_ids.bin", "index.json"])
def test_a_fifo_in_the_cache_is_refused_by_name_not_waited_on(small: tuple[Path, list],
                                                             tmp_path: Path, where: str) -> None:
    root, _ = small
    cache = tmp_path / "cache"
    ds = WindowDataset(root, cache_dir=cache)
    ds.prepare()
    ds[0], ds.window_sizes([0])
    if where == "index.json":
        path = cache / f"layouts-v{LAYOUT_VERSION}" / "datasets" / ds.fingerprint / where
    else:
        path = layout_dir(cache, ds, 0) / where
    assert path.is_file()
    path.unlink()
    os.mkfifo(path)
    code = ("import sys; from reader import WindowDataset\n"
            "try:\n    ds = WindowDataset(sys.argv[1], cache_dir=sys.argv[2])\n"
            "    ds[0], ds.window_sizes([0])\n"
            "except OSError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code, str(root), str(cache)], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.strip() == (
        f"{path} is not a regular file but a FIFO (named pipe); the reader reads only regular "
        "files: the layout cache holds only files it wrote; remove it (or clear the cache "
        "directory)")
    assert stat.S_ISFIFO(os.stat(path).st_mode)  # refused, never removed
