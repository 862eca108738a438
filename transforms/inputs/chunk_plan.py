"""The launcher's plan of the input chunks, for runners that cannot split their first step.

Beam's DaskRunner spreads a job only as far as the partitions of its first ``Create``
(docs/cost.md#dask): a job that starts from one element per input file runs a corpus of one
large file on one worker. So on such a runner the launcher plans the chunks itself, from what
it can learn cheaply, and the job starts from one element per chunk:

1. `name_files`: every matched file once, named exactly as the workers name it when they
   match the patterns (`pipeline.steps.read.SplitInputs`): relative to its first pattern's base, or
   to the patterns' common base when two files share a relative name.
2. `plan_files`: each file's chunks (`transforms.inputs.chunks.plan_chunks`): byte ranges of
   uncompressed line files from their sizes, row groups of Parquet files from their footers
   (read on a thread pool, since each is a round trip to the store), one chunk per compressed
   or text file. The chunks are those the workers would plan: same boundaries, same ids.
3. `number_counted`: byte ranges get their first line number from the line counts of the
   ranges before them (`transforms.inputs.chunks.count_lines`, counted by the workers), so ids keep
   true line numbers.
4. `balance`: the order of the chunks in the ``Create``: the runner cuts it into slices of
   ``partition_size`` consecutive elements, so the chunks are dealt, largest first, into the
   slice with the least text so far. Order changes nothing in the output: documents are keyed
   and sorted, rejects sorted by their source (docs/format.md).

Example: one 200 MB ``crawl.jsonl`` with 64 MiB chunks is 3 chunks, [0, 64 MiB),
[64, 128 MiB), [128 MiB, 200 MB): three partitions, on up to three workers, where the plan by
file had one.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from transforms.inputs.chunks import CHUNK_BYTES, Chunk, Opener, number_chunks, plan_chunks
from transforms.inputs.codecs import COMPRESSED_TEXT_RATIO
from transforms.inputs.names import (
    Match,
    chosen_match,
    distinct_names,
    pattern_base,
    relative_name,
    shown_name,
)
from transforms.params import ReadSpec

__all__ = ["FOOTER_THREADS", "NamedFile", "balance", "chunk_weight", "name_files",
           "number_counted", "plan_files"]

# Parquet footers read at once by the launcher (each a ranged read or two on an object store).
FOOTER_THREADS = 32

PatternMatch = tuple[int, str, int, float | None]  # pattern index, path, size, mtime


class NamedFile(NamedTuple):
    """A matched file, once: its path, the index of the pattern it is read as, its id prefix
    (``rel``), size and mtime as matched."""

    path: str
    index: int
    rel: str
    size: int
    mtime: float | None


def name_files(matched: Iterable[PatternMatch], patterns: list[str]) -> list[NamedFile]:
    """Every file of ``matched`` ((pattern index, path, size, mtime), a file once per pattern
    that matched it) once, in order of first match, named as the workers name it.

    >>> [f.rel for f in name_files([(0, "c/en/a.jsonl", 5, None), (1, "c/zh/a.jsonl", 6, None)],
    ...                             ["c/en/*", "c/zh/*"])]
    ['en/a.jsonl', 'zh/a.jsonl']
    """
    bases = [pattern_base(p) for p in patterns]
    matched = list(matched)
    rels = [relative_name(path, bases[index]) for index, path, _, _ in matched]
    if len(set(rels)) == len(rels) and len({m[1] for m in matched}) == len(matched):
        # Each file matched once and no two share a name (the usual job): nothing to choose.
        return [NamedFile(path, index, rel, size, mtime)
                for (index, path, size, mtime), rel in zip(matched, rels, strict=True)]
    by_rel: dict[str, list[tuple[str, Match]]] = {}
    for (index, path, size, mtime), rel in zip(matched, rels, strict=True):
        by_rel.setdefault(rel, []).append((path, (index, rel, size, mtime)))
    by_path: dict[str, list[Match]] = {}
    for found in by_rel.values():
        for path, match in distinct_names(found, bases):
            by_path.setdefault(path, []).append(match)
    return [NamedFile(path, *chosen_match(found)) for path, found in by_path.items()]


def plan_files(files: Iterable[NamedFile], *, spec: ReadSpec, open_file: Opener,
               chunk_bytes: int = CHUNK_BYTES, threads: int = FOOTER_THREADS) -> list[Chunk]:
    """The chunks of every file, file by file in order: `transforms.inputs.chunks.plan_chunks`, with
    Parquet footers read ``threads`` at a time.

    Raises:
        ValueError: a file's format cannot be told, or a Parquet file is compressed around.
        OSError: a Parquet footer cannot be read (the message names the file).
    """
    files = list(files)

    def plan(f: NamedFile) -> list[Chunk]:
        return list(plan_chunks(f.path, rel=f.rel, size=f.size, spec=spec, open_file=open_file,
                                chunk_bytes=chunk_bytes, mtime=f.mtime))

    # Files that may be Parquet (plan_chunks tells for sure; a false guess costs nothing).
    forced = spec.format == "parquet"
    footers = [i for i, f in enumerate(files)
               if forced or (spec.format is None and ".parquet" in f.path.lower())]
    planned: dict[int, list[Chunk]] = {}
    if footers:
        with ThreadPoolExecutor(max(1, min(threads, len(footers))),
                                thread_name_prefix="footer") as pool:
            planned = dict(zip(footers, pool.map(plan, [files[i] for i in footers]),
                               strict=True))
    chunks: list[Chunk] = []
    for i, f in enumerate(files):
        chunks += planned[i] if i in planned else plan(f)
    return chunks


def number_counted(chunks: Iterable[Chunk], counts: Mapping[tuple[str, int], int]
                   ) -> list[Chunk]:
    """Every chunk with its first line: ``counts`` holds, for each chunk still to be numbered
    (``first`` None), keyed by (path, start), the lines that begin in it
    (`transforms.inputs.chunks.count_lines`). Order is kept.

    Raises:
        ValueError: a chunk to be numbered has no count.
    """
    chunks = list(chunks)
    by_path: dict[str, list[tuple[Chunk, int]]] = {}
    for c in chunks:
        if c.first is None and (c.path, c.start) not in counts:
            raise ValueError(f"no line count for {shown_name(c.path)}@{c.start}: count every "
                             "chunk whose first line is unknown before numbering")
        by_path.setdefault(c.path, []).append((c, counts.get((c.path, c.start), 0)))
    numbered = {(c.path, c.start): c for pairs in by_path.values()
                for c in number_chunks(pairs)}
    return [numbered[(c.path, c.start)] for c in chunks]


def chunk_weight(chunk: Chunk) -> int:
    """About how much text a chunk holds, in bytes: its range; a compressed file 4 times its
    size; a Parquet chunk its share of the file's row groups."""
    if chunk.fmt == "parquet":
        return chunk.size * (chunk.end - chunk.start) // max(chunk.extent, 1)
    if chunk.compression is not None:
        return chunk.size * COMPRESSED_TEXT_RATIO
    return chunk.end - chunk.start


