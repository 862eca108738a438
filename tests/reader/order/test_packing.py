"""Tests of reader.order.packing and collate_packed: rows, ranks, resume, segments, the block
mask."""

from __future__ import annotations

import collections
import functools
import importlib.util
import json
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from reader import (
    EpochSampler,
    PackedSampler,
    WindowDataset,
    collate,
    collate_packed,
    pack_rows,
    token_nll,
)
from tests.common.reader_data import EOS, VOCAB, random_docs, write_docs

REPO = Path(__file__).resolve().parents[3]


def lengths_strategy(max_len: int = 12) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(1, max_len), min_size=1, max_size=80)


def as_lists(rows: Any) -> list[list[int]]:
    return [r.tolist() for r in np.split(rows.members, rows.starts[1:-1])]


@settings(max_examples=80, deadline=None)
@given(lengths_strategy(), st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**32),
       st.booleans(), st.integers(1, 5))
def test_every_window_is_in_exactly_one_row_per_epoch(lengths: list[int], rpb: int, ws: int,
                                                       seed: int, drop: bool,
                                                       open_rows: int) -> None:
    seq_len = 12
    kw = {"seed": seed, "drop_last": drop, "open_rows": open_rows}
    if drop and -(-sum(lengths) // seq_len) < rpb * ws:  # the fewest rows an epoch can fill
        with pytest.raises(ValueError, match="could have no batch"):
            PackedSampler(lengths, rpb, seq_len, world_size=ws, **kw)
        return
    samplers = [PackedSampler(lengths, rpb, seq_len, rank=r, world_size=ws, **kw)
                for r in range(ws)]
    for epoch in range(2):
        rows = as_lists(samplers[0].rows(epoch))
        # Each window exactly once, rows within seq_len, each row in the epoch's order.
        assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
        order = EpochSampler(len(lengths), 1, seed=seed).indices(epoch, 0, len(lengths))
        rank_in_order = {int(i): p for p, i in enumerate(order)}
        for row in rows:
            assert row and sum(lengths[i] for i in row) <= seq_len
            assert row == sorted(row, key=rank_in_order.__getitem__)
        # The rows do not depend on the world size or the rank.
        assert all(as_lists(s.rows(epoch)) == rows for s in samplers)
        flagged = [s.repeat_batches() for s in samplers]
        per_rank = [list(s) for s in samplers]
        assert len({len(b) for b in per_rank}) == 1  # every rank the same number of batches
        seen, repeats = [], 0
        for k in range(len(per_rank[0])):
            for r in range(ws):
                batch = per_rank[r][k]
                assert batch  # no empty batch
                if k in flagged[r]:
                    repeats += 1
                    assert len(batch) == 1 and batch[0] in rows
                else:
                    seen += batch
        tail = len(rows) % (rpb * ws)
        assert seen == rows[: len(rows) - tail if drop else len(rows)]  # in order, none twice
        assert repeats == (0 if drop or tail == 0 or tail >= ws else ws - tail)


def reference_pack(lengths: list[int], seq_len: int, open_rows: int) -> list[list[int]]:
    """The module docstring's first-fit, written the slow obvious way."""
    open_: list[list[Any]] = []  # [free, positions], oldest first
    closed: list[list[int]] = []
    for p, length in enumerate(lengths):
        if length == seq_len:
            closed.append([p])
            continue
        for row in open_:
            if row[0] >= length:
                row[0] -= length
                row[1].append(p)
                if row[0] == 0:
                    open_.remove(row)
                    closed.append(row[1])
                break
        else:
            if len(open_) == open_rows:
                closed.append(open_.pop(0)[1])
            open_.append([seq_len - length, [p]])
    return closed + [row[1] for row in open_]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 16), st.integers(1, 6), st.data())
def test_pack_rows_is_the_first_fit_of_the_docstring(seq_len: int, open_rows: int,
                                                     data: st.DataObject) -> None:
    lengths = data.draw(st.lists(st.integers(1, seq_len), max_size=120))
    rows = pack_rows(np.array(lengths, dtype=np.int64), seq_len=seq_len, open_rows=open_rows)
    assert as_lists(rows) == reference_pack(lengths, seq_len, open_rows) if lengths else (
        len(rows) == 0)


