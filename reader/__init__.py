"""The trainer side: read finished shards into masked PyTorch batches (SPEC §6).

``reader`` imports torch, pyarrow and :mod:`transforms`' schema and manifest, never Apache
Beam, so a trainer installs it without the pipeline's dependencies. Windows are read from a
memory-mapped layout that each shard is converted into once (:mod:`reader.layout`; ahead of
time with ``python -m reader.prepare PATH``), in a seeded order evaluated per position
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

from reader.collate import IGNORE_INDEX, collate
from reader.dataset import WindowBatch, WindowDataset
from reader.layout import default_cache_dir
from reader.loss import evaluate, token_nll
from reader.permutation import FeistelPermutation
from reader.sampler import ORDERS, EpochSampler, epoch_seed

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
