"""Mixtures without datasets: sources that compute each window's sizes from its index, a
sampler's stream, and the bound every prefix of a weighted stream keeps."""

from __future__ import annotations

import types
from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import strategies as st

from reader import MixedDataset, MixtureSampler
from transforms.dataset.manifest import TokenizerInfo

W = 8


class FakeSource:
    """A stand-in with what the sampler reads of a WindowDataset: its size, window, manifest
    tokenizer, fingerprint and each window's sizes, computed from the index (nothing stored)."""

    def __init__(self, n: int, *, window: int = W, salt: int = 0, vocab: int = 258) -> None:
        self.n, self.window, self.salt = n, window, salt
        # What a mixture reads of a manifest: its tokenizer record.
        self.manifest = types.SimpleNamespace(tokenizer=TokenizerInfo(
            kind="bytes", vocab_size=vocab, bos_id=256, eos_id=257, sha256=None))
        self.fingerprint = f"fake-{n}-{window}-{salt}"

    def __len__(self) -> int:
        return self.n

    def window_sizes(self, local: Any) -> tuple[np.ndarray, np.ndarray]:
        i = np.asarray(local, dtype=np.uint64) + np.uint64(self.salt)
        lengths = (1 + (i * np.uint64(2654435761)) % np.uint64(self.window)).astype(np.int64)
        targets = 1 + ((i * np.uint64(40503)).astype(np.int64) % lengths)
        return lengths, targets


def fakes(sizes: list[int], **kw: Any) -> MixedDataset:
    return MixedDataset({f"s{k}": FakeSource(n, salt=k, **kw) for k, n in enumerate(sizes)})


def stream(sampler: MixtureSampler, batches: int) -> list[Any]:
    """``batches`` batches of this rank, each stepped (committed)."""
    out = []
    for _, batch in zip(range(batches), sampler, strict=False):
        out.append(batch)
        sampler.step(num_targets=0)
    return out


def exact_bound(counts: list[int], weights: list[Fraction], unit: int) -> None:
    total = sum(counts)
    for c, w in zip(counts, weights, strict=True):
        assert abs(c - w * total) < unit, (counts, weights)


weights_st = st.lists(st.integers(0, 50), min_size=1, max_size=9).filter(lambda v: sum(v) > 0)
