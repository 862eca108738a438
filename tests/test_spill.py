"""`transforms.spill`: blocks spilled by part and read back a part at a time give the very
rows and bytes of the shard held whole."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.blocks import pack_blocks
from transforms.chunks import open_local
from transforms.keys import doc_keys
from transforms.params import WindowSpec
from transforms.parquet import write_rows
from transforms.rows import ShardRows
from transforms.spill import ShardParts, SpillRef, SpillWriter
from transforms.tokenizers import ByteTokenizer
from transforms.windows import plan_windows_batch

TOK = ByteTokenizer()
SPEC = WindowSpec(window=4, stride=3, tail="trace_back", score="new")


def blocks(texts, *, partitions, ids=None, first=0):
    """(partition, block) of byte documents, as EncodeChunks packs one batch."""
    ids = ids or [f"d{first + i}" for i in range(len(texts))]
    z = [TOK.encode(t) for t in texts]
    m = np.fromiter(map(len, z), np.int64, len(z))
    return pack_blocks(doc_keys=doc_keys(SPEC.seed, ids), doc_ids=ids,
                       sources=[f"f.jsonl:{i + 1}" for i in range(len(ids))], tokens=z,
                       plans=plan_windows_batch(m - 1, SPEC, ids), repaired=[False] * len(ids),
                       num_shards=partitions)


def spill(batches, path):
    """Write (part, block) batches to one spill file; its refs."""
    with open(path, "wb") as f:
        writer = SpillWriter(f)
        for batch in batches:
            for part, block in batch:
                writer.write(part, block)
    assert writer.bytes == path.stat().st_size
    return writer.refs(str(path))


def shard_bytes(rows, group=3):
    out = io.BytesIO()
    write_rows(rows, out, window=SPEC.window, rows_per_group=group)
    return out.getvalue()


def test_refs_name_each_part_s_ranges_in_file_order(tmp_path):
    first, second = [(3, b"a" * 8), (7, b"b" * 16)], [(3, b"c" * 24)]
    refs = spill([first, second], tmp_path / "x.blocks")
    assert refs == [SpillRef(path=str(tmp_path / "x.blocks"), part=3, ranges=((0, 8), (24, 24))),
                    SpillRef(path=str(tmp_path / "x.blocks"), part=7, ranges=((8, 16),))]


@pytest.mark.parametrize("parts", [1, 2, 5, 40])
def test_parts_give_the_rows_counts_rejects_and_bytes_of_the_whole_shard(tmp_path, parts):
    texts = [f"text {i} " + "abc" * (i % 11) for i in range(120)]
    # Duplicate ids: same key, so the same part; the first in input order is kept.
    dup_ids = [f"d{i}" for i in range(0, 120, 7)]
    chunk_a = blocks(texts[:70], partitions=parts)
    chunk_b = blocks(texts[70:], partitions=parts, first=70)
    chunk_c = blocks(["dup " * i for i in range(len(dup_ids))], partitions=parts, ids=dup_ids)
    refs = (spill([chunk_a[:3], chunk_a[3:]], tmp_path / "a.blocks")
            + spill([chunk_b], tmp_path / "b.blocks") + spill([chunk_c], tmp_path / "c.blocks"))
    whole = ShardRows([b for chunk in (chunk_a, chunk_b, chunk_c) for _, b in chunk])
    by_parts = ShardParts(refs[::-1], open_local)
    assert shard_bytes(by_parts) == shard_bytes(whole)
    assert by_parts.counts == whole.counts
    assert sorted(by_parts.rejects) == sorted(whole.rejects)
    assert len(whole.rejects) == len(dup_ids)
    assert whole.counts.documents == 120


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=30), min_size=0, max_size=40), st.integers(1, 9),
       st.integers(1, 7))
def test_any_parts_and_row_groups_give_the_same_bytes(texts, parts, group):
    one = ShardRows([b for _, b in blocks(texts, partitions=1)])
    split = [ShardRows([b]) for _, b in blocks(texts, partitions=parts)]
    assert sum(r.num_rows for r in split) == one.num_rows
    assert shard_bytes(split, group) == shard_bytes(one, group)


def test_a_truncated_spill_file_is_an_error_naming_it(tmp_path):
    refs = spill([blocks(["abcdef"] * 3, partitions=1)], tmp_path / "a.blocks")
    data = (tmp_path / "a.blocks").read_bytes()
    (tmp_path / "a.blocks").write_bytes(data[: len(data) // 2])
    with pytest.raises(OSError, match=r"spill file .*a\.blocks ends at \d+.*truncated"):
        list(ShardParts(refs, open_local))
