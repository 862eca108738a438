"""`transforms.dataset.schema`: the shard format and the directory's names, as docs/format.md states
them (#shard-format, #the-directory)."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.common.paths import ROOT
from transforms.dataset.manifest import MANIFEST_NAME
from transforms.dataset.schema import (
    ARROW_SCHEMA,
    CLAIM_NAME,
    FORMAT,
    FORMAT_VERSION,
    REJECT_REASONS,
    REJECTS_DIR,
    SHARD_COLUMNS,
    SHARD_METADATA_KEYS,
    SHARD_PATTERN,
    TMP_DIR,
    shard_file_name,
)
from transforms.plan.splits import SPLITS_NAME

ARROW_NAMES = {"string": pa.string(), "uint64": pa.uint64(), "int32": pa.int32(),
               "int64": pa.int64(), "list<int32>": pa.list_(pa.field("item", pa.int32(),
                                                                     nullable=False))}


def documented_columns() -> list[tuple[str, str]]:
    """(column, type) of the table under format.md's "Shard format" heading."""
    text = (ROOT / "docs" / "format.md").read_text(encoding="utf-8")
    section = text.split("\n## Shard format\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)` \| ([\w<>]+) \|", section, re.M)


def test_the_schema_is_the_documented_table():
    documented = documented_columns()
    assert [name for name, _ in documented] == list(SHARD_COLUMNS) == ARROW_SCHEMA.names
    for name, kind in documented:
        field = ARROW_SCHEMA.field(name)
        assert field.type == ARROW_NAMES[kind] and not field.nullable, name
    assert ARROW_SCHEMA.metadata == {b"format": FORMAT.encode(),
                                     b"format_version": str(FORMAT_VERSION).encode()}
    assert (FORMAT, FORMAT_VERSION) == ("token-windows", 1)


def test_every_name_but_the_shards_is_one_parquet_readers_skip():
    for name in (MANIFEST_NAME, REJECTS_DIR, SPLITS_NAME, TMP_DIR, CLAIM_NAME):
        assert name[0] in "_.", name
    assert SHARD_METADATA_KEYS == ("token_windows.fingerprint", "token_windows.shard",
                                   "token_windows.counts")
    assert all(re.fullmatch(r"[a-z0-9_]+", reason) for reason in REJECT_REASONS)
    assert list(REJECT_REASONS) == sorted(set(REJECT_REASONS))


def test_every_reject_reason_is_documented():
    text = (ROOT / "docs" / "running.md").read_text(encoding="utf-8")
    section = text.split("\n## Bad input\n", 1)[1].split("\nAt the edges:", 1)[0]
    assert sorted(set(re.findall(r"`([a-z0-9_]+)`", section)) & set(REJECT_REASONS)) == list(
        REJECT_REASONS)


def test_shard_file_names():
    assert shard_file_name(3, 16) == "part-00003-of-00016.parquet"
    assert shard_file_name(0, 123456) == "part-00000-of-123456.parquet"
    for index, n in ((-1, 4), (4, 4), (0, 0)):
        with pytest.raises(ValueError, match=rf"shard index must be in \[0, {n}\), but got "
                                             rf"{index}"):
            shard_file_name(index, n)
    assert SHARD_PATTERN.match("part-0003-of-00016.parquet") is None
    assert SHARD_PATTERN.match("_part-00003-of-00016.parquet") is None


@given(st.integers(1, 10**7), st.data())
def test_a_shard_s_name_gives_back_its_place(n, data):
    index = data.draw(st.integers(0, n - 1))
    m = SHARD_PATTERN.match(shard_file_name(index, n))
    assert m is not None and (int(m.group(1)), int(m.group(2))) == (index, n)
