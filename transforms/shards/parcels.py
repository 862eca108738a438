"""Parcels: how documents cross the shuffle.

Parcels are internal to the job (docs/architecture.md#glossary); what the shuffle must keep is
docs/format.md#shuffle-and-shards.

A parcel is many documents of one shard in columns, as one deterministic byte string: their
seeded keys, token counts M, window counts, covered pairs, repaired flags, ids and sources,
then every ``z`` end to end and every window (start, length, loss_start) end to end. Splitting
a batch by shard (`pack_parcels`) and ordering a shard (`transforms.shards.rows.ShardRows`) are then
a few array operations, not a Python step per document.

Bytes (little-endian, every part padded to 8 bytes)::

    header   magic "TWB1", flags, documents, tokens (Σ M), windows (Σ n), id bytes, source bytes
    per document   keys u64 · M i64 · n i64 · covered i64 · id ends i64 · source ends i64 ·
                   repaired u8
    blobs    doc_ids (UTF-8, end to end) · sources (UTF-8, end to end)
    tokens   every z, uint16 when every id of the parcel is < 2**16, else int32 (flag 1)
    windows  starts i64 · lengths i32 · loss_starts i32

Example: documents "ab" and "c" (bytes tokenizer, window 2) packed for one shard give a parcel
whose `read_parcel` has ``doc_tokens == [4, 3]``, ``doc_windows == [2, 1]`` and ``tokens ==
[256, 97, 98, 257, 256, 99, 257]``.

What a parcel holds depends on batching; what a shard holds does not, and the shard's rows are
ordered by key after the shuffle, so batching never reaches the output.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from transforms.plan.keys import shard_of
from transforms.plan.windows import WindowPlans

__all__ = ["Parcel", "Pieces", "narrow_tokens", "pack_parcels", "read_parcel"]

_HEADER = struct.Struct("<4sIqqqqq")
_MAGIC = b"TWB1"
_WIDE = 1  # flag: tokens are int32 (else uint16)
_ZEROS = bytes(8)
_FEW = 64  # token arrays checked one by one (`_joined`)

# A parcel as the buffers it is made of, end to end (`pack_parcels` with ``joined=False``):
# a caller that writes it to a file writes them one after the other, with no copy of the
# whole parcel made first.
Pieces = list[bytes | memoryview]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Parcel:
    """The columns of a parcel, as read-only views of its bytes (see the module's bytes)."""

    keys: npt.NDArray[np.uint64]
    doc_tokens: npt.NDArray[np.int64]  # M (the length of z) of each document
    doc_windows: npt.NDArray[np.int64]  # windows of each document
    covered: npt.NDArray[np.int64]
    repaired: npt.NDArray[np.uint8]
    id_ends: npt.NDArray[np.int64]  # end of each doc_id in ``ids``
    src_ends: npt.NDArray[np.int64]
    ids: bytes  # the doc_ids, UTF-8, end to end
    sources: bytes
    tokens: np.ndarray  # every z end to end, uint16 (or int32 when some id is ≥ 2**16)
    starts: npt.NDArray[np.int64]  # every window, document after document
    lengths: npt.NDArray[np.int32]
    loss_starts: npt.NDArray[np.int32]


def pack_parcels(
    *,
    doc_keys: Sequence[int] | npt.NDArray[np.uint64],
    doc_ids: Sequence[str],
    sources: Sequence[str],
    tokens: Sequence[npt.NDArray[np.int32]],
    plans: WindowPlans,
    repaired: Sequence[bool],
    num_shards: int,
    doc_tokens: npt.NDArray[np.int64] | None = None,
    joined: bool = True,
) -> list[tuple[int, bytes]] | list[tuple[int, Pieces]]:
    """Documents and their windows packed by the shard of their key.

    Args:
        doc_keys, doc_ids, sources, tokens, repaired: one entry per document (``tokens`` is
            its whole z).
        plans: the documents' windows, end to end (`transforms.plan.windows.plan_windows_batch`).
        num_shards: the job's shard count.
        doc_tokens: the length M of each z, when the caller has them already; then
            ``tokens`` may also be every z end to end, in one or several arrays.
        joined: each parcel as one byte string; False: as its `Pieces`, for a caller that
            writes them out at once (their buffers may be the caller's arrays: not to be
            kept once those change).

    Returns:
        (shard, parcel of its documents in their order) for each shard that has documents, in
        shard order.
    """
    pack = _pack if joined else _pieces
    batch = _Batch.of(doc_keys, doc_ids, sources, tokens, plans, repaired, doc_tokens)
    if not len(batch.keys):
        return []
    if num_shards == 1:
        return [(0, pack(batch))]
    shards = np.fromiter((shard_of(k, num_shards) for k in batch.keys.tolist()), np.int64,
                         len(batch.keys))
    present = np.unique(shards)
    if len(present) == 1:
        return [(int(present[0]), pack(batch))]
    return [(int(shard), pack(batch.select(shards == shard))) for shard in present]


@dataclasses.dataclass(frozen=True)
class _Batch:
    """Documents to pack, as columns."""

    keys: npt.NDArray[np.uint64]
    doc_tokens: npt.NDArray[np.int64]
    ids: list[str]
    sources: list[str]
    z: np.ndarray  # every z end to end: uint16 when every id is < 2**16, else int32
    plans: WindowPlans
    repaired: npt.NDArray[np.uint8]

    @classmethod
    def of(cls, doc_keys: Sequence[int] | np.ndarray, doc_ids: Sequence[str],
           sources: Sequence[str], tokens: Sequence[npt.NDArray[np.int32]], plans: WindowPlans,
           repaired: Sequence[bool], doc_tokens: npt.NDArray[np.int64] | None = None) -> _Batch:
        count = len(doc_ids)
        return cls(
            np.array(doc_keys, dtype=np.uint64).reshape(-1),
            np.fromiter(map(len, tokens), np.int64, count) if doc_tokens is None else doc_tokens,
            doc_ids if isinstance(doc_ids, list) else list(doc_ids),
            sources if isinstance(sources, list) else list(sources),
            _joined(tokens) if count else np.empty(0, np.uint16),
            plans,
            np.fromiter(repaired, np.uint8, count),
        )

    def select(self, mask: npt.NDArray[np.bool_]) -> _Batch:
        """The documents where ``mask`` holds, in their order."""
        windows = np.repeat(mask, self.plans.counts)
        which = np.flatnonzero(mask).tolist()
        p = self.plans
        return _Batch(
            self.keys[mask], self.doc_tokens[mask], [self.ids[i] for i in which],
            [self.sources[i] for i in which], self.z[np.repeat(mask, self.doc_tokens)],
            WindowPlans(counts=p.counts[mask], covered=p.covered[mask], starts=p.starts[windows],
                        lengths=p.lengths[windows], loss_starts=p.loss_starts[windows]),
            self.repaired[mask],
        )


def _fits_narrow(z: np.ndarray) -> bool:
    """Whether every id of ``z`` fits a parcel's narrow form, uint16 (it is uint16, empty, or
    its ids are < 2**16)."""
    return z.dtype == np.uint16 or not len(z) or int(z.max()) < 1 << 16


def narrow_tokens(z: np.ndarray) -> np.ndarray:
    """Token ids in a parcel's narrow form, uint16, when every one is < 2**16; else (or when
    they are uint16 already) ``z`` itself."""
    return z.astype(np.uint16, copy=False) if len(z) and _fits_narrow(z) else z


def _joined(tokens: Sequence[np.ndarray]) -> np.ndarray:
    """The arrays (int32, or uint16 already) end to end: as uint16 (the parcel's narrow
    tokens) when every id is < 2**16, else as int32. A few large arrays (a
    `transforms.shards.encoding.PartBuffer`'s) are checked one by one and cast while they are
    copied; many (one per document) are joined first, then checked and cast."""
    if len(tokens) > _FEW:
        return narrow_tokens(np.concatenate(tokens))
    if all(map(_fits_narrow, tokens)):
        return np.concatenate(tokens, dtype=np.uint16, casting="unsafe")
    return np.concatenate(tokens)


def _blob(strings: list[str]) -> tuple[bytes, npt.NDArray[np.int64]]:
    """The strings as UTF-8 end to end, and the end of each."""
    joined = "".join(strings)
    if joined.isascii():  # one byte a character: no string encoded alone
        parts: list[str] | list[bytes] = strings
        data = joined.encode("ascii")
    else:
        parts = [x.encode("utf-8") for x in strings]
        data = b"".join(parts)
    return data, np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)))


