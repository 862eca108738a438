"""`pipeline.steps.tagged`: (tag, value) pairs split into one PCollection per tag."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipeline.steps.tagged import Outputs, SplitTags, StepFn
from tests.common.jobs import fn_api_pipeline


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


def test_a_step_fn_lists_its_own_methods_and_attributes_not_beams():
    class _Keep(StepFn):
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def process(self, value):
            yield self.tag, value

        def _helper(self):
            return None

    names = dir(_Keep("x"))
    assert {"process", "_helper", "tag", "__init__"} <= set(names)
    assert not {"with_input_types", "display_data", "to_runner_api", "setup"} & set(names)


def test_beams_own_dofn_methods_declare_no_state_or_timer_parameter():
    # What StepFn leaves out of dir: Beam would find nothing there (a later Beam may change it).
    from apache_beam.runners.common import MethodWrapper
    from apache_beam.transforms.core import _DoFnParam

    dofn = beam.DoFn()
    methods = [name for name in dir(dofn) if callable(getattr(dofn, name))
               and getattr(type(dofn), name, None) is not None and not name.startswith("__")]
    assert len(methods) > 20
    for name in methods:
        if isinstance(getattr(dofn, name), type(dofn.process)):
            defaults = MethodWrapper(dofn, name).defaults
            assert not [d for d in defaults if isinstance(d, _DoFnParam)], name


def test_beam_still_finds_the_state_and_timers_of_a_step_fn():
    from apache_beam.coders import VarIntCoder
    from apache_beam.transforms import userstate
    from apache_beam.transforms.timeutil import TimeDomain

    count = userstate.ReadModifyWriteStateSpec("count", VarIntCoder())
    flush = userstate.TimerSpec("flush", TimeDomain.WATERMARK)
    state_param, timer_param = beam.DoFn.StateParam(count), beam.DoFn.TimerParam(flush)

    class _Counting(StepFn):
        def process(self, item, state=state_param, timer=timer_param):
            yield item

        @userstate.on_timer(flush)
        def _flushed(self):
            yield 0

    assert userstate.get_dofn_specs(_Counting()) == ({count}, {flush})
    userstate.validate_stateful_dofn(_Counting())
