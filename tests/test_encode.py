"""`pipeline.encode.EncodeChunks` on the FnApiRunner: blocks, rejects and receipts.

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

from pipeline.encode import EncodeChunks, load_tokenizer
from pipeline.read import SplitInputs
from tests.conftest import DATA, block_documents, fn_api_pipeline
from transforms.keys import ShardPlan, doc_key, shard_of
from transforms.params import ReadSpec, WindowSpec
from transforms.windows import plan_windows

WINDOWS = WindowSpec(window=8, stride=4)
DEFAULT = ReadSpec()
LINES = [json.dumps({"text": f"line {i} " + "x" * (i % 13)}) for i in range(200)]


def encode(p, patterns, *, spec=DEFAULT, windows=WINDOWS, tokenizer=None, num_shards=1,
           **kwargs):
    chunks = p | SplitInputs(patterns, spec=spec, chunk_bytes=1 << 20)
    return chunks | EncodeChunks(spec=spec, windows=windows, tokenizer=tokenizer,
                                 plan=ShardPlan(num_shards=num_shards), **kwargs)


def documents(kv):
    shard, block = kv
    return [(shard, d) for d in block_documents(block)]


def test_parcels_rejects_and_receipts(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "abc"}\n{oops\n{"text": ""}\n{"text": "de"}\n')
    with fn_api_pipeline() as p:
        out = encode(p, [str(path)], num_shards=3)
        got = out.blocks | beam.FlatMap(documents) | beam.Map(
            lambda sd: (sd[0], sd[1]["doc_id"], sd[1]["tokens"], sd[1]["starts"]))
        want = [(shard_of(doc_key(0, f"in.jsonl:{n}"), 3), f"in.jsonl:{n}",
                 [256, *text.encode(), 257], [0]) for n, text in ((1, "abc"), (4, "de"))]
        assert_that(got, equal_to(want), label="CheckBlocks")
        assert_that(out.rejects | beam.Map(lambda r: (r.reason, r.source)),
                    equal_to([("malformed_json", f"{path}:2"), ("empty", f"{path}:3")]),
                    label="CheckRejects")
        size = path.stat().st_size
        assert_that(out.records | beam.Map(lambda r: (r.path, r.start, r.end, r.extent,
                                                      r.records)),
                    equal_to([(str(path), 0, size, size, 4)]), label="CheckReceipts")


def test_batches_encoded_at_once_give_each_document_its_own_ids(tmp_path):
    """Small batches keep several SentencePiece calls in flight on one model at once."""
    sp = spm.SentencePieceProcessor(model_file=str(DATA / "tiny.model"))
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    with fn_api_pipeline() as p:
        out = encode(p, [str(path)], tokenizer=str(DATA / "tiny.model"), batch_chars=40,
                     threads=2)
        got = out.blocks | beam.FlatMap(documents) | beam.Map(
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
