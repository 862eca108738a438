"""Windows → a padded, masked batch (docs/format.md#collate).

Contract: ``collate(windows, pad_id)`` takes B windows (mappings with ``tokens``, an integer
array of ``length + 1`` ids, ``length`` = L ≥ 1 and ``loss_start`` = ℓ, 0 ≤ ℓ < L) and
returns int64 tensors of shape (B, T), T = the longest L in the batch:

* ``input_ids[b, t]``  = ``tokens[t]`` for t < L, else ``pad_id``;
* ``shift_labels[b, t]`` = ``tokens[t + 1]`` for ℓ ≤ t < L (already shifted: the target of
  input t), else −100 (context before ℓ, and padding). The key is Hugging Face's name for
  targets aligned with the logits; there is no ``labels`` key, because an HF causal LM
  shifts ``labels`` once more and would silently score each input against the token two
  ahead: ``batch["labels"]`` is a ``KeyError`` that names the fix (see :class:`Batch`);
* ``attention_mask[b, t]`` = 1 for t < L, else 0;
* ``position_ids[b, t]``   = t for t < L, else 0 (positions restart in every window);
* ``lengths[b]`` = L (shape (B,));
* ``index[b]`` = the window's global index in its dataset (shape (B,)), when the windows
  carry one (``WindowDataset`` items do): ``ds.doc_id(batch["index"])`` names their documents;

and ``num_targets``, a Python int: the number of labels that are not −100.

Validity comes from ``length`` only, never from comparing ids with EOS: there is no PAD
token, the pad id is usually EOS, and a real EOS target is always scored. A batch without
a single scored target is a ``ValueError`` (it has no mean loss), not a zero.

Worked example (docs/format.md#collate), the bytes tokenizer (BOS 256, EOS 257), pad 257::

    >>> batch = collate([{"tokens": [256, 97, 257], "length": 2, "loss_start": 0},
    ...                  {"tokens": [256, 257], "length": 1, "loss_start": 0}], pad_id=257)
    >>> batch["input_ids"].tolist(), batch["shift_labels"].tolist(), batch["num_targets"]
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

from reader.data.dataset import WindowBatch, WindowRows

__all__ = ["IGNORE_INDEX", "Batch", "add_sources", "block_causal_mask", "collate", "collate_packed"]

IGNORE_INDEX = -100
_LOOP_WINDOWS = 64  # collate_packed copies up to this many windows one by one

_NO_LABELS = (
    "a reader batch has no 'labels': its targets are already shifted (the target of input t "
    "is at t) and are under 'shift_labels', Hugging Face's name for them; HF causal LMs "
    "shift 'labels' once more. Use token_nll(logits, batch['shift_labels']), or for an HF "
    "model's own loss pass labels=batch['shift_labels'], shift_labels=batch['shift_labels']"
)


class Batch(dict):
    """A collated batch: a ``dict`` whose missing ``labels`` key says where the targets are.

    ``model(**batch)`` on a Hugging Face causal LM therefore gets ``shift_labels`` and no
    ``labels``: its logits are right and it computes no loss (``out.loss`` is ``None``),
    and ``labels=batch["labels"]`` fails here instead of scoring the wrong targets.
    """

    def __missing__(self, key: Any) -> Any:
        if key == "labels":
            raise KeyError(_NO_LABELS)
        raise KeyError(key)


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


def _checked(window: Mapping[str, Any], b: int,
             where: str = "") -> tuple[npt.NDArray[Any], int, int]:
    """(tokens, length, loss_start) of window ``b`` (``where``: more of where it is), checked:
    1-D integer ids, length ≥ 1, length + 1 ids, 0 ≤ loss_start < length."""
    at = _describe(window, b) + where
    if "tokens" not in window:
        raise ValueError(f"{at} lacks the key 'tokens'")
    tokens = np.asarray(window["tokens"])
    length = _field(window, "length", b)
    loss_start = _field(window, "loss_start", b)
    if tokens.ndim != 1 or (tokens.size and not np.issubdtype(tokens.dtype, np.integer)):
        raise ValueError(f"{at}: tokens must be a 1-D array of integer ids, but got shape "
                         f"{tokens.shape} of {tokens.dtype}")
    if length < 1:
        raise ValueError(f"{at}: length must be at least 1, but got {length}")
    if tokens.size != length + 1:
        raise ValueError(f"{at}: tokens has {tokens.size} ids, but length {length} needs "
                         f"{length + 1} (inputs tokens[:-1], targets tokens[1:])")
    if not 0 <= loss_start < length:
        raise ValueError(f"{at}: loss_start must be in [0, {length}), but got {loss_start}")
    return tokens, length, loss_start


def _alloc(numel: int) -> torch.Tensor:
    """An int64 buffer; in a ``DataLoader`` worker, in shared memory (no copy to send it)."""
    if torch.utils.data.get_worker_info() is not None:
        storage = torch.UntypedStorage._new_shared(numel * 8)
        return torch.empty(0, dtype=torch.int64).set_(storage).view(-1)[:numel]
    return torch.empty(numel, dtype=torch.int64)


def _window_index(windows: Sequence[Mapping[str, Any]]) -> npt.NDArray[np.int64] | None:
    """Each window's dataset index, or None unless every window names one."""
    if isinstance(windows, WindowBatch):
        return windows.index
    if not all(isinstance(w, Mapping) and "index" in w for w in windows):
        return None
    return np.array([int(w["index"]) for w in windows], dtype=np.int64)


