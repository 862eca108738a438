"""Hugging Face ``transformers.Trainer`` on finished shards: :class:`WindowTrainer`.

Contract (docs/training.md#hugging-face):

* **Data.** Training batches come from this reader's samplers, never from Trainer's:
  :class:`reader.EpochSampler` (``packed=False``), :class:`reader.PackedSampler`
  (``packed=True``, rows of ``seq_len``) or, for a mixture of datasets, the mixture's sampler
  with ``weights``. Seed (``args.data_seed``, else ``args.seed``), rank and world size come
  from ``args``; ``per_device_train_batch_size`` is windows (or rows) per batch on each rank.
  The epochs follow one another as one stream, so a global batch never straddles a restart.
* **The call.** ``model(input_ids=b["input_ids"], position_ids=b["position_ids"],
  use_cache=False)``, the same for padded and packed batches (:func:`causal_lm_logits`); the
  loss is :func:`reader.token_nll` on ``b["shift_labels"]``. Our targets are never passed as
  ``labels=`` (Hugging Face would shift them a second time).
* **Loss weights tokens.** An optimiser step's loss is the NLL summed over every scored
  target of the global batch (all gradient-accumulation micro-batches on all ranks) divided by
  the number of those targets, so a short micro-batch or a rank with fewer targets weighs what
  its targets weigh, not what a batch weighs.
* **Evaluation** (:meth:`WindowTrainer.evaluate`) is :func:`reader.evaluate`: NLL summed over
  every scored target of the evaluation set (across ranks, without the sampler's deliberate
  repeats) divided once. ``eval_loss`` is that mean, with ``eval_perplexity`` and
  ``eval_targets``. A mapping of datasets gives ``eval_<name>_loss`` each; a mixture gives one
  figure per source and the token-weighted whole.
* **Checkpoints.** Every checkpoint holds the sampler's state (``window_sampler.json``),
  with the dataset's fingerprint (each source's, for a mixture) and the optimiser step it was
  saved at; ``train(resume_from_checkpoint=...)`` restores it, so the resumed run trains on
  exactly the batches the uninterrupted one would have (Trainer's own skipping of batches is
  turned off: ``args.ignore_data_skip`` is set to ``True``). A state of another dataset, or of
  another step than the checkpoint's ``trainer_state.json`` (``global_step``), is refused, and
  an unreadable one is named.
* **Epochs.** The ``epoch`` Trainer logs (and saves) is the sampler's: its epoch plus the
  share of that epoch consumed (a mixture has no epoch of its own: Trainer's figure stays).

Example::

    from transformers import TrainingArguments
    from reader import WindowDataset
    from reader.hf import WindowTrainer

    train, val = WindowDataset("out/corpus/train"), WindowDataset("out/corpus/val")
    args = TrainingArguments("runs/tiny", max_steps=1000, per_device_train_batch_size=8,
                             gradient_accumulation_steps=4, save_steps=200, eval_steps=200,
                             eval_strategy="steps")
    trainer = WindowTrainer(model=model, args=args, train_dataset=train, eval_dataset=val)
    trainer.train()                              # or train(resume_from_checkpoint=True)
    trainer.evaluate()["eval_loss"]              # == reader.evaluate(...)["nll"]

``transformers`` (with ``accelerate``) is an optional requirement: ``pip install
'token-windows[hf-train]'``. ``import reader`` never imports this module.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader

try:
    import transformers
    from transformers.trainer_utils import get_last_checkpoint, speed_metrics
except ImportError as e:  # pragma: no cover - exercised where transformers is missing
    raise ImportError(
        "reader.hf needs transformers and accelerate, which are not installed: "
        "pip install 'token-windows[hf-train]'"
    ) from e

from reader.batches import collate, collate_packed
from reader.data.regular import open_regular
from reader.loss import evaluate as evaluate_loader
from reader.loss import token_nll
from reader.mixture.sampler import MixtureSampler
from reader.order.packing import PackedSampler
from reader.order.sampler import EpochSampler
from transforms.errors import SamplerStateError

__all__ = ["SAMPLER_STATE_NAME", "WindowTrainer", "causal_lm_logits"]

SAMPLER_STATE_NAME = "window_sampler.json"
TRAINER_STATE_NAME = "trainer_state.json"  # Trainer's name for it in every checkpoint
_STEP_KEY = "global_step"  # the optimiser step at which WindowTrainer saved the state


def causal_lm_logits(model: Any, batch: Mapping[str, Any]) -> torch.Tensor:
    """The documented call of a Hugging Face causal LM on a padded or packed batch: its logits.

    ``model(input_ids=..., position_ids=..., use_cache=False).logits``: no ``attention_mask``
    (right padding never reaches a real position of a causal model, and for packed rows
    transformers builds the block-diagonal mask from ``position_ids`` only without one) and
    no KV cache (with one, a packed window attends to the windows before it in its row).
    For :func:`reader.evaluate`: ``evaluate(functools.partial(causal_lm_logits, model), loader)``.
    """
    out = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                use_cache=False)
    return out.logits


def _is_mixture(dataset: Any) -> bool:
    return hasattr(dataset, "sources") and hasattr(dataset, "source_of")


def _read_json(path: str, what: str) -> dict[str, Any]:
    """A checkpoint's JSON file, as a dict.

    Raises:
        ValueError: it is missing, unreadable, truncated or not an object (naming it).
    """
    try:  # a FIFO or device there is refused, never waited on
        with open_regular(path, fix="resume from another checkpoint") as f:
            value = json.loads(f.read())
    except FileNotFoundError as e:
        raise SamplerStateError(
            f"{path} not found: the checkpoint lacks {what}; resume from a "
            "complete checkpoint") from e
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SamplerStateError(
            f"{path} is not readable JSON ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}): {what} is truncated or "
            "damaged; resume from another checkpoint") from e
    if not isinstance(value, dict):
        raise SamplerStateError(
            f"{path} holds {type(value).__name__}, not a JSON object: {what} is "
            "damaged; resume from another checkpoint")
    return value


class _Stream:
    """The sampler's epochs one after another, as one endless iterable of batches.

    Each pass over ``loader`` is the rest of the sampler's current epoch from its committed
    position; the trainer commits every batch as it takes it (before it asks for the next), so
    a new pass starts exactly after the last batch handed out, whatever the DataLoader's
    workers prefetched.
    """

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader
        self.dataset = loader.dataset
        self.batch_sampler = loader.batch_sampler

    def __iter__(self) -> Iterator[Any]:
        while True:
            empty = True
            for batch in self.loader:
                empty = False
                yield batch
            if empty:
                raise ValueError(f"the sampler {self.batch_sampler!r} yielded no batch")


class _OnDevice:
    """A loader's batches moved to the trainer's device; its batch sampler still shows, so
    :func:`reader.evaluate` knows the deliberate repeats and the ranks it was dealt over."""

    def __init__(self, loader: DataLoader, prepare: Any) -> None:
        self.batch_sampler = loader.batch_sampler
        self._loader, self._prepare = loader, prepare

    def __iter__(self) -> Iterator[Any]:
        return (self._prepare(batch) for batch in self._loader)


class WindowTrainer(transformers.Trainer):
    """A ``transformers.Trainer`` that reads our shards the way the format means (see above).

    Args:
        model: a Hugging Face causal LM (``use_cache`` and ``position_ids`` in its forward).
        args: ``TrainingArguments``. ``per_device_train_batch_size`` counts windows (rows when
            packed), ``per_device_eval_batch_size`` likewise; ``dataloader_drop_last`` drops a
            short last global batch of each epoch; ``max_steps`` or ``num_train_epochs`` (whole
            epochs of the sampler, exact, turned into ``args.max_steps``; a mixture has no
            epochs and needs ``max_steps``). ``args.ignore_data_skip`` is set to ``True``.
        train_dataset: a :class:`reader.WindowDataset` (or a mixture of them with ``weights``).
        eval_dataset: a :class:`reader.WindowDataset`, a mapping of names to them (one
            ``eval_<name>_loss`` each), or a mixture (one figure per source and the whole).
        packed: pack several windows into each row of ``seq_len`` (:class:`reader.PackedSampler`
            and :func:`reader.collate_packed`), for training and evaluation.
        seq_len: positions per packed row (default: the dataset's window).
        open_rows: the packing's look-ahead.
        weights: for a mixture, its weights or schedule (see :class:`reader.MixtureSampler`).
        unit: for a mixture, ``"windows"`` or ``"targets"``.
        order, blocks, buffer_blocks: the window order, as for :class:`reader.EpochSampler`.
        **kwargs: passed to ``transformers.Trainer`` (``callbacks``, ``optimizers`` …), but not
            ``data_collator`` (batches are ours).

    Raises:
        ValueError: a ``data_collator``, ``weights`` without a mixture or a mixture without
            them, or a dataset the samplers cannot read.
    """

    def __init__(
        self,
        model: Any = None,
        args: transformers.TrainingArguments | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        *,
        packed: bool = False,
        seq_len: int | None = None,
        open_rows: int = 16,
        weights: Any = None,
        unit: str = "windows",
        order: str = "global",
        blocks: Any = None,
        buffer_blocks: int = 16,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("data_collator") is not None:
            raise ValueError("WindowTrainer collates with reader.collate / collate_packed; "
                             "pass no data_collator")
        if not isinstance(packed, bool):
            raise ValueError(f"`packed` must be a bool, but got {packed!r}")
        if train_dataset is not None:
            if weights is not None and not _is_mixture(train_dataset):
                raise ValueError("`weights` are for a mixture of datasets (reader.MixedDataset), "
                                 f"but train_dataset is {type(train_dataset).__name__}")
            if weights is None and _is_mixture(train_dataset):
                raise ValueError("a mixture train_dataset needs `weights` (a mapping of source "
                                 "names to weights, or a schedule)")
        self._packed, self._seq_len, self._open_rows = packed, seq_len, open_rows
        self._weights, self._unit = weights, unit
        self._order = {"order": order, "blocks": blocks, "buffer_blocks": buffer_blocks}
        self._train_sampler: Any = None
        kwargs.pop("data_collator", None)
        super().__init__(model=model, args=args, train_dataset=train_dataset,
                         eval_dataset=eval_dataset, **kwargs)
        # The sampler's state replaces Trainer's skipping of the batches already trained on.
        self.args.ignore_data_skip = True
        # compute_loss divides by the global batch's targets itself: no division by the
        # number of accumulation steps on top.
        self.loss_is_scaled_for_ga = True

    # -- samplers and loaders -----------------------------------------------------------

    @property
    def _seed(self) -> int:
        return self.args.data_seed if self.args.data_seed is not None else self.args.seed

    def _seq_len_of(self, dataset: Any) -> int:
        return self._seq_len if self._seq_len is not None else int(dataset.window)

    def _sampler_for(self, dataset: Any, batch_size: int, *, training: bool) -> Any:
        rank, world = self.args.process_index, max(1, self.args.world_size)
        drop_last = bool(self.args.dataloader_drop_last) if training else False
        if training and _is_mixture(dataset):
            return MixtureSampler(dataset, self._weights, batch_size, seed=self._seed,
                                   rank=rank, world_size=world, unit=self._unit,
                                   seq_len=self._seq_len_of(dataset) if self._packed else None,
                                   open_rows=self._open_rows)
        order: dict[str, Any] = dict(self._order) if training else {}
        if training:  # the state names the dataset: a checkpoint cannot resume another one
            fingerprint = getattr(dataset, "fingerprint", None)
            order["fingerprint"] = fingerprint if isinstance(fingerprint, str) else None
        if self._packed:
            if not hasattr(dataset, "lengths"):
                raise ValueError(f"packed=True needs a dataset with `lengths` (a WindowDataset), "
                                 f"but got {type(dataset).__name__}")
            return PackedSampler(dataset.lengths, batch_size, self._seq_len_of(dataset),
                                 seed=self._seed, rank=rank, world_size=world,
                                 drop_last=drop_last, open_rows=self._open_rows, **order)
        return EpochSampler(len(dataset), batch_size, seed=self._seed, rank=rank,
                            world_size=world, drop_last=drop_last, **order)

    def _loader(self, dataset: Any, sampler: Any) -> DataLoader:
        pad_id = int(dataset.eos_id)
        if self._packed:
            collate_fn = functools.partial(collate_packed, seq_len=self._seq_len_of(dataset),
                                           pad_id=pad_id)
        else:
            collate_fn = functools.partial(collate, pad_id=pad_id)
        workers = self.args.dataloader_num_workers
        extra: dict[str, object] = {}  # the DataLoader's keywords for workers
        if workers > 0:
            extra = {"persistent_workers": self.args.dataloader_persistent_workers,
                     "prefetch_factor": self.args.dataloader_prefetch_factor,
                     "multiprocessing_context": self.args.dataloader_multiprocessing_context}
        # A generator of its own: creating an iterator draws a base seed from it, never from
        # the global RNG that dropout uses (Trainer restores that one on resume).
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_fn,
                          num_workers=workers, pin_memory=self.args.dataloader_pin_memory,
                          generator=torch.Generator().manual_seed(self._seed), **extra)

    @property
    def train_sampler(self) -> Any:
        """The training sampler, built on first use: checkpoints hold its ``state_dict``."""
        if self._train_sampler is None:
            if self.train_dataset is None:
                raise ValueError("Trainer: training requires a train_dataset.")
            self._train_sampler = self._sampler_for(
                self.train_dataset, self.args.per_device_train_batch_size, training=True)
        return self._train_sampler

    def _micro_batches(self) -> int:
        """The micro-batches of ``num_train_epochs`` whole epochs of the sampler (per rank)."""
        sampler = self.train_sampler
        if not hasattr(sampler, "epoch") or _is_mixture(self.train_dataset):
            raise ValueError("a mixture has no epochs: set TrainingArguments(max_steps=...)")
        epochs = float(self.args.num_train_epochs)
        total = 0
        for e in range(math.ceil(epochs)):
            if isinstance(sampler, PackedSampler):
                rows = len(sampler.rows(e))
                g = sampler.global_batch
                batches = rows // g if sampler.drop_last else -(-rows // g)
            else:
                batches = sampler.batches_per_epoch
            share = min(1.0, epochs - e)
            total += batches if share == 1.0 else math.ceil(share * batches)
        return total

    def get_train_dataloader(self) -> Any:
        """Our sampler's batches, epoch after epoch (no length: Trainer counts ``max_steps``)."""
        sampler = self.train_sampler
        if self.args.max_steps <= 0:
            ga = self.args.gradient_accumulation_steps
            self.args.max_steps = -(-self._micro_batches() // ga)
        return _Stream(self._loader(self.train_dataset, sampler))

    def get_eval_dataloader(self, eval_dataset: Any = None) -> DataLoader:
        """A loader over ``eval_dataset`` (default ``self.eval_dataset``) dealt over the ranks."""
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if isinstance(dataset, str):
            dataset = self.eval_dataset[dataset]
        if dataset is None:
            raise ValueError("Trainer: evaluation requires an eval_dataset.")
        sampler = self._sampler_for(dataset, self.args.per_device_eval_batch_size, training=False)
        return self._loader(dataset, sampler)

    # -- training -----------------------------------------------------------------------

    def _global_count(self, count: int) -> int:
        if self.args.world_size <= 1:
            return int(count)
        t = torch.tensor([int(count)], dtype=torch.int64, device=self.args.device)
        return int(self.accelerator.reduce(t, reduction="sum").item())

    def get_batch_samples(self, epoch_iterator: Iterator[Any], num_batches: int,
                          device: torch.device) -> tuple[list[Any], int | None]:
        """The next optimiser step's micro-batches, and the scored targets of the global batch.

        Each batch is committed to the sampler as it is taken (with the count over all ranks,
        so the state rank 0 saves is global): Trainer trains every batch it takes before it
        saves a checkpoint.
        """
        batches: list[Any] = []
        total = 0
        for _ in range(num_batches):
            try:
                batch = next(epoch_iterator)
            except StopIteration:
                break
            count = self._global_count(batch["num_targets"])
            self.train_sampler.step(num_targets=count)
            batches.append(batch)
            total += count
        return batches, (total if batches else None)

    def compute_loss(self, model: Any, inputs: Mapping[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        """NLL summed over the batch's targets, divided by the global batch's targets.

        Times the number of processes, because DDP averages the ranks' gradients: the sum
        over ranks and micro-batches is then the mean over every target of the global batch.
        Without ``num_items_in_batch`` (a lone batch) it is the batch's own mean.
        """
        out = model(input_ids=inputs["input_ids"], position_ids=inputs["position_ids"],
                    use_cache=False)
        logits = out.logits
        if logits.dtype not in (torch.float32, torch.float64):
            logits = logits.float()  # as HF's own loss does: no bf16 sum of thousands of terms
        nll_sum, count = token_nll(logits, inputs["shift_labels"])
        if num_items_in_batch is None:
            loss = nll_sum / count
        else:
            loss = nll_sum * self.accelerator.num_processes / float(num_items_in_batch)
        return (loss, out) if return_outputs else loss

    def _sync_epoch(self) -> None:
        """Trainer's ``state.epoch`` := the sampler's epoch and the share of it consumed
        (Trainer's own figure counts steps of ``max_steps``, not the data)."""
        sampler = self._train_sampler
        if sampler is not None and hasattr(sampler, "progress"):
            self.state.epoch = sampler.progress

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Trainer's log, with the sampler's ``targets_seen`` beside the training loss and
        the sampler's ``epoch``."""
        self._sync_epoch()
        if "loss" in logs and self._train_sampler is not None:
            logs = {**logs, "targets_seen": self._train_sampler.targets_seen}
        super().log(logs, start_time)

    def _save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        self._sync_epoch()  # trainer_state.json records the sampler's epoch too
        super()._save_checkpoint(*args, **kwargs)

    # -- checkpoints --------------------------------------------------------------------

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Trainer's ``save_model``, plus the sampler's state beside the weights."""
        super().save_model(output_dir, _internal_call=_internal_call)
        if self._train_sampler is not None and self.args.should_save:
            directory = output_dir if output_dir is not None else self.args.output_dir
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, SAMPLER_STATE_NAME)
            state = {**self._train_sampler.state_dict(), _STEP_KEY: int(self.state.global_step)}
            with open(path + ".tmp", "w") as f:
                json.dump(state, f, indent=1, sort_keys=True)
            os.replace(path + ".tmp", path)

    def train(self, resume_from_checkpoint: str | bool | None = None, trial: Any = None,
              ignore_keys_for_eval: list[str] | None = None, **kwargs: Any) -> Any:
        """Trainer's ``train``; resuming also restores the sampler from the checkpoint.

        Raises:
            ValueError: ``resume_from_checkpoint=True`` finds no checkpoint, or the checkpoint
                holds no sampler state (saved by another trainer: resuming it would restart
                the data order), an unreadable one, the state of another dataset, seed or
                packing, or of another step than the checkpoint's ``trainer_state.json``.
        """
        if isinstance(resume_from_checkpoint, bool):
            if resume_from_checkpoint:
                found = get_last_checkpoint(self.args.output_dir)
                if found is None:
                    raise ValueError(f"no checkpoint found in output_dir {self.args.output_dir}")
                resume_from_checkpoint = found
            else:
                resume_from_checkpoint = None
        if resume_from_checkpoint is not None:
            path = os.path.join(resume_from_checkpoint, SAMPLER_STATE_NAME)
            if not os.path.isfile(path):
                raise SamplerStateError(
                    f"{path} not found: the checkpoint holds no sampler state (was it saved by "
                    "WindowTrainer?); resuming without it would restart the data order"
                )
            self.train_sampler.load_state_dict(self._checked_state(resume_from_checkpoint))
        return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial,
                             ignore_keys_for_eval=ignore_keys_for_eval, **kwargs)

    def _checked_state(self, checkpoint: str) -> dict[str, Any]:
        """The checkpoint's sampler state, checked against the dataset and the checkpoint's
        ``trainer_state.json`` (the sampler then checks the rest of it).

        Raises:
            ValueError: naming the file, the field and the fix.
        """
        path = os.path.join(checkpoint, SAMPLER_STATE_NAME)
        state = _read_json(path, "the sampler state WindowTrainer saved")
        trainer_path = os.path.join(checkpoint, TRAINER_STATE_NAME)
        trainer_state = _read_json(trainer_path, "Trainer's state")
        step = trainer_state.get("global_step")
        if isinstance(step, bool) or not isinstance(step, int):
            raise SamplerStateError(
                f"{trainer_path}: `global_step` must be an integer, but got "
                f"{step!r}; the checkpoint is damaged")
        saved = state.get(_STEP_KEY)
        if saved is None:
            raise SamplerStateError(
                f"{path} records no `{_STEP_KEY}` (saved by an earlier WindowTrainer): it "
                f"cannot be matched with the checkpoint's step {step}; resume with the "
                "release that saved it, or start the run afresh")
        if saved != step:
            raise SamplerStateError(
                f"{path} was saved at step {saved!r}, but {trainer_path} is at step {step}: "
                f"the sampler state belongs to another checkpoint (resuming would skip or "
                f"repeat windows); copy that checkpoint's own {SAMPLER_STATE_NAME} back")
        fingerprint = getattr(self.train_sampler, "fingerprint", None)
        if fingerprint is not None and state.get("fingerprint") is None:
            raise SamplerStateError(
                f"{path} records no dataset `fingerprint`, so it cannot be shown to be a state "
                f"of this dataset (fingerprint {fingerprint}); resume with the release that "
                "saved it, or start the run afresh")
        if fingerprint is not None and state.get("fingerprint") != fingerprint:
            raise SamplerStateError(
                f"{path} was saved for the dataset with fingerprint {state.get('fingerprint')}, "
                f"but train_dataset has fingerprint {fingerprint}: the checkpoint belongs to "
                "another dataset; resume on the dataset that saved it, or start afresh")
        return {k: v for k, v in state.items() if k != _STEP_KEY}

    # -- evaluation ---------------------------------------------------------------------

    def _evaluate_one(self, dataset: Any) -> dict[str, float | int]:
        model = self._wrap_model(self.model, training=False)
        model.eval()
        loader = _OnDevice(self.get_eval_dataloader(dataset), self._prepare_inputs)

        def forward(batch: Mapping[str, Any]) -> torch.Tensor:
            with self.compute_loss_context_manager():
                return causal_lm_logits(model, batch)

        return evaluate_loader(forward, loader, distributed=self.args.world_size > 1)

    def evaluate(self, eval_dataset: Any = None, ignore_keys: list[str] | None = None,
                 metric_key_prefix: str = "eval") -> dict[str, float]:
        """Token-weighted evaluation: ``{prefix}_loss`` is :func:`reader.evaluate`'s ``nll``.

        Also ``{prefix}_perplexity`` and ``{prefix}_targets``. A mapping of datasets is
        evaluated one by one (``{prefix}_{name}_loss``, as Trainer names them); a mixture gives
        ``{prefix}_{source}_loss`` for each source and ``{prefix}_loss`` over all their targets.
        """
        override = eval_dataset is not None
        dataset = eval_dataset if override else self.eval_dataset
        if isinstance(dataset, str):
            dataset = self.eval_dataset[dataset]
        if isinstance(dataset, Mapping):
            metrics: dict[str, float] = {}
            for name, part in dataset.items():
                metrics.update(self.evaluate(part, ignore_keys, f"{metric_key_prefix}_{name}"))
            return metrics
        if dataset is None:
            raise ValueError("Trainer: evaluation requires an eval_dataset.")
        self._memory_tracker.start()
        start = time.time()
        parts = dict(dataset.sources) if _is_mixture(dataset) else {None: dataset}
        metrics = {}
        nll_total, targets, batches = 0.0, 0, 0
        for name, part in parts.items():
            result = self._evaluate_one(part)
            nll_total += result["nll"] * result["targets"]
            targets += int(result["targets"])
            batches += int(result["batches"])
            if name is not None:
                key = f"{metric_key_prefix}_{name}"
                metrics[f"{key}_loss"] = result["nll"]
                metrics[f"{key}_targets"] = result["targets"]
        # One dataset: reader.evaluate's figure itself; a mixture: its token-weighted whole.
        nll = result["nll"] if len(parts) == 1 else nll_total / targets
        metrics[f"{metric_key_prefix}_loss"] = nll
        metrics[f"{metric_key_prefix}_perplexity"] = math.exp(nll) if nll < 700 else math.inf
        metrics[f"{metric_key_prefix}_targets"] = targets
        metrics.update(speed_metrics(metric_key_prefix, start, num_samples=len(dataset),
                                     num_steps=batches))
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control,
                                                         metrics)
        self._memory_tracker.stop_and_update_metrics(metrics)
        return metrics
