"""A shuffle through files: parcels spilled by part, read back one part at a time.

The user's side of it: docs/running.md#memory-on-one-machine-the-file-shuffle.

On the local runner a GroupByKey keeps its whole input in memory. To keep memory flat, the
job can instead shuffle the way MapReduce and Spark's sort-based shuffle do: each map task
(here: the encoding of one bundle of input chunks, which the runner hands a worker at
once) writes one *spill file* holding its parcels and, at its end, an index of where each
part's parcels are; only the file's path goes on. The writer
of a shard reads, from every spill file, the index entries of its parts and then their
parcels, one part after another (`ShardParts`), so it holds one part's documents at a time:
memory is O(one part + the list of spill files), never O(shard) or O(corpus).

Parts: each shard's key range is cut into ``parts_per_shard`` contiguous sub-ranges,
``part = shard_of(key, num_shards × parts_per_shard)`` and ``shard = part // parts_per_shard``
(`transforms.plan.keys.part_of`). Parts in order are the shard's key order, and documents with
equal keys (so every duplicate id) share a part, so the rows of a shard's parts, end to end,
are exactly the shard's rows (`transforms.shards.parquet.write_rows` keeps row groups aligned across
parts, so the bytes are the same too).

File format (little-endian)::

    parcels   as written, in any part order
    index    starts int64[P + 1]: part p's ranges are ranges[starts[p] : starts[p + 1]]
             ranges int64[R, 2]: (offset, length) of each parcel, by part, in file order
    footer   magic "TWS1", P int64, index offset int64, R int64

Example: a chunk that spills parcels for parts 3 and 7 (of 8), then another for part 3, has
``starts == [0, 0, 0, 0, 2, 2, 2, 2, 3]`` and ranges (0, a), (a + b, c), (a, b).

Rejects spill too: a chunk's rejects, in input order, are written to its bundle's rejects
file, one run of ``rejects/<reason>.jsonl`` lines per reason (`spill_rejects`), and only a
`RejectRun` per chunk and reason goes on. Chunks are disjoint and ordered, so a reason's
file is its runs end to end in chunk order.

File access is the caller's: `SpillWriter` writes to any binary sink, `ShardParts` reads with
an `transforms.inputs.chunks.Opener`.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import numpy as np

from transforms.inputs.chunks import Opener
from transforms.inputs.documents import Reject
from transforms.shards.parcels import Pieces
from transforms.shards.rows import ShardCounts, ShardRows

__all__ = ["RejectRun", "ShardParts", "SpillWriter", "disk_full_message", "read_run",
           "spill_rejects"]

_FOOTER = struct.Struct("<4sqqq")
_MAGIC = b"TWS1"


def disk_full_message(directory: str) -> str:
    """What a full disk under the spill files says: the directory, what it needs, the fixes.

    The spill holds every document's tokens and windows until the shards are written: about
    0.85 bytes per byte of input text with a 32k-vocabulary SentencePiece model, 2.3 with the
    bytes tokenizer (docs/integrity.md#the-job).
    """
    return (f"no space left on the device holding {directory}, where the file shuffle spills "
            "the encoded documents (the job's temporary directory, always inside --output): "
            "the spill needs about 0.85x the input text with a 32k-vocabulary model and 2.3x "
            "with --tokenizer bytes, until the shards are written; free that much on that "
            "disk, choose an --output on a larger one, or pass --shuffle runner (no spill "
            "files; the local runner then holds the documents in memory)")


class SpillWriter:
    """Parcels of many parts, written end to end to ``sink`` as they come, then their index.

    Args:
        sink: a writable binary file (not closed here).
        num_parts: P, the job's number of parts (`transforms.plan.keys.ShardPlan.num_parts`).
    """

    def __init__(self, sink: BinaryIO, *, num_parts: int) -> None:
        self._sink = sink
        self._parts = num_parts
        self._at = 0
        self._written: list[tuple[int, int, int]] = []  # (part, offset, length)

    def write(self, part: int, parcel: bytes | Pieces) -> None:
        """Append a parcel of ``part``: its bytes, or its pieces end to end
        (`transforms.shards.parcels.Pieces`, written one after the other: no joined copy)."""
        if not 0 <= part < self._parts:
            raise ValueError(f"part must be in [0, {self._parts}), but got {part}")
        if isinstance(parcel, list):
            size = 0
            for piece in parcel:
                self._sink.write(piece)
                size += len(piece)
        else:
            self._sink.write(parcel)
            size = len(parcel)
        self._written.append((part, self._at, size))
        self._at += size

    def finish(self) -> int:
        """Write the index and footer; returns the bytes of parcels written."""
        written = np.array(self._written, dtype=np.int64).reshape(-1, 3)
        order = np.argsort(written[:, 0], kind="stable")  # by part, file order within
        starts = np.zeros(self._parts + 1, np.int64)
        np.cumsum(np.bincount(written[:, 0], minlength=self._parts), out=starts[1:])
        ranges = np.ascontiguousarray(written[order, 1:], dtype="<i8")
        self._sink.write(starts.astype("<i8").tobytes())
        self._sink.write(ranges.tobytes())
        self._sink.write(_FOOTER.pack(_MAGIC, self._parts, self._at, len(ranges)))
        return self._at


def _read(f: BinaryIO, offset: int, length: int, path: str) -> bytes:
    f.seek(offset)
    data = f.read(length)
    if len(data) != length:
        raise OSError(f"spill file {path} ends at {offset + len(data)}, before the end of "
                      f"[{offset}, {offset + length}); it was truncated")
    return data


def _index(f: BinaryIO, path: str, lo: int, hi: int, parts: int) -> list[np.ndarray]:
    """Ranges of parts lo … hi − 1 of one spill file: a (offset, length) array per part."""
    f.seek(0, 2)
    size = f.tell()
    if size < _FOOTER.size:
        raise OSError(f"spill file {path} has {size} bytes, too few for its footer")
    magic, num_parts, index_at, count = _FOOTER.unpack(
        _read(f, size - _FOOTER.size, _FOOTER.size, path))
    if magic != _MAGIC or num_parts != parts:
        raise OSError(f"spill file {path} is not a spill file of this job ({magic!r}, "
                      f"{num_parts} parts, expected {parts})")
    starts = np.frombuffer(_read(f, index_at + 8 * lo, 8 * (hi - lo + 1), path), "<i8")
    first, last = int(starts[0]), int(starts[-1])
    at = index_at + 8 * (parts + 1) + 16 * first
    ranges = np.frombuffer(_read(f, at, 16 * (last - first), path), "<i8").reshape(-1, 2)
    return [ranges[int(a) - first : int(b) - first] for a, b in zip(starts[:-1], starts[1:],
                                                                    strict=True)]


class ShardParts:
    """A shard's rows as its parts, read from the spill files one part at a time.

    Iterating yields one `ShardRows` per part that has documents, in part order; only the
    part being yielded is in memory (and, per spill file, its index entries for this shard).
    After the iteration, ``counts`` and ``rejects`` are the whole shard's.

    Args:
        spills: the paths of every spill file of the job, in any order.
        shard: the shard's index; parts_per_shard: the shard plan's.
        open_file: opens a spill file for reading.
    """

    def __init__(self, spills: Sequence[str], *, shard: int, num_shards: int,
                 parts_per_shard: int, open_file: Opener) -> None:
        self._spills = sorted(spills)
        self._lo = shard * parts_per_shard
        self._k = parts_per_shard
        self._parts = num_shards * parts_per_shard
        self._open = open_file
        self.counts = ShardCounts()
        self.rejects: list[Reject] = []

    def __iter__(self) -> Iterator[ShardRows]:
        lo, hi = self._lo, self._lo + self._k
        indexes = []
        for path in self._spills:
            with self._open(path) as f:
                indexes.append(_index(f, path, lo, hi, self._parts))
        for j in range(self._k):
            parcels = []
            for path, index in zip(self._spills, indexes, strict=True):
                if len(index[j]):
                    with self._open(path) as f:
                        parcels += [_read(f, int(o), int(n), path) for o, n in index[j]]
            if not parcels:
                continue
            rows = ShardRows(parcels)
            del parcels
            self.counts += rows.counts
            self.rejects.extend(rows.rejects)
            yield rows
            del rows  # not held while the next part is read


@dataclasses.dataclass(frozen=True, kw_only=True)
class RejectRun:
    """One chunk's rejects of one reason: ``count`` lines at ``[offset, offset + length)`` of
    ``path``, to be placed by ``order`` (the chunk's (file, start): input order)."""

    reason: str
    path: str
    offset: int
    length: int
    count: int
    order: tuple[str, int]
    first: Reject  # the run's first reject (its record cut to 4096 characters)


def spill_rejects(rejects: Sequence[Reject], sink: BinaryIO, *, path: str,
                  order: tuple[str, int]) -> list[RejectRun]:
    """Write a chunk's rejects (in input order) to ``sink``, one run per reason; the runs."""
    by_reason: dict[str, list[bytes]] = {}
    first: dict[str, Reject] = {}
    for reject in rejects:
        by_reason.setdefault(reject.reason, []).append(reject.to_line())
        first.setdefault(reject.reason, reject._replace(record=reject.record[:4096]))
    runs, at = [], 0
    for reason, lines in sorted(by_reason.items()):
        data = b"".join(lines)
        sink.write(data)
        runs.append(RejectRun(reason=reason, path=path, offset=at, length=len(data),
                              count=len(lines), order=order, first=first[reason]))
        at += len(data)
    return runs


def read_run(run: RejectRun, open_file: Opener) -> bytes:
    """The lines of a run."""
    with open_file(run.path) as f:
        return _read(f, run.offset, run.length, run.path)
