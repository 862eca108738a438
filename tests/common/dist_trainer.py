"""Run by tests/reader/test_hf.py, alone or under ``torchrun --nproc_per_node 2`` (gloo): train
WindowTrainer 12 steps on DATA with BATCH windows a rank, evaluate, and (rank 0) write what it
saw: the sampler state, every rank's windows, the evaluation and the final weights."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import transformers
from torch.utils.data import DataLoader

from reader import WindowDataset, collate, evaluate
from reader.hf import WindowTrainer, causal_lm_logits
from tests.common.reader_data import VOCAB


class Recording(WindowTrainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if model.training:
            self.seen.extend(inputs["index"].reshape(-1).tolist())
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def main(data: str, out: str, batch: int) -> None:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=24, n_embd=32, n_layer=2,
                                     n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     bos_token_id=256, eos_token_id=257)
    model = transformers.GPT2LMHeadModel(config).double()
    ds = WindowDataset(data)
    args = transformers.TrainingArguments(
        out, max_steps=12, per_device_train_batch_size=batch, per_device_eval_batch_size=batch,
        save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, seed=0,
        learning_rate=1e-3, ddp_backend="gloo" if "WORLD_SIZE" in os.environ else None)
    trainer = Recording(model=model, args=args, train_dataset=ds, eval_dataset=ds)
    trainer.seen = []
    trainer.train()
    metrics = trainer.evaluate()
    world = args.world_size
    seen = [trainer.seen]
    guard = ""
    if world > 1:
        seen = [None] * world
        dist.all_gather_object(seen, trainer.seen)
        plain = DataLoader(ds, batch_size=8, collate_fn=functools.partial(collate,
                                                                          pad_id=ds.eos_id))
        try:
            evaluate(functools.partial(causal_lm_logits, trainer.model), plain)
        except ValueError as e:
            guard = str(e)
    if args.process_index == 0:
        Path(out).mkdir(parents=True, exist_ok=True)
        torch.save(trainer.model.state_dict(), Path(out) / "weights.pt")
        result = {"world_size": world, "sampler": trainer.train_sampler.state_dict(),
                  "seen": [i for part in seen for i in part], "guard": guard,
                  "eval": {k: metrics[k] for k in ("eval_loss", "eval_targets")}}
        (Path(out) / "result.json").write_text(json.dumps(result))
    if dist.is_initialized():
        dist.barrier()  # rank 0 has written its files


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    # The results are written: the process ends here. Tearing down DDP's gloo process group
    # races its worker threads, at interpreter exit (now and then a rank aborts: "terminate
    # called without an active exception") and after destroy_process_group alike (the
    # reducer's last reference joins a worker that waits for the GIL: a hang).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