def test_pack_rows_across_its_chunks_of_positions() -> None:
    rng = np.random.default_rng(11)
    lengths = np.where(rng.random(150_000) < 0.3, 64, rng.integers(1, 64, 150_000))
    rows = pack_rows(lengths, seq_len=64, open_rows=8)  # 150,000 > 2 chunks of 65,536
    assert as_lists(rows) == reference_pack(lengths.tolist(), 64, 8)


def test_the_worked_example_and_full_windows() -> None:
    rows = pack_rows(np.array([3, 2, 4, 1]), seq_len=4, open_rows=2)
    assert [r.tolist() for r in np.split(rows.members, rows.starts[1:-1])] == [[2], [0, 3], [1]]
    rows = pack_rows(np.array([4, 4, 1, 4]), seq_len=4, open_rows=1)
    assert [r.tolist() for r in np.split(rows.members, rows.starts[1:-1])] == [
        [0], [1], [3], [2]]


def test_a_window_longer_than_seq_len_is_an_error_naming_the_fix() -> None:
    with pytest.raises(ValueError, match=r"window 1 has length 9, longer than seq_len 8: "
                                         r"pass seq_len >= 9"):
        PackedSampler([3, 9, 2], 2, 8, seed=0)
    with pytest.raises(ValueError, match="at least 1"):
        PackedSampler([3, 0], 2, 8, seed=0)


@pytest.mark.parametrize(("ws_before", "ws_after", "rpb_after"),
                         [(1, 1, 2), (2, 2, 1), (2, 1, 2), (1, 3, 1), (3, 2, 1)])
def test_resume_at_every_cut_continues_with_exactly_the_rest(ws_before: int, ws_after: int,
                                                             rpb_after: int) -> None:
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 17, size=57).tolist()
    rpb = 2 if ws_before == 1 else 1
    kw = {"seed": 3, "open_rows": 4}

    def run(ws: int, per: int) -> tuple[list[list[list[list[int]]]], list[frozenset[int]]]:
        samplers = [PackedSampler(lengths, per, 16, rank=r, world_size=ws, **kw)
                    for r in range(ws)]
        repeats = [s.repeat_batches() for s in samplers]  # of the iteration to come
        return [list(s) for s in samplers], repeats

    def counted(batches: list[list[list[list[int]]]], repeats: list[frozenset[int]],
                upto: int | None = None) -> collections.Counter:
        """How often each row is handed out, the deliberate repeats left out."""
        return collections.Counter(
            tuple(row) for r, mine in enumerate(batches) for k, batch in enumerate(mine[:upto])
            if k not in repeats[r] for row in batch)

    whole, whole_repeats = run(ws_before, rpb)
    every = counted(whole, whole_repeats)
    rows_total = len(PackedSampler(lengths, 1, 16, **kw).rows(0))
    assert len(every) == rows_total and set(every.values()) == {1}
    assert sorted(w for row in every for w in row) == list(range(len(lengths)))
    for cut in range(len(whole[0]) + 1):
        samplers = [PackedSampler(lengths, rpb, 16, rank=r, world_size=ws_before, **kw)
                    for r in range(ws_before)]
        its = [iter(s) for s in samplers]
        for _ in range(cut):
            for s, it in zip(samplers, its, strict=True):
                next(it)
                s.step(num_targets=1)
        state = json.loads(json.dumps(samplers[0].state_dict()))
        assert state["cursor"] == min(cut * rpb * ws_before, rows_total) % rows_total \
            or state["epoch"] == 1
        before = counted(whole, whole_repeats, upto=cut)
        if state["epoch"] == 1:  # the cut at the end: the epoch was handed out whole
            assert before == every
            continue
        fresh = [PackedSampler(lengths, rpb_after, 16, rank=r, world_size=ws_after, **kw)
                 for r in range(ws_after)]
        for f in fresh:
            f.load_state_dict(state)
        repeats = [f.repeat_batches() for f in fresh]
        after = counted([list(f) for f in fresh], repeats)
        # Every row of the epoch exactly once across the cut: nothing repeated, nothing lost.
        assert before + after == every, (cut, before & after, every - before - after)


