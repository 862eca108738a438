"""Masked next-token NLL for training and evaluation (docs/format.md#loss).

Contract: a batch's loss is the sum of the token NLL over its scored targets (labels that
are not −100) divided by their number; evaluation sums NLL and counts over the whole set
before dividing once, so it is the mean over targets, never a mean of batch means (which
would give a short tail batch the weight of a full one), summed over ranks too, without the
sampler's deliberate repeats.

Example::

    nll_sum, count = token_nll(model(batch["input_ids"]), batch["shift_labels"])
    (nll_sum / count).backward()
    evaluate(lambda b: model(input_ids=b["input_ids"], position_ids=b["position_ids"]),
             eval_loader)   # across ranks when torch.distributed is initialised
    # {"nll": 2.31, "perplexity": 10.1, "targets": 51234, "batches": 40, "repeats": 0}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NotRequired, TypedDict

import torch
import torch.nn.functional as F

from reader.batches import IGNORE_INDEX

__all__ = ["Evaluation", "SourceLoss", "evaluate", "token_nll"]


def token_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The summed NLL of the scored targets of a batch, and their number.

    Args:
        logits: (B, T, V) unnormalised scores; position t predicts ``labels[:, t]``.
        labels: (B, T) target ids, −100 where nothing is scored (already shifted by
            :func:`reader.collate`, ``batch["shift_labels"]``: do not shift again).

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


def _sampler_of(loader: Iterable[Any]) -> Any:
    """The loader's batch sampler if it names its deliberate repeats (ours do), else None."""
    sampler = getattr(loader, "batch_sampler", None)
    return sampler if callable(getattr(sampler, "repeat_batches", None)) else None


def _per_source(logits: torch.Tensor, batch: Mapping[str, Any]) -> tuple[Any, ...]:
    """(names, NLL sums (float64), target counts (int64)) per source of a mixture's batch."""
    if "source_ids" not in batch:
        raise ValueError("by_source needs batches of a MixedDataset (their 'source_ids' say "
                         "each position's source): DataLoader(MixedDataset(...), ...) with "
                         "collate or collate_packed")
    labels = batch["shift_labels"]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(),
                          labels.reshape(-1).long(), reduction="none", ignore_index=IGNORE_INDEX)
    # The window of each position: its row (one window a row), or with packed rows the row's
    # first window plus the position's segment (padding, segment −1, is never scored).
    rows, width = labels.shape
    if "segment_ids" in batch:
        seg = batch["segment_ids"].cpu()
        count = seg.max(dim=1).values + 1
        first = torch.cumsum(count, 0) - count
        window = first[:, None] + seg.clamp(min=0)
    else:
        window = torch.arange(rows)[:, None].expand(rows, width)
    scored = labels.reshape(-1) != IGNORE_INDEX
    ids = batch["source_ids"].cpu()[window.reshape(-1)[scored.cpu()]]
    names = tuple(batch["sources"])
    sums = torch.zeros(len(names), dtype=torch.float64).index_add_(0, ids, nll[scored].cpu())
    return names, sums, torch.bincount(ids, minlength=len(names))


class SourceLoss(TypedDict):
    """One source's part of an `Evaluation` (``by_source=True``)."""

    nll: float
    perplexity: float
    targets: int


class Evaluation(TypedDict):
    """What `evaluate` returns: mean NLL, perplexity, scored targets, batches, the windows a
    batches run but not counted, and with ``by_source`` each source's part."""

    nll: float
    perplexity: float
    targets: int
    batches: int
    repeats: int
    by_source: NotRequired[dict[str, SourceLoss]]


def _by_source(names: tuple[str, ...], sums: torch.Tensor,
               counts: torch.Tensor) -> dict[str, SourceLoss]:
    out: dict[str, SourceLoss] = {}
    for name, total, n in zip(names, sums.tolist(), counts.tolist(), strict=True):
        nll = total / n if n else math.nan
        out[name] = SourceLoss(nll=nll, perplexity=math.exp(min(nll, 700.0)) if n else math.nan,
                               targets=int(n))
    return out


