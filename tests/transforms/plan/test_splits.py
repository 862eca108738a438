"""Seeded document-level splits and samples: the math (transforms/plan/splits.py, ShardPlan)."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transforms.dataset.manifest import SplitInfo
from transforms.plan.keys import ShardPlan, doc_key, part_of, plan_shards
from transforms.plan.splits import (
    SplitSpec,
    apportion_shards,
    split_fingerprint,
    split_job_message,
)

IDS = [f"corpus/part-{i // 1000}.jsonl:{i % 1000 + 1}" for i in range(5000)]
VAL_TEST = SplitSpec(splits=(("val", 0.1), ("test", 0.05)))


def _by_split(spec, ids):
    out = {name: set() for name in spec.names}
    for doc, where in zip(ids, spec.split_of(ids), strict=True):
        out[spec.names[where]].add(doc)
    return out


def test_parse_and_names():
    assert SplitSpec.parse("val=0.01, test=0.01") == (("val", 0.01), ("test", 0.01))
    assert VAL_TEST.names == ("val", "test", "train")
    assert [float(f) for f in VAL_TEST.fractions()] == [0.1, 0.05, 0.85]
    # Fractions adding up to exactly 1 (as decimals): no train.
    assert SplitSpec(splits=(("a", 0.3), ("b", 0.7))).names == ("a", "b")
    assert SplitSpec(splits=(("train", 0.98), ("val", 0.02))).names == ("train", "val")
    assert SplitSpec().names == () and not SplitSpec().active
    assert SplitSpec(sample=0.5).active and SplitSpec(sample=0.5).names == ()


@pytest.mark.parametrize("text", ["val", "val=", "=0.1", "val=ten", "val=0.1,,test=0.1"])
def test_parse_refuses_what_is_not_name_fraction(text):
    with pytest.raises(ValueError, match="is not NAME=FRACTION; write e.g. --split val=0.01"):
        SplitSpec.parse(text)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"splits": (("_rejects", 0.1),)}, "split name '_rejects' is not a safe directory name"),
    ({"splits": ((".tmp", 0.1),)}, "is not a safe directory name"),
    ({"splits": (("a/b", 0.1),)}, "is not a safe directory name"),
    ({"splits": (("part-0.parquet", 0.1),)}, "is not a safe directory name"),
    ({"splits": (("", 0.1),)}, "is not a safe directory name"),
    ({"splits": (("val", 0.1), ("Val", 0.1))}, "split name 'Val' is given twice"),
    ({"splits": (("train", 0.5), ("train", 0.5))}, "split name 'train' is given twice"),
    ({"splits": (("val", 0.0),)}, r"`split val` must be a number in \(0, 1\), but got 0.0"),
    ({"splits": (("val", 1.0),)}, r"must be a number in \(0, 1\), but got 1.0"),
    ({"splits": (("val", float("nan")),)}, r"must be a number in \(0, 1\)"),
    ({"splits": (("val", True),)}, r"must be a number in \(0, 1\), but got True"),
    ({"splits": (("val", 0.6), ("test", 0.6))}, "add up to 1.2, more than 1; make them smaller"),
    ({"splits": (("train", 0.9), ("val", 0.05))}, "names train, so the fractions must add up "
                                                   "to 1, but they add up to 0.95"),
    ({"sample": 0.0}, r"`sample` must be a number in \(0, 1\], but got 0.0"),
    ({"sample": 1.5}, r"`sample` must be a number in \(0, 1\], but got 1.5"),
    ({"seed": -1}, r"`split_seed` must be an integer in \[0, 2\*\*64\), but got -1"),
    ({"sample_seed": 2**64}, r"`sample_seed` must be an integer in \[0, 2\*\*64\)"),
])
def test_bad_specs_are_refused_naming_the_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SplitSpec(**kwargs)


def test_pinned_assignment():
    # Pinned: a change here moves documents between existing train and validation sets.
    assert VAL_TEST.split_of(["doc", "a.jsonl:1", "a.jsonl:2", "a.jsonl:3"]) == [2, 0, 2, 2]
    assert SplitSpec(sample=0.5).kept(["doc", "a.jsonl:1", "a.jsonl:2", "a.jsonl:3"]) == [
        False, True, False, False]


def test_fractions_hold_within_binomial_tolerance():
    counts = {k: len(v) for k, v in _by_split(VAL_TEST, IDS).items()}
    n = len(IDS)
    for name, p in (("val", 0.1), ("test", 0.05), ("train", 0.85)):
        sigma = math.sqrt(n * p * (1 - p))
        assert abs(counts[name] - n * p) < 4 * sigma, (name, counts)
    assert sum(counts.values()) == n
    kept = sum(SplitSpec(sample=0.2).kept(IDS))
    assert abs(kept - 0.2 * n) < 4 * math.sqrt(n * 0.2 * 0.8)


def test_splits_are_disjoint_and_cover_every_document():
    parts = _by_split(VAL_TEST, IDS)
    assert set().union(*parts.values()) == set(IDS)
    assert sum(map(len, parts.values())) == len(IDS)


def test_only_the_split_seed_changes_the_assignment():
    other = SplitSpec(splits=VAL_TEST.splits, seed=1)
    assert VAL_TEST.split_of(IDS) != other.split_of(IDS)
    # The same seed in another spec field (sample, shuffle) is another hash domain.
    same = SplitSpec(splits=VAL_TEST.splits, sample=0.5, sample_seed=1)
    assert same.split_of(IDS) == VAL_TEST.split_of(IDS)
    # Independent of the shuffle key: val is not the low keys.
    val = _by_split(VAL_TEST, IDS)["val"]
    low = {d for d in IDS if doc_key(0, d) < 2**64 // 10}
    assert 0.05 < len(val & low) / len(val) < 0.15


def test_growing_the_first_split_keeps_its_documents():
    small = _by_split(SplitSpec(splits=(("val", 0.01),)), IDS)["val"]
    large = _by_split(SplitSpec(splits=(("val", 0.02),)), IDS)["val"]
    assert small < large


@given(st.lists(st.text(), max_size=30), st.integers(0, 2**64 - 1),
       st.lists(st.integers(1, 99), min_size=1, max_size=4))
def test_each_document_has_one_split_whatever_the_batch(doc_ids, seed, percents):
    total = sum(percents)
    fractions = [p / (100 * max(1, math.ceil(total / 99))) for p in percents]
    spec = SplitSpec(splits=tuple((f"s{i}", f) for i, f in enumerate(fractions)), seed=seed)
    batch = spec.split_of(doc_ids)
    assert all(0 <= s < len(spec.names) for s in batch)
    assert batch == [spec.split_of([d])[0] for d in doc_ids]


@given(st.lists(st.text(), max_size=30), st.integers(0, 2**64 - 1),
       st.floats(0.001, 1.0), st.floats(0.001, 1.0))
def test_samples_nest_and_are_stable(doc_ids, seed, a, b):
    lo, hi = sorted((a, b))
    small = SplitSpec(sample=lo, sample_seed=seed).kept(doc_ids)
    large = SplitSpec(sample=hi, sample_seed=seed).kept(doc_ids)
    assert all(big for tiny, big in zip(small, large, strict=True) if tiny)
    assert small == [SplitSpec(sample=lo, sample_seed=seed).kept([d])[0] for d in doc_ids]


def test_sample_one_keeps_everything():
    assert all(SplitSpec(sample=1.0).kept(IDS))


@pytest.mark.parametrize(("spec", "num_shards", "input_bytes", "want"), [
    (SplitSpec(splits=(("val", 0.01),)), 8, 0, (1, 8)),
    (SplitSpec(splits=(("val", 0.5),)), 8, 0, (4, 4)),
    (SplitSpec(splits=(("val", 0.01), ("test", 0.01))), 64, 0, (1, 1, 63)),
    (SplitSpec(splits=(("val", 0.25),)), None, 10 << 20, (1, 1)),
    (SplitSpec(splits=(("val", 0.25),)), None, 200 << 20, (1, 3)),
    (SplitSpec(splits=(("val", 0.01),), sample=0.1), None, 1000 << 20, (1, 2)),
    (SplitSpec(sample=0.1), None, 1000 << 20, (2,)),
    (SplitSpec(sample=0.1), 7, 1000 << 20, (7,)),
])
def test_apportion_shards(spec, num_shards, input_bytes, want):
    got = apportion_shards(spec, num_shards=num_shards, input_bytes=input_bytes,
                           shard_bytes=64 << 20)
    assert got == want


def test_plan_without_splits_is_the_plain_plan():
    for n in (None, 3):
        assert plan_shards(200 << 20, num_shards=n, shard_bytes=64 << 20, part_bytes=16 << 20,
                           splits=SplitSpec()) == plan_shards(
            200 << 20, num_shards=n, shard_bytes=64 << 20, part_bytes=16 << 20)
    plan = plan_shards(1 << 30, num_shards=None, shard_bytes=64 << 20, part_bytes=16 << 20,
                       splits=VAL_TEST)
    assert plan.splits == (("val", 2), ("test", 1), ("train", 14))
    # Parts: the largest text per shard of any split (train: 1 GiB × 0.85 / 14) / 16 MiB.
    assert plan.num_shards == 17 and plan.parts_per_shard == 4


@given(st.integers(0, 2**64 - 1), st.lists(st.integers(1, 9), min_size=1, max_size=4),
       st.integers(1, 5), st.data())
def test_a_split_s_parts_lie_in_its_shard_range(key, shards, k, data):
    plan = ShardPlan(num_shards=sum(shards), parts_per_shard=k,
                     splits=tuple((f"s{i}", n) for i, n in enumerate(shards)))
    split = data.draw(st.integers(0, len(shards) - 1))
    part = plan.part_of(key, split)
    name, local, of = plan.locate(part // k)
    assert name == f"s{split}" and of == shards[split]
    assert local == part_of(key, of, k) // k  # the split's own key ranges
    assert plan.part_of(key, split, 1) == part // k


@given(st.integers(0, 2**64 - 1), st.integers(1, 20), st.integers(1, 5))
def test_a_plain_plan_places_as_part_of(key, n, k):
    plan = ShardPlan(num_shards=n, parts_per_shard=k)
    assert plan.part_of(key) == part_of(key, n, k)
    assert plan.locate(3 % n) == (None, 3 % n, n)


def test_split_fingerprints_and_round_trip():
    assert split_fingerprint("f", "val") != split_fingerprint("f", "test")
    spec = SplitSpec(splits=(("val", 0.01), ("test", 0.02)), seed=5, sample=0.3, sample_seed=2)
    j = spec.to_json()
    assert j == {"splits": [{"name": "val", "fraction": 0.01}, {"name": "test", "fraction": 0.02},
                            {"name": "train", "fraction": 0.97}],
                 "split_seed": 5, "sample": {"fraction": 0.3, "seed": 2}}
    split = SplitInfo(name="val", splits=spec.split_fractions(), split_seed=spec.seed)
    back = SplitSpec.from_manifest(split, spec.sample_info())
    assert back == spec and back.to_json() == j
    assert back.split_of(IDS) == spec.split_of(IDS) and back.kept(IDS) == spec.kept(IDS)
    assert SplitSpec.from_manifest(None, None) == SplitSpec()
    assert "open OUT/val" in split_job_message("OUT", ["val"])
