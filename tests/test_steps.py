"""Each PTransform on a handful of elements (FnApiRunner; never the Prism-first DirectRunner)."""

from __future__ import annotations

import bz2
import gzip
import json

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing.util import assert_that, equal_to

from pipeline.steps import ChooseNumShards, EncodeChunks, ShuffleDocuments, SplitInputs
from tests.conftest import DATA
from transforms.keys import doc_key, shard_of
from transforms.params import ReadSpec, WindowSpec
from transforms.shards import block_documents, unpack_document
from transforms.windows import plan_windows


def pipeline():
    return beam.Pipeline(runner=fn_runner.FnApiRunner())


DEFAULT = ReadSpec()
WINDOWS = WindowSpec(window=8, stride=4)


def encode(p, patterns, *, spec=DEFAULT, windows=WINDOWS, tokenizer=None, num_shards=1,
           chunk_bytes=1 << 20, **kwargs):
    chunks = p | SplitInputs(patterns, spec, chunk_bytes=chunk_bytes)
    shards = chunks | ChooseNumShards(num_shards)
    return chunks | EncodeChunks(spec, windows, tokenizer, shards, **kwargs)


def documents(kv):
    """(shard, block) → each document as it left EncodeChunks."""
    shard, block = kv
    return [(shard, unpack_document(packed)) for packed in block_documents(block)]


def text_of(doc):
    """The text back from the bytes tokenizer's z = [256, bytes…, 257]."""
    assert doc.tokens[0] == 256 and doc.tokens[-1] == 257
    return bytes(doc.tokens[1:-1].astype("u1")).decode("utf-8")


def check_read(patterns, *, docs, rejects=(), records, spec=DEFAULT, chunk_bytes=1 << 20):
    """Reading gives exactly these (doc_id, text), (reason, source) and record count."""
    with pipeline() as p:
        out = encode(p, patterns, spec=spec, chunk_bytes=chunk_bytes)
        got = out.blocks | beam.FlatMap(documents) | beam.Map(lambda sd: sd[1])
        assert_that(got | "Docs" >> beam.Map(lambda d: (d.doc_id, text_of(d))),
                    equal_to(list(docs)), label="CheckDocs")
        assert_that(out.rejects | "Rej" >> beam.Map(lambda r: (r.reason, r.source)),
                    equal_to(list(rejects)), label="CheckRejects")
        assert_that(out.records | beam.Map(lambda r: r.records) | beam.CombineGlobally(sum),
                    equal_to([records]), label="CheckRecords")


LINES = [json.dumps({"text": f"line {i} " + "x" * (i % 13)}) for i in range(200)]


@pytest.mark.parametrize("chunk_bytes", [7, 64, 1000, 1 << 20])
def test_large_files_split_into_ranges_keep_true_line_numbers(tmp_path, chunk_bytes):
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    check_read([str(path)], chunk_bytes=chunk_bytes, records=200,
               docs=[(f"big.jsonl:{i + 1}", json.loads(line)["text"])
                     for i, line in enumerate(LINES)])


def test_last_line_without_newline_and_blank_lines_in_ranges(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"alpha\n\nbeta\r\ngamma")
    check_read([str(path)], spec=ReadSpec(format="lines"), chunk_bytes=3, records=4,
               docs=[("t.txt:1", "alpha"), ("t.txt:3", "beta"), ("t.txt:4", "gamma")],
               rejects=[("empty", f"{path}:2")])


def test_compressed_inputs(tmp_path):
    body = ("\n".join(LINES[:20]) + "\n").encode()
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(body))
    (tmp_path / "b.jsonl.bz2").write_bytes(bz2.compress(body))
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(body))
    texts = [json.loads(line)["text"] for line in LINES[:20]]
    check_read([str(tmp_path / "*")], chunk_bytes=8, records=60,
               docs=[(f"{name}:{i + 1}", t) for name in ("a.jsonl.gz", "b.jsonl.bz2",
                                                         "c.jsonl.zst")
                     for i, t in enumerate(texts)])


def test_parquet_row_groups_are_chunks_with_true_row_numbers(tmp_path):
    texts = [f"doc {i}" for i in range(50)]
    pq.write_table(pa.table({"body": texts, "key": [f"k{i}" for i in range(50)]}),
                   tmp_path / "p.parquet", row_group_size=7)
    check_read([str(tmp_path / "p.parquet")], spec=ReadSpec(text_field="body"), chunk_bytes=1,
               docs=[(f"p.parquet:{i}", t) for i, t in enumerate(texts)], records=50)
    check_read([str(tmp_path / "p.parquet")], spec=ReadSpec(text_field="body", id_field="key"),
               docs=[(f"k{i}", t) for i, t in enumerate(texts)], records=50)


def test_text_files_relative_ids_and_each_file_read_once(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "one.txt").write_text("first")
    (tmp_path / "a" / "b" / "two.txt").write_text("second\nfile")
    check_read([str(tmp_path / "a" / "*.txt"), str(tmp_path / "a" / "**"),
                str(tmp_path / "a" / "b" / "two.txt")],
               docs=[("b/two.txt", "second\nfile"), ("one.txt", "first")], records=2)


