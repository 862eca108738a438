"""Which source each position of a mixture's stream draws from (see ``docs/mixtures.md``).

Contract: weights ``w_d`` (exact rationals, summing to 1) and a unit size ``X`` (1 when
counting windows; the window W when counting scored targets, so that no window is larger).
After ``T`` units drawn since the weights took effect, source d holds ``c_d`` of them and is
``c_d − w_d·T`` ahead of its share (behind when negative). The next draw, of source d's next
window of ``x_d ≤ X`` units, goes to the source with the **earliest deadline** — the total
``(c_d + X) / w_d`` at which it would fall a whole unit X behind — among the sources that
would not get a whole X ahead by drawing it (``c_d + x_d − w_d·(T + x_d) < X``); ties go to
the first source in order. A source of weight 0 is never drawn.

Guarantee, at every prefix since the weights took effect: ``|c_d − w_d·T| < X`` for every d
(each source within one window, or one window's targets, of its share). With X = 1 this is
Balinski and Young's quota method (a house-monotone apportionment that stays within quota);
the greedy "largest deficit" rule of Megatron's ``BlendedDataset`` does not have this bound
with more than three sources (it reaches 1.1 windows). Some source is always eligible: the
positive-weight source furthest behind has ``c_d − w_d·T ≤ 0``, so drawing ``x_d ≤ X`` leaves
it less than X ahead. Every comparison is in integers (weights as exact fractions), so the
stream is the same on every platform and the bound is exact, not up to rounding.

Worked example: weights 1/2, 1/3, 1/6 counting windows → the sources of positions 0… are
0 1 0 1 0 2 | 0 1 0 1 0 2 | …, each within one window of its share at every prefix.
"""

from __future__ import annotations

import heapq
import math
import numbers
import operator
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Blend", "as_fraction", "normalise_weights", "parse_schedule"]


def as_fraction(name: str, value: Any) -> Fraction:
    """A weight as an exact fraction: a float by its shortest decimal (0.1 is 1/10)."""
    if isinstance(value, bool):
        raise ValueError(f"the weight of {name!r} must be a number, but got {value!r}")
    if isinstance(value, str):
        try:
            f = Fraction(value)
        except (ValueError, ZeroDivisionError) as e:
            raise ValueError(f"the weight of {name!r} must be a number, but got {value!r}") from e
    elif isinstance(value, Fraction | numbers.Integral):
        f = Fraction(value)
    elif isinstance(value, numbers.Real) and math.isfinite(value):
        f = Fraction(repr(float(value)))
    else:
        raise ValueError(f"the weight of {name!r} must be a finite number, but got {value!r}")
    if f < 0:
        raise ValueError(f"the weight of {name!r} must be at least 0, but got {value!r}")
    return f


def normalise_weights(weights: Mapping[str, Any], names: Sequence[str]) -> dict[str, Fraction]:
    """``weights`` over ``names`` (a missing name weighs 0), normalised to sum to 1.

    Raises:
        ValueError: not a mapping, a name that is not a source, a negative or non-number
            weight, or all weights 0.
    """
    if not isinstance(weights, Mapping):
        raise ValueError(f"weights must be a mapping of source names to numbers, but got "
                         f"{weights!r}")
    unknown = [k for k in weights if k not in names]
    if unknown:
        raise ValueError(f"the weights name {unknown[0]!r}, which is not a source of the "
                         f"mixture (its sources: {', '.join(names)})")
    raw = {name: as_fraction(name, weights.get(name, 0)) for name in names}
    total = sum(raw.values())
    if total == 0:
        raise ValueError(f"at least one weight must be positive, but got {dict(weights)!r}")
    return {name: w / total for name, w in raw.items()}


