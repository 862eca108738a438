"""The job end to end: exact rows, exact counts, identical bytes, clear errors (docs/format.md).

``PipelineTests`` also runs under plain unittest::

    python -m unittest -v tests.job.test_pipeline.PipelineTests.test_targets_exactly_once \
        tests.job.test_pipeline.PipelineTests.test_padding_eos_is_not_ignored_eos
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import pathlib
import re
import tempfile
import unittest
from collections import defaultdict

import pyarrow.parquet as pq
import pytest
import sentencepiece as spm

from tests.common.jobs import dir_bytes, read_rows, run_job, write_jsonl
from tests.common.paths import DATA, SAMPLES
from transforms.dataset.manifest import MANIFEST_NAME
from transforms.dataset.schema import REJECTS_DIR
from transforms.plan.keys import doc_key, shard_of
from transforms.tokenize.tokenizers import ByteTokenizer

pytestmark = pytest.mark.slow  # every test here runs the whole job

TEXTS = ["abcde", "abcd", "a", "The Fox and the Grapes. " * 9, "道可道，非常道。" * 4, "xy" * 40]


def scored_targets_by_doc(rows):
    out = defaultdict(list)
    for r in rows:
        t = r["tokens"]
        out[r["doc_id"]].append((r["window_index"], t[1 + r["loss_start"] : r["length"] + 1]))
    return {d: sum((t for _, t in sorted(ws)), []) for d, ws in out.items()}


class PipelineTests(unittest.TestCase):
    @pytest.mark.slow
    def test_targets_exactly_once(self):
        """score=new with keep or trace_back scores z[1:] of every document exactly once."""
        tok = ByteTokenizer()
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            src = write_jsonl(tmp / "in.jsonl", [{"id": f"d{i}", "text": t}
                                                  for i, t in enumerate(TEXTS)])
            for n, (window, stride, tail) in enumerate(
                [(2, 2, "keep"), (8, 3, "keep"), (8, 3, "trace_back"), (16, 16, "trace_back"),
                 (5, 1, "keep")]
            ):
                out = tmp / f"out{n}"
                manifest = run_job(out, "--input", str(src), "--tokenizer", "bytes",
                                   "--id-field", "id", "--window", str(window), "--stride",
                                   str(stride), "--tail", tail, "--score", "new",
                                   "--num-shards", "2")
                got = scored_targets_by_doc(read_rows(out))
                want = {f"d{i}": tok.encode(t).tolist()[1:] for i, t in enumerate(TEXTS)}
                self.assertEqual(got, want, (window, stride, tail))
                pairs = sum(len(t.encode()) + 1 for t in TEXTS)
                self.assertEqual(manifest["counts"]["scored_targets"], pairs)
                self.assertEqual(manifest["counts"]["uncovered_pairs"], 0)

    def test_padding_eos_is_not_ignored_eos(self):
        """The worked batch of docs/format.md#collate, end to end: documents "a" and "" (kept), the
        bytes tokenizer and window 2 give windows [BOS a EOS] and [BOS EOS]; read back and padded
        with EOS, both EOS targets count and the padding does not."""
        import torch

        from reader import WindowDataset, collate, token_nll

        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            src = write_jsonl(tmp / "in.jsonl", [{"id": "a", "text": "a"},
                                                 {"id": "b", "text": ""}])
            run_job(tmp / "out", "--input", str(src), "--tokenizer", "bytes", "--id-field",
                    "id", "--window", "2", "--keep-empty")
            ds = WindowDataset(tmp / "out", verify=True)
            windows = sorted((ds[i] for i in range(len(ds))), key=lambda w: w["doc_id"])
        batch = collate(windows, pad_id=ds.eos_id)
        self.assertEqual(batch["input_ids"].tolist(), [[256, 97], [256, 257]])
        self.assertEqual(batch["shift_labels"].tolist(), [[97, 257], [257, -100]])
        self.assertEqual(int(batch["num_targets"]), 3)
        self.assertEqual(int((batch["shift_labels"] == 257).sum()), 2)
        # The model gives its targets probabilities 1/2, 1/4, 1/8: mean NLL = 6 ln2 / 3.
        probs = {(0, 0): 0.5, (0, 1): 0.25, (1, 0): 0.125}
        logits = torch.full((2, 2, 258), -1e9, dtype=torch.float64)
        for (b, t), p in probs.items():
            target = int(batch["shift_labels"][b, t])
            logits[b, t, :] = math.log((1 - p) / 257)
            logits[b, t, target] = math.log(p)
        logits[1, 1, :] = 0.0  # padding: whatever it predicts must not count
        nll_sum, count = token_nll(logits, batch["shift_labels"])
        self.assertEqual(int(count), 3)
        self.assertAlmostEqual(float(nll_sum) / int(count), 2 * math.log(2), places=9)


# ------------------------------------------------------------------ exact rows


def test_worked_example_rows(tmp_path):
    src = write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": "abcde"}, {"text": "abcd"}])
    manifest = run_job(tmp_path / "out", "--input", str(src), "--tokenizer", "bytes",
                       "--window", "2", "--stride", "2", "--tail", "keep")
    rows = read_rows(tmp_path / "out")
    by_doc = defaultdict(list)
    for r in rows:
        by_doc[r["doc_id"]].append((r["start"], r["length"], r["loss_start"], r["tokens"]))
    assert dict(by_doc) == {
        "a.jsonl:1": [(0, 2, 0, [256, 97, 98]), (2, 2, 0, [98, 99, 100]),
                      (4, 2, 0, [100, 101, 257])],
        "a.jsonl:2": [(0, 2, 0, [256, 97, 98]), (2, 2, 0, [98, 99, 100]), (4, 1, 0, [100, 257])],
    }
    assert {r["doc_tokens"] for r in rows if r["doc_id"] == "a.jsonl:1"} == {7}
    assert manifest["counts"] == {
        "records": 2, "documents": 2, "documents_without_windows": 0, "skipped": {},
        "repaired": {"invalid_utf8": 0}, "windows": 6, "tokens": 17, "pairs": 11,
        "scored_targets": 11, "uncovered_pairs": 0,
    }
    assert manifest["windows"] == {"window": 2, "stride": 2, "tail": "keep", "min_tail": 1,
                                   "score": "all", "offset": "zero", "seed": 0}
    assert manifest["tokenizer"] == {"kind": "bytes", "vocab_size": 258, "bos_id": 256,
                                     "eos_id": 257, "sha256": None}


def test_rows_are_ordered_by_key_and_shards_are_key_ranges(corpus, tmp_path):
    manifest = run_job(tmp_path / "out", "--input", str(corpus), "--tokenizer", "bytes",
                       "--window", "8", "--stride", "4", "--num-shards", "3", "--seed", "7")
    assert [s["file"] for s in manifest["shards"]] == [
        f"part-0000{i}-of-00003.parquet" for i in range(3)
    ]
    order = []
    for i, shard in enumerate(manifest["shards"]):
        rows = pq.read_table(tmp_path / "out" / shard["file"]).to_pylist()
        assert len(rows) == shard["rows"]
        for r in rows:
            assert r["doc_key"] == doc_key(7, r["doc_id"])
            assert shard_of(r["doc_key"], 3) == i
            order.append((r["doc_key"], r["doc_id"], r["start"]))
    assert order == sorted(order)
    # All windows of a document are consecutive.
    ids = [o[1] for o in order]
    assert len({d for d in ids}) == len([d for k, d in enumerate(ids) if k == 0 or ids[k - 1] != d])


def test_sample_corpus_end_to_end_with_sentencepiece(tmp_path):
    """Every row equals [BOS] + encode(text) + [EOS] sliced at start; counts and hashes hold."""
    out = tmp_path / "out"
    manifest = run_job(out, "--input", str(SAMPLES / "corpus" / "*.jsonl"), "--tokenizer",
                       str(SAMPLES / "spm.model"), "--id-field", "id", "--window", "256",
                       "--stride", "192", "--tail", "trace_back", "--score", "new",
                       "--num-shards", "3")
    sp = spm.SentencePieceProcessor(model_file=str(SAMPLES / "spm.model"))
    texts = {}
    for path in sorted((SAMPLES / "corpus").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            texts[record["id"]] = record["text"]
    z = {d: [sp.bos_id(), *sp.encode(t), sp.eos_id()] for d, t in texts.items()}
    rows = read_rows(out)
    for r in rows:
        assert r["tokens"] == z[r["doc_id"]][r["start"] : r["start"] + r["length"] + 1]
        assert r["doc_tokens"] == len(z[r["doc_id"]])
    assert scored_targets_by_doc(rows) == {d: zz[1:] for d, zz in z.items()}
    c = manifest["counts"]
    assert c["documents"] == len(texts) == c["records"]
    assert c["windows"] == len(rows)
    assert c["tokens"] == sum(r["length"] + 1 for r in rows)
    assert c["pairs"] == sum(len(v) - 1 for v in z.values()) == c["scored_targets"]
    assert c["scored_targets"] == sum(r["length"] - r["loss_start"] for r in rows)
    assert manifest["tokenizer"]["sha256"] == hashlib.sha256(
        (SAMPLES / "spm.model").read_bytes()).hexdigest()
    assert manifest["tokenizer"]["vocab_size"] == sp.get_piece_size()
    for shard in manifest["shards"]:
        data = (out / shard["file"]).read_bytes()
        assert shard["sha256"] == hashlib.sha256(data).hexdigest()
        assert shard["bytes"] == len(data)
        assert shard["rows"] == pq.ParquetFile(out / shard["file"]).metadata.num_rows


def test_duckdb_and_pandas_read_the_shards(corpus, tmp_path):
    import duckdb

    manifest = run_job(tmp_path / "out", "--input", str(corpus), "--tokenizer", "bytes",
                       "--window", "8", "--num-shards", "2")
    got = duckdb.sql(
        f"SELECT count(*), sum(length + 1) FROM '{tmp_path / 'out'}/part-*.parquet'"
    ).fetchall()[0]
    assert got == (manifest["counts"]["windows"], manifest["counts"]["tokens"])
    import pandas as pd

    frame = pd.read_parquet(tmp_path / "out" / manifest["shards"][0]["file"])
    assert list(frame.columns) == ["doc_id", "doc_key", "window_index", "start", "length",
                                   "loss_start", "doc_tokens", "tokens"]


# ------------------------------------------------------------------ determinism


@pytest.mark.slow
def test_same_bytes_on_both_direct_modes_and_seed_changes_only_order(tmp_path):
    src_dir = tmp_path / "in"
    for k in range(3):
        write_jsonl(src_dir / f"f{k}.jsonl", [{"text": f"{t} {k}"} for t in TEXTS * 3])
    args = ["--input", str(src_dir / "*.jsonl"), "--tokenizer", str(DATA / "tiny.model"),
            "--window", "16", "--stride", "8", "--tail", "trace_back", "--num-shards", "3",
            "--offset", "random", "--seed", "11"]
    run_job(tmp_path / "a", *args, "--direct_running_mode=in_memory")
    run_job(tmp_path / "b", *args, "--direct_running_mode=multi_processing",
            "--direct_num_workers=2")
    a, b = dir_bytes(tmp_path / "a"), dir_bytes(tmp_path / "b")
    assert sorted(a) == [MANIFEST_NAME] + [f"part-0000{i}-of-00003.parquet" for i in range(3)]
    assert a == b

    run_job(tmp_path / "c", *args[:-1], "12")
    rows_a, rows_c = read_rows(tmp_path / "a"), read_rows(tmp_path / "c")
    docs_a = list(dict.fromkeys(r["doc_id"] for r in rows_a))
    docs_c = list(dict.fromkeys(r["doc_id"] for r in rows_c))
    assert docs_a != docs_c and sorted(docs_a) == sorted(docs_c)
    # Same documents, same tokens; only order (and the random offsets) follow the seed.
    assert {r["doc_id"]: r["doc_tokens"] for r in rows_a} == {
        r["doc_id"]: r["doc_tokens"] for r in rows_c
    }


def test_seed_changes_order_and_nothing_else_with_zero_offset(corpus, tmp_path):
    args = ["--input", str(corpus), "--tokenizer", "bytes", "--window", "8", "--stride", "5"]
    run_job(tmp_path / "a", *args, "--seed", "1")
    run_job(tmp_path / "b", *args, "--seed", "2")
    key = lambda r: (r["doc_id"], r["start"])  # noqa: E731
    strip = lambda r: {k: v for k, v in r.items() if k != "doc_key"}  # noqa: E731
    rows_a, rows_b = read_rows(tmp_path / "a"), read_rows(tmp_path / "b")
    assert [strip(r) for r in sorted(rows_a, key=key)] == [
        strip(r) for r in sorted(rows_b, key=key)
    ]
    assert [r["doc_id"] for r in rows_a] != [r["doc_id"] for r in rows_b]


def test_auto_shard_count_is_one_for_small_data(corpus, tmp_path):
    manifest = run_job(tmp_path / "out", "--input", str(corpus), "--tokenizer", "bytes")
    assert manifest["num_shards"] == 1


# ------------------------------------------------------------------ bad input


def test_bad_records_are_counted_and_kept(tmp_path):
    src = tmp_path / "in" / "bad.jsonl"
    src.parent.mkdir()
    src.write_bytes(
        b'{"text": "good"}\n'
        b"{oops\n"
        b'{"title": "no text"}\n'
        b'{"text": 42}\n'
        b'{"text": ""}\n'
        b'{"text": "bad \xff byte"}\n'
        b"\n"
        b'"just a string"\n'
    )
    out = tmp_path / "out"
    manifest = run_job(out, "--input", str(src), "--tokenizer", "bytes", "--window", "4")
    c = manifest["counts"]
    assert c["skipped"] == {"blank_line": 1, "empty": 1, "malformed_json": 1,
                            "missing_text": 1, "not_an_object": 1, "text_not_string": 1}
    assert (c["records"], c["documents"], c["repaired"]) == (8, 2, {"invalid_utf8": 1})
    rejects = {p.name: [json.loads(x) for x in p.read_text().splitlines()]
               for p in (out / REJECTS_DIR).iterdir()}
    assert rejects["malformed_json.jsonl"][0]["source"] == f"{src}:2"
    assert rejects["malformed_json.jsonl"][0]["record"] == "{oops"
    assert rejects["text_not_string.jsonl"][0]["source"] == f"{src}:4"
    assert sum(len(v) for v in rejects.values()) == 6
    rows = read_rows(out)
    assert {r["doc_id"] for r in rows} == {"bad.jsonl:1", "bad.jsonl:6"}

    manifest = run_job(tmp_path / "strict", "--input", str(src), "--tokenizer", "bytes",
                       "--invalid-utf8", "reject", "--keep-empty")
    assert manifest["counts"]["skipped"]["invalid_utf8"] == 1
    assert "empty" not in manifest["counts"]["skipped"]
    assert manifest["counts"]["documents"] == 2


def test_reject_files_list_records_in_input_order(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", ["{bad" if i % 2 else {"text": f"ok {i}"}
                                              for i in range(24)])
    run_job(tmp_path / "out", "--input", str(src), "--tokenizer", "bytes")
    lines = (tmp_path / "out" / REJECTS_DIR / "malformed_json.jsonl").read_text().splitlines()
    assert [json.loads(x)["source"] for x in lines] == [f"{src}:{n}" for n in range(2, 25, 2)]


def test_duplicate_ids_are_rejected_not_reordered(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "x", "text": "one"},
                                              {"id": "x", "text": "two"},
                                              {"id": "y", "text": "three"}])
    manifest = run_job(tmp_path / "out", "--input", str(src), "--tokenizer", "bytes",
                       "--id-field", "id")
    assert manifest["counts"]["skipped"] == {"duplicate_id": 1}
    (reject,) = [json.loads(x) for x in
                 (tmp_path / "out" / REJECTS_DIR / "duplicate_id.jsonl").read_text().splitlines()]
    assert reject["source"] == f"{src}:2"
    # The dropped record is kept for inspection, as every other reject's is.
    assert json.loads(reject["record"]) == {"id": "x", "text": "two"}
    assert reject["truncated"] is False
    assert {r["doc_id"] for r in read_rows(tmp_path / "out")} == {"x", "y"}


def test_shards_written_at_once_or_one_by_one_are_the_same_bytes(tmp_path):
    """WriteShards writes several shards at once and emits the last ones (and their
    duplicate-id rejects) when the bundle ends: nothing may be lost or change."""
    from pipeline.launch.context import Tuning

    records = [{"id": f"d{i % 40}", "text": f"text {i} " * (i % 9 + 1)} for i in range(60)]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    args = ("--input", str(src), "--tokenizer", "bytes", "--id-field", "id", "--window", "8",
            "--num-shards", "7")
    manifest = run_job(tmp_path / "at-once", *args)
    run_job(tmp_path / "one-by-one", *args, tuning=Tuning(shards_at_once=1))
    assert dir_bytes(tmp_path / "at-once") == dir_bytes(tmp_path / "one-by-one")
    assert manifest["num_shards"] == 7 and len(manifest["shards"]) == 7
    assert manifest["counts"]["skipped"] == {"duplicate_id": 20}
    rejected = (tmp_path / "at-once" / REJECTS_DIR / "duplicate_id.jsonl").read_text().splitlines()
    assert sorted(json.loads(r)["source"] for r in rejected) == sorted(
        f"{src}:{i + 1}" for i in range(40, 60))


def test_unreadable_file_fails_the_job_naming_it(tmp_path):
    bad = tmp_path / "in" / "broken.jsonl.gz"
    bad.parent.mkdir()
    bad.write_bytes(b"this is not gzip")
    with pytest.raises(Exception, match="broken.jsonl.gz"):
        run_job(tmp_path / "out", "--input", str(bad), "--tokenizer", "bytes")
    assert not (tmp_path / "out" / MANIFEST_NAME).exists()


@pytest.mark.slow
def test_parquet_input_bad_rows_and_huge_documents(tmp_path):
    import pyarrow as pa

    src = tmp_path / "in" / "p.parquet"
    src.parent.mkdir()
    pq.write_table(pa.table({"text": ["good one", None, "", "x" * 100, "fine"],
                             "n": [1, 2, 3, 4, 5]}), src, row_group_size=2)
    out = tmp_path / "out"
    manifest = run_job(out, "--input", str(src), "--tokenizer", "bytes", "--max-doc-bytes", "50")
    assert manifest["counts"]["skipped"] == {"empty": 1, "missing_text": 1, "too_large": 1}
    assert {r["doc_id"] for r in read_rows(out)} == {"p.parquet:0", "p.parquet:4"}
    (big,) = [json.loads(x)
              for x in (out / REJECTS_DIR / "too_large.jsonl").read_text().splitlines()]
    assert big["source"] == f"{src}#row=3" and "100 bytes" in big["detail"]

    # A text column of another type: every row is unusable, and the job fails
    # (an empty dataset is never what was asked for).
    pq.write_table(pa.table({"text": [1, 2]}), src)
    with pytest.raises(Exception, match="all 2 records skipped as text_not_string"):
        run_job(tmp_path / "o2", "--input", str(src), "--tokenizer", "bytes")
    assert not (tmp_path / "o2").exists()  # what the failed job wrote, and OUTPUT, removed

    # A missing text column fails the job naming the file and the columns.
    with pytest.raises(Exception, match="has no column 'body'"):
        run_job(tmp_path / "o3", "--input", str(src), "--tokenizer", "bytes",
                "--text-field", "body")


def test_text_and_lines_formats_with_compression(tmp_path):
    import gzip

    (tmp_path / "in" / "sub").mkdir(parents=True)
    (tmp_path / "in" / "a.txt").write_text("whole file\nis one document\n")
    (tmp_path / "in" / "sub" / "b.txt.gz").write_bytes(gzip.compress("道可道".encode()))
    manifest = run_job(tmp_path / "out", "--input", str(tmp_path / "in" / "**"),
                       "--tokenizer", "bytes", "--window", "64")
    rows = read_rows(tmp_path / "out")
    assert sorted(r["doc_id"] for r in rows) == ["a.txt", "sub/b.txt.gz"]
    assert manifest["counts"]["documents"] == 2
    manifest = run_job(tmp_path / "lines", "--input", str(tmp_path / "in" / "a.txt"),
                       "--tokenizer", "bytes", "--format", "lines")
    assert sorted(r["doc_id"] for r in read_rows(tmp_path / "lines")) == ["a.txt:1", "a.txt:2"]


def test_lost_input_fails_the_job_and_writes_no_manifest(corpus, tmp_path):
    """If the runner lost a whole file, the receipts say so: no manifest, a loud error."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    from pipeline.graph import build_pipeline
    from tests.common.job_data import context_of

    out = tmp_path / "out"
    options = PipelineOptions([])
    expected = {str(corpus): corpus.stat().st_size, str(tmp_path / "lost.jsonl"): 10}
    context = context_of("--input", str(corpus), "--output", str(out), files=expected)
    with (
        pytest.raises(Exception, match=r"1 input files were never read \(e.g. .*lost.jsonl"),
        beam.Pipeline(runner=fn_runner.FnApiRunner(), options=options) as p,
    ):
        build_pipeline(p, context, expected_files=expected)
    assert not (out / MANIFEST_NAME).exists()


