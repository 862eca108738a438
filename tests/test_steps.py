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

from pipeline.steps import CutWindows, ReadDocuments, ShuffleDocuments, TokenizeDocuments
from tests.conftest import DATA
from transforms.documents import Document
from transforms.params import ReadSpec, WindowSpec
from transforms.shards import unpack_document


def pipeline():
    return beam.Pipeline(runner=fn_runner.FnApiRunner())


DEFAULT = ReadSpec()


def check_read(patterns, *, docs, rejects=(), records, spec=DEFAULT, chunk_bytes=1 << 20):
    """ReadDocuments gives exactly these (doc_id, text), (reason, source) and record count."""
    with pipeline() as p:
        out = p | ReadDocuments(patterns, spec, chunk_bytes=chunk_bytes)
        assert_that(out.docs | "Docs" >> beam.Map(lambda d: (d.doc_id, d.text)),
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


def test_tokenize_and_cut_windows():
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(DATA / "tiny.model"))
    za = [1, *sp.encode("abcde"), 2]
    docs = [Document("a", "abcde", "s:1"), Document("b", "", "s:2")]
    spec = WindowSpec(window=4, stride=2, tail="trace_back", score="new")
    from transforms.windows import plan_windows

    plan = plan_windows(len(za) - 1, spec)
    with pipeline() as p:
        out = (
            p
            | beam.Create(docs)
            | TokenizeDocuments(str(DATA / "tiny.model"))
            | CutWindows(spec)
            | beam.Map(lambda w: (w.doc.doc_id, w.tokens.tolist(), w.plan.starts.tolist(),
                                  w.plan.loss_starts.tolist()))
        )
        assert_that(out, equal_to([("a", za, plan.starts.tolist(), plan.loss_starts.tolist()),
                                   ("b", [1, 2], [0], [0])]))


def test_shuffle_groups_documents_by_key_range():
    docs = [Document(f"d{i}", "abc" * i, f"s:{i}") for i in range(1, 30)]
    with pipeline() as p:
        groups = (
            p
            | beam.Create(docs)
            | TokenizeDocuments(None)
            | CutWindows(WindowSpec(window=4, stride=4))
            | ShuffleDocuments(seed=3, num_shards=4)
        )
        summary = groups | beam.Map(
            lambda kv: (kv[0], sorted(unpack_document(b).doc_id for b in kv[1])))
        from transforms.keys import doc_key, shard_of

        expected = {}
        for d in docs:
            expected.setdefault(shard_of(doc_key(3, d.doc_id), 4), []).append(d.doc_id)
        assert_that(summary, equal_to([(k, sorted(v)) for k, v in expected.items()]))


def test_packed_tokens_are_exact_after_the_shuffle():
    docs = [Document("x", "道可道", "s:1")]
    with pipeline() as p:
        groups = (p | beam.Create(docs) | TokenizeDocuments(None)
                  | CutWindows(WindowSpec(window=2, stride=2)) | ShuffleDocuments(0, 1))
        tokens = groups | beam.FlatMap(lambda kv: [unpack_document(b).tokens.tolist()
                                                   for b in kv[1]])
        want = [256, *"道可道".encode(), 257]
        assert_that(tokens, equal_to([want]))
