"""Tests of reader.order.permutation: a seeded bijection of [0, n), evaluated per position."""

from __future__ import annotations

import doctest
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reader.order.permutation import ROUNDS, FeistelPermutation, round_keys

PRIMES = [2, 3, 5, 7, 11, 13, 17, 31, 61, 127, 257, 1021, 4099, 65537]
EDGES = [1, 4, 15, 16, 63, 64, 65, 255, 256, 1023, 1024, 1025, 4096, 100_000]


def is_permutation(values: np.ndarray, n: int) -> bool:
    return values.shape == (n,) and bool(np.array_equal(np.sort(values), np.arange(n)))


@pytest.mark.parametrize("n", PRIMES + EDGES)
def test_is_a_permutation_for_primes_powers_and_one(n: int) -> None:
    perm = FeistelPermutation(n, round_keys(f"test:{n}"))
    assert is_permutation(perm(np.arange(n)), n)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3000), st.text(max_size=8))
def test_is_a_permutation_and_evaluates_position_by_position(n: int, label: str) -> None:
    perm = FeistelPermutation(n, round_keys(label))
    whole = perm(np.arange(n))
    assert is_permutation(whole, n)
    picks = np.array([0, n - 1, n // 2, n // 3], dtype=np.int64)
    assert perm(picks).tolist() == whole[picks].tolist()
    assert [int(perm(np.array([p]))[0]) for p in picks.tolist()] == whole[picks].tolist()


def test_the_order_is_pinned() -> None:
    # The same on every NumPy, torch and Python release: these values must never change.
    assert FeistelPermutation(7, round_keys("golden"))(np.arange(7)).tolist() == [
        0, 2, 3, 1, 5, 4, 6]
    big = FeistelPermutation(2_000_000_000, round_keys("golden"))
    assert big(np.array([0, 1, 1_999_999_999])).tolist() == [310858655, 637065372, 335997224]
    assert len(round_keys("x")) == ROUNDS and round_keys("x") == round_keys("x")


def test_another_key_gives_another_order() -> None:
    a = FeistelPermutation(1000, round_keys("a"))(np.arange(1000))
    b = FeistelPermutation(1000, round_keys("b"))(np.arange(1000))
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, np.arange(1000))
    # Mixing: the order is far from the identity (positions move about n/3 on average).
    assert 250 < float(np.abs(a - np.arange(1000)).mean()) < 420


def test_large_domains_need_no_table() -> None:
    perm = FeistelPermutation(2**62 + 7, round_keys("huge"))
    out = perm(np.array([0, 5, 2**62 + 6]))
    assert out.dtype == np.int64 and len(set(out.tolist())) == 3
    assert all(0 <= v < 2**62 + 7 for v in out.tolist())


@pytest.mark.parametrize(
    ("n", "keys", "match"),
    [
        (0, (1,), r"`n` must be a positive integer, but got 0"),
        (True, (1,), r"`n` must be a positive integer, but got True"),
        (5, (), r"`keys` must hold at least one round key, but got \(\)"),
        (2**65, (1,), r"`n` must be at most 2\*\*64"),
    ],
)
def test_bad_parameters(n: int, keys: tuple[int, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FeistelPermutation(n, keys)


def test_positions_out_of_range() -> None:
    perm = FeistelPermutation(5, round_keys("x"))
    with pytest.raises(ValueError, match=r"`positions` must be in \[0, 5\), but got values in "
                                         r"\[0, 5\]"):
        perm(np.arange(6))


def test_docstring_example_runs() -> None:
    result = doctest.testmod(sys.modules["reader.order.permutation"])
    assert result.attempted >= 3 and result.failed == 0
