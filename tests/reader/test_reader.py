"""Tests of the reader as trainers use it: DataLoader resume, the example model and script."""

from __future__ import annotations

import functools
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from reader import EpochSampler, WindowDataset, collate
from tests.common.reader_data import EOS, VOCAB, random_docs, write_docs

REPO = Path(__file__).resolve().parents[2]


# -- the example model's causal checks (docs/format.md#collate) -----------------------------


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("train_tiny", REPO / "examples" / "train_tiny.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return load_example().TinyCausalLM(VOCAB, 8, d_model=32, n_heads=4, n_layers=2).eval()


def test_a_later_input_never_changes_earlier_logits(tiny_model: torch.nn.Module) -> None:
    a = torch.tensor([[256, 97, 98, 99]])
    b = torch.tensor([[256, 97, 98, 120]])
    with torch.no_grad():
        la, lb = tiny_model(a), tiny_model(b)
    torch.testing.assert_close(la[:, :3], lb[:, :3])
    assert not torch.allclose(la[:, 3], lb[:, 3])  # the 4th input does reach its own position


def test_right_padding_never_changes_real_positions(tiny_model: torch.nn.Module) -> None:
    batch = collate([{"tokens": [256, 97, 98], "length": 2, "loss_start": 0},
                     {"tokens": [256, 97, 98, 99, 100], "length": 4, "loss_start": 0}],
                    pad_id=EOS)
    with torch.no_grad():
        alone = tiny_model(torch.tensor([[256, 97]]))
        padded = tiny_model(batch["input_ids"], batch["position_ids"])
    assert batch["input_ids"][0].tolist() == [256, 97, EOS, EOS]
    torch.testing.assert_close(alone[0], padded[0, :2])


# -- the sampler under a real DataLoader ---------------------------------------------------


def batch_key(batch: dict) -> tuple:
    return batch["input_ids"].tolist(), batch["shift_labels"].tolist(), batch["num_targets"]


def train_loop(ds: WindowDataset, sampler: EpochSampler, workers: int,
               stop: int | None = None) -> list[tuple]:
    """Consume batches until ``stop`` of them or the end of epoch 1, stepping each."""
    loader = DataLoader(ds, batch_sampler=sampler, num_workers=workers,
                        collate_fn=functools.partial(collate, pad_id=ds.eos_id))
    got: list[tuple] = []
    while sampler.epoch < 2 and (stop is None or len(got) < stop):
        for batch in loader:
            got.append(batch_key(batch))
            sampler.step(batch)
            if len(got) == stop:
                break
    return got


def make_sampler(ds: WindowDataset, order: str) -> EpochSampler:
    if order == "global":
        return EpochSampler(len(ds), 5, seed=11)
    return EpochSampler(len(ds), 5, seed=11, order="blocks", blocks=ds.blocks("row_group"),
                        buffer_blocks=3)


@pytest.mark.parametrize("order", ["global", "blocks"])
@pytest.mark.parametrize(("workers", "cuts"), [(0, [0, 1, 4, 7, 8, 11, 15]),
                                              pytest.param(2, [3, 9], marks=pytest.mark.slow)])
def test_dataloader_resume_continues_identically(small: tuple[Path, list], workers: int,
                                                 cuts: list[int], order: str) -> None:
    root, _ = small
    ds = WindowDataset(root)
    reference = train_loop(ds, make_sampler(ds, order), 0)
    assert len(reference) == 2 * -(-len(ds) // 5)
    for cut in cuts:
        sampler = make_sampler(ds, order)
        first = train_loop(ds, sampler, workers, stop=cut)
        state = json.loads(json.dumps(sampler.state_dict()))
        # Prefetching ran ahead, but the state holds only what the loop consumed.
        assert state["batches_seen"] == cut
        assert state["targets_seen"] == sum(b[2] for b in first)
        resumed = make_sampler(ds, order)
        resumed.load_state_dict(state)
        assert first + train_loop(ds, resumed, workers) == reference


# -- end to end: the example trains, checkpoints mid-epoch, and resumes --------------------


@pytest.mark.slow  # two whole training runs of the example, with DataLoader worker processes
@pytest.mark.parametrize(("order", "pack"), [("global", False), ("blocks", False),
                                            ("global", True)])
def test_train_tiny_resume_matches_an_uninterrupted_run(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture,
                                                        order: str, pack: bool) -> None:
    root = tmp_path / "ds"
    write_docs(root, random_docs(80, max_len=60), window=16, num_shards=2, rows_per_group=32)
    example = load_example()
    ckpt = str(tmp_path / "ckpt.pt")
    common = [str(root), "--steps", "24", "--batch-size", "4", "--d-model", "32",
              "--checkpoint", ckpt, "--eval-every", "12", "--log-every", "6", "--order", order,
              "--buffer-blocks", "2", *(["--pack"] if pack else [])]
    full = example.main([*common, "--save-at", "10", "--num-workers", "2"])
    resumed = example.main([*common, "--resume", "--num-workers", "0"])
    out = capsys.readouterr().out
    assert "saved" in out and "resumed from" in out and "eval nll" in out
    assert full["step"] == resumed["step"] == 24
    assert full["targets_seen"] == resumed["targets_seen"] > 0
    assert resumed["train_loss"] == pytest.approx(full["train_loss"], rel=1e-6)
    assert resumed["eval_nll"] == pytest.approx(full["eval_nll"], rel=1e-6)
    assert math.isfinite(full["eval_perplexity"])