@pytest.mark.slow
def test_a_spilled_shuffle_writes_the_bytes_of_the_runner_s(tmp_path):
    """With tiny chunks and parts, the file shuffle (the local default) spills every block
    and writes shards part by part: the same bytes as the runner's shuffle, in one process
    and with two worker processes."""
    from apache_beam.metrics.metric import MetricsFilter

    from pipeline.job import submit
    from pipeline.launch.context import Tuning

    tiny = Tuning(chunk_bytes=3000, part_text_bytes=700)
    records = [{"id": f"d{i % 150}", "text": f"{TEXTS[i % len(TEXTS)]} {i}"} for i in range(180)]
    # Malformed and empty records in every range of a.jsonl: rejects spilled chunk by chunk.
    bad = ["{oops" if i % 2 else {"id": f"e{i}", "text": ""} for i in range(24)]
    write_jsonl(tmp_path / "in" / "a.jsonl",
                [r for k in range(24) for r in (*records[5 * k : 5 * k + 5], bad[k])])
    (tmp_path / "in" / "b.jsonl.gz").write_bytes(gzip.compress(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records[120:]).encode(),
        mtime=0))
    args = ["--input", str(tmp_path / "in" / "*"), "--tokenizer", "bytes", "--id-field", "id",
            "--window", "16", "--stride", "12", "--num-shards", "3"]
    runner = run_job(tmp_path / "runner", *args, "--shuffle", "runner", tuning=tiny)
    assert runner["counts"]["skipped"] == {"duplicate_id": 30, "empty": 12, "malformed_json": 12}
    assert (tmp_path / "in" / "a.jsonl").stat().st_size > 3 * 3000  # read in ranges
    for name, extra in (("in-memory", []),
                        ("two-processes", ["--direct_running_mode=multi_processing",
                                           "--direct_num_workers=2"])):
        job = submit(["--output", str(tmp_path / name), *args, *extra], tuning=tiny)
        assert job.config.shuffle == "files"
        job.result.wait_until_finish()
        spilled = job.result.metrics().query(MetricsFilter().with_name("spilled_bytes"))
        assert sum(c.committed for c in spilled["counters"]) > 0
        assert dir_bytes(tmp_path / name) == dir_bytes(tmp_path / "runner"), name


