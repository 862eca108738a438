"""Train a tiny causal transformer on finished shards, checkpoint mid-epoch, and resume.

Usage (after the pipeline's first README command has written ``out/sample``)::

    python examples/train_tiny.py out/sample              # 160 steps; saves at step 80
    python examples/train_tiny.py out/sample --resume     # continues from step 80
    python examples/train_tiny.py out/sample --pack       # several windows per row

``--pack`` reads packed rows (``PackedSampler`` + ``collate_packed``; ``--batch-size`` is then
rows per batch) and attends with the block-diagonal causal mask from ``segment_ids``.

The second run loads the model, the optimiser and the sampler state saved at step 80 and
trains on exactly the batches the first run trained on after it, so both print the same
final loss. Evaluation holds out the last documents of the global order (rows are sorted
by the seeded document key, so they are a random sample of documents) and reports the NLL
summed over every held-out target before dividing, and its perplexity. Pure PyTorch on the
CPU; the defaults take well under a minute.

The model, :class:`TinyCausalLM`, is also what ``tests/reader/test_reader.py`` checks for the causal
properties docs/format.md#collate relies on (a later input never changes an earlier position's
logits; right padding never changes a real position's logits).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Subset

if importlib.util.find_spec("reader") is None:
    # Run as `python examples/train_tiny.py` from a checkout: make the repository importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reader import (  # noqa: E402
    EpochSampler,
    PackedSampler,
    WindowDataset,
    block_causal_mask,
    collate,
    collate_packed,
    evaluate,
    token_nll,
)

__all__ = ["TinyCausalLM", "main"]


class _Block(nn.Module):
    """A pre-norm transformer block with causal self-attention."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads, d // self.n_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        # Causal: position t reads keys <= t only, so right padding never reaches a real
        # position and no separate padding mask is needed. Packed rows pass the
        # block-diagonal causal mask instead, so no window reads another's keys.
        if mask is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyCausalLM(nn.Module):
    """A small GPT-style decoder: token + learned position embeddings, causal blocks.

    Args:
        vocab_size: the tokenizer's vocabulary (``WindowDataset.vocab_size``).
        max_len: the longest input, the window W (``WindowDataset.window``).
        d_model: the width.
        n_heads: attention heads (must divide ``d_model``).
        n_layers: blocks.
    """

    def __init__(
        self, vocab_size: int, max_len: int, *, d_model: int = 64, n_heads: int = 4,
        n_layers: int = 2,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"`n_heads` must divide d_model ({d_model}), but got {n_heads}")
        self.max_len = max_len
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, n_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None,
        segment_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits (B, T, V); position t predicts the token after input t.

        With ``segment_ids`` (a packed batch from ``collate_packed``), attention is
        block-diagonal causal: each window attends only to itself.
        """
        b, t = input_ids.shape
        if t > self.max_len:
            raise ValueError(f"inputs have {t} positions, but the model holds {self.max_len}")
        if position_ids is None:
            position_ids = torch.arange(t, device=input_ids.device).expand(b, t)
        x = self.tok(input_ids) + self.pos(position_ids)
        mask = None if segment_ids is None else block_causal_mask(segment_ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


def _heldout_start(ds: WindowDataset, fraction: float) -> int:
    """The first index of the held-out tail, moved forward to a document boundary."""
    n = len(ds)
    cut = min(n, max(1, round(n * (1 - fraction))))
    while 0 < cut < n and ds[cut]["doc_id"] == ds[cut - 1]["doc_id"]:
        cut += 1
    return cut


def _blocks_before(ds: WindowDataset, cut: int) -> list[int]:
    """The row-group sizes of the first ``cut`` windows (the training part)."""
    out, total = [], 0
    for size in ds.blocks("row_group"):
        take = min(size, cut - total)
        if take <= 0:
            break
        out.append(take)
        total += take
    return out


def _save(path: str, state: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)  # a crash never leaves half a checkpoint


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", nargs="?", default="out/sample",
                   help="a finished output directory or URI (default: out/sample)")
    p.add_argument("--steps", type=int, default=160, help="optimiser steps in all (default 160)")
    p.add_argument("--batch-size", type=int, default=8, help="windows per batch (default 8)")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate (default 3e-3)")
    p.add_argument("--seed", type=int, default=0, help="model init and sampler seed (default 0)")
    p.add_argument("--num-workers", type=int, default=2, help="DataLoader workers (default 2)")
    p.add_argument("--order", choices=("global", "blocks"), default="global",
                   help="the sampler's order: global (default) or blocks (row groups, k = "
                        "--buffer-blocks)")
    p.add_argument("--buffer-blocks", type=int, default=16,
                   help="with --order blocks, the row groups mixed together (default 16)")
    p.add_argument("--checkpoint", default="out/train_tiny.pt",
                   help="checkpoint file (default out/train_tiny.pt)")
    p.add_argument("--save-at", type=int, default=None,
                   help="step at which to save the checkpoint (default: steps // 2)")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--eval-fraction", type=float, default=0.1,
                   help="share of documents held out for evaluation (default 0.1)")
    p.add_argument("--eval-every", type=int, default=80, help="evaluate every N steps (80)")
    p.add_argument("--log-every", type=int, default=20, help="print the loss every N steps (20)")
    p.add_argument("--pack", action="store_true",
                   help="pack several windows into each row of W positions (PackedSampler)")
    p.add_argument("--open-rows", type=int, default=16,
                   help="with --pack, the rows kept open while packing (default 16)")
    p.add_argument("--d-model", type=int, default=64, help="model width (default 64)")
    p.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"--steps must be a positive integer, but got {args.steps}")
    if args.save_at is None:
        args.save_at = args.steps // 2
    if not 0.0 <= args.eval_fraction < 1.0:
        p.error(f"--eval-fraction must be in [0, 1), but got {args.eval_fraction}")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the example; returns (and prints as the last line, JSON) the final figures."""
    args = _parse(argv)
    began = time.perf_counter()
    torch.manual_seed(args.seed)
    try:
        ds = WindowDataset(args.data)
    except FileNotFoundError as e:
        sys.exit(f"{e}\n(write a dataset first: see README, 'Reading shards in PyTorch')")
    cut = _heldout_start(ds, args.eval_fraction)
    train_set = Subset(ds, range(cut))
    eval_set = Subset(ds, range(cut, len(ds))) if cut < len(ds) else train_set
    print(f"{ds!r}: {cut} training windows, {len(eval_set)} evaluation windows"
          + ("" if cut < len(ds) else " (too few documents to hold out: evaluating on train)"))

    pad = functools.partial(collate, pad_id=ds.eos_id)
    order: dict[str, Any] = {} if args.order == "global" else {
        "order": "blocks", "blocks": _blocks_before(ds, cut), "buffer_blocks": args.buffer_blocks}
    sampler: EpochSampler | PackedSampler
    if args.pack:
        # The training windows are the indices [0, cut), so the dataset itself serves them.
        sampler = PackedSampler(ds.lengths[:cut], args.batch_size, ds.window, seed=args.seed,
                                open_rows=args.open_rows, **order)
        loader = DataLoader(ds, batch_sampler=sampler, num_workers=args.num_workers,
                            collate_fn=functools.partial(collate_packed, seq_len=ds.window,
                                                         pad_id=ds.eos_id),
                            persistent_workers=args.num_workers > 0)
    else:
        sampler = EpochSampler(len(train_set), batch_size=args.batch_size, seed=args.seed,
                               **order)
        loader = DataLoader(train_set, batch_sampler=sampler, collate_fn=pad,
                            num_workers=args.num_workers, persistent_workers=args.num_workers > 0)
    eval_loader = DataLoader(eval_set, batch_size=args.batch_size, collate_fn=pad)
    model = TinyCausalLM(ds.vocab_size, ds.window, d_model=args.d_model, n_heads=args.heads,
                         n_layers=args.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    step = 0
    if args.resume:
        ckpt = torch.load(args.checkpoint, weights_only=True)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        if ckpt.get("pack", False) != args.pack:
            sys.exit(f"{args.checkpoint} was saved {'with' if ckpt.get('pack') else 'without'} "
                     "--pack: resume it the same way")
        sampler.load_state_dict(ckpt["sampler"])
        step = ckpt["step"]
        print(f"resumed from {args.checkpoint} at step {step}: sampler epoch "
              f"{sampler.epoch}, cursor {sampler.cursor}")

    def forward(b: dict[str, Any]) -> torch.Tensor:
        # A packed batch has segment_ids: the model then attends block-diagonally.
        return model(b["input_ids"], b["position_ids"], b.get("segment_ids"))

    def run_eval() -> dict[str, float | int]:
        model.eval()
        result = evaluate(forward, eval_loader)
        print(f"step {step:4d}  eval nll {result['nll']:.4f}  perplexity "
              f"{result['perplexity']:.2f}  over {result['targets']} targets")
        return result

    loss_value = math.nan
    result: dict[str, float | int] = {}
    while step < args.steps:
        for batch in loader:
            model.train()
            logits = forward(batch)
            nll_sum, count = token_nll(logits, batch["shift_labels"])
            loss = nll_sum / count
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            sampler.step(batch)  # consumed: the sampler's state now includes this batch
            step += 1
            loss_value = loss.item()
            if step % args.log_every == 0 or step == args.steps:
                print(f"step {step:4d}  epoch {sampler.epoch}  train loss {loss_value:.4f}  "
                      f"targets seen {sampler.targets_seen}")
            if step == args.save_at and not args.resume:
                _save(args.checkpoint, {"model": model.state_dict(),
                                        "optimizer": optimizer.state_dict(),
                                        "sampler": sampler.state_dict(), "step": step,
                                        "pack": args.pack})
                print(f"saved {args.checkpoint} at step {step} (sampler epoch {sampler.epoch}, "
                      f"cursor {sampler.cursor})")
            if step % args.eval_every == 0 or step == args.steps:
                result = run_eval()
            if step >= args.steps:
                break
    summary = {"step": step, "train_loss": loss_value, "eval_nll": result.get("nll"),
               "eval_perplexity": result.get("perplexity"), "eval_targets": result.get("targets"),
               "targets_seen": sampler.targets_seen,
               "seconds": round(time.perf_counter() - began, 2)}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
