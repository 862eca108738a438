"""The shuffle, the shards, the reject files and the manifest.

`ShuffleDocuments` is the job's one shuffle: blocks grouped by shard. `WriteShards` turns
each shard's blocks into rows (`transforms.rows.ShardRows`) and Parquet
(`transforms.parquet.write_rows`). `WriteRejects` writes ``_rejects/<reason>.jsonl`` in input
order. `FinalizeDataset` checks that every input was read exactly once, writes
``_manifest.json`` last (`transforms.manifest.build_manifest`) and removes this job's temporary
directory and its claim on the output. Every file is written to a temporary name under the
job's own ``tmp_dir`` (``OUTPUT/.tmp/<attempt>``, chosen once by the launcher) and renamed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import typing
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils import shared

from pipeline import fs
from pipeline.encode import REJECTS, load_tokenizer
from pipeline.output import check_claim, remove_job_files
from pipeline.tagged import Outputs, SplitTags
from transforms.chunks import Receipt, account_inputs, shown_name
from transforms.documents import Reject, source_order
from transforms.keys import ShardPlan
from transforms.lookup import read_records
from transforms.manifest import (
    MANIFEST_NAME,
    WrittenShard,
    build_manifest,
    build_splits_record,
    check_skipped_share,
    dumps_manifest,
    shard_metadata,
)
from transforms.params import ReadSpec, WindowSpec
from transforms.parquet import row_group_rows, write_rows
from transforms.rows import ShardCounts, ShardRows
from transforms.schema import FINGERPRINT_KEY, REJECTS_DIR, shard_file_name
from transforms.spill import RejectRun, ShardParts, read_run
from transforms.splits import SPLITS_NAME, SplitSpec, split_fingerprint
from transforms.tokenizers import TokenizerSpec

__all__ = [
    "SHARDS",
    "SHARDS_AT_ONCE",
    "FinalizeDataset",
    "RejectCount",
    "ShuffleDocuments",
    "WriteRejects",
    "WriteShards",
]

_LOG = logging.getLogger("token_windows")

# A worker process writes at most this many shards at once (and no more than it has cores).
SHARDS_AT_ONCE = 4
# WriteShards' output of written shards (beside REJECTS), as (tag, value) pairs.
SHARDS = "shards"


class ShuffleDocuments(beam.PTransform):
    """(shard, block) → (shard, [its blocks]): the one shuffle of the job.

    Documents cross it packed in blocks (`transforms.blocks`), one per batch and shard, each
    a byte string under Beam's bytes coder, so the runner moves a few large elements, not one
    per document. What a block holds depends on batching, what a shard holds does not, and
    `WriteShards` orders each shard by key. The file shuffle (`transforms.spill`) does
    without it.
    """

    def expand(self, blocks: beam.PCollection) -> beam.PCollection:
        return blocks | "GroupByShard" >> beam.GroupByKey()


def _write_shard_file(*, output: str, index: int, num_shards: int,
                      rows: ShardRows | ShardParts, window: int, fingerprint: str,
                      tmp_dir: str, split: str | None = None) -> WrittenShard:
    name = shard_file_name(index, num_shards)

    def metadata() -> dict[str, str]:  # a ShardParts' counts are complete once it is written
        return shard_metadata(fingerprint=fingerprint, index=index, num_shards=num_shards,
                              counts=rows.counts)

    sha, size = typing.cast(
        tuple[str, int],
        fs.write_atomically(
            fs.join(output, name),
            lambda f: write_rows(rows, f, window=window, metadata=metadata),
            tmp_dir,
        ),
    )
    counts: ShardCounts = rows.counts
    # Progress: one line per shard (the launcher prints the summary at the end).
    _LOG.info("wrote %s: %d documents, %d windows, %.1f MB",
              name if split is None else f"{split}/{name}", counts.documents, counts.rows,
              size / 1e6)
    return WrittenShard(file=name, index=index, sha256=sha, bytes=size, counts=counts)


def _place(plan: ShardPlan, index: int, output: str,
           fingerprint: str) -> tuple[str, int, int, str]:
    """(directory, index in it, its shards, the footer's fingerprint) of shard ``index`` of
    the plan: OUTPUT itself, or a split's OUTPUT/NAME with its own fingerprint."""
    name, local, of = plan.locate(index)
    if name is None:
        return output, local, of, fingerprint
    return fs.join(output, name), local, of, split_fingerprint(fingerprint, name)


def _write_placed(*, plan: ShardPlan, index: int, output: str, fingerprint: str,
                  rows: ShardRows | ShardParts, window: int, tmp_dir: str) -> WrittenShard:
    """`_write_shard_file` into its split; the shard keeps its index in the whole plan."""
    directory, local, of, footer = _place(plan, index, output, fingerprint)
    shard = _write_shard_file(output=directory, index=local, num_shards=of, rows=rows,
                              window=window, fingerprint=footer, tmp_dir=tmp_dir,
                              split=plan.locate(index)[0])
    return dataclasses.replace(shard, index=index)


class _WriteShardFn(beam.DoFn):
    """Writes shards and emits, from ``process`` only, (`SHARDS`, its
    `transforms.manifest.WrittenShard`) and (`REJECTS`, each reject) pairs
    (`pipeline.tagged`). Metrics are bumped here, on the bundle thread.

    A shard arrives as (index, its blocks), written before the next; or, with the file
    shuffle, a batch of indexes, its parts then read from every spill file one part at a
    time (`transforms.spill`), the batch written at once. Shards are written on the helper
    threads of a pool shared by the worker process (pyarrow encodes and compresses off the
    GIL), up to `SHARDS_AT_ONCE` at a time (and no more than it has cores). Nothing is left
    to emit when ``process`` returns: runners that drop what ``finish_bundle`` emits (Beam's
    DaskRunner) get every shard.
    """

    def __init__(self, *, output: str, window: int, plan: ShardPlan, fingerprint: str,
                 tmp_dir: str) -> None:
        self._output = output
        self._window = window
        self._plan = plan
        self._fingerprint = fingerprint
        self._tmp_dir = tmp_dir
        self._handle = shared.Shared()

    def setup(self) -> None:
        # One pool per worker process, shared by its threads: a process never holds more
        # than that many shards being written.
        self._at_once = max(1, min(SHARDS_AT_ONCE, os.cpu_count() or 1))
        self._pool = self._handle.acquire(
            lambda: ThreadPoolExecutor(self._at_once, thread_name_prefix="write-shard"),
            tag="write-shard")

    def process(self, item: tuple[int, Iterable[bytes]] | list[int],
                spills: list[str] | None = None) -> Iterator[tuple[str, Any]]:
        plan = self._plan
        if spills is None:
            index, blocks = item  # type: ignore[misc]
            # On the process's pool all the same: however many bundle threads a runner runs
            # in a process (Dataflow: a dozen), at most `_at_once` shards are written at once.
            rows = ShardRows(list(blocks))
            yield from self._finished(self._pool.submit(self._write, index, rows, plan).result())
            return
        writing = [
            self._pool.submit(self._write, index,
                              ShardParts(spills, shard=index, num_shards=plan.num_shards,
                                         parts_per_shard=plan.parts_per_shard,
                                         open_file=fs.open_raw), plan)
            for index in item  # type: ignore[union-attr]
        ]
        for future in writing:
            yield from self._finished(future.result())

    def _write(self, index: int, rows: ShardRows | ShardParts,
               plan: ShardPlan) -> tuple[list[Reject], WrittenShard]:
        shard = _write_placed(plan=plan, index=index, output=self._output, rows=rows,
                              window=self._window, fingerprint=self._fingerprint,
                              tmp_dir=self._tmp_dir)
        return rows.rejects, shard

    def _finished(self, written: tuple[list[Reject], WrittenShard]
                  ) -> Iterator[tuple[str, Any]]:
        rejects, shard = written
        Metrics.counter("write", "shards").inc()
        for reject in rejects:
            Metrics.counter("rejects", reject.reason).inc()
            yield REJECTS, reject
        yield SHARDS, shard


class WriteShards(beam.PTransform):
    """(shard, [blocks]) → one Parquet file each; or, with ``spills``, every shard of the
    plan read from the spill files. `pipeline.tagged.Outputs`: ``shards`` (a
    `transforms.manifest.WrittenShard` per shard) and ``rejects`` (duplicate ids).

    Args:
        output: the output directory.
        window: W, which sets the row-group size.
        plan: the `transforms.keys.ShardPlan` (`pipeline.graph.shard_plan`).
        fingerprint: the job's fingerprint, written into each shard's footer.
        tmp_dir: the job's temporary directory.
        spills: the spill files' paths (the file shuffle), or None.
    """

    def __init__(self, *, output: str, window: int, plan: ShardPlan,
                 fingerprint: str, tmp_dir: str,
                 spills: beam.PCollection | None = None) -> None:
        super().__init__()
        self._output = output
        self._window = window
        self._plan = plan
        self._fingerprint = fingerprint
        self._tmp_dir = tmp_dir
        self._spills = spills

    def expand(self, groups: beam.PCollection | beam.pvalue.PBegin) -> Outputs:
        side: dict[str, Any] = {}
        if self._spills is not None:
            # Every shard, in batches spread over the workers; each shard reads its parts
            # from every file.
            groups = (groups | "EveryShard" >> beam.Create(list(_shard_batches(self._plan)))
                      | "SpreadShards" >> beam.Reshuffle())
            side["spills"] = beam.pvalue.AsList(self._spills)
        return (
            groups
            | "WriteShard" >> beam.ParDo(
                _WriteShardFn(output=self._output, window=self._window, plan=self._plan,
                              fingerprint=self._fingerprint, tmp_dir=self._tmp_dir), **side)
            | "ByTag" >> SplitTags([SHARDS, REJECTS])
        )


def _shard_batches(plan: ShardPlan) -> Iterator[list[int]]:
    """The plan's shard indexes in batches of `SHARDS_AT_ONCE`, each written at once."""
    for lo in range(0, plan.num_shards, SHARDS_AT_ONCE):
        yield list(range(lo, min(lo + SHARDS_AT_ONCE, plan.num_shards)))


def _key_by_reason(reject: Reject | RejectRun) -> tuple[str, Reject | RejectRun]:
    return reject.reason, reject


class RejectCount(typing.NamedTuple):
    """How many records were skipped for one reason, and the first of them (input order)."""

    count: int
    first: Reject


def _write_rejects(item: tuple[str, Iterable[Reject | RejectRun]], output: str,
                   tmp_dir: str, spec: ReadSpec) -> tuple[str, RejectCount]:
    reason, rejects = item
    rejects = list(rejects)
    if rejects and isinstance(rejects[0], RejectRun):
        # Spilled runs, one per chunk: in chunk order they are in input order already.
        runs = sorted(rejects, key=lambda r: r.order)  # type: ignore[union-attr]

        def write(f: Any) -> None:
            for run in runs:
                f.write(read_run(run, fs.open_raw))

        count = sum(r.count for r in runs)  # type: ignore[union-attr]
        first = runs[0].first  # type: ignore[union-attr]
    else:
        rows = sorted(rejects, key=lambda r: (source_order(r.source), r.detail))
        if reason == "duplicate_id":
            # Found after the shuffle, where documents are tokens: read the records back.
            found = read_records([r.source for r in rows], spec=spec, open_file=fs.open_raw)
            rows = [r._replace(record=found.get(r.source, r.record)) for r in rows]

        def write(f: Any) -> None:
            f.write(b"".join(r.to_line() for r in rows))

        count, first = len(rows), rows[0]
    fs.write_atomically(fs.join(output, REJECTS_DIR, f"{reason}.jsonl"), write, tmp_dir)
    return reason, RejectCount(count, first._replace(record=first.record[:4096]))


class WriteRejects(beam.PTransform):
    """Rejects → ``OUTPUT/_rejects/<reason>.jsonl`` (in input order, `source_order`); emits
    (reason, `RejectCount`)."""

    def __init__(self, output: str, *, tmp_dir: str, spec: ReadSpec) -> None:
        super().__init__()
        self._output = output
        self._tmp_dir = tmp_dir
        self._spec = spec

    def expand(self, rejects: beam.PCollection) -> beam.PCollection:
        return (
            rejects
            | "KeyByReason" >> beam.Map(_key_by_reason)
            | "GroupByReason" >> beam.GroupByKey()
            | "WriteReasonFile" >> beam.Map(_write_rejects, self._output, self._tmp_dir,
                                            self._spec)
        )


class _FinalizeFn(beam.DoFn):
    def __init__(self, *, output: str, windows: WindowSpec, inputs: list[str],
                 reading: dict[str, Any], tokenizer: TokenizerSpec | str | None,
                 expected_files: dict[str, tuple[int, float | None]] | None, fingerprint: str,
                 tmp_dir: str, attempt: str | None, max_skipped_share: float, plan: ShardPlan,
                 splits: SplitSpec | None = None) -> None:
        self._output = output
        self._plan = plan
        self._windows = windows
        self._inputs = inputs
        self._reading = reading
        self._tokenizer_spec = tokenizer
        self._expected_files = expected_files
        self._fingerprint = fingerprint
        self._tmp_dir = tmp_dir
        self._attempt = attempt
        self._max_skipped_share = max_skipped_share
        self._splits = splits if splits is not None and splits.active else None

    def process(self, group: tuple[None, Iterable[tuple[str, Any]]]) -> Iterator[dict]:
        found: dict[str, list[Any]] = {_SHARDS: [], _REJECTS: [], _RECEIPTS: []}
        for tag, value in group[1]:
            found[tag].append(value)
        yield self._finalize(shards=found[_SHARDS], rejects=dict(found[_REJECTS]),
                             receipts=found[_RECEIPTS], plan=self._plan)

    def _finalize(self, *, shards: list[WrittenShard], rejects: dict[str, RejectCount],
                  receipts: list[Receipt], plan: ShardPlan) -> dict:
        # Before anything is written: every input was read exactly once, as matched at launch,
        # and none has changed since.
        records = account_inputs(receipts, self._expected_files)
        if self._expected_files is not None:
            _check_inputs_unchanged(self._inputs, self._expected_files)
        sampled_out = sum(r.sampled_out for r in receipts)
        skipped = {reason: c.count for reason, c in rejects.items()}
        if sampled_out and sampled_out + sum(skipped.values()) == records:
            raise RuntimeError(
                f"--sample {self._splits.sample if self._splits else '?'} left out every one of "
                f"the {sampled_out} documents; raise --sample; no manifest was written")
        # Records are skipped before the sample is drawn: the share is of every record read.
        check_skipped_share(records=records, skipped=skipped,
                            first={reason: c.first for reason, c in rejects.items()},
                            max_share=self._max_skipped_share)
        shards = list(shards)
        num_shards = plan.num_shards
        done = {s.index for s in shards}
        if len(done) != len(shards) or not done <= set(range(num_shards)):
            raise RuntimeError(f"shards were written twice or out of range: {sorted(done)}")
        window = self._windows.window
        for index in sorted(set(range(num_shards)) - done):
            # A key range that no document fell in still gets its (empty) file.
            shards.append(_write_placed(plan=plan, index=index, output=self._output,
                                        fingerprint=self._fingerprint, rows=ShardRows([]),
                                        window=window, tmp_dir=self._tmp_dir))
        check_claim(self._output, self._attempt)
        for shard in shards:  # a concurrent job's shard must never sit under our manifest
            directory, _, _, footer = _place(plan, shard.index, self._output, self._fingerprint)
            _check_shard_footer(fs.join(directory, shard.file), footer)
        common = {
            "tokenizer": load_tokenizer(self._tokenizer_spec).info(),
            "windows": self._windows.to_json(),
            "inputs": self._inputs,
            "reading": self._reading,
            "row_group_rows": row_group_rows(window),
            "versions": _versions(),
        }
        definition = {} if self._splits is None else self._splits.to_json()
        if not plan.splits:
            manifest = build_manifest(**common, shards=shards, skipped=skipped, records=records,
                                      fingerprint=self._fingerprint,
                                      sample=definition.get("sample"), sampled_out=sampled_out)
            fs.write_atomically(fs.join(self._output, MANIFEST_NAME),
                                lambda f: f.write(dumps_manifest(manifest)), self._tmp_dir)
        else:
            manifest = self._write_splits(plan, shards, common, definition, skipped=skipped,
                                          records=records, sampled_out=sampled_out)
        remove_job_files(self._output, self._tmp_dir, self._attempt)
        return manifest

    def _write_splits(self, plan: ShardPlan, shards: list[WrittenShard], common: dict[str, Any],
                      definition: dict[str, Any], *, skipped: dict[str, int], records: int,
                      sampled_out: int) -> dict[str, Any]:
        """Each split's manifest in OUTPUT/NAME/, then the job's ``_splits.json``, last."""
        names = [name for name, _ in plan.splits]
        mine = {name: [s for s in shards if plan.locate(s.index)[0] == name] for name in names}
        documents = {name: sum(s.counts.documents for s in mine[name]) for name in names}
        empty = [name for name in names if not documents[name]]
        if empty:  # a dataset without a window: no sampler or evaluation could use it
            raise RuntimeError(
                f"the split {empty[0]} got none of the {sum(documents.values())} documents; "
                "give it a larger fraction (or the job more documents); no manifest was written")
        fingerprints = {name: split_fingerprint(self._fingerprint, name) for name in names}
        job = {"records": records, "documents": documents,
               "skipped": {k: v for k, v in sorted(skipped.items()) if v},
               "sampled_out": sampled_out, "fingerprint": self._fingerprint}
        manifests = {
            name: build_manifest(
                **common, shards=mine[name], skipped={}, records=documents[name],
                fingerprint=fingerprints[name], sample=definition.get("sample"),
                split={"name": name, **{k: v for k, v in definition.items() if k != "sample"},
                       "job": job})
            for name in names
        }
        record = build_splits_record(manifests=manifests, definition=definition,
                                     skipped=skipped, records=records, sampled_out=sampled_out,
                                     fingerprints=fingerprints, fingerprint=self._fingerprint)
        for name, manifest in manifests.items():
            fs.write_atomically(fs.join(self._output, name, MANIFEST_NAME),
                                lambda f, m=manifest: f.write(dumps_manifest(m)), self._tmp_dir)
        fs.write_atomically(fs.join(self._output, SPLITS_NAME),
                            lambda f: f.write(dumps_manifest(record)), self._tmp_dir)
        return record


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

    The shards, reject counts and input receipts arrive as one group (each tagged,
    flattened, grouped under one key), so the runner cannot start this step before they are
    complete. Not side inputs: Beam's DaskRunner computes a side input inside the task that
    reads it, again for each reader, so three side inputs here ran EncodeChunks three times
    and WriteShards twice there (README "Running at scale"). It fails the job, writing no
    manifest, if any input was not read exactly once (`transforms.chunks.account_inputs`,
    checked against ``expected_files`` when the launcher matched the inputs), or if records
    read ≠ documents written + records skipped.

    Args:
        output: the output directory.
        windows: the window parameters (the manifest's ``windows``).
        inputs: the ``--input`` patterns; reading: the manifest's ``reading`` object.
        tokenizer: the ``--tokenizer`` (`transforms.tokenizers.TokenizerSpec`), None for bytes
            (the manifest's ``tokenizer``).
        expected_files: {path: (size, mtime)} as matched at launch, or None (a dry run).
        fingerprint: the job's fingerprint (the manifest's, and every shard footer's).
        tmp_dir: the job's temporary directory, removed at the end.
        attempt: the id in this job's claim on the output (None: no claim was taken).
        max_skipped_share: the job fails if more records than this share are skipped, and
            always if all are.
        shards, reject_counts, receipts: what the other steps emit.
        plan: the `transforms.keys.ShardPlan` (`pipeline.graph.shard_plan`).
        splits: the job's sample and splits: with splits, one manifest per split in
            OUTPUT/NAME/ and the job's ``_splits.json`` last (`transforms.manifest`).
    """

    def __init__(self, *, output: str, windows: WindowSpec, inputs: list[str],
                 reading: dict[str, Any], tokenizer: TokenizerSpec | str | None,
                 expected_files: dict[str, tuple[int, float | None]] | None,
                 shards: beam.PCollection, reject_counts: beam.PCollection,
                 receipts: beam.PCollection, plan: ShardPlan, fingerprint: str,
                 tmp_dir: str, attempt: str | None = None,
                 max_skipped_share: float = 1.0, splits: SplitSpec | None = None) -> None:
        super().__init__()
        self._fn = _FinalizeFn(output=output, windows=windows, inputs=inputs, reading=reading,
                               tokenizer=tokenizer, expected_files=expected_files,
                               fingerprint=fingerprint, tmp_dir=tmp_dir, attempt=attempt,
                               max_skipped_share=max_skipped_share, plan=plan, splits=splits)
        self._parts = {_SHARDS: shards, _REJECTS: reject_counts, _RECEIPTS: receipts}

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        tagged = [
            pcoll | f"Tag{tag.capitalize()}" >> beam.Map(_tag_for_finalize, tag)
            for tag, pcoll in self._parts.items()
        ]
        return (
            tagged
            | "Everything" >> beam.Flatten()
            | "AllAtOnce" >> beam.GroupByKey()
            | "WriteManifest" >> beam.ParDo(self._fn)
        )


_SHARDS, _REJECTS, _RECEIPTS = "shards", "rejects", "receipts"


def _tag_for_finalize(value: Any, tag: str) -> tuple[None, tuple[str, Any]]:
    return None, (tag, value)
