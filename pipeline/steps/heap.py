"""The collector's view of a worker process: what was loaded before the work is left out.

A job's process holds a few million long-lived objects before it reads a record: the
modules of Beam, pyarrow, the tokenizer and whatever Beam imports with them, and the
pipeline graph. CPython's cyclic collector walks every one of them on each full
collection, and a job allocates enough (records, batches, Beam's own messages) to run
dozens of full collections: 6 % of the job's CPU time in a profile of a 289 MB job.
`leave_loaded_out` moves what is alive at that moment into the collector's permanent
generation (``gc.freeze``), so later collections walk only what the work allocates.

Nothing about the output depends on it: reference counting frees objects as before, and
the collector still collects every cycle the work makes. What it no longer collects are
cycles that were already garbage when it was called, which the launcher and each worker
call once, after loading (a few kB at most).

It also lets the youngest generation grow to `YOUNG` objects before a collection, not
CPython's 700: a worker parses records into dicts and documents by the hundred thousand, and
a batch alive across young collections is walked again in the middle generation: about 360
collections in the encoding step at 100 MB, 0.18-0.22 s, where 10,000 leaves a handful
(26-30 ms; peak memory the same). Cycles are collected as before, a little later.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG", "leave_loaded_out"]

YOUNG = 10_000  # the youngest generation's threshold (CPython's default: 700)


def leave_loaded_out() -> None:
    """Leave every object alive now out of later cyclic collections (``gc.freeze``).

    Cheap (it moves lists, it walks nothing) and safe to call more than once: the launcher
    calls it once its modules are loaded, each worker's steps in their ``setup``. Raises
    the youngest generation's threshold to `YOUNG` (never lowers one set higher).
    """
    gc.freeze()
    young, *older = gc.get_threshold()
    if young < YOUNG:
        gc.set_threshold(YOUNG, *older)
