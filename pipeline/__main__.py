"""``python -m pipeline --input … --output … --tokenizer …`` (and the ``token-windows`` command).

The command owns its process, and settles it before Beam, pyarrow and numpy load; a program
that calls `pipeline.run` keeps its own settings. Each choice below is taken only where the
environment has not made it (docs/running.md#the-commands-process):

* ``ARROW_DEFAULT_MEMORY_POOL=system``: the job's Arrow buffers come from the system
  allocator. With pyarrow's default, mimalloc, writing several shards at once kept faulting in
  fresh, zeroed huge pages (a 289 MB job: 0.6 CPU-s more kernel time, 90 MB more peak RSS).
* ``OPENBLAS_NUM_THREADS=1``: numpy's OpenBLAS would start a thread per core as numpy loads,
  each spinning for about a tenth of a second for linear algebra the job never does.
* Beam's notice that BigQuery's client libraries are missing (where the ``gcp`` extra is not
  installed, and the job uses none) is left out of the command's log.
* The collector is paused while Beam and the job load (some 80,000 tracked objects, almost no
  garbage), and what they loaded is then left out of later collections (`pipeline.steps.heap`),
  here and in the job's workers.

The processes the command starts (the local runner's workers) inherit the two variables.
"""

import gc
import logging
import os
import sys

from pipeline import LOG_FORMAT, NO_BEAM

COMMAND_ENVIRONMENT = {"ARROW_DEFAULT_MEMORY_POOL": "system", "OPENBLAS_NUM_THREADS": "1"}


def _not_bigquery_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("apitools not found")


def settle_process() -> None:
    """The command's settings for its own process, before its imports (the module's doc)."""
    for name, value in COMMAND_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_not_bigquery_notice)


def main() -> None:
    """Run the job's command line; exit 2, saying what to install, where Beam is missing."""
    settle_process()
    # Loading Beam and the job makes some 80,000 objects the collector tracks and almost no
    # garbage: the collector would run about two hundred times meanwhile, for nothing.
    gc.disable()
    try:
        import apache_beam  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name != "apache_beam":
            raise  # Beam is there but broken: its own error says more
        print(NO_BEAM, file=sys.stderr)
        sys.exit(2)
    from pipeline.job import cli
    from pipeline.steps.heap import leave_loaded_out

    leave_loaded_out()  # Beam and the rest are loaded: later collections skip them
    gc.enable()
    cli()


if __name__ == "__main__":
    main()
