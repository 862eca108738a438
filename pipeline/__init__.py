"""The Beam job: raw corpora → document-bounded token windows → seeded Parquet shards.

This is the only package that imports ``apache_beam``. Run it with ``python -m pipeline``
(or the ``token-windows`` command); build it from Python with `build_pipeline`, or run it
with `run`.
"""

import sys

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
finally:
    if _KEEP_OUT and sys.modules.get("IPython", 0) is None:
        del sys.modules["IPython"]

from pipeline.graph import build_pipeline  # noqa: E402
from pipeline.run import main, run  # noqa: E402

__all__ = ["build_pipeline", "main", "run"]
