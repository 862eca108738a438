"""Several finished datasets as one index space of named sources (see ``docs/mixtures.md``).

Contract:

* ``MixedDataset({"web": ds1, "code": ds2, …})`` puts the sources end to end in the
  mapping's order: source s holds the global indices ``[offsets[s], offsets[s] + len(s))``,
  so ``len`` is the sum and ``source_of(k)`` is ``(name, k − offsets[name])``.
* The sources must share one tokenizer (kind, vocabulary size, BOS, EOS and the model file's
  SHA-256) and one window W; any difference is a ``ValueError`` naming both sources and both
  values, since a batch of windows from two vocabularies trains on wrong ids silently.
* ``mixed[k]`` is the source's window dict with ``index`` = k (global), ``source`` (the
  name) and ``source_index`` (the index in the source). ``__getitems__`` gathers a batch from
  each source at once and returns a :class:`MixedBatch` (a :class:`reader.WindowBatch` in
  request order, with ``source_ids``) or, for packed rows, a :class:`reader.WindowRows` of
  one; :func:`reader.collate` and :func:`reader.collate_packed` then add
  ``batch["source_ids"]`` (the source of each window of the batch, in its order) and
  ``batch["sources"]`` (the names), which :func:`reader.evaluate` uses with
  ``by_source=True``.

Example: sources a (3 windows) and b (2): ``offsets == {"a": 0, "b": 3}``,
``source_of(4) == ("b", 1)``, ``len == 5``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from reader.data.dataset import RAW, WindowBatch, WindowDataset, WindowRows
from reader.data.layout import RECORD
from reader.mixture.report import check_compatible
from transforms.dataset.manifest import TokenizerInfo

__all__ = ["GroupedIndices", "MixedBatch", "MixedDataset"]

def _described(name: str, ds: Any) -> tuple[TokenizerInfo, int]:
    """A source's tokenizer (its manifest's record) and window, what sources must share."""
    tokenizer = getattr(getattr(ds, "manifest", None), "tokenizer", None)
    if not isinstance(tokenizer, TokenizerInfo):
        raise ValueError(f"source {name!r} must be a WindowDataset (with a manifest), but got "
                         f"{type(ds).__name__}")
    return tokenizer, int(ds.window)


class MixedDataset:
    """Named finished datasets as one index space, in the mapping's order.

    Args:
        sources: name → :class:`reader.WindowDataset` (at least one; names non-empty text
            without ``=`` or ``,``, which ``inspect --mix`` uses as separators).

    Raises:
        ValueError: no source, a bad name, an empty source, or sources whose tokenizer or
            window differ (naming both sources and both values).
    """

    def __init__(self, sources: Mapping[str, WindowDataset]) -> None:
        if not isinstance(sources, Mapping) or not sources:
            raise ValueError(f"`sources` must be a non-empty mapping of names to datasets, but "
                             f"got {sources!r}")
        for name in sources:
            if not isinstance(name, str) or not name or any(c in name for c in "=,"):
                raise ValueError(f"a source name must be non-empty text without '=' or ',', "
                                 f"but got {name!r}")
        self.sources: dict[str, WindowDataset] = dict(sources)
        self.names: tuple[str, ...] = tuple(self.sources)
        check_compatible({name: _described(name, ds) for name, ds in self.sources.items()})
        first = self.sources[self.names[0]]
        offsets, total = {}, 0
        for name in self.names:
            size = len(self.sources[name])
            if size < 1:
                raise ValueError(f"source {name!r} holds no window")
            offsets[name] = total
            total += size
        self.offsets: dict[str, int] = offsets
        self._starts = [offsets[name] for name in self.names]
        self._bounds = np.array([*self._starts, total], dtype=np.int64)
        self._len = total
        tokenizer: TokenizerInfo = first.manifest.tokenizer
        self.window: int = int(first.window)
        self.vocab_size: int = tokenizer.vocab_size
        self.bos_id: int = tokenizer.bos_id
        self.eos_id: int = tokenizer.eos_id
        self._lengths: npt.NDArray[np.int32] | None = None
        self._datasets: tuple[Any, ...] = tuple(self.sources[name] for name in self.names)
        # What a GroupedIndices is checked against: the sources, in order, and their sizes.
        self.key: tuple[tuple[str, int], ...] = tuple(
            (name, len(self.sources[name])) for name in self.names)

    def __len__(self) -> int:
        return self._len

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_lengths"] = None  # O(n): read again where it is needed, not sent to workers
        return state

    @property
    def fingerprints(self) -> dict[str, str]:
        """Each source's dataset fingerprint (what a sampler's state records)."""
        return {name: str(self.sources[name].fingerprint) for name in self.names}

    def source_of(self, k: int) -> tuple[str, int]:
        """``(name, local index)`` of global index ``k`` (negative counts from the end)."""
        i = k.__index__()
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"index {k} is out of range for {self._len} windows")
        s = bisect.bisect_right(self._starts, i) - 1
        return self.names[s], i - self._starts[s]

    def __getitem__(self, k: int) -> dict[str, Any]:
        name, local = self.source_of(k)
        window = dict(self.sources[name][local])
        window.update(index=local + self.offsets[name], source=name, source_index=local)
        return window

    def _split(self, indices: Sequence[Any]) -> tuple[npt.NDArray[np.int64], ...]:
        idx = np.asarray(indices if len(indices) else [], dtype=np.int64)
        if idx.ndim != 1:
            raise ValueError(f"`indices` must be a sequence of integers, but got shape "
                             f"{idx.shape}")
        if idx.size and int(idx.min()) < 0:
            idx = np.where(idx < 0, idx + self._len, idx)
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= self._len):
            bad = next(int(v) for v in indices if not -self._len <= int(v) < self._len)
            raise IndexError(f"index {bad} is out of range for {self._len} windows")
        src = np.searchsorted(self._bounds, idx, side="right") - 1
        return idx, src, idx - self._bounds[src]

    def __getitems__(self, indices: Sequence[Any]) -> Any:
        """A batch from every source at once (see the module docstring): a
        :class:`MixedBatch` for a list of ints, a :class:`reader.WindowRows` for rows."""
        grouped = getattr(indices, "grouped", None)
        if grouped is not None and grouped[0] == self.key and len(grouped[1]) == len(indices):
            return MixedBatch(self, *grouped[1:])  # the sampler's grouping (GroupedIndices)
        if len(indices) and isinstance(indices[0], list | tuple | np.ndarray):
            sizes = [len(row) for row in indices]
            flat = [i for row in indices for i in row]
            return WindowRows(self.__getitems__(flat), np.cumsum([0, *sizes]))
        idx, src, local = self._split(indices)
        order = np.argsort(src, kind="stable")  # the windows grouped by source
        return MixedBatch(self, idx, src, local[order], order,
                          np.bincount(src, minlength=len(self.names)))

    def window_sizes(self, indices: npt.ArrayLike) -> tuple[npt.NDArray[np.int64],
                                                             npt.NDArray[np.int64]]:
        """``length`` and scored targets of the windows at global ``indices``."""
        idx, src, local = self._split(np.asarray(indices, dtype=np.int64).tolist())
        lengths = np.empty(len(idx), np.int64)
        targets = np.empty(len(idx), np.int64)
        for s in np.unique(src).tolist():
            at = np.flatnonzero(src == s)
            lengths[at], targets[at] = self.sources[self.names[s]].window_sizes(local[at])
        return lengths, targets

    @property
    def lengths(self) -> npt.NDArray[np.int32]:
        """Every window's ``length`` in global order (each source's ``lengths``, end to end;
        O(len) memory: for :class:`reader.PackedSampler` over the whole mixture)."""
        if self._lengths is None:
            lengths = np.concatenate([np.asarray(self.sources[n].lengths, np.int32)
                                      for n in self.names])
            lengths.setflags(write=False)
            self._lengths = lengths
        return self._lengths

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}={len(self.sources[n])}" for n in self.names)
        return f"MixedDataset({parts}; windows={self._len}, window={self.window})"


def _no_doc_id(shard: int, index: int) -> str:
    return ""


class MixedBatch(WindowBatch):
    """Windows of several sources gathered at once, in request order: a
    :class:`reader.WindowBatch` (``tokens``, ``offsets``, ``columns``, ``index`` global)
    with ``source_ids`` (each window's source, an index into ``sources``, the names)."""

    def __init__(self, mixed: MixedDataset, idx: npt.NDArray[np.int64],
                 src: npt.NDArray[np.int64], grouped: npt.NDArray[np.int64],
                 order: npt.NDArray[np.int64], per_source: npt.NDArray[np.int64]) -> None:
        # ``grouped``: the local indices source by source (``per_source[s]`` of each), in
        # request order within a source; ``order[j]``: the request position of grouped[j].
        counts, datasets = per_source.tolist(), mixed._datasets
        # Each source's part: its local indices and their places in the batch.
        parts, a = [], 0
        for s, m in enumerate(counts):
            if m:
                parts.append((datasets[s], grouped[a : a + m], order[a : a + m]))
                a += m
        # Each source's records are gathered (`WindowDataset.records`) straight into their
        # places in the batch, as raw bytes (one block a record); then each source copies its
        # windows' ids into theirs (`WindowDataset.copy_tokens`).
        gathered = [ds.records(local) for ds, local, _ in parts]
        if len(parts) == 1:  # one source: grouped is request order
            records = gathered[0]
        else:
            raw = np.empty(len(idx), RAW)
            for rec, (_, _, at) in zip(gathered, parts, strict=True):
                raw[at] = rec.view(RAW)
            records = raw.view(RECORD)
        sizes = records["length"].astype(np.int64) + 1
        offsets = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        tokens = np.empty(int(offsets[-1]), np.int32)
        for rec, (ds, _, at) in zip(gathered, parts, strict=True):
            ds.copy_tokens(rec, tokens, offsets if len(parts) == 1 else offsets[at])
        super().__init__(tokens=tokens, offsets=offsets, index=idx, records=records,
                         doc_id=_no_doc_id)  # items are read by __getitem__ (below)
        self.source_ids = src
        self.sources = mixed.names
        self._mixed = mixed

    def __getitem__(self, k: int) -> dict[str, Any]:  # type: ignore[override]
        if isinstance(k, slice):
            raise TypeError("MixedBatch does not slice; index one window at a time")
        k = range(len(self))[k]
        return self._mixed[int(self.index[k])]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[k] for k in range(len(self)))


class GroupedIndices(list):  # type: ignore[type-arg]
    """A batch of global indices (the plain list a batch sampler yields, and equal to it)
    that also carries the same windows grouped by source, as :class:`reader.MixtureSampler`
    draws them, so that :meth:`MixedDataset.__getitems__` gathers each source's part at once
    without locating every index again.

    ``grouped`` is ``(key, idx, src, local, order, per_source)``: the mixture's
    :attr:`MixedDataset.key`, the indices and their sources (arrays, request order), the
    local indices source by source and the request position of each, and each source's
    count. Any change to the list drops it (the list is then gathered index by index).
    """

    grouped: tuple[Any, ...] | None

    def __init__(self, indices: Sequence[int], grouped: tuple[Any, ...] | None = None) -> None:
        super().__init__(indices)
        self.grouped = grouped


def _dropping(name: str) -> Any:
    method = getattr(list, name)

    def changed(self: GroupedIndices, *args: Any) -> Any:
        self.grouped = None
        return method(self, *args)
    changed.__name__ = name
    return changed


for _name in ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend",
              "insert", "pop", "remove", "sort", "reverse", "clear"):
    setattr(GroupedIndices, _name, _dropping(_name))
