"""`transforms.inputs.chunks`: input files → chunks → records, every file read exactly once
(docs/format.md#documents).

`read_files` runs the four pure steps as the pipeline wires them (plan → count_lines →
number_chunks → read_chunk with `open_local`, then `account_inputs`), so what the job reads is
tested here without Beam: split files keep true line numbers, compressed files are read
whole, Parquet row groups keep true row numbers, and a compressed file that ends early fails
naming the file.
"""

from __future__ import annotations

import bz2
import gzip
import os
import pathlib
import re
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.common.inputs import LINES, TEXTS, read_files
from tests.common.jobs import write_jsonl
from transforms.inputs.chunks import (
    CHUNK_BYTES,
    Chunk,
    count_lines,
    detect_format,
    group_files,
    line_starts_in,
    number_chunks,
    open_local,
    plan_chunks,
    read_chunk,
)
from transforms.inputs.documents import Reject, parse_lines
from transforms.inputs.receipts import Receipt, account_inputs
from transforms.params import ReadSpec

DEFAULT = ReadSpec()


@pytest.mark.parametrize("chunk_bytes", [7, 64, 1000, 1 << 20])
def test_large_files_split_into_ranges_keep_true_line_numbers(tmp_path, chunk_bytes):
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    read = read_files([str(path)], chunk_bytes=chunk_bytes)
    assert read.docs == [(f"big.jsonl:{i + 1}", t) for i, t in enumerate(TEXTS)]
    assert (read.rejects, read.records) == ([], 200)
    size = path.stat().st_size
    assert [(c.start, c.end) for c in read.chunks] == [
        (s, min(s + chunk_bytes, size)) for s in range(0, size, chunk_bytes)]


def test_last_line_without_newline_and_blank_lines_in_ranges(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"alpha\n\nbeta\r\ngamma")
    read = read_files([str(path)], spec=ReadSpec(format="lines"), chunk_bytes=3)
    assert read.docs == [("t.txt:1", "alpha"), ("t.txt:3", "beta"), ("t.txt:4", "gamma")]
    assert read.rejects == [("empty", f"{path}:2")]
    assert read.records == 4
    assert [c.first for c in read.chunks] == [1, 2, 2, 4, 4, 5]  # lines begin at 0, 6, 7, 13


BODY = ("\n".join(LINES[:20]) + "\n").encode()
COMPRESS = {
    "gz": gzip.compress,
    "bz2": bz2.compress,
    "zst": zstandard.ZstdCompressor().compress,
}


def test_compressed_inputs(tmp_path):
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(BODY))
    (tmp_path / "b.jsonl.bz2").write_bytes(bz2.compress(BODY))
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(BODY))
    read = read_files([str(tmp_path / "*")], chunk_bytes=8)
    assert read.docs == [(f"{name}:{i + 1}", t)
                         for name in ("a.jsonl.gz", "b.jsonl.bz2", "c.jsonl.zst")
                         for i, t in enumerate(TEXTS[:20])]
    assert (read.rejects, read.records) == ([], 60)
    # A compressed file is one chunk, whatever its size.
    assert [(c.compression, c.start, c.first) for c in read.chunks] == [
        ("gzip", 0, 1), ("bzip2", 0, 1), ("zstd", 0, 1)]


