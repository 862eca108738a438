"""`pipeline.write` on the FnApiRunner: the shuffle groups parcels by shard, intact.

Shards, rejects and the manifest are checked end to end in tests/test_pipeline.py, and their
pure parts in tests/test_rows.py, tests/test_parquet.py and tests/test_manifest.py.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipeline.encode import EncodeChunks
from pipeline.read import SplitInputs
from pipeline.write import ShuffleDocuments
from tests.conftest import fn_api_pipeline, parcel_documents
from tests.job_data import context_of
from transforms.keys import doc_key, shard_of
from transforms.params import WindowSpec


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
