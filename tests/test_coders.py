"""The compact encodings documents cross the shuffle in: blocks (SPEC §4–5).

A block must round-trip exactly, split by shard without losing or moving a document, and
give the very shard bytes that the per-document path gives, however the documents were
batched into blocks and in whatever order the blocks arrive.
"""

import io
import random

import numpy as np
import pyarrow.parquet as pq
import pytest

from transforms.keys import doc_key, shard_of
from transforms.params import WindowSpec
from transforms.shards import (
    PackedDocuments,
    ShardRows,
    block_documents,
    build_shard,
    pack_block,
    pack_blocks,
    pack_document,
    read_block,
    row_group_rows,
    unpack_document,
    write_rows,
    write_shard,
)
from transforms.tokenizers import ByteTokenizer
from transforms.windows import plan_windows

TOK = ByteTokenizer()
SPEC = WindowSpec(window=4, stride=3, tail="trace_back", score="new")


def docs_of(texts, *, spec=SPEC, seed=0, wide_at=None):
    docs = []
    for i, text in enumerate(texts):
        doc_id = f"d{i}"
        z = TOK.encode(text)
        if wide_at == i:
            z = z.copy()
            z[1:2] = 70000
        docs.append(dict(doc_key=doc_key(seed, doc_id), doc_id=doc_id, source=f"f.jsonl:{i + 1}",
                         tokens=z, plan=plan_windows(len(z) - 1, spec, doc_id),
                         repaired=i % 3 == 0))
    return docs


def block_of(docs):
    return pack_block(
        doc_keys=[d["doc_key"] for d in docs], doc_ids=[d["doc_id"] for d in docs],
        sources=[d["source"] for d in docs], tokens=[d["tokens"] for d in docs],
        plans=[d["plan"] for d in docs], repaired=[d["repaired"] for d in docs],
    )


TEXTS = ["abcde", "", "道可道，非常道。", "x" * 40, "The fox.", "ab"]


@pytest.mark.parametrize("wide_at", [None, 2])
def test_block_round_trips_and_iterates_as_packed_documents(wide_at):
    docs = docs_of(TEXTS, wide_at=wide_at)
    data = block_of(docs)
    assert list(block_documents(data)) == [pack_document(**d) for d in docs]
    block = read_block(data)
    assert block.tokens.dtype == (np.dtype("<i4") if wide_at is not None else np.dtype("<u2"))
    assert block.keys.tolist() == [d["doc_key"] for d in docs]
    for packed, doc in zip(PackedDocuments([data]), docs, strict=True):
        back = unpack_document(packed)
        assert (back.doc_id, back.source, back.repaired) == (
            doc["doc_id"], doc["source"], doc["repaired"])
        assert back.tokens.tolist() == doc["tokens"].tolist()
        assert back.plan.starts.tolist() == doc["plan"].starts.tolist()


def test_empty_block_and_empty_shard():
    data = block_of([])
    assert list(block_documents(data)) == []
    assert ShardRows(PackedDocuments([data])).num_rows == 0
    whole = io.BytesIO()
    write_shard(build_shard([]).table, whole, window=512)
    assert shard_bytes([], window=512) == whole.getvalue()  # one empty row group, as before


def test_block_is_deterministic():
    assert block_of(docs_of(TEXTS)) == block_of(docs_of(TEXTS))


def test_read_block_refuses_other_bytes():
    with pytest.raises(ValueError, match="not a block"):
        read_block(b"\0" * 64)


@pytest.mark.parametrize("num_shards", [1, 2, 5, 64])
@pytest.mark.parametrize("wide_at", [None, 3])
def test_pack_blocks_moves_each_document_to_its_key_range(num_shards, wide_at):
    docs = docs_of([f"text {i} " * (i % 7) for i in range(60)], seed=7, wide_at=wide_at)
    got = {}
    blocks = pack_blocks(
        doc_keys=[d["doc_key"] for d in docs], doc_ids=[d["doc_id"] for d in docs],
        sources=[d["source"] for d in docs], tokens=[d["tokens"] for d in docs],
        plans=[d["plan"] for d in docs], repaired=[d["repaired"] for d in docs],
        num_shards=num_shards,
    )
    assert [s for s, _ in blocks] == sorted({s for s, _ in blocks})
    for shard, data in blocks:
        for packed in block_documents(data):
            got[unpack_document(packed).doc_id] = (shard, packed)
    # Each document lands in its key range, packed exactly as alone.
    assert got == {d["doc_id"]: (shard_of(d["doc_key"], num_shards), pack_document(**d))
                   for d in docs}


def test_pack_blocks_of_no_documents_is_no_block():
    assert pack_blocks(doc_keys=[], doc_ids=[], sources=[], tokens=[], plans=[], repaired=[],
                       num_shards=3) == []


def shard_bytes(packed, window=4):
    out = io.BytesIO()
    write_rows(ShardRows(packed), out, window=window)
    return out.getvalue()


@pytest.mark.parametrize("wide_at", [None, 5])
def test_blocks_give_the_bytes_of_the_per_document_path_whatever_the_batching(wide_at):
    docs = docs_of([f"{i} " + "abc" * (i % 11) for i in range(80)], seed=3, wide_at=wide_at)
    whole = io.BytesIO()
    write_shard(build_shard([pack_document(**d) for d in docs]).table, whole, window=4)
    rng = random.Random(0)
    for _ in range(5):
        shuffled = docs[:]
        rng.shuffle(shuffled)
        cuts = sorted(rng.sample(range(1, len(docs)), 4))
        blocks = [block_of(shuffled[a:b]) for a, b in zip([0, *cuts], [*cuts, len(docs)],
                                                          strict=True)]
        rng.shuffle(blocks)
        assert shard_bytes(PackedDocuments(blocks)) == whole.getvalue()


def test_pieces_give_the_bytes_of_the_whole_table():
    docs = docs_of(["abcdefghij" * (i % 9 + 1) for i in range(300)])
    rows = ShardRows([pack_document(**d) for d in docs])
    window = 1 << 16  # row groups of 16 rows
    assert row_group_rows(window) == 16
    whole, pieces = io.BytesIO(), io.BytesIO()
    write_shard(rows.table(0, rows.num_rows), whole, window=window)
    write_shard(rows.tables(16 * 3), pieces, window=window)
    assert whole.getvalue() == pieces.getvalue()
    assert pq.ParquetFile(io.BytesIO(whole.getvalue())).metadata.num_row_groups > 3


def test_duplicate_ids_across_blocks_keep_the_first_source():
    a = docs_of(["first", "other"])
    b = [dict(a[0], source="z.jsonl:9", tokens=TOK.encode("second"),
              plan=plan_windows(7, SPEC, "d0"))]
    for blocks in ([block_of(a), block_of(b)], [block_of(b), block_of(a)]):
        rows = ShardRows(PackedDocuments(blocks))
        assert [(r.reason, r.source) for r in rows.rejects] == [("duplicate_id", "z.jsonl:9")]
        assert rows.counts["documents"] == 2
        table = rows.table(0, rows.num_rows)
        assert table.column("doc_tokens").to_pylist()[
            table.column("doc_id").to_pylist().index("d0")] == len("first") + 2


def test_equal_keys_of_different_ids_are_ordered_by_id():
    docs = docs_of(["abc", "defg", "hi"])
    for d in docs:
        d["doc_key"] = 42  # a 64-bit collision
    rows = ShardRows(PackedDocuments([block_of(docs[::-1])]))
    assert rows.rejects == []
    assert list(dict.fromkeys(rows.table(0, rows.num_rows).column("doc_id").to_pylist())) == [
        "d0", "d1", "d2"]
