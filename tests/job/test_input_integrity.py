"""Inputs that are damaged or vanish fail the job naming the input (docs/integrity.md#the-job).

A Parquet input whose page fails its CRC is a job failure naming the file, the row group and
the column, never a silently changed text; an input bucket deleted while the job runs fails
naming the input, not the spill file's upload that the failure interrupted.
"""

from __future__ import annotations

import os
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.common.inputs import damage
from tests.common.jobs import read_rows, run_main
from transforms.inputs.chunks import open_local, plan_chunks, read_chunk
from transforms.inputs.parquet import DamagedInput
from transforms.params import ReadSpec

TEXTS = [f"document {i}: " + "the quick brown fox jumps over the lazy dog " * 3
         for i in range(300)]


def _parquet(path: pathlib.Path, *, checksums: bool = True) -> pathlib.Path:
    """Three row groups of 100 rows, uncompressed (so a text's bytes can be found)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": TEXTS}), path, row_group_size=100, compression="none",
                   write_page_checksum=checksums)
    return path


def _chunks(path: pathlib.Path):
    return list(plan_chunks(str(path), rel=path.name, size=path.stat().st_size, spec=ReadSpec(),
                            open_file=open_local, chunk_bytes=1,
                            mtime=path.stat().st_mtime))


def test_a_damaged_page_is_refused_naming_the_file_row_group_and_column(tmp_path):
    path = _parquet(tmp_path / "a.parquet")
    damage(path, 150)
    chunks = _chunks(path)
    assert [(c.start, c.end, c.first) for c in chunks] == [(0, 1, 0), (1, 2, 100), (2, 3, 200)]
    assert len(list(read_chunk(chunks[0], ReadSpec(), open_local))) == 100
    with pytest.raises(DamagedInput) as e:
        list(read_chunk(chunks[1], ReadSpec(), open_local))
    assert str(e.value).startswith(
        f"input file {path} is damaged: row group 1 (rows 100 to 199), column 'text' fails "
        "its page checksum (")
    assert "restore the file from its source, or leave it out of --input" in str(e.value)
    assert len(list(read_chunk(chunks[2], ReadSpec(), open_local))) == 100


@pytest.mark.slow
def test_a_job_over_a_damaged_parquet_fails_and_writes_no_manifest(tmp_path):
    good = _parquet(tmp_path / "in" / "a.parquet")
    bad = _parquet(tmp_path / "in" / "b.parquet")
    damage(bad, 42)
    out = tmp_path / "out"
    code, err = run_main("--input", str(tmp_path / "in" / "*.parquet"), "--tokenizer", "bytes",
                      "--output", str(out))
    assert code == 1, err
    assert (f"error: the job failed: input file {bad} is damaged: row group 0 (rows 0 to 99), "
            "column 'text' fails its page checksum") in err, err
    assert not (out / "_manifest.json").exists()
    # The same job without the damaged file: every text as written.
    os.remove(bad)
    code, err = run_main("--input", str(good), "--tokenizer", "bytes", "--output", str(out))
    assert code == 0, err
    texts = sorted(bytes(r["tokens"][1:-1]).decode() for r in read_rows(out))
    assert texts == sorted(TEXTS)


def test_read_errors_of_a_store_name_the_input_while_counting_lines_too(tmp_path):
    # An object store's client error (NoSuchBucket …) names no file; both reading steps do.
    from transforms.inputs.chunks import count_lines

    path = tmp_path / "big.jsonl"
    path.write_text('{"text": "a"}\n' * 100)
    spec = ReadSpec()
    chunks = list(plan_chunks(str(path), rel="big.jsonl", size=path.stat().st_size, spec=spec,
                              open_file=open_local, chunk_bytes=512))
    assert len(chunks) == 3 and chunks[1].first is None

    def gone(_: str):
        raise RuntimeError("An error occurred (NoSuchBucket) when calling the GetObject "
                           "operation: The specified bucket does not exist")

    with pytest.raises(OSError, match=f"cannot read input file {path}: An error occurred "
                                      r"\(NoSuchBucket\)"):
        count_lines(chunks[1], gone)
    with pytest.raises(OSError, match=f"cannot read input file {path}: "):
        list(read_chunk(chunks[0], spec, gone))
