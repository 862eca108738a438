"""`reader.mixture.ledger`: a mixture's ledger (each source's epoch, cursor, windows and targets
drawn) and the stream's position after each batch; the arithmetic against a plain count."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reader.mixture.ledger import Cursor, DrawnBatches, Snapshot
from reader.order.sampler import EpochSampler


class Source:
    """What a cursor reads of a dataset: each window's length and scored targets."""

    def window_sizes(self, local):
        local = np.asarray(local, dtype=np.int64)
        return local % 7 + 1, local % 5


def walk(order: EpochSampler, epoch: int, cursor: int, m: int) -> list[int]:
    """The next ``m`` positions of the epochs from (epoch, cursor), one epoch after another."""
    out: list[int] = []
    while len(out) < m:
        hi = min(order.n, cursor + m - len(out))
        out += order.indices(epoch, cursor, hi).tolist()
        epoch, cursor = (epoch + 1, 0) if hi == order.n else (epoch, hi)
    return out


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**20), epoch=st.integers(0, 3),
       data=st.data(), takes=st.lists(st.integers(0, 90), max_size=6))
def test_a_cursor_takes_the_epochs_in_order_and_its_ledger_counts_them(n, seed, epoch, data,
                                                                       takes):
    cursor0 = data.draw(st.integers(0, n - 1))
    windows0, targets0 = data.draw(st.integers(0, 10**6)), data.draw(st.integers(0, 10**6))
    order = EpochSampler(n, 1, seed=seed)
    c = Cursor(Source(), order, [epoch, cursor0, windows0, targets0], offset=1000)
    expected = walk(order, epoch, cursor0, sum(takes))
    if expected:
        assert c.at(0) == (expected[0], expected[0] % 7 + 1)
    got: list[int] = []
    for m in takes:
        if m:
            assert c.targets_at(m - 1) == expected[len(got) + m - 1] % 5  # no advance
        got += c.take(m)
        done = len(got)
        assert c.ledger() == [epoch + (cursor0 + done) // n, (cursor0 + done) % n,
                              windows0 + done, targets0 + sum(i % 5 for i in got)]
        assert (c.epoch, c.cursor, c.windows, c.targets) == tuple(c.ledger())
    assert got == expected
    assert c.known() >= 0 and c.n == n


def test_a_cursor_reads_ahead_and_gives_mixture_indices():
    order = EpochSampler(10, 1, seed=3)
    c = Cursor(Source(), order, [0, 8, 0, 0], offset=100)
    c.ahead(5)
    assert c.known() >= 5
    first = walk(order, 0, 8, 5)
    assert c.global_array[:5].tolist() == [100 + i for i in first]
    assert c.targets_array[:5].tolist() == [i % 5 for i in first]
    c.advance(5)
    assert c.ledger() == [1, 3, 5, sum(i % 5 for i in first)]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=4), batches=st.integers(1, 5),
       g=st.integers(1, 6), data=st.data())
def test_drawn_batches_ledgers_are_the_running_counts(sizes, batches, g, data):
    width = len(sizes)
    base = [[data.draw(st.integers(0, 3)), data.draw(st.integers(0, n - 1)),
             data.draw(st.integers(0, 99)), data.draw(st.integers(0, 99))] for n in sizes]
    src = np.array(data.draw(st.lists(st.integers(0, width - 1), min_size=batches * g,
                                      max_size=batches * g)), np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    local = np.array([data.draw(st.integers(0, sizes[d] - 1)) for d in src.tolist()], np.int64)
    index = offsets[src] + local
    targets = np.array(data.draw(st.lists(st.integers(0, 8), min_size=batches * g,
                                          max_size=batches * g)), np.int64)
    a = data.draw(st.integers(0, g - 1))
    b = data.draw(st.integers(a + 1, g))
    drawn = DrawnBatches(base, sizes, src=src, index=index, targets=targets, batches=batches,
                         span=(a, b), offsets=offsets)
    ledger = [list(x) for x in base]
    for j in range(batches):
        for p in range(j * g, (j + 1) * g):
            e, cur, w, t = ledger[src[p]]
            cur += 1
            ledger[src[p]] = [e + cur // sizes[src[p]], cur % sizes[src[p]], w + 1,
                              t + int(targets[p])]
        assert drawn.ledger(j) == ledger
        part = slice(j * g + a, j * g + b)
        assert drawn.lists[j] == index[part].tolist()
        indices, sources, grouped, order, per_source = drawn.rank_batch(j)
        assert indices.tolist() == index[part].tolist() and sources.tolist() == src[part].tolist()
        by_source = sorted(range(b - a), key=lambda k: (src[part][k], k))
        assert order.tolist() == by_source
        assert grouped.tolist() == [int(local[part][k]) for k in by_source]
        assert per_source.tolist() == [int((src[part] == d).sum()) for d in range(width)]


def test_a_snapshot_is_put_in_the_states_form_only_when_read():
    calls = []

    def ledger():
        calls.append(1)
        return [[0, 2, 2, 5], [1, 0, 3, 4]]

    since = {"batch": 3, "counts": {"a": 4, "b": 1}}
    snap = Snapshot(7, [[1, 2]], ledger, {"a": 0.5, "b": 0.5}, since, [[5, [(1, 9, 3)]]],
                    ["a", "b"])
    assert snap["batch"] == 7 and snap.batch == 7 and calls == []
    assert snap["ledger"] == {"a": [0, 2, 2, 5], "b": [1, 0, 3, 4]}
    assert (snap["rows"], snap["weights"], snap["since"], snap["open"]) == (
        [[1, 2]], {"a": "0.5", "b": "0.5"}, since, [[5, [["b", 9, 3]]]])
    since["counts"]["a"] = 99  # the snapshot keeps its own copy
    assert snap["since"]["counts"] == {"a": 4, "b": 1}
    assert calls == [1]  # read off the draws once


W = 8  # the longest window of the sources below


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
