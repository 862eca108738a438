"""The Beam job: raw corpora → document-bounded token windows → seeded Parquet shards.

This is the only package that imports ``apache_beam``. Run it with ``python -m pipeline``
(or the ``token-windows`` command); build it from Python with `build_pipeline`, or run it
with `run`. Where Beam is not installed, the package still imports, so that ``python -m
pipeline`` can say what to install instead of a traceback; its names then raise that message.
"""

from typing import Any

NO_BEAM = ("token-windows: the job needs Apache Beam, which is not installed in this "
           "environment: pip install 'token-windows[job]' (from a checkout: pip install -e "
           "'.[job]'); the reader alone needs only '.[reader]'")

try:
    from pipeline.graph import build_pipeline
    from pipeline.run import main, run
except ModuleNotFoundError as e:
    if e.name != "apache_beam":
        raise

    def __getattr__(name: str) -> Any:
        if name in __all__:
            raise ModuleNotFoundError(NO_BEAM, name="apache_beam")
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")

__all__ = ["build_pipeline", "main", "run"]
