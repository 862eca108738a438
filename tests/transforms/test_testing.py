"""`transforms.testing.write_dataset`: a valid dataset without the job, for tests and benchmarks.

It must write what the job writes for the same documents (the very shard bytes, and a
manifest whose counts and shard entries are the job's), and a manifest that
`transforms.dataset.manifest.read_manifest` accepts.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tests.common.jobs import run_job
from transforms.dataset.manifest import (
    MANIFEST_NAME,
    TokenizerInfo,
    dumps_manifest,
    read_manifest,
)
from transforms.dataset.schema import shard_file_name
from transforms.params import WindowSpec
from transforms.plan.keys import doc_key, shard_of
from transforms.testing import write_dataset
from transforms.tokenize.tokenizers import ByteTokenizer

TOK = ByteTokenizer()
LINES = ["abcde", "The grapes are sour.", "道可道，非常道。" * 3, "x", "Slow but steady " * 9,
         "ab", "the last line"]


@pytest.mark.slow
def test_write_dataset_writes_the_job_s_shards(tmp_path):
    corpus = tmp_path / "in" / "c.txt"
    corpus.parent.mkdir()
    corpus.write_text("\n".join(LINES) + "\n")
    windows = WindowSpec(window=4, stride=3, tail="trace_back", score="new", seed=9)
    job = run_job(tmp_path / "job", "--input", str(corpus), "--tokenizer", "bytes",
                  "--window", "4", "--stride", "3", "--tail", "trace_back", "--score", "new",
                  "--seed", "9", "--format", "lines", "--num-shards", "3")
    # With --format lines, line n of c.txt is the document c.txt:n.
    documents = [(f"c.txt:{n}", TOK.encode(line)) for n, line in enumerate(LINES, start=1)]
    manifest = write_dataset(tmp_path / "ds", documents, windows=windows, num_shards=3,
                             fingerprint=job["fingerprint"]).to_json()
    assert [s["file"] for s in manifest["shards"]] == [shard_file_name(i, 3) for i in range(3)]
    for shard in job["shards"]:
        assert (tmp_path / "ds" / shard["file"]).read_bytes() == (
            tmp_path / "job" / shard["file"]).read_bytes(), shard["file"]
    assert manifest["shards"] == job["shards"]
    assert manifest["counts"] == job["counts"]
    for key in ("format", "format_version", "tokenizer", "windows", "num_shards",
                "row_group_rows"):
        assert manifest[key] == job[key], key
    # More than one shard holds documents, so the comparison says something about shards.
    assert len({shard_of(doc_key(9, d), 3) for d, _ in documents}) > 1


def test_its_manifest_is_valid_and_is_the_file_on_disk(tmp_path):
    manifest = write_dataset(tmp_path / "ds", [("a", [256, 97, 98, 257])],
                             windows=WindowSpec(window=2, stride=2))
    data = (tmp_path / "ds" / MANIFEST_NAME).read_bytes()
    assert data == dumps_manifest(manifest)
    assert read_manifest(data, where=str(tmp_path / "ds" / MANIFEST_NAME)) == manifest
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == [
        MANIFEST_NAME, "part-00000-of-00001.parquet"]
    table = pq.read_table(tmp_path / "ds" / "part-00000-of-00001.parquet")
    assert table.column("tokens").to_pylist() == [[256, 97, 98], [98, 257]]  # the docstring's
    assert manifest.counts.windows == 2
    assert manifest.tokenizer == TOK.info()


def test_shards_row_groups_and_tokenizer_are_as_asked(tmp_path):
    windows = WindowSpec(window=3, stride=3)
    documents = [(f"d{i}", [1, *range(10, 10 + i), 2]) for i in range(40)]
    tokenizer = {"kind": "sentencepiece", "vocab_size": 500, "bos_id": 1, "eos_id": 2,
                 "sha256": "ab" * 32}
    manifest = write_dataset(tmp_path / "ds", documents, windows=windows,
                             tokenizer=TokenizerInfo(**tokenizer), num_shards=4,
                             rows_per_group=5).to_json()
    assert read_manifest(json.dumps(manifest)).to_json() == manifest
    assert manifest["tokenizer"] == tokenizer
    assert manifest["row_group_rows"] == 5
    assert manifest["num_shards"] == 4
    for index, entry in enumerate(manifest["shards"]):
        file = pq.ParquetFile(tmp_path / "ds" / entry["file"])
        assert file.metadata.num_rows == entry["rows"]
        assert all(file.metadata.row_group(g).num_rows <= 5
                   for g in range(file.metadata.num_row_groups))
        ids = set(file.read(columns=["doc_id"]).column("doc_id").to_pylist())
        assert ids == {d for d, _ in documents if shard_of(doc_key(0, d), 4) == index}
    assert manifest["counts"]["documents"] == 40
    assert manifest["counts"]["pairs"] == sum(len(z) - 1 for _, z in documents)
