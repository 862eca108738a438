"""evaluate across ranks: ``torchrun --nproc_per_node 2`` (gloo) equals one process."""

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

from reader import EpochSampler, PackedSampler, WindowDataset, collate, evaluate
from tests.common.reader_data import random_docs, write_docs

pytestmark = pytest.mark.slow  # torchrun

REPO = Path(__file__).resolve().parents[2]
SEQ = 16


def test_two_ranks_equal_one_process_and_skip_the_repeats(tmp_path: Path) -> None:
    write_docs(tmp_path / "ds", random_docs(20, seed=0, max_len=30), window=SEQ, stride=12,
               score_new=True, num_shards=2)
    ds = WindowDataset(tmp_path / "ds")
    plain = EpochSampler(len(ds), 4, seed=2, world_size=2, rank=1)
    packed = PackedSampler(ds.lengths, 2, SEQ, seed=2, world_size=2, rank=1)
    # The data is chosen so that both samplers' last global batch is one window / one row:
    # rank 1 gets a deliberate repeat there, which must not be counted.
    assert plain.repeat_batches() == {len(plain) - 1}
    assert packed.repeat_batches() == {len(packed) - 1}
    out = tmp_path / "dist.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                    "--master_port", "0", "--rdzv_backend", "c10d",
                    "--rdzv_endpoint", "127.0.0.1:0", str(REPO / "tests/common/dist_eval.py"),
                    str(tmp_path / "ds"), str(out), str(SEQ)],
                   cwd=REPO, env=env, check=True, timeout=300)
    ranks = json.loads(out.read_text())

    sys.path.insert(0, str(REPO / "examples"))
    from train_tiny import TinyCausalLM

    torch.manual_seed(0)
    model = TinyCausalLM(ds.vocab_size, SEQ, d_model=32, n_heads=4).double().eval()

    def forward(b: dict) -> torch.Tensor:
        return model(b["input_ids"], b["position_ids"], b.get("segment_ids"))

    one = evaluate(forward, DataLoader(ds, batch_size=5,
                                       collate_fn=functools.partial(collate, pad_id=ds.eos_id)),
                   distributed=False)
    assert one["targets"] == ds.scored_targets
    for result in ranks:  # every rank holds the global figure
        for kind in ("plain", "packed"):
            got = result[kind]
            assert got["targets"] == one["targets"]  # exactly: nothing twice, nothing missed
            assert abs(got["nll"] - one["nll"]) < 1e-9 * abs(one["nll"])
    assert ranks[0]["plain"]["repeats"] == 0 and ranks[1]["plain"]["repeats"] == 1
    assert ranks[0]["packed"]["repeats"] == 0 and ranks[1]["packed"]["repeats"] == 1
