"""The Beam job: raw corpora → document-bounded token windows → seeded Parquet shards.

This is the only package that imports ``apache_beam``. Run it with ``python -m pipeline``
(or the ``token-windows`` command); build it from Python with `build_pipeline`, or run it
with `run`. The names load on first use, so that ``python -m pipeline`` where Beam is not
installed says what to install instead of a traceback.
"""

import importlib
from typing import Any

_EXPORTS = {"build_pipeline": "pipeline.graph", "main": "pipeline.run", "run": "pipeline.run"}

__all__ = ["build_pipeline", "main", "run"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
