"""`pipeline.steps.read` on the FnApiRunner: patterns → chunks, each file once; the shard plan.

What a chunk reads is tested without Beam in tests/transforms/inputs/test_chunks.py; here, what only
the PTransforms do: match on the workers, read a file matched by several patterns once, number
the chunks of a split file, and count the shards from the input sizes.
"""

from __future__ import annotations

import gzip
import json

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipeline.steps.read import SplitInputs, plan_for_files
from tests.common.jobs import fn_api_pipeline
from transforms.params import ReadSpec
from transforms.plan.keys import ShardPlan

LINES = [json.dumps({"text": f"line {i} " + "x" * (i % 13)}) for i in range(40)]


def summary(chunk):
    return chunk.rel, chunk.start, chunk.end, chunk.first


@pytest.mark.slow
def test_each_file_once_with_its_first_pattern_s_relative_name(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "one.txt").write_text("first")
    (tmp_path / "a" / "b" / "two.txt").write_text("second\nfile")
    with fn_api_pipeline() as p:
        chunks = p | SplitInputs([str(tmp_path / "a" / "*.txt"), str(tmp_path / "a" / "**"),
                                  str(tmp_path / "a" / "b" / "two.txt")], spec=ReadSpec())
        assert_that(chunks | beam.Map(summary),
                    equal_to([("one.txt", 0, 5, 1), ("b/two.txt", 0, 11, 1)]))


@pytest.mark.slow
def test_from_the_launcher_s_chunks_the_same_chunks_as_from_the_patterns(tmp_path):
    """What the DaskRunner gets (the launcher's chunks, numbered by a count job) names,
    splits and numbers every file as matching on the workers does: a file of several patterns
    once, clashing names disambiguated, byte ranges with their first lines."""
    from pipeline.files import fs
    from pipeline.steps.read import count_chunk_lines
    from transforms.inputs.chunk_plan import name_files, plan_files

    for d in ("en", "zh"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "part-0.jsonl").write_text("\n".join(LINES[:5]) + "\n")
    (tmp_path / "en" / "big.jsonl").write_text("\n".join(LINES) + "\n")
    patterns = [str(tmp_path / "en" / "*"), str(tmp_path / "zh" / "*"),
                str(tmp_path / "en" / "big.jsonl")]
    matched = [(i, path, size, mtime) for i, pattern in enumerate(patterns)
               for path, size, mtime in fs.match_files(pattern)]
    assert len(matched) == 4  # big.jsonl twice
    planned = plan_files(name_files(matched, patterns), spec=ReadSpec(), open_file=fs.open_raw,
                         chunk_bytes=100)
    (tmp_path / "tmp").mkdir()
    launched = count_chunk_lines(planned, pipeline=fn_api_pipeline,
                                 tmp_dir=str(tmp_path / "tmp"), root=str(tmp_path))
    # Lines 1 … k begin in [0, 100) (one at 0, one after each newline before byte 99).
    k = 1 + (tmp_path / "en" / "big.jsonl").read_bytes()[:99].count(b"\n")
    assert [c.first for c in launched if c.rel == "big.jsonl"][:2] == [1, k + 1]
    assert not list((tmp_path / "tmp").iterdir())  # the counts file is removed
    want = []
    for rel, path in (("big.jsonl", "en/big.jsonl"), ("en/part-0.jsonl", "en/part-0.jsonl"),
                      ("zh/part-0.jsonl", "zh/part-0.jsonl")):
        size = (tmp_path / path).stat().st_size
        want += [(rel, start, min(start + 100, size)) for start in range(0, size, 100)]
    assert sorted((c.rel, c.start, c.end) for c in launched) == sorted(want)
    with fn_api_pipeline() as p:
        by_patterns = (p | "ByPatterns" >> SplitInputs(patterns, spec=ReadSpec(),
                                                       chunk_bytes=100)
                       | "Everything" >> beam.Map(lambda c: c))
        assert_that(by_patterns, equal_to(launched), label="CheckPatterns")
        by_chunks = p | "ByChunks" >> SplitInputs(patterns, spec=ReadSpec(), chunks=launched)
        assert_that(by_chunks, equal_to(launched), label="CheckChunks")
        one_step = p | "InOneStep" >> SplitInputs(patterns, spec=ReadSpec(), chunks=launched,
                                                  spread=False)
        assert_that(one_step, equal_to(launched), label="CheckOneStep")


def test_unnumbered_chunks_are_refused(tmp_path):
    import pytest

    from transforms.inputs.chunk_plan import NamedFile, plan_files

    (tmp_path / "big.jsonl").write_text("\n".join(LINES) + "\n")
    size = (tmp_path / "big.jsonl").stat().st_size
    chunks = plan_files([NamedFile(path=str(tmp_path / "big.jsonl"), index=0, rel="big.jsonl",
                                   size=size, mtime=None)], spec=ReadSpec(),
                        open_file=open, chunk_bytes=100)
    with pytest.raises(ValueError, match=r"big.jsonl@0 has no first line"):
        SplitInputs([str(tmp_path / "big.jsonl")], spec=ReadSpec(), chunks=chunks)


@pytest.mark.slow
def test_a_split_file_s_chunks_are_numbered_by_their_first_line(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    data = path.read_bytes()
    want, line = [], 1
    for start in range(0, len(data), 100):
        want.append(("big.jsonl", start, min(start + 100, len(data)), line))
        # Lines that begin in [start, start + 100): after a newline before the range's end.
        line += sum(1 for i in range(max(start, 1), min(start + 100, len(data)))
                    if data[i - 1] == 10) + (start == 0)
    with fn_api_pipeline() as p:
        chunks = p | SplitInputs([str(path)], spec=ReadSpec(), chunk_bytes=100)
        assert_that(chunks | beam.Map(summary), equal_to(want))


@pytest.mark.slow
def test_shard_plan_from_input_sizes_counts_each_file_once(tmp_path):
    (tmp_path / "a.jsonl").write_text("\n".join(LINES) + "\n")  # split into chunks
    (tmp_path / "b.txt").write_text("x" * 120)
    (tmp_path / "c.txt.gz").write_bytes(gzip.compress(b"y" * 500, mtime=0))
    gz = (tmp_path / "c.txt.gz").stat().st_size
    size = (tmp_path / "a.jsonl").stat().st_size + 120 + gz
    text = size - gz + 4 * gz  # a compressed file is taken to hold 4 times its size
    with fn_api_pipeline() as p:
        chunks = p | SplitInputs([str(tmp_path / "*")], spec=ReadSpec(), chunk_bytes=64)
        assert_that(chunks | "Chunks" >> beam.combiners.Count.Globally(),
                    equal_to([(size - 120 - gz + 63) // 64 + 2]), label="CheckChunks")
    files = {str(f): (f.stat().st_size, None) for f in tmp_path.iterdir()}
    assert plan_for_files(files, num_shards=None, shard_bytes=100) == ShardPlan(
        num_shards=-(-size // 100))
    assert plan_for_files(files, num_shards=7, shard_bytes=100) == ShardPlan(num_shards=7)
    assert plan_for_files(files, num_shards=2, part_bytes=50) == ShardPlan(
        num_shards=2, parts_per_shard=-(-text // 2 // 50))
    # {path: size} as well; a dry run (no files matched) plans as if there were no input.
    assert plan_for_files({p: s for p, (s, _) in files.items()}, num_shards=None,
                          shard_bytes=100) == ShardPlan(num_shards=-(-size // 100))
    assert plan_for_files(None, num_shards=None) == ShardPlan(num_shards=1)
