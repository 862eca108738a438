"""Many small input files: one spill file per bundle, and the bytes of every shuffle.

A corpus of many tiny files is one chunk per file. The file shuffle spills the parcels of all
the chunks of a bundle to one file (and their rejects to one more), not a file per chunk
(docs/performance.md#many-small-files); the output is the same whichever shuffle and however
many worker processes run the job (docs/format.md#shuffle-and-shards).
"""

from __future__ import annotations

import json
import pathlib

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipeline import encode as encode_module
from pipeline.encode import EncodeChunks
from pipeline.read import SplitInputs
from pipeline.tagged import REJECTS
from tests.conftest import dir_bytes, fn_api_pipeline, run_job
from tests.job_data import context_of

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
        assert_that(out.blocks | beam.combiners.Count.Globally(), equal_to([1]),
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