# ------------------------------------------------------------------ splits and samples


def _split_corpus(tmp_path, n=3000):
    """``n`` short documents (ids FILE:LINE), a few of them long enough for several
    overlapping windows, and two bad records."""
    records = [{"text": f"document {i} " + "lorem ipsum " * (i % 7)} for i in range(n)]
    records[5] = "{not json"
    records[9] = {"text": ""}
    return write_jsonl(tmp_path / "in" / "c.jsonl", records)


def _docs_by_split(out, names):
    return {name: {r["doc_id"] for r in read_rows(out / name)} for name in names}


def test_split_job_writes_a_finished_dataset_per_split(tmp_path):
    from reader import WindowDataset
    from transforms.plan.splits import SPLITS_NAME

    src = _split_corpus(tmp_path)
    out = tmp_path / "out"
    record = run_job(out, "--input", str(src), "--tokenizer", "bytes", "--window", "16",
                     "--stride", "4", "--split", "val=0.1,test=0.05", "--num-shards", "4")
    assert sorted(p.name for p in out.iterdir()) == ["_rejects", SPLITS_NAME, "test", "train",
                                                     "val"]
    assert [(s["name"], s["num_shards"]) for s in record["splits"]] == [
        ("val", 1), ("test", 1), ("train", 3)]
    docs = _docs_by_split(out, ("val", "test", "train"))
    # Disjoint and covering, although every document has several overlapping windows.
    everything = {f"c.jsonl:{i + 1}" for i in range(3000)} - {"c.jsonl:6", "c.jsonl:10"}
    assert set().union(*docs.values()) == everything
    assert sum(map(len, docs.values())) == len(everything)
    for name, p in (("val", 0.1), ("test", 0.05)):
        assert abs(len(docs[name]) - 2998 * p) < 4 * math.sqrt(2998 * p * (1 - p))
    # Each split is a dataset of its own that the reader opens as any other.
    manifests = {}
    for name in docs:
        ds = WindowDataset(out / name, verify=True)
        manifests[name] = ds.manifest
        assert {ds[i]["doc_id"] for i in range(len(ds))} == docs[name]
        split = ds.manifest.split
        assert split is not None and split.name == name
        assert ds.manifest.counts.documents == len(docs[name])
        assert ds.manifest.counts.records == len(docs[name])
        assert ds.manifest.counts.skipped == {}
        job = split.job
        assert job is not None and job.records == 3000
        assert job.skipped == {"empty": 1, "malformed_json": 1}
    # The counts add up across splits: records = Σ documents + skipped.
    c = record["counts"]
    assert c["records"] == 3000 == sum(m.counts.documents for m in manifests.values()) + 2
    assert c["skipped"] == {"empty": 1, "malformed_json": 1} and c["sampled_out"] == 0
    for key in ("windows", "tokens", "scored_targets", "pairs"):
        assert c[key] == sum(getattr(m.counts, key) for m in manifests.values())
    assert sorted(p.name for p in (out / "_rejects").iterdir()) == ["empty.jsonl",
                                                                    "malformed_json.jsonl"]
    fingerprints = {m.fingerprint for m in manifests.values()}
    assert len(fingerprints) == 3 and record["fingerprint"] not in fingerprints
    with pytest.raises(FileNotFoundError,
                       match=r"holds the splits val, test, train of one job .*: open .*/val$"):
        WindowDataset(out)  # the job's top directory is not one dataset


