"""`transforms.shards.rows`: a shard's blocks → its rows in order, its rejects, its counts
(docs/format.md#shuffle-and-shards).

The oracle is `reference`, docs/format.md#shuffle-and-shards in plain Python: of each doc_id the
first source in input order is kept, the documents are sorted by (doc_key, doc_id), and each window
is a row with ``tokens = z[start : start + length + 1]``. `ShardRows` must give exactly its rows and
counts however the documents are batched into blocks and in whatever order the blocks arrive.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.common.documents import doc, docs_of, parcels_of, reference, shuffled_batchings
from tests.common.paths import ROOT
from transforms.dataset.schema import ARROW_SCHEMA
from transforms.params import WindowSpec
from transforms.shards.rows import ShardCounts, ShardRows, _take_strings


def check(rows, docs):
    """``rows`` are exactly the reference's rows, counts and rejects of ``docs``."""
    want_rows, want_counts, rejected = reference(docs)
    table = rows.table(0, rows.num_rows)
    assert table.schema.equals(ARROW_SCHEMA, check_metadata=True)
    assert table.to_pylist() == want_rows
    assert rows.num_rows == len(want_rows)
    assert rows.counts == want_counts
    assert sorted(r.source for r in rows.rejects) == rejected
    assert {r.reason for r in rows.rejects} <= {"duplicate_id"}


def test_rows_sorted_by_key_and_sliced():
    spec = WindowSpec(window=2, stride=2)
    docs = [doc("b", "abcd", spec, key=5), doc("a", "abcde", spec, key=9)]
    rows = ShardRows(parcels_of(docs[::-1]))
    table = rows.table(0, rows.num_rows)
    assert [(r["doc_id"], r["window_index"], r["start"], r["tokens"])
            for r in table.to_pylist()] == [
        ("b", 0, 0, [256, 97, 98]),
        ("b", 1, 2, [98, 99, 100]),
        ("b", 2, 4, [100, 257]),
        ("a", 0, 0, [256, 97, 98]),
        ("a", 1, 2, [98, 99, 100]),
        ("a", 2, 4, [100, 101, 257]),
    ]
    assert rows.counts == ShardCounts(
        rows=6, documents=2, documents_without_windows=0, tokens=17, pairs=11,
        scored_targets=11, uncovered_pairs=0, repaired_invalid_utf8=0,
    )
    assert table.schema.equals(ARROW_SCHEMA)
    check(rows, docs)
    for lo in range(7):
        for hi in range(lo, 7):
            assert rows.table(lo, hi).equals(table.slice(lo, hi - lo)), (lo, hi)


@pytest.mark.parametrize("per_table", [1, 2, 4, 6, 100])
def test_tables_are_consecutive_pieces_of_the_whole(per_table):
    spec = WindowSpec(window=2, stride=2)
    rows = ShardRows(parcels_of([doc("b", "abcd", spec), doc("a", "abcde", spec)]))
    pieces = list(rows.tables(per_table))
    assert [p.num_rows for p in pieces[:-1]] == [per_table] * (len(pieces) - 1)
    assert pa.concat_tables(pieces).equals(rows.table(0, 6))


def test_an_empty_shard_is_one_empty_table():
    rows = ShardRows([])
    assert (rows.num_rows, rows.counts, rows.rejects) == (0, ShardCounts(), [])
    (table,) = rows.tables(16)
    assert table.num_rows == 0 and table.schema.equals(ARROW_SCHEMA)


def test_duplicate_ids_keep_first_source_and_reject_the_rest():
    spec = WindowSpec(window=4, stride=4)
    docs = [doc("x", "second", spec, source="b:1"), doc("x", "first", spec, source="a:1")]
    rows = ShardRows(parcels_of(docs))
    table = rows.table(0, rows.num_rows)
    assert set(table.column("doc_id").to_pylist()) == {"x"}
    assert table.column("doc_tokens").to_pylist()[0] == len("first") + 2
    assert [(r.reason, r.source) for r in rows.rejects] == [("duplicate_id", "b:1")]
    assert rows.rejects[0].detail == "doc_id 'x' is also at a:1, which was kept"
    check(rows, docs)


