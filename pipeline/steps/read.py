"""Input patterns → numbered chunks, each file's exactly once; and the shard plan.

The steps wire `transforms.inputs.chunks`: files are matched on the workers (nothing is listed while
the graph is built), a file matched by several patterns is read once (as the first pattern's),
and uncompressed line files larger than the chunk size become byte ranges after a parallel
pass that counts each range's lines, so that ids keep true line numbers.

On a runner that spreads a job only as far as its first ``Create``'s partitions (Beam's
DaskRunner), the launcher plans the chunks instead (`transforms.inputs.chunk_plan`), has the workers
count the lines of the byte ranges in a short job of its own (`count_chunk_lines`), numbers
them, and the job starts from one element per chunk (``SplitInputs(chunks=...)``): the same
chunks, named and numbered the same.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping

import apache_beam as beam

from pipeline.files import fs
from pipeline.steps.tagged import StepFn
from transforms.inputs.chunk_plan import PatternMatch, number_counted
from transforms.inputs.chunks import CHUNK_BYTES, Chunk, count_lines, number_chunks, plan_chunks
from transforms.inputs.codecs import COMPRESSED_TEXT_RATIO, compression_of
from transforms.inputs.names import (
    chosen_match,
    distinct_names,
    pattern_base,
    relative_name,
    shown_name,
)
from transforms.params import ReadSpec
from transforms.plan.keys import ShardPlan, plan_shards
from transforms.plan.splits import SplitSpec

__all__ = ["LINE_COUNTS_NAME", "TARGET_SHARD_INPUT_BYTES",
           "PatternMatch", "SplitInputs", "count_chunk_lines", "plan_for_files"]

_LOG = logging.getLogger("token_windows")

# Without --num-shards: one shard per this many bytes of input files.
TARGET_SHARD_INPUT_BYTES = 64 << 20


_Match = tuple[int, str, int, float | None]  # pattern index, relative name, size, mtime


def _named(found: PatternMatch, bases: list[str]) -> tuple[str, tuple[str, _Match]]:
    """(relative name, (path, (pattern index, relative name, size, mtime))); the launcher
    names files the same way (`transforms.inputs.chunk_plan.name_files`)."""
    index, path, size, mtime = found
    rel = relative_name(path, bases[index])
    return rel, (path, (index, rel, size, mtime))


class _MatchPatternFn(StepFn):
    """(pattern index, pattern) → `_named` per file it matches."""

    def __init__(self, bases: list[str]) -> None:
        self._bases = bases

    def process(self, item: tuple[int, str]) -> Iterator[tuple[str, tuple[str, _Match]]]:
        index, pattern = item
        found = fs.match_files(pattern)
        if not found:
            raise ValueError(f"--input {pattern} matches no file; check the path and quoting")
        for path, size, mtime in found:
            yield _named((index, path, size, mtime), self._bases)


def _distinct_names(item: tuple[str, Iterable[tuple[str, _Match]]],
                    bases: list[str]) -> list[tuple[str, _Match]]:
    """The files that share one relative name, told apart (`distinct_names`)."""
    return distinct_names(item[1], bases)


class _PlanChunksFn(StepFn):
    """(path, [(pattern index, rel, size) of each pattern that matched it]) → the file's
    chunks, read as the first pattern's."""

    def __init__(self, *, spec: ReadSpec, chunk_bytes: int) -> None:
        self._spec = spec
        self._chunk_bytes = chunk_bytes

    def process(self, item: tuple[str, Iterable[_Match]]) -> Iterator[Chunk]:
        path, matches = item
        _, rel, size, mtime = chosen_match(matches)  # no second look-up
        yield from plan_chunks(path, rel=rel, size=size, spec=self._spec, open_file=fs.open_raw,
                               chunk_bytes=self._chunk_bytes, mtime=mtime)


def _count_lines(chunk: Chunk) -> tuple[str, tuple[Chunk, int]]:
    return chunk.path, (chunk, count_lines(chunk, fs.open_raw))


def _number_chunks(item: tuple[str, Iterable[tuple[Chunk, int]]]) -> Iterator[Chunk]:
    return number_chunks(item[1])


