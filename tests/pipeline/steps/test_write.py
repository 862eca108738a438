"""`pipeline.steps.write` on the FnApiRunner: the shuffle groups parcels by shard, intact.

Shards, rejects and the manifest are checked end to end in tests/job/test_pipeline.py, and their
pure parts in tests/transforms/shards/test_rows.py, tests/transforms/shards/test_parquet.py and
tests/transforms/dataset/test_manifest.py.
"""

from __future__ import annotations

from concurrent.futures import Future

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given
from hypothesis import strategies as st

from pipeline.steps.encode import EncodeChunks
from pipeline.steps.read import SplitInputs
from pipeline.steps.write import ShuffleDocuments, shard_batches, write_in_waves
from tests.common.documents import parcel_documents
from tests.common.job_data import context_of
from tests.common.jobs import fn_api_pipeline
from transforms.params import WindowSpec
from transforms.plan.keys import doc_key, shard_of


def shuffled(p, path, *, windows, num_shards):
    context = context_of("--format", "lines", "--window", str(windows.window), "--stride",
                         str(windows.stride), "--num-shards", str(num_shards), "--shuffle",
                         "runner")
    chunks = p | SplitInputs([str(path)], spec=context.config.read)
    encoded = chunks | EncodeChunks(context)
    return encoded.parcels | ShuffleDocuments()


@pytest.mark.slow
def test_shuffle_groups_documents_by_key_range(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("".join("abc" * i + "\n" for i in range(1, 30)))
    with fn_api_pipeline() as p:
        summary = shuffled(p, path, windows=WindowSpec(window=8, stride=4),
                           num_shards=4) | beam.Map(
            lambda kv: (kv[0], sorted(d["doc_id"] for b in kv[1] for d in parcel_documents(b))))
        expected = {}
        for i in range(1, 30):
            doc_id = f"in.txt:{i}"
            expected.setdefault(shard_of(doc_key(0, doc_id), 4), []).append(doc_id)
        assert_that(summary, equal_to([(k, sorted(v)) for k, v in expected.items()]))


@pytest.mark.slow
def test_packed_tokens_are_exact_after_the_shuffle(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("道可道")
    with fn_api_pipeline() as p:
        tokens = shuffled(p, path, windows=WindowSpec(window=2, stride=2),
                          num_shards=1) | beam.FlatMap(
            lambda kv: [d["tokens"] for b in kv[1] for d in parcel_documents(b)])
        assert_that(tokens, equal_to([[256, *"道可道".encode(), 257]]))


@pytest.mark.parametrize(("num_shards", "at_once", "batches"), [
    (5, 4, [[0, 1, 2], [3, 4]]),
    (8, 4, [[0, 1, 2, 3], [4, 5, 6, 7]]),
    (9, 4, [[0, 1, 2], [3, 4, 5], [6, 7, 8]]),
    (2, 4, [[0, 1]]),
    (3, 1, [[0], [1], [2]]),
    (0, 4, []),
])
def test_shards_are_batched_evenly(num_shards, at_once, batches):
    assert shard_batches(num_shards, at_once) == batches


@given(st.integers(0, 500), st.integers(1, 64))
def test_batches_cover_every_shard_once_in_the_fewest_even_runs(num_shards, at_once):
    batches = shard_batches(num_shards, at_once)
    assert [i for b in batches for i in b] == list(range(num_shards))
    assert len(batches) == -(-num_shards // at_once)
    sizes = [len(b) for b in batches]
    assert all(0 < s <= at_once for s in sizes)
    assert not sizes or max(sizes) - min(sizes) <= 1


class _Recorded(Future):
    """A finished future that logs when its result is taken."""

    def __init__(self, log, shard):
        super().__init__()
        self._log, self._shard = log, shard
        self.set_result(shard * 10)

    def result(self, timeout=None):
        self._log.append(("end", self._shard))
        return super().result(timeout)


@pytest.mark.parametrize(("shards", "cores", "first"), [
    (5, 2, 3), (3, 2, 3), (4, 2, 2), (2, 2, 2), (1, 2, 1), (7, 3, 4), (6, 4, 6), (9, 4, 5),
])
def test_waves_start_the_leftover_shards_with_the_first_cores(shards, cores, first):
    log = []

    def start(shard):
        log.append(("start", shard))
        return _Recorded(log, shard)

    assert write_in_waves(start, list(range(shards)), cores=cores) == {
        i: i * 10 for i in range(shards)}
    assert log[:first] == [("start", i) for i in range(first)]
    assert [s for kind, s in log if kind == "start"] == list(range(shards))
    running, most, later = 0, 0, []
    for at, (kind, _) in enumerate(log):
        running += 1 if kind == "start" else -1
        most = max(most, running)
        if kind == "start" and at >= first:
            later.append(running)
    assert most == first  # the leftover shards share the cores with the first wave
    assert all(n <= cores for n in later)  # later shards start as others end
