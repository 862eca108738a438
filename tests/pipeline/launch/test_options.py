"""`pipeline.launch.options`: flags → validated specs, with defaults written once (in the specs)."""

from __future__ import annotations

import dataclasses
import os

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.launch.options import JobConfig, default_encode_threads, runner_name
from transforms.params import ReadSpec, WindowSpec

REQUIRED = ["--input", "c/*.jsonl", "--tokenizer", "bytes", "--output", "out/"]
CORES = os.cpu_count() or 1


def config(*extra: str) -> JobConfig:
    return JobConfig.from_options(PipelineOptions([*REQUIRED, *extra]))


def test_defaults_are_the_specs_own():
    c = config()
    assert c.read == ReadSpec()
    defaults = {f.name: f.default for f in dataclasses.fields(WindowSpec)
                if f.default is not dataclasses.MISSING}
    assert {k: getattr(c.windows, k) for k in defaults} == defaults
    assert (c.windows.window, c.windows.stride) == (512, 512)
    assert (c.output, c.tokenizer_path, c.num_shards, c.overwrite) == ("out", None, None, False)


def test_flags_reach_the_specs():
    c = config("--window", "64", "--stride", "48", "--tail", "trace_back", "--score", "new",
               "--offset", "random", "--seed", "9", "--min-tail", "3", "--text-field", "body",
               "--id-field", "uid", "--keep-empty", "--invalid-utf8", "reject",
               "--max-doc-bytes", "100", "--format", "jsonl", "--num-shards", "4",
               "--encode-threads", "3", "--overwrite")
    assert c.windows == WindowSpec(window=64, stride=48, tail="trace_back", min_tail=3,
                                   score="new", offset="random", seed=9)
    assert c.read == ReadSpec(format="jsonl", text_field="body", id_field="uid",
                              keep_empty=True, invalid_utf8="reject", max_doc_bytes=100)
    assert (c.num_shards, c.encode_threads, c.overwrite) == (4, 3, True)


@pytest.mark.parametrize(
    ("flags", "threads"),
    [
        ([], CORES),
        (["--direct_running_mode=in_memory"], CORES),
        (["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
         max(1, CORES // 2)),
        (["--runner=DirectRunner"], CORES),
        (["--runner=DataflowRunner"], 1),
        (["--runner=FlinkRunner"], 1),
        (["--runner=PortableRunner"], 1),
    ],
)
def test_encode_threads_default_does_not_oversubscribe(flags, threads):
    assert default_encode_threads(PipelineOptions(flags)) == threads
    assert config(*flags).encode_threads == threads


def test_runner_names():
    assert runner_name(PipelineOptions([])) is None
    assert runner_name(PipelineOptions(["--runner=Dataflow"])) == "dataflowrunner"
    assert runner_name(PipelineOptions(["--runner=apache_beam.runners.DirectRunner"])) == (
        "directrunner")


def test_split_and_sample_flags_become_a_split_spec():
    from transforms.plan.splits import SplitSpec

    assert config().splits == SplitSpec() and not config().splits.active
    c = config("--split", "val=0.01,test=0.02", "--split-seed", "7", "--sample", "0.5",
               "--sample-seed", "3")
    assert c.splits == SplitSpec(splits=(("val", 0.01), ("test", 0.02)), seed=7, sample=0.5,
                                 sample_seed=3)
    assert c.splits.names == ("val", "test", "train")
    with pytest.raises(ValueError, match="--sample must be a number in"):
        config("--sample", "1.5")


def test_dedup_and_decontaminate_flags():
    from transforms.dedup.duplicates import DedupSpec

    assert config().dedup == DedupSpec(mode="off") and not config().removes
    c = config("--dedup", "near", "--dedup-bands", "20", "--dedup-rows", "5",
                "--decontaminate", "a/*.jsonl", "b.txt", "--decontaminate", "c.parquet",
                "--decontaminate-ngram", "8")
    assert c.dedup == DedupSpec(mode="near", ngram=5, bands=20, rows=5)
    assert c.decontaminate == ("a/*.jsonl", "b.txt", "c.parquet")
    assert c.decontaminate_ngram == 8 and c.removes
    with pytest.raises(ValueError, match=r"--dedup-bands × --dedup-rows must be at most 1024"):
        config("--dedup", "near", "--dedup-bands", "64", "--dedup-rows", "64")
