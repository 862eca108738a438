"""`transforms.shards.encoding`: documents → tokens → windows → keys → blocks by shard, without
Beam.

Documents are read from files with `tests.transforms.inputs.test_chunks.read_files` (the pure
reading steps) and encoded as the job encodes them: every document gets its exact token ids
(SentencePiece ids checked against `spm` itself), its own window plan and seeded key, and neither
the batching nor the block boundaries show in the blocks' documents or in the shards' bytes.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.common.documents import parcel_documents
from tests.common.inputs import LINES, TEXTS, read_files
from tests.common.paths import DATA
from transforms.inputs.documents import Document, Reject
from transforms.params import ReadSpec, WindowSpec
from transforms.plan.keys import ShardPlan, doc_key, part_of, shard_of
from transforms.plan.windows import plan_windows
from transforms.shards.encoding import (
    Encoded,
    PartBuffer,
    batch_documents,
    encode_documents,
    pack_documents,
)
from transforms.shards.parcels import read_parcel
from transforms.shards.parquet import write_rows
from transforms.shards.rows import ShardRows
from transforms.tokenize.tokenizers import ByteTokenizer, SentencePieceTokenizer

WINDOWS = WindowSpec(window=8, stride=4)
TOK = ByteTokenizer()


def document(i, text="x" * 3):
    return Document(doc_id=f"d{i}", text=text, source=f"f:{i}")


def reject(i):
    return Reject(reason="empty", source=f"f:{i}", detail="", record="")


def shape(batches):
    return [len(b) if isinstance(b, list) else b.source for b in batches]


@pytest.mark.parametrize(
    ("max_docs", "max_chars", "want"),
    [
        (2, 100, [2, 2, 1]),
        (10, 6, [2, 2, 1]),  # closed once they hold 6 characters
        (10, 7, [3, 2]),
        (1, 1, [1, 1, 1, 1, 1]),
        (10, 100, [5]),
    ],
)
def test_batch_documents(max_docs, max_chars, want):
    docs = [document(i) for i in range(5)]
    batches = list(batch_documents(docs, max_docs=max_docs, max_chars=max_chars))
    assert shape(batches) == want
    assert [d for b in batches for d in b] == docs


def test_rejects_pass_through_between_batches_as_they_come():
    items = [reject(0), document(1), document(2), reject(3), document(4), reject(5)]
    batches = list(batch_documents(items, max_docs=2, max_chars=100))
    assert shape(batches) == ["f:0", 2, "f:3", "f:5", 1]
    assert batches[1] == [items[1], items[2]] and batches[4] == [items[4]]
    assert list(batch_documents([], max_docs=2)) == []


def test_the_docstring_example():
    encoded = pack_documents([Document(doc_id="d", text="abcde", source="s:1")],
                             [TOK.encode("abcde")], windows=WindowSpec(window=4, stride=4),
                             num_shards=1)
    assert (encoded.tokens, encoded.windows) == (7, 2)
    ((shard, block),) = encoded.parcels
    (doc,) = parcel_documents(block)
    assert shard == 0
    assert doc["tokens"] == [256, 97, 98, 99, 100, 101, 257]
    assert list(zip(doc["starts"], doc["lengths"], strict=True)) == [(0, 4), (4, 2)]
    assert (doc["doc_id"], doc["source"], doc["doc_key"]) == ("d", "s:1", doc_key(0, "d"))


@pytest.mark.parametrize("max_chars", [40, 1 << 20])
def test_encode_documents_encodes_plans_and_keys_each_document(tmp_path, max_chars):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(DATA / "tiny.model"))
    tokenizer = SentencePieceTokenizer((DATA / "tiny.model").read_bytes(), where="tiny.model")
    assert (tokenizer.bos_id, tokenizer.eos_id) == (1, 2)
    texts = {"a": "abcde", "b": "The quick brown fox jumps over the lazy dog. " * 3,
             **{f"t{i}": t for i, t in enumerate(TEXTS[:30])}}
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in texts.items()))
    spec = WindowSpec(window=4, stride=2, tail="trace_back", score="new", seed=5)
    want = {}
    for line, (doc_id, text) in enumerate(texts.items(), start=1):
        z = [1, *sp.encode(text), 2]
        plan = plan_windows(len(z) - 1, spec)
        want[doc_id] = {"doc_key": doc_key(5, doc_id), "doc_id": doc_id,
                        "source": f"{tmp_path}/in.jsonl:{line}", "tokens": z,
                        "starts": plan.starts.tolist(), "lengths": plan.lengths.tolist(),
                        "loss_starts": plan.loss_starts.tolist(), "covered": plan.covered,
                        "repaired": False}
    read = read_files([str(tmp_path / "in.jsonl")], spec=ReadSpec(id_field="id"))
    got = {}
    for batch in batch_documents(read.items, max_chars=max_chars):
        encoded = encode_documents(batch, tokenizer=tokenizer, windows=spec, num_shards=1)
        for _, block in encoded.parcels:
            got.update((d["doc_id"], d) for d in parcel_documents(block))
    assert got == want
    assert got["a"]["tokens"] == [1, *sp.encode("abcde"), 2]


def encode_file(path, *, max_chars, num_shards=3, windows=WINDOWS):
    """(shard, document) of every block, and each shard's blocks, of a file read in batches."""
    docs, shards = [], {}
    tokens = windows_made = 0
    for batch in batch_documents(read_files([str(path)]).items, max_chars=max_chars):
        encoded = encode_documents(batch, tokenizer=TOK, windows=windows,
                                   num_shards=num_shards)
        assert isinstance(encoded, Encoded)
        for shard, block in encoded.parcels:
            docs.extend((shard, d) for d in parcel_documents(block))
            shards.setdefault(shard, []).append(block)
        tokens += encoded.tokens
        windows_made += encoded.windows
    assert tokens == sum(len(d["tokens"]) for _, d in docs)
    assert windows_made == sum(len(d["starts"]) for _, d in docs)
    return docs, shards


