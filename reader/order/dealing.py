"""Global batches dealt to ranks, and a sampler's position in its epochs (docs/format.md#sampler).

Shared by :class:`reader.EpochSampler` (an epoch's positions are windows of its order) and
:class:`reader.PackedSampler` (they are packed rows): the tail policy (:func:`rank_span`, the
deliberate repeats of :func:`tail_repeat`), an epoch's (epoch, cursor) positions, which
`reader.order.stepping.CommittedPosition` keeps as the iterator's and the committed one, and the
position half of the state. The policy and the committed state are described in
:mod:`reader.order.sampler`'s docstring.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Mapping
from typing import Any

from reader.order.stepping import CommittedPosition
from transforms.errors import SamplerStateError

__all__ = ["BatchDealer", "check_fingerprint", "check_int", "check_state_header", "rank_span",
           "tail_repeat"]


def check_int(name: str, value: Any, low: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"`{name}` must be an integer, but got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"`{name}` must be at least {low}, but got {value}")
    return int(value)


def check_fingerprint(name: str, value: Any, *, state: Any = None) -> str | None:
    """A sampler's ``fingerprint`` argument (None or a string); with ``state``, also that
    the state's, when both have one, is the same (a state without one still loads).

    Raises:
        ValueError: ``fingerprint`` is not a string or None.
        SamplerStateError: the state's fingerprint is another (naming both and the fix), or
            not a string.
    """
    if value is not None and not isinstance(value, str):
        raise ValueError(f"`fingerprint` must be a string or None, but got {value!r}")
    theirs = None if state is None else state.get("fingerprint")
    if theirs is not None and not isinstance(theirs, str):
        raise SamplerStateError(
            f"the {name} state's fingerprint must be a string, but got {theirs!r}")
    if value is not None and theirs is not None and theirs != value:
        raise SamplerStateError(
            f"the {name} state was saved for the dataset with fingerprint {theirs}, but this "
            f"sampler reads the dataset with fingerprint {value}: it belongs to another "
            "dataset; resume on the dataset that saved it, or start the sampler afresh")
    return value


def check_state_header(state: Any, *, name: str, format: str, version: int) -> None:
    """That ``state`` is a saved state of the sampler ``name`` (its ``format``) and of this
    release's ``version``.

    Raises:
        SamplerStateError: not such a state (its start shown), or another version.
    """
    if not isinstance(state, Mapping) or state.get("format") != format:
        raise SamplerStateError(f"not a {name} state: {str(state)[:200]}")
    if state.get("version") != version:
        raise SamplerStateError(
            f"{name} state version {state.get('version')!r} is not {version}; resume with the "
            "release that saved it")


def rank_span(lo: int, hi: int, *, rank: int, world_size: int, per_rank: int,
              n: int) -> tuple[int, int, bool]:
    """Rank ``rank``'s positions ``[a, b)`` of the global batch ``[lo, hi)``, and if a repeat.

    The tail policy of the module docstring, shared by :class:`EpochSampler` (positions are
    windows of the epoch's order) and :class:`reader.PackedSampler` (positions are rows):
    a full batch gives each rank ``per_rank`` positions; a short one is split contiguously
    into near-equal parts; with fewer positions than ranks, rank ``r >= m`` repeats position
    ``(r - m) % n`` of the epoch.
    """
    m = hi - lo
    if m == world_size * per_rank:
        a = lo + rank * per_rank
        return a, a + per_rank, False
    if m >= world_size:
        q, extra = divmod(m, world_size)
        a = lo + rank * q + min(rank, extra)
        return a, a + q + (rank < extra), False
    if rank < m:
        return lo + rank, lo + rank + 1, False
    k = (rank - m) % n
    return k, k + 1, True


def tail_repeat(left: int, batches: int, *, rank: int, world_size: int, per_rank: int,
                drop_last: bool) -> frozenset[int]:
    """The ordinals among ``batches`` (cut from ``left`` positions) that are repeats here."""
    m = left % (world_size * per_rank)
    if drop_last or m == 0 or m >= world_size or rank < m:
        return frozenset()
    return frozenset({batches - 1})


class BatchDealer(CommittedPosition[tuple[int, int]]):
    """What :class:`EpochSampler` and :class:`reader.PackedSampler` share: an epoch of
    ``_total(epoch)`` positions (windows, or packed rows) cut into global batches of
    ``world_size * per_rank`` and dealt to the ranks by the tail policy (:func:`rank_span`);
    the iterator's and the committed positions, each an (epoch, cursor) pair
    (`reader.order.stepping.CommittedPosition`: ``step``, ``targets_seen``); and the position half
    of the state. A subclass calls :meth:`_init_dealer` and defines ``_total``."""

    world_size: int
    rank: int
    drop_last: bool
    global_batch: int

    def _init_dealer(self, *, world_size: int, rank: int, per_rank: int,
                      drop_last: bool) -> None:
        self.world_size = check_int("world_size", world_size, 1)
        self.rank = check_int("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ValueError(f"`rank` must be in [0, {self.world_size}), but got {rank}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"`drop_last` must be a bool, but got {drop_last!r}")
        self.drop_last = drop_last
        self._per_rank = per_rank
        self.global_batch = self.world_size * per_rank
        self._reset_position((0, 0))
        self._batches_seen = 0

    def _total(self, epoch: int) -> int:
        raise NotImplementedError

    def _end(self, epoch: int, cursor: int) -> int:
        """Where the epoch ends for batches cut from ``cursor``."""
        total = self._total(epoch)
        if self.drop_last:
            return cursor + (total - cursor) // self.global_batch * self.global_batch
        return total

    def _normalise(self, epoch: int, cursor: int) -> tuple[int, int]:
        return (epoch + 1, 0) if cursor >= self._end(epoch, cursor) else (epoch, cursor)

    def _spans(self) -> Iterator[tuple[int, int, int]]:
        """(epoch, a, b): this rank's positions ``[a, b)`` of each remaining global batch of
        the epoch, from the committed position; the iterator's position follows."""
        epoch, cursor = self._start()
        self._issued = (epoch, cursor)
        total, end = self._total(epoch), self._end(epoch, cursor)
        while cursor < end:
            stop = min(cursor + self.global_batch, total)
            a, b, _ = rank_span(cursor, stop, rank=self.rank, world_size=self.world_size,
                                per_rank=self._per_rank, n=total)
            cursor = stop
            self._issued = self._normalise(epoch, cursor)
            yield epoch, a, b

    def __len__(self) -> int:
        """The number of batches the next iteration yields (the rest of the current epoch)."""
        epoch, cursor = self._start()
        return -(-(self._end(epoch, cursor) - cursor) // self.global_batch)

    def repeat_batches(self) -> frozenset[int]:
        """Which of the next iteration's batches (0, 1, … on this rank) are deliberate repeats.

        Ask before iterating. Only the epoch's last batch can be one (a short tail with fewer
        positions than ranks); :func:`reader.evaluate` runs the model on it (every rank takes
        part in each forward, as FSDP needs) but does not count it.
        """
        epoch, cursor = self._start()
        return tail_repeat(self._total(epoch) - cursor, len(self), rank=self.rank,
                           world_size=self.world_size, per_rank=self._per_rank,
                           drop_last=self.drop_last)

    # -- the committed state --------------------------------------------------------------

    def _yielded_beyond(self) -> bool:
        return self._committed < self._issued

    def _commit_next(self) -> None:
        epoch, cursor = self._committed
        self._committed = self._normalise(epoch, min(cursor + self.global_batch,
                                                     self._total(epoch)))
        self._batches_seen += 1

    @property
    def epoch(self) -> int:
        """The epoch of the position ``state_dict`` reports."""
        return self._start()[0]

    @property
    def cursor(self) -> int:
        """Positions of this epoch (windows, or rows when packed) consumed by all ranks: the
        position ``state_dict`` reports."""
        return self._start()[1]

    @property
    def progress(self) -> float:
        """Epochs consumed at the position ``state_dict`` reports: the epoch plus the share
        of its positions consumed (0.04 is 4 % into the first epoch)."""
        epoch, cursor = self._start()
        return epoch + cursor / self._total(epoch)

    def _position(self) -> dict[str, int]:
        epoch, cursor = self._start()
        return {"epoch": epoch, "cursor": cursor, "targets_seen": self._targets_seen,
                "batches_seen": self._batches_seen}

    def _load_position(self, state: Mapping[str, Any], *, beyond: str) -> None:
        """The position of a checked ``state``; ``beyond`` names the epoch's end in the error."""
        epoch = check_int("epoch", state["epoch"], 0)
        cursor = check_int("cursor", state["cursor"], 0)
        if cursor > self._total(epoch):
            raise SamplerStateError(f"the state's cursor {cursor} is beyond {beyond}")
        self._reset_position(self._normalise(epoch, cursor),
                             targets_seen=check_int("targets_seen", state["targets_seen"], 0))
        self._batches_seen = check_int("batches_seen", state["batches_seen"], 0)
