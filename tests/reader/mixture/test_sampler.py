"""Tests of reader.mixture.dataset and reader.mixture.sampler (the rule they draw by:
tests/reader/mixture/test_blend.py): each source's epochs, elastic and re-weighted resume, packing,
refusals (docs/mixtures.md)."""

from __future__ import annotations

import functools
import json
import tracemalloc
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from reader import (
    EpochSampler,
    MixedDataset,
    MixtureSampler,
    PackedSampler,
    collate,
    collate_packed,
    evaluate,
    pack_rows,
)
from reader.mixture.blend import Blend, normalise_weights
from reader.mixture.sampler import source_seed
from tests.common.mixtures import FakeSource, W, exact_bound, fakes, stream, weights_st


def flat(batches: list[list[Any]]) -> list[Any]:
    return [i for b in batches for i in b]


# -- the stream ----------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(weights_st, st.lists(st.integers(1, 30), min_size=9, max_size=9),
       st.sampled_from(["windows", "targets"]), st.integers(0, 2**40))
@pytest.mark.slow
def test_shares_hold_and_each_source_draws_its_own_epochs(raw: list[int], sizes: list[int],
                                                          unit: str, seed: int) -> None:
    mixed = fakes(sizes[: len(raw)])
    names = mixed.names
    weights = dict(zip(names, raw, strict=True))
    sampler = MixtureSampler(mixed, weights, 1, seed=seed, unit=unit)
    w = normalise_weights(weights, names)
    drawn: dict[str, list[int]] = {n: [] for n in names}
    units = dict.fromkeys(names, 0)
    for batch in stream(sampler, 150):
        name, local = mixed.source_of(batch[0])
        drawn[name].append(local)
        targets = int(mixed.sources[name].window_sizes([local])[1][0])
        units[name] += targets if unit == "targets" else 1
        exact_bound(list(units.values()), list(w.values()), W if unit == "targets" else 1)
    ledger = sampler.ledger()
    for name in names:
        n = len(mixed.sources[name])
        order = EpochSampler(n, 1, seed=source_seed(seed, name))
        expected = [int(i) for e in range(len(drawn[name]) // n + 1)
                    for i in order.permutation(e)][: len(drawn[name])]
        assert drawn[name] == expected  # whole epochs, each a permutation, then the next
        assert ledger[name]["windows"] == len(drawn[name])
        assert (ledger[name]["epoch"], ledger[name]["cursor"]) == divmod(len(drawn[name]), n)


@pytest.mark.parametrize("unit", ["windows", "targets"])
def test_the_stream_is_independent_of_batch_size_and_world_size(unit: str) -> None:
    mixed = fakes([7, 30, 3])
    weights = {"s0": 5, "s1": 3, "s2": 2}
    reference = flat(stream(MixtureSampler(mixed, weights, 1, seed=3, unit=unit), 120))
    for ws, bs in ((1, 4), (2, 3), (3, 1), (4, 5)):
        ranks = [stream(MixtureSampler(mixed, weights, bs, seed=3, rank=r, world_size=ws,
                                       unit=unit), 120 // (ws * bs)) for r in range(ws)]
        got = [i for g in zip(*ranks, strict=True) for batch in g for i in batch]
        assert got == reference[: len(got)]
    other = flat(stream(MixtureSampler(mixed, weights, 1, seed=4, unit=unit), 120))
    assert other != reference


def resume(sampler_kw: dict[str, Any], mixed: MixedDataset, cut: int, total: int,
           after: dict[str, Any], mixed_after: MixedDataset | None = None) -> list[Any]:
    """Run ``cut`` batches, save, continue in a new sampler (``after`` overrides) to
    ``total`` global positions; the stream as (source, local) pairs."""
    first = MixtureSampler(mixed, **sampler_kw)
    before = stream(first, cut)
    state = json.loads(json.dumps(first.state_dict()))
    kw = {**sampler_kw, **after}
    mixed_after = mixed_after or mixed
    ws = kw.pop("world_size", 1)
    seconds = [MixtureSampler(mixed_after, **kw, rank=r, world_size=ws) for r in range(ws)]
    for s in seconds:
        s.load_state_dict(state)
    per = kw["batch_size"] * ws
    ranks = [stream(s, -(-(total - cut * sampler_kw["batch_size"]) // per)) for s in seconds]
    rest = [i for g in zip(*ranks, strict=True) for batch in g for i in batch]
    return ([mixed.source_of(i) for i in flat(before)]
            + [mixed_after.source_of(i) for i in rest])[:total]


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["windows", "targets"])
def test_resume_at_every_cut_and_at_another_world_size(unit: str) -> None:
    mixed = fakes([5, 11, 2])
    kw = {"weights": {"s0": 1, "s1": 2, "s2": 1}, "batch_size": 2, "seed": 9, "unit": unit}
    whole = [mixed.source_of(i) for i in flat(stream(MixtureSampler(mixed, **kw), 30))]
    for cut in range(30):
        for after in ({}, {"world_size": 3, "batch_size": 1}, {"batch_size": 5}):
            assert resume(kw, mixed, cut, 60, after) == whole, (cut, after)


def test_new_weights_on_resume_equal_the_schedule_and_restart_the_bound() -> None:
    mixed = fakes([6, 9, 4])
    old, new = {"s0": 3, "s1": 1, "s2": 0}, {"s0": 1, "s1": 1, "s2": 2}
    kw = {"batch_size": 3, "seed": 1}
    for g in (0, 1, 4, 7):
        schedule = [(0, old), (g, new)] if g else [(0, new)]
        scheduled = flat(stream(MixtureSampler(mixed, schedule, **kw), 20))
        assert resume({**kw, "weights": old}, mixed, g, 60, {"weights": new}) == [
            mixed.source_of(i) for i in scheduled]
    # From batch 4 on, the counts since then are within one window of the new shares.
    sampler = MixtureSampler(mixed, [(0, old), (4, new)], **kw)
    batches = stream(sampler, 20)
    counts = dict.fromkeys(mixed.names, 0)
    w = normalise_weights(new, mixed.names)
    for i in flat(batches[4:]):
        counts[mixed.source_of(i)[0]] += 1
        exact_bound(list(counts.values()), list(w.values()), 1)
    # Every source continued its epochs: nothing repeated, nothing skipped.
    for name in mixed.names:
        mine = [loc for s, loc in map(mixed.source_of, flat(batches)) if s == name]
        n = len(mixed.sources[name])
        order = EpochSampler(n, 1, seed=source_seed(1, name))
        assert mine == [int(i) for e in range(len(mine) // n + 1)
                        for i in order.permutation(e)][: len(mine)]


def test_a_source_added_on_resume_starts_at_its_first_epoch() -> None:
    two = fakes([6, 9])
    three = MixedDataset({**two.sources, "s2": FakeSource(4, salt=2)})
    got = resume({"weights": {"s0": 1, "s1": 1}, "batch_size": 2, "seed": 5}, two, 5, 40,
                 {"weights": {"s0": 1, "s1": 1, "s2": 2}}, mixed_after=three)
    for name in three.names:
        mine = [loc for s, loc in got if s == name]
        n = len(three.sources[name])
        order = EpochSampler(n, 1, seed=source_seed(5, name))
        assert mine == [int(i) for e in range(len(mine) // n + 1)
                        for i in order.permutation(e)][: len(mine)]
    assert [s for s, _ in got[:10]].count("s2") == 0 and [s for s, _ in got].count("s2") > 10


def test_refusals_name_the_source() -> None:
    mixed = fakes([6, 9])
    sampler = MixtureSampler(mixed, {"s0": 1, "s1": 1}, 2, seed=0)
    stream(sampler, 3)
    state = sampler.state_dict()
    changed = MixedDataset({"s0": FakeSource(6, salt=0), "s1": FakeSource(9, salt=7)})
    with pytest.raises(ValueError, match="source 's1' has changed"):
        MixtureSampler(changed, {"s0": 1}, 2, seed=0).load_state_dict(state)
    fewer = MixedDataset({"s0": FakeSource(6, salt=0)})
    with pytest.raises(ValueError, match="names source 's1', which this mixture lacks"):
        MixtureSampler(fewer, {"s0": 1}, 2, seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="seed 0, but this sampler has 1"):
        MixtureSampler(mixed, {"s0": 1}, 2, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="not a MixtureSampler state"):
        MixtureSampler(mixed, {"s0": 1}, 2, seed=0).load_state_dict({"format": "epoch-sampler"})
    with pytest.raises(ValueError, match="'web', which is not a source"):
        MixtureSampler(mixed, {"web": 1}, 2, seed=0)
    with pytest.raises(ValueError, match="at least one weight must be positive"):
        MixtureSampler(mixed, {"s0": 0}, 2, seed=0)
    with pytest.raises(ValueError, match="must be at least 0"):
        MixtureSampler(mixed, {"s0": -1, "s1": 2}, 2, seed=0)
    with pytest.raises(ValueError, match="must start at 0 and increase"):
        MixtureSampler(mixed, [(5, {"s0": 1})], 2, seed=0)
    with pytest.raises(ValueError, match="seq_len` must be at least the sources' window 8"):
        MixtureSampler(mixed, {"s0": 1}, 2, seed=0, seq_len=4)
    with pytest.raises(ValueError, match="more batches than the sampler has yielded"):
        MixtureSampler(mixed, {"s0": 1}, 2, seed=0).step()
    for kw, what in (({"vocab": 300}, "tokenizer vocab_size: 258 vs 300"),
                     ({"window": 16}, "window: 8 vs 16")):
        with pytest.raises(ValueError, match=f"sources 'a' and 'b' differ in their {what}"):
            MixedDataset({"a": FakeSource(3), "b": FakeSource(3, **kw)})


def picked(mixed: MixedDataset, weights: dict[str, Any], seed: int, unit: str,
           count: int) -> list[tuple[str, int]]:
    """The rule's first ``count`` draws, by :meth:`Blend.pick` one at a time."""
    w = list(normalise_weights(weights, mixed.names).values())
    blend = Blend(w, unit=W if unit == "targets" else 1, counts=[0] * len(w))
    taken = [0] * len(w)
    orders = [EpochSampler(len(mixed.sources[n]), 1, seed=source_seed(seed, n))
              for n in mixed.names]

    def local(d: int, j: int) -> int:
        n = orders[d].n
        return int(orders[d].indices(j // n, j % n, j % n + 1)[0])

    def size(d: int) -> int:
        src = mixed.sources[mixed.names[d]]
        return int(src.window_sizes([local(d, taken[d])])[1][0]) if unit == "targets" else 1

    out = []
    for _ in range(count):
        d = blend.pick(size)[0]
        out.append((mixed.names[d], local(d, taken[d])))
        taken[d] += 1
    return out


@pytest.mark.parametrize("unit", ["windows", "targets"])
def test_weights_as_token_counts_draw_the_rules_stream(unit: str) -> None:
    # Token counts (rounded to multiples of 1/65,536) and float shares: the stream, drawn by
    # the table or by picks where the merge's integers would leave int64, is the rule's
    # pick by pick.
    mixed = fakes([7, 30, 5, 12, 9])
    for raw in ([3_141_592_653, 2_718_281_828, 1_414_213_562, 1_732_050_807, 999_999_937],
                [0.31, 1 / 3, 0.05, 2 ** 0.5, 0.0]):
        weights = dict(zip(mixed.names, raw, strict=True))
        got = [mixed.source_of(i) for i in flat(stream(
            MixtureSampler(mixed, weights, 8, seed=3, unit=unit), 40))]
        assert got == picked(mixed, weights, 3, unit, len(got))


@pytest.mark.parametrize("unit", ["windows", "targets"])
def test_an_edited_since_count_is_refused_not_drawn_from_one_source(unit: str) -> None:
    # Claiming that nothing was drawn from s1 since the weights took effect would make the
    # rule draw s1 alone until it caught up (100 batches); the counts are recomputed instead.
    mixed = fakes([60, 90, 40])
    sampler = MixtureSampler(mixed, {"s0": 1, "s1": 1, "s2": 1}, 4, seed=0, unit=unit)
    stream(sampler, 25)
    state = json.loads(json.dumps(sampler.state_dict()))
    MixtureSampler(mixed, {"s0": 1, "s1": 1, "s2": 1}, 4, seed=0, unit=unit).load_state_dict(
        state)  # the state as saved loads
    field = "windows" if unit == "windows" else "targets"
    state["since"]["counts"]["s1"] = state["sources"]["s1"][field]
    with pytest.raises(ValueError, match=r"`since.counts.s1` leaves 0 .* drawn from 's1'"):
        MixtureSampler(mixed, {"s0": 1, "s1": 1, "s2": 1}, 4, seed=0,
                       unit=unit).load_state_dict(state)


def _set(path: str, value: Any) -> Any:
    def edit(state: dict[str, Any]) -> None:
        *keys, last = path.split(".")
        target = state
        for k in keys:
            target = target[int(k)] if isinstance(target, list) else target[k]
        if value is KeyError:
            del target[last]
        elif isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return edit


# Each impossible edit, and the field its refusal names. On the sampler of the test below
# they crashed later (OverflowError, ZeroDivisionError, IndexError, KeyError) or were drawn.
EDITS = [
    (_set("weights.s0", "1e400"), "weights"),
    (_set("weights.s0", "1/0"), "weights.s0"),
    (_set("weights.web", "1/2"), "weights.web"),
    (_set("since.batch", KeyError), "since"),
    (_set("since.batch", 10**6), "since.batch"),
    (_set("since.counts.s0", -1), "since.counts.s0"),
    (_set("since.counts.s0", 10**30), "since.counts.s0"),
    (_set("sources.s0.targets", 1), "sources.s0.targets"),
    (_set("sources.s0.windows", 3), "sources.s0.windows"),
    (_set("sources.s0.epoch", 10**20), "sources.s0.windows"),
    (_set("sources.s1.cursor", KeyError), "sources.s1"),
    (_set("sources.s1.epoch", "1"), "sources.s1.epoch"),
    (_set("batches_seen", -2), "batches_seen"),
    (_set("position", 1), "position"),
    (_set("rows", 10**6), "rows"),
    (_set("open_rows_windows.0.1.0.1", 10**9), r"open_rows_windows\[0\]\[1\]\[0\]\[1\]"),
    (_set("open_rows_windows.0.1.0.2", 1000), r"open_rows_windows\[0\]\[1\]\[0\]\[2\]"),
    (_set("open_rows_windows.0.0", 1), r"open_rows_windows\[0\]\[0\]"),
    (_set("open_rows_windows.0.1.0.0", "web"), r"open_rows_windows\[0\]\[1\]\[0\]"),
    (_set("open_rows_windows", [[1, []]] * 9), "open_rows_windows"),
]


@pytest.mark.parametrize(("edit", "field"), EDITS)
def test_an_impossible_state_is_refused_naming_the_field(edit: Any, field: str) -> None:
    mixed = fakes([6, 9, 4])
    kw = {"weights": {"s0": 3, "s1": 2, "s2": 1}, "batch_size": 3, "seed": 2,
          "unit": "targets", "seq_len": 2 * W, "open_rows": 4}
    sampler = MixtureSampler(mixed, **kw)
    stream(sampler, 7)
    state = json.loads(json.dumps(sampler.state_dict()))
    assert state["open_rows_windows"]  # windows are waiting in open rows
    edit(state)
    fresh = MixtureSampler(mixed, **kw)
    with pytest.raises(ValueError, match=f"MixtureSampler state's `{field}`"):
        fresh.load_state_dict(state)


def test_a_mixture_of_billion_window_sources_yields_at_once() -> None:
    mixed = fakes([10**9, 2 * 10**9, 10**9])
    tracemalloc.start()
    for unit, seq_len in (("windows", None), ("targets", None), ("targets", 2 * W)):
        sampler = MixtureSampler(mixed, {"s0": 1, "s1": 1, "s2": 1}, 64, seed=0, unit=unit,
                                 seq_len=seq_len)
        batch = next(iter(sampler))
        assert len(batch) == 64
        assert len(json.dumps(sampler.state_dict())) < 4000
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 8 * 2**20  # three 8192-window read-aheads, nothing of size 10**9


# -- packing -------------------------------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(weights_st, st.integers(W, 3 * W), st.integers(1, 6), st.integers(0, 2**20))
def test_packed_rows_are_the_first_fit_of_the_stream(raw: list[int], seq_len: int,
                                                     open_rows: int, seed: int) -> None:
    mixed = fakes([5, 13, 3, 8, 2, 9, 4, 1, 6][: len(raw)])
    weights = dict(zip(mixed.names, raw, strict=True))
    plain = flat(stream(MixtureSampler(mixed, weights, 1, seed=seed, unit="targets"), 300))
    packed = MixtureSampler(mixed, weights, 3, seed=seed, unit="targets", seq_len=seq_len,
                            open_rows=open_rows)
    rows = flat(stream(packed, 12))
    lengths = mixed.window_sizes(plain)[0]
    expected = pack_rows(lengths, seq_len=seq_len, open_rows=open_rows)
    members = [[plain[int(p)] for p in expected.members[a:b]]
               for a, b in zip(expected.starts[:-1], expected.starts[1:], strict=True)]
    assert rows == members[: len(rows)]
    for row in rows:
        assert int(mixed.window_sizes(row)[0].sum()) <= seq_len
    # The shares hold in targets over the stream the rows were cut from (the ledger).
    ledger = packed.ledger()
    w = normalise_weights(weights, mixed.names)
    exact_bound([ledger[n]["targets"] for n in mixed.names], list(w.values()), W)


@pytest.mark.slow
def test_packed_resume_at_every_cut_at_another_world_size() -> None:
    mixed = fakes([5, 13, 3])
    kw = {"weights": {"s0": 2, "s1": 1, "s2": 1}, "batch_size": 2, "seed": 2,
          "unit": "targets", "seq_len": 2 * W, "open_rows": 3}
    whole = flat(stream(MixtureSampler(mixed, **kw), 20))
    for cut in range(20):
        first = MixtureSampler(mixed, **kw)
        before = stream(first, cut)
        state = json.loads(json.dumps(first.state_dict()))
        ranks = [MixtureSampler(mixed, **{**kw, "batch_size": 1}, rank=r, world_size=4)
                 for r in range(4)]
        for s in ranks:
            s.load_state_dict(state)
        rest = [row for g in zip(*[stream(s, 10) for s in ranks], strict=True)
                for b in g for row in b]
        assert (flat(before) + rest)[:40] == whole, cut


# -- the datasets: items, batches, loaders, evaluation -------------------------------------


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_a_dataloader_resumes_the_mixture_exactly(three: MixedDataset, workers: int) -> None:
    kw = {"weights": {"web": 3, "code": 2, "books": 1}, "batch_size": 3, "seed": 4,
          "unit": "targets"}
    pad = functools.partial(collate, pad_id=three.eos_id)

    def run(sampler: MixtureSampler, count: int) -> list[list[int]]:
        loader = DataLoader(three, batch_sampler=sampler, collate_fn=pad, num_workers=workers)
        out = []
        for _, batch in zip(range(count), loader, strict=False):
            out.append(batch["input_ids"].tolist())
            sampler.step(batch)
        return out

    whole = run(MixtureSampler(three, **kw), 12)
    first = MixtureSampler(three, **kw)
    before = run(first, 5)
    second = MixtureSampler(three, **kw)
    second.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert second.targets_seen == first.targets_seen > 0
    assert before + run(second, 7) == whole


def test_evaluate_by_source_equals_each_source_alone(three: MixedDataset) -> None:
    torch.manual_seed(0)
    emb = torch.nn.Embedding(three.vocab_size, three.vocab_size).double()

    def forward(b: dict) -> torch.Tensor:
        return emb(b["input_ids"])

    pad = functools.partial(collate, pad_id=three.eos_id)
    loader = DataLoader(three, batch_sampler=EpochSampler(len(three), 4, seed=1),
                        collate_fn=pad)
    with torch.no_grad():
        got = evaluate(forward, loader, by_source=True, distributed=False)
        packed = evaluate(forward, DataLoader(
            three, batch_sampler=PackedSampler(three.lengths, 2, 2 * W, seed=1),
            collate_fn=functools.partial(collate_packed, seq_len=2 * W, pad_id=three.eos_id)),
            by_source=True, distributed=False)
    assert list(got["by_source"]) == list(three.names)
    for name in three.names:
        ds = three.sources[name]
        alone = evaluate(forward, DataLoader(ds, batch_size=5, collate_fn=pad),
                         distributed=False)
        for result in (got, packed):
            mine = result["by_source"][name]
            assert mine["targets"] == ds.scored_targets == alone["targets"]
            assert abs(mine["nll"] - alone["nll"]) < 1e-9 * alone["nll"]
    assert got["targets"] == sum(three.sources[n].scored_targets for n in three.names)
    with pytest.raises(ValueError, match="by_source needs batches of a MixedDataset"):
        evaluate(forward, DataLoader(three.sources["web"], batch_size=5, collate_fn=pad),
                 by_source=True, distributed=False)
