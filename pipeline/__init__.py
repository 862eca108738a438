"""The Beam job: raw corpora → document-bounded token windows → seeded Parquet shards.

This is the only package that imports ``apache_beam``. Run it with ``python -m pipeline``
(or the ``token-windows`` command); build it from Python with `build_pipeline` (given the
job's `pipeline.context.JobContext`), or run it with `run`. Where Beam is not installed, the
package still imports, so that ``python -m pipeline`` can say what to install instead of a
traceback; its names then raise that message.
"""

import ast
import gc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading
from types import ModuleType
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


# Beam's ``apache_beam.io`` package imports every connector Beam ships as Beam loads: Avro
# (fastavro), MongoDB (pymongo), and BigQuery, Pub/Sub and GCS, whose client libraries
# (requests, urllib3 …; with the gcp extra, google-cloud-bigquery) load even where a job uses
# none of them: about a sixth of Beam's import time in a lean environment and a quarter with
# the gcp extra (docs/performance.md#start-up). While Beam loads for the job, that package runs
# without those imports; the first look-up of a name it does not hold yet (``from
# apache_beam.io import ReadFromBigQuery``, ``beam.io.WriteToAvro``, ``dir``, ``import *``)
# first runs the package's own code in full, so every name Beam defines there is there, bound
# to what one whole run binds, for any program that looks.
_CONNECTORS = ("apache_beam.io.avroio", "apache_beam.io.mongodbio", "apache_beam.io.gcp",
               "apache_beam.transforms.xlang")


def _is_connector(node: ast.stmt) -> bool:
    """Whether a statement of ``apache_beam/io/__init__.py`` only imports connectors."""
    names = [n.module or "" for n in ast.walk(node) if isinstance(n, ast.ImportFrom)]
    names += [a.name for n in ast.walk(node) if isinstance(n, ast.Import) for a in n.names]
    return bool(names) and all(
        any(name == c or name.startswith(c + ".") for c in _CONNECTORS) for name in names)


class _DeferredConnectors(importlib.machinery.SourceFileLoader):
    """Loads ``apache_beam.io`` without its connectors; its whole code runs on first need.

    Only a package body made of imports alone is split (running it whole later then binds
    exactly what one run would have); any other loads whole at once, as Beam's loader would.
    """

    def exec_module(self, module: ModuleType) -> None:
        tree = ast.parse(self.get_data(self.path), self.path)
        body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
        if not all(isinstance(node, ast.Import | ast.ImportFrom | ast.Try) for node in body):
            super().exec_module(module)
            return
        lock = threading.Lock()

        def complete() -> None:
            with lock:
                if module.__dict__.pop("__getattr__", None) is not None:
                    del module.__dict__["__dir__"]
                    super(_DeferredConnectors, self).exec_module(module)

        def __getattr__(name: str) -> object:  # PEP 562: a name the module does not hold
            complete()
            try:
                return module.__dict__[name]
            except KeyError:
                raise AttributeError(
                    f"module {module.__name__!r} has no attribute {name!r}") from None

        def __dir__() -> list[str]:
            complete()
            return sorted(module.__dict__)

        eager = ast.Module([node for node in body if not _is_connector(node)], type_ignores=[])
        exec(compile(eager, self.path, "exec"), module.__dict__)
        module.__dict__.update(__getattr__=__getattr__, __dir__=__dir__)


# Two libraries Beam imports as it loads and calls only on paths a local job never takes:
# httplib2 (with pyparsing, which it imports: about 45 ms), Beam's HTTP client for Dataflow
# submissions and Google's APIs, and dateutil's parser (8 ms), for RFC 3339 timestamps. While
# Beam loads for the job, each is imported lazily (`importlib.util.LazyLoader`): the module
# object is there at once, its code runs, whole, at the first look-up of any attribute.
# Nothing else Beam imports is left for later: a module looked up as Beam loads (the
# proto-plus library, yaml) or imported with ``from … import`` would load anyway.
_ON_FIRST_USE = ("httplib2", "dateutil.parser")


# Beam's type hints import beartype (about 70 ms: its decorators load with it) for one
# function, `is_subhint`, which Beam calls only to compare two classes it has no rule for
# (`apache_beam.typehints.typehints.is_consistent_with`), as the job's graph never does. While
# Beam loads for the job, that module (the only one of Beam's to import beartype) runs, as
# compiled, with a stand-in for beartype's two names: its `is_subhint` loads beartype on its
# first call, and from then on the module holds beartype's own `is_subhint` and
# `BeartypeDoorException`, which a look-up also loads. Where beartype is loaded already,
# the module loads as it is.
_BEARTYPE_USER = "apache_beam.typehints.typehints"


