"""`reader.order.stepping`: the one contract of the three samplers, and the committed position."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from reader import (
    EpochSampler,
    MixedDataset,
    MixtureSampler,
    PackedSampler,
    Sampler,
    WindowDataset,
)
from reader.order.stepping import CommittedPosition, checked_targets
from tests.common.reader_data import random_docs, write_docs


@pytest.fixture(scope="module")
def makers(tmp_path_factory) -> list[Callable[[], Sampler]]:
    """A way to make each kind of sampler afresh, over the same data."""
    root = tmp_path_factory.mktemp("stepping")
    write_docs(root / "a", random_docs(6, seed=1), window=8)
    write_docs(root / "b", random_docs(5, seed=2), window=8)
    a, b = WindowDataset(str(root / "a")), WindowDataset(str(root / "b"))
    mixed = MixedDataset({"a": a, "b": b})
    return [lambda: EpochSampler(len(a), batch_size=2, seed=0),
            lambda: PackedSampler(a.lengths, rows_per_batch=2, seq_len=16, seed=0),
            lambda: MixtureSampler(mixed, {"a": 1, "b": 1}, batch_size=2, seed=0)]


def test_every_sampler_keeps_the_one_contract(makers):
    for make in makers:
        sampler = make()
        assert isinstance(sampler, Sampler) and isinstance(sampler, CommittedPosition)
        assert type(sampler).step is CommittedPosition.step  # the committed position: one step


def test_a_state_between_steps_resumes_with_the_first_batch_not_consumed(makers):
    # The loop consumed 3 batches while the iterator drew 5 (a DataLoader prefetches): the
    # state is at batch 3, for each kind of sampler alike.
    for make in makers:
        sampler = make()
        drawn = iter(sampler)
        batches = [next(drawn) for _ in range(5)]
        for _ in range(3):
            sampler.step(num_targets=1)
        assert sampler.targets_seen == 3
        again = make()
        again.load_state_dict(sampler.state_dict())
        assert next(iter(again)) == batches[3], type(sampler).__name__


def test_step_refuses_more_batches_than_were_yielded_and_negative_targets(makers):
    for make in makers:
        sampler = make()
        drawn = iter(sampler)
        next(drawn)
        sampler.step(num_targets=0)
        with pytest.raises(ValueError, match=r"step\(\) was called for more batches"):
            sampler.step(num_targets=0)
    with pytest.raises(ValueError, match="`num_targets` must be at least 0, but got -1"):
        checked_targets(None, -1)
    assert checked_targets({"num_targets": 7}, None) == 7
    assert checked_targets({"num_targets": 7}, 2) == 2
