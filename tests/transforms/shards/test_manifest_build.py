"""`transforms.shards.manifest_build`: the writer's side of the manifest
(docs/format.md#the-manifest).

The counts are summed from the shards' own counts and must add up (records = documents +
skipped + sampled out); a split job's record adds up its splits; the fingerprint names the
job.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.common.documents import doc, parcels_of
from tests.common.manifests import ARGS, ARGS_JSON, SPEC, built, shard
from transforms.dataset.manifest import (
    SampleInfo,
    dumps_manifest,
    parse_splits_record,
    read_manifest,
)
from transforms.params import WindowSpec
from transforms.shards.manifest_build import (
    WrittenShard,
    build_manifest,
    build_splits_record,
    job_fingerprint,
)
from transforms.shards.rows import ShardCounts, ShardRows
from transforms.tokenize.tokenizers import ByteTokenizer

TOK = ByteTokenizer()


def test_manifest_accounting_must_hold():
    shards = [shard(0, 1, [doc("a", "abc", SPEC)])]
    manifest = built(skipped={"empty": 2}, records=3, shards=shards, **ARGS)
    assert manifest["counts"]["skipped"] == {"empty": 2}
    assert manifest["counts"]["records"] == 3
    assert manifest["counts"]["windows"] == 1  # the docstring's example
    assert manifest["counts"]["tokens"] == 5
    assert read_manifest(json.dumps(manifest)).counts.documents == 1
    with pytest.raises(RuntimeError, match="4 records were read but 1 documents"):
        build_manifest(skipped={"empty": 2}, records=4, shards=shards, **ARGS)
    with pytest.raises(RuntimeError, match="no manifest was written"):
        build_manifest(skipped={}, records=0, shards=shards, **ARGS)


def test_counts_are_the_sum_of_the_shards_and_shards_are_in_file_order():
    one = [doc("a", "abc", SPEC), doc("b", "abcdefgh", SPEC, repaired=True)]
    two = [doc("c", "", WindowSpec(window=4, stride=4, tail="drop")), doc("d", "x" * 9, SPEC)]
    shards = [shard(1, 2, two), shard(0, 2, one)]
    manifest = built(skipped={"too_large": 1, "empty": 0, "blank_line": 3},
                     records=8, shards=shards, **ARGS)
    total = shards[0].counts + shards[1].counts
    assert total == ShardRows(parcels_of(one + two)).counts
    assert manifest["counts"] == {
        "records": 8, "documents": 4, "documents_without_windows": 1,
        "skipped": {"blank_line": 3, "too_large": 1}, "repaired": {"invalid_utf8": 1},
        "windows": total.rows, "tokens": total.tokens, "pairs": total.pairs,
        "scored_targets": total.scored_targets, "uncovered_pairs": total.uncovered_pairs,
    }
    assert list(manifest["counts"]["skipped"]) == ["blank_line", "too_large"]
    assert manifest["num_shards"] == 2
    assert manifest["shards"] == [
        {"file": "part-00000-of-00002.parquet", "rows": shards[1].counts.rows,
         "documents": 2, "tokens": shards[1].counts.tokens,
         "scored_targets": shards[1].counts.scored_targets, "bytes": 1, "sha256": "0" * 64},
        {"file": "part-00001-of-00002.parquet", "rows": shards[0].counts.rows,
         "documents": 2, "tokens": shards[0].counts.tokens,
         "scored_targets": shards[0].counts.scored_targets, "bytes": 2, "sha256": "0" * 64},
    ]
    assert {k: manifest[k] for k in ("format", "format_version", "tokenizer", "windows",
                                     "inputs", "reading", "row_group_rows", "versions")} == {
        "format": "token-windows", "format_version": 1, **ARGS_JSON}


def test_written_shard_entry():
    counts = ShardCounts(rows=3, documents=1, tokens=9, scored_targets=6, pairs=6)
    entry = WrittenShard(file="f", index=0, sha256="s", bytes=10, counts=counts).entry().to_json()
    assert entry == {"file": "f", "rows": 3, "documents": 1, "tokens": 9, "scored_targets": 6,
                     "bytes": 10, "sha256": "s"}
    with pytest.raises(TypeError):
        WrittenShard("f", 0, "s", 10, counts)  # keyword-only


def test_a_sample_is_recorded_and_its_left_out_documents_counted():
    shards = [shard(0, 1, [doc("a", "abc", SPEC)])]
    sample = SampleInfo(fraction=0.5, seed=0)
    manifest = built(skipped={"empty": 1}, records=5, shards=shards, sample=sample,
                     sampled_out=3, **ARGS)
    assert manifest["sample"] == {"fraction": 0.5, "seed": 0}
    assert manifest["counts"]["sampled_out"] == 3
    with pytest.raises(RuntimeError, match="1 skipped .*, 2 left out by the sample"):
        build_manifest(skipped={"empty": 1}, records=5, shards=shards, sample=sample,
                       sampled_out=2, **ARGS)
    assert "sample" not in built(skipped={}, records=1, shards=shards, **ARGS)


def test_the_splits_record_adds_up_the_splits():
    sample = SampleInfo(fraction=0.5, seed=0)
    one = [shard(0, 1, [doc("a", "ab", SPEC)])]
    two = [shard(0, 1, [doc("b", "abc", SPEC), doc("c", "abcd", SPEC)])]
    manifests = {
        "val": build_manifest(skipped={}, records=1, shards=one, sample=sample,
                              fingerprint="a" * 64, **ARGS),
        "train": build_manifest(skipped={}, records=2, shards=two, sample=sample,
                                fingerprint="b" * 64, **ARGS),
    }
    args = {"manifests": manifests, "fractions": {"val": 0.5, "train": 0.5}, "split_seed": 0,
            "skipped": {"empty": 1}, "fingerprint": "job"}
    record = build_splits_record(records=7, sampled_out=3, **args)
    assert record.counts.records == 7 and record.counts.documents == 3
    assert record.counts.windows == sum(m.counts.windows for m in manifests.values())
    assert [(s.name, s.fraction, s.documents, s.fingerprint) for s in record.splits] == [
        ("val", 0.5, 1, "a" * 64), ("train", 0.5, 2, "b" * 64)]
    assert record.splits[0].manifest_sha256 == hashlib.sha256(
        dumps_manifest(manifests["val"])).hexdigest()
    data = dumps_manifest(record)
    assert json.loads(data)["sample"] == {"fraction": 0.5, "seed": 0}
    assert json.loads(data)["split_seed"] == 0
    assert parse_splits_record(data, where="x") == record
    with pytest.raises(RuntimeError, match="7 records were read but the splits hold 3 "
                                           "documents, 1 were skipped and 2 left out"):
        build_splits_record(records=7, sampled_out=2, **args)
    with pytest.raises(ValueError, match="x is not a token-windows split record"):
        parse_splits_record(dumps_manifest(manifests["val"]), where="x")


def test_the_fingerprint_names_the_split_definition_only_when_there_is_one():
    job = {"tokenizer": TOK.info(), "windows": SPEC.to_json(), "reading": {},
           "num_shards": None, "files": [(0, "a.jsonl", 3)]}
    assert job_fingerprint(**job) == job_fingerprint(**job, splits=None)
    # Pinned: a fingerprint in a manifest written today must name the same job tomorrow.
    assert job_fingerprint(**job) == (
        "de4ece1edd38fcf053a6899a0661aee4ff14694306765a51dbcb64a4bb2a7cab")
    assert job_fingerprint(**{**job, "files": [(0, "a.jsonl", 4)]}) != job_fingerprint(**job)
    assert job_fingerprint(**job, splits={"sample": {"fraction": 0.5, "seed": 0}}) != (
        job_fingerprint(**job))
