"""Packing windows into rows of ``seq_len`` positions, each exactly once per epoch
(docs/format.md#packing).

Contract:

* Epoch e's window order is :class:`reader.EpochSampler`'s for the same ``seed`` (``global``
  or ``blocks``). :func:`pack_rows` cuts that order into rows by first-fit over a bounded
  look-ahead: each window goes into the oldest open row that still has room for its
  ``length`` pairs; if none has room, a new row is opened, and when more than ``open_rows``
  rows are open the oldest is closed. A row is closed at once when full; a window of
  ``seq_len`` pairs is a row of its own, without touching the open rows. Rows are numbered in
  the order they close (the rest close in the order they opened). So the rows are a function
  of (seed, epoch, the lengths, ``seq_len``, ``open_rows``) only, never of the rank or the
  world size, and every window of the epoch is in exactly one row.
* Global batches of ``G = world_size * rows_per_batch`` rows are dealt to ranks exactly as
  :class:`reader.EpochSampler` deals windows (:func:`reader.order.dealing.rank_span`): a short last
  global batch is split into near-equal parts, and with fewer rows than ranks, rank r ≥ m
  gets row r − m of the epoch again, a deliberate repeat (:meth:`PackedSampler.repeat_batches`
  names it, so :func:`reader.evaluate` does not count it); ``drop_last`` drops the short
  batch instead. Iterating yields this rank's batches as lists of rows, a row being a list of
  window indices; ``WindowDataset.__getitems__`` reads such a batch, and
  :func:`reader.collate_packed` turns it into a batch.
* The state is ``(epoch, cursor)`` with the cursor in rows consumed by all ranks, plus the
  packing's parameters and a digest of the lengths: exact and elastic resume as
  ``EpochSampler``'s (with the same G the rest of the epoch is the same batches, dealt to
  other ranks), ``step`` / ``targets_seen`` as there.

Worked example: lengths (3, 2, 4, 1) in that epoch order, ``seq_len`` 4, ``open_rows`` 2 →
window 0 opens row A (1 free), window 1 does not fit A and opens row B (2 free), window 2 is
full and is a row of its own at once (row 0 = [2]); window 3 fits A, the oldest open row
with room, which is then full and closes (row 1 = [0, 3]); B closes last (row 2 = [1])::

    >>> rows = pack_rows(np.array([3, 2, 4, 1]), seq_len=4, open_rows=2)
    >>> [r.tolist() for r in np.split(rows.members, rows.starts[1:-1])]
    [[2], [0, 3], [1]]

Cost: the sampler keeps the lengths (4 bytes a window) and the current epoch's rows (8 bytes a
window plus 8 a row); building an epoch's rows takes its order and a sort, O(n) int64
temporaries, and one pass in Python over the windows shorter than ``seq_len`` (full windows
are rows of their own, found with NumPy); see the README for the figures at 10^7 windows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from reader.order.dealing import BatchDealer, check_fingerprint, check_state_header
from reader.order.dealing import check_int as _check_int
from reader.order.sampler import EpochSampler
from transforms.errors import SamplerStateError
from transforms.json_fields import JsonObject

__all__ = ["PackedRows", "PackedSampler", "pack_rows"]

_STATE_FORMAT = "packed-sampler"
_STATE_VERSION = 1
_CHUNK = 1 << 16  # positions converted to Python ints at once


@dataclass(frozen=True)
class PackedRows:
    """An epoch's rows: row k holds the positions ``members[starts[k] : starts[k + 1]]``."""

    members: npt.NDArray[np.int64]
    starts: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.starts) - 1


