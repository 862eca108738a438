"""The Beam job: raw corpora → document-bounded token windows → seeded Parquet shards.

This is the only package that imports ``apache_beam``. Run it with ``python -m pipeline``
(or the ``token-windows`` command); build it from Python with `build_pipeline` (given the
job's `pipeline.context.JobContext`), or run it with `run`. Where Beam is not installed, the
package still imports, so that ``python -m pipeline`` can say what to install instead of a
traceback; its names then raise that message.
"""

import logging
import sys
from typing import Any

NO_BEAM = ("token-windows: the job needs Apache Beam, which is not installed in this "
           "environment: pip install 'token-windows[job]' (from a checkout: pip install -e "
           "'.[job]'); the reader alone needs only '.[reader]'")

# With Beam's gcp extra, importing Beam imports google-cloud-bigquery, whose progress bars
# import tqdm.notebook, which imports all of IPython to look for notebook widgets: about a
# sixth of Beam's import time, for nothing a job uses. Outside a notebook (where IPython is
# loaded already and this does nothing) IPython is kept out while Beam loads, and importable
# again afterwards (docs/tokenizers.md#fixed-cost).
_KEEP_OUT = "IPython" not in sys.modules
if _KEEP_OUT:
    sys.modules["IPython"] = None  # type: ignore[assignment]


class _BeamImportNotices(logging.Handler):
    """Beam's import-time log records, while Beam loads in a program that has set up no
    logging: its notice that BigQuery's client libraries are missing (where the gcp extra is
    not installed, and the job uses none) is dropped; any other record is printed as Python's
    last-resort handler prints it. Being a handler, it also keeps that notice's
    ``logging.warning`` from configuring the root logger, so the command's own format
    (`pipeline.run.main`) still applies."""

    def emit(self, record: logging.LogRecord) -> None:
        if not record.getMessage().startswith("apitools not found"):
            logging.lastResort.handle(record)  # type: ignore[union-attr]


_NOTICES = None if logging.getLogger().handlers else _BeamImportNotices()
if _NOTICES is not None:
    logging.getLogger().addHandler(_NOTICES)
try:
    import apache_beam  # noqa: F401
except ModuleNotFoundError as e:
    if e.name != "apache_beam":
        raise
    _HAVE_BEAM = False
else:
    _HAVE_BEAM = True
finally:
    if _KEEP_OUT and sys.modules.get("IPython", 0) is None:
        del sys.modules["IPython"]
    if _NOTICES is not None:
        logging.getLogger().removeHandler(_NOTICES)

if _HAVE_BEAM:
    from pipeline.graph import build_pipeline
    from pipeline.run import main, run
else:

    def __getattr__(name: str) -> Any:
        if name in __all__:
            raise ModuleNotFoundError(NO_BEAM, name="apache_beam")
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")

__all__ = ["build_pipeline", "main", "run"]
