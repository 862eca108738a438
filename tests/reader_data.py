"""Test datasets for the reader's tests, written with pyarrow and transforms.schema.

Self-contained (no Beam): rows are planned here as SPEC §3 and §4 plan them.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms.schema import (
    ARROW_SCHEMA,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_NAME,
    dumps_manifest,
    shard_file_name,
)

BOS, EOS, VOCAB = 256, 257, 258


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own layout cache (DataLoader workers inherit the variable)."""
    directory = tmp_path_factory.mktemp("layout-cache")
    monkeypatch.setenv("TOKEN_WINDOWS_CACHE", str(directory))
    return directory


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


def check_window(w: dict, row: dict, index: int) -> None:
    assert w["tokens"].dtype == np.int32 and w["tokens"].tolist() == row["tokens"]
    assert len(w["tokens"]) == w["length"] + 1
    for key in ("start", "length", "loss_start", "doc_id", "doc_key", "window_index",
                "doc_tokens"):
        assert w[key] == row[key], key
    assert w["index"] == index
