"""`transforms.shards.parquet`: shard rows → Parquet bytes, hashed as written
(docs/format.md#shard-format).

The bytes depend on the rows alone: not on how the documents were batched into blocks, the
order the blocks arrive in, or the pieces the writer is handed. They read back as the
reference rows of `tests.transforms.shards.test_rows`, with the row groups `row_group_rows` asks
for.
"""

from __future__ import annotations

import hashlib
import io
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.common.documents import doc, docs_of, parcels_of, reference, shuffled_batchings
from transforms.dataset.schema import ARROW_SCHEMA
from transforms.params import WindowSpec
from transforms.shards.parquet import SINK_BUFFER_BYTES, row_group_rows, write_rows, write_shard
from transforms.shards.rows import ShardRows

SPEC = WindowSpec(window=4, stride=3, tail="trace_back", score="new")


def shard_bytes(blocks, *, window=4, rows_per_group=None):
    out = io.BytesIO()
    sha, size = write_rows(ShardRows(blocks), out, window=window, rows_per_group=rows_per_group)
    data = out.getvalue()
    assert (sha, size) == (hashlib.sha256(data).hexdigest(), len(data))
    return data


def table_bytes(table, *, rows_per_group):
    out = io.BytesIO()
    sha, size = write_shard(table, out, rows_per_group=rows_per_group)
    assert (sha, size) == (hashlib.sha256(out.getvalue()).hexdigest(), len(out.getvalue()))
    return out.getvalue()


@pytest.mark.parametrize(
    ("window", "rows"),
    [(1, 1 << 17), (4, 52428), (511, 512), (512, 511), (8191, 32), (1 << 16, 16), (1 << 20, 16)],
)
def test_row_group_rows(window, rows):
    assert row_group_rows(window) == rows


@pytest.mark.parametrize("wide_at", [None, 5])
def test_any_batching_and_block_order_give_the_bytes_of_one_block(wide_at):
    docs = docs_of([f"{i} " + "abc" * (i % 11) for i in range(80)], spec=SPEC, seed=3,
                   wide_at=wide_at)
    whole = shard_bytes(parcels_of(docs), rows_per_group=16)
    for blocks in shuffled_batchings(docs):
        assert shard_bytes(blocks, rows_per_group=16) == whole
    assert pq.read_table(io.BytesIO(whole)).to_pylist() == reference(docs)[0]


def test_write_is_deterministic_and_reads_back_as_the_rows():
    spec = WindowSpec(window=8, stride=4)
    docs = [doc(f"d{i}", "x" * i, spec) for i in range(30)]
    first = shard_bytes(parcels_of(docs), window=8)
    assert shard_bytes(parcels_of(docs[::-1]), window=8) == first
    table = pq.read_table(io.BytesIO(first))
    rows, counts, _ = reference(docs)
    assert table.num_rows == counts.rows == len(rows)
    assert table.to_pylist() == rows


def test_pieces_give_the_bytes_of_the_whole_table():
    docs = docs_of(["abcdefghij" * (i % 9 + 1) for i in range(300)], spec=SPEC)
    rows = ShardRows(parcels_of(docs))
    window = 1 << 16  # row groups of 16 rows
    assert row_group_rows(window) == 16
    whole = table_bytes(rows.table(0, rows.num_rows), rows_per_group=16)
    assert table_bytes(rows.tables(16 * 3), rows_per_group=16) == whole
    assert shard_bytes(parcels_of(docs), window=window) == whole  # write_rows: pieces of 8 groups
    meta = pq.ParquetFile(io.BytesIO(whole)).metadata
    assert meta.num_row_groups == -(-rows.num_rows // 16) > 8
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups - 1)] == [16] * (
        meta.num_row_groups - 1)


@pytest.mark.parametrize("rows_per_group", [1, 7, 1000])
def test_rows_per_group_sets_the_row_groups(rows_per_group):
    docs = docs_of([f"text {i} " * (i % 5) for i in range(20)], spec=SPEC)
    data = shard_bytes(parcels_of(docs), window=4, rows_per_group=rows_per_group)
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    total = reference(docs)[1].rows
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [
        min(rows_per_group, total - lo) for lo in range(0, total, rows_per_group)]


def test_an_empty_shard_is_one_empty_row_group():
    data = shard_bytes([], window=512)
    assert data == table_bytes(ShardRows([]).table(0, 0), rows_per_group=row_group_rows(512))
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert (meta.num_rows, meta.num_row_groups, meta.row_group(0).num_rows) == (0, 1, 0)


def test_the_sink_is_left_open_and_the_file_says_its_format():
    out = io.BytesIO()
    write_rows(ShardRows(parcels_of(docs_of(["abc"], spec=SPEC))), out, window=4)
    assert not out.closed
    meta = pq.ParquetFile(io.BytesIO(out.getvalue())).schema_arrow.metadata
    assert (meta[b"format"], meta[b"format_version"]) == (b"token-windows", b"1")


def test_a_shard_larger_than_the_sink_buffer_is_written_whole_in_few_writes():
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz .,;"
    texts = ["".join(rng.choices(letters, k=rng.randrange(1, 9000))) for _ in range(600)]
    rows = ShardRows(parcels_of(docs_of(texts, spec=WindowSpec(window=64, stride=32))))
    table = rows.table(0, rows.num_rows)
    writes = []

    class Sink(io.BytesIO):
        def write(self, data):
            writes.append(len(data))
            return super().write(data)

    out = Sink()
    sha, size = write_shard(table, out, rows_per_group=100, metadata={"k": "v"})
    data = out.getvalue()
    assert size == len(data) > 3 * SINK_BUFFER_BYTES
    assert sha == hashlib.sha256(data).hexdigest()
    # The bytes of pyarrow writing to the sink page by page (the last buffered bytes too).
    plain = io.BytesIO()
    with pq.ParquetWriter(plain, ARROW_SCHEMA, compression="zstd", compression_level=3,
                          use_dictionary=["doc_id"],
                          write_statistics=["doc_id", "doc_key", "window_index", "start"],
                          store_schema=True, write_page_checksum=True) as writer:
        writer.write_table(table, row_group_size=100)
        writer.add_key_value_metadata({"k": "v"})
    assert data == plain.getvalue()
    assert pq.read_table(io.BytesIO(data)).equals(pa.Table.from_batches(table.to_batches()))
    assert len(writes) <= size // SINK_BUFFER_BYTES + 2
