"""`reader.mixture.blend`: which source each position of a mixture's stream draws from; every prefix
within one unit of its share (docs/mixtures.md), exact weights, schedules."""

from __future__ import annotations

import math
import random
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reader.mixture.blend import (
    DENOMINATOR,
    Blend,
    as_fraction,
    normalise_weights,
    parse_schedule,
    round_weights,
)
from tests.common.mixtures import exact_bound, weights_st


@settings(max_examples=150, deadline=None)
@given(weights_st, st.integers(1, 12), st.integers(0, 2**32))
def test_every_prefix_is_within_one_unit_of_its_share(raw: list[int], unit: int,
                                                      seed: int) -> None:
    weights = [Fraction(v, sum(raw)) for v in raw]
    blend = Blend(weights, unit=unit, counts=[0] * len(raw))
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, unit + 1, size=(400, len(raw)))
    for t in range(400):
        d, x = blend.pick(lambda d, t=t: int(sizes[t, d]))
        assert raw[d] > 0 and x == sizes[t, d]  # weight 0 is never drawn
        exact_bound(blend.counts, weights, unit)


@settings(max_examples=120, deadline=None)
@given(weights_st, st.integers(1, 12), st.lists(st.integers(1, 300), min_size=1, max_size=8),
       st.integers(0, 2**32), st.integers(0, 3))
def test_draws_at_once_are_the_draws_one_by_one(raw: list[int], unit: int, chunks: list[int],
                                                seed: int, zero_every: int) -> None:
    # Blend.run (the merge of deadlines, or the period counting windows) against pick, from
    # any counts, with sizes of 0 (a window with no scored target) among the others.
    weights = [Fraction(v, sum(raw)) for v in raw]
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, unit + 1, size=(len(raw), 4000))
    if zero_every:
        sizes[:, ::zero_every + 3] = 0
    windows = unit == 1 and not zero_every  # every size 1: sizes=None (the period, if any)
    warm = [int(v) for v in rng.integers(0, 40, size=2)]  # picks before: counts from elsewhere
    one = Blend(weights, unit=unit, counts=[0] * len(raw))
    seen = [0] * len(raw)
    expected = []
    for _ in range(sum(chunks) + warm[0]):
        d = one.pick(lambda d: int(sizes[d, seen[d]]))[0]
        expected.append(d)
        seen[d] += 1
    many = Blend(weights, unit=unit, counts=[0] * len(raw))
    pos = [0] * len(raw)
    got: list[int] = []
    for _ in range(warm[0]):  # the same first draws, one by one
        d = many.pick(lambda d: int(sizes[d, pos[d]]))[0]
        got.append(d)
        pos[d] += 1
    restored = Blend(weights, unit=unit, counts=many.counts)  # a rule restored from counts
    for m in chunks:
        left = m
        while left:
            drawn = restored.run(
                None if windows else [sizes[d, pos[d]:] for d in range(len(raw))], left,
                ([np.arange(pos[d], 4000) for d in range(len(raw))],))
            if drawn is None or not len(drawn[0]):
                d = restored.pick(lambda d: int(sizes[d, pos[d]]))[0]
                got.append(d)
                pos[d] += 1
                left -= 1
                continue
            src, taken, (where,) = drawn
            assert len(src) <= left
            for d, i in zip(src.tolist(), where.tolist(), strict=True):
                assert i == pos[d]  # each source's windows in order
                pos[d] += 1
            got += src.tolist()
            left -= len(src)
        assert restored.counts == [int(sizes[d, : pos[d]].sum()) for d in range(len(raw))]
    assert got == expected