def _oracle(src, spec):
    """{split name: doc_ids} as `transforms.plan.splits.SplitSpec` assigns the corpus's documents
    (every line of ``src`` but the two bad records), with their P (pairs)."""
    texts = {}
    for n, line in enumerate(src.read_text(encoding="utf-8").splitlines(), 1):
        if n not in (6, 10):
            texts[f"c.jsonl:{n}"] = json.loads(line)["text"]
    ids = sorted(texts)
    kept = spec.kept(ids) if spec.sample < 1 else [True] * len(ids)
    names = spec.names or ("",)  # "": a job without splits
    where = spec.split_of(ids) if spec.names else [0] * len(ids)
    out = {name: set() for name in names}
    for doc, keep, k in zip(ids, kept, where, strict=True):
        if keep:
            out[names[k]].add(doc)
    pairs = {d: len(t.encode()) + 1 for d, t in texts.items()}
    return out, pairs


def test_each_document_lands_in_the_split_its_id_gives_whatever_the_windows(tmp_path):
    """The job sends every document to `SplitSpec.split_of(doc_id)` (whose independence from
    everything but the split seed and fractions tests/transforms/plan/test_splits.py proves on the
    math): two jobs that share nothing but the split, each held to that oracle document by
    document."""
    from transforms.plan.splits import SplitSpec

    src = _split_corpus(tmp_path, n=400)
    base = ["--input", str(src), "--tokenizer", "bytes", "--split", "val=0.2"]
    run_job(tmp_path / "a", *base, "--window", "8", "--stride", "3", "--tail", "trace_back",
            "--score", "new", "--num-shards", "3")
    want, _ = _oracle(src, SplitSpec(splits=(("val", 0.2),)))
    assert _docs_by_split(tmp_path / "a", ("val", "train")) == want
    # Another seed, offsets, shuffle and split seed; tail drop leaves the documents shorter
    # than a window without rows, and never moves one.
    run_job(tmp_path / "b", *base, "--window", "40", "--tail", "drop", "--offset", "random",
            "--seed", "5", "--num-shards", "2", "--shuffle", "runner", "--split-seed", "1")
    other, pairs = _oracle(src, SplitSpec(splits=(("val", 0.2),), seed=1))
    assert other != want
    assert _docs_by_split(tmp_path / "b", ("val", "train")) == {
        name: {d for d in docs if pairs[d] >= 40} for name, docs in other.items()}
    assert 0 < sum(p < 40 for p in pairs.values()) < len(pairs)


