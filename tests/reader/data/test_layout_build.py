"""`reader.data.layout_build`: one shard's layout written from its Parquet file, every row checked
on the way, and the digests that let a cached layout be checked cheaply or surely."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from reader.data.layout_build import (
    FILES,
    RECORD,
    SAMPLE_PAGES,
    ShardSource,
    download,
    file_digest,
    files_problem,
    sample_digest,
    sha256_local,
    write_layout,
)
from tests.common.reader_data import BOS, EOS, random_docs, rewrite_shard, write_docs
from transforms.dataset.manifest import MANIFEST_NAME, read_manifest


def source(root: Path, index: int, first_index: int = 0) -> ShardSource:
    manifest = read_manifest((root / MANIFEST_NAME).read_bytes())
    entry = manifest.shards[index]
    path = root / entry.file
    st = path.stat()
    return ShardSource(fs=pafs.LocalFileSystem(), path=str(path), where=f"ds/{entry.file}",
                       sha256=entry.sha256, stamp=(st.st_size, st.st_mtime_ns), rows=entry.rows,
                       first_index=first_index, manifest=manifest, index=index)


def build(root: Path, out: Path, index: int = 0, first_index: int = 0) -> dict:
    out.mkdir()
    s = source(root, index, first_index)
    return write_layout(s, s.path, str(out))


def test_a_layout_holds_the_shards_rows_as_flat_arrays(tmp_path: Path) -> None:
    rows = write_docs(tmp_path / "ds", random_docs(12), window=6, stride=4, score_new=True,
                      num_shards=1, rows_per_group=5)
    record = build(tmp_path / "ds", tmp_path / "layout")
    out = tmp_path / "layout"
    assert sorted(os.listdir(out)) == sorted(FILES)
    assert record["rows"] == len(rows) and record["token_dtype"] == "uint16"
    assert record["files"] == {name: file_digest(str(out / name)) for name in FILES}
    ids = [t for r in rows for t in r["tokens"]]
    assert np.fromfile(out / "tokens.bin", np.uint16).tolist() == ids
    windows = np.load(out / "windows.npy")
    assert windows.dtype == RECORD and len(windows) == len(rows)
    lo = np.cumsum([0] + [len(r["tokens"]) for r in rows])[:-1]
    assert windows["lo"].tolist() == lo.tolist()
    for name in ("start", "length", "loss_start", "doc_tokens", "doc_key", "window_index"):
        assert windows[name].tolist() == [r[name] for r in rows], name
    assert set(windows["shard"].tolist()) == {0}
    # One entry per document, in row order: its first row, and its id.
    firsts = [k for k, r in enumerate(rows) if k == 0 or rows[k - 1]["doc_id"] != r["doc_id"]]
    assert np.load(out / "doc_rows.npy").tolist() == [*firsts, len(rows)]
    offsets = np.load(out / "doc_id_offsets.npy").tolist()
    names = (out / "doc_ids.bin").read_bytes()
    assert [names[a:b].decode() for a, b in zip(offsets, offsets[1:], strict=False)] == [
        rows[k]["doc_id"] for k in firsts]


@pytest.mark.parametrize(("edit", "why"), [
    (lambda r: r.update(length=7, tokens=r["tokens"] + [5] * (8 - len(r["tokens"]))),
     "length 7 is outside [1, 6] (the window)"),
    (lambda r: r.update(tokens=r["tokens"] + [5]), "tokens has {n} ids, but length {l} needs"),
    (lambda r: r.update(loss_start=r["length"]), "loss_start {l} is outside [0, {l})"),
    (lambda r: r.update(tokens=[300, *r["tokens"][1:]]),
     "token id 300 is outside the vocabulary [0, 258) of the manifest"),
])
def test_a_bad_row_is_named_by_shard_row_and_dataset_index(tmp_path: Path, edit, why) -> None:
    write_docs(tmp_path / "ds", random_docs(12), window=6, stride=4, num_shards=2)
    before: dict = {}

    def damage(rows: list[dict]) -> None:
        before.update(rows[3])
        edit(rows[3])
    rewrite_shard(tmp_path / "ds", 1, damage)
    s = source(tmp_path / "ds", 1, first_index=100)
    (tmp_path / "l").mkdir()
    with pytest.raises(ValueError) as info:
        write_layout(s, s.path, str(tmp_path / "l"))
    message = why.format(n=len(before["tokens"]) + 1, l=before["length"])
    assert str(info.value).startswith(
        f"shard ds/part-00001-of-00002.parquet row 3 (dataset index 103): {message}")


def test_a_shard_of_other_rows_than_the_manifest_says_is_refused(tmp_path: Path) -> None:
    write_docs(tmp_path / "ds", random_docs(8), window=6, num_shards=1)
    s = source(tmp_path / "ds", 0)
    lying = ShardSource(**{**s.__dict__, "rows": s.rows + 1})
    (tmp_path / "l").mkdir()
    with pytest.raises(ValueError, match=f"shard ds/part-00000-of-00001.parquet holds {s.rows} "
                                         f"rows, but the manifest says {s.rows + 1}"):
        write_layout(lying, lying.path, str(tmp_path / "l"))


def test_the_first_and_last_ids_must_be_the_manifests_bos_and_eos(tmp_path: Path) -> None:
    write_docs(tmp_path / "ds", [("a", b"abcdefgh")], window=4, num_shards=1)

    def swap(rows: list[dict]) -> None:
        assert rows[0]["tokens"][0] == BOS and rows[-1]["tokens"][-1] == EOS
        rows[0]["tokens"][0] = ord("z")
    rewrite_shard(tmp_path / "ds", 0, swap)
    with pytest.raises(ValueError, match="ds/part-00000-of-00001.parquet"):
        build(tmp_path / "ds", tmp_path / "l")


def test_digests_of_a_file(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.write_bytes(b"abc")
    want = hashlib.blake2b(b"3" + b"abc", digest_size=16).hexdigest()
    assert sample_digest(str(small), 3) == want
    assert file_digest(str(small)) == {"bytes": 3, "sha256": hashlib.sha256(b"abc").hexdigest(),
                                       "sample": want}
    assert sha256_local(str(small)) == hashlib.sha256(b"abc").hexdigest()
    # A large file: pages spread over it, the first and last included; a byte between two
    # sampled pages is not seen by the cheap digest (the SHA-256 sees it).
    big = tmp_path / "big"
    size = 4096 * SAMPLE_PAGES * 4
    data = bytearray(os.urandom(size))
    big.write_bytes(bytes(data))
    cheap = sample_digest(str(big), size)
    for at, seen in ((0, True), (size - 1, True), (4096 + 10, False)):
        changed = bytearray(data)
        changed[at] ^= 1
        big.write_bytes(bytes(changed))
        assert (sample_digest(str(big), size) != cheap) is seen, at


def test_files_problem_checks_sizes_then_samples_or_every_byte(tmp_path: Path) -> None:
    write_docs(tmp_path / "ds", random_docs(12), window=6, num_shards=1)
    files = build(tmp_path / "ds", tmp_path / "l")["files"]
    d = str(tmp_path / "l")
    assert files_problem(d, files, verify=False) is None
    assert files_problem(d, files, verify=True) is None
    assert files_problem(d, {"other.bin": {}}, verify=False) == "its file list is not a layout's"
    tokens = tmp_path / "l" / "tokens.bin"
    data = bytearray(tokens.read_bytes())
    data[-1] ^= 1  # the last page is always sampled
    tokens.write_bytes(bytes(data))
    assert files_problem(d, files, verify=False) == (
        "tokens.bin's sampled pages are not the ones recorded at build")
    assert files_problem(d, files, verify=True) == (
        "tokens.bin does not hash to the SHA-256 recorded at build")
    tokens.write_bytes(bytes(data[:-2]))
    n = files["tokens.bin"]["bytes"]
    assert files_problem(d, files, verify=False) == (
        f"tokens.bin has {n - 2} bytes, not the {n} recorded")
    tokens.unlink()
    assert files_problem(d, files, verify=False).startswith("tokens.bin cannot be read (")


def test_download_copies_and_hashes(tmp_path: Path) -> None:
    write_docs(tmp_path / "ds", random_docs(5), window=6, num_shards=1)
    shard = tmp_path / "ds" / "part-00000-of-00001.parquet"
    got = download(pafs.LocalFileSystem(), str(shard), str(tmp_path / "copy"))
    assert (tmp_path / "copy").read_bytes() == shard.read_bytes()
    assert got == hashlib.sha256(shard.read_bytes()).hexdigest()
    assert pq.read_table(tmp_path / "copy").num_rows == pq.read_table(shard).num_rows