def test_duplicate_ids_keep_the_first_in_input_order_not_string_order():
    spec = WindowSpec(window=4, stride=4)
    docs = [doc("x", "the later one", spec, source="gs://b/a.jsonl:45"),
            doc("x", "first", spec, source="gs://b/a.jsonl:5"),
            doc("x", "other file", spec, source="gs://b/b.jsonl:1")]
    rows = ShardRows(parcels_of(docs))
    assert set(rows.table(0, rows.num_rows).column("doc_tokens").to_pylist()) == {
        len("first") + 2}
    assert sorted(r.source for r in rows.rejects) == ["gs://b/a.jsonl:45", "gs://b/b.jsonl:1"]
    check(rows, docs)


def test_duplicate_ids_in_parquet_rows_keep_the_first_row():
    spec = WindowSpec(window=4, stride=4)
    docs = [doc("x", "row ten", spec, source="/p/f.parquet#row=10"),
            doc("x", "row nine", spec, source="/p/f.parquet#row=9")]
    for blocks in (parcels_of(docs), parcels_of(docs[::-1])):
        rows = ShardRows(blocks)
        assert set(rows.table(0, rows.num_rows).column("doc_tokens").to_pylist()) == {
            len("row nine") + 2}
        assert [r.source for r in rows.rejects] == ["/p/f.parquet#row=10"]
        check(rows, docs)


def test_duplicate_ids_across_blocks_keep_the_first_source():
    spec = WindowSpec(window=4, stride=3, tail="trace_back", score="new")
    a = docs_of(["first", "other"], spec=spec)
    b = [doc("d0", "second", spec, source="z.jsonl:9")]
    for blocks in (parcels_of(a, b), parcels_of(b, a)):
        rows = ShardRows(blocks)
        assert [(r.reason, r.source) for r in rows.rejects] == [("duplicate_id", "z.jsonl:9")]
        assert rows.counts.documents == 2
        table = rows.table(0, rows.num_rows)
        assert table.column("doc_tokens").to_pylist()[
            table.column("doc_id").to_pylist().index("d0")] == len("first") + 2
        check(rows, a + b)


def test_equal_keys_of_different_ids_are_ordered_by_id():
    docs = [dict(d, doc_key=42) for d in docs_of(["abc", "defg", "hi"])]  # a 64-bit collision
    rows = ShardRows(parcels_of(docs[::-1]))
    assert rows.rejects == []
    assert list(dict.fromkeys(rows.table(0, rows.num_rows).column("doc_id").to_pylist())) == [
        "d0", "d1", "d2"]
    check(rows, docs)


def test_drop_counts_uncovered_and_windowless_documents():
    spec = WindowSpec(window=4, stride=4, tail="drop")
    rows = ShardRows(parcels_of([doc("a", "ab", spec), doc("b", "abcdef", spec, repaired=True)]))
    assert rows.counts.documents == 2
    assert rows.counts.documents_without_windows == 1
    assert rows.counts.pairs == 3 + 7
    assert rows.counts.uncovered_pairs == 3 + 3
    assert rows.counts.repaired_invalid_utf8 == 1
    assert rows.num_rows == rows.counts.rows == 1


def test_narrow_and_wide_blocks_make_one_shard():
    spec = WindowSpec(window=3, stride=2, tail="trace_back", score="new")
    narrow = [doc("n", "hello", spec)]
    wide = [doc("w", "", spec, tokens=[1, 70000, 5, 2, 3, 4, 5])]
    for blocks in (parcels_of(narrow, wide), parcels_of(wide, narrow)):
        check(ShardRows(blocks), narrow + wide)


def test_counts_add_field_by_field():
    a = ShardCounts(rows=1, documents=2, documents_without_windows=3, tokens=4, pairs=5,
                    scored_targets=6, uncovered_pairs=7, repaired_invalid_utf8=8)
    assert a + a == ShardCounts(rows=2, documents=4, documents_without_windows=6, tokens=8,
                                pairs=10, scored_targets=12, uncovered_pairs=14,
                                repaired_invalid_utf8=16)
    assert a + ShardCounts() == a
    with pytest.raises(TypeError):
        ShardCounts(1)  # keyword-only


