"""A mixture's ledger: each source's place in its epochs, and the stream's position after a
batch (see :mod:`reader.mixture.sampler`).

:class:`Cursor` is one source's ledger (epoch, position in the epoch, windows and targets
drawn) with its next windows read ahead, ``_CHUNK`` positions of its epoch order and their
sizes at a time (from the source's layout records: no token is read), across epochs.
:class:`Snapshot` is what :class:`reader.MixtureSampler` keeps per batch yielded, put in the
state's JSON form only when read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from reader.order.sampler import EpochSampler

__all__ = ["Cursor", "DrawnBatches", "Snapshot"]

_CHUNK = 8192  # a source's order evaluated (and its windows' sizes read) at once


class Cursor:
    """One source's place in its epochs (the ledger) and its next windows, read ahead.

    ``lists=False`` keeps the windows read ahead as arrays only (what drawing many at once
    reads); :meth:`at`, :meth:`targets_at` and :meth:`take` then read them from the arrays.
    """

    def __init__(self, source: Any, order: EpochSampler, ledger: Sequence[int], *,
                 offset: int = 0, lists: bool = True) -> None:
        self._source, self._order, self._offset = source, order, offset
        self.n = order.n
        self.epoch, self.cursor, self.windows, self.targets = (int(v) for v in ledger)
        # The windows from (epoch, cursor) on, read ahead up to (_end_epoch, _end_cursor).
        self._end_epoch, self._end_cursor = self.epoch, self.cursor
        # As lists (local index, length, targets: one window at a time, for packing) ...
        self._lists = lists
        self._index: list[int] = []
        self._lengths: list[int] = []
        self._targets: list[int] = []
        # ... and as arrays (mixture indices, targets; lengths without lists), for draws
        # made at once.
        self.global_array = np.zeros(0, np.int64)
        self.targets_array = np.zeros(0, np.int64)
        self._lengths_array = np.zeros(0, np.int64)
        self._k = 0  # the next window is at _k of them (the part before is consumed)

    def ahead(self, m: int) -> None:
        """Read ahead until at least ``m`` windows are known."""
        if self._k >= _CHUNK:  # drop the consumed part once a chunk, not on every take
            if self._lists:
                del self._index[: self._k]
                del self._lengths[: self._k], self._targets[: self._k]
            self.global_array = self.global_array[self._k :]
            self.targets_array = self.targets_array[self._k :]
            self._lengths_array = self._lengths_array[self._k :]
            self._k = 0
        while len(self.global_array) - self._k < m:
            lo = self._end_cursor
            hi = min(self.n, lo + _CHUNK)
            local = self._order.indices(self._end_epoch, lo, hi)
            lengths, targets = self._source.window_sizes(local)
            if self._lists:
                self._index += local.tolist()
                self._lengths += lengths.tolist()
                self._targets += targets.tolist()
            else:
                self._lengths_array = np.concatenate([self._lengths_array, lengths])
            self.global_array = np.concatenate([self.global_array, local + self._offset])
            self.targets_array = np.concatenate([self.targets_array, targets])
            self._end_epoch, self._end_cursor = ((self._end_epoch + 1, 0) if hi == self.n
                                                 else (self._end_epoch, hi))

    def targets_at(self, j: int) -> int:
        """The scored targets of the j-th next window."""
        if self._k + j >= len(self.global_array):
            self.ahead(j + 1)
        if not self._lists:
            return int(self.targets_array[self._k + j])
        return self._targets[self._k + j]

    def at(self, j: int) -> tuple[int, int]:
        """(local index, length) of the j-th next window."""
        if self._k + j >= len(self.global_array):
            self.ahead(j + 1)
        if not self._lists:
            k = self._k + j
            return int(self.global_array[k]) - self._offset, int(self._lengths_array[k])
        return self._index[self._k + j], self._lengths[self._k + j]

    def take(self, m: int) -> list[int]:
        """The local indices of the next ``m`` windows; the ledger advances past them."""
        self.ahead(m)
        k = self._k
        local = (self._index[k : k + m] if self._lists
                 else (self.global_array[k : k + m] - self._offset).tolist())
        self.advance(m)
        return local

    def known(self) -> int:
        """How many next windows are read ahead."""
        return len(self.global_array) - self._k

    def advance(self, m: int) -> None:
        """Move the ledger past the next ``m`` windows (read ahead already)."""
        k = self._k
        self.windows += m
        self.targets += int(self.targets_array[k : k + m].sum())
        self._k = k + m
        epochs, self.cursor = divmod(self.cursor + m, self.n)
        self.epoch += epochs

    def ledger(self) -> list[int]:
        return [self.epoch, self.cursor, self.windows, self.targets]


class Snapshot:
    """The stream's position after a batch, put in the state's form only when it is read
    (``snap[key]``): one is kept per batch yielded, so it must be cheap to take."""

    __slots__ = ("_args", "_dict", "batch")

    def __init__(self, batch: int, *args: Any) -> None:
        self.batch, self._args, self._dict = batch, args, None

    def __getitem__(self, key: str) -> Any:
        if key == "batch":
            return self.batch
        if self._dict is None:
            rows, ledger, weights, since, opened, names = self._args
            if callable(ledger):  # drawn at once: read off the draws when asked for
                ledger = ledger()
            self._dict = {
                "batch": self.batch, "rows": rows,
                "ledger": dict(zip(names, ledger, strict=True)),
                "weights": {n: str(w) for n, w in weights.items()},
                "since": {"batch": since["batch"], "counts": dict(since["counts"])},
                "open": [[free, [[names[d], local, length] for d, local, length in members]]
                         for free, members in opened]}
        return self._dict[key]


class DrawnBatches:
    """Global batches of the stream drawn at once (``batches`` of ``G`` positions: each
    position's source, mixture index and scored targets): the ledger after each batch, read
    off per-batch count tables when asked for, and this rank's part (``span`` of each) as
    lists and grouped by source for :class:`reader.MixedDataset` (see
    :class:`reader.mixture.dataset.GroupedIndices`).

    ``base`` is every source's ledger before the first of them, ``sizes`` the sources' sizes
    and ``offsets`` their first mixture indices.
    """

    def __init__(self, base: list[list[int]], sizes: Sequence[int], *,
                 src: npt.NDArray[np.int64], index: npt.NDArray[np.int64],
                 targets: npt.NDArray[np.int64], batches: int, span: tuple[int, int],
                 offsets: npt.NDArray[np.int64]) -> None:
        width, g = len(base), len(src) // batches
        self._base, self._sizes, self._shape = base, list(sizes), (batches, width)
        self._drawn: tuple[npt.NDArray[np.int64], ...] | None = (src, targets)
        self._counts = self._targets = np.zeros(0, np.int64)  # read off the draws when asked
        a, b = span
        m = b - a
        self._src = np.ascontiguousarray(src.reshape(batches, g)[:, a:b])
        self._index = np.ascontiguousarray(index.reshape(batches, g)[:, a:b])
        # Each batch's windows grouped by source, in request order within a source: one
        # stable sort of (batch, source) keys (small integers: a radix sort when they fit).
        keys = np.repeat(np.arange(batches, dtype=np.int64) * width, m) + self._src.ravel()
        flat = np.argsort(keys.astype(np.uint16) if batches * width <= 2**16 else keys,
                          kind="stable")
        self._order = (flat - np.repeat(np.arange(batches, dtype=np.int64) * m, m)
                       ).reshape(batches, m)
        self._grouped = (self._index - offsets[self._src]).ravel()[flat].reshape(batches, m)
        self._per_source = np.bincount(keys, minlength=batches * width).reshape(self._shape)

    @property
    def lists(self) -> list[list[int]]:
        """This rank's part of every batch, as lists of mixture indices."""
        return self._index.tolist()

    def batch_list(self, j: int) -> list[int]:
        """This rank's part of batch j, as a list of mixture indices."""
        return self._index[j].tolist()

    def rank_batch(self, j: int) -> tuple[npt.NDArray[np.int64], ...]:
        """Batch j's part of this rank: indices, sources, local indices by source, the
        request position of each, and each source's count."""
        return (self._index[j], self._src[j], self._grouped[j], self._order[j],
                self._per_source[j])

    def _tables(self) -> None:
        """Each source's windows and targets drawn up to each batch (cumulative)."""
        src, targets = self._drawn  # type: ignore[misc]
        batches, width = self._shape
        rows = np.repeat(np.arange(batches, dtype=np.int64) * width, len(src) // batches) + src
        self._counts = np.bincount(rows, minlength=batches * width).reshape(self._shape
                                                                            ).cumsum(0)
        # Sums of integers well below 2**53: exact in float64.
        self._targets = np.rint(np.bincount(rows, weights=targets, minlength=batches * width)
                                ).astype(np.int64).reshape(self._shape).cumsum(0)
        self._drawn = None

    def ledger(self, j: int) -> list[list[int]]:
        """Every source's ledger after batch j."""
        if self._drawn is not None:
            self._tables()
        out = []
        for (epoch, cursor, windows, targets), n, c, t in zip(
                self._base, self._sizes, self._counts[j].tolist(), self._targets[j].tolist(),
                strict=True):
            epochs, cursor = divmod(cursor + c, n)
            out.append([epoch + epochs, cursor, windows + c, targets + t])
        return out
