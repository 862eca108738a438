"""A seeded, resumable, rank-aware batch sampler over window indices (docs/format.md#sampler).

Contract:

* Epoch e's order is a function of the seed, the epoch and n only (and, for ``blocks``, of
  the blocks and k): not of the batch size, the world size, the rank, or the torch, NumPy or
  Python release. It is evaluated per position by
  :class:`reader.order.permutation.FeistelPermutation` with keys from :func:`epoch_seed`, so it
  takes no memory proportional to n. Two orders:

  - ``order="global"`` (the default): a seeded permutation of all n windows.
  - ``order="blocks"``: for data read block by block (row groups or shards, given as
    ``blocks``, their sizes in dataset order): a seeded permutation of the blocks, cut into
    buffers of ``buffer_blocks`` consecutive blocks of that permutation, then a seeded
    permutation of the windows within each buffer. A reader holding one buffer (k blocks)
    at a time reads every window of the epoch; the memory is O(number of blocks).

  Worked example of ``blocks``: sizes (2, 3, 1), k = 2, block permutation (2, 0, 1) → buffers
  {block 2, block 0} = windows {5, 0, 1} and {block 1} = {2, 3, 4}; the epoch is a
  permutation of 5, 0, 1 followed by a permutation of 2, 3, 4.
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
  ``targets_seen`` like any other and named by :meth:`EpochSampler.repeat_batches`, so that
  :func:`reader.evaluate` does not count them. So every rank yields the same number of batches each
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

The state's version is 2. Version 1 (the ``torch.randperm`` order of earlier releases) is
refused: its rest of the epoch cannot be computed here (see :meth:`EpochSampler.load_state_dict`).

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
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from reader.order.dealing import BatchDealer, check_fingerprint
from reader.order.dealing import check_int as _check_int
from reader.order.permutation import FeistelPermutation, round_keys
from transforms.errors import SamplerStateError
from transforms.json_fields import JsonObject

__all__ = ["ORDERS", "EpochSampler", "epoch_seed"]

ORDERS = ("global", "blocks")
_STATE_FORMAT = "epoch-sampler"
_STATE_VERSION = 2
_CHUNK = 8192  # order positions evaluated at once: amortises NumPy's per-call cost


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of an epoch's order: 63 bits of SHA-256 of ``(seed, epoch)``."""
    digest = hashlib.sha256(f"{_STATE_FORMAT}:{seed}:{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


class _GlobalOrder:
    """Epoch order ``global``: one Feistel permutation of all n windows."""

    def __init__(self, n: int, *, seed: int, epoch: int) -> None:
        self._perm = FeistelPermutation(n, round_keys(f"global:{epoch_seed(seed, epoch)}"))

    def take(self, lo: int, hi: int) -> npt.NDArray[np.int64]:
        return self._perm(np.arange(lo, hi, dtype=np.int64))


class _BlocksOrder:
    """Epoch order ``blocks``: permuted blocks, then windows permuted within buffers of k."""

    def __init__(self, sizes: npt.NDArray[np.int64], *, buffer_blocks: int, seed: int,
                 epoch: int) -> None:
        self._label = f"blocks:{epoch_seed(seed, epoch)}"
        keep = np.flatnonzero(sizes)  # an empty block (an empty shard) holds no position
        starts = np.concatenate([[0], np.cumsum(sizes)])[keep]
        perm = FeistelPermutation(len(keep), round_keys(self._label))(np.arange(len(keep)))
        self._block_index_start = starts[perm]  # first dataset index of each permuted block
        psizes = sizes[keep][perm]
        # Position in the epoch of each permuted block's first window, and of each buffer's.
        self._block_pos = np.concatenate([[0], np.cumsum(psizes)])
        self._buffer_pos = self._block_pos[::buffer_blocks].copy()
        if self._buffer_pos[-1] != self._block_pos[-1]:
            self._buffer_pos = np.append(self._buffer_pos, self._block_pos[-1])
        self._perms: dict[int, FeistelPermutation] = {}

    def _buffer_perm(self, j: int) -> FeistelPermutation:
        perm = self._perms.get(j)
        if perm is None:
            size = int(self._buffer_pos[j + 1] - self._buffer_pos[j])
            perm = FeistelPermutation(size, round_keys(f"{self._label}:buffer:{j}"))
            if len(self._perms) >= 64:
                self._perms.clear()
            self._perms[j] = perm
        return perm

    def take(self, lo: int, hi: int) -> npt.NDArray[np.int64]:
        p = np.arange(lo, hi, dtype=np.int64)
        buf = np.searchsorted(self._buffer_pos, p, side="right") - 1
        q = p - self._buffer_pos[buf]
        for j in np.unique(buf).tolist():
            at = buf == j
            q[at] = self._buffer_perm(j)(q[at])
        pos = self._buffer_pos[buf] + q  # the position in the stream of permuted blocks
        b = np.searchsorted(self._block_pos, pos, side="right") - 1
        return self._block_index_start[b] + (pos - self._block_pos[b])


class _OrderCache:
    """Positions ``[lo, hi)`` of one epoch's order, evaluated in chunks as they are needed."""

    def __init__(self, order: _GlobalOrder | _BlocksOrder, n: int) -> None:
        self._order, self._n = order, n
        self._lo = self._hi = 0
        self._values = np.empty(0, dtype=np.int64)

    def get(self, lo: int, hi: int) -> npt.NDArray[np.int64]:
        if not (self._lo <= lo and hi <= self._hi):
            self._lo = lo
            self._hi = min(self._n, max(hi, lo + _CHUNK))
            self._values = self._order.take(self._lo, self._hi)
        return self._values[lo - self._lo : hi - self._lo]


class EpochSampler(BatchDealer):
    """Batches of window indices: seeded per epoch, split over ranks, resumable mid-epoch.

    See the module docstring for the orders, the tail policy and the committed state. The
    parameters after ``batch_size`` are keyword-only (``EpochSampler(n, 8, seed=0)``).

    Args:
        n: the number of windows (``len(dataset)``), at least 1.
        batch_size: windows per batch on this rank (a short tail batch may hold fewer).
        seed: the seed of every epoch's order.
        rank: this process's rank, in ``[0, world_size)``.
        world_size: the number of ranks sharing each global batch.
        drop_last: drop the last global batch of each epoch when it is short.
        order: ``"global"`` (a permutation of all windows) or ``"blocks"``.
        blocks: for ``order="blocks"``, the block sizes in dataset order (they sum to n),
            e.g. ``dataset.blocks("shard")`` or ``dataset.blocks("row_group")``.
        buffer_blocks: for ``order="blocks"``, k, the blocks whose windows are mixed together.
        fingerprint: the dataset's (``ds.fingerprint``): recorded in the state, and a state
            saved for another dataset is refused (a state without one still loads).

    Raises:
        ValueError: a parameter out of range, ``drop_last`` with fewer than
            ``world_size * batch_size`` windows (an epoch would have no batch), or blocks that
            do not sum to n.
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
        order: str = "global",
        blocks: Sequence[int] | None = None,
        buffer_blocks: int = 16,
        fingerprint: str | None = None,
    ) -> None:
        self.n = _check_int("n", n, 1)
        self.fingerprint = check_fingerprint("EpochSampler", fingerprint)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.seed = _check_int("seed", seed, None)
        self._init_dealer(world_size=world_size, rank=rank, per_rank=self.batch_size,
                           drop_last=drop_last)
        if drop_last and self.n < self.global_batch:
            raise ValueError(
                f"with drop_last, n ({self.n}) must be at least world_size * batch_size "
                f"({self.global_batch}), or an epoch has no batch"
            )
        if order not in ORDERS:
            raise ValueError(f"`order` must be one of {ORDERS}, but got {order!r}")
        self.order = order
        self.buffer_blocks = _check_int("buffer_blocks", buffer_blocks, 1)
        self._blocks: npt.NDArray[np.int64] | None = None
        self._blocks_digest: str | None = None
        if order == "blocks":
            if blocks is None:
                raise ValueError("`blocks` must be given with order='blocks', but got None")
            sizes = [_check_int("blocks[i]", b, 0) for b in blocks]
            if sum(sizes) != self.n:
                raise ValueError(
                    f"`blocks` must sum to n ({self.n}), but got {len(sizes)} blocks summing "
                    f"to {sum(sizes)}"
                )
            self._blocks = np.asarray(sizes, dtype=np.int64)
            self._blocks_digest = hashlib.sha256(
                ",".join(map(str, sizes)).encode()).hexdigest()
        elif blocks is not None:
            raise ValueError(f"`blocks` must be None with order={order!r}, but got a sequence")
        self._cached_epoch: int | None = None
        self._cached_order: _OrderCache | None = None

    # -- the order ------------------------------------------------------------------------

    def _order(self, epoch: int) -> _OrderCache:
        if self._cached_epoch != epoch or self._cached_order is None:
            if self._blocks is not None:
                order: _GlobalOrder | _BlocksOrder = _BlocksOrder(
                    self._blocks, buffer_blocks=self.buffer_blocks, seed=self.seed, epoch=epoch)
            else:
                order = _GlobalOrder(self.n, seed=self.seed, epoch=epoch)
            self._cached_order = _OrderCache(order, self.n)
            self._cached_epoch = epoch
        return self._cached_order

    def indices(self, epoch: int, lo: int, hi: int) -> npt.NDArray[np.int64]:
        """Positions ``[lo, hi)`` of epoch ``epoch``'s order: the window indices there.

        Raises:
            ValueError: ``epoch`` is negative or ``[lo, hi)`` is not within ``[0, n]``.
        """
        epoch = _check_int("epoch", epoch, 0)
        if not 0 <= lo <= hi <= self.n:
            raise ValueError(f"`[lo, hi)` must be within [0, {self.n}], but got [{lo}, {hi})")
        return self._order(epoch).get(lo, hi).copy()

    def permutation(self, epoch: int) -> torch.Tensor:
        """Epoch ``epoch``'s whole order of all ``n`` windows (int64 tensor; O(n) memory).

        For inspection and tests; iterating never materialises it.
        """
        return torch.from_numpy(self.indices(epoch, 0, self.n))

    def _total(self, epoch: int) -> int:
        return self.n

    def __iter__(self) -> Iterator[list[int]]:
        """This rank's remaining batches of the current epoch, from the committed position."""
        for epoch, a, b in self._spans():
            yield self._order(epoch).get(a, b).tolist()

    @property
    def batches_per_epoch(self) -> int:
        """Batches per rank in a whole epoch."""
        return -(-self._end(0, 0) // self.global_batch)

    def state_dict(self) -> JsonObject:
        """The global position, a small JSON-serialisable dict (committed once ``step`` is used)."""
        return {
            "format": _STATE_FORMAT,
            "version": _STATE_VERSION,
            "seed": self.seed,
            "n": self.n,
            "drop_last": self.drop_last,
            "global_batch": self.global_batch,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            **self._position(),
            "order": self.order,
            "blocks": None if self._blocks is None else {
                "count": len(self._blocks), "sha256": self._blocks_digest,
                "buffer_blocks": self.buffer_blocks},
            **({} if self.fingerprint is None else {"fingerprint": self.fingerprint}),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: the next iteration yields exactly the batches that came next.

        The world size and batch size may differ from the run that saved the state; ``n``,
        ``seed``, ``drop_last`` and the order (with its blocks and k) must not.

        Raises:
            SamplerStateError: the state is not a sampler state, is of another version (version 1,
                the ``torch.randperm`` order, cannot be continued by this reader), or belongs
                to another dataset (its fingerprint, or n), seed or order.
        """
        if not isinstance(state, Mapping) or state.get("format") != _STATE_FORMAT:
            raise SamplerStateError(f"not an EpochSampler state: {state!r}")
        version = state.get("version")
        if version == 1:
            raise SamplerStateError(
                "EpochSampler state version 1 was saved by a reader whose order came from "
                "torch.randperm; this reader's order (version 2) is a Feistel permutation, so "
                "it cannot continue that epoch exactly. Either finish the run with the release "
                "that saved it, or continue with the next epoch on this reader by loading "
                "{**state, 'version': 2, 'epoch': state['epoch'] + 1, 'cursor': 0, "
                "'order': 'global', 'blocks': None} (the rest of the saved epoch is skipped)"
            )
        if version != _STATE_VERSION:
            raise SamplerStateError(
                f"EpochSampler state version {version!r} is not {_STATE_VERSION}; it was saved "
                "by another release of the reader: resume with that release"
            )
        for key in ("seed", "n", "drop_last", "epoch", "cursor", "targets_seen", "batches_seen",
                    "order", "blocks"):
            if key not in state:
                raise SamplerStateError(f"the EpochSampler state lacks the key {key!r}")
        check_fingerprint("EpochSampler", self.fingerprint, state=state)
        mine = self.state_dict()
        for key in ("n", "seed", "drop_last", "order", "blocks"):
            if state[key] != mine[key]:
                raise SamplerStateError(
                    f"the state has {key} {state[key]!r}, but this sampler has "
                    f"{mine[key]!r}; it belongs to another dataset or run"
                )
        self._load_position(state, beyond=f"n ({self.n})")

    def __repr__(self) -> str:
        return (
            f"EpochSampler(n={self.n}, batch_size={self.batch_size}, seed={self.seed}, "
            f"rank={self.rank}, world_size={self.world_size}, drop_last={self.drop_last}, "
            f"order={self.order!r}, epoch={self.epoch}, cursor={self.cursor})"
        )
