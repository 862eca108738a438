"""Tests of reader.data.dataset: the manifest and shard checks, random access, batches, URIs."""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from reader import WindowDataset
from tests.common.reader_data import (
    BOS,
    EOS,
    VOCAB,
    check_window,
    edit_manifest,
    random_docs,
    rewrite_shard,
    write_docs,
)
from transforms.dataset.manifest import MANIFEST_NAME
from transforms.dataset.schema import FORMAT_VERSION, shard_file_name


def test_dataset_reads_every_row_in_shard_then_file_order(small: tuple[Path, list]) -> None:
    root, rows = small
    ds = WindowDataset(root, verify=True)
    assert len(ds) == len(rows) == ds.manifest.counts.windows
    assert (ds.bos_id, ds.eos_id, ds.vocab_size, ds.window) == (BOS, EOS, VOCAB, 6)
    assert ds.shard_files == tuple(shard_file_name(i, 3) for i in range(3))
    for i, row in enumerate(rows):
        check_window(ds[i], row, i)
    check_window(ds[-1], rows[-1], len(rows) - 1)
    check_window(ds[np.int64(3)], rows[3], 3)
    assert [w["index"] for w in ds.__getitems__([7, 2, 7, 0])] == [7, 2, 7, 0]
    with pytest.raises(IndexError, match="out of range"):
        ds[len(rows)]
    # score=new: a document's scored targets, in window order, are z[1:] exactly once.
    by_doc: dict[str, list[int]] = {}
    for i in range(len(ds)):
        w = ds[i]
        by_doc.setdefault(w["doc_id"], []).extend(w["tokens"][1 + w["loss_start"]:].tolist())
    assert sum(map(len, by_doc.values())) == ds.scored_targets
    docs = dict(random_docs(30))
    assert all(targets == [*docs[d], EOS] for d, targets in by_doc.items())


def test_dataset_maps_per_process_and_pickles_without_maps(small: tuple[Path, list]) -> None:
    root, rows = small
    ds = WindowDataset(str(root))
    order = list(range(len(rows)))
    random.Random(1).shuffle(order)
    for i in order:
        check_window(ds[i], rows[i], i)
    assert sum(layout is not None for layout in ds._open) == 3
    data = pickle.dumps(ds)
    assert len(data) < 20_000  # the manifest and paths, never the windows
    clone = pickle.loads(data)
    assert all(layout is None for layout in clone._open)
    check_window(clone[5], rows[5], 5)
    ds._pid = -1  # as a forked worker sees it: inherited maps are dropped, not reused
    check_window(ds[0], rows[0], 0)
    assert ds._pid == os.getpid() and sum(layout is not None for layout in ds._open) == 1
    assert ds.layout_builds == 3 and clone.layout_builds == 0  # the clone found them built
    with pytest.warns(DeprecationWarning, match="`cache_bytes` no longer applies"):
        WindowDataset(root, cache_bytes=0)


def test_getitems_gives_the_windows_of_getitem(small: tuple[Path, list]) -> None:
    root, rows = small
    ds = WindowDataset(root)
    picks = [7, 2, 7, 0, len(rows) - 1, -1, 13]
    batch = ds.__getitems__(picks)
    assert len(batch) == len(picks)
    for k, i in enumerate(picks):
        j = i % len(rows)
        check_window(batch[k], rows[j], j)
    assert [w["index"] for w in batch] == [i % len(rows) for i in picks]
    with pytest.raises(IndexError, match="out of range"):
        ds.__getitems__([0, len(rows)])


def test_blocks_are_shards_or_row_groups(small: tuple[Path, list]) -> None:
    root, rows = small
    ds = WindowDataset(root)
    shard_rows = tuple(pq.read_metadata(root / f).num_rows for f in ds.shard_files)
    assert ds.blocks("shard") == shard_rows and sum(shard_rows) == len(rows)
    groups = ds.blocks("row_group")
    assert sum(groups) == len(rows) and all(1 <= g <= 4 for g in groups)
    with pytest.raises(ValueError, match=r"`unit` must be one of \('shard', 'row_group'\), "
                                         r"but got 'file'"):
        ds.blocks("file")


def test_dataset_skips_empty_shards(tmp_path: Path) -> None:
    rows = write_docs(tmp_path / "ds", random_docs(3), window=6, num_shards=8, rows_per_group=2)
    ds = WindowDataset(tmp_path / "ds")
    assert 0 in ds.blocks("shard") and len(ds.blocks("shard")) == 8  # 3 documents, 8 shards
    assert len(ds) == len(rows)
    for i, row in enumerate(rows):
        check_window(ds[i], row, i)
    batch = ds.__getitems__(list(range(len(rows)))[::-1])
    for k, i in enumerate(range(len(rows))[::-1]):
        check_window(batch[k], rows[i], i)


