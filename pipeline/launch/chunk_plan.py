"""The launcher's chunk plan: on Beam's DaskRunner, which cannot split its first ``Create``,
and on the local runner, where planning in the graph costs more than the plan.

On Dask a job spreads only as far as its first ``Create``'s partitions, and a GroupByKey
places its groups by a hash of their keys (docs/cost.md#dask). So there the launcher plans the
chunks (`transforms.inputs.chunk_plan`: names, byte ranges from sizes, Parquet row groups from
footers read in parallel), has the workers count the lines of byte ranges in a short job of their
own (`pipeline.steps.read.count_chunk_lines`), numbers them, and orders them so that each of the
runner's partitions holds about the same text; the job then starts from one element per chunk.
On the local runner the launcher plans them too (`plan_local`): it has matched every file
already, counts the lines of byte ranges itself, and reads each run of small whole files as
one chunk (`transforms.inputs.chunks.group_files`), so a job of 20,000 tiny files encodes a few
chunks, not 20,000, and the graph has no matching, planning and numbering stages (each a
stage of the runner, and most of a small job's run after its imports). On every other runner
the workers match the patterns and plan the chunks (the runner splits the work after the
read, and no path sits in the job graph, whose size Dataflow limits). The chunks, their
names and their numbering are the same whoever plans them, and so are the bytes.

Without ``--dask_npartitions`` or ``--dask_partition_size``, Beam's DaskRunner puts up to
128 elements in one partition, so a job of fewer chunks than that would run on one worker:
the launcher then asks for one partition per chunk, up to `MAX_PARTITIONS`.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.files import fs
from pipeline.launch.options import JobConfig, runner_name
from pipeline.steps.read import count_chunk_lines
from transforms.inputs.chunk_plan import (
    PatternMatch,
    balance,
    name_files,
    number_counted,
    plan_files,
)
from transforms.inputs.chunks import CHUNK_BYTES, Chunk, count_lines, group_files

__all__ = ["MAX_PARTITIONS", "partition_size", "plan_at_launch", "plan_local", "plans_chunks",
           "prepare_chunks"]

_LOG = logging.getLogger("token_windows")

# Partitions the launcher asks for when the job does not say (one per chunk up to this).
MAX_PARTITIONS = 128


def plans_chunks(options: PipelineOptions) -> bool:
    """Whether the launcher plans the chunks for this runner (Beam's DaskRunner)."""
    return runner_name(options) == "daskrunner"


def plan_at_launch(config: JobConfig, matched: list[PatternMatch], *,
                   chunk_bytes: int = CHUNK_BYTES) -> list[Chunk]:
    """The chunks of every matched file, as the workers would plan them; byte ranges are not
    numbered yet (`prepare_chunks`).

    Raises:
        ValueError: a file's format cannot be told (or a Parquet file is compressed around).
        OSError: a Parquet footer cannot be read; the message names the file.
    """
    files = name_files(matched, list(config.inputs))
    return plan_files(files, spec=config.read, open_file=fs.open_raw, chunk_bytes=chunk_bytes)


def _dask_options(options: PipelineOptions):
    from apache_beam.runners.dask.dask_runner import DaskOptions

    return options.view_as(DaskOptions)


def partition_size(n: int, options: PipelineOptions) -> int:
    """How many consecutive elements of a ``Create`` of ``n`` the DaskRunner puts in one
    partition, as it computes it (``dask.bag.from_sequence``); without a partition flag the
    launcher first sets ``--dask_npartitions`` to one per chunk, up to `MAX_PARTITIONS`."""
    dask = _dask_options(options)
    if dask.partition_size:
        return dask.partition_size
    if not dask.npartitions:
        dask.npartitions = max(1, min(n, MAX_PARTITIONS))
        _LOG.info("--dask_npartitions %d (one per input chunk, up to %d)", dask.npartitions,
                  MAX_PARTITIONS)
    if n <= 100:  # dask.bag's own threshold
        return max(1, math.ceil(n / dask.npartitions))
    return max(1, n // dask.npartitions)


def prepare_chunks(chunks: list[Chunk], options: PipelineOptions, *, tmp_dir: str, root: str,
                   pipeline: Callable[[], beam.Pipeline]) -> list[Chunk]:
    """The launcher's chunks numbered (a count job on ``pipeline()`` when a byte range needs
    it) and ordered for the runner's partitions (`transforms.inputs.chunk_plan.balance`)."""
    size = partition_size(len(chunks), options)  # sets --dask_npartitions for the count job
    numbered = count_chunk_lines(chunks, pipeline=pipeline, tmp_dir=tmp_dir, root=root)
    return balance(numbered, size)


def plan_local(config: JobConfig, matched: list[PatternMatch], *,
               chunk_bytes: int = CHUNK_BYTES) -> list[Chunk]:
    """The chunks of a job on the local runner: `plan_at_launch`, byte ranges numbered from
    their lines counted here (as many at once as there are cores), runs of small files
    grouped (`transforms.inputs.chunks.group_files`).

    Raises:
        ValueError: a file's format cannot be told (or a Parquet file is compressed around).
        OSError: a file cannot be read (its Parquet footer, or a byte range to count); the
            message names it.
    """
    chunks = plan_at_launch(config, matched, chunk_bytes=chunk_bytes)
    todo = [c for c in chunks if c.first is None]
    if todo:
        with ThreadPoolExecutor(max(1, min(len(todo), os.cpu_count() or 1)),
                                thread_name_prefix="count-lines") as pool:
            lines = pool.map(lambda c: count_lines(c, fs.open_raw), todo)
            counts = {(c.path, c.start): n for c, n in zip(todo, lines, strict=True)}
        chunks = number_counted(chunks, counts)
    return group_files(chunks)
