"""Seeded bijections of ``[0, n)`` evaluated per position, in O(1) memory (docs/format.md#sampler).

Contract: ``FeistelPermutation(n, key)`` is a bijection of ``[0, n)``; ``perm(positions)``
maps an integer array of positions to the indices at those positions, element by element, so
an epoch's order is never materialised. It is a balanced Feistel network of
:data:`ROUNDS` rounds on ``2h`` bits (``4**h`` is the smallest power of four ≥ n, at least
4) with a round function of 64-bit multiply–xorshift steps, restricted to ``[0, n)`` by
cycle walking: a value that lands at or beyond ``n`` is encrypted again until it lands below
(a bijection of the larger domain restricted this way is a bijection of ``[0, n)``; at most
4n / n = 4 steps are expected). Everything is ``numpy.uint64`` arithmetic (wrapping
multiplication, shifts, xor) and SHA-256, so the order is the same on every Python, NumPy
and torch release and on every platform. Levanter and Grain shuffle indices the same way.

:func:`round_keys` derives the round keys from any text label (the sampler uses the seed, the
epoch and, for the ``blocks`` order, the buffer).

Example::

    >>> perm = FeistelPermutation(10, round_keys("example"))
    >>> order = perm(np.arange(10))
    >>> sorted(order.tolist()) == list(range(10))
    True
    >>> int(perm(np.array([3]))[0]) == int(order[3])
    True
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

__all__ = ["ROUNDS", "FeistelPermutation", "round_keys"]

ROUNDS = 6
_M1 = np.uint64(0xBF58476D1CE4E5B9)  # splitmix64's multipliers
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def round_keys(label: str, rounds: int = ROUNDS) -> tuple[int, ...]:
    """``rounds`` 64-bit round keys: SHA-256 of ``label``, 8 bytes per key."""
    keys = []
    block = 0
    while len(keys) < rounds:
        digest = hashlib.sha256(f"feistel:{block}:{label}".encode()).digest()
        keys += [int.from_bytes(digest[i : i + 8], "little") for i in range(0, 32, 8)]
        block += 1
    return tuple(keys[:rounds])


class FeistelPermutation:
    """A keyed bijection of ``[0, n)``, evaluated per position (see the module docstring).

    Args:
        n: the size of the domain, at least 1.
        keys: the round keys (64-bit integers), e.g. from :func:`round_keys`.

    Raises:
        ValueError: ``n`` is not a positive integer or there is no key.
    """

    def __init__(self, n: int, keys: tuple[int, ...]) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"`n` must be a positive integer, but got {n!r}")
        if not keys:
            raise ValueError(f"`keys` must hold at least one round key, but got {keys!r}")
        self.n = n
        half = max(1, ((n - 1).bit_length() + 1) // 2)
        if 2 * half > 64:
            raise ValueError(f"`n` must be at most 2**64, but got {n}")
        self._half = np.uint64(half)
        self._mask = np.uint64((1 << half) - 1)
        self._keys = tuple(np.uint64(k & (2**64 - 1)) for k in keys)

    def _round(self, x: npt.NDArray[np.uint64], key: np.uint64) -> npt.NDArray[np.uint64]:
        h = x ^ key
        h = (h ^ (h >> _S30)) * _M1
        h = (h ^ (h >> _S27)) * _M2
        return (h ^ (h >> _S31)) & self._mask

    def _encrypt(self, x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        left, right = x >> self._half, x & self._mask
        for key in self._keys:
            left, right = right, left ^ self._round(right, key)
        return (left << self._half) | right

    def __call__(self, positions: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The indices at ``positions`` (each in ``[0, n)``), as an int64 array of their shape.

        Raises:
            ValueError: a position outside ``[0, n)``.
        """
        p = np.asarray(positions, dtype=np.int64)
        if p.size and (int(p.min()) < 0 or int(p.max()) >= self.n):
            raise ValueError(
                f"`positions` must be in [0, {self.n}), but got values in "
                f"[{int(p.min())}, {int(p.max())}]"
            )
        y = self._encrypt(p.astype(np.uint64))
        n = np.uint64(self.n)
        out = y >= n
        while out.any():  # cycle walking: at most 4n/n steps expected
            at = np.flatnonzero(out)
            y[at] = self._encrypt(y[at])
            out[at] = y[at] >= n
        return y.astype(np.int64)

    def __repr__(self) -> str:
        return f"FeistelPermutation(n={self.n}, rounds={len(self._keys)})"