def test_dataset_opens_a_uri(small: tuple[Path, list]) -> None:
    root, rows = small
    ds = WindowDataset(root.as_uri())
    assert ds.path == root.as_uri() and len(ds) == len(rows)
    check_window(ds[9], rows[9], 9)


def test_missing_manifest(small: tuple[Path, list]) -> None:
    root, _ = small
    (root / MANIFEST_NAME).unlink()
    with pytest.raises(FileNotFoundError, match=r"manifest\.json not found.*not a finished"):
        WindowDataset(root)


def test_missing_shard(small: tuple[Path, list]) -> None:
    root, _ = small
    (root / "part-00001-of-00003.parquet").unlink()
    with pytest.raises(FileNotFoundError, match=r"part-00001-of-00003\.parquet.*does not exist"):
        WindowDataset(root)


def test_row_count_mismatch(small: tuple[Path, list]) -> None:
    root, rows = small
    edit_manifest(root, lambda m: m["shards"][2].update(rows=m["shards"][2]["rows"] + 1))
    with pytest.raises(ValueError, match=rf"counts\.windows is {len(rows)}, but its shards' "
                                         rf"rows add up to {len(rows) + 1}"):
        WindowDataset(root)
    edit_manifest(root, lambda m: m["counts"].update(windows=len(rows) + 1))
    message = r"part-00002-of-00003\.parquet holds \d+ rows, but the manifest says \d+"
    with pytest.raises(ValueError, match=message):
        WindowDataset(root, verify=True)
    ds = WindowDataset(root)  # footers are read when their shard is first read
    ds[0]
    with pytest.raises(ValueError, match=message):
        ds[len(ds) - 1]


def test_windows_count_mismatch(small: tuple[Path, list]) -> None:
    root, rows = small
    edit_manifest(root, lambda m: m["counts"].update(windows=len(rows) + 1))
    with pytest.raises(ValueError, match=rf"json says counts\.windows is {len(rows) + 1}"):
        WindowDataset(root)


def test_checksum_mismatch_only_with_verify(small: tuple[Path, list]) -> None:
    root, _ = small
    edit_manifest(root, lambda m: m["shards"][0].update(sha256="0" * 64))
    assert len(WindowDataset(root)) > 0
    with pytest.raises(ValueError, match=r"part-00000-of-00003\.parquet has SHA-256 [0-9a-f]{64}, "
                                         r"but the manifest says 0{64}"):
        WindowDataset(root, verify=True)


def test_unknown_format_version(small: tuple[Path, list]) -> None:
    root, _ = small
    edit_manifest(root, lambda m: m.update(format_version=FORMAT_VERSION + 1))
    with pytest.raises(ValueError, match=r"manifest\.json has format_version 2"):
        WindowDataset(root)


def test_shard_of_another_schema(small: tuple[Path, list]) -> None:
    root, _ = small
    path = root / "part-00000-of-00003.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["doc_tokens"]), path)
    edit_manifest(root, lambda m: m["shards"][0].update(rows=pq.read_metadata(path).num_rows))
    with pytest.raises(ValueError, match=r"part-00000-of-00003\.parquet lacks the column "
                                         r"'doc_tokens'"):
        WindowDataset(root)[0]


@pytest.mark.parametrize("bad", [VOCAB, 300, -1])
def test_out_of_range_token_id(tmp_path: Path, bad: int) -> None:
    root = tmp_path / "ds"
    write_docs(root, random_docs(12), window=6, num_shards=2)
    first_rows = WindowDataset(root).blocks("shard")[0]

    def damage(rows: list[dict]) -> None:
        rows[5]["tokens"][2] = bad

    rewrite_shard(root, 1, damage)
    ds = WindowDataset(root)
    ds[0]  # other shards read fine; the check runs when a shard's layout is built
    index = first_rows + 5
    with pytest.raises(ValueError, match=rf"part-00001-of-00002\.parquet row 5 \(dataset index "
                                         rf"{index}\): token id {bad} is outside the vocabulary "
                                         rf"\[0, {VOCAB}\)"):
        ds[index - 1]  # the same shard as the bad row


def test_bad_row_fields_are_named(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    write_docs(root, random_docs(6), window=6, num_shards=1)

    def damage(rows: list[dict]) -> None:
        rows[2]["loss_start"] = rows[2]["length"]

    rewrite_shard(root, 0, damage, rows_per_group=100)
    with pytest.raises(ValueError, match=r"part-00000-of-00001\.parquet row 2 .*loss_start"):
        WindowDataset(root)[0]