def balance(chunks: Iterable[Chunk], partition_size: int,
            weight: Callable[[Chunk], int] = chunk_weight) -> list[Chunk]:
    """``chunks`` reordered so that slices of ``partition_size`` consecutive chunks (the
    runner's partitions) hold about the same text: largest first, each into the slice with
    the least so far that has room (each slice in input order). Every chunk once.

    >>> [c for c in balance([9, 1, 1, 8, 1, 1], 3, weight=lambda c: c)]
    [9, 1, 1, 1, 8, 1]
    """
    chunks = list(chunks)
    n = len(chunks)
    if partition_size < 1:
        raise ValueError(f"partition_size must be a positive integer, but got {partition_size}")
    if n <= partition_size:
        return chunks
    slices = -(-n // partition_size)
    room = [partition_size] * (slices - 1) + [n - partition_size * (slices - 1)]
    heap = [(0, s) for s in range(slices)]
    members: list[list[int]] = [[] for _ in range(slices)]
    for i in sorted(range(n), key=lambda i: (-weight(chunks[i]), i)):
        load, s = heapq.heappop(heap)
        members[s].append(i)
        room[s] -= 1
        if room[s]:
            heapq.heappush(heap, (load + weight(chunks[i]), s))
    return [chunks[i] for m in members for i in sorted(m)]
