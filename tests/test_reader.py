"""Tests of the torch reader: dataset checks, collate, sampler state, loss, the example model.

Self-contained: every dataset is written here into ``tmp_path`` with pyarrow and
:mod:`transforms.schema` (see :func:`write_dataset`), so these tests run before and without
the Beam pipeline.
"""

from __future__ import annotations

import doctest
import functools
import hashlib
import importlib.util
import json
import math
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from reader import EpochSampler, WindowDataset, collate, epoch_seed, evaluate, token_nll
from transforms.manifest import MANIFEST_NAME, dumps_manifest
from transforms.schema import ARROW_SCHEMA, FORMAT, FORMAT_VERSION, shard_file_name

REPO = Path(__file__).resolve().parents[1]
BOS, EOS, VOCAB = 256, 257, 258

# -- writing test datasets ---------------------------------------------------------------


def plan(num_pairs: int, window: int, stride: int, score_new: bool) -> list[tuple[int, int, int]]:
    """(start, length, loss_start) of SPEC §3's reference plan with tail=keep, offset=zero."""
    out, s, prev_end = [], 0, 0
    while s < num_pairs:
        length = min(window, num_pairs - s)
        out.append((s, length, max(0, prev_end - s) if score_new else 0))
        prev_end = s + length
        if length < window or s + window == num_pairs:
            break
        s += stride
    return out


def doc_rows(docs: list[tuple[str, bytes]], *, window: int, stride: int | None = None,
             score_new: bool = False, seed: int = 0, num_shards: int = 2) -> list[list[dict]]:
    """Rows per shard for byte documents, ordered as SPEC §4 orders them."""
    shards: list[list[dict]] = [[] for _ in range(num_shards)]
    for doc_id, text in docs:
        key = int.from_bytes(hashlib.sha256(f"{seed}:{doc_id}".encode()).digest()[:8], "big")
        z = [BOS, *text, EOS]
        for k, (s, length, ls) in enumerate(plan(len(z) - 1, window, stride or window, score_new)):
            shards[(key * num_shards) >> 64].append({
                "doc_id": doc_id, "doc_key": key, "window_index": k, "start": s,
                "length": length, "loss_start": ls, "doc_tokens": len(z),
                "tokens": z[s : s + length + 1],
            })
    for rows in shards:
        rows.sort(key=lambda r: (r["doc_key"], r["doc_id"], r["start"]))
    return shards


