"""`pipeline.steps.encode.EncodeChunks` on the FnApiRunner: parcels, rejects and receipts.

The pure steps it wraps (reading a chunk, batching, planning, packing) are tested without
Beam in tests/transforms/inputs/test_chunks.py and tests/transforms/shards/test_encoding.py; here,
what only the DoFn does: its three outputs, several batches encoding at once on one model, and which
tokenizer it encodes with (the launcher's in the launcher's process, its own elsewhere).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
from concurrent.futures import Future

import apache_beam as beam
import cloudpickle
import pytest
import sentencepiece as spm
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.utils import shared

from pipeline.launch.context import Tuning
from pipeline.steps import encode as encode_module
from pipeline.steps.encode import EncodeChunks, acquire_tokenizer, load_tokenizer
from pipeline.steps.read import SplitInputs
from pipeline.steps.tagged import PARCELS, RECEIPTS
from tests.common.documents import parcel_documents
from tests.common.job_data import context_of
from tests.common.jobs import dir_bytes, fn_api_pipeline, run_job
from tests.common.paths import DATA
from transforms.inputs.chunks import open_local, plan_chunks
from transforms.params import WindowSpec
from transforms.plan.keys import doc_key, shard_of
from transforms.plan.windows import plan_windows
from transforms.shards.spill import ShardParts

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


def _count_loads(monkeypatch) -> list[tuple[str, int]]:
    """(file name, threads) of every tokenizer made in this process from now on."""
    made = []
    inner = encode_module.tokenizer_from_bytes

    def counted(model, *, where, num_threads=1, **kwargs):
        made.append((os.path.basename(where), num_threads))
        return inner(model, where=where, num_threads=num_threads, **kwargs)

    monkeypatch.setattr(encode_module, "tokenizer_from_bytes", counted)
    monkeypatch.setattr(encode_module, "leave_loaded_out", lambda: None)  # no gc.freeze here
    return made


def _as_a_runner_gets_it(context) -> encode_module._EncodeChunkFn:
    """The step's DoFn pickled and unpickled, as every runner hands it to a worker."""
    return pickle.loads(cloudpickle.dumps(encode_module._EncodeChunkFn(context)))


def test_the_step_takes_the_launchers_tokenizer_in_its_process_and_loads_one_elsewhere(
        monkeypatch):
    context = context_of("--tokenizer", str(DATA / "tiny.model"), "--encode-threads", "3")
    made = _count_loads(monkeypatch)
    # The launcher (`pipeline.launch.preflight`) loads it through the context's handle, and holds
    # it.
    launchers = acquire_tokenizer(context.tokenizer_handle, context.config)
    here = _as_a_runner_gets_it(context)
    here.setup()
    assert here._tokenizer is launchers and made == [("tiny.model", 3)]
    here.teardown()
    # Another job's step (another handle) loads its own, even of the same file.
    other_job = _as_a_runner_gets_it(dataclasses.replace(context,
                                                         tokenizer_handle=shared.Shared()))
    other_job.setup()
    assert other_job._tokenizer is not launchers and made == [("tiny.model", 3)] * 2
    other_job.teardown()
    # A worker in another process (its own map of shared objects) loads its own, as the
    # job names it.
    monkeypatch.setattr(shared, "_shared_map", shared._SharedMap())
    there = _as_a_runner_gets_it(context)
    there.setup()
    assert there._tokenizer is not launchers and made == [("tiny.model", 3)] * 3
    assert there._tokenizer.encode("abc").tolist() == launchers.encode("abc").tolist()
    there.teardown()


def test_a_tokenizer_made_otherwise_is_not_taken(monkeypatch):
    context = context_of("--tokenizer", str(DATA / "tiny.model"), "--encode-threads", "2")
    made = _count_loads(monkeypatch)
    launchers = acquire_tokenizer(context.tokenizer_handle, context.config)
    one_thread = dataclasses.replace(context.config, encode_threads=1)
    assert acquire_tokenizer(context.tokenizer_handle, one_thread) is not launchers
    assert acquire_tokenizer(context.tokenizer_handle, context.config) is not launchers
    assert made == [("tiny.model", 2), ("tiny.model", 1), ("tiny.model", 2)]