def pack_rows(lengths: npt.ArrayLike, *, seq_len: int, open_rows: int) -> PackedRows:
    """First-fit of items of ``lengths`` (in order) into rows of ``seq_len``, ``open_rows`` open.

    Args:
        lengths: each item's size, in the order to pack (1 ≤ length ≤ ``seq_len``).
        seq_len: a row's capacity.
        open_rows: the look-ahead: how many rows may be open at once (1 is next-fit).

    Returns:
        The rows as positions into ``lengths`` (see the module docstring for the order).
    """
    lens = np.asarray(lengths, dtype=np.int64)
    n = len(lens)
    # Each row is keyed by the position at which it closes: at most one row closes per
    # position (a window fills a row, or opens one and so closes the oldest, or is full), so
    # the keys are distinct and sorting them numbers the rows in closing order.
    closes_at = np.arange(n, dtype=np.int64)  # a full window is a row that closes at once
    short = np.flatnonzero(lens < seq_len)
    # The loop touches Python lists of at most open_rows items and NumPy scalars only: each
    # short window gets the id of the row it joins, each row id the position at which it
    # closes (at most one row per short window); NumPy maps them back afterwards. Positions
    # are turned into Python ints a chunk at a time, so no O(n) list of objects is built.
    row_id = np.empty(len(short), dtype=np.int64)
    close = np.empty(len(short), dtype=np.int64)
    rows = 0
    frees: list[int] = []  # the open rows' free positions, oldest first
    ids: list[int] = []  # and their row ids
    for c in range(0, len(short), _CHUNK):
        part = short[c : c + _CHUNK]
        joined: list[int] = []
        for p, length in zip(part.tolist(), lens[part].tolist(), strict=True):
            for j, free in enumerate(frees):
                if free >= length:
                    joined.append(ids[j])
                    if free == length:
                        close[ids[j]] = p
                        del frees[j], ids[j]
                    else:
                        frees[j] = free - length
                    break
            else:
                if len(frees) == open_rows:
                    close[ids[0]] = p
                    del frees[0], ids[0]
                frees.append(seq_len - length)
                ids.append(rows)
                joined.append(rows)
                rows += 1
        row_id[c : c + len(part)] = joined
    close[ids] = n + np.arange(len(ids))  # the rows still open close after the last window
    closes_at[short] = close[row_id]
    del short, row_id, close
    members = np.argsort(closes_at, kind="stable")  # row by row; in order within a row
    keys = closes_at[members]
    del closes_at
    new_row = np.flatnonzero(keys[1:] != keys[:-1]) + 1  # where the next row begins
    del keys
    starts = np.concatenate([[0] if n else [], new_row, [n]]).astype(np.int64)
    return PackedRows(members=members.astype(np.int64, copy=False), starts=starts)


