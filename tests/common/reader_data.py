"""Test datasets for the reader's tests, written by ``transforms.testing.write_dataset``.

That is the job's own writer (keys, plans, shard rows, Parquet, manifest) without Beam; the
expected rows are read back from the Parquet files with pyarrow, independently of the reader.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from tests.common.jobs import manifest_bytes
from transforms.dataset.manifest import MANIFEST_NAME
from transforms.params import WindowSpec
from transforms.testing import write_dataset

BOS, EOS, VOCAB = 256, 257, 258


def write_docs(root: Path, docs: list[tuple[str, bytes]], *, window: int,
               stride: int | None = None, score_new: bool = False, num_shards: int = 2,
               rows_per_group: int = 4) -> list[dict[str, Any]]:
    """Write byte documents as a dataset in ``root``; returns its rows in dataset order."""
    spec = WindowSpec(window=window, stride=stride or window,
                      score="new" if score_new else "all")
    manifest = write_dataset(root, [(d, [BOS, *text, EOS]) for d, text in docs], windows=spec,
                             num_shards=num_shards, rows_per_group=rows_per_group)
    rows: list[dict[str, Any]] = []
    for shard in manifest.shards:
        rows += pq.read_table(root / shard.file).to_pylist()
    return rows


def rewrite_shard(root: Path, index: int, edit: Any, *, rows_per_group: int = 4) -> None:
    """Damage shard ``index``: apply ``edit`` to its rows, rewrite it, fix the manifest."""
    manifest = json.loads((root / MANIFEST_NAME).read_text())
    entry = manifest["shards"][index]
    path = root / entry["file"]
    table = pq.read_table(path)
    rows = table.to_pylist()
    edit(rows)
    pq.write_table(type(table).from_pylist(rows, schema=table.schema), path,
                   row_group_size=rows_per_group)
    entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (root / MANIFEST_NAME).write_bytes(manifest_bytes(manifest))


def random_docs(n: int, seed: int = 0, max_len: int = 40) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    return [(f"doc-{i:04d}.txt:1", bytes(rng.randrange(32, 127) for _ in range(rng.randrange(
        0, max_len)))) for i in range(n)]


def edit_manifest(root: Path, edit: Any) -> None:
    manifest = json.loads((root / MANIFEST_NAME).read_text())
    edit(manifest)
    (root / MANIFEST_NAME).write_bytes(manifest_bytes(manifest))


def check_window(w: dict, row: dict, index: int) -> None:
    assert w["tokens"].dtype == np.int32 and w["tokens"].tolist() == row["tokens"]
    assert len(w["tokens"]) == w["length"] + 1
    for key in ("start", "length", "loss_start", "doc_id", "doc_key", "window_index",
                "doc_tokens"):
        assert w[key] == row[key], key
    assert w["index"] == index


