"""The Beam job: raw corpora → document-bounded token windows → seeded Parquet shards.

This is the only package that imports ``apache_beam``. Run it with ``python -m pipeline``
(or the ``token-windows`` command); build it from Python with `build_pipeline` (given the
job's `pipeline.context.JobContext`), or run it with `run`. Where Beam is not installed, the
package still imports, so that ``python -m pipeline`` can say what to install instead of a
traceback; its names then raise that message.
"""

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

if _HAVE_BEAM:
    from pipeline.graph import build_pipeline
    from pipeline.run import main, run
else:

    def __getattr__(name: str) -> Any:
        if name in __all__:
            raise ModuleNotFoundError(NO_BEAM, name="apache_beam")
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")

__all__ = ["build_pipeline", "main", "run"]
