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
import logging
import math
import os
import sys
import time
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

from pipeline import fs, progress
from pipeline.encode import load_tokenizer
from pipeline.graph import build_pipeline
from pipeline.options import JobConfig, TokenWindowsOptions, runner_name
from pipeline.read import TARGET_SHARD_INPUT_BYTES
from transforms.manifest import LEGACY_MANIFEST_NAME, MANIFEST_NAME, parse_manifest
from transforms.schema import LEGACY_REJECTS_DIR, REJECTS_DIR, SHARD_PATTERN, TMP_DIR

__all__ = ["Submitted", "cli", "main", "preflight", "run", "submit"]

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


def _is_ours(rel: str) -> bool:
    return (
        rel in (MANIFEST_NAME, LEGACY_MANIFEST_NAME)
        or SHARD_PATTERN.match(rel) is not None
        or rel.startswith((REJECTS_DIR + "/", LEGACY_REJECTS_DIR + "/", TMP_DIR + "/"))
    )


def _check_output(config: JobConfig) -> None:
    entries = fs.list_dir(config.output)
    if not entries:
        return
    rel = [e[len(config.output) :].lstrip("/") for e in entries]
    if not config.overwrite:
        raise ValueError(
            f"--output {config.output} already holds {len(entries)} files (e.g. {rel[0]}); "
            "pass --overwrite to replace that dataset, or choose another directory"
        )
    foreign = [r for r in rel if not _is_ours(r)]
    if foreign:
        raise ValueError(
            f"--output {config.output} holds files this job did not write (e.g. "
            f"{foreign[0]}); --overwrite deletes only datasets, so choose another directory"
        )
    # The manifest goes first: if the job dies now, the directory no longer looks finished.
    manifests = [fs.join(config.output, n) for n in (MANIFEST_NAME, LEGACY_MANIFEST_NAME)]
    fs.delete([m for m in manifests if m in entries])
    fs.delete([e for e in entries if e not in manifests])
    _LOG.info("--overwrite: deleted the %d files of the dataset in %s", len(entries), config.output)


def preflight(config: JobConfig, options: PipelineOptions) -> dict[str, int] | None:
    """The checks that need no pipeline; raises ValueError naming the option and the fix.

    Returns the input files and their sizes ({path: size}), or None in a dry run.
    """
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_threading":
        raise ValueError(
            "--direct_running_mode=multi_threading is refused: in Beam 2.77 it silently loses "
            "elements under load (1e6 elements through a GroupByKey lost 0.3-1.2 %); use "
            "in_memory or multi_processing"
        )
    if _is_dataflow(options):
        _check_dataflow(config, options)
    if _is_dry_run(options):
        return None
    files: dict[str, int] = {}
    for pattern in config.inputs:
        found = fs.match(pattern)
        if not found:
            raise ValueError(f"--input {pattern} matches no file; check the path and quoting")
        files.update(found)
    load_tokenizer(config.tokenizer_spec)
    _check_output(config)
    return files


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
    """Beam's FnApiRunner unless --runner says otherwise.

    A bare DirectRunner in Beam 2.77 first tries the Prism runner, which downloads a binary
    and ignores --direct_running_mode; the FnApiRunner is what DirectRunner falls back to
    and honours --direct_running_mode and --direct_num_workers. Outputs are identical either
    way (the tests compare bytes), but the default is the one we test.
    """
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


class Submitted(NamedTuple):
    """A started job: what `submit` returns."""

    config: JobConfig
    result: PipelineResult | None
    dry_run: bool
    started: float  # time.monotonic() when the graph began to be built
    progress: progress.Progress | None = None  # local runners: stopped when the job ends


def _start_progress(config: JobConfig, options: PipelineOptions,
                    files: dict[str, int] | None) -> progress.Progress | None:
    """The start line and progress thread of a job on the local runner (else None)."""
    if files is None or runner_name(options) not in (None, "directrunner"):
        return None
    direct = options.view_as(DirectOptions)
    mode = direct.direct_running_mode or "in_memory"
    if mode == "multi_processing":
        mode += f" x{direct.direct_num_workers or os.cpu_count() or 1}"
    shards = config.num_shards or max(1, math.ceil(sum(files.values()) / TARGET_SHARD_INPUT_BYTES))
    tok = config.tokenizer_path.rsplit("/", 1)[-1] if config.tokenizer_path else "bytes"
    return progress.start(files=files, shards=shards, tokenizer=tok,
                          runner=f"local runner ({mode})")


def submit(argv: Sequence[str] | None = None) -> Submitted:
    """Check, build and start the job without waiting for it.

    In a dry run ``result`` is the runner's translation where it has one (for the
    DataflowRunner, ``result.job.proto_pipeline`` is the portable pipeline Dataflow would
    receive) and None where it has not: the local runners would ignore ``--dry_run`` and run
    the job, so its graph is only built.

    Raises:
        ValueError: a flag, an input pattern, the tokenizer or the output directory is
            unusable (nothing has run).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    _parser().parse_known_args(argv)  # --help, and argparse's own type/choice errors
    options = PipelineOptions(argv)
    config = JobConfig.from_options(options)
    dry_run = _settle_dry_run(options)
    expected_files = preflight(config, options)
    setup = options.view_as(SetupOptions)
    if setup.save_main_session is None:
        # Every DoFn lives in an installed module. Beam would otherwise pickle __main__ for
        # the DataflowRunner (its default with cloudpickle), which no worker needs.
        setup.save_main_session = False

    started = time.monotonic()
    p = beam.Pipeline(runner=_runner(options), options=options)
    build_pipeline(p, config, expected_files)
    if dry_run and not _is_dataflow(options):
        p.to_runner_api()  # the graph translates; nothing runs
        return Submitted(config, None, dry_run, started)
    reporter = _start_progress(config, options, expected_files)
    try:
        result = p.run()
    except BaseException:
        if reporter is not None:
            reporter.stop()
        raise
    if reporter is not None and PipelineState.is_terminal(result.state):
        reporter.stop()  # the FnApiRunner ran the whole job inside run()
    return Submitted(config, result, dry_run, started, reporter)


def run(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    """Run the job to its end; returns its manifest (None for a dry run).

    Raises:
        ValueError: a flag, an input pattern, the tokenizer or the output directory is
            unusable (nothing has run).
    """
    job = submit(argv)
    if job.result is None or job.dry_run:
        done = "translated for Dataflow (nothing submitted)" if job.result else "nothing ran"
        print(f"dry run: the job was built and {done}")
        return None
    try:
        job.result.wait_until_finish()
    finally:
        if job.progress is not None:
            job.progress.stop()
    output = job.config.output
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
    print(
        f"wrote {output}: {c['records']:,} records -> {c['documents']:,} documents "
        f"({skipped:,} skipped, {repaired:,} repaired); corpus {c['pairs']:,} pairs; "
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
    main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: Sequence[str] | None = None) -> None:
    """The console entry point: one-line errors, exit status 2, no traceback."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _LOG.setLevel(logging.INFO)
    try:
        run(argv)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