def parse_schedule(weights: Mapping[str, Any] | Sequence[tuple[int, Mapping[str, Any]]],
                   names: Sequence[str]) -> list[tuple[int, dict[str, Fraction]]]:
    """A mapping (weights for the whole run) or a schedule ``[(global_batch, mapping), …]``
    (strictly increasing batches, the first 0), as normalised ``(batch, weights)`` pairs.

    Raises:
        ValueError: a malformed schedule or weights (see :func:`normalise_weights`).
    """
    if isinstance(weights, Mapping):
        return [(0, normalise_weights(weights, names))]
    if isinstance(weights, str | bytes) or not isinstance(weights, Sequence) or not weights:
        raise ValueError(f"weights must be a mapping or a non-empty list of (global_batch, "
                         f"mapping) pairs, but got {weights!r}")
    out: list[tuple[int, dict[str, Fraction]]] = []
    for i, entry in enumerate(weights):
        if not isinstance(entry, Sequence) or len(entry) != 2:
            raise ValueError(f"schedule entry {i} must be a (global_batch, mapping) pair, but "
                             f"got {entry!r}")
        batch, mapping = entry
        if isinstance(batch, bool) or not isinstance(batch, numbers.Integral):
            raise ValueError(f"schedule entry {i}: the batch must be an integer, but got "
                             f"{batch!r}")
        previous = out[-1][0] if out else -1
        if (not out and batch != 0) or batch <= previous:
            raise ValueError(f"schedule entry {i}: batches must start at 0 and increase, but "
                             f"got {batch} after {previous if out else 'the start'}")
        out.append((int(batch), normalise_weights(mapping, names)))
    return out


_MAX_CYCLE = 1 << 20  # entries of a period's table of counts
_MAX_PHASES = 1024  # batches by phase of the period kept (see Blend.take_batch)


def _one(d: int) -> int:
    return 1


