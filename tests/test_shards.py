"""Shard rows, packing and the manifest's counts (SPEC §4–5)."""

import io

import numpy as np
import pyarrow.parquet as pq
import pytest

from transforms.keys import doc_key
from transforms.params import WindowSpec
from transforms.schema import ARROW_SCHEMA, parse_manifest, shard_file_name
from transforms.shards import (
    build_manifest,
    build_shard,
    pack_document,
    unpack_document,
    write_shard,
)
from transforms.tokenizers import ByteTokenizer
from transforms.windows import plan_windows

TOK = ByteTokenizer()


def packed(doc_id, text, spec, *, key=None, source=None, tokens=None):
    z = TOK.encode(text) if tokens is None else tokens
    plan = plan_windows(len(z) - 1, spec, doc_id)
    return pack_document(
        doc_key=doc_key(spec.seed, doc_id) if key is None else key,
        doc_id=doc_id, source=source or f"src:{doc_id}", tokens=z, plan=plan, repaired=False,
    )


def test_pack_roundtrip_narrow_and_wide():
    spec = WindowSpec(window=3, stride=2, tail="trace_back", score="new")
    for z in (TOK.encode("hello"), np.array([1, 70000, 5, 2], dtype=np.int32)):
        data = packed("d", "", spec, tokens=z)
        doc = unpack_document(data)
        assert doc.tokens.tolist() == z.tolist() and doc.doc_id == "d"
        plan = plan_windows(len(z) - 1, spec, "d")
        assert doc.plan.starts.tolist() == plan.starts.tolist()
        assert doc.plan.loss_starts.tolist() == plan.loss_starts.tolist()
    assert len(packed("d", "hello", spec)) < len(packed("d", "", spec, tokens=np.array(
        [1, 70000, 5, 2, 3, 4, 5], dtype=np.int32)))


def test_rows_sorted_by_key_and_sliced():
    spec = WindowSpec(window=2, stride=2)
    built = build_shard([packed("b", "abcd", spec, key=5), packed("a", "abcde", spec, key=9)])
    rows = built.table.to_pylist()
    assert [(r["doc_id"], r["window_index"], r["start"], r["tokens"]) for r in rows] == [
        ("b", 0, 0, [256, 97, 98]),
        ("b", 1, 2, [98, 99, 100]),
        ("b", 2, 4, [100, 257]),
        ("a", 0, 0, [256, 97, 98]),
        ("a", 1, 2, [98, 99, 100]),
        ("a", 2, 4, [100, 101, 257]),
    ]
    assert built.counts == {
        "rows": 6, "documents": 2, "documents_without_windows": 0, "tokens": 17, "pairs": 11,
        "scored_targets": 11, "uncovered_pairs": 0, "repaired_invalid_utf8": 0,
    }
    assert built.table.schema.equals(ARROW_SCHEMA)


def test_duplicate_ids_keep_first_source_and_reject_the_rest():
    spec = WindowSpec(window=4, stride=4)
    built = build_shard([packed("x", "second", spec, source="b:1"),
                         packed("x", "first", spec, source="a:1")])
    assert {r["doc_id"] for r in built.table.to_pylist()} == {"x"}
    assert built.table.column("doc_tokens").to_pylist()[0] == len("first") + 2
    assert [(r.reason, r.source) for r in built.rejects] == [("duplicate_id", "b:1")]


def test_duplicate_ids_keep_the_first_in_input_order_not_string_order():
    spec = WindowSpec(window=4, stride=4)
    built = build_shard([packed("x", "the later one", spec, source="gs://b/a.jsonl:45"),
                         packed("x", "first", spec, source="gs://b/a.jsonl:5"),
                         packed("x", "other file", spec, source="gs://b/b.jsonl:1")])
    assert set(built.table.column("doc_tokens").to_pylist()) == {len("first") + 2}
    assert sorted(r.source for r in built.rejects) == ["gs://b/a.jsonl:45", "gs://b/b.jsonl:1"]


def test_drop_counts_uncovered_and_windowless_documents():
    spec = WindowSpec(window=4, stride=4, tail="drop")
    built = build_shard([packed("a", "ab", spec), packed("b", "abcdef", spec)])
    assert built.counts["documents"] == 2
    assert built.counts["documents_without_windows"] == 1
    assert built.counts["pairs"] == 3 + 7
    assert built.counts["uncovered_pairs"] == 3 + 3


def test_write_is_deterministic_and_readable():
    spec = WindowSpec(window=8, stride=4)
    docs = [packed(f"d{i}", "x" * i, spec) for i in range(30)]
    first, second = io.BytesIO(), io.BytesIO()
    sha1, n1 = write_shard(build_shard(docs).table, first, window=8)
    sha2, n2 = write_shard(build_shard(list(reversed(docs))).table, second, window=8)
    assert (sha1, n1) == (sha2, n2) and first.getvalue() == second.getvalue()
    table = pq.read_table(io.BytesIO(first.getvalue()))
    assert table.num_rows == build_shard(docs).counts["rows"]


def test_manifest_accounting_must_hold():
    shard = {"file": shard_file_name(0, 1), "index": 0, "sha256": "0" * 64, "bytes": 1,
             **build_shard([packed("a", "abc", WindowSpec(window=4, stride=4))]).counts}
    args = dict(tokenizer=TOK.info(), windows=WindowSpec(window=4, stride=4).to_json(),
                inputs=["x"], reading={}, shards=[shard], versions={})
    manifest = build_manifest(skipped={"empty": 2}, records=3, **args)
    assert manifest["counts"]["skipped"] == {"empty": 2}
    assert parse_manifest(__import__("json").dumps(manifest))["counts"]["documents"] == 1
    with pytest.raises(RuntimeError, match="4 records were read but 1 documents"):
        build_manifest(skipped={"empty": 2}, records=4, **args)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ('{"format": "other"}', "has format 'other'"),
        ('{"format": "token-windows", "format_version": 99}', "format_version 99"),
        ('{"format": "token-windows", "format_version": 1}', "lacks the key 'tokenizer'"),
    ],
)
def test_parse_manifest_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_manifest(text, where="out/manifest.json")
