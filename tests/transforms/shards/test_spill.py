"""`transforms.shards.spill`: blocks spilled by part and read back a part at a time give the very
rows, counts, rejects and bytes of the shard held whole."""

from __future__ import annotations

import io
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.inputs.chunks import open_local
from transforms.params import WindowSpec
from transforms.plan.keys import doc_keys
from transforms.plan.windows import plan_windows_batch
from transforms.shards.parcels import pack_parcels
from transforms.shards.parquet import _pieces, write_rows
from transforms.shards.rows import ShardRows
from transforms.shards.spill import ShardParts, SpillWriter, _index
from transforms.tokenize.tokenizers import ByteTokenizer

TOK = ByteTokenizer()
SPEC = WindowSpec(window=4, stride=3, tail="trace_back", score="new")


def blocks(texts, *, partitions, ids=None, first=0):
    """(partition, block) of byte documents, as one flush of EncodeChunks packs them."""
    ids = ids or [f"d{first + i}" for i in range(len(texts))]
    z = [TOK.encode(t) for t in texts]
    m = np.fromiter(map(len, z), np.int64, len(z))
    return pack_parcels(doc_keys=doc_keys(SPEC.seed, ids), doc_ids=ids,
                       sources=[f"f.jsonl:{i + 1}" for i in range(len(ids))], tokens=z,
                       plans=plan_windows_batch(m - 1, SPEC, ids), repaired=[False] * len(ids),
                       num_shards=partitions)


def spill(flushes, path, parts):
    """Write flushes of (part, block) to one spill file; its path."""
    with open(path, "wb") as f:
        writer = SpillWriter(f, num_parts=parts)
        for flush in flushes:
            for part, block in flush:
                writer.write(part, block)
        assert writer.finish() == sum(len(b) for flush in flushes for _, b in flush)
    return str(path)


def shard_bytes(rows, group=3):
    out = io.BytesIO()
    write_rows(rows, out, window=SPEC.window, rows_per_group=group)
    return out.getvalue()


def test_the_index_gives_each_part_s_ranges_in_file_order(tmp_path):
    path = spill([[(3, b"a" * 8), (7, b"b" * 16)], [(3, b"c" * 24)]], tmp_path / "x.spill", 8)
    with open(path, "rb") as f:
        index = _index(f, path, 0, 8, 8)
        assert [r.tolist() for r in index] == [[], [], [], [[0, 8], [24, 24]], [], [], [],
                                               [[8, 16]]]
        assert [r.tolist() for r in _index(f, path, 6, 8, 8)] == [[], [[8, 16]]]
        with pytest.raises(OSError, match="not a spill file of this job"):
            _index(f, path, 0, 1, 9)
    with pytest.raises(ValueError, match=r"part must be in \[0, 8\), but got 8"):
        SpillWriter(io.BytesIO(), num_parts=8).write(8, b"x")