def test_the_worked_example_and_megatrons_greedy_rule() -> None:
    blend = Blend([Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)], unit=1, counts=[0, 0, 0])
    assert [blend.pick(lambda d: 1)[0] for _ in range(12)] == [0, 1, 0, 1, 0, 2] * 2
    # Megatron's BlendedDataset rule (argmax of w·(t+1) − count) leaves these weights more
    # than one window from their share; the rule here never does.
    raw = [0.1407048431462988, 0.027533140256639395, 0.0014658326982916335, 0.4423821936402145,
           0.13250095757022903, 0.24942794939718108, 0.0059850832911455595]
    w = list(normalise_weights({str(k): v for k, v in enumerate(raw)},
                               [str(k) for k in range(7)]).values())
    counts, worst = [0] * 7, Fraction(0)
    for t in range(300):
        d = max(range(7), key=lambda d: (w[d] * (t + 1) - counts[d], -d))
        counts[d] += 1
        worst = max(worst, *(abs(c - wd * (t + 1)) for c, wd in zip(counts, w, strict=True)))
    assert worst > 1
    blend = Blend(w, unit=1, counts=[0] * 7)
    for _ in range(300):
        blend.pick(lambda d: 1)
        exact_bound(blend.counts, w, 1)


# -- weights and schedules -------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    (0.1, Fraction(1, 10)), (1, Fraction(1)), ("2/3", Fraction(2, 3)), ("0.25", Fraction(1, 4)),
    (Fraction(5, 7), Fraction(5, 7)), (np.float64(0.3), Fraction(3, 10)), (0, Fraction(0)),
])
def test_a_weight_is_an_exact_fraction_a_float_by_its_shortest_decimal(value, expected):
    assert as_fraction("web", value) == expected


@pytest.mark.parametrize(("value", "message"), [
    (True, "the weight of 'web' must be a number, but got True"),
    ("x", "the weight of 'web' must be a number, but got 'x'"),
    ("1/0", "the weight of 'web' must be a number, but got '1/0'"),
    (float("nan"), "the weight of 'web' must be a finite number, but got nan"),
    (float("inf"), "the weight of 'web' must be a finite number, but got inf"),
    (None, "the weight of 'web' must be a finite number, but got None"),
    (-1, "the weight of 'web' must be at least 0, but got -1"),
])
def test_a_weight_that_is_not_a_number_of_at_least_0_is_refused(value, message):
    with pytest.raises(ValueError) as info:
        as_fraction("web", value)
    assert str(info.value) == message


def test_weights_are_normalised_over_the_sources_a_missing_one_weighing_0():
    assert normalise_weights({"web": 3, "code": 0.5}, ["web", "code", "books"]) == {
        "web": Fraction(6, 7), "code": Fraction(1, 7), "books": Fraction(0)}
    with pytest.raises(ValueError, match=r"^the weights name 'wiki', which is not a source of "
                                         r"the mixture \(its sources: web, code\)$"):
        normalise_weights({"wiki": 1}, ["web", "code"])
    with pytest.raises(ValueError, match=r"^at least one weight must be positive, but got "
                                         r"\{'web': 0\}$"):
        normalise_weights({"web": 0}, ["web", "code"])
    with pytest.raises(ValueError, match="weights must be a mapping of source names"):
        normalise_weights([("web", 1)], ["web"])  # type: ignore[arg-type]


def test_a_schedule_is_batches_from_0_each_with_its_weights():
    names = ["a", "b"]
    assert parse_schedule({"a": 1, "b": 1}, names) == [(0, {"a": Fraction(1, 2),
                                                            "b": Fraction(1, 2)})]
    assert parse_schedule([(0, {"a": 1}), (100, {"a": 1, "b": 3})], names) == [
        (0, {"a": Fraction(1), "b": Fraction(0)}), (100, {"a": Fraction(1, 4),
                                                          "b": Fraction(3, 4)})]