class SplitInputs(beam.PTransform):
    """Input patterns → the chunks (`transforms.inputs.chunks.Chunk`) that workers parse.

    Args:
        patterns: the ``--input`` patterns, in order.
        spec: how to read the inputs.
        chunk_bytes: uncompressed line files larger than this are read in ranges.
        chunks: the launcher's plan (`transforms.inputs.chunk_plan`, every chunk numbered):
            the graph starts from one element per chunk, so that a runner that parallelizes by its
            source's partitions (Beam's DaskRunner, ``--dask_npartitions``) spreads them;
            they are embedded in the graph. None: the graph starts from the patterns, which
            the workers match (``MatchFiles``). Either way the same chunks, named the same.
        spread: with ``chunks``, whether the runner spreads them over several workers (a
            ``Create``, which Beam's DaskRunner partitions and the local runner's
            ``multi_processing`` mode reshuffles). False, for a runner with one worker (the
            local runner ``in_memory``): the chunks come out of one step, fused with their
            encoding, and no stage moves them (each step and stage is a fixed cost there).
    """

    def __init__(self, patterns: Iterable[str], *, spec: ReadSpec,
                 chunk_bytes: int = CHUNK_BYTES,
                 chunks: Iterable[Chunk] | None = None, spread: bool = True) -> None:
        super().__init__()
        self._patterns = list(patterns)
        self._spread = spread
        self._spec = spec
        self._chunk_bytes = chunk_bytes
        self._chunks = None if chunks is None else list(chunks)
        unnumbered = [c for c in self._chunks or () if c.first is None]
        if unnumbered:
            raise ValueError(
                f"the chunk {shown_name(unnumbered[0].path)}@{unnumbered[0].start} has no "
                "first line: number the launcher's chunks (count_chunk_lines) first")

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        if self._chunks is not None and not self._spread:
            return (pbegin
                    | "Start" >> beam.Impulse()
                    | "AsChunks" >> beam.FlatMap(_launched, self._chunks))
        if self._chunks is not None:
            # Planned and numbered at launch: nothing to group, so the runner's partitions of
            # this Create are the encoding's (a GroupByKey would place them by key hash).
            # Each as a JSON array of its fields: Beam's Create infers its type from every
            # value and pickles what its coder does not know, which for 10^5 dataclasses (or
            # tuples) takes seconds; bytes it takes as they are.
            return (pbegin
                    | "Chunks" >> beam.Create([_as_row(c) for c in self._chunks])
                    | "AsChunks" >> beam.Map(_as_chunk))
        bases = [pattern_base(p) for p in self._patterns]
        named = (pbegin
                 | "Patterns" >> beam.Create(list(enumerate(self._patterns)))
                 | "MatchFiles" >> beam.ParDo(_MatchPatternFn(bases)))
        return (
            named
            | "GroupByName" >> beam.GroupByKey()
            | "DistinctNames" >> beam.FlatMap(_distinct_names, bases)
            | "ReadEachFileOnce" >> beam.GroupByKey()
            | "PlanChunks" >> beam.ParDo(_PlanChunksFn(spec=self._spec,
                                                       chunk_bytes=self._chunk_bytes))
            | "SpreadChunks" >> beam.Reshuffle()
            | "CountLines" >> beam.Map(_count_lines)
            | "GroupChunksOfFile" >> beam.GroupByKey()
            | "NumberLines" >> beam.FlatMap(_number_chunks)
            | "SpreadNumberedChunks" >> beam.Reshuffle()
        )


_CHUNK_FIELDS = tuple(f.name for f in dataclasses.fields(Chunk))


def _fields(chunk: Chunk) -> list[object]:
    return [[_fields(f) for f in chunk.files] if name == "files" else getattr(chunk, name)
            for name in _CHUNK_FIELDS]


def _from_fields(values: list[object]) -> Chunk:
    fields = dict(zip(_CHUNK_FIELDS, values, strict=True))
    fields["files"] = tuple(_from_fields(f) for f in fields["files"])  # type: ignore[union-attr]
    return Chunk(**fields)  # type: ignore[arg-type]


