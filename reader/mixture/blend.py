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

Weights of any form (token counts, float shares) are normalised exactly and, when the shares
need a common denominator above ``DENOMINATOR`` (65,536), rounded to multiples of
``1/DENOMINATOR`` by largest remainder (:func:`round_weights`): then counting windows has a
period of at most 65,536 draws, read off a table.

Worked example: weights 1/2, 1/3, 1/6 counting windows → the sources of positions 0… are
0 1 0 1 0 2 | 0 1 0 1 0 2 | …, each within one window of its share at every prefix.
"""

from __future__ import annotations

import heapq
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["DENOMINATOR", "Blend", "as_fraction", "normalise_weights", "parse_schedule",
           "round_weights"]

DENOMINATOR = 1 << 16  # weights needing a larger common denominator are rounded to 1/65,536


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


def round_weights(shares: Mapping[str, Fraction],
                  denominator: int = DENOMINATOR) -> dict[str, Fraction]:
    """Exact shares (summing to 1) as multiples of ``1/denominator``, when they need a larger
    common denominator; otherwise unchanged.

    Largest remainder (Hamilton's method): each share is first ``floor(share · D) / D``, but
    a positive share is at least ``1/D``; the units left over go one each to the largest
    remainders (ties to the first name); were the minimums units too many, they come off one
    at a time the share most rounded up. So they sum to exactly 1, a zero stays zero, a
    positive share stays positive, and every rounded share is within ``1/D`` of the exact one
    (within ``(1 + k)/D`` when k positive shares below ``1/D`` were raised to it).

    Raises:
        ValueError: more positive shares than ``denominator``.
    """
    if math.lcm(*(w.denominator for w in shares.values())) <= denominator:
        return dict(shares)
    names = list(shares)
    positive = [n for n in names if shares[n] > 0]
    if len(positive) > denominator:
        raise ValueError(f"{len(positive)} sources of positive weight cannot share "
                         f"{denominator} units")
    scaled = {n: shares[n] * denominator for n in names}
    units = {n: max(1, math.floor(scaled[n])) if scaled[n] > 0 else 0 for n in names}
    rest = {n: scaled[n] - math.floor(scaled[n]) for n in positive}
    left = denominator - sum(units.values())
    if left >= 0:
        for n in sorted(positive, key=lambda n: -rest[n])[:left]:
            units[n] += 1
    for _ in range(-left):  # the minimums took too many: one each off the most rounded up
        n = max((n for n in positive if units[n] > 1), key=lambda n: units[n] - scaled[n])
        units[n] -= 1
    return {n: Fraction(units[n], denominator) for n in names}


def normalise_weights(weights: Mapping[str, Any], names: Sequence[str]) -> dict[str, Fraction]:
    """``weights`` over ``names`` (a missing name weighs 0), normalised to sum to 1, and
    rounded to multiples of ``1/DENOMINATOR`` when they need a larger common denominator
    (:func:`round_weights`: token counts, float shares), so that every draw is a table look-up.

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
    return round_weights({name: w / total for name, w in raw.items()})


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


_LIMIT = 1 << 62  # |integers| of a vectorised draw stay below this (int64 with room)
_MAX_CYCLE = 1 << 20  # entries of a period's table of counts


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
        self._counts = [int(c) for c in counts]
        self.total = sum(self._counts)
        positive = [a for a in self._a if a]
        lcm = math.lcm(*positive)
        # The deadline (c + X) / w, scaled by the integer lcm / A so that keys are integers.
        self._step = [lcm // a if a else 0 for a in self._a]
        self._lcm = lcm
        self._heap: list[tuple[int, int]] | None = None  # built when first needed
        self._cycle: npt.NDArray[np.int64] | None = None  # see _period

    @property
    def counts(self) -> list[int]:
        """Each source's units drawn since the weights took effect."""
        assert self._counts is not None
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

    def run(self, sizes: Sequence[npt.NDArray[np.int64]] | None, m: int,
            values: Sequence[Sequence[npt.NDArray[np.int64]]] = ()
            ) -> tuple[npt.NDArray[np.int64], list[int], list[npt.NDArray[np.int64]]] | None:
        """Up to ``m`` next draws at once, exactly as :meth:`pick` draws them one by one.

        ``sizes[d]`` holds the sizes of source d's next windows (as many as are known, at
        least one for a source of positive weight; ``None``: every size is 1, counting
        windows) and each ``values[v][d]`` something given for each of them (as long).
        Counting windows with a period (see :meth:`_period`), the draws are read off it.
        Otherwise, while no source is skipped, the rule is a merge: source d's i-th next
        window is drawn at its deadline key ``(c_d + S_d(i) + X) · lcm / a_d`` (``S_d(i)``
        the sizes of its windows before it), keys grow along each source, and the draws are
        all keys in increasing order, ties to the first source. So the keys up to a horizon
        are sorted at once (rebased to the current total, so they stay small whatever the
        position), and every draw of the merge is checked against the eligibility rule; the
        draws before the first one :meth:`pick` would skip are kept.

        Returns:
            ``(sources, taken, gathered)``: the sources in draw order (empty when the very
            next draw is one that :meth:`pick` must make), how many windows each source
            gave, and each ``values[v]`` in draw order; or None when the integers could
            leave int64 (weights of huge denominators): then draw with :meth:`pick`.
        """
        if sizes is None:
            cycle = self._period()
            if cycle is not None:
                return self._run_period(cycle, m, values)
            sizes = [np.ones(len(v), np.int64) for v in values[0]]
        a, big_a, x_unit, lcm = self._a, self._A, self._X, self._lcm
        counts, total, width = self._counts, self.total, len(self._a)
        if lcm * big_a * 3 * x_unit * (width + 1) >= _LIMIT:
            return None  # the keys leave int64 whatever the sizes: known before any work
        active = [d for d, ad in enumerate(a) if ad]
        means = []  # each source's mean size: how many windows a span of the total holds
        for d in active:
            head = sizes[d][:256]
            means.append(max(float(head.mean()), 1e-9) if len(head) else float(x_unit))
        per_unit = sum(a[d] / big_a / mean for d, mean in zip(active, means, strict=True))
        span = m / per_unit * 1.05 + len(active) * x_unit  # units that give about m draws
        parts = [sizes[d][: int(1.5 * a[d] / big_a * span / mean) + 16]
                 for d, mean in zip(active, means, strict=True)]
        befores = [np.cumsum(part) - part for part in parts]  # S_d(i)
        top = max(int(b[-1]) + int(p[-1]) for b, p in zip(befores, parts, strict=True))
        if lcm * big_a * (len(active) * top + 3 * x_unit) * (width + 1) >= _LIMIT:
            return None
        excess = [0] * width  # A·(c_d − w_d·T) = A times how far d is ahead: |·| < A·X
        keys = []
        for d, before in zip(active, befores, strict=True):
            excess[d] = big_a * counts[d] - a[d] * total
            keys.append(self._step[d] * (excess[d] + big_a * (before + x_unit)))
        # The horizon: every key up to it is known (the last key of each source's part),
        # about ``span`` units ahead, and at least the first draw.
        known = min(int(k[-1]) for k in keys)
        horizon = min(known, max(int(lcm * span), min(int(k[0]) for k in keys)))
        cut = [int(np.searchsorted(k, horizon, side="right")) for k in keys]
        key = np.concatenate([k[:c] for k, c in zip(keys, cut, strict=True)])
        src = np.repeat(np.asarray(active, np.int64), cut)
        x = np.concatenate([p[:c] for p, c in zip(parts, cut, strict=True)])
        # By (key, source); a window of size 0 repeats its source's key: a stable sort
        # keeps such windows in their order (otherwise (key, source) is unique).
        order = np.argsort(key * width + src, kind="stable" if x.min() == 0 else None)
        src = src[order]
        x = x[order]
        before = np.concatenate([b[:c] for b, c in zip(befores, cut, strict=True)])[order]
        a_of = np.asarray(a, np.int64)[src]
        drawn = np.cumsum(x) - x  # units drawn in this run before each draw
        e_of = np.asarray(excess, np.int64)[src]
        ok = e_of + big_a * before - a_of * drawn + (big_a - a_of) * x < big_a * x_unit
        n = min(m, len(src))
        if not ok[:n].all():
            n = int(np.argmin(ok[:n]))
        src = src[:n]
        taken = np.bincount(src, minlength=width).tolist()
        for d, before, part in zip(active, befores, parts, strict=True):
            if taken[d]:
                counts[d] += int(before[taken[d] - 1]) + int(part[taken[d] - 1])
        self.total = total + int(x[:n].sum())
        self._heap = None
        kept = order[:n]
        gathered = [np.concatenate([v[d][:c] for d, c in zip(active, cut, strict=True)])[kept]
                    for v in values]
        return src, taken, gathered

    def _period(self) -> npt.NDArray[np.int64] | None:
        """Counting windows, the draws are periodic: after A draws (A = Σ of the integer
        weights) every source holds exactly its share (the bound leaves no other integer),
        the deadlines have all moved by the same amount and the rule is where it started.
        So one period, drawn once with :meth:`pick`, gives every draw by position, as long
        as the counts are the period's at this total (not so for counts from elsewhere).
        None when there is no such period (a long period, or other counts)."""
        if self._cycle is None:
            self._cycle = np.zeros(0, np.int64)
            big_a, width = self._A, len(self._a)
            if big_a * width <= _MAX_CYCLE or big_a <= DENOMINATOR:
                fresh = Blend([Fraction(a, big_a) for a in self._a], unit=1,
                              counts=[0] * width)
                cycle = np.array([fresh.pick(_one)[0] for _ in range(big_a)], np.int64)
                full, r = divmod(self.total, big_a)
                at = np.bincount(cycle[:r], minlength=width).tolist()
                if [c + full * a for c, a in zip(at, self._a, strict=True)] == self._counts:
                    self._cycle = cycle
        return self._cycle if len(self._cycle) else None

    def _run_period(self, cycle: npt.NDArray[np.int64], m: int,
                    values: Sequence[Sequence[npt.NDArray[np.int64]]]
                    ) -> tuple[npt.NDArray[np.int64], list[int], list[npt.NDArray[np.int64]]]:
        """:meth:`run` by the period: the next m sources read off it by position."""
        width = len(self._a)
        first = self.total % len(cycle)
        src = np.tile(cycle, (first + m) // len(cycle) + 1)[first : first + m]
        taken = np.bincount(src, minlength=width).tolist()
        known = [len(v) for v in values[0]] if values else taken
        if any(t > k for t, k in zip(taken, known, strict=True)):  # up to the windows known
            m = min(int(np.flatnonzero(src == d)[k]) for d, (t, k) in
                    enumerate(zip(taken, known, strict=True)) if t > k)
            src = src[:m]
            taken = np.bincount(src, minlength=width).tolist()
        for d in range(width):
            self._counts[d] += taken[d]
        self.total += m
        self._heap = None
        # Each source's draws, in order (small integers: a radix sort when they fit).
        order = np.argsort(src.astype(np.uint16) if width <= 2**16 else src, kind="stable")
        gathered = []
        for v in values:
            out = np.empty(m, np.int64)
            out[order] = np.concatenate([v[d][: taken[d]] for d in range(width)])
            gathered.append(out)
        return src, taken, gathered

    def _rebuild_heap(self) -> None:
        self._heap = [((c + self._X) * m, d) for d, (c, m, a) in
                      enumerate(zip(self.counts, self._step, self._a, strict=True)) if a]
        heapq.heapify(self._heap)

    def ahead(self, d: int) -> Fraction:
        """How far source d is ahead of its share, in units (``c_d − w_d·T``)."""
        return Fraction(self.counts[d] * self._A - self._a[d] * self.total, self._A)