def write_dataset(root: Path, shards: list[list[dict]], *, window: int,
                  row_group_size: int = 4) -> Path:
    """Write shards and a manifest that ``parse_manifest`` accepts; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, rows in enumerate(shards):
        name = shard_file_name(i, len(shards))
        table = pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)
        pq.write_table(table, root / name, row_group_size=row_group_size)
        data = (root / name).read_bytes()
        entries.append({
            "file": name, "rows": len(rows),
            "scored_targets": sum(r["length"] - r["loss_start"] for r in rows),
            "sha256": hashlib.sha256(data).hexdigest(),
            "documents": len({r["doc_id"] for r in rows}),
            "tokens": sum(r["length"] + 1 for r in rows), "bytes": len(data),
        })
    rows = [r for shard in shards for r in shard]
    firsts = {r["doc_id"]: r["doc_tokens"] for r in rows}
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "tokenizer": {"kind": "bytes", "vocab_size": VOCAB, "bos_id": BOS, "eos_id": EOS,
                      "sha256": None},
        "windows": {"window": window, "stride": window, "tail": "keep", "min_tail": 1,
                    "score": "all", "offset": "zero", "seed": 0},
        "inputs": ["test/*.txt"],
        "counts": {"documents": len(firsts), "skipped": {}, "windows": len(rows),
                   "tokens": sum(e["tokens"] for e in entries),
                   "pairs": sum(m - 1 for m in firsts.values()),
                   "scored_targets": sum(e["scored_targets"] for e in entries),
                   "uncovered_pairs": 0},
        "shards": entries,
    }
    (root / MANIFEST_NAME).write_bytes(dumps_manifest(manifest))
    return root


def random_docs(n: int, seed: int = 0, max_len: int = 40) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    return [(f"doc-{i:04d}.txt:1", bytes(rng.randrange(32, 127) for _ in range(rng.randrange(
        0, max_len)))) for i in range(n)]


def edit_manifest(root: Path, edit: Any) -> None:
    manifest = json.loads((root / MANIFEST_NAME).read_text())
    edit(manifest)
    (root / MANIFEST_NAME).write_bytes(dumps_manifest(manifest))


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, list[dict]]:
    """A 3-shard dataset of 30 documents, W=6, S=4, score=new; and its rows in global order."""
    shards = doc_rows(random_docs(30), window=6, stride=4, score_new=True, num_shards=3)
    root = write_dataset(tmp_path / "ds", shards, window=6, row_group_size=4)
    return root, [r for shard in shards for r in shard]


# -- seed 004's batch ----------------------------------------------------------------------


def seed004_windows() -> list[dict]:
    return [
        {"tokens": np.array([256, 97, 257], np.int32), "start": 0, "length": 2, "loss_start": 0},
        {"tokens": np.array([256, 257], np.int32), "start": 0, "length": 1, "loss_start": 0},
    ]


def logits_for(labels: torch.Tensor, probs: dict[tuple[int, int], float]) -> torch.Tensor:
    """Log-probabilities over VOCAB ids giving each scored target its probability."""
    b, t = labels.shape
    logits = torch.full((b, t, VOCAB), math.log(1 / VOCAB), dtype=torch.float64)
    for (i, j), p in probs.items():
        rest = math.log((1 - p) / (VOCAB - 1))
        logits[i, j] = rest
        logits[i, j, labels[i, j]] = math.log(p)
    return logits


def test_seed004_batch_scores_every_eos_target() -> None:
    batch = collate(seed004_windows(), pad_id=EOS)
    assert batch["input_ids"].tolist() == [[256, 97], [256, 257]]
    assert batch["labels"].tolist() == [[97, 257], [257, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1], [1, 0]]
    assert batch["position_ids"].tolist() == [[0, 1], [0, 0]]
    assert batch["num_targets"] == 3
    assert int((batch["labels"] == EOS).sum()) == 2
    for key in ("input_ids", "labels", "attention_mask", "position_ids"):
        assert batch[key].dtype == torch.int64 and batch[key].shape == (2, 2)

    logits = logits_for(batch["labels"], {(0, 0): 1 / 2, (0, 1): 1 / 4, (1, 0): 1 / 8})
    nll_sum, count = token_nll(logits, batch["labels"])
    assert count == 3
    assert abs(nll_sum.item() / count - 2 * math.log(2)) < 1e-12
    # The bug seed 004 warns about: ignoring targets equal to EOS gives ln 2 instead.
    wrong = batch["labels"].masked_fill(batch["labels"] == EOS, -100)
    wrong_sum, wrong_count = token_nll(logits, wrong)
    assert wrong_count == 1 and abs(wrong_sum.item() - math.log(2)) < 1e-12


def test_collate_masks_context_before_loss_start() -> None:
    windows = [
        {"tokens": [10, 11, 12, 13, 14], "length": 4, "loss_start": 2},
        {"tokens": [20, 21, 22], "length": 2, "loss_start": 1},
    ]
    batch = collate(windows, pad_id=EOS)
    assert batch["input_ids"].tolist() == [[10, 11, 12, 13], [20, 21, EOS, EOS]]
    assert batch["labels"].tolist() == [[-100, -100, 13, 14], [-100, 22, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3], [0, 1, 0, 0]]
    assert batch["lengths"].tolist() == [4, 2]
    assert batch["num_targets"] == 3


def reference_collate(windows: list[dict], pad_id: int) -> dict[str, list]:
    """Seed 004's per-token loop, the slow obvious version of collate."""
    width = max(w["length"] for w in windows)
    out: dict[str, list] = {"input_ids": [], "labels": [], "attention_mask": []}
    for w in windows:
        t, n, ls = list(w["tokens"]), w["length"], w["loss_start"]
        out["input_ids"].append(t[:n] + [pad_id] * (width - n))
        out["labels"].append([-100] * ls + t[ls + 1 : n + 1] + [-100] * (width - n))
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
    assert batch["num_targets"] == int((batch["labels"] != -100).sum())


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