class PackedSampler(BatchDealer):
    """Batches of packed rows of window indices: seeded per epoch, split over ranks, resumable.

    See the module docstring for the packing, the tail policy and the state. The parameters
    after ``seq_len`` are keyword-only.

    Args:
        lengths: every window's ``length`` (``WindowDataset.lengths``, or a prefix of it for
            the first windows only).
        rows_per_batch: rows per batch on this rank (a short tail batch may hold fewer).
        seq_len: positions per row; at least the longest window.
        seed: the seed of every epoch's order (the same order as ``EpochSampler``'s).
        rank: this process's rank, in ``[0, world_size)``.
        world_size: the number of ranks sharing each global batch.
        drop_last: drop the last global batch of each epoch when it is short.
        open_rows: the packing's look-ahead (rows open at once); more packs tighter.
        order, blocks, buffer_blocks: the window order, as for ``EpochSampler``.
        fingerprint: the dataset's (``ds.fingerprint``): recorded in the state, and a state
            saved for another dataset is refused (a state without one still loads).

    Raises:
        ValueError: a parameter out of range, a window longer than ``seq_len``, or
            ``drop_last`` with windows that could pack into fewer rows than
            ``world_size * rows_per_batch`` (Σ lengths / ``seq_len`` rounded up is the fewest
            rows an epoch can have: below that an epoch could have no batch).
    """

    def __init__(
        self,
        lengths: npt.ArrayLike,
        rows_per_batch: int,
        seq_len: int,
        *,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        open_rows: int = 16,
        order: str = "global",
        blocks: Sequence[int] | None = None,
        buffer_blocks: int = 16,
        fingerprint: str | None = None,
    ) -> None:
        self.fingerprint = check_fingerprint("PackedSampler", fingerprint)
        lens = np.asarray(lengths)
        if lens.ndim != 1 or not len(lens) or not np.issubdtype(lens.dtype, np.integer):
            raise ValueError(f"`lengths` must be a non-empty 1-D array of integers, but got "
                             f"shape {lens.shape} of {lens.dtype}")
        self.rows_per_batch = _check_int("rows_per_batch", rows_per_batch, 1)
        self.seq_len = _check_int("seq_len", seq_len, 1)
        self.open_rows = _check_int("open_rows", open_rows, 1)
        if int(lens.min()) < 1:
            i = int(np.argmin(lens))
            raise ValueError(f"window {i} has length {int(lens[i])}; a window's length is at "
                             "least 1")
        if int(lens.max()) > self.seq_len:
            i = int(np.argmax(lens))
            raise ValueError(
                f"window {i} has length {int(lens[i])}, longer than seq_len {self.seq_len}: "
                f"pass seq_len >= {int(lens.max())} (the dataset's window, ds.window)"
            )
        self._lengths = lens.astype(np.int32 if self.seq_len < 2**31 else np.int64)
        self._digest = hashlib.sha256(lens.astype("<i8").tobytes()).hexdigest()
        # The window order: EpochSampler's, for the same seed (it checks the other parameters).
        self._windows = EpochSampler(len(lens), 1, seed=seed, rank=0, world_size=1,
                                     order=order, blocks=blocks, buffer_blocks=buffer_blocks)
        self.n = len(lens)
        self.seed = self._windows.seed
        self.order = order
        self._init_dealer(world_size=world_size, rank=rank, per_rank=self.rows_per_batch,
                           drop_last=drop_last)
        # Every epoch fills at least this many rows (its packing varies, this bound does not).
        fewest = -(-int(self._lengths.sum()) // self.seq_len)
        if drop_last and fewest < self.global_batch:
            raise ValueError(
                f"with drop_last, the windows fill at least {fewest} rows of {self.seq_len}, "
                f"which may be fewer than world_size * rows_per_batch ({self.global_batch}): "
                "an epoch could have no batch; use fewer rows per batch or drop_last=False"
            )
        self._packed_epoch: int | None = None
        self._packed: PackedRows | None = None

    # -- the rows -------------------------------------------------------------------------

    def rows(self, epoch: int) -> PackedRows:
        """Epoch ``epoch``'s rows, as window indices (computed once per epoch, then kept)."""
        epoch = _check_int("epoch", epoch, 0)
        if self._packed_epoch != epoch or self._packed is None:
            order = self._windows.indices(epoch, 0, self.n)
            rows = pack_rows(self._lengths[order], seq_len=self.seq_len,
                             open_rows=self.open_rows)
            packed = PackedRows(members=order[rows.members], starts=rows.starts)
            self._packed, self._packed_epoch = packed, epoch
        return self._packed

    def _total(self, epoch: int) -> int:
        return len(self.rows(epoch))

    def __iter__(self) -> Iterator[list[list[int]]]:
        """This rank's remaining batches of the current epoch, from the committed position."""
        for epoch, a, b in self._spans():
            rows = self.rows(epoch)
            yield [rows.members[rows.starts[k] : rows.starts[k + 1]].tolist()
                   for k in range(a, b)]

    def _identity(self) -> JsonObject:
        base = self._windows.state_dict()
        return {"seed": self.seed, "n": self.n, "lengths_sha256": self._digest,
                "seq_len": self.seq_len, "open_rows": self.open_rows,
                "drop_last": self.drop_last, "order": self.order, "blocks": base["blocks"]}

    def state_dict(self) -> JsonObject:
        """The global position, a small JSON-serialisable dict (committed once ``step`` is used)."""
        return {"format": _STATE_FORMAT, "version": _STATE_VERSION, **self._identity(),
                "global_batch": self.global_batch, "world_size": self.world_size,
                "rows_per_batch": self.rows_per_batch, **self._position(),
                **({} if self.fingerprint is None else {"fingerprint": self.fingerprint})}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: the next iteration yields exactly the batches that came next.

        The world size and rows per batch may differ from the run that saved it; the lengths,
        seed, ``seq_len``, ``open_rows``, ``drop_last`` and the order must not.

        Raises:
            SamplerStateError: not a packed sampler state, another version, or another
                packing.
        """
        check_state_header(state, name="PackedSampler", format=_STATE_FORMAT,
                           version=_STATE_VERSION)
        mine = self._identity()
        for key in (*mine, "epoch", "cursor", "targets_seen", "batches_seen"):
            if key not in state:
                raise SamplerStateError(f"the PackedSampler state lacks the key {key!r}")
        check_fingerprint("PackedSampler", self.fingerprint, state=state)
        for key, value in mine.items():
            if state[key] != value:
                raise SamplerStateError(
                    f"the state has {key} {state[key]!r}, but this sampler has {value!r}; it "
                    "belongs to another dataset, packing or run"
                )
        epoch = _check_int("epoch", state["epoch"], 0)
        self._load_position(state, beyond=f"epoch {epoch}'s {len(self.rows(epoch))} rows")

    def __repr__(self) -> str:
        return (
            f"PackedSampler(n={self.n}, rows_per_batch={self.rows_per_batch}, "
            f"seq_len={self.seq_len}, seed={self.seed}, rank={self.rank}, "
            f"world_size={self.world_size}, drop_last={self.drop_last}, "
            f"open_rows={self.open_rows}, epoch={self.epoch}, cursor={self.cursor})"
        )
