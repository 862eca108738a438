"""The Beam job: raw corpora → document-bounded token windows → seeded Parquet shards.

This is the only package that imports ``apache_beam``. Run it with ``python -m pipeline``
(or the ``token-windows`` command); build it from Python with `build_pipeline` (given the
job's `pipeline.launch.context.JobContext`), or run it with `run` (`pipeline.job`). `run` refuses
an output it must not write to with `OutputRefused` (`OutputInUse` when another job claims it;
`pipeline.files.errors`), both ``ValueError``s.

Importing the package loads nothing else and changes nothing in the process: its names load
their modules, and the job's three Beam with them, when first looked up. So the command can
settle its own process before Beam loads (`pipeline.__main__`), and where Beam is not
installed the package still imports, so that ``python -m pipeline`` says what to install
instead of a traceback; the job's names then raise that message.
"""

from __future__ import annotations

import importlib
from typing import Any

NO_BEAM = ("token-windows: the job needs Apache Beam, which is not installed in this "
           "environment: pip install 'token-windows[job]' (from a checkout: pip install -e "
           "'.[job]'); the reader alone needs only '.[reader]'")
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"  # the command's log lines

__all__ = ["OutputInUse", "OutputRefused", "build_pipeline", "main", "run"]

# Each public name and the module that defines it.
_HOMES = {"OutputInUse": "pipeline.files.errors", "OutputRefused": "pipeline.files.errors",
          "build_pipeline": "pipeline.graph", "main": "pipeline.job", "run": "pipeline.job"}


def __getattr__(name: str) -> Any:  # PEP 562: a public name, loaded on first look-up
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    try:
        module = importlib.import_module(home)
    except ModuleNotFoundError as e:
        if e.name != "apache_beam":
            raise
        raise ModuleNotFoundError(NO_BEAM, name="apache_beam") from None
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
