"""The Beam job: raw corpora → document-bounded token windows → seeded Parquet shards.

This is the only package that imports ``apache_beam``. Run it with ``python -m pipeline``
(or the ``token-windows`` command); build it from Python with `build_pipeline`, or run it
with `run`.
"""

from pipeline.graph import build_pipeline
from pipeline.run import main, run

__all__ = ["build_pipeline", "main", "run"]
