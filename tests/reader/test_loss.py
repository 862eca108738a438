"""Tests of reader.loss: the masked NLL of a batch and evaluation over a whole set."""

from __future__ import annotations

import math

import pytest
import torch

from reader import collate, evaluate, token_nll
from tests.common.logits import logits_for
from tests.common.reader_data import EOS, VOCAB


def test_token_nll_rejects_a_batch_without_targets() -> None:
    with pytest.raises(ValueError, match="no scored target"):
        token_nll(torch.zeros(1, 2, VOCAB), torch.full((1, 2), -100))
    with pytest.raises(ValueError, match=r"logits must be \(B, T, V\)"):
        token_nll(torch.zeros(1, 3, VOCAB), torch.zeros(1, 2, dtype=torch.long))


def test_evaluate_divides_the_total_once_not_a_mean_of_batch_means() -> None:
    big = collate([{"tokens": [1, 2, 3, 4, 5], "length": 4, "loss_start": 0}], pad_id=EOS)
    small_batch = collate([{"tokens": [1, 2], "length": 1, "loss_start": 0}], pad_id=EOS)
    # Every target of the big batch has probability 1/2, the small one's 1/8.
    logits = {
        id(big): logits_for(big["shift_labels"], {(0, j): 0.5 for j in range(4)}),
        id(small_batch): logits_for(small_batch["shift_labels"], {(0, 0): 0.125}),
    }
    result = evaluate(lambda b: logits[id(b)], [big, small_batch])
    expected = (4 * math.log(2) + 3 * math.log(2)) / 5
    assert result["targets"] == 5 and result["batches"] == 2
    assert abs(result["nll"] - expected) < 1e-12  # a mean of batch means would be 2 ln 2
    assert abs(result["perplexity"] - math.exp(expected)) < 1e-9
    with pytest.raises(ValueError, match="evaluation set is empty"):
        evaluate(lambda b: logits[id(b)], [])


def test_evaluate_refuses_a_loader_not_dealt_over_the_ranks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a process group of two ranks, a plain loader would be scored once per rank.

    (The real two-process run is tests/reader/test_hf.py's torchrun test.)
    """
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    from reader import EpochSampler

    windows = [{"tokens": [1, 2, 3], "length": 2, "loss_start": 0, "index": i} for i in range(4)]
    reduced: list[torch.Tensor] = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(dist, "all_reduce", lambda t, *a, **k: reduced.append(t))

    def forward(b: dict) -> torch.Tensor:
        return torch.zeros(*b["input_ids"].shape, VOCAB)

    def pad(b: list) -> dict:
        return collate(b, pad_id=EOS)

    for loader in (DataLoader(windows, batch_size=2, collate_fn=pad),
                   [pad(windows[:2]), pad(windows[2:])]):
        with pytest.raises(ValueError, match=r"not dealt over the 2 ranks.*distributed=False"):
            evaluate(forward, loader)
        assert reduced == []  # refused before any forward or collective
        assert evaluate(forward, loader, distributed=False)["targets"] == 8
    dealt = DataLoader(windows, collate_fn=pad,
                       batch_sampler=EpochSampler(4, 1, seed=0, rank=0, world_size=2))
    assert evaluate(forward, dealt)["targets"] == 4  # this rank's half; the sum is mocked
    assert len(reduced) == 2
