"""Documents → tokens → windows → seeded keys → parcels by shard: the heart of the job.

`batch_documents` groups a chunk's records into batches of documents (rejects pass through as
they come); each batch is encoded (``Tokenizer.encode_batch``: z = [BOS, ids…, EOS] per
document) and handed with its tokens to `pack_documents`, which plans every document's windows
(`transforms.plan.windows.plan_windows_batch`), keys it (`transforms.plan.keys.doc_keys`) and packs
it into the parcel of its shard (`transforms.shards.parcels.pack_parcels`). `encode_documents` is
both steps at once. Each document is encoded, planned and keyed alone, so batch boundaries never
reach the output.

Example: with the bytes tokenizer, window 4, one shard, the document ("d", "abcde") gives one
parcel holding z = [256, 97, 98, 99, 100, 101, 257] and windows (0, 4), (4, 2);
``Encoded.tokens == 7`` and ``Encoded.windows == 2``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from transforms.inputs.documents import Document, Reject
from transforms.params import WindowSpec
from transforms.plan.keys import ShardPlan, doc_keys, parts_of
from transforms.plan.splits import SplitSpec
from transforms.plan.windows import plan_windows_batch
from transforms.shards.parcels import Pieces, narrow_tokens, pack_parcels
from transforms.tokenize.tokenizers import Tokenizer, first_line, tokenizer_failed

__all__ = [
    "BATCH_CHARS",
    "BATCH_DOCS",
    "BUFFER_TOKENS",
    "Encoded",
    "PartBuffer",
    "batch_documents",
    "encode_documents",
    "encode_or_reject",
    "pack_documents",
]

# Documents are encoded, planned and packed in batches of at most this many documents and
# characters: large enough that SentencePiece's threads and numpy pay off, small enough to
# keep a few batches in flight per worker.
BATCH_DOCS = 4096
BATCH_CHARS = 1 << 20
# A `PartBuffer` holds about this many tokens at most (32 MiB as uint16, which ids below 2**16
# allow; 64 MiB as int32).
BUFFER_TOKENS = 16 << 20

T = TypeVar("T")


class Encoded(NamedTuple):
    """A batch's parcels, (shard, parcel) in shard order, and what they hold."""

    parcels: list[tuple[int, bytes | Pieces]]  # (shard or part, parcel: bytes, or its Pieces)
    tokens: int  # Σ M
    windows: int


def batch_documents(
    items: Iterable[Document | Reject], *, max_docs: int = BATCH_DOCS,
    max_chars: int = BATCH_CHARS,
) -> Iterator[list[Document] | Reject]:
    """The documents of ``items`` in batches of at most ``max_docs`` documents, closed once
    they hold ``max_chars`` characters; each reject as it comes, between the batches."""
    docs: list[Document] = []
    chars = 0
    for item in items:
        if isinstance(item, Reject):
            yield item
            continue
        docs.append(item)
        chars += len(item.text)
        if len(docs) >= max_docs or chars >= max_chars:
            yield docs
            docs, chars = [], 0
    if docs:
        yield docs


def encode_or_reject(
    tokenizer: Tokenizer, docs: Sequence[Document],
) -> tuple[list[Document], list[npt.NDArray[np.int32]], list[Reject]]:
    """The documents the tokenizer encodes, their token ids, and a ``tokenizer_error`` reject for
    each it fails on (`tokenizer_failed`), in input order.

    The batch is encoded at once; only if that fails is each document encoded alone, to
    find the ones that fail. Each document is encoded alone either way, so the others' ids
    are those of the batch. The reject names the document's source and the first line of
    the error (a Rust panic's message, not its backtrace).
    """
    docs = docs if isinstance(docs, list) else list(docs)
    try:
        return docs, tokenizer.encode_batch([d.text for d in docs]), []
    except BaseException as e:
        if not tokenizer_failed(e):
            raise
    kept, tokens, rejects = [], [], []
    for doc in docs:
        try:
            (z,) = tokenizer.encode_batch([doc.text])
        except BaseException as e:
            if not tokenizer_failed(e):
                raise
            rejects.append(Reject(reason="tokenizer_error", source=doc.source,
                                  detail=first_line(e), record=doc.text))
            continue
        kept.append(doc)
        tokens.append(z)
    return kept, tokens, rejects


def pack_documents(
    docs: Sequence[Document], tokens: Sequence[npt.NDArray[np.int32]], *, windows: WindowSpec,
    num_shards: int, parts_per_shard: int = 1, keys: Sequence[int] | None = None,
    part: int | None = None,
) -> Encoded:
    """Plan, key and pack documents whose z (``tokens``, one array each) is known.

    Parcels are packed by shard, or by part of a shard when ``parts_per_shard`` > 1
    (`transforms.plan.keys.part_of`; the part's shard is ``part // parts_per_shard``). ``keys``
    are the documents' `transforms.plan.keys.doc_keys` when the caller has them already;
    ``part``: every document goes to this part (the caller has placed them).
    """
    return _pack_columns([d.doc_id for d in docs], [d.source for d in docs],
                         [d.repaired for d in docs], tokens, windows=windows,
                         num_shards=num_shards, parts_per_shard=parts_per_shard, keys=keys,
                         part=part)


