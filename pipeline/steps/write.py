"""The shuffle, the shards and the reject files.

`ShuffleDocuments` is the job's one shuffle: parcels grouped by shard. `WriteShards` turns
each shard's parcels into rows (`transforms.shards.rows.ShardRows`) and Parquet
(`transforms.shards.parquet.write_rows`), a split's shard into ``OUTPUT/NAME/``. `WriteRejects`
writes ``_rejects/<reason>.jsonl`` in input order. The manifest comes last
(`pipeline.steps.finalize`). Every file is written to a temporary name under the job's own
``tmp_dir`` (``OUTPUT/.tmp/<attempt>``, chosen once by the launcher) and renamed into the job's
staging directory (``tmp_dir/new``, laid out as OUTPUT will be), which the last step swaps into
OUTPUT (`pipeline.files.commit`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import typing
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, TypeVar

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils import shared

from pipeline.files import fs
from pipeline.files.commit import staging_dir
from pipeline.steps.heap import leave_loaded_out
from pipeline.steps.tagged import REJECTS, SHARDS, Outputs, SplitTags, StepFn
from transforms.dataset.schema import REJECTS_DIR, shard_file_name
from transforms.inputs.documents import Reject, source_order
from transforms.inputs.lookup import read_records
from transforms.params import ReadSpec
from transforms.plan.keys import ShardPlan
from transforms.plan.splits import split_fingerprint
from transforms.shards.manifest_build import WrittenShard, shard_metadata
from transforms.shards.parquet import write_rows
from transforms.shards.rows import ShardCounts, ShardRows
from transforms.shards.spill import RejectRun, ShardParts, read_run

if TYPE_CHECKING:
    from pipeline.launch.context import JobContext

__all__ = [
    "RejectCount",
    "ShuffleDocuments",
    "WriteRejects",
    "WriteShards",
    "place_shard",
    "shard_batches",
    "write_in_waves",
    "write_placed_shard",
    "write_shard_file",
]

_LOG = logging.getLogger("token_windows")
T = TypeVar("T")


class ShuffleDocuments(beam.PTransform):
    """(shard, parcel) → (shard, [its parcels]): the one shuffle of the job.

    Documents cross it packed in parcels (`transforms.shards.parcels`), one per batch and shard,
    each a byte string under Beam's bytes coder, so the runner moves a few large elements, not one
    per document. What a parcel holds depends on batching, what a shard holds does not, and
    `WriteShards` orders each shard by key. The file shuffle (`transforms.shards.spill`) does
    without it.
    """

    def expand(self, parcels: beam.PCollection) -> beam.PCollection:
        return parcels | "GroupByShard" >> beam.GroupByKey()


def write_shard_file(*, output: str, index: int, num_shards: int,
                      rows: ShardRows | ShardParts, window: int, fingerprint: str,
                      tmp_dir: str, split: str | None = None,
                      root: str | None = None) -> WrittenShard:
    """Write one shard into ``output``; ``root`` (default ``output``) is the job's output
    directory, below which nothing is reached through a link (`pipeline.files.confine`)."""
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
            root=output if root is None else root,
        ),
    )
    counts: ShardCounts = rows.counts
    # Progress: one line per shard (the launcher prints the summary at the end).
    _LOG.info("wrote %s: %d documents, %d windows, %.1f MB",
              name if split is None else f"{split}/{name}", counts.documents, counts.rows,
              size / 1e6)
    return WrittenShard(file=name, index=index, sha256=sha, bytes=size, counts=counts)


def place_shard(plan: ShardPlan, index: int, output: str,
           fingerprint: str) -> tuple[str, int, int, str]:
    """(directory, index in it, its shards, the footer's fingerprint) of shard ``index`` of
    the plan: OUTPUT itself, or a split's OUTPUT/NAME with its own fingerprint."""
    name, local, of = plan.locate(index)
    if name is None:
        return output, local, of, fingerprint
    return fs.join(output, name), local, of, split_fingerprint(fingerprint, name)


def write_placed_shard(*, plan: ShardPlan, index: int, output: str, fingerprint: str,
                  rows: ShardRows | ShardParts, window: int, tmp_dir: str,
                  root: str | None = None) -> WrittenShard:
    """`write_shard_file` into its split below ``output`` (the job's staging directory,
    `pipeline.files.commit`); the shard keeps its index in the whole plan. ``root`` (default
    ``output``): the job's output directory, below which nothing is reached through a link."""
    directory, local, of, footer = place_shard(plan, index, output, fingerprint)
    shard = write_shard_file(output=directory, index=local, num_shards=of, rows=rows,
                              window=window, fingerprint=footer, tmp_dir=tmp_dir,
                              split=plan.locate(index)[0],
                              root=output if root is None else root)
    return dataclasses.replace(shard, index=index)


class _WriteShardFn(StepFn):
    """Writes shards and emits, from ``process`` only, (`SHARDS`, its
    `transforms.shards.manifest_build.WrittenShard`) and (`REJECTS`, each reject) pairs
    (`pipeline.steps.tagged`). Metrics are bumped here, on the bundle thread.

    A shard arrives as (index, its parcels), written before the next; or, with the file
    shuffle (``spilled``), in a batch of shards as the shuffle that spreads the batches
    groups it, (batch number, [(shard indexes, every spill file)]), its parts then read
    from every spill file one part at a time (`transforms.shards.spill`), the batch written about
    as many at a time as the process has cores, in waves that end together
    (`write_in_waves`). Shards are written on the helper threads of a pool shared by the
    worker process (pyarrow encodes and compresses off the GIL), at most
    ``shards_at_once`` at a time (the job's `pipeline.launch.context.Tuning`) and fewer than twice
    its cores. Nothing is left to emit when ``process`` returns: runners that drop what
    ``finish_bundle`` emits (Beam's DaskRunner) get every shard.
    """

    def __init__(self, context: JobContext, *, spilled: bool = False) -> None:
        self._spilled = spilled
        self._output = context.output
        # Shards go to the staging directory; the last step swaps them into OUTPUT.
        self._stage = staging_dir(context.tmp_dir)
        self._window = context.config.windows.window
        self._plan = context.plan
        self._fingerprint = context.fingerprint
        self._tmp_dir = context.tmp_dir
        self._shards_at_once = context.tuning.shards_at_once
        self._freeze_loaded = context.tuning.freeze_loaded
        self._handle = shared.Shared()

    def setup(self) -> None:
        # One pool per worker process, shared by its threads: a process never holds more
        # than that many shards being written.
        self._cores = os.cpu_count() or 1
        self._at_once = max(1, min(self._shards_at_once, 2 * self._cores - 1))
        self._pool = self._handle.acquire(
            lambda: ThreadPoolExecutor(self._at_once, thread_name_prefix="write-shard"),
            tag="write-shard")
        if self._freeze_loaded:
            leave_loaded_out()

    def process(self, item: tuple[int, Iterable[bytes]]
                | tuple[int, Iterable[tuple[list[int], list[str]]]]
                ) -> Iterator[tuple[str, Any]]:
        plan = self._plan
        if not self._spilled:
            index, parcels = item
            # On the process's pool all the same: however many bundle threads a runner runs
            # in a process (Dataflow: a dozen), at most `_at_once` shards are written at once.
            rows = ShardRows(list(parcels))  # type: ignore[arg-type]
            yield from self._finished(self._pool.submit(self._write, index, rows, plan).result())
            return
        ((indexes, spills),) = item[1]  # type: ignore[misc]  # one batch per batch number

        def start(index: int) -> Future[tuple[list[Reject], WrittenShard]]:
            return self._pool.submit(
                self._write, index,
                ShardParts(spills, shard=index, num_shards=plan.num_shards,
                           parts_per_shard=plan.parts_per_shard, open_file=fs.open_raw),
                plan)

        written = write_in_waves(start, list(indexes),  # type: ignore[arg-type]
                                 cores=min(self._cores, self._at_once))
        for index in sorted(written):
            yield from self._finished(written[index])

    def _write(self, index: int, rows: ShardRows | ShardParts,
               plan: ShardPlan) -> tuple[list[Reject], WrittenShard]:
        shard = write_placed_shard(plan=plan, index=index, output=self._stage, rows=rows,
                              window=self._window, fingerprint=self._fingerprint,
                              tmp_dir=self._tmp_dir, root=self._output)
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
    """(shard, [parcels]) → one Parquet file each; or, with ``spills``, every shard of the
    plan read from the spill files. `pipeline.steps.tagged.Outputs`: ``shards`` (a
    `transforms.shards.manifest_build.WrittenShard` per shard) and ``rejects`` (duplicate ids).

    What it reads of the `pipeline.launch.context.JobContext`: the output directory, W (which sets
    the row-group size), the shard plan, the fingerprint (each shard's footer), the
    temporary directory and the knob ``shards_at_once``.

    Args:
        context: the job's context.
        spills: the spill files' paths (the file shuffle), or None.
    """

    def __init__(self, context: JobContext, *, spills: beam.PCollection | None = None) -> None:
        super().__init__()
        self._context = context
        self._spills = spills

    def expand(self, groups: beam.PCollection | beam.pvalue.PBegin) -> Outputs:
        if self._spills is not None:
            # Every shard, in batches spread over the workers, each with the list of every
            # spill file, from which it reads its parts. The list reaches them through a
            # GroupByKey, not as a side input: Beam's DaskRunner computes a side input again
            # inside each task that reads it, which would encode the corpus again.
            groups = (self._spills
                      | "KeySpills" >> beam.Map(_one_key)
                      | "AllSpills" >> beam.GroupByKey()
                      | "EveryShard" >> beam.FlatMap(_shard_batches, self._context.plan,
                                                     self._context.tuning.shards_at_once)
                      | "SpreadShards" >> beam.GroupByKey())
        return (
            groups
            | "WriteShard" >> beam.ParDo(_WriteShardFn(self._context,
                                                       spilled=self._spills is not None))
            | "ByTag" >> SplitTags([SHARDS, REJECTS])
        )


def _one_key(path: str) -> tuple[None, str]:
    return None, path


def _shard_batches(item: tuple[None, Iterable[str]], plan: ShardPlan, at_once: int
                   ) -> Iterator[tuple[int, tuple[list[int], list[str]]]]:
    """(batch number, (shard indexes, every spill file)): the plan's shards in the fewest
    batches of at most ``at_once``, their sizes as even as can be (`shard_batches`)."""
    spills = sorted(item[1])
    for number, batch in enumerate(shard_batches(plan.num_shards, at_once)):
        yield number, (batch, spills)


def shard_batches(num_shards: int, at_once: int) -> list[list[int]]:
    """Shards 0 … num_shards − 1 in the fewest runs of at most ``at_once``, of sizes that
    differ by one at most: 5 shards by 4 are [0, 1, 2] and [3, 4], not [0 … 3] and a lone
    [4], whose writer would leave all but one core idle at the job's end."""
    count = -(-num_shards // at_once)
    size, more = divmod(num_shards, count) if count else (0, 0)
    batches, lo = [], 0
    for b in range(count):
        hi = lo + size + (b < more)
        batches.append(list(range(lo, hi)))
        lo = hi
    return batches


def write_in_waves(start: Callable[[int], Future[T]], shards: list[int], *,
                   cores: int) -> dict[int, T]:
    """Run ``start(shard)`` for every shard, about ``cores`` at a time, so that they all end
    together; their results by shard.

    A shard's writer keeps about one core busy, so ``cores`` at a time would leave the last
    ``len(shards) mod cores`` to end alone on idle cores. Instead these start with the first
    ``cores`` (sharing the cores, each wave ends as one), after which each shard that ends
    starts the next: 3 shards on 2 cores all start at once and end together (1.5 times one
    shard's time), where 2 and then 1 took twice that time.
    """
    pending = list(shards)
    first = len(pending) if len(pending) <= cores else cores + len(pending) % cores
    retire = first - min(first, cores)  # slots of the first wave not used again
    running = {start(shard): shard for shard in pending[:first]}
    del pending[:first]
    done: dict[int, T] = {}
    while running:
        finished, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in finished:
            done[running.pop(future)] = future.result()
            if retire:
                retire -= 1
            elif pending:
                shard = pending.pop(0)
                running[start(shard)] = shard
    return done


def _key_by_reason(reject: Reject | RejectRun) -> tuple[str, Reject | RejectRun]:
    return reject.reason, reject


class RejectCount(typing.NamedTuple):
    """How many records were skipped for one reason, and the first of them (input order)."""

    count: int
    first: Reject


def _write_rejects(item: tuple[str, Iterable[Reject | RejectRun]], output: str,
                   tmp_dir: str, spec: ReadSpec) -> tuple[str, RejectCount]:
    # Into the staging directory (`pipeline.files.commit`); ``output`` confines every path.
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
    fs.write_atomically(fs.join(staging_dir(tmp_dir), REJECTS_DIR, f"{reason}.jsonl"), write,
                        tmp_dir, root=output)
    return reason, RejectCount(count, first._replace(record=first.record[:4096]))


class WriteRejects(beam.PTransform):
    """Rejects → ``_rejects/<reason>.jsonl`` in the staging directory (in input order,
    `source_order`); emits (reason, `RejectCount`). It reads the output and temporary
    directories of the `pipeline.launch.context.JobContext`, and how to read the inputs (a
    duplicate id's record is read back from its source)."""

    def __init__(self, context: JobContext) -> None:
        super().__init__()
        self._output = context.output
        self._tmp_dir = context.tmp_dir
        self._spec = context.config.read

    def expand(self, rejects: beam.PCollection) -> beam.PCollection:
        return (
            rejects
            | "KeyByReason" >> beam.Map(_key_by_reason)
            | "GroupByReason" >> beam.GroupByKey()
            | "WriteReasonFile" >> beam.Map(_write_rejects, self._output, self._tmp_dir,
                                            self._spec)
        )
