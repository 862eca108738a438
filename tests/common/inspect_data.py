"""Datasets for the tests of `reader.inspect` and `reader.tools.check`: byte-token documents
written by `transforms.testing.write_dataset`, and a forger's edit of a shard's rows."""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.dataset.manifest import MANIFEST_NAME
from transforms.dataset.schema import ARROW_SCHEMA
from transforms.params import WindowSpec
from transforms.testing import write_dataset
from transforms.tokenize.tokenizers import ByteTokenizer

TEXTS = ["abcde", "abcd", "x", "The grapes are sour, and not ripe.", "道可道，非常道。" * 3,
         "Slow but steady wins the race. " * 4, "ab"]
# (window, stride, tail, min_tail, score, offset): every family of docs/format.md#the-planner.
FAMILIES = [
    (4, 4, "keep", 1, "all", "zero"),
    (4, 2, "keep", 1, "new", "zero"),
    (4, 2, "drop", 1, "all", "zero"),
    (4, 2, "trace_back", 1, "new", "zero"),
    (4, 6, "keep", 1, "all", "zero"),
    (4, 6, "trace_back", 1, "new", "random"),
    (5, 3, "keep", 3, "all", "random"),
    (5, 3, "trace_back", 1, "new", "random"),
    (4, 4, "drop", 1, "new", "random"),
    (8, 3, "drop", 1, "all", "zero"),
    (1, 1, "keep", 1, "all", "zero"),
    (7, 7, "keep", 7, "new", "zero"),
]


def spec_of(family) -> WindowSpec:
    w, s, tail, min_tail, score, offset = family
    return WindowSpec(window=w, stride=s, tail=tail, min_tail=min_tail, score=score,
                      offset=offset, seed=3)


def bytes_dataset(root: pathlib.Path, spec: WindowSpec, num_shards: int = 2) -> dict:
    tok = ByteTokenizer()
    docs = [(f"d{i}", tok.encode(t)) for i, t in enumerate(TEXTS)]
    rng = np.random.default_rng(0)
    docs += [(f"r{i}", [256, *rng.integers(0, 256, int(n)), 257])
             for i, n in enumerate(rng.integers(0, 60, 30))]
    return write_dataset(root, docs, windows=spec, num_shards=num_shards).to_json()


def rewrite_first_shard(root: pathlib.Path, edit) -> None:
    """Apply ``edit`` to the rows of the first shard and write it back, and make the manifest
    agree with the file (its SHA-256 and counts), as a careful forger would: what is left to
    find is what only --check's recomputations can."""
    path = root / "part-00000-of-00001.parquet"
    rows = edit(pq.read_table(path).to_pylist())
    pq.write_table(pa.Table.from_pylist(rows, schema=ARROW_SCHEMA), path)
    manifest = json.loads((root / MANIFEST_NAME).read_text())
    entry = manifest["shards"][0]
    counts = {"rows": len(rows), "tokens": sum(len(r["tokens"]) for r in rows),
              "scored_targets": sum(r["length"] - r["loss_start"] for r in rows)}
    entry.update(sha256=hashlib.sha256(path.read_bytes()).hexdigest(), **counts)
    manifest["counts"].update(windows=counts["rows"], tokens=counts["tokens"],
                              scored_targets=counts["scored_targets"])
    (root / MANIFEST_NAME).write_text(json.dumps(manifest))