@pytest.mark.slow
def test_an_in_process_job_loads_its_tokenizer_once(tmp_path, monkeypatch):
    made = _count_loads(monkeypatch)
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(LINES) + "\n")
    job = ["--input", str(src), "--tokenizer", str(DATA / "tiny.model"), "--window", "8",
           "--encode-threads", "2"]
    run_job(tmp_path / "in_memory", *job)
    assert made == [("tiny.model", 2)]  # the launcher's; the step encoded with it
    # With worker processes, the launcher's stays in the launcher: the worker loads its own
    # (counted in its process, not here) and encodes the same ids.
    run_job(tmp_path / "processes", *job, "--direct_running_mode=multi_processing",
            "--direct_num_workers=1")
    assert made == [("tiny.model", 2)] * 2
    assert dir_bytes(tmp_path / "processes") == dir_bytes(tmp_path / "in_memory")


class _Taken(Future):
    """A batch's encoding, done at once; taking its result in is logged."""

    def __init__(self, log, batch):
        super().__init__()
        self._log, self._batch = log, batch

    def result(self, timeout=None):
        self._log.append(("taken", self._batch))
        return super().result(timeout)


class _LoggingPool:
    """Encodes each batch as it is submitted and logs (event, first letter of the batch's
    texts, batch number): what was in flight at each moment."""

    def __init__(self):
        self.log = []

    def submit(self, fn, tokenizer, docs):
        batch = (docs[0].text[0], sum(e == "submitted" for e, _ in self.log))
        self.log.append(("submitted", batch))
        future = _Taken(self.log, batch)
        future.set_result(fn(tokenizer, docs))
        return future

    def shutdown(self, **_):
        pass


def test_a_bundles_batches_stay_in_flight_across_its_chunks(tmp_path, monkeypatch):
    """With the file shuffle, the batches of a bundle's chunk are still being encoded when
    the next chunk's are submitted (the encoders never wait at a chunk's end), and every
    document still reaches the bundle's spill file, once."""
    monkeypatch.setattr(encode_module, "leave_loaded_out", lambda: None)  # no gc.freeze here
    paths = []
    for letter in "ab":
        path = tmp_path / f"{letter}.jsonl"
        path.write_text("".join(json.dumps({"text": f"{letter}{i} " + "x" * 30}) + "\n"
                                for i in range(40)))
        paths.append(str(path))
    out = tmp_path / "out"
    files = {p: (os.path.getsize(p), None) for p in paths}
    context = context_of("--input", str(tmp_path / "*.jsonl"), "--output", str(out),
                         "--window", "8", "--stride", "4", "--num-shards", "2",
                         "--shuffle", "files", files=files,
                         tuning=Tuning(batch_chars=200, encoding_ahead=2))
    fn = encode_module._EncodeChunkFn(context)
    fn.setup()
    pool = fn._pool = _LoggingPool()
    fn.start_bundle()
    emitted = []
    for path in paths:
        (chunk,) = plan_chunks(path, rel=os.path.basename(path), size=files[path][0],
                               spec=context.config.read, open_file=open_local)
        emitted += list(fn.process(chunk))
    fn.finish_bundle()
    fn.teardown()

    events = pool.log
    a_batches = {b for e, b in events if e == "submitted" and b[0] == "a"}
    assert len(a_batches) >= 4 and len(events) == 2 * sum(e == "taken" for e, _ in events)
    first_b = events.index(next(x for x in events if x[0] == "submitted" and x[1][0] == "b"))
    last_a = max(i for i, (e, b) in enumerate(events) if e == "taken" and b[0] == "a")
    assert first_b < last_a  # chunk a's batches were still in flight when b's began
    # Taken in order, never more than encoding_ahead + 1 in flight.
    taken = [b for e, b in events if e == "taken"]
    assert taken == [b for e, b in events if e == "submitted"]
    in_flight = 0
    for e, _ in events:
        in_flight += 1 if e == "submitted" else -1
        assert in_flight <= 3
    (spill,) = [v for tag, v in emitted if tag == PARCELS]
    assert [v.records for tag, v in emitted if tag == RECEIPTS] == [40, 40]
    ids = [doc_id for shard in range(2)
           for rows in ShardParts([spill], shard=shard, num_shards=2,
                                  parts_per_shard=context.plan.parts_per_shard,
                                  open_file=open_local)
           for doc_id in rows.table(0, rows.num_rows).column("doc_id").to_pylist()]
    assert sorted(set(ids)) == sorted(f"{x}.jsonl:{i}" for x in "ab" for i in range(1, 41))
