"""Tests of reader.batches: the worked batch of docs/format.md#collate, masks, the per-token
reference, bad windows."""

from __future__ import annotations

import doctest
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reader import WindowDataset, collate, token_nll
from tests.common.logits import logits_for
from tests.common.reader_data import EOS, VOCAB, random_docs, write_docs


def seed004_windows() -> list[dict]:
    return [
        {"tokens": np.array([256, 97, 257], np.int32), "start": 0, "length": 2, "loss_start": 0},
        {"tokens": np.array([256, 257], np.int32), "start": 0, "length": 1, "loss_start": 0},
    ]


def test_seed004_batch_scores_every_eos_target() -> None:
    batch = collate(seed004_windows(), pad_id=EOS)
    assert batch["input_ids"].tolist() == [[256, 97], [256, 257]]
    assert batch["shift_labels"].tolist() == [[97, 257], [257, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1], [1, 0]]
    assert batch["position_ids"].tolist() == [[0, 1], [0, 0]]
    assert batch["num_targets"] == 3
    assert int((batch["shift_labels"] == EOS).sum()) == 2
    for key in ("input_ids", "shift_labels", "attention_mask", "position_ids"):
        assert batch[key].dtype == torch.int64 and batch[key].shape == (2, 2)

    logits = logits_for(batch["shift_labels"], {(0, 0): 1 / 2, (0, 1): 1 / 4, (1, 0): 1 / 8})
    nll_sum, count = token_nll(logits, batch["shift_labels"])
    assert count == 3
    assert abs(nll_sum.item() / count - 2 * math.log(2)) < 1e-12
    # The bug docs/format.md#collate warns about: ignoring targets equal to EOS gives ln 2 instead.
    wrong = batch["shift_labels"].masked_fill(batch["shift_labels"] == EOS, -100)
    wrong_sum, wrong_count = token_nll(logits, wrong)
    assert wrong_count == 1 and abs(wrong_sum.item() - math.log(2)) < 1e-12


def test_collate_masks_context_before_loss_start() -> None:
    windows = [
        {"tokens": [10, 11, 12, 13, 14], "length": 4, "loss_start": 2},
        {"tokens": [20, 21, 22], "length": 2, "loss_start": 1},
    ]
    batch = collate(windows, pad_id=EOS)
    assert batch["input_ids"].tolist() == [[10, 11, 12, 13], [20, 21, EOS, EOS]]
    assert batch["shift_labels"].tolist() == [[-100, -100, 13, 14], [-100, 22, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3], [0, 1, 0, 0]]
    assert batch["lengths"].tolist() == [4, 2]
    assert batch["num_targets"] == 3


def reference_collate(windows: list[dict], pad_id: int) -> dict[str, list]:
    """The per-token loop of docs/format.md#collate, the slow obvious version of collate."""
    width = max(w["length"] for w in windows)
    out: dict[str, list] = {"input_ids": [], "shift_labels": [], "attention_mask": []}
    for w in windows:
        t, n, ls = list(w["tokens"]), w["length"], w["loss_start"]
        out["input_ids"].append(t[:n] + [pad_id] * (width - n))
        out["shift_labels"].append([-100] * ls + t[ls + 1 : n + 1] + [-100] * (width - n))
        out["attention_mask"].append([1] * n + [0] * (width - n))
    return out


@st.composite
def windows_strategy(draw: Any) -> list[dict]:
    out = []
    for _ in range(draw(st.integers(1, 6))):
        length = draw(st.integers(1, 12))
        tokens = draw(st.lists(st.integers(0, VOCAB - 1), min_size=length + 1,
                               max_size=length + 1))
        out.append({"tokens": np.array(tokens, np.int32), "length": length,
                    "loss_start": draw(st.integers(0, length - 1))})
    return out


@settings(max_examples=150, deadline=None)
@given(windows_strategy(), st.sampled_from([EOS, 0]))
def test_collate_matches_the_per_token_reference(windows: list[dict], pad_id: int) -> None:
    batch = collate(windows, pad_id=pad_id)
    ref = reference_collate(windows, pad_id)
    for key, value in ref.items():
        assert batch[key].tolist() == value
    assert batch["num_targets"] == sum(w["length"] - w["loss_start"] for w in windows)
    assert batch["num_targets"] == int((batch["shift_labels"] != -100).sum())