def evaluate(
    model_fn: Callable[[Mapping[str, Any]], torch.Tensor],
    loader: Iterable[Mapping[str, Any]],
    *,
    distributed: bool | None = None,
    by_source: bool = False,
) -> Evaluation:
    """Mean NLL and perplexity over every scored target of ``loader``, across ranks.

    Runs under ``torch.no_grad()``; put the model in eval mode yourself. When the loader's
    ``batch_sampler`` is an :class:`reader.EpochSampler` or :class:`reader.PackedSampler`
    (a ``DataLoader(ds, batch_sampler=sampler, ...)``), the batches it names as deliberate
    repeats (a short tail dealt to more ranks than it has windows or rows) go through
    ``model_fn`` like the others, so that every rank takes part in every forward (FSDP needs
    it), but are not counted. With ``distributed``, the NLL sum (float64) and the target
    and batch counts (int64) are summed over the ranks with ``all_reduce`` before dividing, so
    every rank returns the figure of a one-process evaluation of the same windows: the
    counts exactly, the NLL to float rounding.

    Args:
        model_fn: maps a collated batch to its logits (B, T, V).
        loader: the batches, e.g. a ``DataLoader`` with ``collate_fn=collate``.
        distributed: sum over the ranks of the default process group; ``None`` (default):
            when ``torch.distributed`` is initialised. Pass ``False`` to evaluate this
            rank's batches alone.
        by_source: also the NLL and targets of each source of a :class:`reader.MixedDataset`
            (from the batches' ``source_ids``), summed across ranks like the total, under
            ``"by_source"``: ``{name: {"nll", "perplexity", "targets"}}`` in the mixture's
            order (a source without a scored target has NLL ``nan``).

    Returns:
        ``{"nll": total NLL / targets, "perplexity": exp(nll), "targets": n, "batches": k,
        "repeats": r}`` (``batches`` counts the batches scored, over all ranks; ``repeats``
        this rank's batches run but not counted).

    Raises:
        ValueError: no batch was scored (an empty evaluation set has no mean), the
            sampler's world size is not the process group's, or, summing over more than one
            rank, the loader's batch sampler is not one of ours (a plain ``DataLoader``, a
            ``DistributedSampler``: each would count windows once per rank, or pad with
            repeats).
    """
    import torch.distributed as dist

    if distributed is None:
        distributed = dist.is_available() and dist.is_initialized()
    sampler = _sampler_of(loader)
    repeats = sampler.repeat_batches() if sampler is not None else frozenset()
    if distributed and sampler is None and dist.get_world_size() > 1:
        # Each rank would score whatever its loader gives (every window, for a plain
        # DataLoader) and the all-reduce would add them up: refuse rather than double-count.
        raise ValueError(
            f"the loader is not dealt over the {dist.get_world_size()} ranks of the process "
            "group (its batch_sampler is not an EpochSampler, PackedSampler or MixtureSampler), so "
            "summing over "
            "ranks would count its windows once per rank; build it with batch_sampler="
            "EpochSampler(len(ds), batch_size, seed=0, rank=torch.distributed.get_rank(), "
            "world_size=torch.distributed.get_world_size()), or pass distributed=False to "
            "evaluate this rank's batches alone"
        )
    if distributed and sampler is not None and sampler.world_size != dist.get_world_size():
        raise ValueError(
            f"the loader's sampler has world_size {sampler.world_size}, but the process group "
            f"has {dist.get_world_size()} ranks; build it with world_size="
            "torch.distributed.get_world_size() and rank=torch.distributed.get_rank()"
        )
    total = torch.zeros((), dtype=torch.float64)
    targets = 0
    batches = 0
    skipped = 0
    names: tuple[str, ...] = ()
    source_sums = source_counts = torch.zeros(0)
    with torch.no_grad():
        for k, batch in enumerate(loader):
            logits = model_fn(batch)
            nll_sum, count = token_nll(logits, batch["shift_labels"])
            if k in repeats:
                skipped += 1
                continue
            total += nll_sum.detach().double().cpu()
            targets += count
            batches += 1
            if by_source:
                names, sums, counts_k = _per_source(logits, batch)
                if source_sums.numel() == 0:
                    source_sums, source_counts = sums, counts_k
                else:
                    source_sums, source_counts = source_sums + sums, source_counts + counts_k
    if distributed:
        counts = torch.tensor([targets, batches], dtype=torch.int64)
        dist.all_reduce(total)
        dist.all_reduce(counts)
        targets, batches = (int(v) for v in counts.tolist())
        if by_source:
            dist.all_reduce(source_sums)
            dist.all_reduce(source_counts)
    if targets == 0:
        raise ValueError("the evaluation set is empty: it has no scored target")
    nll = float(total) / targets
    try:
        perplexity = math.exp(nll)
    except OverflowError:
        perplexity = math.inf
    result = Evaluation(nll=nll, perplexity=perplexity, targets=targets, batches=batches,
                        repeats=skipped)
    if by_source:
        result["by_source"] = _by_source(names, source_sums, source_counts)
    return result
