"""`pipeline.launch.chunk_plan`: on Dask the launcher plans the chunks, picks the partitions, and
the job it launches writes what the patterns' job writes (checked on a real cluster in
tests/job/test_runners.py)."""

from __future__ import annotations

import json

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.launch import chunk_plan
from pipeline.launch.options import JobConfig
from pipeline.steps.read import SplitInputs
from tests.common.jobs import fn_api_pipeline

pytest.importorskip("distributed", reason="the Dask options need apache-beam[dask]")


def _options(*flags: str) -> PipelineOptions:
    import apache_beam.runners.dask.dask_runner  # noqa: F401 (registers DaskOptions)

    return PipelineOptions(["--runner=DaskRunner", *flags])


@pytest.mark.parametrize(("n", "flags", "size", "npartitions"), [
    (12, [], 1, 12),  # no flag: one partition per chunk
    (1000, [], 7, 128),  # … up to 128 (dask.bag: floor(1000 / 128))
    (12, ["--dask_npartitions=4"], 3, 4),
    (10, ["--dask_npartitions=4"], 3, 4),  # dask.bag: ceil(10 / 4) up to 100 elements
    (12, ["--dask_partition_size=5"], 5, None),
])
def test_partition_size_as_dask_cuts_the_create(n, flags, size, npartitions):
    from apache_beam.runners.dask.dask_runner import DaskOptions

    options = _options(*flags)
    assert chunk_plan.partition_size(n, options) == size
    assert options.view_as(DaskOptions).npartitions == npartitions


def test_only_dask_plans_at_launch():
    assert chunk_plan.plans_chunks(_options())
    assert not chunk_plan.plans_chunks(PipelineOptions([]))
    assert not chunk_plan.plans_chunks(PipelineOptions(["--runner=DataflowRunner"]))


@pytest.mark.slow
def test_the_launcher_s_chunks_read_as_the_workers_chunks(tmp_path):
    """Planned at launch (a byte range counted by a job of its own), they are the chunks the
    patterns give on the workers; ordered for 3 partitions."""
    from pipeline.files import fs

    lines = [json.dumps({"text": f"doc {i} " + "y" * (i % 17)}) for i in range(60)]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "big.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "in" / "small.jsonl").write_text("\n".join(lines[:3]) + "\n")
    (tmp_path / "tmp").mkdir()
    pattern = str(tmp_path / "in" / "*.jsonl")
    config = JobConfig.from_options(PipelineOptions(
        ["--input", pattern, "--tokenizer", "bytes", "--output", str(tmp_path / "out")]))
    matched = [(0, p, s, m) for p, s, m in fs.match_files(pattern)]
    planned = chunk_plan.plan_at_launch(config, matched, chunk_bytes=200)
    assert sum(c.first is None for c in planned) > 3
    chunks = chunk_plan.prepare_chunks(planned, _options("--dask_npartitions=3"),
                                   tmp_dir=str(tmp_path / "tmp"), root=str(tmp_path),
                                   pipeline=fn_api_pipeline)
    assert all(c.first is not None for c in chunks)
    from apache_beam.testing.util import assert_that, equal_to

    with fn_api_pipeline() as p:
        workers = p | "ByPatterns" >> SplitInputs([pattern], spec=config.read, chunk_bytes=200)
        assert_that(workers, equal_to(chunks))
