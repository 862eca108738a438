"""Seeded document keys and range-partitioned shards (SPEC §4).

``doc_key(seed, doc_id)`` is a 64-bit BLAKE2b of the id keyed by the seed: stable across
processes, machines and Python versions (unlike ``hash``), and a different seed gives an
unrelated order. ``shard_of(key, n) = (key × n) >> 64`` cuts the key space into n contiguous
ranges, so reading shards 0 … n−1 in order, each sorted by key, is the global key order.

Example: ``shard_of(2**63, 4) == 2`` (the middle of the key space starts the third shard).
"""

from __future__ import annotations

import hashlib

__all__ = ["doc_key", "shard_of"]


def doc_key(seed: int, doc_id: str) -> int:
    """The document's shuffle key, an unsigned 64-bit integer derived from (seed, doc_id)."""
    digest = hashlib.blake2b(
        doc_id.encode("utf-8"),
        digest_size=8,
        key=seed.to_bytes(8, "little"),
        person=b"tw-doc-key",
    ).digest()
    return int.from_bytes(digest, "big")


def shard_of(key: int, num_shards: int) -> int:
    """The shard (0 … num_shards − 1) that holds the documents with this key."""
    return (key * num_shards) >> 64
