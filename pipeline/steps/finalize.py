"""The job's last step: every input read exactly once, the manifest(s), the cleanup.

`FinalizeDataset` gets the written shards, the reject counts and the input receipts as one
group (a side input is recomputed in each task that reads it on Beam's DaskRunner), checks
that every input was read exactly once and none changed, writes a key range that no document
fell in as its empty shard, writes ``_manifest.json`` last
(`transforms.shards.manifest_build.build_manifest`; with splits one per split, then
``_splits.json``), all in the job's staging directory, swaps the new dataset into OUTPUT
(`pipeline.files.commit`) and removes this job's temporary directory and its claim on the output.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import apache_beam as beam

from pipeline.files import fs
from pipeline.files.commit import holding_claim, staging_dir, swap
from pipeline.files.output import check_claim, dataset_files, remove_emptied_dirs, remove_job_files
from pipeline.steps.dedup import RemovalSummary
from pipeline.steps.tagged import StepFn
from pipeline.steps.write import RejectCount, place_shard, write_placed_shard
from transforms.dataset.manifest import (
    MANIFEST_NAME,
    DedupInfo,
    Manifest,
    SampleInfo,
    SplitInfo,
    SplitJob,
    SplitsRecord,
    TokenizerInfo,
    dumps_manifest,
)
from transforms.dataset.schema import CLAIM_NAME, FINGERPRINT_KEY, TMP_DIR
from transforms.dedup.removal import REMOVAL_REASONS, check_removals_kept_aside
from transforms.inputs.names import shown_name
from transforms.inputs.receipts import Receipt, account_inputs
from transforms.inputs.skipped import check_skipped_share
from transforms.plan.keys import ShardPlan
from transforms.plan.splits import SPLITS_NAME, SplitSpec, split_fingerprint
from transforms.shards.manifest_build import WrittenShard, build_manifest, build_splits_record
from transforms.shards.parquet import row_group_rows
from transforms.shards.rows import ShardRows

if TYPE_CHECKING:
    from pipeline.launch.context import JobContext

__all__ = ["ExpectedFiles", "FinalizeDataset"]

# {path: (size, mtime)} (or {path: size}) of every input file, as the launcher matched it.
ExpectedFiles = dict[str, tuple[int, float | None]] | dict[str, int]


class _FinalizeFn(StepFn):
    def __init__(self, context: JobContext, expected_files: ExpectedFiles | None) -> None:
        config = context.config
        self._output = context.output
        self._plan = context.plan
        self._asked_shards = config.num_shards  # None: planned from the input's size
        self._windows = config.windows
        self._inputs = list(config.inputs)
        self._reading = config.read.to_json()
        self._tokenizer = context.tokenizer
        self._expected_files = expected_files
        self._fingerprint = context.fingerprint
        self._tmp_dir = context.tmp_dir
        self._attempt = context.attempt
        self._max_skipped_share = config.max_skipped_share
        self._footer_threads = context.tuning.footer_threads
        self._splits = context.splits
        self._removal = context.removal

    def process(self, group: tuple[None, Iterable[Any]]) -> Iterator[Manifest | SplitsRecord]:
        shards: list[WrittenShard] = []
        receipts: list[Receipt] = []
        rejects: dict[str, RejectCount] = {}
        summary: RemovalSummary | None = None
        for value in group[1]:  # what each value is, its type says
            if isinstance(value, RemovalSummary):
                summary = value
            elif isinstance(value, WrittenShard):
                shards.append(value)
            elif isinstance(value, Receipt):
                receipts.append(value)
            elif (isinstance(value, tuple) and len(value) == 2
                  and isinstance(value[1], RejectCount)):
                rejects[value[0]] = value[1]
            else:
                raise TypeError(f"FinalizeDataset got a {type(value).__name__}, which is no "
                                "written shard, input receipt or (reason, RejectCount)")
        yield self._finalize(shards=shards, rejects=rejects, receipts=receipts,
                             plan=self._plan, summary=summary)

    def _finalize(self, *, shards: list[WrittenShard], rejects: dict[str, RejectCount],
                  receipts: list[Receipt], plan: ShardPlan,
                  summary: RemovalSummary | None = None) -> Manifest | SplitsRecord:
        # Before anything is written: every input was read exactly once, as matched at launch,
        # and none has changed since.
        records = account_inputs(receipts, self._expected_files)
        if self._expected_files is not None:
            _check_inputs_unchanged(self._inputs, self._expected_files)
        if not records:  # compressed or Parquet inputs can hold nothing and not be 0 bytes
            n = len({r.path for r in receipts})
            raise RuntimeError(
                f"the input ({n} file{'s' * (n > 1)}) holds no record (empty files, or empty "
                "archives or Parquet files): there is nothing to make a dataset of; no "
                "manifest was written: check --input")
        sampled_out = sum(r.sampled_out for r in receipts)
        skipped = {reason: c.count for reason, c in rejects.items()}
        if sampled_out and sampled_out + sum(skipped.values()) == records:
            raise RuntimeError(
                f"--sample {self._splits.sample if self._splits else '?'} left out every one of "
                f"the {sampled_out} documents; raise --sample; no manifest was written")
        if summary is not None:
            check_removals_kept_aside(summary.by_reason, skipped)
        # Records are skipped before the sample is drawn: the share is of every record read.
        # Copies and contaminated documents removed on request are no sign of a wrong flag:
        # they count only when every record was skipped (a job that keeps nothing fails).
        counted = skipped if sum(skipped.values()) == records else {
            k: v for k, v in skipped.items() if k not in REMOVAL_REASONS}
        check_skipped_share(records=records, skipped=counted,
                            first={reason: c.first for reason, c in rejects.items()},
                            max_share=self._max_skipped_share)
        shards = list(shards)
        num_shards = plan.num_shards
        done = {s.index for s in shards}
        if len(done) != len(shards) or not done <= set(range(num_shards)):
            raise RuntimeError(f"shards were written twice or out of range: {sorted(done)}")
        documents = sum(s.counts.documents for s in shards)
        if self._asked_shards is not None and num_shards > documents:
            # Only a count the user asked for: the default plan (one shard per 64 MiB) is
            # ours, and one large text file is one document in several shards. Documents are
            # known only now, and the shards' names and the fingerprint hold the count: it
            # cannot be lowered here without changing every byte.
            asked = (f"--num-shards {self._asked_shards} is" if not plan.splits else
                     f"the {num_shards} shards of --num-shards {self._asked_shards} and --split"
                     " are")
            raise RuntimeError(
                f"{asked} more than the {documents} documents of the input: at least "
                f"{num_shards - documents} shards would be empty; no manifest was written: "
                f"pass --num-shards {max(documents, 1)} or fewer")
        window = self._windows.window
        stage = staging_dir(self._tmp_dir)
        for index in sorted(set(range(num_shards)) - done):
            # A key range that no document fell in still gets its (empty) file.
            shards.append(write_placed_shard(plan=plan, index=index, output=stage,
                                             fingerprint=self._fingerprint, rows=ShardRows([]),
                                             window=window, tmp_dir=self._tmp_dir,
                                             root=self._output))
        check_claim(self._output, self._attempt)
        # A concurrent job's shard must never sit under our manifest. One footer per shard,
        # each a round trip or two on an object store: read footer_threads at a time.
        def check(shard: WrittenShard) -> None:
            directory, _, _, footer = place_shard(plan, shard.index, stage, self._fingerprint)
            _check_shard_footer(fs.join(directory, shard.file), footer)

        with ThreadPoolExecutor(self._footer_threads, thread_name_prefix="footer") as pool:
            list(pool.map(check, shards))
        dedup = self._dedup(summary)
        # What every manifest of the job holds alike.
        build = functools.partial(
            build_manifest, tokenizer=self._tokenizer_record(), windows=self._windows,
            inputs=self._inputs, reading=self._reading, row_group_rows=row_group_rows(window),
            versions=_versions(), dedup=dedup)
        sample = None if self._splits is None else self._splits.sample_info()
        manifest: Manifest | SplitsRecord
        if not plan.splits:
            manifest = build(shards=shards, skipped=skipped, records=records,
                             fingerprint=self._fingerprint, sample=sample,
                             sampled_out=sampled_out)
            fs.write_atomically(fs.join(stage, MANIFEST_NAME),
                                lambda f: f.write(dumps_manifest(manifest)), self._tmp_dir,
                                root=self._output)
        else:
            assert self._splits is not None  # a plan with splits comes from --split
            manifest = self._write_splits(plan, shards, build, dedup, self._splits, sample,
                                          skipped=skipped, records=records,
                                          sampled_out=sampled_out)
        self._swap()
        return manifest

    def _swap(self) -> None:
        """The new dataset, complete in the staging directory, replaces what OUTPUT holds
        (`pipeline.files.commit`); then the temporary directory (and the old files) and the claim
        go. Under the claim's lock: the launcher's cleanup after an interruption waits."""
        output, tmp_dir = self._output, self._tmp_dir
        stage = staging_dir(tmp_dir)
        with contextlib.ExitStack() as held:
            if self._attempt is not None and not held.enter_context(
                    holding_claim(output, self._attempt)):
                check_claim(output, self._attempt)  # names who holds it now
                raise RuntimeError(f"{output} is no longer claimed by this job (attempt "
                                   f"{self._attempt}); no manifest was written")
            skip = (fs.join(output, TMP_DIR) + "/", fs.join(output, CLAIM_NAME))
            entries = [e for e in fs.list_dir(output) if not e.startswith(skip)]
            new = [e[len(stage):].lstrip("/") for e in fs.list_dir(stage)]
            old = {e[len(output):].lstrip("/") for e in dataset_files(output, entries)}
            old.update(r for r in new if fs.join(output, r) in entries)
            swap(output, tmp_dir, old=sorted(old), new=new)
            remove_job_files(output, tmp_dir, self._attempt)
            remove_emptied_dirs(output, [fs.join(output, r) for r in sorted(old)])

    def _write_splits(self, plan: ShardPlan, shards: list[WrittenShard],
                      build: Callable[..., Manifest], dedup: DedupInfo | None, spec: SplitSpec,
                      sample: SampleInfo | None, *, skipped: dict[str, int], records: int,
                      sampled_out: int) -> SplitsRecord:
        """Each split's manifest in OUTPUT/NAME/ (``build``: `build_manifest` with what every
        manifest of the job holds), then the job's ``_splits.json``, last."""
        names = [name for name, _ in plan.splits]
        mine = {name: [s for s in shards if plan.locate(s.index)[0] == name] for name in names}
        documents = {name: sum(s.counts.documents for s in mine[name]) for name in names}
        empty = [name for name in names if not documents[name]]
        if empty:  # a dataset without a window: no sampler or evaluation could use it
            raise RuntimeError(
                f"the split {empty[0]} got none of the {sum(documents.values())} documents; "
                "give it a larger fraction (or the job more documents); no manifest was written")
        fingerprints = {name: split_fingerprint(self._fingerprint, name) for name in names}
        job = SplitJob(records=records, documents=documents,
                       skipped={k: v for k, v in sorted(skipped.items()) if v},
                       sampled_out=sampled_out, fingerprint=self._fingerprint)
        listed = spec.split_fractions()
        fractions = {f.name: f.fraction for f in listed}
        manifests = {
            name: build(
                shards=mine[name], skipped={}, records=documents[name],
                fingerprint=fingerprints[name], sample=sample,
                split=SplitInfo(name=name, splits=listed, split_seed=spec.seed, job=job))
            for name in names
        }
        record = build_splits_record(manifests=manifests, fractions=fractions, dedup=dedup,
                                     split_seed=spec.seed, skipped=skipped,
                                     records=records, sampled_out=sampled_out,
                                     fingerprint=self._fingerprint)
        stage = staging_dir(self._tmp_dir)
        for name, manifest in manifests.items():
            fs.write_atomically(fs.join(stage, name, MANIFEST_NAME),
                                lambda f, m=manifest: f.write(dumps_manifest(m)), self._tmp_dir,
                                root=self._output)
        fs.write_atomically(fs.join(stage, SPLITS_NAME),
                            lambda f: f.write(dumps_manifest(record)), self._tmp_dir,
                            root=self._output)
        return record


    def _dedup(self, summary: RemovalSummary | None) -> DedupInfo | None:
        """The manifest's ``dedup``, only for a job with a dedup pass (None: every other job's
        manifest keeps its bytes)."""
        if self._removal is None:
            return None
        if summary is None:
            raise RuntimeError("the dedup pass reported nothing; no manifest was written")
        # The parameters' one JSON form (the fingerprint's too), read as the manifest's record.
        return DedupInfo.from_json(self._removal.to_json(summary.by_eval_file),
                                   where="the manifest being written")

    def _tokenizer_record(self) -> TokenizerInfo:
        """The manifest's ``tokenizer``: the launcher's record of the model it loaded."""
        if self._tokenizer is None:
            raise RuntimeError(
                "the job's context has no tokenizer record (a dry run's graph, which is built "
                "to be translated, not run); no manifest was written: run the job without "
                "--dry_run")
        return self._tokenizer


