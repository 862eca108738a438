"""The job's lifecycle and the command line: ``python -m pipeline``.

`submit` checks everything it can before any work (`pipeline.launch.flags`,
`pipeline.launch.preflight`), builds the job's context and graph (`pipeline.launch.context`,
`pipeline.graph`) and starts it on its runner (`pipeline.launch.runners`); `finish` waits for it,
releases the output's claim if it failed, and prints the summary (`pipeline.launch.summary`); `run`
is both. `main` is the console entry point: a refused job prints one line and exits with status 2, a
job that failed while running one line and status 1.

``--dry_run``: the graph is built and, where the runner supports it (DataflowRunner),
translated, but nothing runs and nothing touches a file system: the checks that would
(patterns, tokenizer, output) are skipped, and the workers make them when the job really
runs. Runners without a dry run of their own (the local ones) only build the graph.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineResult, PipelineState

from pipeline import LOG_FORMAT
from pipeline.files import fs
from pipeline.files.output import release
from pipeline.graph import build_pipeline
from pipeline.launch import chunk_plan
from pipeline.launch.context import JobContext, Tuning
from pipeline.launch.flags import check_flags, parser
from pipeline.launch.options import JobConfig
from pipeline.launch.preflight import Launch, preflight
from pipeline.launch.runners import (
    is_dataflow,
    is_local,
    local_mode,
    prompt_bundle_ends,
    runner_for,
    settle_dry_run,
    settle_setup,
)
from pipeline.launch.summary import print_summary
from pipeline.launch.views import JobOptions
from pipeline.steps import progress
from transforms.dataset.manifest import (
    MANIFEST_NAME,
    Manifest,
    SplitsRecord,
    parse_splits_record,
    read_manifest,
)
from transforms.plan.splits import SPLITS_NAME

__all__ = ["Interrupted", "Submitted", "cli", "finish", "main", "one_line", "run", "submit"]

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
        release(context.config, attempt=context.attempt, tmp_dir=context.tmp_dir)


def _prepare(argv: Sequence[str] | None, tuning: Tuning | None,
             claiming: Callable[[JobContext], object] | None = None) -> _Prepared:
    """Every check before any work; raises ValueError (the job is refused). ``claiming`` is
    given the job's context just before the output is claimed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser().parse_known_args(argv)  # --help, and argparse's own type/choice errors
    options = JobOptions(argv)
    check_flags(argv, options)
    config = JobConfig.from_options(options)
    dry_run = settle_dry_run(options)
    return _Prepared(options, dry_run,
                     preflight(config, options, tuning=tuning, claiming=claiming))


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
        # launcher's chunks (`pipeline.launch.chunk_plan`). Elsewhere the workers match the patterns
        # (a Create of 10^5 paths would sit in the job graph, whose size Dataflow limits)
        # and Reshuffle spreads the chunks.
        chunks = None
        if planned is not None:
            chunks = chunk_plan.prepare_chunks(
                planned, options, tmp_dir=context.tmp_dir, root=context.output,
                pipeline=lambda: beam.Pipeline(runner=runner_for(options), options=options))
        elif matched is not None and is_local(options):  # no matching stages in the graph
            chunks = chunk_plan.plan_local(context.config, matched,
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
    (`pipeline.launch.context.Tuning`; none changes a byte of the output).

    Raises:
        ValueError: a flag, an input pattern, the tokenizer or the output directory is
            unusable (nothing has run).
    """
    return _start(_prepare(argv, tuning))


def run(argv: Sequence[str] | None = None, *,
        tuning: Tuning | None = None) -> Manifest | SplitsRecord | None:
    """Run the job to its end; returns its manifest (a split job: its ``_splits.json``), as
    `transforms.dataset.manifest` parses it (None for a dry run).

    Raises:
        ValueError: a flag, an input pattern, the tokenizer or the output directory is
            unusable (nothing has run).
        Exception: whatever failed the job while it ran (its message names the file).
    """
    return finish(submit(argv, tuning=tuning))


def finish(job: Submitted) -> Manifest | SplitsRecord | None:
    """Wait for a `submit`ted job, print its summary and return its manifest (a split job:
    its ``_splits.json``) as parsed, a `Manifest` or a `SplitsRecord`; None for a dry run. A
    job that fails releases its claim."""
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
    return manifest


def cli() -> None:
    """The ``token-windows`` command: `main`, then exit at once with its status.

    Once the manifest is written nothing is left to do; tearing down Beam's few thousand
    modules would cost about half a second. After a failure or a signal, the runner's
    threads may still be busy (a shard writer finishing a shard nobody will use): the
    interpreter would wait for them, and the job's files are already removed.
    """
    # The command owns its process, and nothing in it needs IPython, which Beam would import
    # (about 0.3 s) only to ask whether it runs in a notebook (Pipeline.apply) when the gcp
    # extra has made it importable. Its workers' collectors, too (`Tuning.freeze_loaded`).
    sys.modules.setdefault("IPython", None)  # type: ignore[arg-type]
    code = 0
    try:
        main(tuning=Tuning(freeze_loaded=True))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


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


class Interrupted(KeyboardInterrupt):
    """A signal (SIGINT, SIGTERM, SIGHUP) stopped the command; ``signal`` is its name."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        # A runner may raise it again with the step appended ("… [while running 'X']").
        self.signal = _WHILE_RUNNING.sub("", name).strip()


_STOPPING = ("SIGINT", "SIGTERM", "SIGHUP")


@contextlib.contextmanager
def _signals_stop_the_job() -> Iterator[None]:
    """While the command runs, SIGINT, SIGTERM (what a scheduler sends) and SIGHUP (a closed
    terminal) raise `Interrupted` in the main thread, so each is handled as Ctrl-C is: the
    job's files and claim are removed and OUTPUT left as it was. The first signal switches
    them off until the cleanup is done (a second Ctrl-C must not cut it short); a signal
    that was ignored when the command started (``nohup``) stays ignored. The handlers are
    restored afterwards: a program that calls `main` keeps its own."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers
        return
    numbers = [getattr(signal, n) for n in _STOPPING if hasattr(signal, n)]
    previous = {n: signal.getsignal(n) for n in numbers}

    def stop(signum: int, frame: object) -> None:
        for n in numbers:
            signal.signal(n, signal.SIG_IGN)
        raise Interrupted(signal.Signals(signum).name)

    try:
        for n in numbers:
            if previous[n] is not signal.SIG_IGN:
                signal.signal(n, stop)
        yield
    finally:
        for n, handler in previous.items():
            signal.signal(n, handler if handler is not None else signal.SIG_DFL)


def main(argv: Sequence[str] | None = None, *, tuning: Tuning | None = None) -> None:
    """The console entry point: one-line errors and exit status 2 for a job refused before any
    work, 1 for a job that failed while it ran or was stopped by SIGINT, SIGTERM or SIGHUP
    (``--traceback`` or TOKEN_WINDOWS_TRACEBACK=1 print the whole traceback). ``tuning``: the
    job's knobs (`pipeline.launch.context.Tuning`), for callers in Python; the command line's
    also leave what the workers load out of later collections."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    _LOG.setLevel(logging.INFO)
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "--traceback" in args or os.environ.get("TOKEN_WINDOWS_TRACEBACK") == "1"
    claimed: list[JobContext] = []  # the job's, from just before it claims the output
    with _signals_stop_the_job():
        try:
            _main(args, tuning, verbose, claimed.append)
        except Interrupted as e:
            for context in claimed:  # released already, unless the signal came in between
                _release(context)
            if verbose:
                traceback.print_exc()
            if claimed and _complete(claimed[0]):
                print(f"error: stopped by {e.signal} after the last step had swapped the new "
                      "dataset in: --output holds it, complete", file=sys.stderr)
            else:
                print(f"error: stopped by {e.signal}: the job's temporary files and its claim "
                      "were removed, and --output holds what it held before; run the command "
                      "again to make the dataset", file=sys.stderr)
            raise SystemExit(1) from None


def _complete(context: JobContext) -> bool:
    """Whether OUTPUT holds this job's dataset: a signal that came during the last
    milliseconds of the swap, or after it, stopped a job that had finished."""
    name = SPLITS_NAME if context.config.splits.names else MANIFEST_NAME
    try:
        found = json.loads(fs.read_regular(fs.join(context.output, name)))
    except Exception:  # none, or not ours: not complete
        return False
    return isinstance(found, dict) and found.get("fingerprint") == context.fingerprint


def _main(args: list[str], tuning: Tuning | None, verbose: bool,
          claiming: Callable[[JobContext], object]) -> None:
    try:
        job = _prepare(args, tuning, claiming)
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
        finish(_start(job))
    except Exception as e:
        if verbose:
            traceback.print_exc()
        print(f"error: the job failed: {one_line(e)}", file=sys.stderr)
        raise SystemExit(1) from None