# -- loss helpers --------------------------------------------------------------------------


def test_token_nll_rejects_a_batch_without_targets() -> None:
    with pytest.raises(ValueError, match="no scored target"):
        token_nll(torch.zeros(1, 2, VOCAB), torch.full((1, 2), -100))
    with pytest.raises(ValueError, match=r"logits must be \(B, T, V\)"):
        token_nll(torch.zeros(1, 3, VOCAB), torch.zeros(1, 2, dtype=torch.long))


def test_evaluate_divides_the_total_once_not_a_mean_of_batch_means() -> None:
    big = collate([{"tokens": [1, 2, 3, 4, 5], "length": 4, "loss_start": 0}], pad_id=EOS)
    small_batch = collate([{"tokens": [1, 2], "length": 1, "loss_start": 0}], pad_id=EOS)
    # Every target of the big batch has probability 1/2, the small one's 1/8.
    logits = {
        id(big): logits_for(big["labels"], {(0, j): 0.5 for j in range(4)}),
        id(small_batch): logits_for(small_batch["labels"], {(0, 0): 0.125}),
    }
    result = evaluate(lambda b: logits[id(b)], [big, small_batch])
    expected = (4 * math.log(2) + 3 * math.log(2)) / 5
    assert result["targets"] == 5 and result["batches"] == 2
    assert abs(result["nll"] - expected) < 1e-12  # a mean of batch means would be 2 ln 2
    assert abs(result["perplexity"] - math.exp(expected)) < 1e-9
    with pytest.raises(ValueError, match="evaluation set is empty"):
        evaluate(lambda b: logits[id(b)], [])


# -- the example model: seed 004's causal checks -------------------------------------------


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


# -- the dataset ---------------------------------------------------------------------------


def check_window(w: dict, row: dict, index: int) -> None:
    assert w["tokens"].dtype == np.int32 and w["tokens"].tolist() == row["tokens"]
    assert len(w["tokens"]) == w["length"] + 1
    for key in ("start", "length", "loss_start", "doc_id", "doc_key", "window_index",
                "doc_tokens"):
        assert w[key] == row[key], key
    assert w["index"] == index


def test_dataset_reads_every_row_in_shard_then_file_order(small: tuple[Path, list]) -> None:
    root, rows = small
    ds = WindowDataset(root, verify=True)
    assert len(ds) == len(rows) == ds.manifest["counts"]["windows"]
    assert (ds.bos_id, ds.eos_id, ds.vocab_size, ds.window) == (BOS, EOS, VOCAB, 6)
    assert ds.shard_files == tuple(shard_file_name(i, 3) for i in range(3))
    for i, row in enumerate(rows):
        check_window(ds[i], row, i)
    check_window(ds[-1], rows[-1], len(rows) - 1)
    check_window(ds[np.int64(3)], rows[3], 3)
    assert [w["index"] for w in ds.__getitems__([7, 2, 7, 0])] == [7, 2, 7, 0]
    with pytest.raises(IndexError, match="out of range"):
        ds[len(rows)]
    # score=new: a document's scored targets, in window order, are z[1:] exactly once.
    by_doc: dict[str, list[int]] = {}
    for i in range(len(ds)):
        w = ds[i]
        by_doc.setdefault(w["doc_id"], []).extend(w["tokens"][1 + w["loss_start"]:].tolist())
    assert sum(map(len, by_doc.values())) == ds.scored_targets
    docs = dict(random_docs(30))
    assert all(targets == [*docs[d], EOS] for d, targets in by_doc.items())


