"""reader.hf.WindowTrainer: a real transformers.Trainer on our shards (tiny random GPT-2/Llama).

Evaluation equals ``reader.evaluate``; a resumed run trains on exactly the windows of the
uninterrupted one and ends with the same weights; the loss weighs targets, not micro-batches;
whole epochs see every target once; packed and per-dataset evaluation; refusals.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from reader import MixedDataset, WindowDataset, collate, evaluate, token_nll
from tests.common.reader_data import VOCAB, random_docs, write_docs

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from reader.hf import SAMPLER_STATE_NAME, WindowTrainer, causal_lm_logits  # noqa: E402

pytestmark = pytest.mark.slow  # every test here runs a transformers model in the Trainer

REPO = Path(__file__).resolve().parents[2]
SEQ = 24


def gpt2(dropout: float = 0.1, dtype: torch.dtype = torch.float32) -> Any:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2,
                                     n_head=4, resid_pdrop=dropout, embd_pdrop=dropout,
                                     attn_pdrop=dropout, bos_token_id=256, eos_token_id=257)
    return transformers.GPT2LMHeadModel(config).to(dtype)


def llama() -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=SEQ,
                                      bos_token_id=256, eos_token_id=257)
    return transformers.LlamaForCausalLM(config)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trainer") / "ds"
    write_docs(root, random_docs(40, max_len=60), window=SEQ, stride=16, score_new=True,
               num_shards=2)
    return root


def arguments(out: Path, **kw: Any) -> Any:
    base = {"max_steps": 6, "per_device_train_batch_size": 4, "per_device_eval_batch_size": 8,
            "save_strategy": "no", "logging_steps": 1, "report_to": [], "use_cpu": True,
            "disable_tqdm": True, "seed": 0, "learning_rate": 1e-3}
    base.update(kw)
    if "save_steps" in kw:
        base["save_strategy"] = "steps"
    return transformers.TrainingArguments(str(out), **base)


class Recording(WindowTrainer):
    """Records the dataset indices of every training micro-batch, in order."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.seen: list[list[int]] = []

    def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        if model.training:
            self.seen.append(inputs["index"].reshape(-1).tolist())
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def reference_eval(model: Any, ds: WindowDataset, batch_size: int = 5) -> dict:
    model.eval()
    loader = DataLoader(ds, batch_size=batch_size,
                        collate_fn=functools.partial(collate, pad_id=ds.eos_id))
    return evaluate(functools.partial(causal_lm_logits, model), loader)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2", "llama"])
def test_eval_loss_is_reader_evaluate(data: Path, tmp_path: Path, make: Any,
                                      packed: bool) -> None:
    ds = WindowDataset(data)
    trainer = WindowTrainer(model=make(), args=arguments(tmp_path, max_steps=2),
                            train_dataset=ds, eval_dataset=ds, packed=packed)
    trainer.train()
    metrics = trainer.evaluate()
    ref = reference_eval(trainer.model, ds)
    assert metrics["eval_targets"] == ref["targets"] == ds.scored_targets
    assert abs(metrics["eval_loss"] - ref["nll"]) < 1e-6
    # What Trainer's own evaluation reports: the mean of batch means, a different figure.
    batches = [collate([ds[i] for i in range(a, min(a + 8, len(ds)))], pad_id=ds.eos_id)
               for a in range(0, len(ds), 8)]
    with torch.no_grad():
        means = [float(token_nll(causal_lm_logits(trainer.model, b), b["shift_labels"])[0])
                 / b["num_targets"] for b in batches]
    assert abs(sum(means) / len(means) - ref["nll"]) > 1e-4


def test_a_mapping_of_eval_sets_gives_each_its_loss(data: Path, tmp_path: Path) -> None:
    ds = WindowDataset(data)
    trainer = WindowTrainer(model=gpt2(), args=arguments(tmp_path, max_steps=1),
                            train_dataset=ds, eval_dataset={"a": ds, "b": ds})
    metrics = trainer.evaluate()
    ref = reference_eval(trainer.model, ds)
    for name in ("a", "b"):
        assert abs(metrics[f"eval_{name}_loss"] - ref["nll"]) < 1e-6
        assert metrics[f"eval_{name}_targets"] == ds.scored_targets


def run(data: Path, out: Path, *, resume: str | None = None, trainer_cls: Any = Recording,
        model: Any = None, **kw: Any) -> Any:
    ds = WindowDataset(data)
    packed = kw.pop("packed", False)
    trainer = trainer_cls(model=model if model is not None else gpt2(),
                          args=arguments(out, **kw), train_dataset=ds, packed=packed)
    trainer.train(resume_from_checkpoint=resume)
    return trainer


