"""The mixture's fast path gives exactly what the per-index path gives: a batch that
:class:`reader.MixtureSampler` yields carries its windows grouped by source
(:class:`reader.mixed.GroupedIndices`), and :meth:`reader.MixedDataset.__getitems__` gathered
from that grouping must equal the same indices gathered one by one, and each window
``mixed[k]`` (docs/mixtures.md#how-it-works-and-what-it-costs)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reader import MixedDataset, MixtureSampler, WindowDataset, collate, collate_packed
from reader.mixed import GroupedIndices
from tests.reader_data import isolated_cache, random_docs, write_docs

__all__ = ["isolated_cache"]  # fixture

W = 8
NAMES = ("web", "code", "books", "math")


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> dict[str, WindowDataset]:
    root = tmp_path_factory.mktemp("pool")
    out = {}
    for k, name in enumerate(NAMES):
        write_docs(root / name, random_docs(4 + 9 * k, seed=10 + k, max_len=50), window=W,
                   stride=5, score_new=True, num_shards=1 + k % 3)
        out[name] = WindowDataset(root / name, cache_dir=root / "cache")
    return out


def _same_batch(fast: Any, slow: Any) -> None:
    assert fast.tokens.tolist() == slow.tokens.tolist()
    assert fast.offsets.tolist() == slow.offsets.tolist()
    assert fast.index.tolist() == slow.index.tolist()
    assert fast.records.tobytes() == slow.records.tobytes()
    assert fast.source_ids.tolist() == slow.source_ids.tolist()
    assert fast.sources == slow.sources


def _same_dict(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, torch.Tensor):
            assert x.tolist() == y.tolist(), key
        else:
            assert x == y, key


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True),
       st.lists(st.integers(0, 9), min_size=4, max_size=4), st.sampled_from(["windows", "targets"]),
       st.integers(1, 9), st.integers(1, 3), st.integers(0, 2**31), st.booleans())
def test_grouped_batches_are_the_per_index_batches(pool: dict[str, WindowDataset],
                                                   names: list[str], raw: list[int], unit: str,
                                                   batch_size: int, world_size: int, seed: int,
                                                   packed: bool) -> None:
    mixed = MixedDataset({n: pool[n] for n in names})
    weights = {n: w for n, w in zip(names, raw, strict=False)}
    if not any(weights.values()):
        weights[names[0]] = 1
    seq_len = 2 * W if packed else None
    for rank in range(world_size):
        sampler = MixtureSampler(mixed, weights, batch_size, seed=seed, unit=unit, rank=rank,
                                 world_size=world_size, seq_len=seq_len)
        for _, batch in zip(range(6), sampler, strict=False):
            if packed:
                rows = mixed.__getitems__(batch)
                assert [[w["index"] for w in row] for row in rows] == batch
                for row, indices in zip(rows, batch, strict=True):
                    for w, k in zip(row, indices, strict=True):
                        one = mixed[k]
                        assert w["tokens"].tolist() == one["tokens"].tolist()
                got = collate_packed(rows, seq_len=seq_len, pad_id=mixed.eos_id)
                names = [mixed[k]["source"] for r in batch for k in r]
                assert [got["sources"][s] for s in got.pop("source_ids").tolist()] == names
                del got["sources"]  # windows as dicts carry their source by name only
                _same_dict(got, collate_packed([[mixed[k] for k in r] for r in batch],
                                               seq_len=seq_len, pad_id=mixed.eos_id))
                continue
            assert isinstance(batch, GroupedIndices) and batch.grouped is not None
            fast = mixed.__getitems__(batch)  # from the sampler's grouping
            slow = mixed.__getitems__(list(batch))  # index by index
            _same_batch(fast, slow)
            for w, k in zip(fast, batch, strict=True):  # and every window as mixed[k]
                one = mixed[k]
                assert w["tokens"].tolist() == one["tokens"].tolist()
                assert (w["source"], w["index"]) == (one["source"], k)
            pad = functools.partial(collate, pad_id=mixed.eos_id)
            _same_dict(pad(fast), pad(slow))


def test_a_changed_grouped_batch_is_gathered_index_by_index(
        pool: dict[str, WindowDataset]) -> None:
    mixed = MixedDataset({n: pool[n] for n in NAMES[:3]})
    batch = next(iter(MixtureSampler(mixed, {"web": 1, "code": 1, "books": 1}, 6, seed=1)))
    assert batch.grouped is not None
    batch[0], batch[1] = batch[1], batch[0]  # any change drops the grouping
    assert batch.grouped is None
    assert mixed.__getitems__(batch).index.tolist() == list(batch)
    other = MixedDataset({n: pool[n] for n in NAMES[1:]})  # another mixture: not its grouping
    mine = next(iter(MixtureSampler(mixed, {"web": 1, "code": 1, "books": 1}, 6, seed=1)))
    assert mine.grouped is not None and mine.grouped[0] != other.key
    indices = [k for k in mine if k < len(other)]
    assert other.__getitems__(GroupedIndices(indices, mine.grouped)).index.tolist() == indices
    assert np.array_equal(mixed.__getitems__(mine).index, np.asarray(list(mine)))
