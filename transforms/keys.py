"""Seeded document keys and range-partitioned shards (SPEC §4).

``doc_key(seed, doc_id)`` is a 64-bit BLAKE2b of the id keyed by the seed: stable across
processes, machines and Python versions (unlike ``hash``), and a different seed gives an
unrelated order. ``shard_of(key, n) = (key × n) >> 64`` cuts the key space into n contiguous
ranges, so reading shards 0 … n−1 in order, each sorted by key, is the global key order.

Example: ``shard_of(2**63, 4) == 2`` (the middle of the key space starts the third shard).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["doc_key", "doc_keys", "shard_of"]


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