def shard_bytes(blocks):
    out = io.BytesIO()
    write_rows(ShardRows(blocks), out, window=WINDOWS.window)
    return out.getvalue()


@pytest.mark.parametrize("batch_chars", [1, 50, 1 << 20])
def test_batches_do_not_show_in_what_is_encoded(tmp_path, batch_chars):
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    docs, shards = encode_file(path, max_chars=batch_chars)
    got = sorted((shard, d["doc_id"], bytes(d["tokens"][1:-1]).decode(), d["starts"])
                 for shard, d in docs)
    want = []
    for i, text in enumerate(TEXTS):
        doc_id = f"in.jsonl:{i + 1}"
        starts = plan_windows(len(text.encode()) + 1, WINDOWS).starts.tolist()
        want.append((shard_of(doc_key(0, doc_id), 3), doc_id, text, starts))
    assert got == sorted(want)
    assert all(d["tokens"][0] == 256 and d["tokens"][-1] == 257 for _, d in docs)
    # The shards' bytes are those of all documents encoded in one batch.
    _, whole = encode_file(path, max_chars=1 << 30)
    assert {s: len(b) for s, b in whole.items()} == {s: 1 for s in range(3)}
    assert {s: shard_bytes(b) for s, b in shards.items()} == {
        s: shard_bytes(b) for s, b in whole.items()}


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(st.text(max_size=20), max_size=15),
    max_docs=st.integers(1, 6),
    num_shards=st.integers(1, 4),
)
def test_pack_documents_of_any_batches_gives_the_documents_of_one_batch(texts, max_docs,
                                                                        num_shards):
    docs = [Document(doc_id=f"f:{i}", text=t, source=f"/f:{i}") for i, t in enumerate(texts)]
    windows = WindowSpec(window=3, stride=2, tail="trace_back", score="new", offset="random",
                         seed=11)

    def documents(batches):
        out = []
        for batch in batches:
            encoded = pack_documents(batch, [TOK.encode(d.text) for d in batch],
                                     windows=windows, num_shards=num_shards)
            assert [s for s, _ in encoded.parcels] == sorted({s for s, _ in encoded.parcels})
            out.extend((s, d) for s, block in encoded.parcels for d in parcel_documents(block))
        return sorted(out, key=lambda sd: sd[1]["doc_id"])

    whole = documents([docs] if docs else [])
    assert documents(batch_documents(docs, max_docs=max_docs)) == whole
    assert [d["doc_id"] for _, d in whole] == sorted(d.doc_id for d in docs)
    for shard, d in whole:
        assert shard == shard_of(doc_key(11, d["doc_id"]), num_shards)
        assert d["tokens"] == TOK.encode(texts[int(d["doc_id"][2:])]).tolist()


def test_pack_documents_of_no_documents_is_nothing():
    assert pack_documents([], [], windows=WINDOWS, num_shards=2) == Encoded(
        parcels=[], tokens=0, windows=0)