def _pack_columns(
    ids: Sequence[str], sources: Sequence[str], repaired: Sequence[bool],
    tokens: Sequence[npt.NDArray[np.int32]], *, windows: WindowSpec, num_shards: int,
    parts_per_shard: int = 1, keys: Sequence[int] | npt.NDArray[np.uint64] | None = None,
    part: int | None = None, lengths: npt.NDArray[np.int64] | None = None,
    joined: bool = True,
) -> Encoded:
    """`pack_documents` of documents given as columns. ``lengths``: each z's M, when known;
    then ``tokens`` may also hold the z end to end, in one or several arrays. ``joined``:
    as `transforms.shards.parcels.pack_parcels`'."""
    m = np.fromiter(map(len, tokens), np.int64, len(tokens)) if lengths is None else lengths
    plans = plan_windows_batch(m - 1, windows, ids)
    parcels = pack_parcels(
        doc_keys=doc_keys(windows.seed, ids) if keys is None else keys,
        doc_ids=ids,
        sources=sources,
        tokens=tokens,
        plans=plans,
        repaired=repaired,
        num_shards=1 if part is not None else num_shards * parts_per_shard,
        doc_tokens=m,
        joined=joined,
    )
    if part is not None:
        parcels = [(part, parcel) for _, parcel in parcels]
    return Encoded(parcels=parcels, tokens=int(m.sum()), windows=len(plans.starts))


def encode_documents(
    docs: Sequence[Document], *, tokenizer: Tokenizer, windows: WindowSpec, num_shards: int,
) -> Encoded:
    """`pack_documents` of the documents' encodings."""
    tokens = tokenizer.encode_batch([d.text for d in docs])
    return pack_documents(docs, tokens, windows=windows, num_shards=num_shards)


