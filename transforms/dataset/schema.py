"""The shard format and the dataset's directory: one definition, for the writer and the reader.

The format is specified in docs/format.md: the directory's names in #the-directory, the
columns, their Arrow types and meaning in #shard-format, the footer's key-value metadata in
#footer-metadata. This module is their one definition in code (`ARROW_SCHEMA`,
`SHARD_METADATA_KEYS`, `REJECTS_DIR`, `TMP_DIR`, `CLAIM_NAME` …), imported by the writer and
the reader; tests/transforms/dataset/test_schema.py holds the two to each other.

Every name but the shards' starts with ``_`` or ``.``, which pyarrow's dataset discovery (and
so pandas, polars, DuckDB's globs of ``*.parquet``, Hugging Face ``datasets``) skips: a Parquet
reader pointed at OUTPUT reads exactly the shards (docs/format.md#the-directory).

Example: document ``abcde`` with the bytes tokenizer, window 2, stride 2, tail keep gives
three rows with ``tokens`` [256, 97, 98], [98, 99, 100], [100, 101, 257] and ``start`` 0, 2, 4.

Rows in a shard are ordered by (doc_key, doc_id, start); shard i of N holds the documents
whose ``(doc_key * N) >> 64 == i``, so reading shards in order gives the global key order.
"""

from __future__ import annotations

import re

import pyarrow as pa

__all__ = [
    "ARROW_SCHEMA",
    "CLAIM_NAME",
    "SHARD_COLUMNS",
    "COUNTS_KEY",
    "FINGERPRINT_KEY",
    "FORMAT",
    "FORMAT_VERSION",
    "LEGACY_REJECTS_DIR",
    "REJECTS_DIR",
    "REJECT_REASONS",
    "SHARD_KEY",
    "SHARD_METADATA_KEYS",
    "SHARD_PATTERN",
    "TMP_DIR",
    "shard_file_name",
]

FORMAT = "token-windows"
FORMAT_VERSION = 1
# A leading "_" (as Spark's _SUCCESS) makes Parquet readers pointed at OUTPUT skip them.
REJECTS_DIR = "_rejects"
# What format version 1 called them before (token-windows 0.1.0).
LEGACY_REJECTS_DIR = "rejects"
TMP_DIR = ".tmp"
CLAIM_NAME = ".claim"
FINGERPRINT_KEY = "token_windows.fingerprint"
SHARD_KEY = "token_windows.shard"
COUNTS_KEY = "token_windows.counts"
SHARD_METADATA_KEYS = (FINGERPRINT_KEY, SHARD_KEY, COUNTS_KEY)
# Every reason a record can be skipped for: the names of the files under rejects/.
# contaminated, exact_duplicate and near_duplicate are documents removed on request
# (--decontaminate, --dedup), kept aside the same way.
REJECT_REASONS = (
    "blank_line", "contaminated", "duplicate_id", "empty", "exact_duplicate", "invalid_id",
    "invalid_utf8", "malformed_json", "missing_id", "missing_text", "near_duplicate",
    "not_an_object", "text_not_string", "tokenizer_error", "too_large", "unreadable_record",
)
SHARD_PATTERN = re.compile(r"^part-(\d{5,})-of-(\d{5,})\.parquet$")

ARROW_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("doc_key", pa.uint64(), nullable=False),
        pa.field("window_index", pa.int32(), nullable=False),
        pa.field("start", pa.int64(), nullable=False),
        pa.field("length", pa.int32(), nullable=False),
        pa.field("loss_start", pa.int32(), nullable=False),
        pa.field("doc_tokens", pa.int64(), nullable=False),
        pa.field("tokens", pa.list_(pa.field("item", pa.int32(), nullable=False)), nullable=False),
    ],
    metadata={b"format": FORMAT.encode(), b"format_version": str(FORMAT_VERSION).encode()},
)
SHARD_COLUMNS = tuple(ARROW_SCHEMA.names)


def shard_file_name(index: int, num_shards: int) -> str:
    """The file name of shard ``index`` of ``num_shards``: ``part-00003-of-00016.parquet``."""
    if not 0 <= index < num_shards:
        raise ValueError(f"shard index must be in [0, {num_shards}), but got {index}")
    return f"part-{index:05d}-of-{num_shards:05d}.parquet"