class Blend:
    """The rule of the module docstring from a given point: counts since the weights took
    effect (``counts``, ``total``) and ``pick`` to draw the next position.

    Args:
        weights: the normalised weights, in source order.
        unit: X, the largest size of one draw.
        counts: each source's units drawn since the weights took effect.
    """

    def __init__(self, weights: Sequence[Fraction], *, unit: int,
                 counts: Sequence[int]) -> None:
        denominator = math.lcm(*(w.denominator for w in weights))
        ints = [int(w * denominator) for w in weights]
        g = math.gcd(*ints)
        self._a = [a // g for a in ints]
        self._A = sum(self._a)
        self._X = unit
        self._counts: list[int] | None = [int(c) for c in counts]
        self.total = sum(self._counts)
        positive = [a for a in self._a if a]
        lcm = math.lcm(*positive)
        # The deadline (c + X) / w, scaled by the integer lcm / A so that keys are integers.
        self._step = [lcm // a if a else 0 for a in self._a]
        self._heap: list[tuple[int, int]] | None = None  # built when first needed
        self._cycle: list[int] | None = None
        self._prefix: npt.NDArray[np.int64] = np.zeros((0, 0), np.int64)
        self._phases: dict[int, tuple[list[int], Callable[[list[int]], Any] | None]] = {}

    @property
    def counts(self) -> list[int]:
        """Each source's units drawn since the weights took effect."""
        if self._counts is None:  # after take(): read off the period's table
            self._counts = self._counts_at(self.total)
        return self._counts

    def pick(self, size_of: Callable[[int], int]) -> tuple[int, int]:
        """Draw the next position: ``(source, its size)``; ``size_of(d)`` is the size of
        source d's next window (1 when counting windows)."""
        if self._heap is None:
            self._rebuild_heap()
        heap, a, big_a, limit = self._heap, self._a, self._A, self._A * self._X
        counts = self.counts
        skipped = []
        while True:
            key, d = heapq.heappop(heap)  # type: ignore[arg-type]
            x = size_of(d)
            if big_a * (counts[d] + x) - a[d] * (self.total + x) < limit:
                break
            skipped.append((key, d))
        counts[d] += x
        self.total += x
        heapq.heappush(heap, (key + x * self._step[d], d))  # type: ignore[arg-type]
        for item in skipped:
            heapq.heappush(heap, item)  # type: ignore[arg-type]
        return d, x

    def draw(self, m: int, sizes: Sequence[Sequence[int]], values: Sequence[Sequence[Any]],
             starts: Sequence[int]) -> tuple[list[Any], list[int]]:
        """The next ``m`` draws at once, as :meth:`pick` would draw them one by one: source
        d's i-th next window has size ``sizes[d][starts[d] + i]``, and ``values[d][…]`` at
        the same place is what is given for it. Returns the values in draw order and how many
        windows each source gave (the lists must reach that far)."""
        if self._heap is None:
            self._rebuild_heap()
        heap, a, big_a, limit, step = self._heap, self._a, self._A, self._A * self._X, self._step
        counts, total = self.counts, self.total
        pos = list(starts)
        out = []
        pop, push, replace = heapq.heappop, heapq.heappush, heapq.heapreplace
        for _ in range(m):
            key, d = heap[0]  # type: ignore[index]
            j = pos[d]
            x = sizes[d][j]
            if big_a * (counts[d] + x) - a[d] * (total + x) < limit:
                replace(heap, (key + x * step[d], d))  # type: ignore[arg-type]
            else:  # the earliest is a whole unit ahead: as pick, the next eligible one
                skipped = [pop(heap)]  # type: ignore[arg-type]
                while True:
                    key, d = pop(heap)  # type: ignore[arg-type]
                    j = pos[d]
                    x = sizes[d][j]
                    if big_a * (counts[d] + x) - a[d] * (total + x) < limit:
                        break
                    skipped.append((key, d))
                push(heap, (key + x * step[d], d))  # type: ignore[arg-type]
                for item in skipped:
                    push(heap, item)  # type: ignore[arg-type]
            counts[d] += x
            total += x
            pos[d] = j + 1
            out.append(values[d][j])
        self.total = total
        return out, [p - s for p, s in zip(pos, starts, strict=True)]

    def take(self, m: int) -> list[int]:
        """The sources of the next ``m`` draws of one unit each (counting windows), at once.

        Counting windows, the draws are periodic: after A draws (A = Σ of the integer
        weights) every source holds exactly its share (the bound leaves no other integer),
        the deadlines have all moved by the same amount and the rule is where it started. So
        one period, computed once, gives every draw by position: the same sources as
        :meth:`pick`, without a heap step per window. Long periods use :meth:`pick`.
        """
        if self._cycle is None:
            self._cycle = []
            if self._X == 1 and self._A * len(self._a) <= _MAX_CYCLE:
                fresh = Blend([Fraction(a, self._A) for a in self._a], unit=1,
                              counts=[0] * len(self._a))
                cycle = [fresh.pick(_one)[0] for _ in range(self._A)]
                table = np.zeros((self._A + 1, len(self._a)), np.int64)
                table[np.arange(1, self._A + 1), cycle] = 1
                self._prefix = np.cumsum(table, axis=0)  # counts after r draws of a period
                if self._counts_at(self.total) == self.counts:
                    self._cycle = cycle
                else:
                    self._prefix = np.zeros((0, 0), np.int64)
        if not self._cycle:  # no period, or counts from elsewhere: draw one by one
            return [self.pick(_one)[0] for _ in range(m)]
        cycle, period = self._cycle, self._A
        r = self.total % period
        drawn = cycle[r : r + m]
        while len(drawn) < m:
            drawn += cycle[: m - len(drawn)]
        self.total += m
        self._counts = None  # read off the table when asked for
        self._heap = None
        return drawn

    def take_batch(self, m: int) -> tuple[list[int], Callable[[list[int]], Any] | None] | None:
        """:meth:`take` as a batch: how many of the next ``m`` draws each source gives, and
        a function that puts the concatenation, source by source, of each source's windows
        in draw order (``None``: already in order); ``None`` when there is no period (then
        draw with :meth:`pick`). Both depend only on the phase in the period, so they are
        computed once per phase."""
        if self._cycle is None:
            self.take(0)  # the period, if any
        if not self._cycle:
            return None
        r = self.total % self._A
        found = self._phases.get(r)
        if found is None:
            drawn = self.take(m)
            self.total -= m
            n = len(self._a)
            taken = [0] * n
            for d in drawn:
                taken[d] += 1
            starts = [0] * n
            for d in range(1, n):
                starts[d] = starts[d - 1] + taken[d - 1]
            positions = []
            for d in drawn:
                positions.append(starts[d])
                starts[d] += 1
            ordered = positions == sorted(positions)
            found = (taken, None if ordered else operator.itemgetter(*positions))
            if len(self._phases) >= _MAX_PHASES:
                self._phases.clear()
            self._phases[r] = found
        self.total += m
        self._counts = None
        self._heap = None
        return found

    def _counts_at(self, total: int) -> list[int]:
        full, r = divmod(total, self._A)
        return [int(p) + full * a for p, a in zip(self._prefix[r].tolist(), self._a,
                                                   strict=True)]

    def _rebuild_heap(self) -> None:
        self._heap = [((c + self._X) * m, d) for d, (c, m, a) in
                      enumerate(zip(self.counts, self._step, self._a, strict=True)) if a]
        heapq.heapify(self._heap)

    def ahead(self, d: int) -> Fraction:
        """How far source d is ahead of its share, in units (``c_d − w_d·T``)."""
        return Fraction(self.counts[d] * self._A - self._a[d] * self.total, self._A)
