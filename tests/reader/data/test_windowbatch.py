"""`reader.data.windowbatch`: the containers `WindowDataset.__getitems__` returns (flat arrays, a
sequence of window dicts, pickled as plain lists)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from reader.data.layout_build import RECORD
from reader.data.windowbatch import WindowBatch, WindowRows, window_item


def batch() -> WindowBatch:
    """Three windows of lengths 2, 1, 3 (3, 2 and 4 ids), from shards 0, 1, 0."""
    records = np.zeros(3, dtype=RECORD)
    values = {"start": [0, 4, 2], "length": [2, 1, 3], "loss_start": [0, 1, 2],
              "doc_tokens": [9, 6, 9], "doc_key": [11, 22, 11], "window_index": [0, 1, 1],
              "shard": [0, 1, 0]}
    for name, column in values.items():
        records[name] = column
    return WindowBatch(tokens=np.arange(100, 109, dtype=np.int32),
                       offsets=np.array([0, 3, 5, 9]), index=np.array([40, 7, 41]),
                       records=records, doc_id=lambda shard, index: f"s{shard}-i{index}")


def as_plain(window: dict) -> dict:
    return {**window, "tokens": window["tokens"].tolist()}


FIRST = {"tokens": [100, 101, 102], "start": 0, "length": 2, "loss_start": 0, "doc_tokens": 9,
         "doc_key": 11, "window_index": 0, "doc_id": "s0-i40", "index": 40}
SECOND = {"tokens": [103, 104], "start": 4, "length": 1, "loss_start": 1, "doc_tokens": 6,
          "doc_key": 22, "window_index": 1, "doc_id": "s1-i7", "index": 7}
THIRD = {"tokens": [105, 106, 107, 108], "start": 2, "length": 3, "loss_start": 2,
         "doc_tokens": 9, "doc_key": 11, "window_index": 1, "doc_id": "s0-i41", "index": 41}


def test_a_batch_is_a_sequence_of_window_dicts() -> None:
    b = batch()
    assert len(b) == 3
    assert [as_plain(w) for w in b] == [FIRST, SECOND, THIRD]
    assert as_plain(b[-1]) == THIRD
    w = b[0]
    assert w["tokens"].dtype == np.int32 and all(type(w[k]) is int for k in FIRST if k not in (
        "tokens", "doc_id"))
    w["tokens"][0] = -1  # an item's ids are its own copy
    assert b.tokens[0] == 100
    with pytest.raises(IndexError):
        b[3]
    with pytest.raises(TypeError, match="does not slice"):
        b[0:2]


def test_the_flat_arrays_collate_reads() -> None:
    b = batch()
    assert b.columns["length"].tolist() == [2, 1, 3]
    assert b.columns["doc_key"].tolist() == [11, 22, 11]
    assert b.index.tolist() == [40, 7, 41]
    assert b.tokens[b.offsets[2]: b.offsets[3]].tolist() == THIRD["tokens"]


def test_a_batch_pickles_as_the_list_of_its_dicts() -> None:
    clone = pickle.loads(pickle.dumps(batch()))
    assert type(clone) is list and [as_plain(w) for w in clone] == [FIRST, SECOND, THIRD]


def test_rows_group_the_windows_of_a_packed_batch() -> None:
    rows = WindowRows(batch(), [0, 2, 2, 3])
    assert len(rows) == 3
    assert [[as_plain(w) for w in row] for row in rows] == [[FIRST, SECOND], [], [THIRD]]
    assert [as_plain(w) for w in rows[-1]] == [THIRD]
    with pytest.raises(TypeError, match="does not slice"):
        rows[:1]
    clone = pickle.loads(pickle.dumps(rows))
    assert type(clone) is list and [[w["index"] for w in row] for row in clone] == [[40, 7], [],
                                                                                     [41]]


def test_window_item_reads_a_record() -> None:
    b = batch()
    item = window_item(np.array([1, 2], dtype=np.int32), b.records[1], doc_id="d", index=5)
    assert as_plain(item) == {**SECOND, "tokens": [1, 2], "doc_id": "d", "index": 5}