@pytest.mark.parametrize(
    ("windows", "match"),
    [
        ([], "empty batch"),
        ([{"tokens": [1, 2, 3], "length": 3, "loss_start": 0}], "tokens has 3 ids, but length 3"),
        ([{"tokens": [1, 2], "length": 1, "loss_start": 1}], r"loss_start must be in \[0, 1\)"),
        ([{"tokens": [1, 2], "length": 1, "loss_start": -1}], r"loss_start must be in \[0, 1\)"),
        ([{"tokens": [1], "length": 0, "loss_start": 0}], "length must be at least 1"),
        ([{"tokens": [1, 2], "length": 1}], "lacks the key 'loss_start'"),
        ([{"tokens": [[1, 2]], "length": 1, "loss_start": 0}], "1-D array"),
        ([{"tokens": [1, -2], "length": 1, "loss_start": 0}], "negative token id"),
    ],
)
def test_collate_rejects_bad_windows(windows: list[dict], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        collate(windows, pad_id=EOS)


def test_collate_names_the_bad_window() -> None:
    windows = seed004_windows() + [{"tokens": [1, 2, 3], "length": 1, "loss_start": 0,
                                    "doc_id": "a.txt:7", "start": 40}]
    with pytest.raises(ValueError, match=r"window 2 of the batch \(doc_id 'a.txt:7', start 40\)"):
        collate(windows, pad_id=EOS)


def test_collate_docstring_example_runs() -> None:
    result = doctest.testmod(sys.modules["reader.batches"])
    assert result.attempted >= 2 and result.failed == 0


def test_a_gathered_batch_collates_as_its_windows_do(tmp_path: Path) -> None:
    write_docs(tmp_path / "ds", random_docs(40), window=6, stride=4, score_new=True, num_shards=3)
    ds = WindowDataset(tmp_path / "ds")
    rng = np.random.default_rng(0)
    full = [i for i in range(len(ds)) if ds[i]["length"] == 6]
    picks = [rng.integers(0, len(ds), size=int(rng.integers(1, 12))).tolist() for _ in range(40)]
    picks += [full[:5], full[-1:], [0], list(range(len(ds)))]  # every window full; all windows
    for indices in picks:
        fast = collate(ds.__getitems__(indices), pad_id=EOS)
        slow = collate([ds[i] for i in indices], pad_id=EOS)
        assert fast.keys() == slow.keys()
        for key in ("input_ids", "shift_labels", "attention_mask", "position_ids", "lengths"):
            assert fast[key].dtype == torch.int64
            assert torch.equal(fast[key], slow[key]), key
        assert fast["num_targets"] == slow["num_targets"] > 0


def test_batches_carry_each_windows_index_and_it_names_the_document(tmp_path: Path) -> None:
    from reader import PackedSampler, collate_packed

    rows = write_docs(tmp_path / "ds", random_docs(30), window=6, stride=4, score_new=True,
                      num_shards=3)
    ds = WindowDataset(tmp_path / "ds")
    picked = [17, 3, len(ds) - 1, 0, 9]
    for windows in (ds.__getitems__(picked), [ds[i] for i in picked]):
        batch = collate(windows, pad_id=ds.eos_id)
        assert batch["index"].tolist() == picked
        assert ds.doc_id(batch["index"]) == [rows[i]["doc_id"] for i in picked]
    assert ds.doc_id(5) == rows[5]["doc_id"]
    assert "index" not in collate(seed004_windows(), pad_id=EOS)  # hand-made windows: none
    sampler = PackedSampler(ds.lengths, 4, 12, seed=1)
    for rows_of_batch in sampler:
        for windows in (ds.__getitems__(rows_of_batch),
                        [[ds[i] for i in row] for row in rows_of_batch]):
            batch = collate_packed(windows, seq_len=12, pad_id=ds.eos_id)
            index, seg = batch["index"], batch["segment_ids"]
            width = max(len(r) for r in rows_of_batch)
            assert index.tolist() == [r + [-1] * (width - len(r)) for r in rows_of_batch]
            # The window at each position: index[b, segment_ids[b, t]].
            at = index.gather(1, seg.clamp(min=0))
            for b, row in enumerate(rows_of_batch):
                for t in range(12):
                    if seg[b, t] >= 0:
                        i = int(at[b, t])
                        assert i == row[int(seg[b, t])]
                        assert int(batch["input_ids"][b, t]) in ds[i]["tokens"].tolist()
    with pytest.raises(IndexError, match="index -1 is out of range"):
        ds.doc_id(torch.tensor([0, -1]))


def test_collating_loads_no_mixture_code():
    # A trainer of one dataset imports collate and nothing of the mixture (its sampler, rule,
    # ledger, report): the arrows point from the mixture to collate, never back.
    code = ("import json, sys, reader.batches\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('reader.'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], check=True,
                          timeout=120)
    loaded = set(json.loads(done.stdout))
    assert "reader.batches" in loaded
    assert not loaded & {"reader.mixture.dataset", "reader.mixture.sampler", "reader.mixture.blend",
    "reader.mixture.ledger",
                         "reader.mixture.report"}
