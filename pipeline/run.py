"""Graph assembly and the command line: ``python -m pipeline``.

Everything that can be checked is checked before the pipeline is built: the flags, that
every input pattern matches a file, that the tokenizer loads and has BOS and EOS, that the
output directory is empty (or ``--overwrite``). A failed check prints one line naming the
option and the fix, and exits with status 2.

Runners: without ``--runner`` the job runs on Beam's FnApiRunner (see `_runner`). Any other
runner gets the same graph unchanged: ``--runner DataflowRunner`` (workers install the
project from ``--setup_file ./setup.py``), ``--runner FlinkRunner`` or ``PortableRunner``
(SDK workers from a worker pool or a container that has the project installed).

``--dry_run``: the graph is built and, where the runner supports it (DataflowRunner),
translated, but nothing runs and nothing touches a file system: the checks that would
(patterns, tokenizer, output) are skipped, and the workers make them when the job really
runs. Runners without a dry run of their own (the local ones) only build the graph.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import logging
import os
import re
import sys
import time
import traceback
import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    TestOptions,
    WorkerOptions,
)
from apache_beam.runners.runner import PipelineResult, PipelineState

from pipeline import fs, graph, launch, progress
from pipeline.encode import load_tokenizer
from pipeline.graph import build_pipeline, shard_plan
from pipeline.options import JobConfig, TokenWindowsOptions, runner_name
from pipeline.output import absolute, check_outside_inputs, claim_output, release
from pipeline.read import PatternMatch
from pipeline.views import JobOptions
from transforms.chunks import Chunk
from transforms.input_names import pattern_base, relative_name, shown_name
from transforms.manifest import MANIFEST_NAME, parse_manifest, parse_splits_record
from transforms.manifest_build import job_fingerprint
from transforms.schema import (
    REJECTS_DIR,
    TMP_DIR,
)
from transforms.splits import SPLITS_NAME

__all__ = ["Plan", "Submitted", "check_flags", "cli", "main", "preflight", "run", "submit"]

_LOG = logging.getLogger("token_windows")


def _is_dry_run(options: PipelineOptions) -> bool:
    return str(options.view_as(TestOptions).dry_run).lower() in ("true", "1", "yes")


def _settle_dry_run(options: PipelineOptions) -> bool:
    """Whether this is a dry run, written back as a bool so that Beam agrees.

    ``--dry_run`` has no type in Beam: ``--dry_run=False`` arrives as the string 'False',
    which Beam's DataflowRunner would take for true (and then submit nothing).
    """
    dry = _is_dry_run(options)
    options.view_as(TestOptions).dry_run = dry
    return dry


def _is_dataflow(options: PipelineOptions) -> bool:
    return runner_name(options) in ("dataflowrunner", "testdataflowrunner")


def _release(config: JobConfig, plan: Plan | None) -> None:
    if plan is not None:
        release(config, attempt=plan.attempt, fingerprint=plan.fingerprint, tmp_dir=plan.tmp_dir)


class Plan(NamedTuple):
    """What the launcher settled before the job starts (`preflight`)."""

    files: dict[str, tuple[int, float | None]] | None  # {path: (size, mtime)}; None: dry run
    fingerprint: str
    attempt: str | None  # the id in the claim on the output; None: no claim (dry run)
    tmp_dir: str  # OUTPUT/.tmp/<attempt>: every temporary file of this job
    # (pattern index, path, size, mtime) of every match, a file once per pattern; None: dry run
    matched: list[PatternMatch] | None = None
    # The input chunks as the launcher planned them (`pipeline.launch`: Dask only), else None
    chunks: list[Chunk] | None = None


def preflight(config: JobConfig, options: PipelineOptions) -> Plan:
    """The checks that need no pipeline; raises ValueError naming the option and the fix.

    On success the output is claimed for this job (`Plan.attempt`) and empty.
    """
    # Before the first path is touched: FileSystems builds its S3 (and GCS) clients from
    # the job's options (--s3_endpoint_url, keys, region …); beam.Pipeline() would set
    # them only later, and S3 refuses a client without them ("Must provide one of client
    # or options").
    fs.set_options(options)
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_threading":
        raise ValueError(
            "--direct_running_mode=multi_threading is refused: in Beam 2.77 it silently loses "
            "elements under load (1e6 elements through a GroupByKey lost 0.3-1.2 %); use "
            "in_memory or multi_processing"
        )
    if _is_dataflow(options):
        _check_dataflow(config, options)
    check_outside_inputs(config)
    if _is_dry_run(options):
        return Plan(None, "", None, fs.join(config.output, TMP_DIR, "dry-run"))
    files: dict[str, tuple[int, float | None]] = {}
    names: list[tuple[int, str, int]] = []
    matched: list[PatternMatch] = []
    out = absolute(config.output).rstrip("/") + "/"
    for index, pattern in enumerate(config.inputs):
        found = fs.match_files(pattern)
        broken = fs.broken_links(pattern)
        if broken:
            raise ValueError(
                f"--input {pattern} matches {len(broken)} broken symbolic links (e.g. "
                f"{shown_name(broken[0])}: dangling, or a loop), which would be skipped "
                "silently; remove them or narrow the pattern"
            )
        if not found:
            raise ValueError(f"--input {pattern} matches no file; check the path and quoting")
        base = pattern_base(pattern)
        for path, size, mtime in found:
            if shown_name(path) != path:
                raise ValueError(
                    f"--input {pattern} matches {shown_name(path)}, whose name is not UTF-8: "
                    "Beam cannot carry it between steps; rename the file (e.g. with convmv)"
                )
            if absolute(path).startswith(out):
                raise ValueError(
                    f"--input {pattern} matches {shown_name(path)} inside --output "
                    f"{config.output}: the job would read its own output; choose an output "
                    "outside the input pattern"
                )
            matched.append((index, path, size, mtime))
            if path not in files:
                names.append((index, relative_name(path, base), size))
            files.setdefault(path, (size, mtime))
    chunks = (launch.plan_at_launch(config, matched, chunk_bytes=graph.CHUNK_BYTES)
              if launch.plans_chunks(options) else None)
    tokenizer = load_tokenizer(config.tokenizer_spec).info()
    fingerprint = job_fingerprint(tokenizer=tokenizer, windows=config.windows.to_json(),
                                  reading=config.read.to_json(), num_shards=config.num_shards,
                                  files=names, splits=config.splits.to_json() or None)
    attempt = uuid.uuid4().hex[:16]  # temporary names only: it never reaches the output
    claim_output(config, attempt, fingerprint)
    return Plan(files, fingerprint, attempt, fs.join(config.output, TMP_DIR, attempt), matched,
                chunks)


def _check_dataflow(config: JobConfig, options: PipelineOptions) -> None:
    """What a Dataflow job needs that the launcher can tell without touching a file system."""
    paths = [("--input", p) for p in config.inputs] + [("--output", config.output)]
    if config.tokenizer_path is not None:
        paths.append(("--tokenizer", config.tokenizer_path))
    for flag, path in paths:
        if fs.scheme(path) in (None, "file"):
            raise ValueError(
                f"{flag} {path} is a local path, which Dataflow workers cannot read or write; "
                "copy it to (or point it at) gs://BUCKET/..."
            )
    setup = options.view_as(SetupOptions)
    if not (
        setup.setup_file
        or setup.extra_packages
        or setup.requirements_file
        or options.view_as(WorkerOptions).sdk_container_image
    ):
        raise ValueError(
            "--runner DataflowRunner needs this project on its workers: pass --setup_file "
            "./setup.py (or --sdk_container_image with token-windows installed)"
        )


def _runner(options: PipelineOptions) -> Any:
    """Beam's FnApiRunner unless --runner says otherwise (``--runner DaskRunner`` is Beam's
    ``apache_beam.runners.dask.dask_runner.DaskRunner``).

    A bare DirectRunner in Beam 2.77 first tries the Prism runner, which downloads a binary
    and ignores --direct_running_mode; the FnApiRunner is what DirectRunner falls back to
    and honours --direct_running_mode and --direct_num_workers. Outputs are identical either
    way (the tests compare bytes), but the default is the one we test.
    """
    if runner_name(options) == "daskrunner":
        # Beam knows the DaskRunner only by its full module path; --runner DaskRunner works.
        from apache_beam.runners.dask.dask_runner import DaskRunner

        return DaskRunner()
    if options.view_as(StandardOptions).runner is not None:
        return None
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    return fn_runner.FnApiRunner()


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


def _parser() -> argparse.ArgumentParser:
    # None of our flags is required=True (see pipeline.options), so argparse would show them
    # all as optional: the usage line says which are required.
    parser = argparse.ArgumentParser(
        prog=_prog(),
        usage="%(prog)s --input PATTERN [--input PATTERN ...] --tokenizer "
        "{bytes,MODEL.model,tokenizer.json} --output DIR [options] [beam options]",
        description="Turn text corpora into document-bounded token windows in seeded Parquet "
        "shards plus a manifest.",
        epilog="Beam's own options pass through unchanged, e.g. --runner DataflowRunner, "
        "--direct_running_mode multi_processing --direct_num_workers 2. The default runner is "
        "Beam's FnApiRunner (in-process).",
    )
    parser.add_argument("--version", action="version", version=_version())
    TokenWindowsOptions._add_argparse_args(parser)
    return parser


_PASS_THROUGH_RUNNERS = ("flinkrunner", "sparkrunner", "portablerunner", "prismrunner")


def _option_strings() -> tuple[set[str], set[str]]:
    """(our flags, every flag Beam's options classes know)."""
    ours = argparse.ArgumentParser(add_help=False)
    TokenWindowsOptions._add_argparse_args(ours)
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
    def flags(parser: argparse.ArgumentParser) -> set[str]:
        return {o for o in parser._option_string_actions if o.startswith("--")}

    return flags(ours), flags(beam_all)


def check_flags(argv: Sequence[str], options: PipelineOptions) -> None:
    """Refuse flags that no options class knows, with the flag meant (``--widow`` →
    ``--window``, ``--text_field`` → ``--text-field``).

    Beam itself only warns ("Discarding unparseable args") and runs on defaults. Runners
    that forward unknown flags to a Java job server (Flink, Spark, portable) still get the
    flags that resemble none of ours.

    Raises:
        ValueError: naming the flag and the suggestion.
    """
    if runner_name(options) == "daskrunner":
        # DaskOptions (--dask_client_address …) exist once the runner's module is imported.
        with contextlib.suppress(ImportError):
            import apache_beam.runners.dask.dask_runner  # noqa: F401
    ours, known = _option_strings()
    forward = runner_name(options) in _PASS_THROUGH_RUNNERS
    for arg in argv:
        if not arg.startswith("--") or arg == "--":
            continue
        flag = arg.split("=", 1)[0]
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


class Submitted(NamedTuple):
    """A started job: what `submit` returns."""

    config: JobConfig
    result: PipelineResult | None
    dry_run: bool
    started: float  # time.monotonic() when the graph began to be built
    plan: Plan | None = None
    progress: progress.Progress | None = None  # local runners: stopped when the job ends


class _Prepared(NamedTuple):
    config: JobConfig
    options: PipelineOptions
    dry_run: bool
    plan: Plan


def _prepare(argv: Sequence[str] | None) -> _Prepared:
    """Every check before any work; raises ValueError (the job is refused)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _parser().parse_known_args(argv)  # --help, and argparse's own type/choice errors
    options = JobOptions(argv)
    check_flags(argv, options)
    config = JobConfig.from_options(options)
    dry_run = _settle_dry_run(options)
    return _Prepared(config, options, dry_run, preflight(config, options))


def _start(job: _Prepared) -> Submitted:
    config, options, dry_run, plan = job
    try:
        setup = options.view_as(SetupOptions)
        if setup.save_main_session is None:
            # Every DoFn lives in an installed module. Beam would otherwise pickle __main__
            # for the DataflowRunner (its default with cloudpickle), which no worker needs.
            setup.save_main_session = False

        started = time.monotonic()
        # On Dask the work spreads only as far as the first Create's partitions: start from
        # the launcher's chunks (`pipeline.launch`). Elsewhere the workers match the patterns
        # (a Create of 10^5 paths would sit in the job graph, whose size Dataflow limits)
        # and Reshuffle spreads the chunks.
        chunks = None
        if plan.chunks is not None:
            chunks = launch.prepare_chunks(
                plan.chunks, options, tmp_dir=plan.tmp_dir, root=config.output,
                pipeline=lambda: beam.Pipeline(runner=_runner(options), options=options))
        p = beam.Pipeline(runner=_runner(options), options=options)
        build_pipeline(p, config, plan.files, fingerprint=plan.fingerprint,
                       tmp_dir=plan.tmp_dir, attempt=plan.attempt, chunks=chunks)
        if dry_run and not _is_dataflow(options):
            p.to_runner_api()  # the graph translates; nothing runs
            return Submitted(config, None, dry_run, started, plan)
        reporter = _start_progress(config, options, plan.files)
        try:
            result = p.run()
        except BaseException:
            if reporter is not None:
                reporter.stop()
            raise
        if reporter is not None and PipelineState.is_terminal(result.state):
            reporter.stop()  # the FnApiRunner ran the whole job inside run()
        return Submitted(config, result, dry_run, started, plan, reporter)
    except BaseException:
        _release(config, plan)
        raise


def _start_progress(config: JobConfig, options: PipelineOptions,
                    files: dict[str, tuple[int, float | None]] | None
                    ) -> progress.Progress | None:
    """The start line and progress thread of a job on the local runner (else None)."""
    if files is None or runner_name(options) not in (None, "directrunner"):
        return None
    direct = options.view_as(DirectOptions)
    mode = direct.direct_running_mode or "in_memory"
    if mode == "multi_processing":
        mode += f" x{direct.direct_num_workers or os.cpu_count() or 1}"
    sizes = {path: size for path, (size, _) in files.items()}
    shards = shard_plan(config, files).num_shards
    tok = config.tokenizer_path.rsplit("/", 1)[-1] if config.tokenizer_path else "bytes"
    return progress.start(files=sizes, shards=shards, tokenizer=tok,
                          runner=f"local runner ({mode})")


def submit(argv: Sequence[str] | None = None) -> Submitted:
    """Check, build and start the job without waiting for it.

    In a dry run ``result`` is the runner's translation where it has one (for the
    DataflowRunner, ``result.job.proto_pipeline`` is the portable pipeline Dataflow would
    receive) and None where it has not: the local runners would ignore ``--dry_run`` and run
    the job, so its graph is only built. (The in-process runner runs the whole job inside
    ``p.run()``, so its errors while running surface here too.)

    Raises:
        ValueError: a flag, an input pattern, the tokenizer or the output directory is
            unusable (nothing has run).
    """
    return _start(_prepare(argv))


def run(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    """Run the job to its end; returns its manifest (None for a dry run).

    Raises:
        ValueError: a flag, an input pattern, the tokenizer or the output directory is
            unusable (nothing has run).
        Exception: whatever failed the job while it ran (its message names the file).
    """
    return _finish(submit(argv))


def _finish(job: Submitted) -> dict[str, Any] | None:
    if job.result is None or job.dry_run:
        done = "translated for Dataflow (nothing submitted)" if job.result else "nothing ran"
        print(f"dry run: the job was built and {done}")
        return None
    try:
        job.result.wait_until_finish()
    except BaseException:
        _release(job.config, job.plan)
        raise
    finally:
        if job.progress is not None:
            job.progress.stop()
        client = getattr(job.result, "client", None)  # the DaskRunner leaves its client open
        if client is not None:
            client.close()
    output = job.config.output
    if job.config.splits.names:
        record = fs.join(output, SPLITS_NAME)
        splits = parse_splits_record(fs.read_bytes(record), where=record)
        progress.split_summary(splits, output, time.monotonic() - job.started)
        return splits
    manifest = parse_manifest(fs.read_bytes(fs.join(output, MANIFEST_NAME)), where=output)
    _summary(manifest, output, time.monotonic() - job.started)
    return manifest


def _summary(manifest: dict[str, Any], output: str, seconds: float) -> None:
    """The job's last line: what the corpus holds and what the windows hold, apart.

    Corpus pairs (Σ P over documents) are the corpus size in targets; window tokens
    (Σ (length + 1)) count every overlap again. Their ratio, the overlap factor, is window
    pairs per covered corpus pair.
    """
    c = manifest["counts"]
    skipped = sum(c["skipped"].values())
    reasons = ", ".join(f"{k} {v:,}" for k, v in c["skipped"].items())
    window_pairs = c["tokens"] - c["windows"]
    covered = c["pairs"] - c["uncovered_pairs"]
    corpus_tokens = c["pairs"] + c["documents"]  # Σ M
    repaired = sum(c.get("repaired", {}).values())
    n = manifest["num_shards"]
    shards = f"{n} shard" if n == 1 else f"{n} shards"
    rejects = (f"rejects in {fs.join(output, REJECTS_DIR)}/ ({reasons})" if skipped
               else "no rejects")
    sampled = (f", {c['sampled_out']:,} left out by --sample {manifest['sample']['fraction']}"
               if "sample" in manifest else "")
    print(
        f"wrote {output}: {c['records']:,} records -> {c['documents']:,} documents "
        f"({skipped:,} skipped, {repaired:,} repaired{sampled}); corpus {c['pairs']:,} pairs; "
        f"{c['windows']:,} windows hold {c['tokens']:,} tokens, overlap factor "
        f"{window_pairs / covered if covered else 0:.2f}; {c['scored_targets']:,} scored "
        f"targets, {c['uncovered_pairs']:,} uncovered pairs; {shards} "
        f"in {seconds:.1f} s ({corpus_tokens / max(seconds, 1e-9):,.0f} corpus tokens/s); "
        f"{rejects}"
    )


def cli() -> None:
    """The ``token-windows`` command: `main`, then exit at once.

    Once the manifest is written nothing is left to do; tearing down Beam's few thousand
    modules would cost about half a second.
    """
    # The command owns its process, and nothing in it needs IPython, which Beam would import
    # (about 0.3 s) only to ask whether it runs in a notebook (Pipeline.apply) when the gcp
    # extra has made it importable (see pipeline/__init__.py).
    sys.modules.setdefault("IPython", None)  # type: ignore[arg-type]
    main()
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


def main(argv: Sequence[str] | None = None) -> None:
    """The console entry point: one-line errors and exit status 2 for a job refused before any
    work, 1 for a job that failed while it ran (``--traceback`` or TOKEN_WINDOWS_TRACEBACK=1
    print the whole traceback)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _LOG.setLevel(logging.INFO)
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "--traceback" in args or os.environ.get("TOKEN_WINDOWS_TRACEBACK") == "1"
    try:
        prepared = _prepare(args)
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
        _finish(_start(prepared))
    except Exception as e:
        if verbose:
            traceback.print_exc()
        print(f"error: the job failed: {one_line(e)}", file=sys.stderr)
        raise SystemExit(1) from None
