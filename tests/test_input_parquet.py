"""transforms/input_parquet.py: input row groups read with their page checksums verified
(docs/integrity.md#the-job)."""

from __future__ import annotations

import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms.input_parquet import DamagedInput, read_row_groups

TEXTS = [f"document {i}: " + "the quick brown fox jumps over the lazy dog " * 3
         for i in range(300)]


def parquet(path: pathlib.Path, *, checksums: bool = True) -> pathlib.Path:
    """Three row groups of 100 rows, uncompressed (so a text's bytes can be found), with an
    id column beside the text."""
    pq.write_table(pa.table({"id": list(range(300)), "text": TEXTS}), path, row_group_size=100,
                   compression="none", write_page_checksum=checksums)
    return path


def damage(path: pathlib.Path, row: int) -> None:
    """Flip one bit inside the text of ``row``: the file still parses."""
    data = bytearray(path.read_bytes())
    at = data.index(f"document {row}: ".encode()) + 2
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


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
