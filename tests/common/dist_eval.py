"""Run by tests/reader/test_dist_eval.py under ``torchrun --nproc_per_node 2`` (gloo): evaluate a
dataset across ranks with EpochSampler and PackedSampler, write rank 0's figures as JSON."""

from __future__ import annotations

import functools
import json
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from reader import EpochSampler, PackedSampler, WindowDataset, collate, collate_packed, evaluate


def main(data: str, out: str, seq_len: int) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sys.path.insert(0, "examples")
    from train_tiny import TinyCausalLM

    torch.manual_seed(0)
    ds = WindowDataset(data)
    model = TinyCausalLM(ds.vocab_size, seq_len, d_model=32, n_heads=4).double().eval()

    def forward(b: dict) -> torch.Tensor:
        return model(b["input_ids"], b["position_ids"], b.get("segment_ids"))

    plain = EpochSampler(len(ds), 4, seed=2, rank=rank, world_size=world)
    packed = PackedSampler(ds.lengths, 2, seq_len, seed=2, rank=rank, world_size=world)
    pad = functools.partial(collate, pad_id=ds.eos_id)
    pack = functools.partial(collate_packed, seq_len=seq_len, pad_id=ds.eos_id)
    results = {
        "plain": evaluate(forward, DataLoader(ds, batch_sampler=plain, collate_fn=pad)),
        "packed": evaluate(forward, DataLoader(ds, batch_sampler=packed, collate_fn=pack)),
    }
    gathered: list = [None] * world
    dist.all_gather_object(gathered, results)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(gathered, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
