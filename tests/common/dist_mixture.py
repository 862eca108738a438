"""Run by tests/reader/mixture/test_dist.py under ``torchrun --nproc_per_node 2`` (gloo): evaluate a
three-source mixture by source across ranks (plain and packed), write every rank's figures."""

from __future__ import annotations

import functools
import json
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from reader import (
    EpochSampler,
    MixedDataset,
    PackedSampler,
    WindowDataset,
    collate,
    collate_packed,
    evaluate,
)


def main(root: str, out: str, seq_len: int) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mixed = MixedDataset({name: WindowDataset(f"{root}/{name}")
                          for name in ("web", "code", "books")})
    torch.manual_seed(0)
    emb = torch.nn.Embedding(mixed.vocab_size, mixed.vocab_size).double()

    def forward(b: dict) -> torch.Tensor:
        return emb(b["input_ids"])

    plain = EpochSampler(len(mixed), 4, seed=2, rank=rank, world_size=world)
    packed = PackedSampler(mixed.lengths, 2, seq_len, seed=2, rank=rank, world_size=world)
    pad = functools.partial(collate, pad_id=mixed.eos_id)
    pack = functools.partial(collate_packed, seq_len=seq_len, pad_id=mixed.eos_id)
    results = {
        "plain": evaluate(forward, DataLoader(mixed, batch_sampler=plain, collate_fn=pad),
                          by_source=True),
        "packed": evaluate(forward, DataLoader(mixed, batch_sampler=packed, collate_fn=pack),
                           by_source=True),
    }
    gathered: list = [None] * world
    dist.all_gather_object(gathered, results)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(gathered, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
