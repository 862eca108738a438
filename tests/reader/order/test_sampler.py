"""Tests of reader.order.sampler: the seeded orders, ranks, the tail policy and resume
(docs/format.md#sampler)."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reader import EpochSampler, epoch_seed
from reader.order.permutation import FeistelPermutation, round_keys

ORDER_KW: dict[str, Any] = {"global": {}}


def blocks_kw(n: int, k: int = 2) -> dict[str, Any]:
    """Blocks of sizes 1, 2, 3, 0, 4, 1, 2, 3, 0, 4 … (an empty block, as an empty shard)."""
    sizes, left, i = [], n, 0
    while left > 0:
        size = min(left, (1, 2, 3, 0, 4)[i % 5])
        sizes.append(size)
        left -= size
        i += 1
    return {"order": "blocks", "blocks": sizes, "buffer_blocks": k}


def order_kw(order: str, n: int) -> dict[str, Any]:
    return {} if order == "global" else blocks_kw(n)


def one_epoch(sampler: EpochSampler) -> list[list[int]]:
    return list(sampler)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.integers(1, 9), st.integers(0, 2**40), st.booleans(),
       st.sampled_from(["global", "blocks"]))
def test_each_epoch_is_the_seeded_order(n: int, bs: int, seed: int, drop: bool,
                                        order: str) -> None:
    kw = order_kw(order, n)
    if drop and n < bs:
        with pytest.raises(ValueError, match="no batch"):
            EpochSampler(n, bs, seed=seed, drop_last=drop, **kw)
        return
    sampler = EpochSampler(n, bs, seed=seed, drop_last=drop, **kw)
    for epoch in range(3):
        expected_len = len(sampler)
        batches = one_epoch(sampler)
        assert len(batches) == expected_len
        flat = [i for b in batches for i in b]
        perm = sampler.permutation(epoch).tolist()
        assert sorted(perm) == list(range(n))
        if order == "global":
            keys = round_keys(f"global:{epoch_seed(seed, epoch)}")
            assert perm == FeistelPermutation(n, keys)(np.arange(n)).tolist()
        kept = n - n % bs if drop else n
        assert flat == perm[:kept]
        assert all(len(b) == bs for b in batches[:-1]) and 1 <= len(batches[-1]) <= bs
        assert len(batches) == sampler.batches_per_epoch
        if not drop:
            assert sorted(flat) == list(range(n))  # every window once


def test_the_global_order_is_pinned() -> None:
    # The same on every torch, NumPy and Python release (no torch.randperm).
    assert EpochSampler(10, 3, seed=0).permutation(0).tolist() == [5, 2, 0, 9, 8, 1, 7, 4, 3, 6]
    assert EpochSampler(10, 3, seed=0).permutation(1).tolist() == [7, 5, 1, 8, 6, 0, 3, 9, 4, 2]
    blocks = EpochSampler(12, 4, seed=0, order="blocks", blocks=[3, 0, 4, 5], buffer_blocks=2)
    assert blocks.permutation(0).tolist() == [5, 4, 8, 9, 7, 6, 11, 10, 3, 1, 0, 2]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=30).filter(lambda s: sum(s) > 0),
       st.integers(1, 5), st.integers(0, 1000), st.integers(0, 3))
def test_blocks_order_reads_k_whole_blocks_at_a_time(sizes: list[int], k: int, seed: int,
                                                     epoch: int) -> None:
    n = sum(sizes)
    sampler = EpochSampler(n, 4, seed=seed, order="blocks", blocks=sizes, buffer_blocks=k)
    order = sampler.permutation(epoch).tolist()
    assert sorted(order) == list(range(n))
    block_of = np.repeat(np.arange(len(sizes)), sizes)
    # Cut the order into buffers: each holds k whole non-empty blocks (the last may hold fewer).
    nonempty = [b for b, s in enumerate(sizes) if s]
    pos, buffers = 0, []
    while pos < n:
        blocks_here: set[int] = set()
        end = pos
        while end < n and (len(blocks_here) < k or int(block_of[order[end]]) in blocks_here):
            blocks_here.add(int(block_of[order[end]]))
            end += 1
        buffers.append(blocks_here)
        assert sum(sizes[b] for b in blocks_here) == end - pos  # whole blocks only
        pos = end
    assert sorted(b for buf in buffers for b in buf) == nonempty
    assert all(len(buf) == k for buf in buffers[:-1])


def test_orders_are_functions_of_seed_epoch_and_blocks() -> None:
    a, b = EpochSampler(50, 4, seed=7), EpochSampler(50, 5, seed=7, rank=1, world_size=3)
    assert a.permutation(3).tolist() == b.permutation(3).tolist()
    assert a.permutation(0).tolist() != a.permutation(1).tolist()
    assert a.permutation(0).tolist() != EpochSampler(50, 4, seed=8).permutation(0).tolist()
    jumped = EpochSampler(50, 4, seed=7)
    jumped.load_state_dict({**jumped.state_dict(), "epoch": 2})
    assert [i for batch in jumped for i in batch] == a.permutation(2).tolist()
    c = EpochSampler(50, 4, seed=7, **blocks_kw(50, 3))
    d = EpochSampler(50, 9, seed=7, rank=2, world_size=4, **blocks_kw(50, 3))
    assert c.permutation(1).tolist() == d.permutation(1).tolist()
    assert c.permutation(0).tolist() != EpochSampler(50, 4, seed=7, **blocks_kw(50, 4)
                                                     ).permutation(0).tolist()


def run_ranks(n: int, bs: int, ws: int, seed: int = 3, drop: bool = False,
              state: dict | None = None, stop: int | None = None,
              kw: dict[str, Any] | None = None) -> tuple[list[list[list[int]]], dict]:
    """Batches of every rank, in lockstep, until ``stop`` global batches or the epoch's end.

    Returns the batches and rank 0's state after them.
    """
    samplers = [EpochSampler(n, bs, seed=seed, rank=r, world_size=ws, drop_last=drop,
                             **(kw or {})) for r in range(ws)]
    if state is not None:
        for s in samplers:
            s.load_state_dict(json.loads(json.dumps(state)))
    out: list[list[list[int]]] = []
    iters = [iter(s) for s in samplers]
    while stop is None or len(out) < stop:
        parts = [next(it, None) for it in iters]
        if parts[0] is None:
            assert all(p is None for p in parts)  # every rank ends together
            break
        assert all(p is not None for p in parts)
        out.append(parts)  # type: ignore[arg-type]
        total = sum(len(p) for p in parts)  # type: ignore[arg-type]
        for s in samplers:
            s.step(num_targets=total)  # as if all-reduced over ranks: one global count
    states = [s.state_dict() for s in samplers]
    assert all(s == states[0] for s in states)  # the state is global: every rank saves the same
    return out, states[0]


@pytest.mark.parametrize("order", ["global", "blocks"])
@pytest.mark.parametrize("ws", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [1, 2, 5, 12, 13, 22, 23, 25])
@pytest.mark.parametrize("drop", [False, True])
def test_ranks_are_disjoint_and_complete(ws: int, n: int, drop: bool, order: str) -> None:
    bs = 3
    g = ws * bs
    kw = order_kw(order, n)
    if drop and n < g:
        with pytest.raises(ValueError, match=rf"n \({n}\) must be at least world_size \* "
                                             rf"batch_size \({g}\)"):
            EpochSampler(n, bs, seed=3, world_size=ws, drop_last=True, **kw)
        return
    perm = EpochSampler(n, bs, seed=3, **kw).permutation(0).tolist()
    batches, state = run_ranks(n, bs, ws, drop=drop, kw=kw)
    assert len(batches) == (n // g if drop else -(-n // g))
    assert (state["epoch"], state["cursor"]) == (1, 0)
    seen: list[int] = []
    for k, parts in enumerate(batches):
        lo, hi = k * g, min((k + 1) * g, n)
        m = hi - lo
        sizes = [len(p) for p in parts]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= (0 if m == g else 1)
        if m >= ws:
            assert [i for p in parts for i in p] == perm[lo:hi]  # contiguous, rank order
        else:  # the tail policy: ranks >= m get one window wrapped from the epoch's start
            assert parts[:m] == [[i] for i in perm[lo:hi]]
            assert parts[m:] == [[perm[j % n]] for j in range(ws - m)]
        seen += [i for p in parts[: min(m, ws)] for i in p] if m < ws else perm[lo:hi]
    assert seen == perm[: (n // g * g if drop else n)]
    assert len(set(seen)) == len(seen)


def two_epochs(n: int, bs: int, ws: int, seed: int, drop: bool, kw: dict[str, Any],
               state: dict | None = None, stop: int | None = None) -> tuple[list, dict]:
    """Run from ``state`` (or the start) until ``stop`` batches or the end of epoch 1."""
    out, state = run_ranks(n, bs, ws, seed, drop, state=state, stop=0, kw=kw)
    while state["epoch"] < 2 and (stop is None or len(out) < stop):
        more, state = run_ranks(n, bs, ws, seed, drop, state=state,
                                stop=None if stop is None else stop - len(out), kw=kw)
        out += more
    return out, state


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 30), st.integers(1, 4), st.integers(1, 3), st.integers(0, 10**6),
       st.booleans(), st.sampled_from(["global", "blocks"]), st.integers(1, 3))
@pytest.mark.slow
def test_resume_at_every_cut_of_two_epochs(n: int, bs: int, ws: int, seed: int,
                                           drop: bool, order: str, resume_ws: int) -> None:
    kw = order_kw(order, n)
    if drop and n < bs * ws:
        with pytest.raises(ValueError, match="or an epoch has no batch"):
            EpochSampler(n, bs, seed=seed, world_size=ws, drop_last=True, **kw)
        return
    ref, state = two_epochs(n, bs, ws, seed, drop, kw)
    assert state["epoch"] == 2 and state["cursor"] == 0
    ref_windows = [sorted(i for p in parts for i in p) for parts in ref]
    for cut in range(len(ref) + 1):
        first, state = two_epochs(n, bs, ws, seed, drop, kw, stop=cut)
        assert len(first) == cut and first == ref[:cut]
        rest, end = two_epochs(n, bs, ws, seed, drop, kw, state=state)
        assert first + rest == ref  # exact resume
        assert end["targets_seen"] == sum(len(p) for parts in ref for p in parts)
        assert end["batches_seen"] == len(ref)
        # Elastic: the same global batch dealt to another number of ranks, when it divides.
        g = bs * ws
        if g % resume_ws == 0 and not (drop or n % g):
            rest2, _ = two_epochs(n, g // resume_ws, resume_ws, seed, drop, kw, state=state)
            assert ref_windows[:cut] + [sorted(i for p in parts for i in p)
                                        for parts in rest2] == ref_windows


def test_resume_without_step_uses_the_iterator_position() -> None:
    sampler = EpochSampler(10, 3, seed=1)
    ref = list(sampler) + list(sampler)  # two epochs: each iteration starts the next
    assert sorted(i for b in ref[4:] for i in b) == list(range(10))
    for cut in range(len(ref) + 1):
        a = EpochSampler(10, 3, seed=1)
        it = iter(a)
        first = [next(it) for _ in range(min(cut, 4))]
        if cut > 4:
            it = iter(a)
            first += [next(it) for _ in range(cut - 4)]
        b = EpochSampler(10, 3, seed=1)
        b.load_state_dict(json.loads(json.dumps(a.state_dict())))
        rest = []
        while b.epoch < 2:
            rest += list(b)
        assert first + rest == ref


@pytest.mark.parametrize("order", ["global", "blocks"])
def test_elastic_resume_repeats_and_skips_nothing(order: str) -> None:
    n, g, seed = 38, 4, 5  # 38 % 4 = 2: the last phase (2 ranks) splits the tail 1 + 1
    kw = order_kw(order, n)
    perm = EpochSampler(n, g, seed=seed, **kw).permutation(0).tolist()
    phases = [(2, 3), (1, 2), (4, 3), (2, None)]  # 2 → 1 → 4 → 2 ranks, same global batch
    state: dict | None = None
    seen: list[int] = []
    global_batches = []
    for ws, stop in phases:
        batches, state = run_ranks(n, g // ws, ws, seed, state=state, stop=stop, kw=kw)
        for parts in batches:
            global_batches.append(sorted(i for p in parts for i in p))
            seen += [i for p in parts for i in p]
    assert state is not None
    assert state["epoch"] == 1 and state["cursor"] == 0 and state["targets_seen"] == n
    assert seen == perm  # every window once, in the epoch's order
    assert global_batches == [sorted(perm[k : k + g]) for k in range(0, n, g)]


def test_resume_with_another_global_batch_covers_the_rest_once() -> None:
    first, state = run_ranks(29, 4, 1, stop=3)
    rest, _ = run_ranks(29, 2, 3, state=state)
    seen = [i for parts in first + rest for p in parts for i in p]
    assert seen == EpochSampler(29, 4, seed=3).permutation(0).tolist()


def test_first_batch_of_two_billion_windows_takes_no_memory_proportional_to_n() -> None:
    tracemalloc.start()
    try:
        sampler = EpochSampler(2_000_000_000, 8, seed=0)
        first = next(iter(sampler))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(first) == 8 and all(0 <= i < 2_000_000_000 for i in first)
    assert len(set(first)) == 8
    assert peak < 4 * 2**20  # randperm would need 16 GB; the chunk of positions is 64 KiB
    assert first == EpochSampler(2_000_000_000, 8, seed=0).indices(0, 0, 8).tolist()


def test_sampler_state_errors() -> None:
    sampler = EpochSampler(10, 4, seed=0)
    with pytest.raises(ValueError, match="more batches than the sampler has yielded"):
        sampler.step(num_targets=1)
    state = sampler.state_dict()
    with pytest.raises(ValueError, match="the state has n 10, but this sampler has 11"):
        EpochSampler(11, 4, seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="the state has seed 0, but this sampler has 1"):
        EpochSampler(10, 4, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="the state has order 'global', but this sampler has "
                                         "'blocks'"):
        EpochSampler(10, 4, seed=0, **blocks_kw(10)).load_state_dict(state)
    blocks_state = EpochSampler(10, 4, seed=0, **blocks_kw(10)).state_dict()
    with pytest.raises(ValueError, match="the state has blocks"):
        EpochSampler(10, 4, seed=0, **blocks_kw(10, k=3)).load_state_dict(blocks_state)
    with pytest.raises(ValueError, match="not an EpochSampler state"):
        sampler.load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match="`batch_size` must be at least 1, but got 0"):
        EpochSampler(10, 0, seed=0)
    with pytest.raises(ValueError, match=r"`rank` must be in \[0, 2\), but got 2"):
        EpochSampler(10, 1, seed=0, rank=2, world_size=2)
    with pytest.raises(ValueError, match="`n` must be at least 1, but got 0"):
        EpochSampler(0, 1, seed=0)
    with pytest.raises(ValueError, match=r"`order` must be one of \('global', 'blocks'\), but "
                                         r"got 'random'"):
        EpochSampler(10, 1, seed=0, order="random")
    with pytest.raises(ValueError, match="`blocks` must be given with order='blocks'"):
        EpochSampler(10, 1, seed=0, order="blocks")
    with pytest.raises(ValueError, match=r"`blocks` must sum to n \(10\), but got 2 blocks "
                                         r"summing to 9"):
        EpochSampler(10, 1, seed=0, order="blocks", blocks=[4, 5])
    with pytest.raises(ValueError, match="`buffer_blocks` must be at least 1, but got 0"):
        EpochSampler(10, 1, seed=0, order="blocks", blocks=[10], buffer_blocks=0)


def test_a_version_1_state_is_refused_with_what_to_do() -> None:
    sampler = EpochSampler(10, 4, seed=0)
    old = {k: v for k, v in sampler.state_dict().items() if k not in ("order", "blocks")}
    old.update(version=1, epoch=3, cursor=4)
    with pytest.raises(ValueError, match=r"version 1 .*torch\.randperm.*finish the run with the "
                                         r"release that saved it.*next epoch"):
        sampler.load_state_dict(old)
    # The documented way on: the next epoch, from its start.
    sampler.load_state_dict({**old, "version": 2, "epoch": old["epoch"] + 1, "cursor": 0,
                             "order": "global", "blocks": None})
    assert (sampler.epoch, sampler.cursor) == (4, 0)
    with pytest.raises(ValueError, match="version 3 is not 2"):
        sampler.load_state_dict({**old, "version": 3})


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 5), st.integers(1, 5), st.booleans(),
       st.integers(0, 12))
def test_repeat_batches_names_exactly_the_repeated_windows(n: int, bs: int, ws: int,
                                                           drop: bool, cut: int) -> None:
    if drop and n < bs * ws:
        return
    samplers = [EpochSampler(n, bs, seed=1, rank=r, world_size=ws, drop_last=drop)
                for r in range(ws)]
    done = min(cut, samplers[0].batches_per_epoch - 1)
    for s in samplers:  # consume `done` batches, then name the rest's repeats
        it = iter(s)
        for _ in range(done):
            next(it)
            s.step(num_targets=1)
    flagged = [s.repeat_batches() for s in samplers]
    batches = [list(s) for s in samplers]
    seen = [i for k in range(len(batches[0])) for r in range(ws) if k not in flagged[r]
            for i in batches[r][k]]
    assert len(seen) == len(set(seen))  # what is not flagged is never a repeat
    kept = n - n % (bs * ws) if drop else n
    assert len(seen) == kept - done * bs * ws  # and every window of the rest is there once


def test_a_state_names_its_dataset() -> None:
    from reader import PackedSampler

    mine, other = "a" * 64, "b" * 64
    s = EpochSampler(10, 3, seed=0, fingerprint=mine)
    next(iter(s))
    state = s.state_dict()
    assert state["fingerprint"] == mine and json.loads(json.dumps(state)) == state
    with pytest.raises(ValueError, match=rf"saved for the dataset with fingerprint {mine}, but "
                                         rf"this sampler reads the dataset with fingerprint "
                                         rf"{other}: it belongs to another dataset"):
        EpochSampler(10, 3, seed=0, fingerprint=other).load_state_dict(state)
    plain = EpochSampler(10, 3, seed=0)
    assert "fingerprint" not in plain.state_dict()  # the state of a sampler without one
    EpochSampler(10, 3, seed=0, fingerprint=other).load_state_dict(plain.state_dict())
    plain.load_state_dict(state)  # nothing to compare with
    with pytest.raises(ValueError, match="`fingerprint` must be a string or None, but got 5"):
        EpochSampler(10, 3, seed=0, fingerprint=5)  # type: ignore[arg-type]
    p = PackedSampler([3, 2, 4, 1], 2, 4, seed=0, fingerprint=mine)
    with pytest.raises(ValueError, match=rf"PackedSampler state was saved for the dataset with "
                                         rf"fingerprint {mine}"):
        PackedSampler([3, 2, 4, 1], 2, 4, seed=0, fingerprint=other).load_state_dict(
            p.state_dict())
    PackedSampler([3, 2, 4, 1], 2, 4, seed=0).load_state_dict(p.state_dict())


def test_a_dataset_fingerprint_in_the_sampler(tmp_path) -> None:
    from reader import WindowDataset
    from tests.common.reader_data import random_docs, write_docs

    write_docs(tmp_path / "a", random_docs(20, seed=1), window=6, num_shards=2)
    write_docs(tmp_path / "b", random_docs(20, seed=2), window=6, num_shards=2)
    a, b = WindowDataset(tmp_path / "a"), WindowDataset(tmp_path / "b")
    n = min(len(a), len(b))
    state = EpochSampler(n, 4, seed=0, fingerprint=a.fingerprint).state_dict()
    with pytest.raises(ValueError, match=f"fingerprint {a.fingerprint}, but .* {b.fingerprint}"):
        EpochSampler(n, 4, seed=0, fingerprint=b.fingerprint).load_state_dict(state)
