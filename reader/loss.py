"""Masked next-token NLL for training and evaluation (SPEC §6, seed 004).

Contract: a batch's loss is the sum of the token NLL over its scored targets (labels that
are not −100) divided by their number; evaluation sums NLL and counts over the whole set
before dividing once, so it is the mean over targets, never a mean of batch means (which
would give a short tail batch the weight of a full one).

Example::

    nll_sum, count = token_nll(model(batch["input_ids"]), batch["labels"])
    (nll_sum / count).backward()
    evaluate(lambda b: model(b["input_ids"], b["position_ids"]), eval_loader)
    # {"nll": 2.31, "perplexity": 10.1, "targets": 51234, "batches": 40}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from reader.collate import IGNORE_INDEX

__all__ = ["evaluate", "token_nll"]


def token_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The summed NLL of the scored targets of a batch, and their number.

    Args:
        logits: (B, T, V) unnormalised scores; position t predicts ``labels[:, t]``.
        labels: (B, T) target ids, −100 where nothing is scored (already shifted by
            :func:`reader.collate`: do not shift again).

    Returns:
        ``(nll_sum, count)``: a scalar tensor (differentiable, in the logits' dtype) and an int.

    Raises:
        ValueError: the shapes disagree, or no label is scored.
    """
    if logits.dim() != 3 or labels.dim() != 2 or logits.shape[:2] != labels.shape:
        raise ValueError(
            f"logits must be (B, T, V) and labels (B, T), but got {tuple(logits.shape)} and "
            f"{tuple(labels.shape)}"
        )
    count = int((labels != IGNORE_INDEX).sum())
    if count == 0:
        raise ValueError("the batch has no scored target, so it has no mean loss")
    nll_sum = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        labels.reshape(-1).long(),
        reduction="sum",
        ignore_index=IGNORE_INDEX,
    )
    return nll_sum, count


def evaluate(
    model_fn: Callable[[Mapping[str, Any]], torch.Tensor],
    loader: Iterable[Mapping[str, Any]],
) -> dict[str, float | int]:
    """Mean NLL and perplexity over every scored target of ``loader``.

    Runs under ``torch.no_grad()``; put the model in eval mode yourself.

    Args:
        model_fn: maps a collated batch to its logits (B, T, V).
        loader: the batches, e.g. a ``DataLoader`` with ``collate_fn=collate``.

    Returns:
        ``{"nll": total NLL / targets, "perplexity": exp(nll), "targets": n, "batches": k}``.

    Raises:
        ValueError: the loader yields no batch (an empty evaluation set has no mean).
    """
    total = 0.0
    targets = 0
    batches = 0
    with torch.no_grad():
        for batch in loader:
            nll_sum, count = token_nll(model_fn(batch), batch["labels"])
            total += float(nll_sum.double())
            targets += count
            batches += 1
    if targets == 0:
        raise ValueError("the evaluation set is empty: it has no scored target")
    nll = total / targets
    try:
        perplexity = math.exp(nll)
    except OverflowError:
        perplexity = math.inf
    return {"nll": nll, "perplexity": perplexity, "targets": targets, "batches": batches}
