"""evaluate(by_source=True) across ranks: ``torchrun --nproc_per_node 2`` (gloo) equals one
process, source by source (docs/mixtures.md)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from reader import MixedDataset, WindowDataset, collate, evaluate
from tests.common.reader_data import random_docs, write_docs

REPO = Path(__file__).resolve().parents[3]
SEQ = 16


@pytest.mark.slow
def test_two_ranks_equal_one_process_per_source(tmp_path: Path) -> None:
    for k, name in enumerate(("web", "code", "books")):
        # Small sources with short tails: some rank runs a deliberate repeat at the end of an
        # epoch (asserted below), which must not be counted in any source.
        write_docs(tmp_path / name, random_docs(7 + 3 * k, seed=k, max_len=30), window=8,
                   stride=6, score_new=True, num_shards=2)
    mixed = MixedDataset({n: WindowDataset(tmp_path / n) for n in ("web", "code", "books")})
    out = tmp_path / "dist.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                    "--master_port", "0", "--rdzv_backend", "c10d",
                    "--rdzv_endpoint", "127.0.0.1:0", str(REPO / "tests/common/dist_mixture.py"),
                    str(tmp_path), str(out), str(SEQ)],
                   cwd=REPO, env=env, check=True, timeout=300)
    ranks = json.loads(out.read_text())
    torch.manual_seed(0)
    emb = torch.nn.Embedding(mixed.vocab_size, mixed.vocab_size).double()
    one = evaluate(lambda b: emb(b["input_ids"]),
                   DataLoader(mixed, batch_size=5,
                              collate_fn=functools.partial(collate, pad_id=mixed.eos_id)),
                   distributed=False, by_source=True)
    for name in mixed.names:
        assert one["by_source"][name]["targets"] == mixed.sources[name].scored_targets
    for result in ranks:  # every rank holds the global figures
        for kind in ("plain", "packed"):
            got = result[kind]
            assert got["targets"] == one["targets"]
            assert list(got["by_source"]) == list(mixed.names)
            for name, mine in got["by_source"].items():
                ref = one["by_source"][name]
                assert mine["targets"] == ref["targets"]  # nothing twice, nothing missed
                assert abs(mine["nll"] - ref["nll"]) < 1e-9 * ref["nll"]
    repeats = [(r["plain"]["repeats"], r["packed"]["repeats"]) for r in ranks]
    assert sum(p for p, _ in repeats) + sum(q for _, q in repeats) >= 1, repeats
