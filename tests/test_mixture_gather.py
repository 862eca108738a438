"""The mixture's batch machinery against plain references: a cursor that keeps its windows as
arrays only reads what one with lists reads; a chunk of drawn batches groups each batch by
source exactly as a stable sort per batch does, and its ledger is the counts of its draws;
records gathered as raw bytes are the structured records, with or without a dataset index
(docs/mixtures.md#how-it-works-and-what-it-costs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reader import MixedDataset, MixtureSampler, WindowDataset
from reader.ledger import Cursor, DrawnBatches
from reader.sampler import EpochSampler
from tests.reader_data import isolated_cache, random_docs, write_docs

__all__ = ["isolated_cache"]  # fixture

W = 8


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("gather")
    out = {}
    for k, name in enumerate(("web", "code", "books")):
        write_docs(base / name, random_docs(6 + 7 * k, seed=30 + k, max_len=45), window=W,
                   stride=5, score_new=True, num_shards=2 + k)
        out[name] = base / name
    return out


class _Sizes:
    """A source of n windows whose sizes are a function of the index (as a dataset's)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def window_sizes(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = np.asarray(idx, np.int64)
        lengths = 1 + (idx * 7919) % W
        return lengths, lengths - (idx % 3) % lengths


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2**31), st.integers(0, 500),
       st.lists(st.tuples(st.sampled_from(["at", "targets_at", "take", "advance", "ahead"]),
                          st.integers(0, 30)), max_size=30))
def test_a_cursor_without_lists_reads_what_one_with_lists_reads(
        n: int, seed: int, offset: int, ops: list[tuple[str, int]]) -> None:
    source, order = _Sizes(n), EpochSampler(n, 1, seed=seed)
    start = [1, n // 2, 3, 11]  # any ledger: epoch 1, half-way
    listed = Cursor(source, order, start, offset=offset)
    arrays = Cursor(source, order, start, offset=offset, lists=False)
    for op, j in ops:
        if op in ("at", "targets_at"):
            assert getattr(arrays, op)(j) == getattr(listed, op)(j)
        elif op == "take":
            assert arrays.take(j) == listed.take(j)
        elif op == "ahead":
            arrays.ahead(j)
            listed.ahead(j)
        else:
            arrays.ahead(j)
            listed.ahead(j)
            arrays.advance(j)
            listed.advance(j)
        assert arrays.ledger() == listed.ledger()
        assert arrays.known() == listed.known()
    assert arrays.at(0) == listed.at(0) and isinstance(arrays.at(0)[0], int)
    assert isinstance(arrays.targets_at(0), int)


def _check_chunk(src: np.ndarray, index: np.ndarray, targets: np.ndarray, batches: int,
                 width: int, span: tuple[int, int], offsets: np.ndarray,
                 check: range | list[int] | None = None) -> None:
    base = [[0, 0, 0, 0] for _ in range(width)]
    sizes = [10**6] * width
    chunk = DrawnBatches(base, sizes, src=src, index=index, targets=targets, batches=batches,
                         span=span, offsets=offsets)
    g = len(src) // batches
    a, b = span
    for j in range(batches) if check is None else check:
        mine_src = src[j * g + a : j * g + b]
        mine_index = index[j * g + a : j * g + b]
        idx, s, grouped, order, per_source = chunk.rank_batch(j)
        assert chunk.batch_list(j) == mine_index.tolist() == chunk.lists[j]
        assert idx.tolist() == mine_index.tolist() and s.tolist() == mine_src.tolist()
        want = np.argsort(mine_src, kind="stable")  # by source, request order within one
        assert order.tolist() == want.tolist()
        assert grouped.tolist() == (mine_index - offsets[mine_src])[want].tolist()
        assert per_source.tolist() == np.bincount(mine_src, minlength=width).tolist()
        drawn = src[: (j + 1) * g]  # every rank's draws up to batch j
        weights = targets[: (j + 1) * g]
        assert chunk.ledger(j) == [
            [0, int((drawn == d).sum()), int((drawn == d).sum()), int(weights[drawn == d].sum())]
            for d in range(width)]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 5), st.integers(1, 9), st.integers(1, 3),
       st.integers(0, 2**31))
def test_a_chunk_groups_each_batch_by_source_as_a_stable_sort_does(
        batches: int, width: int, per_rank: int, world_size: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    g = per_rank * world_size
    src = rng.integers(0, width, batches * g)
    offsets = np.cumsum([0, *rng.integers(1, 50, width - 1)]).astype(np.int64)
    index = offsets[src] + rng.integers(0, 1000, batches * g)
    targets = rng.integers(0, W + 1, batches * g)
    rank = int(rng.integers(0, world_size))
    _check_chunk(src, index, targets, batches, width, (rank * per_rank, (rank + 1) * per_rank),
                 offsets)


def test_a_chunk_of_more_keys_than_a_radix_sort_takes_groups_the_same() -> None:
    rng = np.random.default_rng(5)
    batches, width, g = 9000, 8, 2  # 72,000 (batch, source) keys: past 2**16
    src = rng.integers(0, width, batches * g)
    offsets = np.arange(width, dtype=np.int64) * 100
    _check_chunk(src, offsets[src] + rng.integers(0, 100, batches * g),
                 rng.integers(0, W, batches * g), batches, width, (0, g), offsets,
                 check=[0, 1, 4321, batches - 1])


def test_raw_records_are_the_structured_records_with_or_without_the_index(
        roots: dict[str, Path], tmp_path: Path) -> None:
    built = WindowDataset(roots["books"], cache_dir=tmp_path / "a")
    built.prepare()
    index = built._dataset_index()
    assert index is not None
    idx = np.array([5, 0, len(built) - 1, 5, 2], np.int64)
    assert built._records(idx).tobytes() == index[idx].tobytes()
    assert built._records(idx).dtype == index.dtype
    fresh = WindowDataset(roots["books"], cache_dir=tmp_path / "b")  # no layout built yet
    assert fresh._records(idx).tobytes() == index[idx].tobytes()


def test_a_source_without_its_index_is_gathered_from_its_shards_alike(
        roots: dict[str, Path], tmp_path: Path) -> None:
    # "code" in a cache of its own, never prepared: its dataset index is built only once
    # every shard has been read, so the first batches gather it shard by shard.
    prepared = {n: WindowDataset(r, cache_dir=tmp_path / "warm") for n, r in roots.items()}
    for ds in prepared.values():
        ds.prepare()
    cold = dict(prepared, code=WindowDataset(roots["code"], cache_dir=tmp_path / "cold"))
    assert cold["code"]._dataset_index() is None
    warm_mix, cold_mix = MixedDataset(prepared), MixedDataset(cold)
    sampler = MixtureSampler(cold_mix, {"web": 2, "code": 5, "books": 3}, 7, seed=3)
    for _, batch in zip(range(8), sampler, strict=False):
        got, want = cold_mix.__getitems__(batch), warm_mix.__getitems__(list(batch))
        assert got.tokens.tolist() == want.tokens.tolist()
        assert got.offsets.tolist() == want.offsets.tolist()
        assert got.records.tobytes() == want.records.tobytes()
        assert got.source_ids.tolist() == want.source_ids.tolist()
        for w, k in zip(got, batch, strict=True):
            assert w["tokens"].tolist() == warm_mix[k]["tokens"].tolist()
