"""The job's context: one frozen record the launcher builds once and every step takes.

A step (`pipeline.steps.encode.EncodeChunks`, `pipeline.steps.write.WriteShards`,
`pipeline.steps.write.WriteRejects`, `pipeline.steps.finalize.FinalizeDataset`) is constructed with
the `JobContext` and reads what it needs from it: the validated flags (`JobConfig`), the shard
plan, the tokenizer's manifest record, the fingerprint, the temporary directory, the claim's
attempt id, where progress goes, and the `Tuning` knobs. A new job option is a field here (or
on `JobConfig`) read by the step that needs it, not a keyword threaded through four
signatures.

The context is pickled with every step's DoFn, to Dataflow, Flink, portable and Dask workers:
it holds plain values only (no client, no tokenizer; its ``tokenizer_handle`` pickles as a
key), and stays the same size whatever the corpus: the launcher's list of matched files,
which only the last step checks, is handed to `FinalizeDataset` on its own.

Example::

    context = job_context(config, files, fingerprint=f, tokenizer=info, tmp_dir=t)
    build_pipeline(beam.Pipeline(), context, expected_files=files)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from apache_beam.utils import shared

from pipeline.files import fs
from pipeline.launch.options import JobConfig
from pipeline.steps.read import plan_for_files
from transforms.dataset.manifest import TokenizerInfo
from transforms.dataset.schema import TMP_DIR
from transforms.dedup.removal import RemovalSpec
from transforms.inputs.chunk_plan import FOOTER_THREADS
from transforms.inputs.chunks import CHUNK_BYTES
from transforms.params import check_positive_int
from transforms.plan.keys import ShardPlan
from transforms.plan.splits import SplitSpec
from transforms.shards.encoding import BATCH_CHARS

__all__ = ["JobContext", "Tuning", "job_context"]

Files = Mapping[str, int] | Mapping[str, tuple[int, float | None]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tuning:
    """How the job uses its machines: none of these changes a byte of the output.

    Tests shrink them (tiny chunks and parts, one shard at a time, fast progress lines) to
    reach the paths a large corpus takes; ``pipeline.job.main(argv, tuning=...)`` takes them.

    Attributes:
        chunk_bytes: uncompressed line files larger than this are read in byte ranges, in
            parallel (`transforms.inputs.chunks`).
        part_text_bytes: with the file shuffle, a shard writer holds one part of about this
            much text at a time (the plan's parts per shard, `transforms.plan.keys.ShardPlan`).
        batch_chars: documents are encoded in batches of about this many characters.
        encoding_ahead: batches being encoded at once in a worker, each on its own helper
            thread: two keep the cores busy when one batch's documents split unevenly
            across SentencePiece's threads.
        shards_at_once: a worker process writes at most this many shards at once, and fewer
            than twice its cores (`pipeline.steps.write.write_in_waves`); the file shuffle hands
            the writers batches of at most this many, of even sizes.
        footer_threads: the last step reads this many shard footers at once.
        progress_interval: seconds between the launcher's progress lines; None: 10 s on a
            pipe or file, 1 s (one redrawn line) on a terminal.
        progress_write_every: a worker rewrites its progress file at most this often (s).
        freeze_loaded: each worker's steps leave what is loaded when they are set up out of
            later cyclic collections (`pipeline.steps.heap`), a few per cent of the job's CPU time.
            The command sets it, as it owns its processes and its workers; a program that
            calls `pipeline.run` keeps its own collector as it is.
    """

    chunk_bytes: int = CHUNK_BYTES
    part_text_bytes: int = 16 << 20
    batch_chars: int = BATCH_CHARS
    encoding_ahead: int = 2
    shards_at_once: int = 4
    footer_threads: int = FOOTER_THREADS
    progress_interval: float | None = None
    progress_write_every: float = 0.5
    freeze_loaded: bool = False

    def __post_init__(self) -> None:
        for name in ("chunk_bytes", "part_text_bytes", "batch_chars", "encoding_ahead",
                     "shards_at_once", "footer_threads"):
            check_positive_int(name, getattr(self, name))
        for name in ("progress_interval", "progress_write_every"):
            value = getattr(self, name)
            positive = name == "progress_interval"
            if value is None and positive:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (
                    positive and value == 0):
                raise ValueError(f"`{name}` must be a {'positive' if positive else 'non-negative'}"
                                 f" number of seconds, but got {value!r}")


def _shard_plan(config: JobConfig, files: Files | None, *, tuning: Tuning) -> ShardPlan:
    """The job's shard plan from the files the launcher matched
    (`pipeline.steps.read.plan_for_files`; None: a dry run's graph, planned as if there were no
    input). Computed once, by `job_context`."""
    return plan_for_files(files, num_shards=config.num_shards,
                          part_bytes=tuning.part_text_bytes if config.shuffle == "files" else None,
                          splits=config.splits if config.splits.active else None)


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobContext:
    """Everything the steps of one job share, settled by the launcher before the graph is
    built (`job_context`).

    Attributes:
        config: the validated flags.
        plan: the shard plan (how many shards, of how many parts, for which split).
        tokenizer: the manifest's ``tokenizer`` record, from the model the launcher loaded
            for the fingerprint (the last step writes it without loading the model again);
            None only in a dry run, whose graph never runs.
        fingerprint: the job's fingerprint (`transforms.shards.manifest_build.job_fingerprint`): the
            manifest's and every shard footer's.
        tmp_dir: the job's temporary directory (``OUTPUT/.tmp/<attempt>``): every temporary
            file is written there, and the last step removes it.
        attempt: the id in the job's claim on the output (`pipeline.files.output`); None: no claim.
        progress_dir: where workers report progress (`pipeline.steps.progress`), a private
            directory of the launcher on the local runner; None: they report nothing.
        tuning: the knobs (`Tuning`).
        removal: what the dedup pass removes (``--dedup``, and the evaluation files of
            ``--decontaminate`` as the launcher matched them); None: the job has no such
            pass (`pipeline.steps.dedup`).
        tokenizer_handle: the job's tokenizer in a process
            (`pipeline.steps.encode.acquire_tokenizer`): a key, pickled with the steps; the
            launcher's tokenizer is the in-process steps'.
    """

    config: JobConfig
    plan: ShardPlan
    tokenizer: TokenizerInfo | None
    fingerprint: str
    tmp_dir: str
    attempt: str | None = None
    progress_dir: str | None = None
    tuning: Tuning = dataclasses.field(default_factory=Tuning)
    removal: RemovalSpec | None = None
    tokenizer_handle: shared.Shared = dataclasses.field(default_factory=shared.Shared,
                                                        compare=False, repr=False)

    @property
    def output(self) -> str:
        """The output directory (``--output``)."""
        return self.config.output

    @property
    def splits(self) -> SplitSpec | None:
        """The job's sample and splits, None when it has neither."""
        return self.config.splits if self.config.splits.active else None

    @property
    def spill_dir(self) -> str | None:
        """Where EncodeChunks spills its blocks (the file shuffle), else None."""
        return fs.join(self.tmp_dir, "shuffle") if self.config.shuffle == "files" else None


def job_context(config: JobConfig, files: Files | None, *, fingerprint: str,
                tokenizer: TokenizerInfo | None, tmp_dir: str | None = None,
                attempt: str | None = None, progress_dir: str | None = None,
                tuning: Tuning | None = None,
                tokenizer_handle: shared.Shared | None = None,
                removal: RemovalSpec | None = None) -> JobContext:
    """The `JobContext` of a job over ``files`` ({path: (size, mtime)} or {path: size} as the
    launcher matched them; None: a dry run), its shard plan computed here, once.

    ``tmp_dir`` defaults to ``OUTPUT/.tmp/job``; ``tokenizer_handle`` to a new one (the
    launcher passes the one it loaded the tokenizer through).
    """
    tuning = tuning or Tuning()
    return JobContext(
        config=config, plan=_shard_plan(config, files, tuning=tuning), tokenizer=tokenizer,
        fingerprint=fingerprint,
        tmp_dir=tmp_dir if tmp_dir is not None else fs.join(config.output, TMP_DIR, "job"),
        attempt=attempt, progress_dir=progress_dir, tuning=tuning, removal=removal,
        tokenizer_handle=shared.Shared() if tokenizer_handle is None else tokenizer_handle)