@pytest.mark.slow
def test_split_job_bytes_are_reproducible_and_overwrite_replaces_them(tmp_path):
    src = _split_corpus(tmp_path, n=300)
    args = ["--input", str(src), "--tokenizer", "bytes", "--window", "8", "--split",
            "val=0.1", "--sample", "0.5"]
    run_job(tmp_path / "a", *args)
    run_job(tmp_path / "b", *args, "--shuffle", "runner")
    run_job(tmp_path / "b", *args, "--overwrite")
    assert dir_bytes(tmp_path / "a") == dir_bytes(tmp_path / "b")
    # A split job over a plain dataset, and a plain job over a split job's output.
    run_job(tmp_path / "c", "--input", str(src), "--tokenizer", "bytes")
    run_job(tmp_path / "c", *args, "--overwrite")
    assert dir_bytes(tmp_path / "c") == dir_bytes(tmp_path / "a")
    run_job(tmp_path / "a", "--input", str(src), "--tokenizer", "bytes", "--overwrite")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        MANIFEST_NAME, REJECTS_DIR, "part-00000-of-00001.parquet"]


def test_a_sample_keeps_the_documents_its_ids_give_and_counts_the_rest(tmp_path):
    """The job keeps `SplitSpec.kept(doc_id)` (nesting and independence from the windows are
    the math of tests/transforms/plan/test_splits.py) and counts the others; a sampled split job's
    validation set is the full job's within the sample."""
    from transforms.plan.splits import SplitSpec

    src = _split_corpus(tmp_path, n=1000)
    base = ["--input", str(src), "--tokenizer", "bytes"]
    small = run_job(tmp_path / "s1", *base, "--window", "32", "--stride", "5", "--sample",
                    "0.1", "--num-shards", "3", "--seed", "4")
    want = _oracle(src, SplitSpec(sample=0.1))[0][""]
    assert {r["doc_id"] for r in read_rows(tmp_path / "s1")} == want
    assert abs(len(want) - 100) < 4 * math.sqrt(1000 * 0.1 * 0.9)
    c = small["counts"]
    assert small["sample"] == {"fraction": 0.1, "seed": 0}
    assert c["records"] == 1000 == c["documents"] + sum(c["skipped"].values()) + c["sampled_out"]
    assert c["documents"] == len(want) and c["sampled_out"] == 998 - len(want)
    # A sampled split job, with another sample seed: its val and train are the full split's
    # documents that this sample keeps.
    part = run_job(tmp_path / "part", *base, "--window", "8", "--split", "val=0.2", "--sample",
                   "0.2", "--sample-seed", "1")
    full, _ = _oracle(src, SplitSpec(splits=(("val", 0.2),)))
    kept = _oracle(src, SplitSpec(sample=0.2, sample_seed=1))[0][""]
    assert kept != _oracle(src, SplitSpec(sample=0.2))[0][""]
    assert _docs_by_split(tmp_path / "part", ("val", "train")) == {
        name: docs & kept for name, docs in full.items()}
    assert part["sample"] == {"fraction": 0.2, "seed": 1}
    assert part["counts"]["sampled_out"] == 998 - len(kept)


