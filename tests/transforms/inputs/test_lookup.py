"""`transforms.inputs.lookup`: records read back by their source, streaming each file once."""

from __future__ import annotations

import bz2
import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from transforms.inputs.chunks import open_local
from transforms.inputs.lookup import read_records
from transforms.params import ReadSpec

LINES = [json.dumps({"id": f"x{i}", "text": f"line {i} é"}) for i in range(1, 40)]
BODY = ("\n".join(LINES) + "\r\n").encode()


@pytest.mark.parametrize(("name", "compress"), [
    ("a.jsonl", lambda b: b), ("a.jsonl.gz", lambda b: gzip.compress(b, mtime=0)),
    ("a.jsonl.bz2", bz2.compress), ("a.jsonl.zst", zstandard.ZstdCompressor().compress),
])
def test_lines_of_plain_and_compressed_files(tmp_path, name, compress):
    path = tmp_path / name
    path.write_bytes(compress(BODY))
    sources = [f"{path}:{n}" for n in (39, 2, 17, 40)]  # 40 is past the end
    assert read_records(sources, spec=ReadSpec(), open_file=open_local) == {
        f"{path}:{n}": LINES[n - 1] for n in (2, 17, 39)}


def test_parquet_rows_and_whole_text_files(tmp_path):
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"body": [f"doc {i}" for i in range(30)]}), path, row_group_size=7)
    text = tmp_path / "t.txt"
    text.write_text("a whole\nfile")
    got = read_records([f"{path}#row=0", f"{path}#row=15", f"{path}#row=29", str(text)],
                       spec=ReadSpec(text_field="body"), open_file=open_local)
    assert got == {f"{path}#row=0": "doc 0", f"{path}#row=15": "doc 15",
                   f"{path}#row=29": "doc 29", str(text): "a whole\nfile"}
