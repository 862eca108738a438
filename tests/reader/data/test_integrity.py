"""The reader's integrity checks (`reader.data.integrity`, docs/integrity.md): a flipped byte is
never served as data, a foreign shard or an edited manifest is refused, and ``inspect --check`` is
at least as strict as opening."""

from __future__ import annotations

import json
import shutil

import pytest

from reader import WindowDataset
from tests.common.jobs import run_job, write_jsonl
from transforms.dataset.manifest import MANIFEST_NAME

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
    for key, total in (("rows", "windows"), ("tokens", "tokens"), ("documents", "documents"),
                       ("scored_targets", "scored_targets")):  # and the counts to match
        manifest["counts"][total] = sum(s[key] for s in manifest["shards"])
    (tmp_path / "c" / MANIFEST_NAME).write_text(json.dumps(manifest))
    ds = WindowDataset(tmp_path / "c")  # the footer is read when its shard is first read
    with pytest.raises(ValueError, match=f"shard .*{name} was written by another job"):
        ds[len(ds) - 1]
    with pytest.raises(ValueError, match=f"shard .*{name} was written by another job"):
        WindowDataset(tmp_path / "c", verify=True)


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
    with pytest.raises(ValueError, match=r"shards\[0\] is 'part-00001-of-00002.parquet', but "
                                         r"shard 0 of 2 is 'part-00000-of-00002.parquet'"):
        WindowDataset(tmp_path / "c")


def test_swapped_shard_files_are_refused(dataset, tmp_path):
    """The files swapped on disk, the manifest's entries swapped to match their bytes."""
    shutil.copytree(dataset / "out", tmp_path / "c")
    a, b = (tmp_path / "c" / f"part-0000{i}-of-00002.parquet" for i in (0, 1))
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    path = tmp_path / "c" / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    s0, s1 = manifest["shards"]
    manifest["shards"] = [{**s1, "file": s0["file"]}, {**s0, "file": s1["file"]}]
    path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="is shard 1/2 of its job, but the manifest lists it as"):
        WindowDataset(tmp_path / "c", verify=True)
    with pytest.raises(ValueError, match="is shard 1/2 of its job, but the manifest lists it as"):
        WindowDataset(tmp_path / "c")[0]


def _flip(path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x01
    path.write_bytes(bytes(data))


def _foreign(copy, dataset):
    """Shard 1 as another job with the same rows would have written it: the same shape and
    rows, another job's fingerprint in its footer."""
    import pyarrow.parquet as pq

    from transforms.dataset.schema import FINGERPRINT_KEY

    path = copy / "part-00001-of-00002.parquet"
    table = pq.read_table(path)
    meta = {**table.schema.metadata, FINGERPRINT_KEY.encode(): b"e" * 64}
    pq.write_table(table.replace_schema_metadata(meta), path,
                   row_group_size=pq.ParquetFile(path).metadata.row_group(0).num_rows)


def _reversed(copy, dataset):
    path = copy / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["shards"].reverse()
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage", ["flipped_bit", "foreign_shard", "reversed_list"])
def test_inspect_check_is_as_strict_as_opening(dataset, tmp_path, capsys, damage):
    from reader.tools import inspect

    copy = tmp_path / "c"
    shutil.copytree(dataset / "out", copy)
    {"flipped_bit": lambda: _flip(copy / "part-00000-of-00002.parquet"),
     "foreign_shard": lambda: _foreign(copy, dataset),
     "reversed_list": lambda: _reversed(copy, dataset)}[damage]()
    with pytest.raises(ValueError, match=r"part-0000[01]-of-00002"):
        WindowDataset(copy, verify=True)
    code = inspect.run([str(copy), "--check"])
    captured = capsys.readouterr()
    assert code != 0 and "check: ok" not in captured.out
    assert "part-0000" in captured.out + captured.err


def _edit(copy, edit) -> None:
    path = copy / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def test_a_manifest_with_bos_and_eos_swapped_is_refused(dataset, tmp_path):
    copy = tmp_path / "c"
    shutil.copytree(dataset / "out", copy)
    _edit(copy, lambda m: m["tokenizer"].update(bos_id=257, eos_id=256))
    message = r"holds 256 first, but the manifest's BOS is 257"
    with pytest.raises(ValueError, match=message):
        WindowDataset(copy, verify=True)
    with pytest.raises(ValueError, match=message):  # by default, before any window is served
        WindowDataset(copy)[0]


@pytest.mark.parametrize("key", ["pairs", "uncovered_pairs"])
def test_edited_pairs_are_refused(dataset, tmp_path, key):
    copy = tmp_path / "c"
    shutil.copytree(dataset / "out", copy)
    _edit(copy, lambda m: m["counts"].update({key: m["counts"][key] + 1}))
    with pytest.raises(ValueError, match=r"counts\.pairs is \d+ and counts\.uncovered_pairs"):
        WindowDataset(copy, verify=True)
    ds = WindowDataset(copy)  # by default: once every shard is local
    with pytest.raises(ValueError, match=r"counts\.pairs is \d+ and counts\.uncovered_pairs"):
        ds.__getitems__(list(range(len(ds))))
        ds[len(ds) - 1]
