"""The launcher's checks before any work, and the job's context they settle.

Everything that can be checked is checked before the pipeline is built: that every input
pattern matches a file (none a broken link, none inside the output, every name UTF-8), that
the tokenizer loads and has BOS and EOS, what Dataflow needs, and that the output directory
is empty (or ``--overwrite``), which is then claimed for this job. A failed check raises a
`ValueError` naming the option and the fix (the command line exits with status 2).

``--dry_run`` touches no file system: the patterns, tokenizer and output are not checked
(the workers check them when the job really runs) and nothing is claimed.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.utils import shared

from pipeline.files import fs
from pipeline.files.output import absolute, check_outside_inputs, claim_output
from pipeline.launch import chunk_plan
from pipeline.launch.context import JobContext, Tuning, job_context
from pipeline.launch.options import JobConfig
from pipeline.launch.runners import (
    check_dataflow,
    check_running_mode,
    is_dataflow,
    is_dry_run,
    is_local,
    local_mode,
)
from pipeline.steps.dedup import check_eval_files
from pipeline.steps.encode import acquire_tokenizer
from pipeline.steps.read import PatternMatch
from transforms.dataset.schema import TMP_DIR
from transforms.dedup.removal import RemovalSpec
from transforms.inputs.chunks import Chunk, detect_format
from transforms.inputs.names import pattern_base, relative_name, shown_name
from transforms.shards.manifest_build import job_fingerprint
from transforms.tokenize.tokenizers import Tokenizer

__all__ = ["Launch", "preflight"]


class Launch(NamedTuple):
    """What the launcher settled before the job starts (`preflight`)."""

    context: JobContext
    files: dict[str, tuple[int, float | None]] | None  # {path: (size, mtime)}; None: dry run
    # (pattern index, path, size, mtime) of every match, a file once per pattern; None: dry run
    matched: list[PatternMatch] | None = None
    # The input chunks as the launcher planned them (`pipeline.launch.chunk_plan`: Dask only), else
    # None
    chunks: list[Chunk] | None = None
    # The tokenizer the launcher loaded through the context's handle; None: dry run. Held
    # while the job runs: Beam's Shared keeps only a weak reference, and steps run in this
    # process take this one (`pipeline.steps.encode.acquire_tokenizer`).
    tokenizer: Tokenizer | None = None


def preflight(config: JobConfig, options: PipelineOptions, *,
              tuning: Tuning | None = None,
              claiming: Callable[[JobContext], object] | None = None) -> Launch:
    """The checks that need no pipeline; raises ValueError naming the option and the fix.

    On success the output is claimed for this job (the context's ``attempt``) and empty,
    and the job's context is built: its shard plan, its tokenizer's record, its fingerprint.
    ``claiming`` is given the context just before the claim is taken, so that a signal from
    then on releases it (`pipeline.job.main`).
    """
    tuning = tuning or Tuning()
    # Before the first path is touched: FileSystems builds its S3 (and GCS) clients from
    # the job's options (--s3_endpoint_url, keys, region …); beam.Pipeline() would set
    # them only later, and S3 refuses a client without them ("Must provide one of client
    # or options").
    fs.set_options(options)
    check_running_mode(options)
    if is_dataflow(options):
        check_dataflow(config, options)
    check_outside_inputs(config)
    if not is_dry_run(options):
        _check_gcs_answers(config)
    if is_dry_run(options):
        removal = (RemovalSpec(dedup=config.dedup, eval_ngram=config.decontaminate_ngram)
                   if config.removes else None)
        return Launch(job_context(config, None, fingerprint="", tokenizer=None,
                                  tmp_dir=fs.join(config.output, TMP_DIR, "dry-run"),
                                  tuning=tuning, removal=removal), None)
    # SentencePiece and tokenizers parse a model with the GIL released (40 ms for a 32k
    # SentencePiece model): it loads on a helper thread while this one matches the inputs and
    # loads what the job would load later anyway (`_load_ahead`). A pattern that matches
    # nothing is still the error reported, before any about the tokenizer. It loads as a
    # worker's would, through the job's handle: the in-process runner's steps take it.
    handle = shared.Shared()
    with ThreadPoolExecutor(1, thread_name_prefix="load-tokenizer") as pool:
        loading = pool.submit(acquire_tokenizer, handle, config)
        files, names, matched = _match_inputs(config)
        _refuse_only_empty_files(config, files)
        removal = _removal(config)
        chunks = (chunk_plan.plan_at_launch(config, matched, chunk_bytes=tuning.chunk_bytes)
                  if chunk_plan.plans_chunks(options) else None)
        _load_ahead(options)
        tokenizer = loading.result()
    info = tokenizer.info()
    fingerprint = job_fingerprint(tokenizer=info, windows=config.windows.to_json(),
                                  reading=config.read.to_json(), num_shards=config.num_shards,
                                  files=names, splits=config.splits.to_json() or None,
                                  dedup=None if removal is None else removal.fingerprint_json())
    attempt = uuid.uuid4().hex[:16]  # temporary names only: it never reaches the output
    # The context (its shard plan checks --num-shards) before the claim: a refusal after
    # the claim would leave it behind.
    context = job_context(config, files, fingerprint=fingerprint, tokenizer=info,
                          tmp_dir=fs.join(config.output, TMP_DIR, attempt), attempt=attempt,
                          tuning=tuning, tokenizer_handle=handle, removal=removal)
    if claiming is not None:  # told first: a signal from here on releases what it names
        claiming(context)
    claim_output(config, attempt, fingerprint)
    return Launch(context, files, matched, chunks, tokenizer)


# How long the launcher waits for Google Cloud Storage to answer its first request. Without
# credentials Beam connects anonymously, and where the store cannot be reached its client
# retries for minutes; a refusal that says why is better.
GCS_ANSWER_SECONDS = 60.0


def _check_gcs_answers(config: JobConfig) -> None:
    """One request to the first ``gs://`` path of the job (an input, the tokenizer, the
    output), on a helper thread the launcher waits for at most `GCS_ANSWER_SECONDS`; refused
    (ValueError, naming the path and what to check) if it has not answered by then."""
    paths = [p for p in (*config.inputs, config.tokenizer_path or "", config.output)
             if fs.scheme(p) == "gs"]
    if not paths:
        return
    answered = threading.Event()

    def ask() -> None:
        try:
            fs.exists(paths[0])
        except Exception:  # an answer all the same: the matching reports it properly
            pass
        finally:
            answered.set()

    # A daemon thread: if the store never answers, it must not keep the process alive.
    threading.Thread(target=ask, name="gcs-first-request", daemon=True).start()
    if answered.wait(GCS_ANSWER_SECONDS):
        return
    raise ValueError(
        f"{paths[0]}: Google Cloud Storage did not answer within {GCS_ANSWER_SECONDS:.0f} s "
        f"({_gcs_credentials()}); check the network (or STORAGE_EMULATOR_HOST), and the "
        "credentials: gcloud auth application-default login, or GOOGLE_APPLICATION_CREDENTIALS")


def _gcs_credentials() -> str:
    """What Google's default credential lookup finds, in words."""
    try:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
    except ImportError:
        return "google-auth is not installed: pip install -e '.[gcp]'"
    try:
        google.auth.default()
    except DefaultCredentialsError:
        return "no Google Cloud credentials were found, so Beam connects anonymously"
    except Exception as e:  # the lookup itself failed: say so
        return f"the credential lookup failed: {e}"
    return "credentials were found"


