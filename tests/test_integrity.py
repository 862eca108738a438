"""The reader's integrity checks (`reader.integrity`, docs/format.md#footer-metadata): a flipped
byte is never served as data, a foreign shard or an edited manifest is refused when the dataset
opens."""

from __future__ import annotations

import json
import shutil

import pytest

from reader import WindowDataset
from tests.conftest import run_job, write_jsonl
from transforms.manifest import MANIFEST_NAME

TEXTS = [f"document {i} " * (5 + i) for i in range(30)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("integrity")
    src = write_jsonl(tmp / "in.jsonl", [{"text": t} for t in TEXTS])
    run_job(tmp / "out", "--input", str(src), "--tokenizer", "bytes", "--window", "16",
            "--num-shards", "2")
    run_job(tmp / "other", "--input", str(src), "--tokenizer", "bytes", "--window", "16",
            "--num-shards", "2", "--seed", "5")
    return tmp


def windows(path) -> list:
    ds = WindowDataset(path)
    return [(w["doc_id"], w["tokens"].tolist()) for w in (ds[i] for i in range(len(ds)))]


def test_a_flipped_byte_in_a_shard_is_never_served_as_data(dataset, tmp_path):
    good = windows(dataset / "out")
    shard = "part-00000-of-00002.parquet"
    data = (dataset / "out" / shard).read_bytes()
    served_wrong, detected = 0, 0
    for k, at in enumerate(range(8, len(data) - 8, max(1, len(data) // 10))):
        copy = tmp_path / f"c{k}"
        shutil.copytree(dataset / "out", copy)
        flipped = bytearray(data)
        flipped[at] ^= 0x5A
        (copy / shard).write_bytes(bytes(flipped))
        try:
            got = windows(copy)
        except (ValueError, OSError) as e:
            assert shard in str(e)
            detected += 1
            continue
        served_wrong += got != good
    assert served_wrong == 0 and detected > 0


def test_errors_name_the_shard_and_the_row_group(dataset, tmp_path):
    shutil.copytree(dataset / "out", tmp_path / "c")
    shard = tmp_path / "c" / "part-00000-of-00002.parquet"
    data = bytearray(shard.read_bytes())
    data[200] ^= 0xFF  # inside the first data page
    shard.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"part-00000-of-00002.parquet, row group 0, cannot "):
        WindowDataset(tmp_path / "c")[0]


def test_a_foreign_shard_is_detected_without_verify(dataset, tmp_path):
    shutil.copytree(dataset / "out", tmp_path / "c")
    name = "part-00001-of-00002.parquet"
    shutil.copy(dataset / "other" / name, tmp_path / "c" / name)
    manifest = json.loads((tmp_path / "c" / MANIFEST_NAME).read_text())
    other = json.loads((dataset / "other" / MANIFEST_NAME).read_text())
    manifest["shards"][1] = other["shards"][1]  # even with the rows and SHA-256 edited in
    (tmp_path / "c" / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=f"shard .*{name} was written by another job"):
        WindowDataset(tmp_path / "c")


@pytest.mark.parametrize(("key", "message"), [
    ("documents", "counts.documents is 999"), ("tokens", "counts.tokens is 999"),
    ("scored_targets", "counts.scored_targets is 999")])
def test_edited_manifest_counts_are_refused(dataset, tmp_path, key, message):
    shutil.copytree(dataset / "out", tmp_path / "c")
    path = tmp_path / "c" / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["counts"][key] = 999
    path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=message):
        WindowDataset(tmp_path / "c", verify=True)


def test_edited_shard_order_is_refused(dataset, tmp_path):
    shutil.copytree(dataset / "out", tmp_path / "c")
    path = tmp_path / "c" / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["shards"].reverse()
    path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="is shard 1/2 of its job, but the manifest lists it as"):
        WindowDataset(tmp_path / "c", verify=True)