@pytest.mark.parametrize("wide_at", [None, 5])
def test_rows_are_the_reference_s_whatever_the_batching_and_block_order(wide_at):
    spec = WindowSpec(window=4, stride=3, tail="trace_back", score="new")
    docs = docs_of([f"{i} " + "abc" * (i % 11) for i in range(80)], spec=spec, seed=3,
                   wide_at=wide_at)
    for blocks in shuffled_batchings(docs):
        check(ShardRows(blocks), docs)


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.tuples(st.sampled_from("abcdef"), st.text(max_size=30),
                             st.integers(1, 60)), max_size=14),
    spec=st.builds(WindowSpec, window=st.integers(1, 6), stride=st.integers(1, 6),
                   tail=st.sampled_from(["keep", "drop", "trace_back"]),
                   score=st.sampled_from(["all", "new"]),
                   offset=st.sampled_from(["zero", "random"]), seed=st.integers(0, 9)),
    batching=st.randoms(use_true_random=False),
)
def test_rows_cover_every_window_exactly_once_whatever_the_batching(texts, spec, batching):
    # Ids repeat (six letters), so duplicates come from several files and lines.
    docs = [doc(doc_id, text, spec, source=f"f{line % 3}.jsonl:{line * 100 + i}")
            for i, (doc_id, text, line) in enumerate(texts)]
    shuffled = docs[:]
    batching.shuffle(shuffled)
    cuts = sorted(batching.sample(range(len(docs) + 1), min(3, len(docs) + 1)))
    blocks = parcels_of(*(shuffled[a:b] for a, b in zip([0, *cuts], [*cuts, len(docs)],
                                                       strict=True)))
    batching.shuffle(blocks)
    rows = ShardRows(blocks)
    check(rows, docs)
    table = rows.table(0, rows.num_rows).to_pylist()
    windows = [(r["doc_id"], r["window_index"]) for r in table]
    assert len(windows) == len(set(windows))
    assert set(windows) == {(r["doc_id"], r["window_index"]) for r in reference(docs)[0]}


@settings(max_examples=100, deadline=None)
@given(
    strings=st.lists(st.text(max_size=12), max_size=20),
    cut=st.integers(0, 5),
    picks=st.lists(st.integers(0, 10**6), max_size=40),
)
def test_doc_ids_are_taken_as_pyarrow_takes_them(strings, cut, picks):
    # The writers call pyarrow's take kernel without its compute module (`Array.take` would
    # load it): the same array as `Array.take`'s, for any strings, from a sliced array too.
    import pyarrow.compute  # noqa: F401  (for the oracle only)

    whole = pa.array(strings, pa.string())
    array = whole[min(cut, len(whole)):]
    index = np.array([p % len(array) for p in picks] if len(array) else [], np.int64)
    got = _take_strings(array, index)
    assert got.equals(array.take(pa.array(index, pa.int64())))
    assert got.to_pylist() == [array[int(i)].as_py() for i in index]


def test_rows_are_cut_without_loading_pyarrow_compute():
    # 27-32 ms of every shard writer's start (docs/performance.md#start-up). Without pandas,
    # as the job extra installs it: where pandas is there, pyarrow's first conversion of a
    # NumPy array imports it (and it, pyarrow.compute), and so does Beam's import.
    code = (
        "import sys\n"
        "class NoPandas:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pandas':\n"
        "            raise ModuleNotFoundError(name, name=name)\n"
        "sys.meta_path.insert(0, NoPandas())\n"
        "from tests.common.documents import doc, parcels_of\n"
        "from transforms.params import WindowSpec\n"
        "from transforms.shards.rows import ShardRows\n"
        "spec = WindowSpec(window=2, stride=2)\n"
        "rows = ShardRows(parcels_of([doc('b', 'abcd', spec), doc('a', 'abcde', spec)]))\n"
        "import json\n"
        "print(json.dumps([rows.table(0, rows.num_rows).column('doc_id').to_pylist(),\n"
        "                  'pyarrow.compute' in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=120).stdout
    ids, loaded = json.loads(out)
    assert sorted(ids) == ["a"] * 3 + ["b"] * 3
    assert loaded is False