def test_dataset_cache_is_bounded_and_pickles_without_handles(small: tuple[Path, list]) -> None:
    root, rows = small
    ds = WindowDataset(str(root), cache_bytes=0)  # keeps a single row group
    order = list(range(len(rows)))
    random.Random(1).shuffle(order)
    for i in order:
        check_window(ds[i], rows[i], i)
    assert len(ds._cache) == 1 and 1 <= len(ds._files) <= 3
    clone = pickle.loads(pickle.dumps(ds))
    assert len(clone._cache) == 0 and len(clone._files) == 0
    check_window(clone[5], rows[5], 5)
    ds._pid = -1  # as a forked worker sees it: inherited handles are dropped, not reused
    check_window(ds[0], rows[0], 0)
    assert ds._pid == os.getpid() and len(ds._files) == 1


def test_dataset_skips_empty_shards(tmp_path: Path) -> None:
    rows = doc_rows(random_docs(8), window=6, num_shards=1)[0]
    shards = [[], rows[:5], [], rows[5:], []]
    ds = WindowDataset(write_dataset(tmp_path / "ds", shards, window=6, row_group_size=2))
    assert len(ds) == len(rows)
    for i, row in enumerate(rows):
        check_window(ds[i], row, i)


def test_collate_docstring_example_runs() -> None:
    result = doctest.testmod(sys.modules["reader.collate"])
    assert result.attempted >= 2 and result.failed == 0


def test_dataset_opens_a_uri(small: tuple[Path, list]) -> None:
    root, rows = small
    ds = WindowDataset(root.as_uri())
    assert ds.path == root.as_uri() and len(ds) == len(rows)
    check_window(ds[9], rows[9], 9)


def test_missing_manifest(small: tuple[Path, list]) -> None:
    root, _ = small
    (root / MANIFEST_NAME).unlink()
    with pytest.raises(FileNotFoundError, match=r"manifest\.json not found.*not a finished"):
        WindowDataset(root)


def test_missing_shard(small: tuple[Path, list]) -> None:
    root, _ = small
    (root / "part-00001-of-00003.parquet").unlink()
    with pytest.raises(FileNotFoundError, match=r"part-00001-of-00003\.parquet.*does not exist"):
        WindowDataset(root)


def test_row_count_mismatch(small: tuple[Path, list]) -> None:
    root, _ = small
    edit_manifest(root, lambda m: m["shards"][2].update(rows=m["shards"][2]["rows"] + 1))
    with pytest.raises(ValueError, match=r"part-00002-of-00003\.parquet holds \d+ rows, but "
                                         r"the manifest says \d+"):
        WindowDataset(root)


def test_windows_count_mismatch(small: tuple[Path, list]) -> None:
    root, rows = small
    edit_manifest(root, lambda m: m["counts"].update(windows=len(rows) + 1))
    with pytest.raises(ValueError, match=rf"json says counts\.windows is {len(rows) + 1}"):
        WindowDataset(root)


def test_checksum_mismatch_only_with_verify(small: tuple[Path, list]) -> None:
    root, _ = small
    edit_manifest(root, lambda m: m["shards"][0].update(sha256="0" * 64))
    assert len(WindowDataset(root)) > 0
    with pytest.raises(ValueError, match=r"part-00000-of-00003\.parquet has SHA-256 [0-9a-f]{64}, "
                                         r"but the manifest says 0{64}"):
        WindowDataset(root, verify=True)


def test_unknown_format_version(small: tuple[Path, list]) -> None:
    root, _ = small
    edit_manifest(root, lambda m: m.update(format_version=FORMAT_VERSION + 1))
    with pytest.raises(ValueError, match=r"manifest\.json has format_version 2"):
        WindowDataset(root)


def test_shard_of_another_schema(small: tuple[Path, list]) -> None:
    root, _ = small
    path = root / "part-00000-of-00003.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["doc_tokens"]), path)
    edit_manifest(root, lambda m: m["shards"][0].update(rows=pq.read_metadata(path).num_rows))
    with pytest.raises(ValueError, match=r"part-00000-of-00003\.parquet lacks the column "
                                         r"'doc_tokens'"):
        WindowDataset(root)


