"""A seeded, resumable, rank-aware batch sampler over window indices (SPEC §6, seed 004).

Contract:

* Epoch e's global order is ``torch.randperm(n)`` drawn from a ``torch.Generator`` seeded with
  a stable hash of ``(seed, e)`` (:func:`epoch_seed`), so it depends on nothing but the seed
  and the epoch: not on the batch size, the world size or the rank.
* From the global cursor c (windows of epoch e already consumed by all ranks together), the
  rest of the order is cut into global batches of ``G = world_size * batch_size`` windows;
  rank r takes ``order[a + r*batch_size : a + (r+1)*batch_size]`` of the global batch
  ``[a, a + G)``. Iterating yields this rank's remaining batches of the epoch (lists of
  ints); the next iteration starts the next epoch.
* The last global batch, ``m < G`` windows, is kept unless ``drop_last``. It is split
  contiguously into ``world_size`` near-equal parts (sizes differ by at most one, the larger
  parts first). If ``m < world_size``, ranks ``r >= m`` would get nothing: each gets one
  window instead, wrapping around to the start of the epoch's order (rank m gets
  ``order[0]``, rank m+1 ``order[1]`` …). These are deliberate repeats, counted in
  ``targets_seen`` like any other. So every rank yields the same number of batches each
  epoch, no batch is empty, and DDP never waits on a rank that has stopped. With
  ``drop_last`` the last global batch is dropped on every rank.
* The state is global: ``(epoch, cursor)`` with the cursor counted in windows consumed by all
  ranks. A job resumed with another world size continues with exactly the windows not yet
  seen this epoch, none repeated and none skipped; with the same global batch G the batches
  are the same windows as in the uninterrupted run, only dealt to other ranks. (With another
  G the rest of the epoch is cut into batches of the new G from the cursor.)

Prefetch and the committed state: a ``DataLoader`` with workers draws batches from the
sampler ahead of the training loop, so the position of the sampler's iterator is not what
was trained on. The loop therefore reports each batch it has consumed with
:meth:`EpochSampler.step`; that advances the *committed* position by one global batch and adds
the batch's ``num_targets`` to ``targets_seen``. Once ``step`` has been called, ``state_dict``
returns the committed state, and a new iteration (a new ``for batch in loader``) restarts from
the committed position, so batches that were prefetched but never consumed are not lost. A
loop that never calls ``step`` gets the iterator's own position instead, which is exact only
without prefetch (``num_workers=0``). Call ``step`` for every consumed batch or for none. In a
distributed job every rank steps once per batch; ``targets_seen`` is then this rank's count,
unless each rank passes the all-reduced count (``step(batch, num_targets=total)``) so that the
state saved by rank 0 is global.

The order comes from ``torch.randperm``: resume with the torch version that started the run
(a different release may draw another permutation from the same seed).

Example::

    sampler = EpochSampler(len(ds), batch_size=8, seed=0)
    loader = DataLoader(ds, batch_sampler=sampler, num_workers=2,
                        collate_fn=functools.partial(collate, pad_id=ds.eos_id))
    for batch in loader:
        ...                                # forward, backward, optimiser step
        sampler.step(batch)                # this batch is consumed
        json.dumps(sampler.state_dict())   # resume with sampler.load_state_dict(state)
"""

from __future__ import annotations

import hashlib
import numbers
from collections.abc import Iterator, Mapping
from typing import Any

import torch

__all__ = ["EpochSampler", "epoch_seed"]

_STATE_FORMAT = "epoch-sampler"
_STATE_VERSION = 1


def epoch_seed(seed: int, epoch: int) -> int:
    """The ``torch.Generator`` seed of an epoch: 63 bits of SHA-256 of ``(seed, epoch)``."""
    digest = hashlib.sha256(f"{_STATE_FORMAT}:{seed}:{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _check_int(name: str, value: Any, low: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"`{name}` must be an integer, but got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"`{name}` must be at least {low}, but got {value}")
    return int(value)