def _pad(flat: npt.NDArray[Any], offsets: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64],
         loss_starts: npt.NDArray[np.int64], pad_id: int,
         index: npt.NDArray[np.int64] | None = None) -> Batch:
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
    batch = Batch({
        "input_ids": planes[0],
        "shift_labels": planes[1],
        "attention_mask": planes[2],
        "position_ids": planes[3],
        "lengths": buffer[4 * plane :],
        "num_targets": num_targets,
    })
    if index is not None:
        batch["index"] = torch.from_numpy(np.array(index, dtype=np.int64))
    return batch


def collate(windows: Sequence[Mapping[str, Any]], pad_id: int) -> Batch:
    """Pad and mask B windows into one batch (see the module docstring for the contract).

    Args:
        windows: B ≥ 1 mappings with ``tokens``, ``length`` and ``loss_start``, such as the
            items of :class:`reader.WindowDataset`.
        pad_id: the id written into padded input positions (EOS: there is no PAD token).

    Returns:
        A :class:`Batch`: ``input_ids``, ``shift_labels``, ``attention_mask``,
        ``position_ids`` (int64, (B, T)), ``lengths`` (int64, (B,)), ``num_targets`` (int),
        and ``index`` (int64, (B,)) when every window carries its dataset index.

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
        batch = _pad(windows.tokens, windows.offsets,
                     windows.columns["length"].astype(np.int64),
                     windows.columns["loss_start"].astype(np.int64), int(pad_id),
                     windows.index)
        add_sources(batch, windows)  # a mixture's batch: each position's source
        return batch
    lengths = np.empty(batch_size, dtype=np.int64)
    loss_starts = np.empty(batch_size, dtype=np.int64)
    spans = []
    for b, window in enumerate(windows):
        tokens, length, loss_start = _checked(window, b)
        lengths[b] = length
        loss_starts[b] = loss_start
        spans.append(tokens)
    flat = np.concatenate(spans).astype(np.int64, copy=False)
    if flat.min() < 0:
        raise ValueError(f"the batch holds a negative token id ({int(flat.min())})")
    offsets = np.zeros(batch_size + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=offsets[1:])
    return _pad(flat, offsets, lengths, loss_starts, int(pad_id), _window_index(windows))


def _rows_index(rows: Sequence[Sequence[Mapping[str, Any]]]) -> npt.NDArray[np.int64] | None:
    """Every window's dataset index, row by row, or None unless every window names one."""
    if isinstance(rows, WindowRows):
        return rows.windows.index
    parts = [_window_index(row) for row in rows]
    if any(p is None for p in parts):
        return None
    return np.concatenate([np.zeros(0, np.int64), *parts]).astype(np.int64)


def _row_arrays(rows: Sequence[Sequence[Mapping[str, Any]]]) -> tuple[npt.NDArray[Any], ...]:
    """Flat tokens, offsets, lengths, loss starts and row of every window of the rows."""
    if isinstance(rows, WindowRows):  # gathered at once from a checked layout
        sizes = np.diff(rows.starts)
        if len(sizes) and int(sizes.min()) == 0:
            raise ValueError(f"row {int(np.argmin(sizes))} of the batch holds no window")
        w = rows.windows
        return (w.tokens, w.offsets, w.columns["length"].astype(np.int64),
                w.columns["loss_start"].astype(np.int64),
                np.repeat(np.arange(len(sizes), dtype=np.int64), sizes))
    tokens, lengths, loss_starts, row_of = [], [], [], []
    for r, row in enumerate(rows):
        if len(row) == 0:
            raise ValueError(f"row {r} of the batch holds no window")
        if isinstance(row, WindowBatch):  # gathered from a checked layout: no per-window checks
            tokens.append(row.tokens)  # back to back, length + 1 ids each
            lengths.append(row.columns["length"].astype(np.int64))
            loss_starts.append(row.columns["loss_start"].astype(np.int64))
            row_of.append(np.full(len(row), r, dtype=np.int64))
            continue
        for b, window in enumerate(row):
            t, length, loss_start = _checked(window, b, f" of row {r}")
            tokens.append(t)
            lengths.append(np.array([length], dtype=np.int64))
            loss_starts.append(np.array([loss_start], dtype=np.int64))
            row_of.append(np.array([r], dtype=np.int64))
    flat = np.concatenate(tokens).astype(np.int64, copy=False)
    lens = np.concatenate(lengths)
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens + 1, out=offsets[1:])
    return flat, offsets, lens, np.concatenate(loss_starts), np.concatenate(row_of)