@pytest.mark.parametrize("bad", [VOCAB, 300, -1])
def test_out_of_range_token_id(tmp_path: Path, bad: int) -> None:
    shards = doc_rows(random_docs(12), window=6, num_shards=2)
    shards[1][5]["tokens"][2] = bad
    root = write_dataset(tmp_path / "ds", shards, window=6, row_group_size=4)
    ds = WindowDataset(root)
    ds[0]  # other row groups read fine; the check runs when a row group is loaded
    index = len(shards[0]) + 5
    with pytest.raises(ValueError, match=rf"part-00001-of-00002\.parquet row 5 \(dataset index "
                                         rf"{index}\): token id {bad} is outside the vocabulary "
                                         rf"\[0, {VOCAB}\)"):
        ds[index - 1]  # the same row group (rows 4..7) as the bad row


def test_bad_row_fields_are_named(tmp_path: Path) -> None:
    shards = doc_rows(random_docs(6), window=6, num_shards=1)
    shards[0][2]["loss_start"] = shards[0][2]["length"]
    root = write_dataset(tmp_path / "ds", shards, window=6, row_group_size=100)
    with pytest.raises(ValueError, match=r"part-00000-of-00001\.parquet row 2 .*loss_start"):
        WindowDataset(root)[0]


# -- the sampler ---------------------------------------------------------------------------


def one_epoch(sampler: EpochSampler) -> list[list[int]]:
    return list(sampler)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.integers(1, 9), st.integers(0, 2**40), st.booleans())
def test_each_epoch_is_the_seeded_permutation(n: int, bs: int, seed: int, drop: bool) -> None:
    if drop and n < bs:
        with pytest.raises(ValueError, match="no batch"):
            EpochSampler(n, bs, seed=seed, drop_last=drop)
        return
    sampler = EpochSampler(n, bs, seed=seed, drop_last=drop)
    for epoch in range(3):
        expected_len = len(sampler)
        batches = one_epoch(sampler)
        assert len(batches) == expected_len
        flat = [i for b in batches for i in b]
        perm = sampler.permutation(epoch).tolist()
        g = torch.Generator().manual_seed(epoch_seed(seed, epoch))
        assert perm == torch.randperm(n, generator=g).tolist()
        kept = n - n % bs if drop else n
        assert flat == perm[:kept]
        assert all(len(b) == bs for b in batches[:-1]) and 1 <= len(batches[-1]) <= bs
        assert len(batches) == sampler.batches_per_epoch
        if not drop:
            assert sorted(flat) == list(range(n))  # every window once


def test_permutation_is_a_function_of_seed_and_epoch() -> None:
    a, b = EpochSampler(50, 4, seed=7), EpochSampler(50, 5, seed=7, rank=1, world_size=3)
    assert a.permutation(3).tolist() == b.permutation(3).tolist()
    assert a.permutation(0).tolist() != a.permutation(1).tolist()
    assert a.permutation(0).tolist() != EpochSampler(50, 4, seed=8).permutation(0).tolist()
    jumped = EpochSampler(50, 4, seed=7)
    jumped.load_state_dict({**jumped.state_dict(), "epoch": 2})
    assert [i for batch in jumped for i in batch] == a.permutation(2).tolist()


def run_ranks(n: int, bs: int, ws: int, seed: int = 3, drop: bool = False,
              state: dict | None = None, stop: int | None = None) -> list[list[list[int]]]:
    """Batches of every rank, in lockstep, until ``stop`` global batches or the epoch's end."""
    samplers = [EpochSampler(n, bs, seed=seed, rank=r, world_size=ws, drop_last=drop)
                for r in range(ws)]
    if state is not None:
        for s in samplers:
            s.load_state_dict(json.loads(json.dumps(state)))
    out: list[list[list[int]]] = []
    iters = [iter(s) for s in samplers]
    while stop is None or len(out) < stop:
        parts = [next(it, None) for it in iters]
        if parts[0] is None:
            assert all(p is None for p in parts)  # every rank ends together
            break
        assert all(p is not None for p in parts)
        out.append(parts)  # type: ignore[arg-type]
        total = sum(len(p) for p in parts)  # type: ignore[arg-type]
        for s in samplers:
            s.step(num_targets=total)  # as if all-reduced over ranks: one global count
    run_ranks.last_state = samplers[0].state_dict()  # type: ignore[attr-defined]
    return out