def test_the_state_refuses_another_packing() -> None:
    state = PackedSampler([1, 2, 3], 1, 4, seed=0).state_dict()
    with pytest.raises(ValueError, match="open_rows"):
        PackedSampler([1, 2, 3], 1, 4, seed=0, open_rows=2).load_state_dict(state)
    with pytest.raises(ValueError, match="lengths_sha256"):
        PackedSampler([1, 2, 2], 1, 4, seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="not a PackedSampler state"):
        PackedSampler([1, 2, 3], 1, 4, seed=0).load_state_dict({"format": "epoch-sampler"})


@st.composite
def rows_strategy(draw: Any) -> tuple[list[list[dict]], int]:
    seq_len = draw(st.integers(2, 14))
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        row, free = [], seq_len
        while free and (not row or draw(st.booleans())):
            length = draw(st.integers(1, free))
            tokens = draw(st.lists(st.integers(0, VOCAB - 1), min_size=length + 1,
                                   max_size=length + 1))
            row.append({"tokens": np.array(tokens, np.int32), "length": length,
                        "loss_start": draw(st.integers(0, length - 1))})
            free -= length
        rows.append(row)
    return rows, seq_len


@settings(max_examples=150, deadline=None)
@given(rows_strategy(), st.sampled_from([EOS, 0]), st.booleans())
def test_collate_packed_segments_are_the_windows(case: tuple[list[list[dict]], int],
                                                 pad_id: int, vectorised: bool) -> None:
    rows, seq_len = case
    # Both ways of placing the windows: one by one (few windows) and by index arithmetic.
    limit = -1 if vectorised else 10**9
    with patch.object(importlib.import_module("reader.batches"), "_LOOP_WINDOWS", limit):
        batch = collate_packed(rows, seq_len=seq_len, pad_id=pad_id)
    assert "labels" not in batch and "attention_mask" not in batch
    bounds = [0]
    for b, row in enumerate(rows):
        col = 0
        for k, w in enumerate(row):
            t, n, ls = w["tokens"].tolist(), w["length"], w["loss_start"]
            sl = slice(col, col + n)
            single = collate([w], pad_id=pad_id)  # the same window unpacked
            assert batch["input_ids"][b, sl].tolist() == t[:n]
            assert batch["shift_labels"][b, sl].tolist() == single["shift_labels"][0].tolist()
            assert batch["shift_labels"][b, sl].tolist() == [-100] * ls + t[ls + 1 :]
            assert batch["position_ids"][b, sl].tolist() == list(range(n))
            assert batch["segment_ids"][b, sl].tolist() == [k] * n
            col += n
            bounds.append(b * seq_len + col)
        pad = seq_len - col
        assert batch["input_ids"][b, col:].tolist() == [pad_id] * pad
        assert batch["shift_labels"][b, col:].tolist() == [-100] * pad
        assert batch["segment_ids"][b, col:].tolist() == [-1] * pad
        assert batch["position_ids"][b, col:].tolist() == list(range(pad))
        if pad:
            bounds.append((b + 1) * seq_len)
    assert batch["cu_seqlens"].dtype == torch.int32
    assert batch["cu_seqlens"].tolist() == bounds
    assert batch["max_seqlen"] == max(np.diff(bounds))
    assert batch["num_targets"] == sum(w["length"] - w["loss_start"] for r in rows for w in r)
    assert batch["num_targets"] == int((batch["shift_labels"] != -100).sum())
    assert batch["num_windows"] == sum(map(len, rows))


def test_collate_packed_rejects_bad_rows() -> None:
    w = {"tokens": [1, 2, 3], "length": 2, "loss_start": 0}
    with pytest.raises(ValueError, match="more than seq_len 3"):
        collate_packed([[w, w]], seq_len=3, pad_id=EOS)
    with pytest.raises(ValueError, match="row 0 of the batch holds no window"):
        collate_packed([[]], seq_len=3, pad_id=EOS)
    with pytest.raises(ValueError, match="no scored target|loss_start"):
        collate_packed([[{"tokens": [1, 2], "length": 1, "loss_start": 1}]], seq_len=3, pad_id=0)