def _check_inputs_unchanged(patterns: list[str],
                            expected: dict[str, tuple[int, float | None]]) -> None:
    """The inputs as they are now must be the inputs matched at launch (size and mtime)."""
    now: dict[str, tuple[int, float | None]] = {}
    for pattern in patterns:
        for path, size, mtime in fs.match_files(pattern):
            now[path] = (size, mtime)
    for path, (size, mtime) in sorted(expected.items()):
        seen = now.get(path)
        if seen is None or seen[0] != size or (
                mtime is not None and seen[1] is not None and seen[1] != mtime):
            state = "is gone" if seen is None else f"has {seen[0]} bytes (mtime {seen[1]})"
            raise RuntimeError(
                f"input file {shown_name(path)} changed while the job ran: {size} bytes (mtime "
                f"{mtime}) when the job started, now it {state}; no manifest was written: "
                "rerun once the input stops changing"
            )


def _check_shard_footer(path: str, fingerprint: str) -> None:
    import pyarrow.parquet as pq

    with fs.open_raw(path) as f:
        meta = pq.ParquetFile(f).metadata.metadata or {}
    found = meta.get(FINGERPRINT_KEY.encode(), b"").decode()
    if found != fingerprint:
        raise RuntimeError(
            f"{shown_name(path)} was written by another job (fingerprint {found or 'none'}, "
            f"this job's is {fingerprint}): two jobs wrote this output at once; no manifest "
            "was written: rerun one job alone"
        )


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("token-windows", "apache-beam", "pyarrow", "numpy", "sentencepiece"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


class FinalizeDataset(beam.PTransform):
    """Writes ``_manifest.json`` once every shard and reject file is written, then cleans up.

    The shards, reject counts and input receipts arrive as one group (flattened, grouped
    under one key; each told apart by its type), so the runner cannot start this step before
    they are complete. Not side inputs: Beam's DaskRunner computes a side input inside the task that
    reads it, again for each reader, so three side inputs here ran EncodeChunks three times
    and WriteShards twice there (docs/cost.md#dask). It fails the job, writing no manifest,
    if any input was not read exactly once (`transforms.inputs.receipts.account_inputs`, checked
    against ``expected_files`` when the launcher matched the inputs), or if records read ≠
    documents written + records skipped.

    What it reads of the `pipeline.launch.context.JobContext`: the output directory, the window
    parameters, the input patterns and how they are read, the tokenizer's record (the
    manifest's ``tokenizer``, as the launcher loaded it), the shard plan, the fingerprint, the
    temporary directory (removed at the end), the claim's attempt id, ``--max-skipped-share``
    (the job fails if more records than this share are skipped, and always if all are), the
    sample and splits (with splits, one manifest per split in OUTPUT/NAME/ and the job's
    ``_splits.json`` last) and the knob ``footer_threads``.

    Args:
        context: the job's context.
        expected_files: {path: (size, mtime)} as matched at launch, or None (a dry run). Not
            on the context: the list grows with the corpus, and only this step needs it.
        shards, reject_counts, receipts: what the other steps emit.
        removal_summary: the dedup pass's `pipeline.steps.dedup.RemovalSummary`, or None (a job
            without --dedup or --decontaminate).
    """

    def __init__(self, context: JobContext, *, expected_files: ExpectedFiles | None,
                 shards: beam.PCollection, reject_counts: beam.PCollection,
                 receipts: beam.PCollection,
                 removal_summary: beam.PCollection | None = None) -> None:
        super().__init__()
        self._fn = _FinalizeFn(context, expected_files)
        self._parts = (shards, reject_counts, receipts)
        if removal_summary is not None:  # the dedup pass's (`pipeline.steps.dedup`)
            self._parts += (removal_summary,)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        # One step keys them all after the Flatten, not one per input before it: each step is
        # a fixed cost of the job (pipeline.steps.tagged.StepFn).
        return (
            self._parts
            | "Everything" >> beam.Flatten()
            | "OneKey" >> beam.ParDo(_OneKeyFn())
            | "AllAtOnce" >> beam.GroupByKey()
            | "WriteManifest" >> beam.ParDo(self._fn)
        )


class _OneKeyFn(StepFn):
    """value → (None, value): one key for all."""

    def process(self, value: Any) -> Iterator[tuple[None, Any]]:
        yield None, value