@pytest.mark.parametrize("ws", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [1, 2, 5, 12, 13, 22, 23, 25])
@pytest.mark.parametrize("drop", [False, True])
def test_ranks_are_disjoint_and_complete(ws: int, n: int, drop: bool) -> None:
    bs = 3
    g = ws * bs
    if drop and n < g:
        return
    perm = EpochSampler(n, bs, seed=3).permutation(0).tolist()
    batches = run_ranks(n, bs, ws, drop=drop)
    assert len(batches) == (n // g if drop else -(-n // g))
    seen: list[int] = []
    for k, parts in enumerate(batches):
        lo, hi = k * g, min((k + 1) * g, n)
        m = hi - lo
        sizes = [len(p) for p in parts]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= (0 if m == g else 1)
        if m >= ws:
            assert [i for p in parts for i in p] == perm[lo:hi]  # contiguous, rank order
        else:  # the tail policy: ranks >= m get one window wrapped from the epoch's start
            assert parts[:m] == [[i] for i in perm[lo:hi]]
            assert parts[m:] == [[perm[j % n]] for j in range(ws - m)]
        seen += [i for p in parts[: min(m, ws)] for i in p] if m < ws else perm[lo:hi]
    assert seen == perm[: (n // g * g if drop else n)]
    assert len(set(seen)) == len(seen)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 30), st.integers(1, 4), st.integers(1, 3), st.integers(0, 10**6),
       st.booleans())
def test_resume_at_every_cut_of_two_epochs(n: int, bs: int, ws: int, seed: int,
                                           drop: bool) -> None:
    if drop and n < bs * ws:
        return
    ref = run_ranks(n, bs, ws, seed, drop) + run_ranks(
        n, bs, ws, seed, drop, state={**run_ranks.last_state})  # type: ignore[attr-defined]
    assert run_ranks.last_state["epoch"] == 2  # type: ignore[attr-defined]
    for cut in range(len(ref) + 1):
        first = run_ranks(n, bs, ws, seed, drop, stop=cut)
        state = run_ranks.last_state  # type: ignore[attr-defined]
        rest = []
        while state["epoch"] < 2:
            rest += run_ranks(n, bs, ws, seed, drop, state=state)
            state = run_ranks.last_state  # type: ignore[attr-defined]
        assert first + rest == ref
        assert state["targets_seen"] == sum(len(p) for parts in ref for p in parts)


def test_resume_without_step_uses_the_iterator_position() -> None:
    sampler = EpochSampler(10, 3, seed=1)
    ref = list(sampler) + list(sampler)  # two epochs: each iteration starts the next
    assert sorted(i for b in ref[4:] for i in b) == list(range(10))
    for cut in range(len(ref) + 1):
        a = EpochSampler(10, 3, seed=1)
        it = iter(a)
        first = [next(it) for _ in range(min(cut, 4))]
        if cut > 4:
            it = iter(a)
            first += [next(it) for _ in range(cut - 4)]
        b = EpochSampler(10, 3, seed=1)
        b.load_state_dict(json.loads(json.dumps(a.state_dict())))
        rest = []
        while b.epoch < 2:
            rest += list(b)
        assert first + rest == ref


def test_elastic_resume_repeats_and_skips_nothing() -> None:
    n, g, seed = 38, 4, 5  # 38 % 4 = 2: the last phase (2 ranks) splits the tail 1 + 1
    perm = EpochSampler(n, g, seed=seed).permutation(0).tolist()
    phases = [(2, 3), (1, 2), (4, 3), (2, None)]  # 2 → 1 → 4 → 2 ranks, same global batch
    state, seen, global_batches = None, [], []
    for ws, stop in phases:
        for parts in run_ranks(n, g // ws, ws, seed, state=state, stop=stop):
            global_batches.append(sorted(i for p in parts for i in p))
            seen += [i for p in parts for i in p]
        state = run_ranks.last_state  # type: ignore[attr-defined]
    assert state["epoch"] == 1 and state["cursor"] == 0 and state["targets_seen"] == n
    assert seen == perm  # every window once, in the epoch's order
    assert global_batches == [sorted(perm[k : k + g]) for k in range(0, n, g)]


def test_resume_with_another_global_batch_covers_the_rest_once() -> None:
    first = run_ranks(29, 4, 1, stop=3)
    rest = run_ranks(29, 2, 3, state=run_ranks.last_state)  # type: ignore[attr-defined]
    seen = [i for parts in first + rest for p in parts for i in p]
    assert seen == EpochSampler(29, 4, seed=3).permutation(0).tolist()


def test_sampler_state_errors() -> None:
    sampler = EpochSampler(10, 4, seed=0)
    with pytest.raises(ValueError, match="more batches than the sampler has yielded"):
        sampler.step(num_targets=1)
    state = sampler.state_dict()
    with pytest.raises(ValueError, match="the state has n 10, but this sampler has 11"):
        EpochSampler(11, 4, seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="the state has seed 0, but this sampler has 1"):
        EpochSampler(10, 4, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="not an EpochSampler state"):
        sampler.load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match="`batch_size` must be at least 1, but got 0"):
        EpochSampler(10, 0, seed=0)
    with pytest.raises(ValueError, match=r"`rank` must be in \[0, 2\), but got 2"):
        EpochSampler(10, 1, seed=0, rank=2, world_size=2)
    with pytest.raises(ValueError, match="`n` must be at least 1, but got 0"):
        EpochSampler(0, 1, seed=0)


# -- the sampler under a real DataLoader ---------------------------------------------------


def batch_key(batch: dict) -> tuple:
    return batch["input_ids"].tolist(), batch["labels"].tolist(), batch["num_targets"]


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


@pytest.mark.parametrize(("workers", "cuts"), [(0, [0, 1, 4, 7, 8, 11, 15]), (2, [3, 9])])
def test_dataloader_resume_continues_identically(small: tuple[Path, list], workers: int,
                                                 cuts: list[int]) -> None:
    root, _ = small
    ds = WindowDataset(root)
    reference = train_loop(ds, EpochSampler(len(ds), 5, seed=11), 0)
    assert len(reference) == 2 * -(-len(ds) // 5)
    for cut in cuts:
        sampler = EpochSampler(len(ds), 5, seed=11)
        first = train_loop(ds, sampler, workers, stop=cut)
        state = json.loads(json.dumps(sampler.state_dict()))
        # Prefetching ran ahead, but the state holds only what the loop consumed.
        assert state["batches_seen"] == cut
        assert state["targets_seen"] == sum(b[2] for b in first)
        resumed = EpochSampler(len(ds), 5, seed=11)
        resumed.load_state_dict(state)
        assert first + train_loop(ds, resumed, workers) == reference


# -- end to end: the example trains, checkpoints mid-epoch, and resumes --------------------


def test_train_tiny_resume_matches_an_uninterrupted_run(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    shards = doc_rows(random_docs(80, max_len=60), window=16, num_shards=2)
    root = write_dataset(tmp_path / "ds", shards, window=16, row_group_size=32)
    example = load_example()
    ckpt = str(tmp_path / "ckpt.pt")
    common = [str(root), "--steps", "24", "--batch-size", "4", "--d-model", "32",
              "--checkpoint", ckpt, "--eval-every", "12", "--log-every", "6"]
    full = example.main([*common, "--save-at", "10", "--num-workers", "2"])
    resumed = example.main([*common, "--resume", "--num-workers", "0"])
    out = capsys.readouterr().out
    assert "saved" in out and "resumed from" in out and "eval nll" in out
    assert full["step"] == resumed["step"] == 24
    assert full["targets_seen"] == resumed["targets_seen"] > 0
    assert resumed["train_loss"] == pytest.approx(full["train_loss"], rel=1e-6)
    assert resumed["eval_nll"] == pytest.approx(full["eval_nll"], rel=1e-6)
    assert math.isfinite(full["eval_perplexity"])


# -- the package boundary ------------------------------------------------------------------


def test_reader_does_not_import_beam() -> None:
    code = "import reader, sys; assert 'apache_beam' not in sys.modules, 'beam imported'"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
