"""`pipeline.encode.EncodeChunks` on the FnApiRunner: parcels, rejects and receipts.

The pure steps it wraps (reading a chunk, batching, planning, packing) are tested without
Beam in tests/test_chunks.py and tests/test_encoding.py; here, what only the DoFn does: its
three outputs, and several batches encoding at once on one model.
"""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
import sentencepiece as spm
from apache_beam.testing.util import assert_that, equal_to

from pipeline.context import Tuning
from pipeline.encode import EncodeChunks, load_tokenizer
from pipeline.read import SplitInputs
from tests.conftest import DATA, fn_api_pipeline, parcel_documents
from tests.job_data import context_of
from transforms.keys import doc_key, shard_of
from transforms.params import WindowSpec
from transforms.windows import plan_windows

WINDOWS = WindowSpec(window=8, stride=4)
LINES = [json.dumps({"text": f"line {i} " + "x" * (i % 13)}) for i in range(200)]


def encode(p, patterns, *flags, num_shards=1, tuning=None):
    context = context_of("--window", "8", "--stride", "4", "--num-shards", str(num_shards),
                         "--shuffle", "runner", *flags, tuning=tuning)
    chunks = p | SplitInputs(patterns, spec=context.config.read, chunk_bytes=1 << 20)
    return chunks | EncodeChunks(context)


def documents(kv):
    shard, parcel = kv
    return [(shard, d) for d in parcel_documents(parcel)]


@pytest.mark.slow
def test_parcels_rejects_and_receipts(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "abc"}\n{oops\n{"text": ""}\n{"text": "de"}\n')
    with fn_api_pipeline() as p:
        out = encode(p, [str(path)], num_shards=3)
        got = out.parcels | beam.FlatMap(documents) | beam.Map(
            lambda sd: (sd[0], sd[1]["doc_id"], sd[1]["tokens"], sd[1]["starts"]))
        want = [(shard_of(doc_key(0, f"in.jsonl:{n}"), 3), f"in.jsonl:{n}",
                 [256, *text.encode(), 257], [0]) for n, text in ((1, "abc"), (4, "de"))]
        assert_that(got, equal_to(want), label="CheckBlocks")
        assert_that(out.rejects | beam.Map(lambda r: (r.reason, r.source)),
                    equal_to([("malformed_json", f"{path}:2"), ("empty", f"{path}:3")]),
                    label="CheckRejects")
        size = path.stat().st_size
        assert_that(out.receipts | beam.Map(lambda r: (r.path, r.start, r.end, r.extent,
                                                      r.records)),
                    equal_to([(str(path), 0, size, size, 4)]), label="CheckReceipts")


@pytest.mark.slow
def test_batches_encoded_at_once_give_each_document_its_own_ids(tmp_path):
    """Small batches keep several SentencePiece calls in flight on one model at once."""
    sp = spm.SentencePieceProcessor(model_file=str(DATA / "tiny.model"))
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    with fn_api_pipeline() as p:
        out = encode(p, [str(path)], "--tokenizer", str(DATA / "tiny.model"),
                     "--encode-threads", "2", tuning=Tuning(batch_chars=40))
        got = out.parcels | beam.FlatMap(documents) | beam.Map(
            lambda sd: (sd[1]["doc_id"], sd[1]["tokens"], sd[1]["starts"]))
        want = []
        for i, line in enumerate(LINES):
            z = [1, *sp.encode(json.loads(line)["text"]), 2]
            want.append((f"in.jsonl:{i + 1}", z, plan_windows(len(z) - 1, WINDOWS).starts.tolist()))
        assert_that(got, equal_to(want))


def test_load_tokenizer_names_the_path_it_cannot_read(tmp_path):
    with pytest.raises(ValueError, match=f"--tokenizer {tmp_path}/gone.model cannot be read"):
        load_tokenizer(str(tmp_path / "gone.model"))
    assert load_tokenizer(None).kind == "bytes"
    assert load_tokenizer(str(DATA / "tiny.model")).bos_id == 1
