"""Every input read exactly once, as matched: the chunks' receipts and their accounting.

Each parsed chunk (`transforms.inputs.chunks.Chunk`) leaves a `Receipt`: its file's size, extent and
mtime as read and the range it covered. Before a manifest is written, `account_inputs` checks
that the receipts of every file tile it exactly once and that every file matched at launch
was read, unchanged; `check_unchanged` fails a read of a file whose size or mtime changed
since it was matched (`InputChanged`). What fails the job: docs/running.md#bad-input.

Example: receipts [0, 64 MiB) and [64 MiB, 150 MB) of a 150 MB file account for it; a
missing [64 MiB, 128 MiB) fails with "the range [67108864, 134217728) was never read".
"""

from __future__ import annotations

import dataclasses
import io
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, BinaryIO

from transforms.inputs.names import shown_name

if TYPE_CHECKING:
    from transforms.inputs.chunks import Chunk

__all__ = ["InputChanged", "Receipt", "account_inputs", "check_unchanged"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Receipt:
    """What one parsed chunk says about itself.

    ``start``/``end`` are byte offsets, or row-group indices for Parquet, in ``[0, extent)``;
    ``extent`` is the file's size in bytes, or its number of row groups.
    """

    path: str
    size: int
    extent: int
    start: int
    end: int
    records: int
    mtime: float | None = None
    sampled_out: int = 0  # records left out by --sample (`transforms.plan.splits`), of ``records``
    # A run of small files (`transforms.inputs.chunks.group_files`): a whole-file receipt of each,
    # which stand for this one in the accounting (its records are the run's).
    files: tuple[Receipt, ...] = ()


class InputChanged(OSError):
    """An input file is not the file that was matched when the job started."""


def _seen(f: BinaryIO) -> tuple[int, float | None]:
    """(size, mtime) of an open file as it is now; mtime None where the file system gives
    no descriptor (object stores: their size is still seen)."""
    position = f.tell()
    size = f.seek(0, io.SEEK_END)
    f.seek(position)
    try:
        mtime: float | None = os.fstat(f.fileno()).st_mtime
    except (AttributeError, OSError, io.UnsupportedOperation, ValueError):
        mtime = None
    return size, mtime


def check_unchanged(chunk: Chunk, f: BinaryIO, consumed: int | None) -> None:
    """Fail unless the open file still is the file that was matched (size, mtime) and the
    read consumed what the chunk planned."""
    size, mtime = _seen(f)
    changed = size != chunk.size or (
        mtime is not None and chunk.mtime is not None and mtime != chunk.mtime)
    if consumed is not None and consumed != (chunk.end - chunk.start):
        changed = True
    if changed:
        raise InputChanged(
            f"input file {shown_name(chunk.path)} changed while the job ran: matched with "
            f"{chunk.size} bytes (mtime {chunk.mtime}), read with {size} bytes (mtime "
            f"{mtime}); no manifest was written: rerun once the input stops changing"
        )


def account_inputs(
    receipts: Iterable[Receipt],
    expected: dict[str, int] | dict[str, tuple[int, float | None]] | None,
) -> int:
    """The number of records read, after checking that every input was read exactly once.

    The pieces of each file must tile ``[0, extent)`` with no gap and no overlap, and, when
    ``expected`` ({path: size} or {path: (size, mtime)} as matched before the job started)
    is given, every expected file must be there with its size (and mtime, where both are
    known) and no other. A runner that lost or repeated work, or an input that changed
    after the launcher matched it, thus fails the job instead of writing a dataset that
    silently lacks (or doubles) part of its input.

    Raises:
        RuntimeError: naming the file and what is wrong with it.
    """
    receipts = list(receipts)
    by_path: dict[str, list[Receipt]] = {}
    for r in receipts:
        for piece in r.files or (r,):
            by_path.setdefault(piece.path, []).append(piece)
    launch: dict[str, tuple[int, float | None]] | None = None
    if expected is not None:
        launch = {p: (v, None) if isinstance(v, int) else (v[0], v[1])
                  for p, v in expected.items()}
        missing = sorted(set(launch) - set(by_path))
        if missing:
            raise RuntimeError(
                f"{len(missing)} input files were never read (e.g. {shown_name(missing[0])}): "
                "the runner lost work, or the file disappeared while the job ran; no manifest "
                "was written, rerun the job"
            )
        extra = sorted(set(by_path) - set(launch))
        if extra:
            raise RuntimeError(
                f"{shown_name(extra[0])} was read but did not match when the job started: "
                "inputs changed while the job ran; no manifest was written"
            )
    for path, pieces in sorted(by_path.items()):
        pieces.sort(key=lambda r: (r.start, r.end))
        seen = {(r.size, r.extent, r.mtime) for r in pieces}
        name = shown_name(path)
        if len(seen) != 1:
            raise RuntimeError(
                f"input file {name} changed while the job ran (its chunks saw (size, extent, "
                f"mtime) {sorted(seen, key=repr)}); no manifest was written: rerun once the "
                "input stops changing"
            )
        if launch is not None:
            size, mtime = launch[path]
            read = pieces[0]
            if read.size != size or (
                    mtime is not None and read.mtime is not None and read.mtime != mtime):
                raise RuntimeError(
                    f"input file {name} changed while the job ran: {size} bytes (mtime {mtime}) "
                    f"when the job started, {read.size} bytes (mtime {read.mtime}) when it was "
                    "read; no manifest was written: rerun once the input stops changing"
                )
        position = 0
        for r in pieces:
            if r.start != position:
                what = "was read twice" if r.start < position else "was never read"
                raise RuntimeError(
                    f"{name}: the range [{min(r.start, position)}, {max(r.start, position)}) "
                    f"{what}: the runner lost or repeated work; no manifest was written"
                )
            position = r.end
        if position != pieces[0].extent:
            raise RuntimeError(
                f"{name}: the range [{position}, {pieces[0].extent}) was never read: the "
                "runner lost work; no manifest was written"
            )
    return sum(r.records for r in receipts)
