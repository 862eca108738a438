"""`transforms.dataset.manifest`: serialising and checking the manifest
(docs/format.md#the-manifest; how the writer builds it:
tests/transforms/shards/test_manifest_build.py).

`dumps_manifest` is deterministic; `read_manifest` refuses every damaged manifest with a
message naming the file, the key and the value, and reads every other one back as the record
it was built from.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.common.documents import doc
from tests.common.jobs import manifest_bytes
from tests.common.manifests import ARGS, SPEC, built, shard
from transforms.dataset.manifest import (
    MANIFEST_NAME,
    Decontamination,
    DedupInfo,
    SampleInfo,
    SplitFraction,
    SplitInfo,
    SplitJob,
    dumps_manifest,
    parse_splits_record,
    read_manifest,
)
from transforms.dedup.duplicates import DedupSpec
from transforms.dedup.removal import RemovalSpec
from transforms.shards.manifest_build import build_manifest, build_splits_record


def test_dumps_is_deterministic_and_parses_back():
    manifest = built(skipped={}, records=1, shards=[shard(0, 1, [doc("a", "é", SPEC)])], **ARGS)
    data = manifest_bytes(manifest)
    assert data == manifest_bytes(json.loads(data))
    assert data.endswith(b"}\n") and data.startswith(b'{\n  "counts": {')
    assert list(json.loads(data)) == sorted(manifest)
    parsed = read_manifest(data, where="out/manifest.json")
    assert parsed.to_json() == manifest and dumps_manifest(parsed) == data
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
def test_read_manifest_errors(text, message):
    with pytest.raises(ValueError, match=message):
        read_manifest(text, where="out/manifest.json")


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
def test_read_manifest_checks_value_types(path, value, message):
    manifest = valid()
    assert read_manifest(json.dumps(manifest)).to_json() == manifest
    damaged = copy.deepcopy(manifest)
    _set(damaged, path, value)
    with pytest.raises(ValueError, match=message) as caught:
        read_manifest(json.dumps(damaged), where="out/manifest.json")
    assert str(caught.value).startswith("out/manifest.json")


def test_what_the_reader_may_meet_is_accepted():
    manifest = valid()
    manifest["tokenizer"].update(sha256="ab" * 32, kind="sentencepiece", vocab_size=0)
    manifest["windows"]["seed"] = (1 << 64) - 1
    manifest["shards"] = []
    manifest["counts"].update(windows=0, tokens=0, scored_targets=0, documents=0)
    manifest["num_shards"] = 0
    manifest["extra"] = {"more": "is welcome"}
    parsed = read_manifest(manifest_bytes(manifest))
    assert parsed.to_json() == manifest and parsed.extra == {"extra": {"more": "is welcome"}}


def test_the_shard_list_holds_together():
    manifest = valid()
    manifest["num_shards"] = 2
    with pytest.raises(ValueError, match="num_shards is 2, but it lists 1 shards"):
        read_manifest(manifest_bytes(manifest), where="out/_manifest.json")
    manifest = valid()
    manifest["shards"][0]["file"] = "part-00000-of-00002.parquet"
    with pytest.raises(ValueError, match=r"shards\[0\] is 'part-00000-of-00002.parquet', but "
                                         r"shard 0 of 1 is 'part-00000-of-00001.parquet'"):
        read_manifest(manifest_bytes(manifest), where="out/_manifest.json")
    manifest = valid()
    manifest["counts"]["tokens"] += 1
    with pytest.raises(ValueError, match=r"counts\.tokens is \d+, but its shards' tokens add up"):
        read_manifest(manifest_bytes(manifest), where="out/_manifest.json")
    manifest = valid()
    manifest["tokenizer"]["eos_id"] = manifest["tokenizer"]["vocab_size"]
    with pytest.raises(ValueError, match=r"tokenizer\.eos_id must be below vocab_size 258"):
        read_manifest(manifest_bytes(manifest), where="out/_manifest.json")
    manifest = valid()
    manifest["tokenizer"]["engine"] = "tiktoken"
    parsed = read_manifest(manifest_bytes(manifest))
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
        read_manifest(manifest_bytes(manifest), where="out/_manifest.json")


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
    assert dumps_manifest(parsed) == data == manifest_bytes(json.loads(data))
    assert parsed.counts.documents == len(texts)
    # A key a later version adds is kept as it was.
    widened = manifest_bytes({**json.loads(data), **extra})
    assert dumps_manifest(read_manifest(widened)) == widened


DEDUP = {"mode": "near", "ngram": 5, "bands": 14, "rows": 8, "scheme": "tw-minhash-1",
         "decontaminate": {"ngram": 13, "files": {"a.jsonl": 2, "b/c.jsonl": 0}}}


def test_the_dedup_record_reads_back_as_written():
    manifest = {**valid(), "dedup": DEDUP}
    parsed = read_manifest(manifest_bytes(manifest))
    assert parsed.dedup == DedupInfo(
        mode="near", ngram=5, bands=14, rows=8, scheme="tw-minhash-1",
        decontaminate=Decontamination(ngram=13, files={"a.jsonl": 2, "b/c.jsonl": 0}))
    assert dumps_manifest(parsed) == manifest_bytes(manifest)
    exact = read_manifest(manifest_bytes({**valid(), "dedup": {"mode": "exact"}})).dedup
    assert exact == DedupInfo(mode="exact") and exact.to_json() == {"mode": "exact"}
    # Keys a later version adds, at either level, read back as they were written.
    later = {**DEDUP, "later": 1, "decontaminate": {**DEDUP["decontaminate"], "x": [1]}}
    data = manifest_bytes({**valid(), "dedup": later})
    assert dumps_manifest(read_manifest(data)) == data


@pytest.mark.parametrize("dedup", [DedupSpec(mode="exact"), DedupSpec(mode="near", bands=3)])
def test_the_jobs_dedup_object_is_the_record_the_manifest_holds(dedup):
    # The job writes RemovalSpec.to_json (also what its fingerprint holds) as a DedupInfo.
    spec = RemovalSpec(dedup=dedup, eval_files=(("/e/a.jsonl", "a.jsonl", 9),
                                                ("/e/b.jsonl", "b.jsonl", 4)))
    written = spec.to_json({"a.jsonl": 3})
    record = DedupInfo.from_json(written, where="x")
    assert record.to_json() == written and record.decontaminate is not None
    assert record.decontaminate.files == {"a.jsonl": 3, "b.jsonl": 0}


@pytest.mark.parametrize(("path", "value", "message"), [
    (("dedup",), [], r"dedup must be an object, but got \[\]"),
    (("dedup", "mode"), "fuzzy", r"dedup.mode must be one of \('off', 'exact', 'near'\), but "
                                 "got 'fuzzy'"),
    (("dedup", "mode"), _DELETE, "lacks the key dedup.mode"),
    (("dedup", "ngram"), 0, "dedup.ngram must be a positive integer, but got 0"),
    (("dedup", "rows"), True, "dedup.rows must be a positive integer, but got True"),
    (("dedup", "scheme"), 5, "dedup.scheme must be a string, but got 5"),
    (("dedup", "decontaminate", "ngram"), _DELETE, "lacks the key dedup.decontaminate.ngram"),
    (("dedup", "decontaminate", "files", "a.jsonl"), -1,
     "dedup.decontaminate.files.a.jsonl must be a non-negative integer, but got -1"),
])
def test_the_dedup_record_is_checked(path, value, message):
    manifest = {**valid(), "dedup": copy.deepcopy(DEDUP)}
    _set(manifest, path, value)
    with pytest.raises(ValueError, match=message) as caught:
        read_manifest(manifest_bytes(manifest), where="out/_manifest.json")
    assert str(caught.value).startswith("out/_manifest.json")


def _splits_record():
    shards = [shard(0, 1, [doc("a", "ab", SPEC)])]
    manifests = {name: build_manifest(skipped={}, records=1, shards=shards,
                                      fingerprint=c * 64, **ARGS)
                 for name, c in (("val", "a"), ("train", "b"))}
    return build_splits_record(manifests=manifests, fractions={"val": 0.5, "train": 0.5},
                               split_seed=3, skipped={"empty": 1}, records=3, sampled_out=0,
                               fingerprint="c" * 64, dedup=DedupInfo(mode="exact"))


def test_the_splits_record_reads_back_as_the_record_it_was_built_from():
    record = _splits_record()
    data = dumps_manifest(record)
    parsed = parse_splits_record(data, where="out/_splits.json")
    assert parsed == record and dumps_manifest(parsed) == data
    assert [(s.name, s.dir, s.fingerprint) for s in parsed.splits] == [
        ("val", "val", "a" * 64), ("train", "train", "b" * 64)]
    assert parsed.counts.skipped == {"empty": 1} and parsed.split_seed == 3


@pytest.mark.parametrize(("path", "value", "message"), [
    (("format",), "token-windows", "out/_splits.json is not a token-windows split record"),
    (("splits", 0, "name"), 3, "splits must be a list of objects with a name; the output is "
                               "damaged"),
    (("counts", "skipped"), _DELETE, "lacks counts.skipped; the output is damaged"),
    (("split_seed",), _DELETE, "lacks the key 'split_seed'; the output is damaged"),
    (("reading",), "x", "reading must be an object or null, but got 'x'"),
    (("splits", 1, "dir"), "../x", r"splits\[1\].dir must be a directory name, but got '../x'"),
    (("splits", 0, "name"), "..", r"splits\[0\].name must be a directory name, but got '..'"),
    (("splits", 0, "manifest_sha256"), "x", r"splits\[0\].manifest_sha256 must be 64 "
                                            "lowercase hex digits"),
    (("splits", 0, "documents"), -1, r"splits\[0\].documents must be a non-negative integer"),
    (("counts", "windows"), "x", "counts.windows must be a non-negative integer"),
    (("dedup", "mode"), "x", "dedup.mode must be one of"),
])
def test_the_splits_record_is_checked(path, value, message):
    damaged = _splits_record().to_json()
    _set(damaged, path, value)
    with pytest.raises(ValueError, match=message) as caught:
        parse_splits_record(manifest_bytes(damaged), where="out/_splits.json")
    assert str(caught.value).startswith("out/_splits.json")