def test_the_sample_seed_is_part_of_the_fingerprint(tmp_path):
    src = _split_corpus(tmp_path, n=50)
    base = ["--input", str(src), "--tokenizer", "bytes", "--sample", "0.5"]
    a = run_job(tmp_path / "a", *base)
    b = run_job(tmp_path / "b", *base, "--sample-seed", "1")
    assert a["fingerprint"] != b["fingerprint"]
    assert a["windows"] == b["windows"] and a["reading"] == b["reading"]


@pytest.mark.parametrize(("flags", "message"), [
    (["--split", "val=1.5"], r"--split `val` must be a number in \(0, 1\), but got 1.5"),
    (["--split", "val=0.6,test=0.6"], "add up to 1.2, more than 1"),
    (["--split", "_rejects=0.1"], "split name '_rejects' is not a safe directory name"),
    (["--split", "val"], "is not NAME=FRACTION"),
    (["--sample", "0"], r"--sample must be a number in \(0, 1\], but got 0.0"),
    (["--split-seed", "-2", "--split", "val=0.1"], "--split-seed must be an integer"),
    (["--split-seed", "3"], "--split-seed 3 does nothing without --split: add --split or drop "
                            "--split-seed"),
    (["--sample-seed", "0"], "--sample-seed 0 does nothing without --sample"),
])
def test_bad_split_or_sample_is_refused_before_any_work(tmp_path, capsys, flags, message):
    from pipeline.job import main

    src = _split_corpus(tmp_path, n=20)
    with pytest.raises(SystemExit) as e:
        main(["--input", str(src), "--tokenizer", "bytes", "--output", str(tmp_path / "o"),
              *flags])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_overwrite_takes_over_a_killed_split_job_and_refuses_strays(tmp_path, capsys):
    from pipeline.job import main
    from transforms.plan.splits import SPLITS_NAME

    src = _split_corpus(tmp_path, n=300)
    args = ["--input", str(src), "--tokenizer", "bytes", "--window", "8", "--split",
            "val=0.1,test=0.1"]
    clean = tmp_path / "clean"
    record = run_job(clean, *args)
    # A killed job: its shards and one split's manifest written, no _splits.json, its claim.
    out = tmp_path / "out"
    run_job(out, *args)
    (out / SPLITS_NAME).unlink()
    (out / "test" / MANIFEST_NAME).unlink()
    (out / ".claim").write_text(json.dumps({"attempt": "dead", "pid": 1, "host": "h",
                                            "fingerprint": record["fingerprint"]}))
    run_job(out, *args, "--overwrite")
    assert dir_bytes(out) == dir_bytes(clean)
    # A file no manifest lists, inside a split's directory, is refused and kept.
    (out / "val" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as e:
        main(["--output", str(out), *args, "--overwrite"])
    assert e.value.code == 2
    assert "files that no manifest (nor a killed job's claim) accounts for, e.g. val/notes.txt" in (
        capsys.readouterr().err)
    assert (out / "val" / "notes.txt").read_text() == "mine"
    assert (out / SPLITS_NAME).exists()


def test_a_failed_split_job_removes_its_splits(tmp_path, capsys):
    from pipeline.job import main

    src = _split_corpus(tmp_path, n=300)  # two bad records: more than 0.1 % skipped
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["--input", str(src), "--tokenizer", "bytes", "--output", str(out), "--split",
              "val=0.1", "--max-skipped-share", "0.001"])
    assert e.value.code == 1
    assert "more than --max-skipped-share 0.001" in capsys.readouterr().err
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == []
    with pytest.raises(SystemExit) as e:
        main(["--input", str(src), "--tokenizer", "bytes", "--output", str(out), "--sample",
              "0.0001"])
    assert e.value.code == 1
    assert ("--sample 0.0001 left out every one of the 298 documents; raise --sample"
            in capsys.readouterr().err)