@pytest.mark.parametrize(("packed", "workers", "accumulate"),
                         [(False, 0, 1), (True, 0, 2), (False, 2, 2)])
def test_resume_equals_the_uninterrupted_run(data: Path, tmp_path: Path, packed: bool,
                                             workers: int, accumulate: int) -> None:
    # 12 steps of 8 windows (or rows) cross the end of the first epoch (76 windows); the
    # checkpoint at step 5 is mid-epoch. Dropout is on: Trainer's RNG restore must line up.
    kw = {"max_steps": 12, "per_device_train_batch_size": 8 // accumulate,
          "gradient_accumulation_steps": accumulate, "save_steps": 5, "packed": packed,
          "dataloader_num_workers": workers}
    whole = run(data, tmp_path / "whole", **kw)
    epochs = whole.train_sampler.epoch
    assert epochs >= 1  # the run crossed an epoch boundary
    checkpoint = tmp_path / "whole" / "checkpoint-5"
    state = json.loads((checkpoint / SAMPLER_STATE_NAME).read_text())
    assert state["batches_seen"] == 5 * accumulate
    resumed = run(data, tmp_path / "resumed", resume=str(checkpoint), **kw)
    # Exactly the windows the uninterrupted run trained on after step 5, in the same order.
    assert resumed.seen == whole.seen[5 * accumulate:]
    assert resumed.train_sampler.state_dict() == whole.train_sampler.state_dict()
    for (name, a), b in zip(whole.model.state_dict().items(),
                            resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_the_loss_weighs_targets_not_micro_batches(data: Path, tmp_path: Path) -> None:
    # One global batch of 8 windows per step, as 1 × 8, 2 × 4 or 4 × 2 micro-batches (whose
    # target counts differ): the same windows, the same token-weighted loss, the same weights.
    # (A mean of micro-batch means would weigh a short micro-batch's targets more.)
    finals = []
    for accumulate in (1, 2, 4):
        trainer = run(data, tmp_path / f"ga{accumulate}", model=gpt2(0.0, torch.float64),
                      max_steps=4, per_device_train_batch_size=8 // accumulate,
                      gradient_accumulation_steps=accumulate)
        counts = {len({*b}) for b in trainer.seen}
        assert counts == {8 // accumulate}
        finals.append(trainer.model.state_dict())
    for other in finals[1:]:
        for name, value in finals[0].items():
            assert torch.allclose(value, other[name], rtol=0, atol=1e-10), name


@pytest.mark.parametrize("packed", [False, True])
def test_whole_epochs_score_every_target_once_per_epoch(data: Path, tmp_path: Path,
                                                        packed: bool) -> None:
    ds = WindowDataset(data)
    trainer = Recording(model=gpt2(), args=arguments(tmp_path, max_steps=-1, num_train_epochs=2,
                                                    gradient_accumulation_steps=2),
                        train_dataset=ds, packed=packed)
    trainer.train()
    sampler = trainer.train_sampler
    assert sampler.epoch == 2 and sampler.cursor == 0
    assert sampler.targets_seen == 2 * ds.scored_targets
    seen = [i for b in trainer.seen for i in b if i >= 0]
    assert sorted(seen) == sorted(2 * list(range(len(ds))))


def test_resume_refuses_a_checkpoint_without_the_sampler_state(data: Path,
                                                               tmp_path: Path) -> None:
    run(data, tmp_path / "a", max_steps=2, save_steps=2)
    checkpoint = tmp_path / "a" / "checkpoint-2"
    os.remove(checkpoint / SAMPLER_STATE_NAME)
    with pytest.raises(ValueError, match="no sampler state.*restart the data order"):
        run(data, tmp_path / "b", resume=str(checkpoint), max_steps=4)
    shutil.rmtree(tmp_path / "a")
    with pytest.raises(ValueError, match="no checkpoint found"):
        run(data, tmp_path / "a", resume=True, max_steps=4)


@pytest.mark.parametrize("packed", [False, True])
def test_resume_refuses_the_checkpoint_of_another_dataset_of_the_same_shape(
        data: Path, tmp_path: Path, packed: bool) -> None:
    # The same ids and lengths, other bytes: the same number of windows and the same lengths
    # (so the same packing), another dataset. Its sampler state must not resume this one.
    twin = tmp_path / "twin"
    shifted = [(d, bytes(32 + (c - 31) % 95 for c in text))
               for d, text in random_docs(40, max_len=60)]
    write_docs(twin, shifted,
               window=SEQ, stride=16, score_new=True, num_shards=2)
    a, b = WindowDataset(data), WindowDataset(twin)
    assert len(a) == len(b) and a.lengths.tolist() == b.lengths.tolist()
    assert a.fingerprint != b.fingerprint
    run(twin, tmp_path / "a", max_steps=2, save_steps=2, packed=packed)
    checkpoint = tmp_path / "a" / "checkpoint-2"
    state = json.loads((checkpoint / SAMPLER_STATE_NAME).read_text())
    assert state["fingerprint"] == b.fingerprint and state["global_step"] == 2
    with pytest.raises(ValueError, match=f"{SAMPLER_STATE_NAME} was saved for the dataset with "
                       f"fingerprint {b.fingerprint}, but train_dataset has fingerprint "
                       f"{a.fingerprint}"):
        run(data, tmp_path / "b", resume=str(checkpoint), max_steps=4, packed=packed)


def test_resume_refuses_a_sampler_state_of_another_step(data: Path, tmp_path: Path) -> None:
    run(data, tmp_path / "a", max_steps=4, save_steps=2)
    early, late = tmp_path / "a" / "checkpoint-2", tmp_path / "a" / "checkpoint-4"
    shutil.copy(late / SAMPLER_STATE_NAME, early / SAMPLER_STATE_NAME)
    with pytest.raises(ValueError, match=r"window_sampler.json was saved at step 4, but .*"
                       r"trainer_state.json is at step 2"):
        run(data, tmp_path / "b", resume=str(early), max_steps=6)


def test_resume_names_a_truncated_sampler_state(data: Path, tmp_path: Path) -> None:
    run(data, tmp_path / "a", max_steps=2, save_steps=2)
    path = tmp_path / "a" / "checkpoint-2" / SAMPLER_STATE_NAME
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(ValueError, match=f"{path} is not readable JSON .*truncated or damaged"):
        run(data, tmp_path / "b", resume=str(path.parent), max_steps=4)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=f"{path} holds list, not a JSON object"):
        run(data, tmp_path / "b", resume=str(path.parent), max_steps=4)


@pytest.mark.parametrize("packed", [False, True])
def test_the_logged_epoch_is_the_samplers(data: Path, tmp_path: Path, packed: bool) -> None:
    # One step of 4 windows (or rows) of an epoch of 76 windows: a few per cent of the epoch,
    # where Trainer's own figure (steps over max_steps) says 1.0.
    trainer = run(data, tmp_path, max_steps=1, packed=packed, save_steps=1)
    sampler = trainer.train_sampler
    share = sampler.cursor / sampler._total(0)
    assert sampler.epoch == 0 and 0 < share < 0.2
    logged = [e["epoch"] for e in trainer.state.log_history if "loss" in e]
    assert logged == [pytest.approx(share, abs=1e-12)]
    saved = json.loads((tmp_path / "checkpoint-1" / "trainer_state.json").read_text())
    assert saved["epoch"] == pytest.approx(share, abs=1e-12)


def test_refusals(data: Path, tmp_path: Path) -> None:
    ds = WindowDataset(data)
    args = arguments(tmp_path)
    with pytest.raises(ValueError, match="pass no data_collator"):
        WindowTrainer(model=gpt2(), args=args, train_dataset=ds, data_collator=lambda b: b)
    with pytest.raises(ValueError, match="`weights` are for a mixture"):
        WindowTrainer(model=gpt2(), args=args, train_dataset=ds, weights={"a": 1.0})


@pytest.fixture
def other(tmp_path: Path) -> Path:
    """A second dataset of the same tokenizer and window, a mixture's other source."""
    out = tmp_path / "other"
    write_docs(out, random_docs(12, seed=5, max_len=50), window=SEQ, stride=16,
               score_new=True, num_shards=1)
    return out


@pytest.mark.parametrize("packed", [False, True])
def test_mixture_eval_gives_each_source_and_the_whole_padded_and_packed(
        data: Path, other: Path, tmp_path: Path, packed: bool) -> None:
    a, b = WindowDataset(data), WindowDataset(other)
    trainer = WindowTrainer(model=gpt2(), args=arguments(tmp_path / "run"), train_dataset=a,
                            eval_dataset=MixedDataset({"web": a, "code": b}), packed=packed)
    metrics = trainer.evaluate()
    ra, rb = reference_eval(trainer.model, a), reference_eval(trainer.model, b)
    assert abs(metrics["eval_web_loss"] - ra["nll"]) < 1e-6
    assert abs(metrics["eval_code_loss"] - rb["nll"]) < 1e-6
    assert metrics["eval_web_targets"] == a.scored_targets
    assert metrics["eval_code_targets"] == b.scored_targets
    whole = (ra["nll"] * ra["targets"] + rb["nll"] * rb["targets"]) / (ra["targets"]
                                                                         + rb["targets"])
    assert abs(metrics["eval_loss"] - whole) < 1e-6
    assert metrics["eval_targets"] == a.scored_targets + b.scored_targets


def test_mixture_training_then_eval_gives_each_source_and_the_whole(
        data: Path, other: Path, tmp_path: Path) -> None:
    a, b = WindowDataset(data), WindowDataset(other)
    mixed = MixedDataset({"web": a, "code": b})
    trainer = WindowTrainer(model=gpt2(), args=arguments(tmp_path / "run", max_steps=2),
                            train_dataset=mixed, eval_dataset=mixed,
                            weights={"web": 0.5, "code": 0.5})
    trainer.train()
    metrics = trainer.evaluate()
    ra, rb = reference_eval(trainer.model, a), reference_eval(trainer.model, b)
    assert abs(metrics["eval_web_loss"] - ra["nll"]) < 1e-6
    assert abs(metrics["eval_code_loss"] - rb["nll"]) < 1e-6
    whole = (ra["nll"] * ra["targets"] + rb["nll"] * rb["targets"]) / (ra["targets"]
                                                                         + rb["targets"])
    assert abs(metrics["eval_loss"] - whole) < 1e-6
    assert metrics["eval_targets"] == a.scored_targets + b.scored_targets


@pytest.mark.parametrize("packed", [False, True])
def test_mixture_training_resumes_exactly(data: Path, other: Path, tmp_path: Path,
                                          packed: bool) -> None:

    def mixed_run(out: Path, resume: str | None = None) -> Any:
        mixed = MixedDataset({"web": WindowDataset(data), "code": WindowDataset(other)})
        trainer = Recording(model=gpt2(), args=arguments(out, max_steps=8, save_steps=3,
                                                         gradient_accumulation_steps=2),
                            train_dataset=mixed, weights={"web": 3, "code": 1}, packed=packed)
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    whole = mixed_run(tmp_path / "whole")
    resumed = mixed_run(tmp_path / "resumed", str(tmp_path / "whole" / "checkpoint-3"))
    assert resumed.seen == whole.seen[6:]
    assert resumed.train_sampler.state_dict() == whole.train_sampler.state_dict()
    for (name, a), b in zip(whole.model.state_dict().items(),
                            resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.slow
def test_two_ranks_train_as_one_process(data: Path, tmp_path: Path) -> None:
    """torchrun --nproc_per_node 2 (gloo, DDP) with 4 windows a rank = one process with 8."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                    "--master_port", "0", "--rdzv_backend", "c10d",
                    "--rdzv_endpoint", "127.0.0.1:0", str(REPO / "tests/common/dist_trainer.py"),
                    str(data), str(tmp_path / "two"), "4"],
                   cwd=REPO, env=env, check=True, timeout=600)
    subprocess.run([sys.executable, str(REPO / "tests/common/dist_trainer.py"), str(data),
                    str(tmp_path / "one"), "8"], cwd=REPO, env=env, check=True, timeout=600)
    two = json.loads((tmp_path / "two" / "result.json").read_text())
    one = json.loads((tmp_path / "one" / "result.json").read_text())
    assert two["world_size"] == 2 and one["world_size"] == 1
    # The same global batches: the same windows, the same targets, counted once.
    assert two["sampler"]["targets_seen"] == one["sampler"]["targets_seen"]
    assert two["sampler"]["epoch"] == one["sampler"]["epoch"] >= 1
    assert two["sampler"]["cursor"] == one["sampler"]["cursor"]
    assert sorted(two["seen"]) == sorted(one["seen"])
    assert two["eval"]["eval_targets"] == one["eval"]["eval_targets"]
    assert abs(two["eval"]["eval_loss"] - one["eval"]["eval_loss"]) < 1e-5
    weights_two = torch.load(tmp_path / "two" / "weights.pt")
    weights_one = torch.load(tmp_path / "one" / "weights.pt")
    for name, value in weights_one.items():
        assert torch.allclose(value, weights_two[name], rtol=0, atol=1e-10), name
    # Under two ranks, evaluate() on a loader that is not dealt over them is refused.
    assert "not dealt over the 2 ranks" in two["guard"]
