"""`pipeline.launch.context`: one frozen job context, built once by the launcher, read by every
step.

What the steps read of it is proven on real local-runner jobs: a plan, a tokenizer record and
a knob set on the context reach the steps, which compute or load none of them again.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle

import apache_beam as beam
import cloudpickle
import pytest
from apache_beam.runners.portability.fn_api_runner import fn_runner

from pipeline.graph import build_pipeline
from pipeline.launch.context import JobContext, Tuning, job_context
from tests.common.job_data import config_of, context_of
from tests.common.jobs import dir_bytes, run_job, write_jsonl
from transforms.dataset.manifest import MANIFEST_NAME, read_manifest
from transforms.json_fields import JsonObject
from transforms.plan.keys import ShardPlan


def _files(n: int) -> dict[str, tuple[int, float]]:
    return {f"/c/part-{i:06d}.jsonl": (1000 + i, 1.7e9) for i in range(n)}


def test_the_context_pickles_to_itself_and_does_not_grow_with_the_corpus():
    small = context_of("--split", "val=0.1", files=_files(3), tuning=Tuning(chunk_bytes=99))
    for dumps in (pickle.dumps, cloudpickle.dumps):
        assert pickle.loads(dumps(small)) == small
    # Every step's DoFn carries it: its size is the job's, not the corpus's.
    big = dataclasses.replace(small, plan=context_of("--split", "val=0.1",
                                                     files=_files(10_000)).plan)
    assert abs(len(pickle.dumps(big)) - len(pickle.dumps(small))) < 16
    assert len(pickle.dumps(small)) < 4096


def test_the_context_and_its_knobs_are_frozen_and_checked():
    context = context_of()
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.fingerprint = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.tuning.chunk_bytes = 1  # type: ignore[misc]
    with pytest.raises(ValueError, match="`shards_at_once` must be a positive integer, but got 0"):
        Tuning(shards_at_once=0)
    with pytest.raises(ValueError, match="`progress_interval` must be a positive number of "
                                         "seconds, but got 0"):
        Tuning(progress_interval=0)
    with pytest.raises(ValueError, match="`progress_write_every` must be a non-negative"):
        Tuning(progress_write_every=-1)


def test_the_plan_is_computed_once_from_the_launcher_s_files():
    config = config_of("--shuffle", "files")
    context = job_context(config, {"/c/a.jsonl": (200 << 20, 1.0)}, fingerprint="f" * 64,
                          tokenizer=None)
    assert context.plan == ShardPlan(num_shards=4, parts_per_shard=4)
    assert context.tmp_dir == "/o/.tmp/job" and context.spill_dir == "/o/.tmp/job/shuffle"
    assert context.splits is None and context.progress_dir is None


def _run_graph(context: JobContext, files: dict) -> JsonObject:
    with beam.Pipeline(runner=fn_runner.FnApiRunner()) as p:
        build_pipeline(p, context, expected_files=files)
    with open(f"{context.output}/{MANIFEST_NAME}", "rb") as f:
        return read_manifest(f.read()).to_json()


@pytest.fixture
def job(tmp_path):
    src = write_jsonl(tmp_path / "in" / "c.jsonl",
                      [{"id": f"d{i}", "text": f"document {i} " * (i % 7 + 1)}
                       for i in range(120)])
    files = {str(src): (src.stat().st_size, src.stat().st_mtime)}
    return src, files


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", ["runner", "files"])
def test_every_step_takes_the_context_s_plan(tmp_path, job, shuffle):
    """A plan of 3 shards on the context, where the flags alone would plan one: the encoder,
    the writers and the last step all follow the context (none plans again)."""
    src, files = job
    out = tmp_path / f"out-{shuffle}"
    context = context_of("--input", str(src), "--id-field", "id", "--output", str(out),
                         "--shuffle", shuffle, files=files)
    assert context.plan.num_shards == 1
    three = dataclasses.replace(context, plan=ShardPlan(num_shards=3, parts_per_shard=2))
    manifest = _run_graph(three, files)
    assert manifest["num_shards"] == 3
    assert sorted(p.name for p in out.glob("*.parquet")) == [
        f"part-{i:05d}-of-00003.parquet" for i in range(3)]
    assert manifest["counts"]["documents"] == 120


@pytest.mark.slow
def test_the_manifest_s_tokenizer_is_the_record_the_launcher_made(tmp_path, job):
    """The last step writes the context's tokenizer record; it loads no model of its own."""
    src, files = job
    context = context_of("--input", str(src), "--output", str(tmp_path / "o"), files=files)
    record = dataclasses.replace(context.tokenizer,
                                 extra={**context.tokenizer.extra, "noted": "at launch"})
    manifest = _run_graph(dataclasses.replace(context, tokenizer=record), files)
    assert manifest["tokenizer"] == record.to_json()
    assert manifest["tokenizer"]["noted"] == "at launch"


@pytest.mark.slow
def test_a_knob_on_the_context_reaches_the_step(tmp_path, job, caplog):
    """``chunk_bytes`` set on the context cuts the file into byte ranges, which EncodeChunks
    encodes one by one (its log says so) on the local runner; the bytes do not change."""
    src, _ = job
    size = src.stat().st_size
    args = ("--input", str(src), "--tokenizer", "bytes", "--id-field", "id", "--num-shards", "2")
    caplog.set_level(logging.DEBUG, logger="token_windows")
    run_job(tmp_path / "whole", *args)
    whole = [r for r in caplog.messages if r.startswith("encoded chunk ")]
    caplog.clear()
    run_job(tmp_path / "ranges", *args, tuning=Tuning(chunk_bytes=1000))
    ranges = sorted(r.split(":")[0] for r in caplog.messages if r.startswith("encoded chunk "))
    assert whole == [f"encoded chunk {src}@0: 120 records"]
    assert ranges == sorted(f"encoded chunk {src}@{start}" for start in range(0, size, 1000))
    assert dir_bytes(tmp_path / "whole") == dir_bytes(tmp_path / "ranges")