def _refuse_only_empty_files(config: JobConfig,
                             files: dict[str, tuple[int, float | None]]) -> None:
    """Inputs that are all 0 bytes hold no record: refused as an input of one blank line
    fails (a job of no document makes no dataset). With ``--keep-empty`` an empty text file
    is an empty document, so the job runs."""
    if config.read.keep_empty or any(size for size, _ in files.values()):
        return
    first, n = shown_name(sorted(files)[0]), len(files)
    raise ValueError(
        f"--input {' '.join(config.inputs)} matches only empty files ({n} file{'s' * (n > 1)} "
        f"of 0 bytes, e.g. {first}): there is no record to make a dataset of; check the "
        "pattern, or wait until the files are written")


def _load_ahead(options: PipelineOptions) -> None:
    """Load now what a local job loads later: Beam's FnApiRunner (20-30 ms of imports), and
    for the in-process runner what pyarrow loads on a shard writer's first rows
    (`transforms.shards.rows`: ``pa.array`` of a NumPy array imports ``numpy.ma``, which would hold
    up the shard writers' first rows)."""
    if not is_local(options):
        return
    from apache_beam.runners.portability.fn_api_runner import fn_runner  # noqa: F401

    if local_mode(options) == "in_memory":
        import numpy as np
        import pyarrow as pa

        pa.array(np.zeros(1, np.int64))


def _removal(config: JobConfig) -> RemovalSpec | None:
    """What the dedup pass removes: --dedup's parameters and the evaluation files
    --decontaminate matches (each readable by its extension); None without either flag."""
    if not config.removes:
        return None
    found: dict[str, tuple[str, int]] = {}
    for pattern in config.decontaminate:
        matched = fs.match_files(pattern)
        if not matched:
            raise ValueError(f"--decontaminate {pattern} matches no file; check the path and "
                             "quoting")
        base = pattern_base(pattern)
        for path, size, _ in matched:
            try:
                detect_format(shown_name(path), None)
            except ValueError:
                raise ValueError(
                    f"--decontaminate {pattern} matches {shown_name(path)}, whose format its "
                    "extension does not tell: name evaluation files .jsonl, .parquet or .txt"
                ) from None
            found.setdefault(path, (relative_name(path, base), size))
    files = sorted(((path, name, size) for path, (name, size) in found.items()),
                   key=lambda f: (f[1], f[0]))
    try:
        spec = RemovalSpec(dedup=config.dedup, eval_files=tuple(files),
                           eval_ngram=config.decontaminate_ngram)
    except ValueError as e:
        raise ValueError(f"--decontaminate: {e}") from None
    check_eval_files(spec, config.read)
    return spec


def _match_inputs(config: JobConfig) -> tuple[dict[str, tuple[int, float | None]],
                                              list[tuple[int, str, int]], list[PatternMatch]]:
    """({path: (size, mtime)}, (pattern index, relative name, size) of each file once, every
    match)."""
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
    return files, names, matched
