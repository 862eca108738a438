"""Seeded document keys and shard ranges (docs/format.md#shuffle-and-shards)."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from transforms.plan.keys import (
    ShardPlan,
    doc_key,
    doc_keys,
    part_of,
    parts_of,
    plan_shards,
    shard_of,
)


def test_known_values_are_stable():
    # Pinned: a change here changes every dataset's order, so it must be deliberate.
    assert doc_key(0, "doc") == 0x15A251A819348550
    assert doc_key(1, "doc") == 0x773C9646F7046570


@given(st.integers(0, 2**64 - 1), st.text())
def test_key_is_uint64(seed, doc_id):
    assert 0 <= doc_key(seed, doc_id) < 2**64


@given(st.integers(0, 2**64 - 1), st.lists(st.text(), max_size=20))
def test_keys_of_many_ids_are_each_ids_key(seed, doc_ids):
    keys = doc_keys(seed, doc_ids)
    assert keys.dtype == "uint64"
    assert keys.tolist() == [doc_key(seed, d) for d in doc_ids]


@given(st.integers(0, 2**64 - 1), st.integers(1, 10_000))
def test_shard_in_range_and_monotone(key, n):
    s = shard_of(key, n)
    assert 0 <= s < n
    assert shard_of(min(key + 1, 2**64 - 1), n) >= s


def test_shards_are_contiguous_key_ranges():
    assert [shard_of(k, 4) for k in (0, 2**62 - 1, 2**62, 2**63, 3 * 2**62, 2**64 - 1)] == [
        0, 0, 1, 2, 3, 3,
    ]


def test_another_seed_another_order():
    ids = [f"doc{i}" for i in range(50)]
    order0 = sorted(ids, key=lambda d: doc_key(0, d))
    assert order0 == sorted(ids, key=lambda d: doc_key(0, d))
    assert order0 != sorted(ids, key=lambda d: doc_key(1, d))


@given(st.integers(0, 2**64 - 1), st.integers(1, 10_000), st.integers(1, 64))
def test_parts_nest_in_their_shard(key, num_shards, parts):
    part = part_of(key, num_shards, parts)
    assert 0 <= part < num_shards * parts
    assert part // parts == shard_of(key, num_shards)


@given(st.lists(st.integers(0, 2**64 - 1), min_size=2, max_size=50), st.integers(1, 9),
       st.integers(1, 9))
def test_parts_in_order_are_key_order(keys, num_shards, parts):
    ordered = sorted(keys, key=lambda k: (part_of(k, num_shards, parts), k))
    assert ordered == sorted(keys)


def test_plan_shards():
    mib = 1 << 20
    assert plan_shards(200 * mib, num_shards=None, shard_bytes=64 * mib,
                       part_bytes=16 * mib) == ShardPlan(num_shards=4, parts_per_shard=4)
    assert plan_shards(0, num_shards=None, shard_bytes=64 * mib) == ShardPlan(num_shards=1)
    assert plan_shards(10, num_shards=3, shard_bytes=1) == ShardPlan(num_shards=3)
    # A small --num-shards on a big corpus: each shard is cut into many parts.
    plan = plan_shards(10_000 * mib, num_shards=1, shard_bytes=64 * mib,
                       text_bytes=40_000 * mib, part_bytes=16 * mib)
    assert (plan.num_shards, plan.parts_per_shard, plan.num_parts) == (1, 2500, 2500)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=50)
       | st.just([0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1]),
       st.integers(1, 2**31 - 1))
def test_parts_of_is_shard_of_of_each_key(keys, num_shards):
    got = parts_of(np.array(keys, dtype=np.uint64), num_shards)
    assert got.tolist() == [shard_of(k, num_shards) for k in keys]