def _pack(batch: _Batch) -> bytes:
    return b"".join(_pieces(batch))


def _pieces(batch: _Batch) -> Pieces:
    z = batch.z
    wide = not _fits_narrow(z)
    (ids, id_ends), (sources, src_ends) = _blob(batch.ids), _blob(batch.sources)
    parts: Pieces = [
        _HEADER.pack(_MAGIC, _WIDE if wide else 0, len(batch.keys), len(batch.z),
                     len(batch.plans.starts), len(ids), len(sources))
    ]

    def add(data: bytes | memoryview) -> None:
        parts.append(data)
        if pad := -len(data) % 8:
            parts.append(_ZEROS[:pad])

    def add_array(array: np.ndarray, dtype: str) -> None:
        # The array's own buffer: no bytes copy of each column first.
        data = memoryview(np.ascontiguousarray(array, dtype=dtype)).cast("B")
        add(data)

    for array, dtype in (
        (batch.keys, "<u8"), (batch.doc_tokens, "<i8"), (batch.plans.counts, "<i8"),
        (batch.plans.covered, "<i8"), (id_ends, "<i8"), (src_ends, "<i8"),
        (batch.repaired, "u1"),
    ):
        add_array(array, dtype)
    add(ids)
    add(sources)
    for array, dtype in (
        (batch.z, "<i4" if wide else "<u2"), (batch.plans.starts, "<i8"),
        (batch.plans.lengths, "<i4"), (batch.plans.loss_starts, "<i4"),
    ):
        add_array(array, dtype)
    return parts


def read_parcel(data: bytes) -> Parcel:
    """The columns of a parcel written by `pack_parcels`.

    Raises:
        ValueError: ``data`` is not a parcel.
    """
    if len(data) < _HEADER.size:
        raise ValueError(f"not a parcel of packed documents ({len(data)} bytes, less than a "
                         "header)")
    magic, flags, count, tokens, windows, id_bytes, src_bytes = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise ValueError(f"not a parcel of packed documents (magic {magic!r})")
    pos = _HEADER.size

    def take(dtype: str, size: int) -> np.ndarray:
        nonlocal pos
        array = np.frombuffer(data, dtype=dtype, count=size, offset=pos)
        pos += array.nbytes + (-array.nbytes % 8)
        return array

    def blob(size: int) -> bytes:
        nonlocal pos
        out = bytes(data[pos : pos + size])
        pos += size + (-size % 8)
        return out

    return Parcel(
        keys=take("<u8", count), doc_tokens=take("<i8", count), doc_windows=take("<i8", count),
        covered=take("<i8", count), id_ends=take("<i8", count), src_ends=take("<i8", count),
        repaired=take("u1", count), ids=blob(id_bytes), sources=blob(src_bytes),
        tokens=take("<i4" if flags & _WIDE else "<u2", tokens), starts=take("<i8", windows),
        lengths=take("<i4", windows), loss_starts=take("<i4", windows),
    )