def test_skipped_share_counts_every_record_read_and_a_split_has_the_job_s_sampled_out(tmp_path):
    records = [{"text": "" if i % 10 == 0 else f"document {i}"} for i in range(2000)]
    src = write_jsonl(tmp_path / "in" / "c.jsonl", records)  # 10 % empty, before sampling
    base = ["--input", str(src), "--tokenizer", "bytes", "--window", "8",
            "--max-skipped-share", "0.2"]
    m = run_job(tmp_path / "s", *base, "--sample", "0.1")
    c = m["counts"]
    assert c["skipped"] == {"empty": 200} and c["records"] == 2000
    assert c["documents"] + c["sampled_out"] == 1800
    run_job(tmp_path / "sp", *base, "--sample", "0.5", "--split", "val=0.2")
    val = json.loads((tmp_path / "sp" / "val" / MANIFEST_NAME).read_text())
    assert "sampled_out" not in val["counts"]  # a split has none of its own: the job's
    job = json.loads((tmp_path / "sp" / "_splits.json").read_text())["counts"]
    assert val["split"]["job"]["sampled_out"] == job["sampled_out"] > 0
    assert job["records"] == 2000 == job["documents"] + 200 + job["sampled_out"]


def test_an_empty_split_fails_the_job_naming_it(tmp_path, capsys):
    from pipeline.job import main

    src = _split_corpus(tmp_path, n=20)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["--input", str(src), "--tokenizer", "bytes", "--output", str(out), "--split",
              "val=0.001"])
    assert e.value.code == 1
    assert ("the split val got none of the 18 documents; give it a larger fraction"
            in capsys.readouterr().err)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == []


