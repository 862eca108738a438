"""Seeded document keys and range-partitioned shards (SPEC §4).

``doc_key(seed, doc_id)`` is a 64-bit BLAKE2b of the id keyed by the seed: stable across
processes, machines and Python versions (unlike ``hash``), and a different seed gives an
unrelated order. ``shard_of(key, n) = (key × n) >> 64`` cuts the key space into n contiguous
ranges, so reading shards 0 … n−1 in order, each sorted by key, is the global key order.

Example: ``shard_of(2**63, 4) == 2`` (the middle of the key space starts the third shard).

A shard's range can be cut further into ``k`` parts the same way: ``part_of(key, n, k) =
shard_of(key, n × k)``, and ``part_of(key, n, k) // k == shard_of(key, n)`` (floor division
nests), so a shard's parts in order are its key order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["ShardPlan", "doc_key", "doc_keys", "part_of", "plan_shards", "shard_of"]


def _hasher(seed: int) -> hashlib.blake2b:
    return hashlib.blake2b(digest_size=8, key=seed.to_bytes(8, "little"), person=b"tw-doc-key")


def doc_key(seed: int, doc_id: str) -> int:
    """The document's shuffle key, an unsigned 64-bit integer derived from (seed, doc_id)."""
    h = _hasher(seed)
    h.update(doc_id.encode("utf-8"))
    return int.from_bytes(h.digest(), "big")


def doc_keys(seed: int, doc_ids: Sequence[str]) -> npt.NDArray[np.uint64]:
    """`doc_key` of each id (the keyed hash state is set up once, then copied)."""
    base = _hasher(seed)

    def one(doc_id: str) -> int:
        h = base.copy()
        h.update(doc_id.encode("utf-8"))
        return int.from_bytes(h.digest(), "big")

    return np.fromiter(map(one, doc_ids), np.uint64, len(doc_ids))


def shard_of(key: int, num_shards: int) -> int:
    """The shard (0 … num_shards − 1) that holds the documents with this key."""
    return (key * num_shards) >> 64


def part_of(key: int, num_shards: int, parts_per_shard: int) -> int:
    """The part (0 … num_shards × parts_per_shard − 1) that holds the documents with this key;
    its shard is ``part // parts_per_shard``."""
    return shard_of(key, num_shards * parts_per_shard)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardPlan:
    """How many shards the job writes, and into how many parts each is cut while shuffling.

    Parts only bound memory (`transforms.spill`); they never change a byte of a shard.
    """

    num_shards: int
    parts_per_shard: int = 1

    @property
    def num_parts(self) -> int:
        return self.num_shards * self.parts_per_shard


def plan_shards(input_bytes: int, *, num_shards: int | None, shard_bytes: int,
                text_bytes: int | None = None, part_bytes: int | None = None) -> ShardPlan:
    """The shard plan of a job.

    Args:
        input_bytes: the input files' sizes as stored.
        num_shards: ``--num-shards``, or None for one shard per ``shard_bytes`` of input.
        shard_bytes: input bytes per shard when ``num_shards`` is None.
        text_bytes: an estimate of the input's text once decompressed (default: as stored).
        part_bytes: cut each shard into parts of about this much text; None: one part.

    Example: ``plan_shards(200 << 20, num_shards=None, shard_bytes=64 << 20,
    part_bytes=16 << 20)`` is 4 shards of 4 parts each.
    """
    shards = num_shards or max(1, math.ceil(input_bytes / shard_bytes))
    text = input_bytes if text_bytes is None else text_bytes
    parts = 1 if part_bytes is None else max(1, math.ceil(text / shards / part_bytes))
    return ShardPlan(num_shards=shards, parts_per_shard=parts)
