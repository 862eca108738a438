"""`pipeline.tagged`: (tag, value) pairs split into one PCollection per tag."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipeline.tagged import Outputs, SplitTags
from tests.conftest import fn_api_pipeline


@pytest.mark.slow
def test_each_tag_gets_its_values_and_only_those():
    pairs = [("parcels", (0, b"a")), ("rejects", "r1"), ("parcels", (1, b"b")),
             ("records", 3), ("rejects", "r2")]
    with fn_api_pipeline() as p:
        out = (p | beam.Create(pairs)
               | SplitTags(["parcels", "rejects", "records", "unused_tag"]))
        assert sorted(out) == ["parcels", "records", "rejects", "unused_tag"]
        assert_that(out.parcels, equal_to([(0, b"a"), (1, b"b")]), label="Parcels")
        assert_that(out["rejects"], equal_to(["r1", "r2"]), label="Rejects")
        assert_that(out.records, equal_to([3]), label="Records")
        assert_that(out.unused_tag, equal_to([]), label="Unused")


def test_steps_are_labelled_by_tag_and_a_missing_tag_is_named():
    p = beam.Pipeline()
    out = p | beam.Create([("dup_ids", 1)]) | "ByTag" >> SplitTags(["dup_ids"])
    assert out.dup_ids.producer.full_label == "ByTag/DupIds"
    with pytest.raises(AttributeError, match=r"no output tagged 'shards'; the outputs are "
                                             r"\['dup_ids'\]"):
        _ = out.shards
    assert isinstance(out, Outputs)


@pytest.mark.slow
def test_a_tag_that_no_output_receives_fails_the_pipeline():
    pairs = [("parcels", 1), ("rejets", 2)]
    with (pytest.raises(Exception, match=r"a step emitted the tag 'rejets', which is none of "
                                         r"\['parcels', 'rejects'\]"),
          fn_api_pipeline() as p):
        _ = p | beam.Create(pairs) | SplitTags(["parcels", "rejects"])
