"""The trainer side: read finished shards into masked PyTorch batches (SPEC §6).

``reader`` uses torch, pyarrow and :mod:`transforms`' schema and manifest, never Apache
Beam, so a trainer installs it without the pipeline's dependencies; its names load on first
use, so ``reader.inspect`` needs no torch. Windows are read from a memory-mapped layout that
each shard is converted into once (:mod:`reader.layout`; ahead of time with
``python -m reader.prepare PATH``), in a seeded order evaluated per position
(:mod:`reader.permutation`): ``global`` or ``blocks`` (:mod:`reader.sampler`).

Example::

    import functools
    import torch
    from reader import EpochSampler, WindowDataset, collate, evaluate, token_nll

    ds = WindowDataset("out/sample")                 # checks the manifest and the shards
    sampler = EpochSampler(len(ds), batch_size=8, seed=0)   # or, for streaming data:
    # EpochSampler(len(ds), 8, seed=0, order="blocks", blocks=ds.blocks("shard"), buffer_blocks=4)
    loader = torch.utils.data.DataLoader(
        ds, batch_sampler=sampler, num_workers=2,
        collate_fn=functools.partial(collate, pad_id=ds.eos_id))
    for batch in loader:
        nll_sum, count = token_nll(model(batch["input_ids"], batch["position_ids"]),
                                   batch["labels"])
        (nll_sum / count).backward()
        ...
        sampler.step(batch)                          # consumed: commit it to the state
"""

import importlib
from typing import Any

# Loaded on first use (PEP 562), so that `python -m reader.inspect` and `reader.prepare` run
# where torch is not installed; `from reader import WindowDataset` works as before.
_EXPORTS = {
    "IGNORE_INDEX": "reader.collate",
    "collate": "reader.collate",
    "WindowBatch": "reader.dataset",
    "WindowDataset": "reader.dataset",
    "default_cache_dir": "reader.layout",
    "evaluate": "reader.loss",
    "token_nll": "reader.loss",
    "FeistelPermutation": "reader.permutation",
    "ORDERS": "reader.sampler",
    "EpochSampler": "reader.sampler",
    "epoch_seed": "reader.sampler",
}

__all__ = [
    "IGNORE_INDEX",
    "ORDERS",
    "EpochSampler",
    "FeistelPermutation",
    "WindowBatch",
    "WindowDataset",
    "collate",
    "default_cache_dir",
    "epoch_seed",
    "evaluate",
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
