"""The batch containers `reader.WindowDataset.__getitems__` returns: flat arrays, one row each.

A :class:`WindowBatch` holds a batch's windows back to back (``tokens``, ``offsets``) with
one record per window; it is a sequence of the dicts ``WindowDataset[i]`` gives, built only
when an item is asked for, while :func:`reader.collate` reads the arrays directly. A
:class:`WindowRows` groups such windows into the rows of a packed batch
(:func:`reader.collate_packed`). Both pickle as plain lists of their dicts.

Example: ``batch = ds.__getitems__([3, 0])`` gives ``batch[0] == ds[3]`` (tokens equal) and
``batch.tokens[batch.offsets[1] : batch.offsets[2]]`` is window 0's ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

from reader.data.layout import WINDOW_FIELDS

__all__ = ["Window", "WindowBatch", "WindowRows", "window_item"]


class Window(TypedDict):
    """One window as ``WindowDataset[i]`` gives it: its ids (int32, ``length + 1`` of them),
    the integer columns of its row (`reader.data.layout.WINDOW_FIELDS`,
    docs/format.md#shard-format), its document's id and its dataset index."""

    tokens: npt.NDArray[np.int32]
    start: int
    length: int
    loss_start: int
    doc_tokens: int
    doc_key: int
    window_index: int
    doc_id: str
    index: int


def window_item(tokens: npt.NDArray[np.int32], row: Any, *, doc_id: str, index: int) -> Window:
    """The item of a window: its ids and its record ``row`` (`reader.data.layout.RECORD`)."""
    return Window(
        tokens=tokens,
        start=int(row["start"]),
        length=int(row["length"]),
        loss_start=int(row["loss_start"]),
        doc_tokens=int(row["doc_tokens"]),
        doc_key=int(row["doc_key"]),
        window_index=int(row["window_index"]),
        doc_id=doc_id,
        index=index,
    )


class WindowBatch(Sequence):
    """Windows gathered by :meth:`WindowDataset.__getitems__`: flat arrays, one row each.

    A sequence of the dicts ``WindowDataset[i]`` gives (built when an item is asked for);
    :func:`reader.collate` reads the arrays directly. ``tokens`` holds every window's ids back
    to back (int32), window k being ``tokens[offsets[k] : offsets[k + 1]]``; ``columns``
    holds ``start``, ``length``, ``loss_start``, ``doc_tokens``, ``doc_key`` and
    ``window_index``, one value per window; ``index`` the dataset indices. It pickles as the
    list of its dicts (it holds a reference to the dataset, which maps the layout).
    """

    def __init__(self, *, tokens: npt.NDArray[np.int32], offsets: npt.NDArray[np.int64],
                 index: npt.NDArray[np.int64], records: npt.NDArray[Any],
                 doc_id: Callable[[int, int], str]) -> None:
        self.tokens = tokens
        self.offsets = offsets
        self.index = index
        self.records = records
        self.columns = {name: records[name] for name in WINDOW_FIELDS}
        self._doc_id = doc_id

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, k: int) -> Window:  # type: ignore[override]
        if isinstance(k, slice):
            raise TypeError("WindowBatch does not slice; index one window at a time")
        k = range(len(self))[k]
        tokens = self.tokens[self.offsets[k] : self.offsets[k + 1]].copy()
        index = int(self.index[k])
        doc_id = self._doc_id(int(self.records["shard"][k]), index)
        return window_item(tokens, self.records[k], doc_id=doc_id, index=index)

    def __iter__(self) -> Iterator[Window]:
        return (self[k] for k in range(len(self)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


class WindowRows(Sequence):
    """The rows of a packed batch, gathered at once: row r is windows
    ``starts[r] : starts[r + 1]`` of ``windows`` (a :class:`WindowBatch`).

    A sequence of rows, each a list of the dicts ``WindowDataset[i]`` gives;
    :func:`reader.collate_packed` reads the flat arrays directly. It pickles as its lists.
    """

    def __init__(self, windows: WindowBatch, starts: npt.ArrayLike) -> None:
        self.windows = windows
        self.starts = np.asarray(starts, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, r: int) -> list[Window]:  # type: ignore[override]
        if isinstance(r, slice):
            raise TypeError("WindowRows does not slice; index one row at a time")
        r = range(len(self))[r]
        return [self.windows[k] for k in range(int(self.starts[r]), int(self.starts[r + 1]))]

    def __iter__(self) -> Iterator[list[Window]]:
        return (self[r] for r in range(len(self)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))
