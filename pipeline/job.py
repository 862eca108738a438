"""The job's lifecycle and the command line: ``python -m pipeline``.

`submit` checks everything it can before any work (`pipeline.flags`, `pipeline.preflight`),
builds the job's context and graph (`pipeline.context`, `pipeline.graph`) and starts it on
its runner (`pipeline.runners`); `finish` waits for it, releases the output's claim if it
failed, and prints the summary (`pipeline.summary`); `run` is both. `main` is the console
entry point: a refused job prints one line and exits with status 2, a job that failed while
running one line and status 1.

``--dry_run``: the graph is built and, where the runner supports it (DataflowRunner),
translated, but nothing runs and nothing touches a file system: the checks that would
(patterns, tokenizer, output) are skipped, and the workers make them when the job really
runs. Runners without a dry run of their own (the local ones) only build the graph.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
import time
import traceback
from collections.abc import Sequence
from typing import NamedTuple

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineResult, PipelineState

from pipeline import LOG_FORMAT, fs, launch, progress
from pipeline.context import JobContext, Tuning
from pipeline.flags import check_flags, parser
from pipeline.graph import build_pipeline
from pipeline.options import JobConfig
from pipeline.output import release
from pipeline.preflight import Launch, preflight
from pipeline.runners import (
    is_dataflow,
    is_local,
    local_mode,
    prompt_bundle_ends,
    runner_for,
    settle_dry_run,
    settle_setup,
)
from pipeline.summary import print_summary
from pipeline.views import JobOptions
from transforms.json_fields import JsonObject
from transforms.manifest import MANIFEST_NAME, parse_splits_record, read_manifest
from transforms.splits import SPLITS_NAME

__all__ = ["Submitted", "cli", "finish", "main", "one_line", "run", "submit"]

_LOG = logging.getLogger("token_windows")


class Submitted(NamedTuple):
    """A started job: what `submit` returns."""

    context: JobContext
    result: PipelineResult | None
    dry_run: bool
    started: float  # time.monotonic() when the graph began to be built
    progress: progress.Progress | None = None  # local runners: stopped when the job ends

    @property
    def config(self) -> JobConfig:
        """The job's validated flags."""
        return self.context.config


class _Prepared(NamedTuple):
    options: PipelineOptions
    dry_run: bool
    launch: Launch


def _release(context: JobContext) -> None:
    if context.attempt is not None:
        release(context.config, attempt=context.attempt, fingerprint=context.fingerprint,
                tmp_dir=context.tmp_dir)


