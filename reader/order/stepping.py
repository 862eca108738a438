"""What every sampler shares: the `Sampler` contract, and the committed position `step` moves.

:class:`reader.EpochSampler`, :class:`reader.PackedSampler` and :class:`reader.MixtureSampler`
are DataLoader ``batch_sampler``\\ s with one contract (`Sampler`): iterating yields this
rank's batches from a position; the training loop calls ``step`` once per batch it has
consumed; ``state_dict`` reports a small JSON dict of the position, and ``load_state_dict``
continues from one exactly. Each has two positions (`CommittedPosition`): the iterator's,
which runs ahead (a DataLoader prefetches), and the committed one, which ``step`` advances
one global batch at a time. Until ``step`` is first called the state reports the iterator's
position; from then on the committed one, so that a checkpoint taken between steps resumes
with the first batch the loop has not consumed.

Example: a loop that has consumed 3 batches while the DataLoader's workers have drawn 5 saves
a state at batch 3, and a fresh sampler loaded with it yields batch 3 first.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

__all__ = ["CommittedPosition", "Sampler", "checked_targets"]

Position = TypeVar("Position")


@runtime_checkable
class Sampler(Protocol):
    """A DataLoader ``batch_sampler`` whose position can be saved and resumed exactly."""

    def __iter__(self) -> Iterator[list[Any]]:
        """This rank's batches (lists of dataset indices, or of packed rows of them)."""
        ...

    def step(self, batch: Mapping[str, Any] | None = None, *,
             num_targets: int | None = None) -> None:
        """Record that the training loop consumed one batch (``batch['num_targets']`` or
        ``num_targets`` scored targets)."""
        ...

    def repeat_batches(self) -> frozenset[int]:
        """Which of the next iteration's batches are deliberate repeats (not to be counted)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The position, a small JSON-serialisable dict."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``, refusing one of another dataset or stream."""
        ...

    @property
    def targets_seen(self) -> int:
        """Scored targets recorded with ``step`` (padding never)."""
        ...


def checked_targets(batch: Mapping[str, Any] | None, num_targets: int | None) -> int:
    """The scored targets a ``step`` records: ``num_targets``, else the batch's."""
    if num_targets is None:
        num_targets = 0 if batch is None else batch["num_targets"]
    value = int(num_targets)
    if value < 0:
        raise ValueError(f"`num_targets` must be at least 0, but got {value}")
    return value


class CommittedPosition(Generic[Position]):
    """The iterator's position and the committed one (the module docstring).

    A subclass sets both with `_reset_position`, moves ``_issued`` as it yields, and says how
    the committed position moves by one global batch (`_commit_next`) and whether the
    iterator has yielded a batch beyond it (`_yielded_beyond`).
    """

    _committed: Position
    _issued: Position
    _tracking: bool
    _targets_seen: int

    def _reset_position(self, start: Position, *, targets_seen: int = 0) -> None:
        """Both positions at ``start``, the state reporting the iterator's until ``step``."""
        self._committed = self._issued = start
        self._tracking = False
        self._targets_seen = targets_seen

    def _start(self) -> Position:
        """The position ``state_dict`` reports, and the next iteration starts from."""
        return self._committed if self._tracking else self._issued

    def _yielded_beyond(self) -> bool:
        """Whether the iterator has yielded a batch the committed position has not passed."""
        raise NotImplementedError

    def _commit_next(self) -> None:
        """Advance ``_committed`` by one global batch."""
        raise NotImplementedError

    def step(self, batch: Mapping[str, Any] | None = None, *,
             num_targets: int | None = None) -> None:
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
        count = checked_targets(batch, num_targets)
        if not self._yielded_beyond():
            raise ValueError(
                "step() was called for more batches than the sampler has yielded; call it once "
                "per batch the training loop has consumed"
            )
        self._commit_next()
        self._tracking = True
        self._targets_seen += count

    @property
    def targets_seen(self) -> int:
        """Scored targets recorded with :meth:`step` (repeats included, padding never)."""
        return self._targets_seen
