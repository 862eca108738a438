"""pipeline.steps.heap: what is alive is left out of later collections; new cycles still go."""

from __future__ import annotations

import gc
import weakref

from pipeline.steps.heap import YOUNG, leave_loaded_out


class _Node:
    other: _Node | None = None


def test_what_is_alive_is_frozen_and_a_cycle_made_later_is_still_collected():
    gc.collect()
    before = gc.get_freeze_count()
    loaded = [_Node() for _ in range(1000)]
    try:
        leave_loaded_out()
        assert gc.get_freeze_count() >= before + 1000
        assert all(gc.is_tracked(n) for n in loaded)
        a, b = _Node(), _Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()  # this test's process is not a job: give the objects back
    assert gc.get_freeze_count() == 0


def test_the_youngest_generation_grows_to_young_objects_and_a_higher_threshold_stays():
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        leave_loaded_out()
        assert gc.get_threshold() == (YOUNG, 10, 10)
        gc.set_threshold(50_000, 5, 5)
        leave_loaded_out()
        assert gc.get_threshold() == (50_000, 5, 5)
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)
