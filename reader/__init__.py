"""The trainer side: read finished shards into masked PyTorch batches (SPEC §6).

``reader`` imports torch, pyarrow and :mod:`transforms.schema`, never Apache Beam, so a
trainer installs it without the pipeline's dependencies.

Example::

    import functools
    import torch
    from reader import EpochSampler, WindowDataset, collate, evaluate, token_nll

    ds = WindowDataset("out/sample")                 # checks the manifest and the shards
    sampler = EpochSampler(len(ds), batch_size=8, seed=0)
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
from reader.dataset import WindowDataset
from reader.loss import evaluate, token_nll
from reader.sampler import EpochSampler, epoch_seed

__all__ = [
    "IGNORE_INDEX",
    "EpochSampler",
    "WindowDataset",
    "collate",
    "epoch_seed",
    "evaluate",
    "token_nll",
]
