"""`transforms.dataset.manifest`: serialising and checking the manifest
(docs/format.md#the-manifest; how the writer builds it:
tests/transforms/shards/test_manifest_build.py).

`dumps_manifest` is deterministic; `parse_manifest` refuses every damaged manifest with a
message naming the file, the key and the value.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.common.documents import doc
from tests.common.manifests import ARGS, SPEC, built, shard
from transforms.dataset.manifest import (
    MANIFEST_NAME,
    SampleInfo,
    SplitFraction,
    SplitInfo,
    SplitJob,
    dumps_manifest,
    parse_manifest,
    read_manifest,
)
from transforms.shards.manifest_build import build_manifest


def test_dumps_is_deterministic_and_parses_back():
    manifest = built(skipped={}, records=1, shards=[shard(0, 1, [doc("a", "é", SPEC)])], **ARGS)
    data = dumps_manifest(manifest)
    assert data == dumps_manifest(json.loads(data))
    assert data.endswith(b"}\n") and data.startswith(b'{\n  "counts": {')
    assert list(json.loads(data)) == sorted(manifest)
    assert parse_manifest(data, where="out/manifest.json") == manifest
    assert MANIFEST_NAME == "_manifest.json"  # Parquet readers skip names starting with _


def valid():
    return built(skipped={}, records=1, shards=[shard(0, 1, [doc("a", "ab", SPEC)])], **ARGS)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "out/manifest.json is not valid JSON"),
        (b"\xff", "out/manifest.json is not valid JSON"),
        ("[]", "must hold a JSON object, but holds list"),
        ('{"format": "other"}', "has format 'other'"),
        ('{"format": "token-windows", "format_version": 99}', "format_version 99"),
        ('{"format": "token-windows", "format_version": 1}', "lacks the key 'tokenizer'"),
    ],
)
def test_parse_manifest_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_manifest(text, where="out/manifest.json")


def _set(manifest, path, value):
    *parents, last = path
    target = manifest
    for key in parents:
        target = target[key]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("tokenizer", "vocab_size"), -1, "tokenizer.vocab_size must be a non-negative integer, "
                                          "but got -1"),
        (("tokenizer", "vocab_size"), "x", "tokenizer.vocab_size must be a non-negative "
                                           "integer, but got 'x'"),
        (("tokenizer", "bos_id"), True, "tokenizer.bos_id must be a non-negative integer, but "
                                        "got True"),
        (("tokenizer", "eos_id"), 2.0, "tokenizer.eos_id must be a non-negative integer"),
        (("tokenizer", "sha256"), 5, "tokenizer.sha256 must be a string or null, but got 5"),
        (("tokenizer", "kind"), None, "tokenizer.kind must be a string, but got None"),
        (("tokenizer", "kind"), _DELETE, "lacks the key tokenizer.kind"),
        (("tokenizer",), [], r"tokenizer must be an object, but got \[\]"),
        (("windows", "window"), 0, "windows.window must be a positive integer, but got 0"),
        (("windows", "stride"), True, "windows.stride must be a positive integer, but got True"),
        (("windows", "min_tail"), None, "windows.min_tail must be a positive integer"),
        (("windows", "seed"), -1, "windows.seed must be a non-negative integer, but got -1"),
        (("windows", "tail"), 1, "windows.tail must be a string, but got 1"),
        (("windows", "score"), _DELETE, "lacks the key windows.score"),
        (("inputs",), "x", "inputs must be a list, but got 'x'"),
        (("counts", "skipped"), [], r"counts.skipped must be an object, but got \[\]"),
        (("counts", "documents"), False, "counts.documents must be a non-negative integer, but "
                                         "got False"),
        (("counts", "tokens"), _DELETE, "lacks the key counts.tokens"),
        (("shards",), {}, r"shards must be a list, but got \{\}"),
        (("shards", 0), "x", r"shards\[0\] must be an object, but got 'x'"),
        (("shards", 0, "sha256"), _DELETE, r"lacks the key shards\[0\].sha256"),
        (("shards", 0, "sha256"), None, r"shards\[0\].sha256 must be a string, but got None"),
        (("shards", 0, "rows"), -3, r"shards\[0\].rows must be a non-negative integer"),
        (("shards", 0, "file"), 7, r"shards\[0\].file must be a string, but got 7"),
        (("counts",), _DELETE, "lacks the key 'counts'"),
    ],
)
def test_parse_manifest_checks_value_types(path, value, message):
    manifest = valid()
    assert parse_manifest(json.dumps(manifest)) == manifest
    damaged = copy.deepcopy(manifest)
    _set(damaged, path, value)
    with pytest.raises(ValueError, match=message) as caught:
        parse_manifest(json.dumps(damaged), where="out/manifest.json")
    assert str(caught.value).startswith("out/manifest.json")


def test_what_the_reader_may_meet_is_accepted():
    manifest = valid()
    manifest["tokenizer"].update(sha256="ab" * 32, kind="sentencepiece", vocab_size=0)
    manifest["windows"]["seed"] = (1 << 64) - 1
    manifest["shards"] = []
    manifest["counts"].update(windows=0, tokens=0, scored_targets=0, documents=0)
    manifest["num_shards"] = 0
    manifest["extra"] = {"more": "is welcome"}
    assert parse_manifest(dumps_manifest(manifest)) == manifest


def test_the_shard_list_holds_together():
    manifest = valid()
    manifest["num_shards"] = 2
    with pytest.raises(ValueError, match="num_shards is 2, but it lists 1 shards"):
        parse_manifest(dumps_manifest(manifest), where="out/_manifest.json")
    manifest = valid()
    manifest["shards"][0]["file"] = "part-00000-of-00002.parquet"
    with pytest.raises(ValueError, match=r"shards\[0\] is 'part-00000-of-00002.parquet', but "
                                         r"shard 0 of 1 is 'part-00000-of-00001.parquet'"):
        parse_manifest(dumps_manifest(manifest), where="out/_manifest.json")
    manifest = valid()
    manifest["counts"]["tokens"] += 1
    with pytest.raises(ValueError, match=r"counts\.tokens is \d+, but its shards' tokens add up"):
        parse_manifest(dumps_manifest(manifest), where="out/_manifest.json")
    manifest = valid()
    manifest["tokenizer"]["eos_id"] = manifest["tokenizer"]["vocab_size"]
    with pytest.raises(ValueError, match=r"tokenizer\.eos_id must be below vocab_size 258"):
        parse_manifest(dumps_manifest(manifest), where="out/_manifest.json")
    manifest = valid()
    manifest["tokenizer"]["engine"] = "tiktoken"
    parsed = read_manifest(dumps_manifest(manifest))
    assert parsed.tokenizer.engine == "tiktoken"
    assert parsed.tokenizer.to_json() == manifest["tokenizer"]
    assert parsed.counts.to_json() == manifest["counts"]
    assert [e.to_json() for e in parsed.shards] == manifest["shards"]


def test_a_split_manifest_reads_back_as_the_record_it_was_built_from():
    job = SplitJob(records=5, documents={"val": 1, "train": 3}, skipped={"empty": 1},
                   sampled_out=0, fingerprint="c" * 64)
    split = SplitInfo(name="val", splits=(SplitFraction(name="val", fraction=0.25),
                                          SplitFraction(name="train", fraction=0.75)),
                      split_seed=7, job=job)
    manifest = build_manifest(skipped={}, records=1, shards=[shard(0, 1, [doc("a", "ab", SPEC)])],
                              fingerprint="d" * 64, split=split, **ARGS)
    data = dumps_manifest(manifest)
    assert json.loads(data)["split"] == {
        "name": "val", "splits": [{"name": "val", "fraction": 0.25},
                                  {"name": "train", "fraction": 0.75}],
        "split_seed": 7, "job": {"records": 5, "documents": {"val": 1, "train": 3},
                                 "skipped": {"empty": 1}, "sampled_out": 0,
                                 "fingerprint": "c" * 64}}
    parsed = read_manifest(data)
    assert parsed == manifest and dumps_manifest(parsed) == data
    assert "sampled_out" not in json.loads(data)["counts"]  # a split's is the job's


@pytest.mark.parametrize(("path", "value", "message"), [
    (("split", "job", "records"), -1, "split.job.records must be a non-negative integer"),
    (("split", "splits"), {}, r"split.splits must be a list, but got \{\}"),
    (("split", "splits", 0, "fraction"), 2, r"split.splits\[0\].fraction must be a number in "
                                             r"\(0, 1\], but got 2"),
    (("sample", "fraction"), "x", "sample.fraction must be a number in"),
    (("sample", "seed"), _DELETE, "lacks the key sample.seed"),
])
def test_the_split_and_sample_records_are_checked(path, value, message):
    job = SplitJob(records=1, documents={"val": 1}, skipped={}, sampled_out=0,
                   fingerprint="c" * 64)
    manifest = built(skipped={}, records=1, shards=[shard(0, 1, [doc("a", "ab", SPEC)])],
                     sample=SampleInfo(fraction=0.5, seed=1), split=SplitInfo(
                         name="val", splits=(SplitFraction(name="val", fraction=1.0),),
                         split_seed=0, job=job), **ARGS)
    _set(manifest, path, value)
    with pytest.raises(ValueError, match=message):
        read_manifest(dumps_manifest(manifest), where="out/_manifest.json")


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.text(max_size=12), min_size=1, max_size=6),
       skipped=st.dictionaries(st.sampled_from(["empty", "too_large", "blank_line"]),
                               st.integers(0, 5)),
       num_shards=st.integers(1, 3), extra=st.dictionaries(st.sampled_from(["later", "x"]),
                                                           st.integers()))
def test_every_built_manifest_reads_back_byte_for_byte(texts, skipped, num_shards, extra):
    docs = [doc(f"d{i}", t, SPEC) for i, t in enumerate(texts)]
    shards = [shard(i, num_shards, docs[i::num_shards]) for i in range(num_shards)]
    manifest = build_manifest(skipped=skipped, records=len(docs) + sum(skipped.values()),
                              shards=shards, **ARGS)
    data = dumps_manifest(manifest)
    parsed = read_manifest(data)
    assert parsed == manifest
    assert dumps_manifest(parsed) == data == dumps_manifest(parse_manifest(data))
    assert parsed.counts.documents == len(texts)
    # A key a later version adds is kept as it was.
    widened = dumps_manifest({**json.loads(data), **extra})
    assert dumps_manifest(read_manifest(widened)) == widened
