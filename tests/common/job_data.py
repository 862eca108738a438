"""The job's context for tests that build steps or graphs without the launcher."""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.launch.context import JobContext, Tuning, job_context
from pipeline.launch.options import JobConfig

__all__ = ["config_of", "context_of"]


def config_of(*flags: str) -> JobConfig:
    """The `JobConfig` of ``flags`` (``--input /c/*.jsonl --tokenizer bytes --output /o``
    unless they say otherwise)."""
    default = [] if "--input" in flags else ["--input", "/c/*.jsonl"]
    return JobConfig.from_options(PipelineOptions(
        [*default, "--tokenizer", "bytes", "--output", "/o", *flags]))


def context_of(*flags: str, files: dict | None = None, tuning: Tuning | None = None,
               tmp_dir: str | None = None) -> JobContext:
    """A `JobContext` of ``flags`` as `config_of` reads them, planned for ``files``, with the
    bytes tokenizer's record and a fixed fingerprint (no claim, no progress)."""
    from pipeline.steps.encode import load_tokenizer

    config = config_of(*flags)
    info = load_tokenizer(config.tokenizer_spec).info()
    return job_context(config, files, fingerprint="f" * 64, tokenizer=info, tmp_dir=tmp_dir,
                       tuning=tuning)