@pytest.mark.parametrize(("schedule", "message"), [
    ([], "weights must be a mapping or a non-empty list of (global_batch, mapping) pairs, but "
         "got []"),
    ("a", "weights must be a mapping or a non-empty list"),
    ([(0, {"a": 1}, 3)], "schedule entry 0 must be a (global_batch, mapping) pair, but got "
                         "(0, {'a': 1}, 3)"),
    ([(1, {"a": 1})], "schedule entry 0: batches must start at 0 and increase, but got 1 after "
                      "the start"),
    ([(0, {"a": 1}), (0, {"a": 2})], "schedule entry 1: batches must start at 0 and increase, "
                                     "but got 0 after 0"),
    ([(0.0, {"a": 1})], "schedule entry 0: the batch must be an integer, but got 0.0"),
    ([(0, {"c": 1})], "the weights name 'c', which is not a source"),
])
def test_a_malformed_schedule_is_refused(schedule, message):
    with pytest.raises(ValueError) as info:
        parse_schedule(schedule, ["a", "b"])
    assert str(info.value).startswith(message)


def test_ahead_is_each_sources_distance_from_its_share():
    blend = Blend([Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)], unit=1, counts=[0, 0, 0])
    for _ in range(3):  # sources 0 1 0
        blend.pick(lambda d: 1)
    assert (blend.counts, blend.total) == ([2, 1, 0], 3)
    assert [blend.ahead(d) for d in range(3)] == [Fraction(1, 2), Fraction(0), Fraction(-1, 2)]
    restored = Blend([Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)], unit=1, counts=[2, 1, 0])
    assert [restored.pick(lambda d: 1)[0] for _ in range(9)] == [1, 0, 2, 0, 1, 0, 1, 0, 2]


# -- weights of any form -------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 10**12), st.floats(0, 1e6)), min_size=1,
                max_size=40).filter(lambda v: sum(v) > 0))
def test_weights_are_rounded_to_a_stated_denominator_only_when_needed(raw: list[Any]) -> None:
    names = [f"s{k}" for k in range(len(raw))]
    exact = {n: as_fraction(n, v) for n, v in zip(names, raw, strict=True)}
    total = sum(exact.values())
    exact = {n: v / total for n, v in exact.items()}
    got = normalise_weights(dict(zip(names, raw, strict=True)), names)
    assert sum(got.values()) == 1
    if math.lcm(*(v.denominator for v in exact.values())) <= DENOMINATOR:
        assert got == exact  # exact weights of small denominators are never touched
        return
    raised = sum(0 < v < Fraction(1, DENOMINATOR) for v in exact.values())
    for n in names:
        assert DENOMINATOR % got[n].denominator == 0
        assert (got[n] > 0) == (exact[n] > 0)  # zero stays zero, positive stays positive
        if raised:  # shares below 1/D raised to it: their units come off the others
            assert abs(got[n] - exact[n]) <= Fraction(1 + raised, DENOMINATOR)
        else:
            assert abs(got[n] - exact[n]) < Fraction(1, DENOMINATOR)


def test_token_counts_and_float_shares_draw_from_the_table() -> None:
    # Weights as token counts, or as float shares, of 60 sources: exact, they need a common
    # denominator of about 10**11 (or 10**17), too large for a table of one period of the
    # rule; rounded to multiples of 1/65,536 they have one, and every draw is a look-up.
    rng = random.Random(0)
    names = [f"s{k}" for k in range(60)]
    for raw in ([rng.randrange(10**8, 10**10) for _ in names], [rng.random() for _ in names]):
        w = normalise_weights(dict(zip(names, raw, strict=True)), names)
        blend = Blend(list(w.values()), unit=1, counts=[0] * len(names))
        assert blend._period() is not None
        drawn = blend.run(None, 5000, ())
        assert drawn is not None and len(drawn[0]) == 5000
        exact_bound(blend.counts, list(w.values()), 1)
    assert normalise_weights({"a": 5, "b": 3, "c": 2}, ["a", "b", "c"]) == {
        "a": Fraction(1, 2), "b": Fraction(3, 10), "c": Fraction(1, 5)}  # reduced, not rounded
    assert round_weights({"a": Fraction(1, 3 * 10**9), "b": 1 - Fraction(1, 3 * 10**9)}) == {
        "a": Fraction(1, DENOMINATOR), "b": Fraction(DENOMINATOR - 1, DENOMINATOR)}
