"""What the job's refusal of its output is, as a type (docs/integrity.md#the-job).

A job is refused before any work (exit 2) for a wrong flag, a missing input, or an output it
must not write to; the last kind has a class, so that a caller of `pipeline.run` (a scheduler)
can wait and retry a busy output without parsing the message. Both are ``ValueError``s, as
these refusals always were, with the same messages and exit codes; a wrong flag stays a plain
``ValueError``. Loads no Beam.

    ValueError
    └── OutputRefused           --output cannot take this job's dataset as it is: it holds
        │                       files (pass --overwrite), files no manifest accounts for, a
        │                       split of another job, a file; it lies in the input
        ├── OutputInUse         another job claims it: wait for it, or --overwrite if killed
        ├── OutsideOutputError  (pipeline.files.confine) a link or ``..`` leads out of OUTPUT
        └── NotRegularFileError (pipeline.files.confine) a FIFO, device or socket below OUTPUT
"""

from __future__ import annotations

__all__ = ["OutputInUse", "OutputRefused"]


class OutputRefused(ValueError):
    """``--output`` cannot receive this job's dataset as it is; the message says what to do."""


class OutputInUse(OutputRefused):
    """Another job's claim (``OUTPUT/.claim``) holds ``--output``: it is running, or was
    killed (then ``--overwrite`` takes the claim over)."""
