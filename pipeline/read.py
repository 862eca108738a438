"""Input patterns → numbered chunks, each file's exactly once; and the shard count.

The steps wire `transforms.chunks`: files are matched on the workers (nothing is listed while
the graph is built), a file matched by several patterns is read once (as the first pattern's),
and uncompressed line files larger than the chunk size become byte ranges after a parallel
pass that counts each range's lines, so that ids keep true line numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import apache_beam as beam

from pipeline import fs
from transforms.chunks import (
    CHUNK_BYTES,
    Chunk,
    count_lines,
    disambiguated_name,
    number_chunks,
    pattern_base,
    plan_chunks,
    relative_name,
)
from transforms.params import ReadSpec

__all__ = ["TARGET_SHARD_INPUT_BYTES", "ChooseNumShards", "SplitInputs"]

# Without --num-shards: one shard per this many bytes of input files.
TARGET_SHARD_INPUT_BYTES = 64 << 20


_Match = tuple[int, str, int, float | None]  # pattern index, relative name, size, mtime


class _MatchPatternFn(beam.DoFn):
    """(pattern index, pattern) → (relative name, (path, (pattern index, relative name, size,
    mtime))) per file."""

    def process(self, item: tuple[int, str]) -> Iterator[tuple[str, tuple[str, _Match]]]:
        index, pattern = item
        found = fs.match_files(pattern)
        if not found:
            raise ValueError(f"--input {pattern} matches no file; check the path and quoting")
        for path, size, mtime in found:
            rel = relative_name(path, pattern_base(pattern))
            yield rel, (path, (index, rel, size, mtime))


def _distinct_names(item: tuple[str, Iterable[tuple[str, _Match]]],
                    bases: list[str]) -> Iterator[tuple[str, _Match]]:
    """Files of several patterns that share a relative name (``en/part-0.jsonl`` and
    ``zh/part-0.jsonl`` under ``en/*`` and ``zh/*``) get names relative to the patterns'
    common base instead; every other file keeps its name (and its documents' ids)."""
    rel, matches = item
    matches = list(matches)
    clash = len({path for path, _ in matches}) > 1
    for path, (index, name, size, mtime) in matches:
        yield path, (index, disambiguated_name(path, bases) if clash else name, size, mtime)


class _PlanChunksFn(beam.DoFn):
    """(path, [(pattern index, rel, size) of each pattern that matched it]) → the file's
    chunks, read as the first pattern's."""

    def __init__(self, *, spec: ReadSpec, chunk_bytes: int) -> None:
        self._spec = spec
        self._chunk_bytes = chunk_bytes

    def process(self, item: tuple[str, Iterable[_Match]]) -> Iterator[Chunk]:
        path, matches = item
        _, rel, size, mtime = min(matches, key=lambda m: m[:3])  # no second look-up
        yield from plan_chunks(path, rel=rel, size=size, spec=self._spec, open_file=fs.open_raw,
                               chunk_bytes=self._chunk_bytes, mtime=mtime)


def _count_lines(chunk: Chunk) -> tuple[str, tuple[Chunk, int]]:
    return chunk.path, (chunk, count_lines(chunk, fs.open_raw))


def _number_chunks(item: tuple[str, Iterable[tuple[Chunk, int]]]) -> Iterator[Chunk]:
    return number_chunks(item[1])


class SplitInputs(beam.PTransform):
    """Input patterns → the chunks (`transforms.chunks.Chunk`) that workers parse.

    Args:
        patterns: the ``--input`` patterns, in order.
        spec: how to read the inputs.
        chunk_bytes: uncompressed line files larger than this are read in ranges.
    """

    def __init__(self, patterns: Iterable[str], *, spec: ReadSpec,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
        super().__init__()
        self._patterns = list(patterns)
        self._spec = spec
        self._chunk_bytes = chunk_bytes

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        return (
            pbegin
            | "Patterns" >> beam.Create(list(enumerate(self._patterns)))
            | "MatchFiles" >> beam.ParDo(_MatchPatternFn())
            | "GroupByName" >> beam.GroupByKey()
            | "DistinctNames" >> beam.FlatMap(
                _distinct_names, [pattern_base(p) for p in self._patterns])
            | "ReadEachFileOnce" >> beam.GroupByKey()
            | "PlanChunks" >> beam.ParDo(_PlanChunksFn(spec=self._spec,
                                                       chunk_bytes=self._chunk_bytes))
            | "SpreadChunks" >> beam.Reshuffle()
            | "CountLines" >> beam.Map(_count_lines)
            | "GroupChunksOfFile" >> beam.GroupByKey()
            | "NumberLines" >> beam.FlatMap(_number_chunks)
            | "SpreadNumberedChunks" >> beam.Reshuffle()
        )


def _file_size(chunk: Chunk) -> tuple[None, int]:
    return None, chunk.size if chunk.start == 0 else 0


def _shards_for_sizes(item: tuple[None, Iterable[int]], target_bytes: int) -> int:
    return max(1, math.ceil(sum(item[1]) / target_bytes))


class ChooseNumShards(beam.PTransform):
    """Chunks → the shard count (a singleton): ``num_shards``, or one shard per
    ``target_bytes`` of input files (their sizes as stored, each file once)."""

    def __init__(self, num_shards: int | None, *,
                 target_bytes: int = TARGET_SHARD_INPUT_BYTES) -> None:
        super().__init__()
        self._num_shards = num_shards
        self._target = target_bytes

    def expand(self, chunks: beam.PCollection) -> beam.PCollection:
        if self._num_shards is not None:
            return chunks.pipeline | "Given" >> beam.Create([self._num_shards])
        return (
            chunks
            | "FileSizes" >> beam.Map(_file_size)
            | "AllSizes" >> beam.GroupByKey()
            | "FromInputBytes" >> beam.Map(_shards_for_sizes, self._target)
        )
