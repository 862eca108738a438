"""Windows → a padded, masked batch (SPEC §6, seed 004).

Contract: ``collate(windows, pad_id)`` takes B windows (mappings with ``tokens``, an integer
array of ``length + 1`` ids, ``length`` = L ≥ 1 and ``loss_start`` = ℓ, 0 ≤ ℓ < L) and
returns int64 tensors of shape (B, T), T = the longest L in the batch:

* ``input_ids[b, t]``  = ``tokens[t]`` for t < L, else ``pad_id``;
* ``labels[b, t]``     = ``tokens[t + 1]`` for ℓ ≤ t < L (already shifted: the target of
  input t), else −100 (context before ℓ, and padding);
* ``attention_mask[b, t]`` = 1 for t < L, else 0;
* ``position_ids[b, t]``   = t for t < L, else 0 (positions restart in every window);
* ``lengths[b]`` = L (shape (B,));

and ``num_targets``, a Python int: the number of labels that are not −100.

Validity comes from ``length`` only, never from comparing ids with EOS: there is no PAD
token, the pad id is usually EOS, and a real EOS target is always scored. A batch without
a single scored target is a ``ValueError`` (it has no mean loss), not a zero.

Worked example (seed 004), the bytes tokenizer (BOS 256, EOS 257), pad 257::

    >>> batch = collate([{"tokens": [256, 97, 257], "length": 2, "loss_start": 0},
    ...                  {"tokens": [256, 257], "length": 1, "loss_start": 0}], pad_id=257)
    >>> batch["input_ids"].tolist(), batch["labels"].tolist(), batch["num_targets"]
    ([[256, 97], [256, 257]], [[97, 257], [257, -100]], 3)

Three targets, two of them EOS; the second row's padded 257 is an input only, never a
target.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.utils.data

from reader.dataset import WindowBatch

__all__ = ["IGNORE_INDEX", "collate"]

IGNORE_INDEX = -100


def _describe(window: Mapping[str, Any], b: int) -> str:
    where = f"window {b} of the batch"
    if "doc_id" in window:
        where += f" (doc_id {window['doc_id']!r}, start {window.get('start')!r})"
    return where


def _field(window: Mapping[str, Any], name: str, b: int) -> int:
    if name not in window:
        raise ValueError(f"{_describe(window, b)} lacks the key {name!r}")
    value = window[name]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{_describe(window, b)}: {name} must be an integer, but got {value!r}")
    return int(value)


def _alloc(numel: int) -> torch.Tensor:
    """An int64 buffer; in a ``DataLoader`` worker, in shared memory (no copy to send it)."""
    if torch.utils.data.get_worker_info() is not None:
        storage = torch.UntypedStorage._new_shared(numel * 8)
        return torch.empty(0, dtype=torch.int64).set_(storage).view(-1)[:numel]
    return torch.empty(numel, dtype=torch.int64)


def _pad(flat: npt.NDArray[Any], offsets: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64],
         loss_starts: npt.NDArray[np.int64], pad_id: int) -> dict[str, Any]:
    """The batch tensors from checked windows: window b is ``flat[offsets[b]:offsets[b+1]]``."""
    batch_size = len(lengths)
    num_targets = int((lengths - loss_starts).sum())
    if num_targets == 0:
        raise ValueError(f"the batch of {batch_size} windows has no scored target")
    width = int(lengths.max())
    # One buffer for all five tensors: one shared-memory segment to pass between processes.
    buffer = _alloc(4 * batch_size * width + batch_size)
    out = buffer.numpy()
    plane = batch_size * width
    input_ids = out[:plane].reshape(batch_size, width)
    labels = out[plane : 2 * plane].reshape(batch_size, width)
    mask = out[2 * plane : 3 * plane].reshape(batch_size, width)
    positions = out[3 * plane : 4 * plane].reshape(batch_size, width)
    out[4 * plane :] = lengths
    if bool((lengths == width).all()) and bool((np.diff(offsets) == width + 1).all()):
        # Every window full: two strided copies instead of a loop over windows.
        rows = flat[: batch_size * (width + 1)].reshape(batch_size, width + 1)
        input_ids[:] = rows[:, :width]
        labels[:] = rows[:, 1:]
        cols = np.arange(width)
        labels[cols[None, :] < loss_starts[:, None]] = IGNORE_INDEX
        mask[:] = 1
        positions[:] = cols
    else:
        input_ids.fill(int(pad_id))
        labels.fill(IGNORE_INDEX)
        cols = np.arange(width)
        valid = cols[None, :] < lengths[:, None]
        mask[:] = valid
        np.multiply(valid, cols[None, :], out=positions)
        for b, (o, n, ls) in enumerate(zip(offsets[:-1].tolist(), lengths.tolist(),
                                           loss_starts.tolist(), strict=False)):
            input_ids[b, :n] = flat[o : o + n]
            labels[b, ls:n] = flat[o + ls + 1 : o + n + 1]
    planes = buffer[: 4 * plane].view(4, batch_size, width)
    return {
        "input_ids": planes[0],
        "labels": planes[1],
        "attention_mask": planes[2],
        "position_ids": planes[3],
        "lengths": buffer[4 * plane :],
        "num_targets": num_targets,
    }


def collate(windows: Sequence[Mapping[str, Any]], pad_id: int) -> dict[str, Any]:
    """Pad and mask B windows into one batch (see the module docstring for the contract).

    Args:
        windows: B ≥ 1 mappings with ``tokens``, ``length`` and ``loss_start``, such as the
            items of :class:`reader.WindowDataset`.
        pad_id: the id written into padded input positions (EOS: there is no PAD token).

    Returns:
        ``input_ids``, ``labels``, ``attention_mask``, ``position_ids`` (int64, (B, T)),
        ``lengths`` (int64, (B,)) and ``num_targets`` (int).

    Raises:
        ValueError: an empty batch, a malformed window, or a batch with no scored target.
    """
    if isinstance(pad_id, bool) or not isinstance(pad_id, numbers.Integral):
        raise ValueError(f"`pad_id` must be an integer, but got {pad_id!r}")
    batch_size = len(windows)
    if batch_size == 0:
        raise ValueError("cannot collate an empty batch: it has no targets")
    if isinstance(windows, WindowBatch):
        # Gathered from a layout whose rows were checked when it was built.
        return _pad(windows.tokens, windows.offsets,
                    windows.columns["length"].astype(np.int64),
                    windows.columns["loss_start"].astype(np.int64), int(pad_id))
    lengths = np.empty(batch_size, dtype=np.int64)
    loss_starts = np.empty(batch_size, dtype=np.int64)
    spans = []
    for b, window in enumerate(windows):
        if "tokens" not in window:
            raise ValueError(f"{_describe(window, b)} lacks the key 'tokens'")
        tokens = np.asarray(window["tokens"])
        length = _field(window, "length", b)
        loss_start = _field(window, "loss_start", b)
        if tokens.ndim != 1 or (tokens.size and not np.issubdtype(tokens.dtype, np.integer)):
            raise ValueError(
                f"{_describe(window, b)}: tokens must be a 1-D array of integer ids, but got "
                f"shape {tokens.shape} of {tokens.dtype}"
            )
        if length < 1:
            raise ValueError(f"{_describe(window, b)}: length must be at least 1, but got {length}")
        if tokens.size != length + 1:
            raise ValueError(
                f"{_describe(window, b)}: tokens has {tokens.size} ids, but length {length} "
                f"needs {length + 1} (inputs tokens[:-1], targets tokens[1:])"
            )
        if not 0 <= loss_start < length:
            raise ValueError(
                f"{_describe(window, b)}: loss_start must be in [0, {length}), but got {loss_start}"
            )
        lengths[b] = length
        loss_starts[b] = loss_start
        spans.append(tokens)
    flat = np.concatenate(spans).astype(np.int64, copy=False)
    if flat.min() < 0:
        raise ValueError(f"the batch holds a negative token id ({int(flat.min())})")
    offsets = np.zeros(batch_size + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=offsets[1:])
    return _pad(flat, offsets, lengths, loss_starts, int(pad_id))
