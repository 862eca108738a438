"""The trainer side: read finished shards into masked PyTorch batches
(docs/format.md#reader-semantics).

``reader`` uses torch, pyarrow and :mod:`transforms`' schema and manifest, never Apache
Beam, so a trainer installs it without the pipeline's dependencies; its names load on first
use, so ``reader.inspect`` needs no torch. Windows are read from a memory-mapped layout that
each shard is converted into once (:mod:`reader.data.layout`; ahead of time with
``python -m reader.prepare PATH``), in a seeded order evaluated per position
(:mod:`reader.order.permutation`): ``global`` or ``blocks`` (:mod:`reader.order.sampler`), one
window per row (:func:`collate`) or packed several to a row (:mod:`reader.order.packing`).

Example::

    import functools
    import torch
    from reader import EpochSampler, PackedSampler, WindowDataset, collate, collate_packed
    from reader import evaluate, token_nll

    ds = WindowDataset("out/sample")                 # checks the manifest and the shards
    sampler = EpochSampler(len(ds), batch_size=8, seed=0)   # or, for streaming data:
    # EpochSampler(len(ds), 8, seed=0, order="blocks", blocks=ds.blocks("shard"), buffer_blocks=4)
    loader = torch.utils.data.DataLoader(
        ds, batch_sampler=sampler, num_workers=2,
        collate_fn=functools.partial(collate, pad_id=ds.eos_id))
    for batch in loader:
        logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"])
        nll_sum, count = token_nll(logits, batch["shift_labels"])   # already shifted
        (nll_sum / count).backward()
        ...
        sampler.step(batch)                          # consumed: commit it to the state

Packed (several windows per row of ``seq_len``; :mod:`reader.order.packing`)::

    sampler = PackedSampler(ds.lengths, rows_per_batch=8, seq_len=ds.window, seed=0)
    loader = torch.utils.data.DataLoader(
        ds, batch_sampler=sampler, num_workers=2,
        collate_fn=functools.partial(collate_packed, seq_len=ds.window, pad_id=ds.eos_id))
    # attention: block_causal_mask(batch["segment_ids"]), or batch["cu_seqlens"] (varlen),
    # or a Hugging Face model given position_ids, no attention_mask and use_cache=False

With a Hugging Face causal LM, one call is right for both kinds of batch:
``model(input_ids=b["input_ids"], position_ids=b["position_ids"], use_cache=False).logits``
and ``token_nll`` on ``b["shift_labels"]``; never ``labels=`` our targets (HF shifts
``labels`` again; a batch has no ``labels`` key, so ``b["labels"]`` says so).

Refusals are typed (:mod:`transforms.errors`, docs/reader.md#errors): ``DatasetError`` and its
``DamagedDataset``, ``ForeignDataset``, ``UnfinishedDataset`` for the data on disk,
``SamplerStateError`` for a saved state that does not fit; all are ``ValueError``s, and a wrong
argument stays a plain ``ValueError``.
"""

import importlib
from typing import Any

# Loaded on first use (PEP 562), so that `python -m reader.inspect` and `reader.prepare` run
# where torch is not installed; `from reader import WindowDataset` works as before.
_EXPORTS = {
    "IGNORE_INDEX": "reader.batches",
    "Batch": "reader.batches",
    "block_causal_mask": "reader.batches",
    "collate": "reader.batches",
    "collate_packed": "reader.batches",
    "PackedSampler": "reader.order.packing",
    "pack_rows": "reader.order.packing",
    "MixedBatch": "reader.mixture.dataset",
    "MixedDataset": "reader.mixture.dataset",
    "MixtureSampler": "reader.mixture.sampler",
    "WindowBatch": "reader.data.dataset",
    "WindowRows": "reader.data.dataset",
    "WindowDataset": "reader.data.dataset",
    "DamagedDataset": "transforms.errors",
    "DatasetError": "transforms.errors",
    "ForeignDataset": "transforms.errors",
    "MissingShard": "transforms.errors",
    "NotRegularFileError": "reader.data.regular",
    "SamplerStateError": "transforms.errors",
    "UnfinishedDataset": "transforms.errors",
    "default_cache_dir": "reader.data.layout",
    "evaluate": "reader.loss",
    "token_nll": "reader.loss",
    "FeistelPermutation": "reader.order.permutation",
    "ORDERS": "reader.order.sampler",
    "EpochSampler": "reader.order.sampler",
    "epoch_seed": "reader.order.sampler",
    "Sampler": "reader.order.stepping",
}

__all__ = [
    "IGNORE_INDEX",
    "ORDERS",
    "Batch",
    "DamagedDataset",
    "DatasetError",
    "EpochSampler",
    "FeistelPermutation",
    "ForeignDataset",
    "MissingShard",
    "MixedBatch",
    "MixedDataset",
    "MixtureSampler",
    "NotRegularFileError",
    "PackedSampler",
    "Sampler",
    "SamplerStateError",
    "UnfinishedDataset",
    "WindowBatch",
    "WindowRows",
    "WindowDataset",
    "block_causal_mask",
    "collate",
    "collate_packed",
    "default_cache_dir",
    "epoch_seed",
    "evaluate",
    "pack_rows",
    "token_nll",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'reader' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