def test_overwrite_keeps_an_empty_directory_of_the_user_s(tmp_path):
    src = _split_corpus(tmp_path, n=50)
    out = tmp_path / "out"
    args = ["--input", str(src), "--tokenizer", "bytes", "--window", "8"]
    run_job(out, *args, "--split", "val=0.3")
    (out / "mine").mkdir()
    run_job(out, *args, "--overwrite")  # replaces the split job by a plain one
    assert sorted(p.name for p in out.iterdir()) == [
        "_manifest.json", "_rejects", "mine", "part-00000-of-00001.parquet"]


def test_a_job_into_one_split_of_a_split_job_is_refused(tmp_path, capsys):
    from pipeline.job import main

    src = _split_corpus(tmp_path, n=50)
    out = tmp_path / "out"
    args = ["--input", str(src), "--tokenizer", "bytes", "--window", "8"]
    run_job(out, *args, "--split", "val=0.3")
    before = dir_bytes(out)
    with pytest.raises(SystemExit) as e:
        main([*args, "--output", str(out / "val"), "--overwrite"])
    assert e.value.code == 2
    assert (f"--output {out / 'val'} is the split val of the job in {out} (_splits.json): "
            f"rerun that job (--output {out} --overwrite)") in capsys.readouterr().err
    assert dir_bytes(out) == before


# ------------------------------------------------------------------ names and identity

@pytest.mark.slow
def test_identical_jobs_write_identical_bytes_with_the_fingerprint(corpus, tmp_path):
    a = run_job(tmp_path / "a", "--input", str(corpus), "--tokenizer", "bytes")
    b = run_job(tmp_path / "b", "--input", str(corpus), "--tokenizer", "bytes")
    assert a["fingerprint"] == b["fingerprint"]
    name = "part-00000-of-00001.parquet"
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    meta = pq.read_metadata(tmp_path / "a" / name).metadata
    assert meta[b"token_windows.fingerprint"] == a["fingerprint"].encode()
    assert meta[b"token_windows.shard"] == b"0/1"
    c = run_job(tmp_path / "c", "--input", str(corpus), "--tokenizer", "bytes", "--seed", "3")
    assert c["fingerprint"] != a["fingerprint"]


def test_shards_do_not_depend_on_where_the_tokenizer_model_lies(corpus, tmp_path, monkeypatch):
    """The same model by another path (copied, relative or absolute) is the same job."""
    import shutil

    from tests.common.paths import DATA

    copy = tmp_path / "models" / "tiny.model"
    copy.parent.mkdir()
    shutil.copy(DATA / "tiny.model", copy)
    monkeypatch.chdir(tmp_path)
    args = ("--input", str(corpus), "--window", "8")
    a = run_job(tmp_path / "a", *args, "--tokenizer", str(DATA / "tiny.model"))
    b = run_job(tmp_path / "b", *args, "--tokenizer", "models/tiny.model")
    assert a["tokenizer"]["path"] != b["tokenizer"]["path"]
    assert a["fingerprint"] == b["fingerprint"]
    name = "part-00000-of-00001.parquet"
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_lone_surrogate_end_to_end_with_bytes_and_sentencepiece(tmp_path):
    from tests.common.paths import DATA

    src = write_jsonl(tmp_path / "in.jsonl", ['{"text": "a \\ud800 b"}', {"text": "ok"}])
    for tok in ("bytes", str(DATA / "tiny.model")):
        out = tmp_path / pathlib.Path(tok).name
        m = run_job(out, "--input", str(src), "--tokenizer", tok)
        assert m["counts"]["documents"] == 2 and m["counts"]["repaired"]["invalid_utf8"] == 1


def test_two_patterns_whose_files_share_names_get_ids_that_cannot_collide(tmp_path):
    write_jsonl(tmp_path / "c" / "en" / "part-0.jsonl", [{"text": "hello"}])
    write_jsonl(tmp_path / "c" / "zh" / "part-0.jsonl", [{"text": "你好"}])
    write_jsonl(tmp_path / "c" / "zh" / "only.jsonl", [{"text": "x"}])
    m = run_job(tmp_path / "o", "--input", str(tmp_path / "c" / "en" / "*.jsonl"), "--input",
                str(tmp_path / "c" / "zh" / "*.jsonl"), "--tokenizer", "bytes")
    assert m["counts"]["skipped"] == {}
    assert sorted(r["doc_id"] for r in read_rows(tmp_path / "o")) == [
        "en/part-0.jsonl:1", "only.jsonl:1", "zh/part-0.jsonl:1"]
