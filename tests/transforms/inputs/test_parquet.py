"""transforms/inputs/parquet.py: input row groups read with their page checksums verified
(docs/integrity.md#the-job)."""

from __future__ import annotations

import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.common.inputs import damage
from transforms.inputs.parquet import DamagedInput, read_row_groups

TEXTS = [f"document {i}: " + "the quick brown fox jumps over the lazy dog " * 3
         for i in range(300)]


def parquet(path: pathlib.Path, *, checksums: bool = True) -> pathlib.Path:
    """Three row groups of 100 rows, uncompressed (so a text's bytes can be found), with an
    id column beside the text."""
    pq.write_table(pa.table({"id": list(range(300)), "text": TEXTS}), path, row_group_size=100,
                   compression="none", write_page_checksum=checksums)
    return path


def read(path: pathlib.Path, start: int, end: int, first_row: int = 0) -> pa.Table:
    with path.open("rb") as f:
        return read_row_groups(f, start=start, end=end, first_row=first_row, name="web/a.parquet")


def test_the_row_groups_asked_for_are_read_whole(tmp_path: pathlib.Path) -> None:
    path = parquet(tmp_path / "a.parquet")
    table = read(path, 1, 3)
    assert table.column_names == ["id", "text"]
    assert table["id"].to_pylist() == list(range(100, 300))
    assert table["text"].to_pylist() == TEXTS[100:]


def test_a_damaged_page_names_the_file_the_group_its_rows_and_the_column(
        tmp_path: pathlib.Path) -> None:
    path = parquet(tmp_path / "a.parquet")
    damage(path, 250)
    # Rows are numbered from the chunk's first row, as the file counts them.
    with pytest.raises(DamagedInput) as e:
        read(path, 0, 3, first_row=1000)
    message = str(e.value)
    assert message.startswith("input file web/a.parquet is damaged: row group 2 (rows 1200 to "
                              "1299), column 'text' fails its page checksum (")
    assert message.endswith("its bytes are not what its writer wrote (a bad disk, copy or "
                            "download): restore the file from its source, or leave it out of "
                            "--input; no manifest was written")
    assert isinstance(e.value, OSError)
    # The groups before it are intact.
    assert read(path, 0, 2)["text"].to_pylist() == TEXTS[:200]


def test_pages_without_checksums_are_read_as_they_are(tmp_path: pathlib.Path) -> None:
    path = parquet(tmp_path / "a.parquet", checksums=False)
    damage(path, 150)
    texts = read(path, 0, 3)["text"].to_pylist()
    changed = [i for i, (a, b) in enumerate(zip(texts, TEXTS, strict=True)) if a != b]
    assert changed == [150]  # nothing to check it against: the flipped bit is read


def test_a_row_group_holding_a_page_over_the_limit_is_found_from_its_headers(tmp_path):
    """Only the page headers are read (and only in column chunks over the limit): the row
    group with the long value is found, whatever the codec or page layout."""
    from transforms.inputs.parquet import Oversized, oversized_groups

    texts = ["x" * 100] * 50 + ["y" * 300_000] + ["z"] * 10
    for compression in ("none", "zstd", "snappy"):
        for dictionary in (True, False):
            for version in ("1.0", "2.0"):
                path = tmp_path / f"{compression}-{dictionary}-{version}.parquet"
                pq.write_table(pa.table({"id": list(range(61)), "text": texts}), path,
                               row_group_size=20, compression=compression,
                               use_dictionary=dictionary, data_page_version=version,
                               write_page_checksum=True)
                with path.open("rb") as f:
                    found = oversized_groups(f, start=0, end=4, limit=100_000)
                    assert oversized_groups(f, start=0, end=4, limit=400_000) == {}
                assert list(found) == [2]
                assert found[2].column == "text" and 300_000 < found[2].size < 301_200
                assert found[2] == Oversized("text", found[2].size)


def test_the_rows_of_a_row_group_with_a_page_too_large_are_rejected_unread(tmp_path):
    """With the floor of the page limit shrunk (a test's), a 1.1 MB page is too large."""
    from transforms.inputs.chunks import open_local, plan_chunks, read_chunk
    from transforms.inputs.documents import Document
    from transforms.params import ReadSpec

    path = tmp_path / "a.parquet"
    texts = ["one", "two", "z" * 1_100_000, "three", "four", "five"]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=2)
    spec = ReadSpec(max_doc_bytes=100)
    (chunk,) = plan_chunks(str(path), rel="a.parquet", size=path.stat().st_size, spec=spec,
                           open_file=open_local)
    got = list(read_chunk(chunk, spec, open_local, page_floor=1000))
    assert [d.text for d in got if isinstance(d, Document)] == ["one", "two", "four", "five"]
    assert len(got) == 6  # every row a document or a reject
    rejects = [r for r in got if not isinstance(r, Document)]
    assert [(r.reason, r.source, r.record) for r in rejects] == [
        ("too_large", f"{path}#row=2", ""), ("too_large", f"{path}#row=3", "")]
    assert rejects[0].detail.startswith(
        "row group 1 (rows 2 to 3) holds a page of 1100")
    assert rejects[0].detail.endswith(
        "bytes uncompressed in column 'text', more than the 1048976 bytes a page may take "
        "with --max-doc-bytes=100; its rows are not read")


def test_a_large_row_group_of_small_pages_is_read_whole(tmp_path):
    """A column chunk over the limit is only a reason to read its page headers: pages under
    the limit are read as always."""
    from transforms.inputs.chunks import open_local, plan_chunks, read_chunk
    from transforms.inputs.documents import Document
    from transforms.inputs.parquet import oversized_groups
    from transforms.params import ReadSpec

    path = tmp_path / "a.parquet"
    texts = [f"{i:05d} " + "w" * 1000 for i in range(3000)]
    pq.write_table(pa.table({"text": texts}), path, data_page_size=64 << 10,
                   write_batch_size=16, use_dictionary=False)
    column = pq.ParquetFile(path).metadata.row_group(0).column(0)
    assert column.total_uncompressed_size > 2 << 20  # over a 1 MiB limit: its pages are read
    with path.open("rb") as f:
        assert oversized_groups(f, start=0, end=1, limit=1 << 20) == {}
    spec = ReadSpec(max_doc_bytes=2000)
    (chunk,) = plan_chunks(str(path), rel="a.parquet", size=path.stat().st_size, spec=spec,
                           open_file=open_local)
    got = list(read_chunk(chunk, spec, open_local))
    assert [d.text for d in got if isinstance(d, Document)] == texts