def collate_packed(rows: Sequence[Sequence[Mapping[str, Any]]], seq_len: int,
                   pad_id: int) -> Batch:
    """Pack rows of windows into one batch of B rows of ``seq_len`` positions
    (docs/format.md#packing).

    Row b holds its windows back to back from position 0, then padding. For the position t
    of window k of row b (window-local position u = t − its first position):

    * ``input_ids[b, t]`` = ``tokens[u]``; ``shift_labels[b, t]`` = ``tokens[u + 1]`` if
      u ≥ ``loss_start`` else −100: a target never crosses into the next window;
    * ``position_ids[b, t]`` = u (restarting at 0 in every window);
    * ``segment_ids[b, t]`` = k (0, 1, … within the row); padding is −1, with input
      ``pad_id``, target −100 and position_ids 0, 1, … from the end of the last window;
    * ``cu_seqlens`` (int32): the boundaries of every segment of the batch flattened row by
      row (the padding of a row is a segment of its own, so the last entry is B·seq_len), and
      ``max_seqlen`` (int), for varlen attention (flash-attention's ``cu_seqlens``);
    * ``num_targets`` (int) and ``num_windows`` (int);
    * ``index`` (int64, (B, K), K the most windows in a row) when every window carries its
      dataset index: ``index[b, k]`` is the window of segment k of row b, −1 past a row's
      last window, so ``index[b, segment_ids[b, t]]`` is the window at position t;
    * ``use_cache`` = ``False``, for ``model(**batch)`` on a Hugging Face model (below).

    There is no ``attention_mask``: a 2-D mask cannot say where a window ends. Attend with a
    block-diagonal causal mask, ``segment_ids[b, q] == segment_ids[b, k] and k <= q`` (see
    :func:`reader.block_causal_mask`). A Hugging Face causal LM (transformers 5) builds that
    mask itself from ``position_ids``, but only when it gets no ``attention_mask`` and no KV
    cache: pass ``use_cache=False`` (with its default ``use_cache=True`` it silently lets
    each window attend to the windows before it in the row).

    Args:
        rows: B rows, each a sequence of window mappings (``tokens``, ``length``,
            ``loss_start``), e.g. what ``WindowDataset.__getitems__`` gives for a batch of a
            :class:`reader.PackedSampler`.
        seq_len: positions per row, at least the sum of any row's lengths.
        pad_id: the id written into padded input positions (EOS).

    Raises:
        ValueError: an empty batch or row, a malformed window, a row longer than ``seq_len``,
            or no scored target.
    """
    if isinstance(pad_id, bool) or not isinstance(pad_id, numbers.Integral):
        raise ValueError(f"`pad_id` must be an integer, but got {pad_id!r}")
    if isinstance(seq_len, bool) or not isinstance(seq_len, numbers.Integral) or seq_len < 1:
        raise ValueError(f"`seq_len` must be a positive integer, but got {seq_len!r}")
    batch_size = len(rows)
    if batch_size == 0:
        raise ValueError("cannot collate an empty batch: it has no targets")
    flat, offsets, lens, loss_starts, row_of = _row_arrays(rows)
    if not isinstance(rows, WindowRows) and flat.size and flat.min() < 0:
        raise ValueError(f"the batch holds a negative token id ({int(flat.min())})")
    used = np.bincount(row_of, weights=lens, minlength=batch_size).astype(np.int64)
    if int(used.max()) > seq_len:
        r = int(np.argmax(used))
        raise ValueError(f"row {r} holds {int(used[r])} positions, more than seq_len {seq_len}")
    num_targets = int((lens - loss_starts).sum())
    if num_targets == 0:
        raise ValueError(f"the batch of {batch_size} rows has no scored target")
    nw = len(lens)
    # Each window's first column in its row, and its index among the row's windows (every
    # row holds at least one window, so row r's first window is first_win[r]).
    first_win = np.flatnonzero(np.diff(row_of, prepend=-1))
    row_start_cum = np.concatenate([[0], np.cumsum(lens)])
    col0 = row_start_cum[:-1] - row_start_cum[first_win][row_of]
    seg = np.arange(nw) - first_win[row_of]
    plane = batch_size * seq_len
    buffer = _alloc(4 * plane)
    out = buffer.numpy()
    input_ids, labels, positions, segments = (out[i * plane : (i + 1) * plane]
                                              for i in range(4))
    input_ids.fill(int(pad_id))
    labels.fill(IGNORE_INDEX)
    segments.fill(-1)
    # Padding positions count on from the row's last window (they are a segment of their own).
    cols = np.tile(np.arange(seq_len), batch_size)
    positions[:] = cols - np.repeat(used, seq_len)
    np.maximum(positions, 0, out=positions)
    if nw <= _LOOP_WINDOWS:
        # A few windows: four slice copies each beat index arithmetic over every position.
        ramp = np.arange(seq_len)
        for o, n, ls, a, k in zip(offsets[:-1].tolist(), lens.tolist(), loss_starts.tolist(),
                                  (row_of * seq_len + col0).tolist(), seg.tolist(),
                                  strict=True):
            input_ids[a : a + n] = flat[o : o + n]
            labels[a + ls : a + n] = flat[o + ls + 1 : o + n + 1]
            positions[a : a + n] = ramp[:n]
            segments[a : a + n] = k
    else:
        # Every real position at once: window w's position u is at row_of[w]·seq_len + col0[w] + u.
        win = np.repeat(np.arange(nw), lens)
        u = np.arange(int(lens.sum())) - np.repeat(row_start_cum[:-1], lens)
        at = row_of[win] * seq_len + col0[win] + u
        src = offsets[:-1][win] + u
        input_ids[at] = flat[src]
        scored = u >= loss_starts[win]
        labels[at[scored]] = flat[src[scored] + 1]
        positions[at] = u
        segments[at] = seg[win]
    # Segment boundaries, row by row: each window, then the row's padding if any.
    bounds = [np.int64(0)]
    ends = row_of * seq_len + col0 + lens
    pad_rows = np.flatnonzero(used < seq_len)
    cuts = np.sort(np.concatenate([ends, (pad_rows + 1) * seq_len]))
    cu = np.concatenate([bounds, cuts]).astype(np.int32)
    planes = buffer.view(4, batch_size, seq_len)
    batch = Batch({
        "input_ids": planes[0],
        "shift_labels": planes[1],
        "position_ids": planes[2],
        "segment_ids": planes[3],
        "cu_seqlens": torch.from_numpy(cu),
        "max_seqlen": int(np.diff(cu).max()),
        "num_targets": num_targets,
        "num_windows": nw,
        "use_cache": False,
    })
    index = _rows_index(rows)
    if index is not None:
        table = np.full((batch_size, int(seg.max()) + 1), -1, dtype=np.int64)
        table[row_of, seg] = index
        batch["index"] = torch.from_numpy(table)
    add_sources(batch, rows)  # a mixture's batch: each position's source
    return batch