def _launched(_: bytes, chunks: list[Chunk]) -> list[Chunk]:
    return chunks


def _as_row(chunk: Chunk) -> bytes:
    return json.dumps(_fields(chunk), separators=(",", ":")).encode()


def _as_chunk(row: bytes) -> Chunk:
    return _from_fields(json.loads(row))


# The line counts of a count job (`count_chunk_lines`), in the job's temporary directory.
LINE_COUNTS_NAME = "line-counts.json"


def _counted(chunk: Chunk) -> tuple[None, tuple[str, int, int]]:
    lines = count_lines(chunk, fs.open_raw)
    _LOG.debug("counted chunk %s@%d: %d lines", chunk.path, chunk.start, lines)
    return None, (chunk.path, chunk.start, lines)


def _write_counts(item: tuple[None, Iterable[tuple[str, int, int]]], path: str,
                  tmp_dir: str, root: str) -> None:
    counts = sorted(item[1])
    fs.write_atomically(path, lambda f: f.write(json.dumps(counts).encode()), tmp_dir,
                        root=root)


def count_chunk_lines(chunks: Iterable[Chunk], *, pipeline: Callable[[], beam.Pipeline],
                      tmp_dir: str, root: str) -> list[Chunk]:
    """The launcher's chunks, numbered (`transforms.inputs.chunk_plan.number_counted`): the lines of
    every chunk still to be numbered are counted by a job of their own on ``pipeline()``
    (the job's runner), which writes them to `LINE_COUNTS_NAME` in ``tmp_dir`` (below ``root``,
    the output directory, `pipeline.files.confine`). No job runs
    when every chunk is numbered already (no uncompressed line file exceeds the chunk size).

    Raises:
        Exception: whatever failed the count job (a file that cannot be read is named).
    """
    chunks = list(chunks)
    todo = [c for c in chunks if c.first is None]
    if not todo:
        return chunks
    path = fs.join(tmp_dir, LINE_COUNTS_NAME)
    p = pipeline()
    _ = (p
         | "ChunksToCount" >> beam.Create([_as_row(c) for c in todo])
         | "AsChunks" >> beam.Map(_as_chunk)
         | "CountLines" >> beam.Map(_counted)
         | "AllCounts" >> beam.GroupByKey()
         | "WriteCounts" >> beam.Map(_write_counts, path, tmp_dir, root))
    result = p.run()
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)  # the DaskRunner leaves its client open
        if client is not None:
            client.close()
    counts = {(path_, start): lines
              for path_, start, lines in json.loads(fs.read_bytes(path))}
    fs.delete([path], root=root)
    return number_counted(chunks, counts)


def plan_for_files(files: Mapping[str, int] | Mapping[str, tuple[int, float | None]] | None, *,
                   num_shards: int | None,
                   shard_bytes: int = TARGET_SHARD_INPUT_BYTES, part_bytes: int | None = None,
                   splits: SplitSpec | None = None) -> ShardPlan:
    """The `transforms.plan.keys.ShardPlan` of the files the launcher matched ({path: size} or
    {path: (size, mtime)}, each file once): ``num_shards``, or one shard per ``shard_bytes``
    of input files (their sizes as stored); and, for the file shuffle, parts of about
    ``part_bytes`` of text per shard (None: one part), a compressed file (as its name tells,
    `transforms.inputs.chunks.compression_of`, whatever ``--format`` says) taken to hold
    `COMPRESSED_TEXT_RATIO` times its size in text. With ``splits``, each split gets its own shards
    (`transforms.plan.splits.apportion_shards`).

    It is computed once, at launch, and handed to the steps as a constant: as a side input,
    Beam's DaskRunner would compute it again inside every task that reads it. ``files``
    None: a graph that is only translated (a dry run), planned as if there were no input.
    """
    stored = text = 0
    for path, matched in (files or {}).items():
        size = matched if isinstance(matched, int) else matched[0]
        stored += size
        text += size * (COMPRESSED_TEXT_RATIO if compression_of(shown_name(path)) else 1)
    return plan_shards(stored, num_shards=num_shards, shard_bytes=shard_bytes, text_bytes=text,
                       part_bytes=part_bytes, splits=splits)
