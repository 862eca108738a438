"""`transforms.inputs.chunk_plan`: the launcher's chunks are the workers' chunks, numbered the same,
and their order fills the runner's partitions evenly."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.inputs.chunk_plan import (
    NamedFile,
    balance,
    chunk_weight,
    name_files,
    number_counted,
    plan_files,
)
from transforms.inputs.chunks import Chunk, count_lines, number_chunks, open_local, plan_chunks
from transforms.params import ReadSpec

LINES = [json.dumps({"text": f"line {i} " + "x" * (i % 13)}) for i in range(40)]


def test_names_as_the_workers_name_them():
    matched = [
        (0, "c/en/a.jsonl", 5, 1.0), (0, "c/en/b.jsonl", 6, 2.0),
        (1, "c/zh/a.jsonl", 7, 3.0),  # shares en's relative name: both disambiguated
        (2, "c/en/b.jsonl", 6, 2.0),  # b.jsonl again, by a later pattern: read as pattern 0's
    ]
    files = name_files(matched, ["c/en/*", "c/zh/*", "c/en/b.jsonl"])
    assert files == [
        NamedFile(path="c/en/a.jsonl", index=0, rel="en/a.jsonl", size=5, mtime=1.0),
        NamedFile(path="c/zh/a.jsonl", index=1, rel="zh/a.jsonl", size=7, mtime=3.0),
        NamedFile(path="c/en/b.jsonl", index=0, rel="b.jsonl", size=6, mtime=2.0),
    ]


def _parquet(path, groups):
    table = pa.table({"text": [f"row {i}" for i in range(groups * 3)]})
    pq.write_table(table, path, row_group_size=3)


def test_plan_files_is_plan_chunks_file_by_file_with_footers_in_parallel(tmp_path):
    (tmp_path / "big.jsonl").write_text("\n".join(LINES) + "\n")
    (tmp_path / "small.txt").write_text("one document")
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(b'{"text": "z"}\n' * 50, mtime=0))
    for i in range(5):
        _parquet(tmp_path / f"p{i}.parquet", groups=4 + i)
    files = [NamedFile(path=str(p), index=0, rel=p.name, size=p.stat().st_size, mtime=None)
             for p in sorted(tmp_path.iterdir())]
    want = [c for f in files for c in plan_chunks(f.path, rel=f.rel, size=f.size,
                                                  spec=ReadSpec(), open_file=open_local,
                                                  chunk_bytes=100)]
    got = plan_files(files, spec=ReadSpec(), open_file=open_local, chunk_bytes=100, threads=3)
    assert got == want
    assert sum(c.fmt == "parquet" for c in got) > 5  # row groups cut into several chunks
    assert [c.rel for c in got if c.fmt == "jsonl" and c.compression is None][:3] == [
        "big.jsonl"] * 3


def test_a_bad_footer_names_the_file(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    files = [NamedFile(path=str(tmp_path / "bad.parquet"), index=0, rel="bad.parquet",
                       size=15, mtime=None)]
    with pytest.raises(OSError, match=r"cannot read input file .*bad.parquet"):
        plan_files(files, spec=ReadSpec(), open_file=open_local)


def test_numbered_from_counts_as_number_chunks_numbers_them(tmp_path):
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text("\n".join(LINES[: 30 if name == "a.jsonl" else 25]) + "\n")
    files = [NamedFile(path=str(tmp_path / n), index=0, rel=n,
                       size=(tmp_path / n).stat().st_size, mtime=None)
             for n in ("a.jsonl", "b.jsonl")]
    chunks = plan_files(files, spec=ReadSpec(), open_file=open_local, chunk_bytes=64)
    counts = {(c.path, c.start): count_lines(c, open_local) for c in chunks}
    numbered = number_counted(chunks[::-1], counts)[::-1]  # any order in, order kept
    want = []
    for f in files:
        mine = [c for c in chunks if c.path == f.path]
        want += list(number_chunks((c, counts[(c.path, c.start)]) for c in mine))
    assert numbered == want
    assert [c.first for c in numbered if c.rel == "b.jsonl"][0] == 1
    with pytest.raises(ValueError, match=r"no line count for .*a.jsonl@64"):
        number_counted(chunks, {k: v for k, v in counts.items() if k[1] != 64})


def _chunk(i: int, nbytes: int) -> Chunk:
    return Chunk(path=f"f{i}", rel=f"f{i}", fmt="jsonl", compression=None, start=0,
                 end=nbytes, first=1, size=nbytes, extent=nbytes)


def test_balance_deals_the_largest_first():
    chunks = [_chunk(i, n) for i, n in enumerate([900, 10, 10, 800, 10, 10, 700, 10])]
    got = balance(chunks, 3)  # slices of 3, 3, 2
    slices = [got[0:3], got[3:6], got[6:8]]
    assert [sorted(chunk_weight(c) for c in s) for s in slices] == [
        [10, 10, 900], [10, 10, 800], [10, 700]]
    assert sorted(got, key=lambda c: c.path) == sorted(chunks, key=lambda c: c.path)
    assert balance(chunks, 8) == chunks  # one partition: nothing to move


@settings(max_examples=200, deadline=None)
@given(weights=st.lists(st.integers(0, 10_000), min_size=1, max_size=60),
       size=st.integers(1, 20))
def test_balance_keeps_every_chunk_and_bounds_each_slice(weights, size):
    chunks = [_chunk(i, w) for i, w in enumerate(weights)]
    got = balance(chunks, size)
    assert sorted(c.path for c in got) == sorted(c.path for c in chunks)
    slices = [got[i : i + size] for i in range(0, len(got), size)]
    loads = [sum(chunk_weight(c) for c in s) for s in slices]
    # Greedy by size: no slice exceeds the lightest by more than the largest chunk, unless
    # it is full while the lightest is not (room forces the deal).
    if len(slices) > 1 and all(len(s) == size for s in slices):
        assert max(loads) - min(loads) <= max(weights)


def test_weights_of_each_kind():
    gz = Chunk(path="a.gz", rel="a.gz", fmt="jsonl", compression="gzip", start=0, end=100,
               first=1, size=100, extent=100)
    pqc = Chunk(path="p.parquet", rel="p.parquet", fmt="parquet", compression=None, start=2,
                end=5, first=6, size=1000, extent=10)
    assert (chunk_weight(gz), chunk_weight(pqc), chunk_weight(_chunk(0, 77))) == (400, 300, 77)
