"""`transforms.shards.parcels`: the wire format documents cross the shuffle in
(docs/architecture.md#glossary).

A parcel must round-trip every document exactly (narrow uint16 and wide int32 tokens), be
deterministic, refuse bytes that are not a parcel, and split a batch by shard without losing,
moving or reordering a document. The decoder used as the oracle (`tests.conftest.
parcel_documents`) slices the columns by the layout in the module's docstring.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.common.documents import docs_of, pack, parcel_documents
from transforms.params import WindowSpec
from transforms.plan.keys import doc_key, shard_of
from transforms.plan.windows import WindowPlans, plan_windows
from transforms.shards.parcels import pack_parcels, read_parcel
from transforms.tokenize.tokenizers import ByteTokenizer

TEXTS = ["abcde", "", "道可道，非常道。", "x" * 40, "The fox.", "ab"]


def parcel_of(docs):
    ((shard, data),) = pack(docs)
    assert shard == 0
    return data


@pytest.mark.parametrize(("wide_at", "dtype"), [(None, "<u2"), (2, "<i4")])
def test_parcel_round_trips_narrow_and_wide_tokens(wide_at, dtype):
    docs = docs_of(TEXTS, wide_at=wide_at)
    data = parcel_of(docs)
    assert parcel_documents(data) == docs
    parcel = read_parcel(data)
    assert parcel.tokens.dtype == np.dtype(dtype)
    assert parcel.keys.tolist() == [d["doc_key"] for d in docs]
    assert parcel.doc_tokens.tolist() == [len(d["tokens"]) for d in docs]
    assert parcel.doc_windows.tolist() == [len(d["starts"]) for d in docs]


def test_wide_tokens_take_more_bytes_than_narrow():
    narrow, wide = parcel_of(docs_of(TEXTS)), parcel_of(docs_of(TEXTS, wide_at=2))
    tokens = sum(len(d["tokens"]) for d in docs_of(TEXTS))
    assert len(wide) - len(narrow) in range(2 * tokens - 8, 2 * tokens + 9)


def test_the_docstring_example():
    spec = WindowSpec(window=2, stride=2)
    parcel = read_parcel(parcel_of(docs_of(["ab", "c"], spec=spec)))
    assert parcel.doc_tokens.tolist() == [4, 3]
    assert parcel.doc_windows.tolist() == [2, 1]
    assert parcel.tokens.tolist() == [256, 97, 98, 257, 256, 99, 257]
    assert parcel.starts.tolist() == [0, 2, 0]
    assert parcel.lengths.tolist() == [2, 1, 2]
    assert (parcel.ids, parcel.sources) == (b"d0d1", b"f.jsonl:1f.jsonl:2")
    assert parcel.id_ends.tolist() == [2, 4]


def test_block_is_deterministic():
    assert parcel_of(docs_of(TEXTS)) == parcel_of(docs_of(TEXTS))


@pytest.mark.parametrize("data", [b"\0" * 64, b"", b"TWB1", b"TWB2" + b"\0" * 60])
def test_read_parcel_refuses_other_bytes(data):
    with pytest.raises(ValueError, match="not a parcel"):
        read_parcel(data)


def test_read_parcel_refuses_a_cut_parcel():
    data = parcel_of(docs_of(TEXTS))
    for cut in range(48, len(data) - 7, 8):  # every column boundary but the padded end
        with pytest.raises(ValueError, match="buffer"):
            read_parcel(data[:cut])


@pytest.mark.parametrize("num_shards", [1, 2, 5, 64])
@pytest.mark.parametrize("wide_at", [None, 3])
def test_pack_parcels_moves_each_document_to_its_key_range(num_shards, wide_at):
    docs = docs_of([f"text {i} " * (i % 7) for i in range(60)], seed=7, wide_at=wide_at)
    parcels = pack(docs, num_shards)
    shards = [s for s, _ in parcels]
    assert shards == sorted(set(shards))
    assert set(shards) == {shard_of(d["doc_key"], num_shards) for d in docs}
    got = {s: parcel_documents(data) for s, data in parcels}
    # Each shard holds exactly its key range's documents, in their order, packed as alone.
    for shard in shards:
        mine = [d for d in docs if shard_of(d["doc_key"], num_shards) == shard]
        assert got[shard] == mine
        assert got[shard] == [parcel_documents(parcel_of([d]))[0] for d in mine]


@pytest.mark.parametrize("wide_at", [None, 3])
def test_a_parcel_s_pieces_end_to_end_are_its_bytes(wide_at):
    docs = docs_of([f"text {i} " * (i % 7) for i in range(60)], seed=7, wide_at=wide_at)
    for (shard, parcel), (same, pieces) in zip(pack(docs, 5), pack(docs, 5, joined=False),
                                               strict=True):
        assert shard == same and isinstance(pieces, list)
        assert b"".join(pieces) == parcel


def test_pack_parcels_of_no_documents_is_no_parcel():
    assert pack([], num_shards=3) == []
    assert pack([], num_shards=1) == []


ids = st.text(min_size=0, max_size=6)
tokens = st.lists(st.integers(0, (1 << 31) - 1) | st.integers(0, 300), min_size=2, max_size=20)


@settings(max_examples=60, deadline=None)
@given(
    docs=st.lists(st.tuples(ids, ids, tokens, st.booleans()), max_size=12),
    num_shards=st.integers(1, 9),
    seed=st.integers(0, (1 << 64) - 1),
    spec=st.builds(WindowSpec, window=st.integers(1, 6), stride=st.integers(1, 6),
                   tail=st.sampled_from(["keep", "drop", "trace_back"]),
                   score=st.sampled_from(["all", "new"]), offset=st.sampled_from(["zero",
                                                                                   "random"])),
)
def test_parcels_round_trip_any_documents(docs, num_shards, seed, spec):
    plain = []
    for doc_id, source, z, repaired in docs:
        plan = plan_windows(len(z) - 1, spec, doc_id)
        plain.append({
            "doc_key": doc_key(seed, doc_id), "doc_id": doc_id, "source": source, "tokens": z,
            "starts": plan.starts.tolist(), "lengths": plan.lengths.tolist(),
            "loss_starts": plan.loss_starts.tolist(), "covered": plan.covered,
            "repaired": repaired,
        })
    parcels = pack(plain, num_shards)
    got = [(shard, d) for shard, data in parcels for d in parcel_documents(data)]
    want = sorted(((shard_of(d["doc_key"], num_shards), d) for d in plain), key=lambda sd: sd[0])
    assert got == want  # stable: documents keep their order inside each shard
    for _, data in parcels:
        wide = max(t for d in parcel_documents(data) for t in d["tokens"]) >= 1 << 16
        assert read_parcel(data).tokens.dtype == np.dtype("<i4" if wide else "<u2")


@pytest.mark.parametrize("ids", [["a", "bb"], ["é", "漢字", "a"], ["", "x"]])
def test_parcel_ids_and_sources_round_trip_ascii_or_not(ids):
    tok = ByteTokenizer()
    tokens = [tok.encode(i) for i in ids]
    spec = WindowSpec(window=4, stride=4)
    plans = WindowPlans.of([plan_windows(len(z) - 1, spec) for z in tokens])
    sources = [f"f{i}.jsonl:{n}" if n else f"ü/{i}:1" for n, i in enumerate(ids)]
    [(_, data)] = pack_parcels(doc_keys=[doc_key(0, i) for i in ids], doc_ids=ids,
                               sources=sources, tokens=tokens, plans=plans,
                               repaired=[False] * len(ids), num_shards=1)
    p = read_parcel(data)
    cut = np.concatenate(([0], p.id_ends)).tolist()
    assert [p.ids[a:b].decode() for a, b in zip(cut, cut[1:], strict=False)] == ids
    cut = np.concatenate(([0], p.src_ends)).tolist()
    assert [p.sources[a:b].decode() for a, b in zip(cut, cut[1:], strict=False)] == sources
