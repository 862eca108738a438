"""The dedup pass's keys through files: each bundle's key blocks spilled, read back band by band.

With the file shuffle (the local runner's default, whose GroupByKey holds its whole input in
memory), the dedup pass (`pipeline.steps.dedup`) does not send its key blocks through a
GroupByKey: each bundle of chunks writes them to one *key spill file*, and only the file's
path goes on. The step that finds a band's buckets then reads that band's blocks from every
file, one band at a time, so it holds 20 bytes per document (one band's keys and positions),
not 20 bytes per document and band; a chunk's doc_ids are read back only for the chunks
that have a document with a candidate copy.

File format::

    records   pickled (band, `transforms.dedup.removal.KeyBlock`) or (IDS_BAND, `ChunkIds`), in any
              order
    index     pickled [(band, offset, length)], one per record, in file order
    footer    magic "TWK1", index offset int64, index length int64 (little-endian)

Temporary files of one job, written and read by the same code: pickle is their format.
File access is the caller's: `KeySpillWriter` writes to any binary sink, the readers take an
`transforms.inputs.chunks.Opener`.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from transforms.inputs.chunks import Opener

__all__ = ["IDS_BAND", "KeySpillWriter", "read_band", "read_record"]

IDS_BAND = -2  # the records holding a chunk's doc_ids (bands are EXACT = -1, 0, 1 …)
_FOOTER = struct.Struct("<4sqq")
_MAGIC = b"TWK1"

Location = tuple[str, int, int]  # (file, offset, length) of one record


class KeySpillWriter:
    """Appends records to ``sink`` (a spill file at ``path``), then its index and footer."""

    def __init__(self, sink: BinaryIO, path: str) -> None:
        self._sink = sink
        self._path = path
        self._at = 0
        self._index: list[tuple[int, int, int]] = []

    def write(self, band: int, value: Any) -> Location:
        """Append one record; returns where it is."""
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self._sink.write(data)
        at = (self._path, self._at, len(data))
        self._index.append((band, self._at, len(data)))
        self._at += len(data)
        return at

    def finish(self) -> None:
        """Write the index and the footer (the caller closes the sink)."""
        index = pickle.dumps(self._index, protocol=pickle.HIGHEST_PROTOCOL)
        self._sink.write(index)
        self._sink.write(_FOOTER.pack(_MAGIC, self._at, len(index)))


def _index(f: BinaryIO, path: str) -> list[tuple[int, int, int]]:
    size = f.seek(0, 2)
    f.seek(max(0, size - _FOOTER.size))
    footer = f.read(_FOOTER.size)
    magic, at, length = _FOOTER.unpack(footer) if len(footer) == _FOOTER.size else (b"", 0, 0)
    if magic != _MAGIC:
        raise OSError(f"{path} is no complete key spill file (its footer is missing)")
    f.seek(at)
    return pickle.loads(f.read(length))


def read_band(paths: Iterable[str], band: int, open_file: Opener) -> Iterator[Any]:
    """Every record of ``band`` in the spill files, file by file, in file order."""
    for path in sorted(paths):
        with open_file(path) as f:
            for record_band, offset, length in _index(f, path):
                if record_band == band:
                    f.seek(offset)
                    yield pickle.loads(f.read(length))


def read_record(at: Location, open_file: Opener) -> Any:
    """The record at ``at``."""
    path, offset, length = at
    with open_file(path) as f:
        f.seek(offset)
        return pickle.loads(f.read(length))
