"""`reader.order.dealing`: global batches dealt to ranks (the tail policy) and its repeats.

The samplers that use it are tested end to end in tests/reader/order/test_sampler.py and
tests/reader/order/test_packing.py; here, the policy itself, for any batch and world size.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reader.order.dealing import check_int, rank_span, tail_repeat


def spans(lo, hi, *, world_size, per_rank, n):
    return [rank_span(lo, hi, rank=r, world_size=world_size, per_rank=per_rank, n=n)
            for r in range(world_size)]


def test_worked_cases():
    # A full global batch of 2 ranks × 3: each its own three.
    assert spans(6, 12, world_size=2, per_rank=3, n=20) == [(6, 9, False), (9, 12, False)]
    # A short one of 5 over 2 ranks: 3 and 2, contiguous.
    assert spans(18, 23, world_size=2, per_rank=3, n=23) == [(18, 21, False), (21, 23, False)]
    # 2 positions left for 4 ranks: ranks 2 and 3 repeat the epoch's first positions.
    assert spans(10, 12, world_size=4, per_rank=3, n=12) == [
        (10, 11, False), (11, 12, False), (0, 1, True), (1, 2, True)]


@given(st.integers(1, 16), st.integers(1, 16), st.data())
def test_every_position_of_a_batch_goes_to_exactly_one_rank(world_size, per_rank, data):
    m = data.draw(st.integers(1, world_size * per_rank))  # the batch holds m positions
    lo = data.draw(st.integers(0, 1000))
    n = lo + m + data.draw(st.integers(0, 50))
    got = spans(lo, lo + m, world_size=world_size, per_rank=per_rank, n=n)
    dealt = [p for a, b, repeat in got if not repeat for p in range(a, b)]
    assert dealt == list(range(lo, lo + m))  # in rank order, each once
    sizes = [b - a for a, b, _ in got]
    assert all(size >= 1 for size in sizes)  # no rank is left without a batch
    if m >= world_size:
        assert max(sizes) - min(sizes) <= 1 and not any(r for _, _, r in got)
    else:
        assert [r for _, _, r in got] == [False] * m + [True] * (world_size - m)
        assert all(0 <= a < n and b == a + 1 for a, b, r in got if r)


@given(st.integers(1, 8), st.integers(1, 8), st.integers(1, 300), st.booleans(), st.data())
def test_tail_repeat_names_the_batch_rank_span_repeats(world_size, per_rank, left, drop_last,
                                                       data):
    rank = data.draw(st.integers(0, world_size - 1))
    full = world_size * per_rank
    batches = -(-left // full)
    lo = (batches - 1) * full
    repeat = rank_span(lo, left, rank=rank, world_size=world_size, per_rank=per_rank,
                       n=left)[2]
    got = tail_repeat(left, batches, rank=rank, world_size=world_size, per_rank=per_rank,
                      drop_last=drop_last)
    assert got == (frozenset() if drop_last or not repeat else frozenset({batches - 1}))


@pytest.mark.parametrize(("value", "low", "message"), [
    (True, 0, "`n` must be an integer, but got True"),
    (1.0, 0, "`n` must be an integer, but got 1.0"),
    ("2", 0, "`n` must be an integer, but got '2'"),
    (-1, 0, "`n` must be at least 0, but got -1"),
])
def test_check_int_names_the_value(value, low, message):
    with pytest.raises(ValueError, match=message):
        check_int("n", value, low)
    assert check_int("n", 5, 0) == 5 and check_int("n", -5, None) == -5
