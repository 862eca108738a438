"""`pipeline.graph`: which step feeds which, and the shard plan computed once at launch.

The graphs are built and not run: what they compute is proven end to end in
tests/job/test_pipeline.py; here, which steps each shuffle wires and what plan the steps get.
"""

from __future__ import annotations

import apache_beam as beam
import pytest

from pipeline.graph import build_pipeline
from pipeline.launch.context import Tuning
from tests.common.job_data import context_of
from transforms.plan.keys import ShardPlan

FILES = {"/c/a.jsonl": (200 << 20, 1.0)}  # 200 MiB matched at launch
PART_TEXT_BYTES = Tuning().part_text_bytes


def plan(*extra: str, files: dict | None = FILES) -> ShardPlan:
    """The shard plan of the job's context (`pipeline.launch.context.job_context`)."""
    return context_of(*extra, files=files).plan


def steps(*extra: str) -> list[str]:
    """The top-level step labels of the job's graph."""
    p = beam.Pipeline()
    build_pipeline(p, context_of(*extra, files=FILES, tmp_dir="/o/.tmp/a"),
                   expected_files=FILES)
    return sorted(label for label in p.applied_labels if "/" not in label)


@pytest.mark.parametrize(("shuffle", "want"), [
    ("runner", ["AllRejects", "EncodeChunks", "FinalizeDataset", "ShuffleDocuments",
                "SplitInputs", "WriteRejects", "WriteShards"]),
    # The file shuffle needs no GroupByKey of the blocks: the writers read the spill files.
    ("files", ["AllRejects", "EncodeChunks", "FinalizeDataset", "SplitInputs", "WriteRejects",
               "WriteShards"]),
])
def test_each_shuffle_wires_its_steps(shuffle, want):
    assert steps("--shuffle", shuffle) == want


def test_splits_and_samples_add_no_step():
    assert steps("--split", "val=0.1", "--sample", "0.5", "--shuffle", "runner") == steps(
        "--shuffle", "runner")


def test_the_plan_comes_from_the_launcher_s_sizes():
    # One shard per 64 MiB of input; with the file shuffle, parts of 16 MiB of text each.
    assert plan("--shuffle", "files") == ShardPlan(num_shards=4, parts_per_shard=4)
    assert plan("--shuffle", "runner") == ShardPlan(num_shards=4)
    assert plan("--shuffle", "files", "--num-shards", "2") == (
        ShardPlan(num_shards=2, parts_per_shard=(100 << 20) // PART_TEXT_BYTES + 1))  # 7
    # A compressed file is taken to hold 4× its size in text: 200 MiB of text, one shard.
    assert plan("--shuffle", "files", files={"/c/a.jsonl.gz": 50 << 20}) == (
        ShardPlan(num_shards=1, parts_per_shard=13))
    # A dry run's graph is planned as if there were no input.
    assert plan("--shuffle", "files", files=None) == ShardPlan(num_shards=1)
    # Smaller parts (a knob, `Tuning.part_text_bytes`) only cut the shards finer.
    assert context_of("--shuffle", "files", files=FILES,
                      tuning=Tuning(part_text_bytes=1 << 20)).plan == ShardPlan(
        num_shards=4, parts_per_shard=50)


def test_a_split_job_s_plan_numbers_every_split_in_one_range():
    got = plan("--split", "val=0.25", "--shuffle", "runner")
    assert got.splits == (("val", 1), ("train", 3)) and got.num_shards == 4
    assert [got.locate(i) for i in range(4)] == [("val", 0, 1), ("train", 0, 3),
                                                  ("train", 1, 3), ("train", 2, 3)]


def _step_labels(*, spread_chunks: bool) -> list[str]:
    """SplitInputs' and EncodeChunks' step labels in a graph started from two launched chunks."""
    from transforms.inputs.chunks import Chunk

    chunks = [Chunk(path=f"/c/{name}.jsonl", rel=f"{name}.jsonl", fmt="jsonl", compression=None,
                    start=0, end=100, first=1, size=100, extent=100) for name in ("a", "b")]
    p = beam.Pipeline()
    build_pipeline(p, context_of(files=FILES, tmp_dir="/o/.tmp/a"), expected_files=FILES,
                   chunks=chunks, spread_chunks=spread_chunks)
    return sorted(label for label in p.applied_labels
                  if label.startswith("SplitInputs/") and label.count("/") == 1)


def test_one_worker_s_chunks_come_out_of_one_step():
    # Spread over workers: a Create (which Beam's DaskRunner partitions and the local
    # runner's multi_processing mode reshuffles), then each row parsed back into a Chunk.
    assert _step_labels(spread_chunks=True) == ["SplitInputs/AsChunks", "SplitInputs/Chunks"]
    # One worker (the local runner in_memory): one element becomes the chunks, in the step
    # fused with their encoding; no Create, no Reshuffle.
    assert _step_labels(spread_chunks=False) == ["SplitInputs/AsChunks", "SplitInputs/Start"]