def test_encode_chunks_encodes_plans_and_keys_each_document(tmp_path):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(DATA / "tiny.model"))
    texts = {"a": "abcde", "b": "The quick brown fox jumps over the lazy dog. " * 3}
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in texts.items()))
    spec = WindowSpec(window=4, stride=2, tail="trace_back", score="new", seed=5)
    want = {}
    for doc_id, text in texts.items():
        z = [1, *sp.encode(text), 2]
        plan = plan_windows(len(z) - 1, spec)
        want[doc_id] = (doc_key(5, doc_id), z, plan.starts.tolist(), plan.lengths.tolist(),
                        plan.loss_starts.tolist(), plan.covered, f"{tmp_path}/in.jsonl")
    with pipeline() as p:
        out = encode(p, [str(tmp_path / "in.jsonl")], spec=ReadSpec(id_field="id"),
                     windows=spec, tokenizer=str(DATA / "tiny.model"))
        got = out.blocks | beam.FlatMap(documents) | beam.Map(
            lambda sd: (sd[1].doc_id, (sd[1].doc_key, sd[1].tokens.tolist(),
                                       sd[1].plan.starts.tolist(), sd[1].plan.lengths.tolist(),
                                       sd[1].plan.loss_starts.tolist(), sd[1].plan.covered,
                                       sd[1].source.rsplit(":", 1)[0])))
        assert_that(got, equal_to(list(want.items())))


@pytest.mark.parametrize("batch_chars", [1, 50, 1 << 20])
def test_batches_do_not_show_in_what_is_encoded(tmp_path, batch_chars):
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    with pipeline() as p:
        out = encode(p, [str(path)], num_shards=3, batch_chars=batch_chars)
        got = out.blocks | beam.FlatMap(documents) | beam.Map(
            lambda sd: (sd[0], sd[1].doc_id, text_of(sd[1]), sd[1].plan.starts.tolist()))
        want = []
        for i, line in enumerate(LINES):
            doc_id, text = f"in.jsonl:{i + 1}", json.loads(line)["text"]
            starts = plan_windows(len(text.encode()) + 1, WINDOWS).starts.tolist()
            want.append((shard_of(doc_key(0, doc_id), 3), doc_id, text, starts))
        assert_that(got, equal_to(want))


def test_batches_encoded_at_once_give_each_document_its_own_ids(tmp_path):
    """Small batches keep several SentencePiece calls in flight on one model at once."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(DATA / "tiny.model"))
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    with pipeline() as p:
        out = encode(p, [str(path)], tokenizer=str(DATA / "tiny.model"), batch_chars=40)
        got = out.blocks | beam.FlatMap(documents) | beam.Map(
            lambda sd: (sd[1].doc_id, sd[1].tokens.tolist()))
        want = [(f"in.jsonl:{i + 1}", [1, *sp.encode(json.loads(line)["text"]), 2])
                for i, line in enumerate(LINES)]
        assert_that(got, equal_to(want))


def test_num_shards_from_input_sizes_counts_each_file_once(tmp_path):
    (tmp_path / "a.jsonl").write_text("\n".join(LINES[:40]) + "\n")  # split into chunks
    (tmp_path / "b.txt").write_text("x" * 120)
    size = (tmp_path / "a.jsonl").stat().st_size + 120
    with pipeline() as p:
        chunks = p | SplitInputs([str(tmp_path / "*")], DEFAULT, chunk_bytes=64)
        assert_that(chunks | "Chunks" >> beam.combiners.Count.Globally(),
                    equal_to([(size - 120 + 63) // 64 + 1]), label="CheckChunks")
        assert_that(chunks | "Auto" >> ChooseNumShards(None, target_bytes=100),
                    equal_to([-(-size // 100)]), label="CheckAuto")
        assert_that(chunks | "Given" >> ChooseNumShards(7, target_bytes=100),
                    equal_to([7]), label="CheckGiven")


def test_shuffle_groups_documents_by_key_range(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("".join("abc" * i + "\n" for i in range(1, 30)))
    with pipeline() as p:
        out = encode(p, [str(path)], spec=ReadSpec(format="lines"), num_shards=4)
        summary = out.blocks | ShuffleDocuments() | beam.Map(
            lambda kv: (kv[0], sorted(unpack_document(b).doc_id for b in kv[1])))
        expected = {}
        for i in range(1, 30):
            doc_id = f"in.txt:{i}"
            expected.setdefault(shard_of(doc_key(0, doc_id), 4), []).append(doc_id)
        assert_that(summary, equal_to([(k, sorted(v)) for k, v in expected.items()]))


def test_packed_tokens_are_exact_after_the_shuffle(tmp_path):
    (tmp_path / "x.txt").write_text("道可道")
    with pipeline() as p:
        out = encode(p, [str(tmp_path / "x.txt")], windows=WindowSpec(window=2, stride=2))
        tokens = out.blocks | ShuffleDocuments() | beam.FlatMap(
            lambda kv: [unpack_document(b).tokens.tolist() for b in kv[1]])
        want = [256, *"道可道".encode(), 257]
        assert_that(tokens, equal_to([want]))