@pytest.mark.parametrize("max_tokens", [1, 50, 10_000])
@pytest.mark.parametrize("parts_per_shard", [1, 3])
def test_part_buffer_packs_one_block_per_part_and_flush_whatever_it_holds(max_tokens,
                                                                          parts_per_shard):

    spec = WindowSpec(window=6, stride=4, tail="trace_back", score="new")
    docs = [Document(doc_id=f"d{i}", text="abc" * (i % 7 + 1), source=f"f:{i + 1}")
            for i in range(90)]
    tok = ByteTokenizer()
    buffer = PartBuffer(windows=spec, plan=ShardPlan(num_shards=2),
                        parts_per_shard=parts_per_shard, max_tokens=max_tokens)
    flushes, tokens = [], 0
    for lo in range(0, len(docs), 20):
        batch = docs[lo : lo + 20]
        got = buffer.add(batch, tok.encode_batch([d.text for d in batch]))
        flushes.append(got)
    flushes.append(buffer.flush())
    assert buffer.flush().parcels == []
    for encoded in flushes:
        parts = [part for part, _ in encoded.parcels]
        assert parts == sorted(set(parts))  # one block per part per flush, in part order
        tokens += encoded.tokens
    assert tokens == sum(len(d.text) + 2 for d in docs)
    if max_tokens == 10_000:  # held everything: one flush
        assert all(not f.parcels for f in flushes[:-1])
    # Each block holds its part's documents, and the shards' rows are those of one batch.
    whole = pack_documents(docs, tok.encode_batch([d.text for d in docs]), windows=spec,
                           num_shards=2)
    for shard in range(2):
        mine = [b for f in flushes for part, b in f.parcels if part // parts_per_shard == shard]
        for f in flushes:
            for part, block in f.parcels:
                for key in read_parcel(block).keys.tolist():
                    assert part_of(key, 2, parts_per_shard) == part
        want = ShardRows([b for s, b in whole.parcels if s == shard])
        got = ShardRows(mine)
        assert got.table(0, got.num_rows).equals(want.table(0, want.num_rows))


@pytest.mark.parametrize("wide_batch", [None, 0, 2])
def test_part_buffer_holds_narrow_ids_as_uint16_and_keeps_wide_ones_exact(wide_batch):
    # A batch whose z all fit 16 bits is held as uint16 (half the memory); one with an id of
    # 2**16 or more stays int32, and a part holding both packs int32 parcels: every id exact.
    docs = [Document(doc_id=f"d{i}", text="abcde" * (i % 5 + 1), source=f"f:{i + 1}")
            for i in range(60)]
    buffer = PartBuffer(windows=WINDOWS, plan=ShardPlan(num_shards=2), parts_per_shard=2)
    want = {}
    for b, lo in enumerate(range(0, len(docs), 20)):
        batch = docs[lo : lo + 20]
        tokens = TOK.encode_batch([d.text for d in batch])
        if b == wide_batch:
            tokens = [z.copy() for z in tokens]
            for z in tokens:
                z[1] = 70_000 + len(z)
        want.update((d.doc_id, z.tolist()) for d, z in zip(batch, tokens, strict=True))
        assert buffer.add(batch, tokens).parcels == []
    held = [z for h in buffer._held_parts.values() for z in h.tokens]
    assert sum(z.dtype == np.int32 for z in held) == (0 if wide_batch is None else
                                                       len(buffer._held_parts))
    got = {}
    for _, parcel in buffer.flush().parcels:
        p = read_parcel(parcel)
        assert p.tokens.dtype == (np.uint16 if wide_batch is None else np.int32)
        ends = np.cumsum(p.doc_tokens).tolist()
        ids = p.ids.decode()
        id_ends = [0, *p.id_ends.tolist()]
        for i, end in enumerate(ends):
            got[ids[id_ends[i] : id_ends[i + 1]]] = p.tokens[end - p.doc_tokens[i] : end].tolist()
    assert got == want


def test_part_buffer_refuses_a_plan_with_splits_but_no_split_definition():
    plan = ShardPlan(num_shards=3, splits=(("val", 1), ("train", 2)))
    with pytest.raises(ValueError, match=r"the plan has splits: give their definition"):
        PartBuffer(windows=WINDOWS, plan=plan)


@pytest.mark.parametrize("num_shards", [1, 5])
def test_part_buffer_once_full_packs_its_fullest_parts_an_eighth_at_a_time(num_shards):
    """Not the whole buffer at once: the parts holding the most, until an eighth of it (and
    what the batch brought over) is packed, so the buffer then holds at most 7/8 of it."""
    parts_per_shard, max_tokens = 4, 4000
    docs = [Document(doc_id=f"d{i}", text="abcdefg" * (i % 9 + 1), source=f"f:{i + 1}")
            for i in range(1200)]
    buffer = PartBuffer(windows=WINDOWS, plan=ShardPlan(num_shards=num_shards),
                        parts_per_shard=parts_per_shard, max_tokens=max_tokens)
    held: dict[int, int] = {}  # tokens held by part, followed outside the buffer
    packs = 0
    for lo in range(0, len(docs), 30):
        batch = docs[lo : lo + 30]
        tokens = TOK.encode_batch([d.text for d in batch])
        for d, z in zip(batch, tokens, strict=True):
            part = part_of(doc_key(WINDOWS.seed, d.doc_id), num_shards, parts_per_shard)
            held[part] = held.get(part, 0) + len(z)
        got = buffer.add(batch, tokens)
        total = sum(held.values())
        if total <= max_tokens:
            assert got.parcels == []
            continue
        packs += 1
        packed = [part for part, _ in got.parcels]
        assert packed == sorted(packed)
        counts = sorted((held[p] for p in packed), reverse=True)
        # The fullest parts ...
        assert min(counts) >= max(n for p, n in held.items() if p not in packed)
        # ... just enough of them to pack the goal.
        goal = total - max_tokens + max_tokens // 8
        assert sum(counts) >= goal > sum(counts[:-1])
        assert got.tokens == sum(counts)
        for part, parcel in got.parcels:
            assert int(read_parcel(parcel).doc_tokens.sum()) == held.pop(part)
        assert sum(held.values()) <= max_tokens - max_tokens // 8
    assert packs >= 5 if num_shards == 5 else packs >= 3
    assert buffer.flush().tokens == sum(held.values())