def block_causal_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """The block-diagonal causal mask of packed rows, for ``scaled_dot_product_attention``.

    Args:
        segment_ids: (B, T) from :func:`collate_packed`.

    Returns:
        A bool tensor (B, 1, T, T): ``True`` where query q may attend key k, that is
        ``k <= q`` and both are in the same segment (padding attends only padding).
    """
    t = segment_ids.shape[-1]
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    causal = torch.ones(t, t, dtype=torch.bool, device=segment_ids.device).tril()
    return (same & causal)[:, None]


def add_sources(batch: dict[str, Any], windows: Any) -> None:
    """Add ``source_ids`` (int64, one per window of the batch, in its order: row by row and
    window by window for packed rows, so window k of a packed batch is segment
    ``segment_ids == j`` of its row) and ``sources`` (the names ``source_ids`` index) to a batch
    collated from windows that carry them (a mixture's `reader.mixture.dataset.MixedBatch`, with
    ``collate``, or a :class:`reader.WindowRows` of one, with ``collate_packed``); other
    batches are left as they are. Only the windows' attributes are read: collating loads no
    mixture code."""
    flat = windows.windows if isinstance(windows, WindowRows) else windows
    ids = getattr(flat, "source_ids", None)
    if ids is not None:
        batch["source_ids"] = torch.from_numpy(np.asarray(ids, dtype=np.int64))
        batch["sources"] = tuple(flat.sources)