def _prepare(argv: Sequence[str] | None, tuning: Tuning | None) -> _Prepared:
    """Every check before any work; raises ValueError (the job is refused)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser().parse_known_args(argv)  # --help, and argparse's own type/choice errors
    options = JobOptions(argv)
    check_flags(argv, options)
    config = JobConfig.from_options(options)
    dry_run = settle_dry_run(options)
    return _Prepared(options, dry_run, preflight(config, options, tuning=tuning))


def _start(job: _Prepared) -> Submitted:
    # `held`, the launcher's tokenizer, stays referenced until this returns: the in-process
    # runner's steps, which run inside p.run(), take it instead of loading their own.
    options, dry_run, (context, files, matched, planned, held) = job
    reporter = None
    try:
        settle_setup(options)
        started = time.monotonic()
        # On Dask the work spreads only as far as the first Create's partitions, and the
        # local runner runs each planning stage one after the other: both start from the
        # launcher's chunks (`pipeline.launch`). Elsewhere the workers match the patterns
        # (a Create of 10^5 paths would sit in the job graph, whose size Dataflow limits)
        # and Reshuffle spreads the chunks.
        chunks = None
        if planned is not None:
            chunks = launch.prepare_chunks(
                planned, options, tmp_dir=context.tmp_dir, root=context.output,
                pipeline=lambda: beam.Pipeline(runner=runner_for(options), options=options))
        elif matched is not None and is_local(options):  # no matching stages in the graph
            chunks = launch.plan_local(context.config, matched,
                                       chunk_bytes=context.tuning.chunk_bytes)
        if files is not None and is_local(options):
            # The local runner's workers report progress into the launcher's directory.
            reporter = progress.Progress(total_bytes=sum(size for size, _ in files.values()),
                                         interval=context.tuning.progress_interval)
            context = dataclasses.replace(context, progress_dir=reporter.directory)
        p = beam.Pipeline(runner=runner_for(options), options=options)
        # The local runner in_memory has one worker: nothing to spread the chunks over.
        spread = planned is not None or local_mode(options) != "in_memory"
        build_pipeline(p, context, expected_files=files, chunks=chunks, spread_chunks=spread)
        if dry_run and not is_dataflow(options):
            p.to_runner_api()  # the graph translates; nothing runs
            return Submitted(context, None, dry_run, started)
        if reporter is not None:
            tok = context.config.tokenizer_path
            reporter.start(files=len(files), shards=context.plan.num_shards,
                           tokenizer=tok.rsplit("/", 1)[-1] if tok else "bytes",
                           runner=f"local runner ({local_mode(options)})")
        with prompt_bundle_ends(options):
            result = p.run()
        if reporter is not None and PipelineState.is_terminal(result.state):
            reporter.stop()  # the FnApiRunner ran the whole job inside run()
        return Submitted(context, result, dry_run, started, reporter)
    except BaseException:
        if reporter is not None:
            reporter.stop()
        _release(context)
        raise


def submit(argv: Sequence[str] | None = None, *, tuning: Tuning | None = None) -> Submitted:
    """Check, build and start the job without waiting for it.

    In a dry run ``result`` is the runner's translation where it has one (for the
    DataflowRunner, ``result.job.proto_pipeline`` is the portable pipeline Dataflow would
    receive) and None where it has not: the local runners would ignore ``--dry_run`` and run
    the job, so its graph is only built. (The in-process runner runs the whole job inside
    ``p.run()``, so its errors while running surface here too.) ``tuning``: the job's knobs
    (`pipeline.context.Tuning`; none changes a byte of the output).

    Raises:
        ValueError: a flag, an input pattern, the tokenizer or the output directory is
            unusable (nothing has run).
    """
    return _start(_prepare(argv, tuning))


def run(argv: Sequence[str] | None = None, *,
        tuning: Tuning | None = None) -> JsonObject | None:
    """Run the job to its end; returns its manifest (None for a dry run).

    Raises:
        ValueError: a flag, an input pattern, the tokenizer or the output directory is
            unusable (nothing has run).
        Exception: whatever failed the job while it ran (its message names the file).
    """
    return finish(submit(argv, tuning=tuning))


def finish(job: Submitted) -> JsonObject | None:
    """Wait for a `submit`ted job, print its summary and return its manifest (a split job:
    its ``_splits.json``); None for a dry run. A job that fails releases its claim."""
    if job.result is None or job.dry_run:
        done = "translated for Dataflow (nothing submitted)" if job.result else "nothing ran"
        print(f"dry run: the job was built and {done}")
        return None
    try:
        job.result.wait_until_finish()
    except BaseException:
        _release(job.context)
        raise
    finally:
        if job.progress is not None:
            job.progress.stop()
        client = getattr(job.result, "client", None)  # the DaskRunner leaves its client open
        if client is not None:
            client.close()
    output = job.config.output
    if job.config.splits.names:
        path = fs.join(output, SPLITS_NAME)
        record = parse_splits_record(fs.read_bytes(path), where=path)
        print_summary(record, output, time.monotonic() - job.started)
        return record
    manifest = read_manifest(fs.read_bytes(fs.join(output, MANIFEST_NAME)), where=output)
    print_summary(manifest, output, time.monotonic() - job.started)
    return manifest.json


def cli() -> None:
    """The ``token-windows`` command: `main`, then exit at once.

    Once the manifest is written nothing is left to do; tearing down Beam's few thousand
    modules would cost about half a second.
    """
    # The command owns its process, and nothing in it needs IPython, which Beam would import
    # (about 0.3 s) only to ask whether it runs in a notebook (Pipeline.apply) when the gcp
    # extra has made it importable. Its workers' collectors, too (`Tuning.freeze_loaded`).
    sys.modules.setdefault("IPython", None)  # type: ignore[arg-type]
    main(tuning=Tuning(freeze_loaded=True))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


_WHILE_RUNNING = re.compile(r" \[while running '[^']*'\]")
_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception|Exit)): (.+)$")


def one_line(error: BaseException) -> str:
    """The message of an error as one line: the innermost error a Beam runner reports (its
    worker tracebacks and step names left out)."""
    text = str(error) or type(error).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) > 1:
        found = [m.group(2) for ln in lines if (m := _ERROR_LINE.match(ln))]
        text = found[-1] if found else lines[0]
    return _WHILE_RUNNING.sub("", text).strip()


def main(argv: Sequence[str] | None = None, *, tuning: Tuning | None = None) -> None:
    """The console entry point: one-line errors and exit status 2 for a job refused before any
    work, 1 for a job that failed while it ran (``--traceback`` or TOKEN_WINDOWS_TRACEBACK=1
    print the whole traceback). ``tuning``: the job's knobs (`pipeline.context.Tuning`), for
    callers in Python; the command line runs on the defaults."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    _LOG.setLevel(logging.INFO)
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "--traceback" in args or os.environ.get("TOKEN_WINDOWS_TRACEBACK") == "1"
    try:
        prepared = _prepare(args, tuning)
    except (ValueError, OSError) as e:
        if verbose:
            traceback.print_exc()
        print(f"error: {one_line(e)}", file=sys.stderr)
        raise SystemExit(2) from None
    if not verbose:
        # Beam logs a failed bundle with its traceback; the one line below says it.
        for name in ("apache_beam.runners.common", "apache_beam.runners.worker",
                     "apache_beam.runners.portability"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        finish(_start(prepared))
    except Exception as e:
        if verbose:
            traceback.print_exc()
        print(f"error: the job failed: {one_line(e)}", file=sys.stderr)
        raise SystemExit(1) from None