class _BeartypeOnFirstUse(importlib.machinery.SourceFileLoader):
    """Loads `_BEARTYPE_USER` with beartype's two names bound on first use."""

    def exec_module(self, module: ModuleType) -> None:
        if "beartype" in sys.modules:
            super().exec_module(module)
            return
        names = module.__dict__

        def load() -> None:
            from beartype.door import is_subhint
            from beartype.roar import BeartypeDoorException

            names.pop("__getattr__", None)
            names.update(is_subhint=is_subhint, BeartypeDoorException=BeartypeDoorException)

        def is_subhint(subhint: object, superhint: object) -> bool:
            load()
            return names["is_subhint"](subhint, superhint)  # type: ignore[no-any-return]

        def __getattr__(name: str) -> object:  # PEP 562: BeartypeDoorException, until loaded
            if name == "BeartypeDoorException":
                load()
                return names[name]
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

        stubs = {name: ModuleType(name) for name in ("beartype", "beartype.door", "beartype.roar")}
        stubs["beartype.door"].is_subhint = is_subhint  # type: ignore[attr-defined]
        stubs["beartype.roar"].BeartypeDoorException = None  # type: ignore[attr-defined]
        sys.modules.update(stubs)
        try:
            super().exec_module(module)
        finally:
            for name, stub in stubs.items():
                if sys.modules.get(name) is stub:
                    del sys.modules[name]
        if names.get("BeartypeDoorException", 0) is None:
            del names["BeartypeDoorException"]
            names["__getattr__"] = __getattr__


class _DeferConnectors:
    """A meta path finder for ``apache_beam.io``, `_BEARTYPE_USER` and `_ON_FIRST_USE`,
    installed while Beam loads."""

    @staticmethod
    def find_spec(name: str, path: Any, target: Any = None) -> Any:
        if name not in ("apache_beam.io", _BEARTYPE_USER, *_ON_FIRST_USE):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader:
            return spec
        if name == "apache_beam.io":
            spec.loader = _DeferredConnectors(name, spec.loader.path)
        elif name == _BEARTYPE_USER:
            spec.loader = _BeartypeOnFirstUse(name, spec.loader.path)
        else:
            spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


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


# The job's Arrow buffers come from the system allocator unless the program chose one: with
# pyarrow's default, mimalloc, writing several shards at once kept faulting in fresh, zeroed
# huge pages (a 289 MB job: 116 of them, against 27; 0.6 CPU-s more kernel time and 90 MB more
# peak RSS). Arrow reads the variable once, as pyarrow loads (Beam loads it below), and the
# workers this process starts inherit it; a program that loaded pyarrow already keeps its own
# (docs/performance.md#the-allocator).
if "pyarrow" not in sys.modules:
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

# numpy's OpenBLAS starts a thread per core as numpy loads (Beam loads it below), and each
# spins for about a tenth of a second waiting for work that never comes: the job does no
# linear algebra, and on a small machine that is a core its start needs (README command 1's
# job: 0.1 of its 0.8 CPU-s). numpy loads here with one BLAS thread; the variable is
# then taken away again, so that the processes this one starts see the environment as it
# was. A program that loaded numpy already, or set the variable, keeps its own
# (docs/performance.md#blas-threads).
_ONE_BLAS_THREAD = "numpy" not in sys.modules and "OPENBLAS_NUM_THREADS" not in os.environ
if _ONE_BLAS_THREAD:
    os.environ["OPENBLAS_NUM_THREADS"] = "1"

# Loading Beam and the job's modules makes some 80,000 objects that the cyclic collector
# tracks, and almost no garbage; the collector would run about two hundred times meanwhile,
# for a tenth of the import time, and walk them all again at its next run. It is paused
# while they load (unless the program has it off already), and what is loaded is then left
# out of later collections (`pipeline.heap`, as each worker's steps do in their setup).
_COLLECTING = gc.isenabled()
_LOADED = False
gc.disable()
try:
    _NOTICES = None if logging.getLogger().handlers else _BeamImportNotices()
    if _NOTICES is not None:
        logging.getLogger().addHandler(_NOTICES)
    _DEFER = "apache_beam.io" not in sys.modules
    if _DEFER:
        sys.meta_path.insert(0, _DeferConnectors)  # type: ignore[arg-type]
    try:
        import apache_beam  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name != "apache_beam":
            raise
        _HAVE_BEAM = False
    else:
        _HAVE_BEAM = True
    finally:
        if _DEFER:
            sys.meta_path.remove(_DeferConnectors)  # type: ignore[arg-type]
        if _KEEP_OUT and sys.modules.get("IPython", 0) is None:
            del sys.modules["IPython"]
        if _NOTICES is not None:
            logging.getLogger().removeHandler(_NOTICES)
        if _ONE_BLAS_THREAD:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)

    if _HAVE_BEAM:
        from pipeline.graph import build_pipeline
        from pipeline.heap import leave_loaded_out
        from pipeline.run import main, run

        _LOADED = True
finally:
    if _COLLECTING:
        if _LOADED:
            leave_loaded_out()
        gc.enable()

if not _HAVE_BEAM:

    def __getattr__(name: str) -> Any:
        if name in __all__:
            raise ModuleNotFoundError(NO_BEAM, name="apache_beam")
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")

__all__ = ["build_pipeline", "main", "run"]
