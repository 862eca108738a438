"""The command line's parser, and flags refused with the one meant.

Beam's own options pass through `pipeline.launch.options` untouched; Beam only warns about a flag
no options class knows ("Discarding unparseable args") and runs on defaults, so a misspelled
flag (``--widow``, ``--text_field``) would be a silent wrong job. `check_flags` refuses it.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import sys
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.launch.options import TokenWindowsOptions, runner_name

__all__ = ["check_flags", "parser"]

# Runners that forward the flags they do not know to a Java job server.
_PASS_THROUGH_RUNNERS = ("flinkrunner", "sparkrunner", "portablerunner", "prismrunner")


def _prog() -> str:
    """How the user started us: the console script, or ``python -m pipeline``."""
    return ("token-windows" if os.path.basename(sys.argv[0]).startswith("token-windows")
            else "python -m pipeline")


def _version() -> str:
    from importlib import metadata

    try:
        ours = metadata.version("token-windows")
    except metadata.PackageNotFoundError:
        ours = "(not installed)"
    return f"token-windows {ours} (apache-beam {beam.__version__}, Python {sys.version.split()[0]})"


def parser() -> argparse.ArgumentParser:
    """The parser of ``--help``, ``--version`` and argparse's own type and choice errors."""
    # None of our flags is required=True (see pipeline.launch.options), so argparse would show them
    # all as optional: the usage line says which are required.
    out = argparse.ArgumentParser(
        prog=_prog(),
        usage="%(prog)s --input PATTERN [--input PATTERN ...] --tokenizer "
        "{bytes,MODEL.model,tokenizer.json} --output DIR [options] [beam options]",
        description="Turn text corpora into document-bounded token windows in seeded Parquet "
        "shards plus a manifest.",
        epilog="Beam's own options pass through unchanged, e.g. --runner DataflowRunner, "
        "--direct_running_mode multi_processing --direct_num_workers 2. The default runner is "
        "Beam's FnApiRunner (in-process).",
    )
    out.add_argument("--version", action="version", version=_version())
    TokenWindowsOptions._add_argparse_args(out)
    return out


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {o for o in parser._option_string_actions if o.startswith("--")}


def _our_flags() -> set[str]:
    ours = argparse.ArgumentParser(add_help=False)
    TokenWindowsOptions._add_argparse_args(ours)
    return _flags(ours)


def _beam_flags() -> set[str]:
    """Every flag Beam's options classes know (a parser of all of them: most of the checks'
    time, so built only for a command line that has a flag not ours)."""
    beam_all = argparse.ArgumentParser(add_help=False, allow_abbrev=False,
                                       conflict_handler="resolve")
    seen, stack = set(), list(PipelineOptions.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        stack.extend(cls.__subclasses__())
        try:
            cls._add_argparse_args(beam_all)
        except Exception:  # a third-party options class that cannot add its flags here
            continue
    return _flags(beam_all)


def check_flags(argv: Sequence[str], options: PipelineOptions) -> None:
    """Refuse flags that no options class knows, with the flag meant (``--widow`` →
    ``--window``, ``--text_field`` → ``--text-field``).

    Runners that forward unknown flags to a Java job server (Flink, Spark, portable) still
    get the flags that resemble none of ours.

    Raises:
        ValueError: naming the flag and the suggestion.
    """
    ours = _our_flags()
    given = [arg.split("=", 1)[0] for arg in argv if arg.startswith("--") and arg != "--"]
    if all(flag in ours for flag in given):
        return
    if runner_name(options) == "daskrunner":
        # DaskOptions (--dask_client_address …) exist once the runner's module is imported.
        with contextlib.suppress(ImportError):
            import apache_beam.runners.dask.dask_runner  # noqa: F401
    known = _beam_flags()
    forward = runner_name(options) in _PASS_THROUGH_RUNNERS
    for flag in given:
        if flag in known or flag in ours:
            continue
        dashed = "--" + flag[2:].replace("_", "-")
        if dashed in ours:
            raise ValueError(f"{flag} is not an option; did you mean {dashed}? (this job's "
                             "own flags are spelled with dashes, Beam's with underscores)")
        close = difflib.get_close_matches(flag, sorted(ours), n=1, cutoff=0.75)
        if forward and not close:
            continue
        close = close or difflib.get_close_matches(flag, sorted(known), n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}?" if close else "; see --help"
        raise ValueError(f"{flag} is not an option{hint}")