def _model() -> Any:
    spec = importlib.util.spec_from_file_location("train_tiny", REPO / "examples/train_tiny.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    torch.manual_seed(0)
    return module.TinyCausalLM(VOCAB, 24, d_model=32, n_heads=4, n_layers=2).double().eval()


def test_packed_nll_equals_unpacked_nll_per_window_with_the_block_mask(tmp_path: Path) -> None:
    write_docs(tmp_path / "ds", random_docs(30, max_len=30), window=24, stride=16,
               score_new=True, num_shards=2)
    ds = WindowDataset(tmp_path / "ds")
    model = _model()
    sampler = PackedSampler(ds.lengths, 3, 24, seed=1, open_rows=4)
    packed_windows = 0
    with torch.no_grad():
        for batch_rows in sampler:
            batch = collate_packed(ds.__getitems__(batch_rows), seq_len=24, pad_id=ds.eos_id)
            logits = model(batch["input_ids"], batch["position_ids"], batch["segment_ids"])
            nll = F.cross_entropy(logits.transpose(1, 2), batch["shift_labels"],
                                  reduction="none", ignore_index=-100)
            for b, row in enumerate(batch_rows):
                for k, i in enumerate(row):
                    alone = collate([ds[i]], pad_id=ds.eos_id)
                    ref, count = token_nll(model(alone["input_ids"], alone["position_ids"]),
                                           alone["shift_labels"])
                    mine = nll[b][batch["segment_ids"][b] == k].sum()
                    assert abs(float(mine) - float(ref)) < 1e-9
                    packed_windows += 1
            # Without the mask the windows read each other: the NLL differs.
            if any(len(r) > 1 for r in batch_rows):
                leaky = model(batch["input_ids"], batch["position_ids"])
                assert not torch.allclose(leaky, logits)
    assert packed_windows == len(ds)
    assert len(sampler.rows(0)) < len(ds)  # rows that hold several windows were checked


def test_lengths_reads_the_length_column_without_building_a_layout(tmp_path: Path) -> None:
    write_docs(tmp_path / "ds", random_docs(25), window=8, stride=6, score_new=True,
               num_shards=3)
    ds = WindowDataset(tmp_path / "ds", cache_dir=tmp_path / "cache")
    lengths = ds.lengths
    assert ds.layout_builds == 0  # no tokens were read or converted
    assert lengths.dtype == np.int32
    assert lengths.tolist() == [ds[i]["length"] for i in range(len(ds))]
    again = WindowDataset(tmp_path / "ds", cache_dir=tmp_path / "cache")
    again.prepare()
    assert again.lengths.tolist() == lengths.tolist()  # from the dataset index this time


def test_a_dataloader_with_workers_reads_packed_batches_and_resumes(tmp_path: Path) -> None:
    write_docs(tmp_path / "ds", random_docs(40), window=16, stride=12, score_new=True,
               num_shards=2)
    ds = WindowDataset(tmp_path / "ds")
    pack = functools.partial(collate_packed, seq_len=16, pad_id=ds.eos_id)

    def loader(sampler: PackedSampler, workers: int) -> DataLoader:
        return DataLoader(ds, batch_sampler=sampler, collate_fn=pack, num_workers=workers)

    for workers in (0, 2):
        batches = list(loader(PackedSampler(ds.lengths, 2, 16, seed=4), 0))
        ref = [b["input_ids"] for b in batches]
        sampler = PackedSampler(ds.lengths, 2, 16, seed=4)
        seen = []
        for batch in loader(sampler, workers):
            seen.append(batch["input_ids"])
            sampler.step(batch)
            if len(seen) == 3:
                break
        fresh = PackedSampler(ds.lengths, 2, 16, seed=4)
        fresh.load_state_dict(json.loads(json.dumps(sampler.state_dict())))
        seen += [b["input_ids"] for b in loader(fresh, workers)]
        assert len(seen) == len(ref)
        assert all(torch.equal(a, b) for a, b in zip(seen, ref, strict=True))
        assert sampler.targets_seen == sum(b["num_targets"] for b in batches[:3])
