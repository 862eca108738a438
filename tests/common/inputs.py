"""Input files read as the job reads them, without Beam, and inputs damaged on purpose."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import pathlib

from transforms.inputs.chunks import (
    CHUNK_BYTES,
    STREAM_BLOCK,
    Chunk,
    count_lines,
    number_chunks,
    open_local,
    plan_chunks,
    read_chunk,
)
from transforms.inputs.documents import Document, Reject
from transforms.inputs.names import pattern_base, relative_name
from transforms.inputs.receipts import account_inputs
from transforms.params import ReadSpec

DEFAULT = ReadSpec()


@dataclasses.dataclass
class Read:
    chunks: list[Chunk]
    items: list[Document | Reject]
    records: int

    @property
    def docs(self):
        return [(d.doc_id, d.text) for d in self.items if isinstance(d, Document)]

    @property
    def rejects(self):
        return [(r.reason, r.source) for r in self.items if isinstance(r, Reject)]


def read_files(patterns, *, spec=DEFAULT, chunk_bytes=CHUNK_BYTES, block_bytes=STREAM_BLOCK):
    """Every record of the files the patterns match, read as the job reads them (each file
    once, as its first pattern's), in file then record order."""
    matched = {}
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            rel = relative_name(path, pattern_base(pattern))
            matched.setdefault(path, (rel, os.path.getsize(path)))
    chunks, items, receipts = [], [], []
    for path, (rel, size) in matched.items():
        planned = list(plan_chunks(path, rel=rel, size=size, spec=spec, open_file=open_local,
                                   chunk_bytes=chunk_bytes))
        counted = [(c, count_lines(c, open_local)) for c in planned]
        for chunk in number_chunks(counted[::-1]):  # the counts arrive in any order
            got = list(read_chunk(chunk, spec, open_local, block_bytes=block_bytes))
            chunks.append(chunk)
            items.extend(got)
            receipts.append(chunk.receipt(len(got)))
    records = account_inputs(receipts[::-1], {p: size for p, (_, size) in matched.items()})
    return Read(chunks, items, records)


LINES = [json.dumps({"text": f"line {i} " + "x" * (i % 13)}) for i in range(200)]


TEXTS = [json.loads(line)["text"] for line in LINES]


def damage(path: pathlib.Path, row: int) -> None:
    """Flip one bit inside the text of ``row``: the file still parses."""
    data = bytearray(path.read_bytes())
    at = data.index(f"document {row}: ".encode()) + 2
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
