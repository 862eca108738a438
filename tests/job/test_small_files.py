"""Many small input files: runs of files, one spill file per bundle, the same bytes.

Where the workers plan the chunks, a corpus of many tiny files is one chunk per file; a local
job's launcher reads each run of small files as one chunk (`pipeline.launch.chunk_plan.plan_local`),
the same files, named and numbered the same. The file shuffle spills the parcels of all the
chunks of a bundle to one file (and their rejects to one more), not a file per chunk
(docs/performance.md#many-small-files); the output is the same whichever shuffle, however
many worker processes run the job, and whoever plans the chunks
(docs/format.md#shuffle-and-shards).
"""

from __future__ import annotations

import json
import logging
import pathlib

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipeline.files import fs
from pipeline.launch import chunk_plan
from pipeline.steps import encode as encode_module
from pipeline.steps.encode import EncodeChunks
from pipeline.steps.read import SplitInputs, _as_chunk, _as_row
from pipeline.steps.tagged import REJECTS
from tests.common.job_data import config_of, context_of
from tests.common.jobs import dir_bytes, fn_api_pipeline, run_job

FILES = 40


def _tiny_files(directory: pathlib.Path, n: int = FILES) -> pathlib.Path:
    """``n`` files of two or three short documents each; every fourth has a broken line."""
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        lines = [json.dumps({"id": f"d{i}-{j}", "text": f"tiny file {i} line {j} " * (1 + j)})
                 for j in range(2 + i % 2)]
        if i % 4 == 1:
            lines.insert(1, '{"id": "broken", "text": "unterminated')
        (directory / f"f{i:03d}.jsonl").write_text("\n".join(lines) + "\n")
    return directory


@pytest.mark.slow
def test_a_bundle_of_many_chunks_spills_to_one_file_and_one_rejects_file(tmp_path):
    """The in-process runner runs the encoding of all 40 chunks as one bundle: one spill file
    (its path emitted once) and one rejects file, which hold every chunk's parcels and runs."""
    inputs = _tiny_files(tmp_path / "in")
    context = context_of("--input", str(inputs / "*.jsonl"), "--id-field", "id",
                         "--window", "8", "--stride", "4", "--num-shards", "2",
                         "--shuffle", "files", "--output", str(tmp_path / "out"),
                         tmp_dir=str(tmp_path / "out" / ".tmp" / "job"))
    spill_dir = pathlib.Path(context.spill_dir)
    with fn_api_pipeline() as p:
        chunks = p | SplitInputs([str(inputs / "*.jsonl")], spec=context.config.read)
        out = chunks | EncodeChunks(context)
        assert_that(out.parcels | beam.combiners.Count.Globally(), equal_to([1]),
                    label="OnePath")
        assert_that(out[REJECTS] | beam.Map(lambda run: (run.order[0].rsplit("/", 1)[-1],
                                                         run.count)),
                    equal_to([(f"f{i:03d}.jsonl", 1) for i in range(1, FILES, 4)]),
                    label="OneRunPerChunkWithRejects")
    assert sorted(p.suffix for p in spill_dir.iterdir()) == [".rejects", ".spill"]


@pytest.mark.slow
def test_many_small_files_give_the_same_bytes_with_every_shuffle_and_worker_count(
        tmp_path, monkeypatch):
    """Runner shuffle, file shuffle in one process (one spill file and one rejects file, not
    one per input file) and with two worker processes: the same bytes, rejects included."""
    inputs = _tiny_files(tmp_path / "in")
    args = ["--input", str(inputs / "*.jsonl"), "--tokenizer", "bytes", "--id-field", "id",
            "--window", "16", "--stride", "12", "--num-shards", "3"]
    runner = run_job(tmp_path / "runner", *args, "--shuffle", "runner")
    assert runner["counts"]["skipped"] == {"malformed_json": FILES // 4}
    created: list[str] = []
    real_create = encode_module.fs.create

    def create(path: str, *, root: str):
        created.append(path)
        return real_create(path, root=root)

    monkeypatch.setattr(encode_module.fs, "create", create)
    run_job(tmp_path / "files", *args, "--shuffle", "files")
    assert sorted(pathlib.PurePath(p).suffix for p in created) == [".rejects", ".spill"]
    monkeypatch.undo()
    run_job(tmp_path / "two", *args, "--shuffle", "files",
            "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    want = dir_bytes(tmp_path / "runner")
    assert dir_bytes(tmp_path / "files") == want
    assert dir_bytes(tmp_path / "two") == want


def test_the_local_launcher_plans_the_chunks_the_workers_plan_in_runs(tmp_path):
    """`plan_local`: the 40 tiny files as one run, a big file's byte ranges numbered by the
    lines counted at launch; its files are the chunks the graph plans when the workers match
    the patterns, and a run crosses the graph as a row and back unchanged."""
    inputs = _tiny_files(tmp_path / "in")
    big = tmp_path / "in" / "zz-big.jsonl"
    big.write_text("".join(json.dumps({"id": f"b{i}", "text": "x" * i}) + "\n"
                           for i in range(300)))
    pattern = str(inputs / "*.jsonl")
    config = config_of("--input", pattern, "--id-field", "id")
    matched = [(0, m.path, m.size, m.mtime) for m in fs.match_files(pattern)]
    planned = chunk_plan.plan_local(config, matched, chunk_bytes=10_000)
    data = big.read_bytes()
    starts = range(0, len(data), 10_000)
    assert [len(c.files) for c in planned] == [FILES] + [0] * len(starts)
    assert [(c.start, c.first) for c in planned[1:]] == [
        (a, 2 + data.count(b"\n", 0, a - 1) if a else 1) for a in starts]  # lines before a
    assert _as_chunk(_as_row(planned[0])) == planned[0]
    with fn_api_pipeline() as p:
        chunks = p | SplitInputs([pattern], spec=config.read, chunk_bytes=10_000)
        assert_that(chunks, equal_to([f for c in planned for f in (c.files or (c,))]))


@pytest.mark.slow
def test_a_local_job_encodes_a_run_of_files_as_one_chunk_and_writes_the_same_bytes(
        tmp_path, monkeypatch, caplog):
    """40 tiny files: one chunk encoded (40 where each file is its own chunk), the bytes
    the same."""
    inputs = _tiny_files(tmp_path / "in")
    args = ["--input", str(inputs / "*.jsonl"), "--tokenizer", "bytes", "--id-field", "id",
            "--window", "16", "--stride", "12", "--num-shards", "3"]
    caplog.set_level(logging.DEBUG, logger="token_windows")

    def encoded() -> int:
        n = sum(m.startswith("encoded chunk ") for m in caplog.messages)
        caplog.clear()
        return n

    run_job(tmp_path / "runs", *args)
    assert encoded() == 1
    monkeypatch.setattr(chunk_plan, "group_files", list)  # each file its own chunk
    run_job(tmp_path / "files", *args)
    assert encoded() == FILES
    assert dir_bytes(tmp_path / "runs") == dir_bytes(tmp_path / "files")
