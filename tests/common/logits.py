"""Logits that give chosen targets chosen probabilities: the oracle of the loss tests."""

from __future__ import annotations

import math

import torch

from tests.common.reader_data import VOCAB


def logits_for(labels: torch.Tensor, probs: dict[tuple[int, int], float]) -> torch.Tensor:
    """Log-probabilities over VOCAB ids giving each scored target its probability."""
    b, t = labels.shape
    logits = torch.full((b, t, VOCAB), math.log(1 / VOCAB), dtype=torch.float64)
    for (i, j), p in probs.items():
        rest = math.log((1 - p) / (VOCAB - 1))
        logits[i, j] = rest
        logits[i, j, labels[i, j]] = math.log(p)
    return logits