class PartBuffer:
    """Encoded documents held by the part (or shard) they go to, packed one parcel per part.

    Packing each batch alone would cut it into one parcel per part it touches; with many
    parts (a large corpus) most parcels would hold a document or two, and a shard writer
    would read and decode hundreds of thousands of them. Held by part, a part's parcels hold
    about ``max_tokens`` ÷ parts tokens each. What the parcels hold never reaches the output.

    Once more than ``max_tokens`` tokens are held, `add` packs the parts holding the most
    until it holds at most 7/8 of ``max_tokens``: a few parts at a time, not all at once,
    so that the caller's encoders, still busy with the batches after, never wait for a whole
    buffer to be packed. `flush` packs every part.

    Args:
        windows: the window parameters (and the seed of the keys).
        plan: the shard plan (`transforms.plan.keys.ShardPlan`): a document goes to its split's
            part, `ShardPlan.part_of`.
        parts_per_shard: parts per shard (1: a part is a shard).
        splits: the split definition, which a plan with splits needs.
        max_tokens: hold at most about this many tokens.
        joined: each parcel as one byte string; False: as its `transforms.shards.parcels.Pieces`,
            for a caller that writes each out before it adds or flushes again.

    Raises:
        ValueError: the plan has splits but no ``splits`` are given.
    """

    def __init__(self, *, windows: WindowSpec, plan: ShardPlan, parts_per_shard: int = 1,
                 splits: SplitSpec | None = None, max_tokens: int = BUFFER_TOKENS,
                 joined: bool = True) -> None:
        if plan.splits and splits is None:
            raise ValueError("the plan has splits: give their definition (splits=)")
        self._windows = windows
        self._plan = plan
        self._parts_per_shard = parts_per_shard
        self._splits = splits if plan.splits else None
        self._max_tokens = max_tokens
        self._joined = joined
        # Held by part, as columns: the text is encoded already, so only the id, source,
        # flag, z, its length and key of each document are kept (no object per document).
        self._held_parts: dict[int, _Held] = {}
        self._held = 0

    def add(self, docs: Sequence[Document], tokens: Sequence[npt.NDArray[np.int32]],
            lengths: npt.NDArray[np.int64] | None = None) -> Encoded:
        """Hold documents (their z in ``tokens``, whose lengths the caller may know); returns
        the parcels packed if the buffer filled up, else none (``Encoded.tokens``/``windows``
        count what was packed)."""
        if lengths is None:
            lengths = np.fromiter(map(len, tokens), np.int64, len(tokens))
        ids = [d.doc_id for d in docs]
        keys = doc_keys(self._windows.seed, ids)
        parts = self._parts_of(keys, ids)
        sources, repaired = [d.source for d in docs], [d.repaired for d in docs]
        # Each part's z are held end to end in one array per batch, copied here from the
        # tokenizer's arrays (one per document, freed now), while the encoders work on the
        # batches after: packing a part then copies a few large arrays, not thousands. They
        # are held as the parcels' uint16 where the ids allow: half the memory, and packing
        # then copies without a cast.
        if len(parts) and parts[0] == parts[-1] and (parts == parts[0]).all():
            z = narrow_tokens(np.concatenate(tokens))
            self._hold(int(parts[0]), ids, sources, repaired, z, keys, lengths)
        elif len(parts):
            order = np.argsort(parts, kind="stable")
            present, first = np.unique(parts[order], return_index=True)
            bounds = [*first.tolist(), len(order)]
            z = narrow_tokens(np.concatenate(_picker(order.tolist())(tokens)))  # in part order
            ends = np.cumsum(lengths[order]).tolist()
            for i, part in enumerate(present.tolist()):
                lo, hi = bounds[i], bounds[i + 1]
                which = order[lo:hi]
                pick = _picker(which.tolist())
                self._hold(part, pick(ids), pick(sources), pick(repaired),
                           z[ends[lo - 1] if lo else 0 : ends[hi - 1]], keys[which],
                           lengths[which])
        self._held += int(lengths.sum())
        if self._held <= self._max_tokens:
            return Encoded(parcels=[], tokens=0, windows=0)
        # The fullest parts first, until at most 7/8 of max_tokens are held.
        goal = self._held - self._max_tokens + self._max_tokens // 8
        chosen, packed = [], 0
        for part in sorted(self._held_parts, key=lambda p: -self._held_parts[p].count):
            if packed >= goal:
                break
            chosen.append(part)
            packed += self._held_parts[part].count
        return self._pack(sorted(chosen))

    def _hold(self, part: int, ids: list[str], sources: list[str], repaired: list[bool],
              z: np.ndarray, keys: npt.NDArray[np.uint64],
              lengths: npt.NDArray[np.int64]) -> None:
        """Hold documents of one part (``z``: theirs end to end)."""
        held = self._held_parts.get(part)
        if held is None:
            held = self._held_parts[part] = _Held()
        held.ids += ids
        held.sources += sources
        held.repaired += repaired
        held.tokens.append(z)
        held.keys.append(keys)
        held.lengths.append(lengths)
        held.count += int(lengths.sum())

    def _parts_of(self, keys: npt.NDArray[np.uint64], ids: list[str]) -> npt.NDArray[np.int64]:
        """The part of each document (`transforms.plan.keys.ShardPlan.part_of`)."""
        if not self._plan.splits:
            return parts_of(keys, self._plan.num_shards * self._parts_per_shard)
        split = self._splits.split_of(ids)  # type: ignore[union-attr]
        return np.fromiter((self._plan.part_of(k, s, self._parts_per_shard)
                            for k, s in zip(keys.tolist(), split, strict=True)),
                           np.int64, len(ids))

    def flush(self) -> Encoded:
        """One parcel per part held, in part order; the buffer is empty afterwards."""
        return self._pack(sorted(self._held_parts))

    def _pack(self, parts: list[int]) -> Encoded:
        """One parcel for each of ``parts`` (in that order), no longer held."""
        parcels: list[tuple[int, bytes | Pieces]] = []
        tokens = windows = 0
        for part in parts:
            held = self._held_parts.pop(part)
            packed = _pack_columns(held.ids, held.sources, held.repaired, held.tokens,
                                   windows=self._windows, num_shards=self._plan.num_shards,
                                   parts_per_shard=self._parts_per_shard,
                                   keys=np.concatenate(held.keys), part=part,
                                   lengths=np.concatenate(held.lengths), joined=self._joined)
            parcels += packed.parcels
            tokens += packed.tokens
            windows += packed.windows
            self._held -= held.count
        return Encoded(parcels=parcels, tokens=tokens, windows=windows)


def _picker(which: list[int]) -> Callable[[Sequence[T]], list[T]]:
    """The items of a sequence at the indices ``which``, as a list (at C speed)."""
    if len(which) == 1:
        (i,) = which
        return lambda values: [values[i]]
    get = operator.itemgetter(*which)
    return lambda values: list(get(values))


class _Held:
    """One part's documents held by a `PartBuffer`, as columns, and their tokens (Σ M)."""

    __slots__ = ("count", "ids", "keys", "lengths", "repaired", "sources", "tokens")

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.sources: list[str] = []
        self.repaired: list[bool] = []
        # z end to end, an array per batch: uint16 when its ids allow (`narrow_tokens`)
        self.tokens: list[np.ndarray] = []
        self.keys: list[npt.NDArray[np.uint64]] = []
        self.lengths: list[npt.NDArray[np.int64]] = []
        self.count = 0
