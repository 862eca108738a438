"""A shuffle through files: blocks spilled by part, read back one part at a time (SPEC §4).

On the local runner a GroupByKey keeps its whole input in memory. To keep memory flat, the
job can instead write each chunk's blocks to one *spill file* as they are packed, and send
only small references (`SpillRef`: the file, a *part*, the byte ranges of that part's blocks)
through the shuffle. The writer of a shard then reads its parts one after another
(`ShardParts`), so it holds one part's documents at a time, never the shard's or the corpus's.

Parts: each shard's key range is cut into ``parts_per_shard`` contiguous sub-ranges,
``part = shard_of(key, num_shards × parts_per_shard)`` and ``shard = part // parts_per_shard``
(`transforms.keys.part_of`). Parts in order are the shard's key order, and documents with
equal keys (so every duplicate id) share a part, so the rows of a shard's parts, end to end,
are exactly the shard's rows (`transforms.parquet.write_rows` keeps row groups aligned across
parts, so the bytes are the same too).

Example: a chunk whose first batch packs blocks for parts 3 and 7 and whose second batch packs
one for part 3 writes them end to end; its refs are part 3 → [(0, a), (a + b, c)] and part 7
→ [(a, b)], with a, b, c the three blocks' sizes.

File access is the caller's: `SpillWriter` writes to any binary sink, `ShardParts` reads with
an `transforms.chunks.Opener`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from transforms.chunks import Opener
from transforms.documents import Reject
from transforms.rows import ShardCounts, ShardRows

__all__ = ["ShardParts", "SpillRef", "SpillWriter"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpillRef:
    """Where one part's blocks are in one spill file: (offset, length) of each."""

    path: str
    part: int
    ranges: tuple[tuple[int, int], ...]


class SpillWriter:
    """Blocks of many parts, written end to end to ``sink`` as they come.

    Args:
        sink: a writable binary file (not closed here).
    """

    def __init__(self, sink: BinaryIO) -> None:
        self._sink = sink
        self._at = 0
        self._ranges: dict[int, list[tuple[int, int]]] = {}

    def write(self, part: int, block: bytes) -> None:
        self._sink.write(block)
        self._ranges.setdefault(part, []).append((self._at, len(block)))
        self._at += len(block)

    @property
    def bytes(self) -> int:
        return self._at

    def refs(self, path: str) -> list[SpillRef]:
        """One `SpillRef` per part written, in part order, naming the file as ``path``."""
        return [SpillRef(path=path, part=part, ranges=tuple(ranges))
                for part, ranges in sorted(self._ranges.items())]


def _read_blocks(refs: list[SpillRef], open_file: Opener) -> list[bytes]:
    """The blocks the refs point at (one open per file, ranges read in file order)."""
    blocks: list[bytes] = []
    by_path: dict[str, list[tuple[int, int]]] = {}
    for ref in refs:
        by_path.setdefault(ref.path, []).extend(ref.ranges)
    for path, ranges in sorted(by_path.items()):
        with open_file(path) as f:
            for offset, length in sorted(ranges):
                f.seek(offset)
                data = f.read(length)
                if len(data) != length:
                    raise OSError(f"spill file {path} ends at {offset + len(data)}, before the "
                                  f"block at [{offset}, {offset + length}); it was truncated")
                blocks.append(data)
    return blocks


class ShardParts:
    """A shard's rows as its parts, read and ordered one part at a time.

    Iterating yields one `ShardRows` per part that has documents, in part order; only the
    part being yielded is in memory. After the iteration, ``counts`` and ``rejects`` are the
    whole shard's.

    Args:
        refs: every `SpillRef` of the shard, in any order.
        open_file: opens a spill file for reading.
    """

    def __init__(self, refs: Iterable[SpillRef], open_file: Opener) -> None:
        self._by_part: dict[int, list[SpillRef]] = {}
        for ref in refs:
            self._by_part.setdefault(ref.part, []).append(ref)
        self._open = open_file
        self.counts = ShardCounts()
        self.rejects: list[Reject] = []

    def __iter__(self) -> Iterator[ShardRows]:
        for part in sorted(self._by_part):
            rows = ShardRows(_read_blocks(self._by_part.pop(part), self._open))
            self.counts += rows.counts
            self.rejects.extend(rows.rejects)
            yield rows