class EpochSampler:
    """Batches of window indices: seeded per epoch, split over ranks, resumable mid-epoch.

    See the module docstring for the order, the tail policy and the committed state. The
    parameters after ``batch_size`` are keyword-only (``EpochSampler(n, 8, seed=0)``).

    Args:
        n: the number of windows (``len(dataset)``), at least 1.
        batch_size: windows per batch on this rank (a short tail batch may hold fewer).
        seed: the seed of every epoch's permutation.
        rank: this process's rank, in ``[0, world_size)``.
        world_size: the number of ranks sharing each global batch.
        drop_last: drop the last global batch of each epoch when it is short.

    Raises:
        ValueError: a parameter out of range, or ``drop_last`` with fewer than
            ``world_size * batch_size`` windows (an epoch would have no batch).
    """

    def __init__(
        self,
        n: int,
        batch_size: int,
        *,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
    ) -> None:
        self.n = _check_int("n", n, 1)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.seed = _check_int("seed", seed, None)
        self.world_size = _check_int("world_size", world_size, 1)
        self.rank = _check_int("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ValueError(f"`rank` must be in [0, {self.world_size}), but got {rank}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"`drop_last` must be a bool, but got {drop_last!r}")
        self.drop_last = drop_last
        self.global_batch = self.world_size * self.batch_size
        if drop_last and self.n < self.global_batch:
            raise ValueError(
                f"with drop_last, n ({self.n}) must be at least world_size * batch_size "
                f"({self.global_batch}), or an epoch has no batch"
            )
        # The committed position (advanced by step) and the iterator's position.
        self._epoch, self._cursor = 0, 0
        self._issued = (0, 0)
        self._tracking = False
        self._targets_seen = 0
        self._batches_seen = 0
        self._perm_epoch: int | None = None
        self._perm: torch.Tensor | None = None

    # -- the order ------------------------------------------------------------------------

    def permutation(self, epoch: int) -> torch.Tensor:
        """Epoch ``epoch``'s global order of all ``n`` windows (int64 tensor)."""
        epoch = _check_int("epoch", epoch, 0)
        if self._perm_epoch != epoch:
            generator = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
            self._perm = torch.randperm(self.n, generator=generator)
            self._perm_epoch = epoch
        assert self._perm is not None
        return self._perm

    def _end(self, cursor: int) -> int:
        """Where the epoch ends for batches cut from ``cursor``."""
        if self.drop_last:
            return cursor + (self.n - cursor) // self.global_batch * self.global_batch
        return self.n

    def _normalise(self, epoch: int, cursor: int) -> tuple[int, int]:
        return (epoch + 1, 0) if cursor >= self._end(cursor) else (epoch, cursor)

    def _rank_part(self, order: torch.Tensor, lo: int, hi: int) -> list[int]:
        """This rank's part of the global batch ``order[lo:hi]`` (the tail policy)."""
        m, ws, r = hi - lo, self.world_size, self.rank
        if m == self.global_batch:
            a = lo + r * self.batch_size
            return order[a : a + self.batch_size].tolist()
        if m >= ws:
            q, extra = divmod(m, ws)
            a = lo + r * q + min(r, extra)
            return order[a : a + q + (r < extra)].tolist()
        if r < m:
            return [int(order[lo + r])]
        return [int(order[(r - m) % self.n])]  # a repeat from the epoch's start

    def _start(self) -> tuple[int, int]:
        return (self._epoch, self._cursor) if self._tracking else self._issued

    def __iter__(self) -> Iterator[list[int]]:
        """This rank's remaining batches of the current epoch, from the committed position."""
        epoch, cursor = self._start()
        self._issued = (epoch, cursor)
        order = self.permutation(epoch)
        end = self._end(cursor)
        while cursor < end:
            stop = min(cursor + self.global_batch, self.n)
            part = self._rank_part(order, cursor, stop)
            cursor = stop
            self._issued = self._normalise(epoch, cursor)
            yield part

    def __len__(self) -> int:
        """The number of batches the next iteration yields (the rest of the current epoch)."""
        _, cursor = self._start()
        return -(-(self._end(cursor) - cursor) // self.global_batch)

    @property
    def batches_per_epoch(self) -> int:
        """Batches per rank in a whole epoch."""
        return -(-self._end(0) // self.global_batch)

    # -- the committed state --------------------------------------------------------------

    def step(
        self, batch: Mapping[str, Any] | None = None, *, num_targets: int | None = None
    ) -> None:
        """Record that the training loop consumed one batch from this sampler.

        Advances the committed position by one global batch (the batch of every rank) and
        adds the scored targets to ``targets_seen``.

        Args:
            batch: the collated batch; its ``num_targets`` is added unless ``num_targets`` is
                given.
            num_targets: the targets to add instead, e.g. the sum over ranks (all-reduced) so
                that every rank holds the same global ``targets_seen``.

        Raises:
            ValueError: more batches were recorded than the sampler has yielded.
        """
        if num_targets is None:
            num_targets = 0 if batch is None else batch["num_targets"]
        count = _check_int("num_targets", int(num_targets), 0)
        if (self._epoch, self._cursor) >= self._issued:
            raise ValueError(
                "step() was called for more batches than the sampler has yielded; call it once "
                "per batch the training loop has consumed"
            )
        self._tracking = True
        stop = min(self._cursor + self.global_batch, self.n)
        self._epoch, self._cursor = self._normalise(self._epoch, stop)
        self._targets_seen += count
        self._batches_seen += 1

    @property
    def epoch(self) -> int:
        """The epoch of the position ``state_dict`` reports."""
        return self._start()[0]

    @property
    def cursor(self) -> int:
        """Windows of this epoch consumed by all ranks (the position ``state_dict`` reports)."""
        return self._start()[1]

    @property
    def targets_seen(self) -> int:
        """Scored targets recorded with :meth:`step` (repeats included, padding never)."""
        return self._targets_seen

    def state_dict(self) -> dict[str, Any]:
        """The global position, a small JSON-serialisable dict (committed once ``step`` is used)."""
        epoch, cursor = self._start()
        return {
            "format": _STATE_FORMAT,
            "version": _STATE_VERSION,
            "seed": self.seed,
            "n": self.n,
            "drop_last": self.drop_last,
            "global_batch": self.global_batch,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "epoch": epoch,
            "cursor": cursor,
            "targets_seen": self._targets_seen,
            "batches_seen": self._batches_seen,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: the next iteration yields exactly the batches that came next.

        The world size and batch size may differ from the run that saved the state; ``n``,
        ``seed`` and ``drop_last`` must not.

        Raises:
            ValueError: the state is not a sampler state, or belongs to another dataset or seed.
        """
        if not isinstance(state, Mapping) or state.get("format") != _STATE_FORMAT:
            raise ValueError(f"not an EpochSampler state: {state!r}")
        if state.get("version") != _STATE_VERSION:
            raise ValueError(
                f"EpochSampler state version {state.get('version')!r} is not {_STATE_VERSION}"
            )
        for key in ("seed", "n", "drop_last", "epoch", "cursor", "targets_seen", "batches_seen"):
            if key not in state:
                raise ValueError(f"the EpochSampler state lacks the key {key!r}")
        for key in ("n", "seed", "drop_last"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"the state has {key} {state[key]!r}, but this sampler has "
                    f"{getattr(self, key)!r}; it belongs to another dataset or run"
                )
        epoch = _check_int("epoch", state["epoch"], 0)
        cursor = _check_int("cursor", state["cursor"], 0)
        if cursor > self.n:
            raise ValueError(f"the state's cursor {cursor} is beyond n ({self.n})")
        self._epoch, self._cursor = self._normalise(epoch, cursor)
        self._issued = (self._epoch, self._cursor)
        self._tracking = False
        self._targets_seen = _check_int("targets_seen", state["targets_seen"], 0)
        self._batches_seen = _check_int("batches_seen", state["batches_seen"], 0)

    def __repr__(self) -> str:
        return (
            f"EpochSampler(n={self.n}, batch_size={self.batch_size}, seed={self.seed}, "
            f"rank={self.rank}, world_size={self.world_size}, drop_last={self.drop_last}, "
            f"epoch={self.epoch}, cursor={self.cursor})"
        )