@pytest.mark.parametrize(("num_shards", "parts_per_shard"), [(1, 1), (1, 5), (3, 2), (2, 40)])
def test_parts_give_the_rows_counts_rejects_and_bytes_of_the_whole_shard(tmp_path, num_shards,
                                                                         parts_per_shard):
    parts = num_shards * parts_per_shard
    texts = [f"text {i} " + "abc" * (i % 11) for i in range(120)]
    # Duplicate ids: the same key, so the same part; the first in input order is kept.
    dup_ids = [f"d{i}" for i in range(0, 120, 7)]
    chunk_a = blocks(texts[:70], partitions=parts)
    chunk_b = blocks(texts[70:], partitions=parts, first=70)
    chunk_c = blocks(["dup " * i for i in range(len(dup_ids))], partitions=parts, ids=dup_ids)
    files = [spill([chunk_a[:3], chunk_a[3:]], tmp_path / "a.spill", parts),
             spill([chunk_b], tmp_path / "b.spill", parts),
             spill([chunk_c], tmp_path / "c.spill", parts),
             spill([], tmp_path / "empty.spill", parts)]
    every = [pb for chunk in (chunk_a, chunk_b, chunk_c) for pb in chunk]
    documents = 0
    for shard in range(num_shards):
        whole = ShardRows([b for part, b in every if part // parts_per_shard == shard])
        by_parts = ShardParts(files[::-1], shard=shard, num_shards=num_shards,
                              parts_per_shard=parts_per_shard, open_file=open_local)
        assert shard_bytes(by_parts) == shard_bytes(whole)
        assert by_parts.counts == whole.counts
        assert sorted(by_parts.rejects) == sorted(whole.rejects)
        documents += whole.counts.documents
    assert documents == 120


def test_parcels_spilled_as_pieces_read_back_as_the_same_shard(tmp_path):
    """Pieces (`transforms.shards.parcels.Pieces`) make the same spill file as joined parcels."""
    texts = [f"text {i} " + "abc" * (i % 11) for i in range(60)]
    joined = blocks(texts, partitions=6)
    with open(tmp_path / "p.spill", "wb") as f:
        writer = SpillWriter(f, num_parts=6)
        for part, parcel in joined:
            writer.write(part, [parcel[:5], memoryview(parcel)[5:]])
        writer.finish()
    path = spill([joined], tmp_path / "j.spill", 6)
    assert (tmp_path / "p.spill").read_bytes() == (tmp_path / "j.spill").read_bytes()
    for shard in range(3):
        whole = ShardRows([b for part, b in joined if part // 2 == shard])
        got = ShardParts([path], shard=shard, num_shards=3, parts_per_shard=2,
                         open_file=open_local)
        assert shard_bytes(got) == shard_bytes(whole)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=30), min_size=0, max_size=40), st.integers(1, 9),
       st.integers(1, 7))
def test_any_parts_and_row_groups_give_the_same_bytes(texts, parts, group):
    one = ShardRows([b for _, b in blocks(texts, partitions=1)])
    split = [ShardRows([b]) for _, b in blocks(texts, partitions=parts)]
    assert sum(r.num_rows for r in split) == one.num_rows
    assert shard_bytes(split, group) == shard_bytes(one, group)


@pytest.mark.parametrize("cut", [0.5, 0.99, 0.0])
def test_a_truncated_spill_file_is_an_error_naming_it(tmp_path, cut):
    path = spill([blocks(["abcdef"] * 3, partitions=2)], tmp_path / "a.spill", 2)
    data = (tmp_path / "a.spill").read_bytes()
    (tmp_path / "a.spill").write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(OSError, match=r"spill file .*a\.spill (ends at|has|is not)"):
        list(ShardParts([path], shard=0, num_shards=1, parts_per_shard=2, open_file=open_local))


def test_rejects_spill_as_one_run_per_reason_in_input_order(tmp_path):
    from transforms.inputs.documents import Reject
    from transforms.shards.spill import read_run, spill_rejects

    rejects = [Reject(reason=r, source=f"/c/a.jsonl:{n}", detail="d", record=f"x{n}")
               for n, r in ((2, "malformed_json"), (5, "empty"), (9, "malformed_json"))]
    path = tmp_path / "a.rejects"
    with open(path, "wb") as f:
        runs = spill_rejects(rejects, f, path=str(path), order=("/c/a.jsonl", 0))
    assert [(r.reason, r.count, r.order) for r in runs] == [
        ("empty", 1, ("/c/a.jsonl", 0)), ("malformed_json", 2, ("/c/a.jsonl", 0))]
    assert read_run(runs[1], open_local) == rejects[0].to_line() + rejects[2].to_line()
    assert read_run(runs[0], open_local) == rejects[1].to_line()
    assert sum(r.length for r in runs) == path.stat().st_size


def test_a_part_is_let_go_before_the_next_is_read(tmp_path):
    path = spill([blocks([f"text {i} " * (i % 5 + 1) for i in range(60)], partitions=4)],
                 tmp_path / "a.spill", 4)
    held = []

    def opening(name):
        # Memory holds one part at a time: none read before is still alive.
        assert [ref() for ref in held] == [None] * len(held)
        return open_local(name)

    def tracked(parts):
        for rows in parts:
            held.append(weakref.ref(rows))
            yield rows
            del rows

    parts = ShardParts([path], shard=0, num_shards=1, parts_per_shard=4, open_file=opening)
    rows = sum(piece.num_rows for piece in _pieces(tracked(parts), 5))
    assert len(held) == 4 and rows == parts.counts.rows > 0
