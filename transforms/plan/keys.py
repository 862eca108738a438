"""Seeded document keys and range-partitioned shards (docs/format.md#shuffle-and-shards).

``doc_key(seed, doc_id)`` is a 64-bit BLAKE2b of the id keyed by the seed: stable across
processes, machines and Python versions (unlike ``hash``), and a different seed gives an
unrelated order. ``shard_of(key, n) = (key × n) >> 64`` cuts the key space into n contiguous
ranges, so reading shards 0 … n−1 in order, each sorted by key, is the global key order.

Example: ``shard_of(2**63, 4) == 2`` (the middle of the key space starts the third shard).

A job with splits (`transforms.plan.splits`) numbers the shards of all its splits in one range:
split s owns the shards ``[offset_s, offset_s + N_s)`` and a document of split s goes to
``offset_s + shard_of(key, N_s)`` (`ShardPlan.part_of`), so the shuffle and the shard writers
work on one index space and each split is still contiguous key ranges.

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

from transforms.plan.splits import SplitSpec, apportion_shards

__all__ = ["ShardPlan", "doc_key", "doc_keys", "part_of", "parts_of", "plan_shards", "shard_of"]


def _hasher(seed: int) -> hashlib.blake2b:
    return hashlib.blake2b(digest_size=8, key=seed.to_bytes(8, "little"), person=b"tw-doc-key")


def doc_key(seed: int, doc_id: str) -> int:
    """The document's shuffle key, an unsigned 64-bit integer derived from (seed, doc_id)."""
    h = _hasher(seed)
    h.update(doc_id.encode("utf-8"))
    return int.from_bytes(h.digest(), "big")


def doc_keys(seed: int, doc_ids: Sequence[str]) -> npt.NDArray[np.uint64]:
    """`doc_key` of each id (the keyed hash state is set up once, then copied; the digests
    are read as big-endian integers at once, not one by one)."""
    copy = _hasher(seed).copy
    digests = bytearray()
    for doc_id in doc_ids:
        h = copy()
        h.update(doc_id.encode("utf-8"))
        digests += h.digest()
    return np.frombuffer(digests, ">u8").astype(np.uint64)


def shard_of(key: int, num_shards: int) -> int:
    """The shard (0 … num_shards − 1) that holds the documents with this key."""
    return (key * num_shards) >> 64


def parts_of(keys: npt.NDArray[np.uint64], num_shards: int) -> npt.NDArray[np.int64]:
    """`shard_of` of each key, vectorised: ``(key × num_shards) >> 64`` computed exactly in
    64-bit halves (``num_shards`` < 2**31)."""
    if not 0 < num_shards < 1 << 31:
        raise ValueError(f"num_shards must be in [1, 2**31), but got {num_shards}")
    keys = np.asarray(keys, dtype=np.uint64)
    n = np.uint64(num_shards)
    high, low = keys >> np.uint64(32), keys & np.uint64(0xFFFFFFFF)
    return ((high * n + ((low * n) >> np.uint64(32))) >> np.uint64(32)).astype(np.int64)


def part_of(key: int, num_shards: int, parts_per_shard: int) -> int:
    """The part (0 … num_shards × parts_per_shard − 1) that holds the documents with this key;
    its shard is ``part // parts_per_shard``."""
    return shard_of(key, num_shards * parts_per_shard)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardPlan:
    """How many shards the job writes, and into how many parts each is cut while shuffling.

    Parts only bound memory (`transforms.shards.spill`); they never change a byte of a shard.
    With splits, ``splits`` holds (name, shards) of each split in the order of their shard
    ranges, and ``num_shards`` is their sum; () is a job without splits.
    """

    num_shards: int
    parts_per_shard: int = 1
    splits: tuple[tuple[str, int], ...] = ()

    @property
    def num_parts(self) -> int:
        return self.num_shards * self.parts_per_shard

    def part_of(self, key: int, split: int = 0, parts_per_shard: int | None = None) -> int:
        """The part of a document of key ``key`` in split ``split`` (an index of ``splits``),
        with ``parts_per_shard`` parts per shard (default the plan's; 1: its shard)."""
        k = self.parts_per_shard if parts_per_shard is None else parts_per_shard
        if not self.splits:
            return shard_of(key, self.num_shards * k)
        offset = sum(n for _, n in self.splits[:split])
        return offset * k + shard_of(key, self.splits[split][1] * k)

    def locate(self, shard: int) -> tuple[str | None, int, int]:
        """(split name or None, index within the split, the split's shards) of a shard."""
        if not self.splits:
            return None, shard, self.num_shards
        offset = 0
        for name, n in self.splits:
            if shard < offset + n:
                return name, shard - offset, n
            offset += n
        raise ValueError(f"shard must be in [0, {self.num_shards}), but got {shard}")


def plan_shards(input_bytes: int, *, num_shards: int | None, shard_bytes: int,
                text_bytes: int | None = None, part_bytes: int | None = None,
                splits: SplitSpec | None = None) -> ShardPlan:
    """The shard plan of a job.

    Args:
        input_bytes: the input files' sizes as stored.
        num_shards: ``--num-shards``, or None for one shard per ``shard_bytes`` of input.
        shard_bytes: input bytes per shard when ``num_shards`` is None.
        text_bytes: an estimate of the input's text once decompressed (default: as stored).
        part_bytes: cut each shard into parts of about this much text; None: one part.
        splits: the job's sample and splits; each split gets its own shards
            (`transforms.plan.splits.apportion_shards`), numbered one after the other.

    Example: ``plan_shards(200 << 20, num_shards=None, shard_bytes=64 << 20,
    part_bytes=16 << 20)`` is 4 shards of 4 parts each.
    """
    text = input_bytes if text_bytes is None else text_bytes
    if splits is None or not splits.active:
        shards = num_shards or max(1, math.ceil(input_bytes / shard_bytes))
        parts = 1 if part_bytes is None else max(1, math.ceil(text / shards / part_bytes))
        return ShardPlan(num_shards=shards, parts_per_shard=parts)
    counts = apportion_shards(splits, num_shards=num_shards, input_bytes=input_bytes,
                              shard_bytes=shard_bytes)
    # The largest expected text per shard of any split sets the parts (memory only).
    shares = [float(f) * splits.sample for f in (splits.fractions() or (1,))]
    per_shard = max(text * f / n for f, n in zip(shares, counts, strict=True))
    parts = 1 if part_bytes is None else max(1, math.ceil(per_shard / part_bytes))
    named = tuple(zip(splits.names, counts, strict=True)) if splits.names else ()
    return ShardPlan(num_shards=sum(counts), parts_per_shard=parts, splits=named)