@pytest.mark.parametrize("ext", sorted(COMPRESS))
def test_concatenated_streams_are_read_whole(tmp_path, ext):
    half = BODY.index(b"\n", len(BODY) // 2) + 1
    path = tmp_path / f"a.jsonl.{ext}"
    path.write_bytes(COMPRESS[ext](BODY[:half]) + COMPRESS[ext](BODY[half:]))
    read = read_files([str(path)])
    assert read.docs == [(f"a.jsonl.{ext}:{i + 1}", t) for i, t in enumerate(TEXTS[:20])]


def test_a_compressed_text_file_is_one_document(tmp_path):
    (tmp_path / "d.txt.gz").write_bytes(gzip.compress("道可道\n非常道".encode()))
    assert read_files([str(tmp_path / "d.txt.gz")]).docs == [("d.txt.gz", "道可道\n非常道")]


def gzip_cut_at_a_flush_point(data: bytes) -> bytes:
    """A gzip stream of ``data``'s first half that ends at a clean deflate block boundary, as
    a writer killed after a full flush leaves it: no final block, no trailer."""
    half = data.index(b"\n", len(data) // 2) + 1
    stream = zlib.compressobj(wbits=31)
    return stream.compress(data[:half]) + stream.flush(zlib.Z_FULL_FLUSH)


def zstd_cut_at_a_flush_point(data: bytes) -> bytes:
    half = data.index(b"\n", len(data) // 2) + 1
    stream = zstandard.ZstdCompressor().compressobj()
    return stream.compress(data[:half]) + stream.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)


def zstd_with_a_flipped_byte(data: bytes) -> bytes:
    raw = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(data))  # as the CLI
    raw[len(raw) // 2] ^= 0xFF
    return bytes(raw)


ENDED = "Compressed file ended before the end-of-stream marker was reached"
ZSTD_ENDED = "zstd stream ended before the end of its frame"


@pytest.mark.parametrize(
    ("ext", "damaged", "reason"),
    [
        ("gz", gzip.compress(BODY)[: len(gzip.compress(BODY)) // 2], ENDED),
        ("gz", gzip.compress(BODY)[:-4], ENDED),  # only the size in the trailer is missing
        ("gz", gzip_cut_at_a_flush_point(BODY), ENDED),
        ("bz2", bz2.compress(BODY)[: len(bz2.compress(BODY)) // 2], ENDED),
        ("bz2", bz2.compress(BODY)[:-1], ENDED),
        ("zst", COMPRESS["zst"](BODY)[: len(COMPRESS["zst"](BODY)) // 2], ZSTD_ENDED),
        ("zst", zstd_cut_at_a_flush_point(BODY), ZSTD_ENDED),
        ("zst", COMPRESS["zst"](BODY) + COMPRESS["zst"](BODY)[:9], ZSTD_ENDED),  # frame 2 cut
        ("zst", zstd_with_a_flipped_byte(BODY), ""),  # the codec's own error, whatever it says
        ("gz", b"not gzip at all\n", "Not a gzipped file"),
    ],
    ids=["gz-half", "gz-trailer", "gz-flush-point", "bz2-half", "bz2-last-byte", "zst-half",
         "zst-flush-point", "zst-second-frame", "zst-flipped-byte", "gz-not-gzip"],
)
def test_a_truncated_or_corrupt_compressed_file_fails_naming_it(tmp_path, ext, damaged, reason):
    path = tmp_path / f"cut.jsonl.{ext}"
    path.write_bytes(damaged)
    with pytest.raises(OSError, match=f"cannot read input file {re.escape(str(path))}: "
                                      f"{re.escape(reason)}"):
        read_files([str(path)])


def test_a_flush_point_cut_is_a_valid_prefix():
    """The flush-point cut decompresses to whole lines: only the missing end tells it apart."""
    cut = gzip_cut_at_a_flush_point(BODY)
    prefix = zlib.decompressobj(wbits=31).decompress(cut)
    assert prefix.endswith(b"\n") and BODY.startswith(prefix) and len(prefix) < len(BODY)


def test_parquet_row_groups_are_chunks_with_true_row_numbers(tmp_path):
    texts = [f"doc {i}" for i in range(50)]
    pq.write_table(pa.table({"body": texts, "key": [f"k{i}" for i in range(50)]}),
                   tmp_path / "p.parquet", row_group_size=7)
    read = read_files([str(tmp_path / "p.parquet")], spec=ReadSpec(text_field="body"),
                      chunk_bytes=1)
    assert read.docs == [(f"p.parquet:{i}", t) for i, t in enumerate(texts)]
    assert read.records == 50
    assert [(c.start, c.end, c.first, c.extent) for c in read.chunks] == [
        (g, g + 1, 7 * g, 8) for g in range(8)]
    read = read_files([str(tmp_path / "p.parquet")],
                      spec=ReadSpec(text_field="body", id_field="key"))
    assert read.docs == [(f"k{i}", t) for i, t in enumerate(texts)]
    assert (read.records, len(read.chunks)) == (50, 1)


def test_parquet_without_the_text_column_fails_naming_it(tmp_path):
    pq.write_table(pa.table({"body": ["a"]}), tmp_path / "p.parquet")
    with pytest.raises(ValueError, match=r"p.parquet has no column 'text' \(columns: body\)"):
        read_files([str(tmp_path / "p.parquet")])


def test_parquet_compressed_around_is_refused(tmp_path):
    with pytest.raises(ValueError, match="compress Parquet inside the file"):
        list(plan_chunks("/c/p.parquet.gz", rel="p.parquet.gz", size=10, spec=DEFAULT,
                         open_file=open_local))


def test_a_missing_file_fails_naming_it(tmp_path):
    chunk = Chunk(path=str(tmp_path / "gone.jsonl"), rel="gone.jsonl", fmt="jsonl",
                  compression=None, start=0, end=5, first=1, size=5, extent=5)
    with pytest.raises(OSError, match="cannot read input file .*gone.jsonl"):
        read_chunk(chunk, DEFAULT, open_local)


@pytest.mark.parametrize(
    ("name", "size", "chunk_bytes", "want"),
    [
        ("a.jsonl", 10, 10, [(0, 10, 1)]),
        ("a.jsonl", 11, 10, [(0, 10, None), (10, 11, None)]),
        ("a.jsonl", 25, 10, [(0, 10, None), (10, 20, None), (20, 25, None)]),
        ("a.jsonl", 0, 10, [(0, 0, 1)]),
        ("a.txt", 25, 10, [(0, 25, 1)]),  # one document per file: never split
        ("a.jsonl.gz", 25, 10, [(0, 25, 1)]),
        ("a.jsonl.zst", 25, 10, [(0, 25, 1)]),
    ],
)
def test_plan_chunks(name, size, chunk_bytes, want):
    chunks = list(plan_chunks(f"/c/{name}", rel=name, size=size, spec=DEFAULT,
                              open_file=_no_file, chunk_bytes=chunk_bytes))
    assert [(c.start, c.end, c.first) for c in chunks] == want
    assert {(c.path, c.rel, c.size, c.extent) for c in chunks} == {(f"/c/{name}", name, size,
                                                                     size)}


def _no_file(path):
    raise AssertionError(f"{path} was opened")


def test_count_lines_and_number_chunks(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"ab\n\ncd\nefg\n\nh")  # lines begin at 0, 3, 4, 7, 11, 12
    planned = list(plan_chunks(str(path), rel="a.jsonl", size=13, spec=DEFAULT,
                               open_file=open_local, chunk_bytes=4))
    counts = [count_lines(c, open_local) for c in planned]
    assert counts == [2, 2, 1, 1]
    numbered = list(number_chunks(list(zip(planned, counts, strict=True))[::-1]))
    assert [(c.start, c.first) for c in numbered] == [(0, 1), (4, 3), (8, 5), (12, 6)]
    assert count_lines(numbered[1], _no_file) == 0  # already numbered: nothing to count


def test_chunks_and_receipts_are_keyword_only():
    with pytest.raises(TypeError):
        Chunk("p", "r", "jsonl", None, 0, 1, 1, 1, 1)
    with pytest.raises(TypeError):
        Receipt("a", 10, 10, 0, 4, 3)
    chunk = Chunk(path="p", rel="r", fmt="jsonl", compression=None, start=2, end=5, first=3,
                  size=9, extent=9)
    assert chunk.receipt(4) == Receipt(path="p", size=9, extent=9, start=2, end=5, records=4)


@settings(max_examples=80, deadline=None)
@given(
    lines=st.lists(st.sampled_from(["", " ", "a", "bc", "長", "x\r", "{\"t\": 1}"]), max_size=12),
    newline_at_end=st.booleans(),
    chunk_bytes=st.integers(1, 40),
)
def test_any_chunk_size_reads_every_line_once_with_its_number(tmp_path_factory, lines,
                                                              newline_at_end, chunk_bytes):
    data = "\n".join(lines).encode() + (b"\n" if newline_at_end and lines else b"")
    path = tmp_path_factory.mktemp("split") / "f.txt"
    path.write_bytes(data)
    spec = ReadSpec(format="lines")
    whole = list(parse_lines(data, fmt="lines", path=str(path), rel="f.txt", first_line=1,
                             spec=spec))
    read = read_files([str(path)], spec=spec, chunk_bytes=chunk_bytes)
    assert read.items == whole
    assert read.records == len(whole)


@pytest.mark.parametrize(
    ("path", "forced", "expected"),
    [
        ("a.jsonl", None, ("jsonl", None)),
        ("a.jsonl.gz", None, ("jsonl", "gzip")),
        ("a.txt.zst", None, ("text", "zstd")),
        ("a.parquet", None, ("parquet", None)),
        ("a.txt.bz2", "lines", ("lines", "bzip2")),
        ("A.NDJSON", None, ("jsonl", None)),
        ("notes.md", None, ("text", None)),
    ],
)
def test_detect_format(path, forced, expected):
    assert detect_format(path, forced) == expected


@pytest.mark.parametrize("path", ["/c/data.csv", "/c.d/data", "/c/data.gz"])
def test_unknown_extension_needs_format(path):
    with pytest.raises(ValueError, match="pass --format"):
        detect_format(path, None)


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 100])
def test_line_starts_counted_per_range_add_up(chunk):
    data = b"ab\n\ncd\nefg\n\nh"
    size = len(data)
    total = 0
    for start in range(0, size, chunk):
        end = min(start + chunk, size)
        total += line_starts_in(data[max(start - 1, 0) : end], start, end)
    assert total == 6
    assert line_starts_in(b"x\n", 0, 2) == 1


# -- inputs that end early or change while the job reads them ----------------------------

def items(path: pathlib.Path, spec: ReadSpec = DEFAULT) -> list:
    (chunk,) = plan_chunks(str(path), rel=path.name, size=path.stat().st_size, spec=spec,
                           open_file=open_local, mtime=path.stat().st_mtime)
    return list(read_chunk(chunk, spec, open_local))


def _planned(path: pathlib.Path, chunk_bytes: int) -> list[Chunk]:
    return list(plan_chunks(str(path), rel=path.name, size=path.stat().st_size, spec=DEFAULT,
                            open_file=open_local, chunk_bytes=chunk_bytes,
                            mtime=path.stat().st_mtime))


def test_input_truncated_while_the_job_runs_fails_naming_it(tmp_path):
    path = write_jsonl(tmp_path / "big.jsonl", [{"text": f"t{i}"} for i in range(300)])
    chunks = _planned(path, 1000)
    os.truncate(path, path.stat().st_size * 2 // 3)  # after planning, before reading
    with pytest.raises(OSError, match=r"input file .*big.jsonl changed while the job ran"):
        for c in chunks:
            list(read_chunk(c, DEFAULT, open_local))


def test_text_file_appended_to_while_the_job_runs_fails(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("first")
    (chunk,) = _planned(path, 1 << 20)
    with path.open("a") as f:
        f.write(" and more")
    with pytest.raises(OSError, match=r"a.txt changed while the job ran"):
        list(read_chunk(chunk, DEFAULT, open_local))


def test_utf8_bom_is_stripped(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"text": "abc"}\n')
    (doc,) = items(path)
    assert doc.text == "abc"
    text = tmp_path / "b.txt"
    text.write_bytes(b"\xef\xbb\xbfhello")
    assert items(text)[0].text == "hello"


def _whole(name: str, size: int, fmt: str = "jsonl") -> Chunk:
    return Chunk(path=f"/c/{name}", rel=name, fmt=fmt, compression=None, start=0, end=size,
                 first=1, size=size, extent=size)


def _names(chunks: list[Chunk]) -> list[str]:
    return ["+".join(f.rel for f in c.files) or f"{c.rel}@{c.start}" for c in chunks]


def test_small_whole_files_are_read_in_runs_in_path_order():
    """Runs of small whole files up to max_bytes, consecutive in path order; a byte range, a
    Parquet file or a file of max_bytes or more ends a run; a run of one stays its file."""
    ranges = [Chunk(path="/c/m", rel="m", fmt="jsonl", compression=None, start=a, end=a + 10,
                    first=1 + a, size=20, extent=20) for a in (10, 0)]
    chunks = [_whole("z", 4), _whole("b", 4), _whole("a", 4), *ranges, _whole("n", 4),
              _whole("p", 4, fmt="parquet"), _whole("q", 10), _whole("r", 3), _whole("s", 3),
              _whole("t", 3), _whole("u", 3)]
    grouped = group_files(chunks, max_bytes=10)
    assert _names(grouped) == ["a+b", "m@0", "m@10", "n@0", "p@0", "q@0", "r+s+t", "u+z"]
    run = grouped[0]
    assert (run.path, run.rel, run.start, run.end, run.size, run.extent, run.first) == (
        "/c/a", "a", 0, 8, 8, 8, 1)


@given(st.lists(st.integers(min_value=0, max_value=12), max_size=40),
       st.integers(min_value=1, max_value=30))
def test_runs_hold_every_file_once_in_order_within_max_bytes(sizes, max_bytes):
    files = [_whole(f"f{i:02d}", size) for i, size in enumerate(sizes)]
    grouped = group_files(reversed(files), max_bytes=max_bytes)
    assert [f for c in grouped for f in (c.files or (c,))] == files
    for c in grouped:
        assert c.files == () or (len(c.files) > 1 and c.size == sum(f.size for f in c.files)
                                 <= max_bytes)


def test_a_run_of_files_reads_and_accounts_as_its_files(tmp_path):
    """Reading a run yields each file's records in turn, each with its own ids; its receipt
    accounts for every file whole, and only those."""
    paths = [write_jsonl(tmp_path / f"f{i}.jsonl", [{"text": f"file {i} doc {j}"}
                                                    for j in range(i + 1)]) for i in range(4)]
    planned = [c for p in paths for c in plan_chunks(str(p), rel=p.name, size=p.stat().st_size,
                                                     spec=DEFAULT, open_file=open_local)]
    (run,) = group_files(planned)
    assert run.files == tuple(planned)
    got = list(read_chunk(run, DEFAULT, open_local))
    assert got == [d for c in planned for d in read_chunk(c, DEFAULT, open_local)]
    assert [d.doc_id for d in got][:3] == ["f0.jsonl:1", "f1.jsonl:1", "f1.jsonl:2"]
    expected = {str(p): p.stat().st_size for p in paths}
    assert account_inputs([run.receipt(len(got))], expected) == 10
    with pytest.raises(RuntimeError, match="did not match when the job started"):
        account_inputs([run.receipt(len(got))], dict(list(expected.items())[:3]))
    with pytest.raises(RuntimeError, match="1 input files were never read"):
        account_inputs([run.receipt(len(got))], {**expected, "/c/other.jsonl": 3})


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(st.sampled_from(["", "a", "bc", "長", "x\r", '{"text": "t"}',
                                    '{"text": "long text"}', "z" * 30, "y" * 12 + "\r"]),
                   max_size=10),
    newline_at_end=st.booleans(),
    fmt=st.sampled_from(["lines", "jsonl"]),
    compressed=st.booleans(),
    chunk_bytes=st.integers(1, 60),
    block=st.integers(1, 17),
    max_doc_bytes=st.integers(1, 12),
)
def test_records_read_a_block_at_a_time_are_those_of_the_whole_file(
        tmp_path_factory, lines, newline_at_end, fmt, compressed, chunk_bytes, block,
        max_doc_bytes):
    """Whatever the block and range sizes and the limit, a file read a block at a time gives
    the records of its whole bytes, a line over the limit (``lines``: --max-doc-bytes + 4) a
    too_large reject with its length, as parsed whole."""
    data = "\n".join(lines).encode() + (b"\n" if newline_at_end and lines else b"")
    name = "f.jsonl" if fmt == "jsonl" else "f.txt"
    path = tmp_path_factory.mktemp("blocks") / (name + (".gz" if compressed else ""))
    path.write_bytes(gzip.compress(data) if compressed else data)
    spec = ReadSpec(format=fmt, max_doc_bytes=max_doc_bytes)
    whole = list(parse_lines(data, fmt=fmt, path=str(path), rel=path.name, first_line=1,
                             spec=spec))
    read = read_files([str(path)], spec=spec, chunk_bytes=chunk_bytes, block_bytes=block)
    assert read.items == whole
    assert read.records == len(whole)


@pytest.mark.parametrize("compressed", [False, True])
def test_a_jsonl_line_over_its_limit_is_read_through_unheld(tmp_path, compressed):
    """A JSONL line may take 4 × --max-doc-bytes + 1 MiB: one longer, in blocks of 1000
    bytes, is a too_large reject with its length; the lines around it are documents."""
    line = b'{"text": "' + b"a" * ((1 << 20) + 100) + b'"}'
    data = b'{"text": "before"}\n' + line + b'\r\n{"text": "after"}'
    path = tmp_path / ("a.jsonl.gz" if compressed else "a.jsonl")
    path.write_bytes(gzip.compress(data) if compressed else data)
    spec = ReadSpec(max_doc_bytes=8)
    for chunk_bytes in (CHUNK_BYTES, 100_000):
        read = read_files([str(path)], spec=spec, chunk_bytes=chunk_bytes, block_bytes=1000)
        assert read.docs == [("a.jsonl.gz:1" if compressed else "a.jsonl:1", "before"),
                             ("a.jsonl.gz:3" if compressed else "a.jsonl:3", "after")]
        (reject,) = [r for r in read.items if isinstance(r, Reject)]
        assert (reject.reason, reject.source) == ("too_large", f"{path}:2")
        assert reject.detail.startswith(f"a line of {len(line) + 1} bytes, more than the "
                                        f"{32 + (1 << 20)} bytes a JSONL line may take")
        assert reject.record == line[:4096].decode()


def test_a_text_file_over_the_limit_is_rejected_with_its_size(tmp_path):
    path = tmp_path / "big.txt.gz"
    path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + b"x" * 5000))
    (doc,) = read_files([str(path)], spec=ReadSpec(max_doc_bytes=5000), block_bytes=7).items
    assert (doc.doc_id, doc.text) == ("big.txt.gz", "x" * 5000)  # the mark is not text
    (reject,) = read_files([str(path)], spec=ReadSpec(max_doc_bytes=100), block_bytes=7).items
    assert (reject.reason, reject.source, reject.truncated) == ("too_large", str(path), True)
    assert reject.detail == ("a file of 5003 bytes, more than --max-doc-bytes=100; not read "
                             "further")
    assert reject.record == "\ufeff" + "x" * 4093
