"""A weighted, exact, resumable stream of windows drawn from named sources (see
``docs/mixtures.md``).

Contract:

* **The stream** is an endless sequence of windows of a :class:`reader.MixedDataset`, a
  function of the seed, the weights (or schedule), each source's name, size and window sizes
  only: never of the batch size, the world size, the rank or the workers. Position t's
  source is decided by :class:`reader.mixture.blend.Blend` (earliest deadline among the sources not
  a window ahead): at every prefix since the current weights took effect, each source's
  count is within one window of its share (``unit="windows"``), or its scored targets
  within one window's targets (W) of its share of the targets drawn (``unit="targets"``).
* **Within a source**, windows come from its own seeded epoch permutation: the order of
  :class:`reader.EpochSampler` (``global``) with the seed :func:`source_seed` of the
  mixture's seed and the source's name. When a source has given every window of its epoch
  it starts its next epoch, independently of the others: every window once per epoch.
* **Batches**: global batch g is the stream's positions ``[g·G, (g+1)·G)``,
  ``G = world_size · batch_size``, dealt to ranks as :class:`reader.EpochSampler` deals a
  full batch (:func:`reader.order.dealing.rank_span`: rank r takes ``[r·B, (r+1)·B)`` of it).
  With ``seq_len`` the stream is packed first-fit into rows of ``seq_len`` positions
  exactly as :func:`reader.pack_rows` packs an epoch (``open_rows`` rows open, rows
  numbered as they close), and global batch g is rows ``[g·G, (g+1)·G)``, for
  :func:`reader.collate_packed`. Iterating never ends; there are no deliberate repeats.
* **Weights** are a mapping (normalised, rounded to multiples of 1/65,536 when they need a
  larger denominator: :func:`reader.mixture.blend.round_weights`; 0 allowed) or a schedule
  ``[(0, m0), (g1, m1), …]``: ``m_i`` applies from global batch ``g_i`` on. When the weights
  in force change, the rule restarts from that position (the bound holds again from there)
  and every source continues its epoch where it stands.
* **State**: :meth:`MixtureSampler.state_dict` is small JSON, O(number of sources): the
  committed position, each source's ledger (epoch, position in the epoch, windows and targets
  drawn) and dataset fingerprint, the weights in force and where they took effect, and with
  packing the windows waiting in open rows. :meth:`MixtureSampler.load_state_dict` continues
  exactly, at any world size and batch size, without replaying the stream. A sampler with
  other weights than the state's continues every source where it stood and applies them from
  the committed position, as the schedule ``[(0, old), (g, new)]`` would; a source the state
  lacks starts at its first epoch; a source whose dataset changed, or one the mixture lacks,
  is refused by name. The state is checked as a whole on load: what can be recomputed (each
  source's windows and targets, the rule's counts since the weights took effect) is
  recomputed, and a field the stream cannot have at that position is refused by name.
  ``step`` and the committed position are those of :class:`reader.EpochSampler`.
"""

from __future__ import annotations

import functools
import hashlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from reader.mixture.blend import Blend, as_fraction, parse_schedule
from reader.mixture.dataset import GroupedIndices, MixedDataset
from reader.mixture.ledger import Cursor, DrawnBatches, Snapshot
from reader.order.dealing import check_int, check_state_header, rank_span
from reader.order.sampler import EpochSampler
from reader.order.stepping import CommittedPosition
from transforms.errors import ForeignDataset, SamplerStateError

__all__ = ["UNITS", "MixtureSampler", "source_seed"]

UNITS = ("windows", "targets")
_STATE_FORMAT = "mixture-sampler"
_STATE_VERSION = 1
_KEPT = 256  # snapshots kept for step() when the loop never steps
_CHUNK = 8192  # stream positions drawn at once (unpacked)
_AHEAD = 2048  # at most this many windows of each source read ahead for a draw


def source_seed(seed: int, name: str) -> int:
    """The seed of source ``name``'s epoch orders: 63 bits of SHA-256 of (seed, name)."""
    digest = hashlib.sha256(f"{_STATE_FORMAT}:{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


class _Stream:
    """The stream from a snapshot: cursors, the rule, the packer's open rows."""

    def __init__(self, sampler: MixtureSampler, snap: Mapping[str, Any]) -> None:
        self._s = sampler
        names = sampler.mixed.names
        self.batch = snap["batch"]
        self.rows = snap["rows"]
        self.cursors = [Cursor(sampler.mixed.sources[n], sampler._orders[i],
                                snap["ledger"].get(n, (0, 0, 0, 0)), offset=sampler._offsets[i],
                                lists=sampler.seq_len is not None)  # packing: one at a time
                        for i, n in enumerate(names)]
        self._taken = [0] * len(names)  # windows drawn this batch, not yet taken
        self.weights = {n: Fraction(snap["weights"].get(n, 0)) for n in names}
        self.since = dict(snap["since"])
        self._size_of = self._targets_of_next if sampler.unit == "targets" else self._one
        self._blend = self._new_blend()
        self._check = True
        # Unpacked, batches are drawn ``_CHUNK`` positions at a time (see _draw_batches);
        # the ledger after the batch last given is then read off them when asked for.
        self._chunk: DrawnBatches | None = None
        self._at = self._drawn = self._grow = 0
        self._ledger: Callable[[], list[list[int]]] | None = None
        # Open rows, oldest first: [free positions, [(source, local index, length), …]].
        self.open = [[free, [(names.index(n), local, length) for n, local, length in members]]
                     for free, members in snap["open"]]

    def _units(self, c: Cursor) -> int:
        return c.targets if self._s.unit == "targets" else c.windows

    def _targets_of_next(self, d: int) -> int:
        """The scored targets of source ``d``'s next window not yet taken (unit: targets)."""
        return self.cursors[d].targets_at(self._taken[d])

    @staticmethod
    def _one(d: int) -> int:
        """Every window counts one (unit: windows)."""
        return 1

    def _new_blend(self) -> Blend:
        names = self._s.mixed.names
        counts = [self._units(c) - self.since["counts"].get(n, 0)
                  for n, c in zip(names, self.cursors, strict=True)]
        return Blend([self.weights[n] for n in names], unit=self._s._unit_size, counts=counts)

    def _apply_weights(self) -> None:
        wanted = self._s.weights_at(self.batch)
        if wanted != self.weights:  # new weights: the rule restarts here
            self.weights = dict(wanted)
            self.since = {"batch": self.batch, "counts": {
                n: self._units(c) for n, c in zip(self._s.mixed.names, self.cursors,
                                                  strict=True)}}
            self._blend = self._new_blend()

    def next_batch(self) -> list[Any]:
        """The next global batch: G global indices, or G packed rows of them."""
        # The weights are applied at the first batch from a snapshot and where the schedule
        # changes; elsewhere the weights in force stay.
        if self._check or self.batch in self._s._changes:
            self._apply_weights()
            self._check = False
        if self._s.seq_len is None:
            if self._at == self._drawn:
                self._draw_batches()
            j, chunk = self._at, self._chunk
            self._at += 1
            self.batch += 1
            self._ledger = functools.partial(chunk.ledger, j)
            return GroupedIndices(chunk.batch_list(j), (self._s.mixed.key, *chunk.rank_batch(j)))
        # Local names for the loop below, which runs once per window of the batch.
        g = self._s.global_batch
        pick = self._blend.pick
        size_of = self._size_of
        taken = self._taken
        rows = self.open
        closed: list[list[tuple[int, int, int]]] = []
        seq_len = self._s.seq_len
        open_rows = self._s.open_rows
        cursors = self.cursors
        while len(closed) < g:
            d = pick(size_of)[0]
            local, length = cursors[d].at(taken[d])
            item = (d, local, length)
            taken[d] += 1
            if length >= seq_len:  # a full window is a row of its own at once
                closed.append([item])
                continue
            for j, row in enumerate(rows):  # first fit, as reader.pack_rows
                if row[0] >= length:
                    row[1].append(item)
                    row[0] -= length
                    if row[0] == 0:
                        closed.append(rows.pop(j)[1])
                    break
            else:
                if len(rows) == open_rows:
                    closed.append(rows.pop(0)[1])
                rows.append([seq_len - length, [item]])
        self._take()
        offsets = self._s._offsets
        a, b = self._s._span
        self.rows += g
        self.batch += 1
        return [[offsets[d] + local for d, local, _ in row] for row in closed[a:b]]

    def _draw_batches(self) -> None:
        """The next global batches of the stream at once (:meth:`reader.mixture.blend.Blend.run`):
        ``_CHUNK`` positions or more (whole batches), never past a change of weights."""
        s = self._s
        g = s.global_batch
        k = min(max(1, _CHUNK // g), 4 ** self._grow)  # a first batch soon, then longer
        self._grow += 1
        later = [c for c in s._changes if c > self.batch]
        if later:
            k = min(k, min(later) - self.batch)
        need = k * g
        cursors = self.cursors
        blend = self._blend
        base = [c.ledger() for c in cursors]
        active = [d for d, n in enumerate(s.mixed.names) if self.weights[n]]
        produced = [0] * len(cursors)
        srcs: list[Any] = []
        indices: list[Any] = []
        targets: list[Any] = []
        counting_targets = s.unit == "targets"
        got = 0
        weights = [float(self.weights[n]) for n in s.mixed.names]
        while got < need:
            for d in active:  # about the windows the rest of the batches take of d, or more
                ahead = min(_AHEAD, int(1.5 * weights[d] * (need - got)) + 16)
                if cursors[d].known() - produced[d] < ahead:
                    cursors[d].ahead(produced[d] + ahead)
            tg = [c.targets_array[c._k + p :] for c, p in zip(cursors, produced, strict=True)]
            gl = [c.global_array[c._k + p :] for c, p in zip(cursors, produced, strict=True)]
            drawn = blend.run(tg if counting_targets else None, need - got, (gl, tg))
            if drawn is not None and len(drawn[0]):
                src, taken, (gd, td) = drawn
            else:  # the next draw skips a source (or the integers are too large): picks
                src, taken, gd, td = _picks(blend, tg, gl, need - got, counting_targets,
                                            many=drawn is None)
            srcs.append(src)
            indices.append(gd)
            targets.append(td)
            for d in active:
                produced[d] += taken[d]
            got += len(src)
        for c, p in zip(cursors, produced, strict=True):
            if p:
                c.advance(p)
        self._chunk = DrawnBatches(
            base, [c.n for c in cursors], src=np.concatenate(srcs),
            index=np.concatenate(indices), targets=np.concatenate(targets), batches=k,
            span=s._span, offsets=np.asarray(s._offsets, np.int64))
        self._at, self._drawn = 0, k

    def _take(self) -> None:
        """Advance each source past its windows drawn (packing)."""
        for d, cursor in enumerate(self.cursors):
            if self._taken[d]:
                cursor.advance(self._taken[d])
                self._taken[d] = 0

    def snapshot(self) -> Snapshot:
        opened = [[free, list(members)] for free, members in self.open] if self.open else []
        ledger = self._ledger if self._ledger is not None else [c.ledger() for c in self.cursors]
        return Snapshot(self.batch, self.rows, ledger, self.weights, self.since, opened,
                        self._s.mixed.names)


class _Unknown(Exception):
    """A pick needs a source's window that is not read ahead yet."""


_PICKS = 512  # draws picked one by one after a draw the merge cannot make, before it resumes


def _picks(blend: Blend, tg: list[Any], gl: list[Any], m: int, counting_targets: bool, *,
           many: bool) -> tuple[Any, list[int], Any, Any]:
    """Draws made one by one with :meth:`Blend.pick`, exactly as the rule makes them: up to
    ``m`` where the merge cannot run (``many``: integers beyond int64), else up to
    ``_PICKS`` (a draw the merge would skip; it resumes after them); either way only while
    every source a pick looks at has its next window read ahead (``tg``, ``gl``: each
    source's windows read ahead, their targets and mixture indices). Returns what
    :meth:`Blend.run` returns: sources, windows taken of each, mixture indices and targets
    in draw order (at least one draw)."""
    width = len(tg)
    at = [0] * width
    known = [len(t) for t in tg]

    def size_of(d: int) -> int:
        if at[d] >= known[d]:
            raise _Unknown
        return int(tg[d][at[d]]) if counting_targets else 1

    src: list[int] = []
    try:
        while len(src) < (m if many else min(m, _PICKS)):
            d = blend.pick(size_of)[0]
            src.append(d)
            at[d] += 1
    except _Unknown:
        blend._heap = None  # the pick stopped half way: its heap is rebuilt from the counts
    index = np.empty(len(src), np.int64)
    drawn_targets = np.empty(len(src), np.int64)
    sources = np.asarray(src, np.int64)
    for d in set(src):
        where = sources == d
        index[where] = gl[d][: at[d]]
        drawn_targets[where] = tg[d][: at[d]]
    return sources, at, index, drawn_targets


class MixtureSampler(CommittedPosition[dict[str, Any]]):
    """Batches of a weighted mixture's stream: exact shares, elastic exact resume, packing.

    See the module docstring for the stream, the batches, the weights and the state. The
    parameters after ``batch_size`` are keyword-only.

    Args:
        mixed: the sources (:class:`reader.MixedDataset`).
        weights: name → weight (normalised; a missing source weighs 0), or a schedule
            ``[(global_batch, mapping), …]`` starting at batch 0.
        batch_size: windows (or, with ``seq_len``, packed rows) per batch on this rank.
        seed: the seed of every source's epoch orders.
        rank: this process's rank, in ``[0, world_size)``.
        world_size: the number of ranks sharing each global batch.
        unit: ``"windows"`` (shares of windows) or ``"targets"`` (shares of scored targets).
        seq_len: pack the stream into rows of this many positions (at least the window W).
        open_rows: the packing's look-ahead (rows open at once), as for ``PackedSampler``.

    Raises:
        ValueError: a parameter out of range, bad weights, or ``seq_len`` below the window.
    """

    def __init__(self, mixed: MixedDataset, weights: Any, batch_size: int, *, seed: int,
                 rank: int = 0, world_size: int = 1, unit: str = "windows",
                 seq_len: int | None = None, open_rows: int = 16) -> None:
        if not isinstance(mixed, MixedDataset):
            raise ValueError(f"`mixed` must be a reader.MixedDataset, but got "
                             f"{type(mixed).__name__}")
        self.mixed = mixed
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.seed = check_int("seed", seed, None)
        self.world_size = check_int("world_size", world_size, 1)
        self.rank = check_int("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ValueError(f"`rank` must be in [0, {self.world_size}), but got {rank}")
        if unit not in UNITS:
            raise ValueError(f"`unit` must be one of {UNITS}, but got {unit!r}")
        self.unit = unit
        self.open_rows = check_int("open_rows", open_rows, 1)
        if seq_len is not None:
            seq_len = check_int("seq_len", seq_len, 1)
            if seq_len < mixed.window:
                raise ValueError(f"`seq_len` must be at least the sources' window "
                                 f"{mixed.window} (so that every window fits a row), but got "
                                 f"{seq_len}")
        self.seq_len = seq_len
        self.schedule = parse_schedule(weights, mixed.names)
        self._changes = frozenset(start for start, _ in self.schedule)
        self.global_batch = self.world_size * self.batch_size
        self._unit_size = mixed.window if unit == "targets" else 1
        self._offsets = [mixed.offsets[n] for n in mixed.names]
        a, b, _ = rank_span(0, self.global_batch, rank=self.rank, world_size=self.world_size,
                            per_rank=self.batch_size, n=self.global_batch)
        self._span = (a, b)  # this rank's part of every global batch
        self._orders = [EpochSampler(len(mixed.sources[n]), 1, seed=source_seed(self.seed, n))
                        for n in mixed.names]
        first = {n: str(w) for n, w in self.schedule[0][1].items()}
        start = {"batch": 0, "rows": 0, "ledger": {}, "weights": first,
                 "since": {"batch": 0, "counts": {}}, "open": []}
        self._pending: deque[dict[str, Any]] = deque()
        self._reset_position(start)

    def weights_at(self, batch: int) -> dict[str, Fraction]:
        """The normalised weights the schedule gives global batch ``batch``."""
        current = self.schedule[0][1]
        for start, weights in self.schedule:
            if start > batch:
                break
            current = weights
        return current

    def __iter__(self) -> Iterator[list[Any]]:
        """This rank's batches from the committed position on, without end."""
        start = self._start()
        stream = _Stream(self, start)
        self._issued = start
        self._pending.clear()
        while True:
            items = stream.next_batch()
            snap = stream.snapshot()
            self._issued = snap
            self._pending.append(snap)
            if not self._tracking and len(self._pending) > _KEPT:
                self._pending.popleft()
            yield items

    def repeat_batches(self) -> frozenset[int]:
        """None: every global batch of the endless stream is full (for :func:`evaluate`)."""
        return frozenset()

    def _yielded_beyond(self) -> bool:
        return self._committed["batch"] < self._issued["batch"]

    def _commit_next(self) -> None:
        nxt = self._committed["batch"] + 1
        while self._pending and self._pending[0]["batch"] < nxt:
            self._pending.popleft()
        if self._pending and self._pending[0]["batch"] == nxt:
            self._committed = self._pending.popleft()
        else:  # its snapshot was dropped (a loop that stepped late): draw it again
            stream = _Stream(self, self._committed)
            stream.next_batch()
            self._committed = stream.snapshot()

    @property
    def batches_seen(self) -> int:
        """Global batches of the position :meth:`state_dict` reports."""
        return int(self._start()["batch"])

    def ledger(self) -> dict[str, dict[str, Any]]:
        """Each source's windows and targets drawn so far (the realised mix, for logs), its
        epoch, position in the epoch and epochs drawn (windows / size), at the position
        :meth:`state_dict` reports (with packing, windows waiting in open rows included)."""
        snap = self._start()
        out = {}
        for name in self.mixed.names:
            epoch, cursor, windows, targets = snap["ledger"].get(name, (0, 0, 0, 0))
            n = len(self.mixed.sources[name])
            out[name] = {"windows": windows, "targets": targets, "epoch": epoch,
                         "cursor": cursor, "epochs": windows / n}
        return out

    def _identity(self) -> dict[str, Any]:
        return {"seed": self.seed, "unit": self.unit, "window": self.mixed.window,
                "seq_len": self.seq_len, "open_rows": self.open_rows}

    def state_dict(self) -> dict[str, Any]:
        """The position, a small JSON-serialisable dict (committed once ``step`` is used)."""
        snap = self._start()
        fingerprints = self.mixed.fingerprints
        sources = {}
        for name in self.mixed.names:
            epoch, cursor, windows, targets = snap["ledger"].get(name, (0, 0, 0, 0))
            sources[name] = {"fingerprint": fingerprints[name],
                             "size": len(self.mixed.sources[name]), "epoch": epoch,
                             "cursor": cursor, "windows": windows, "targets": targets}
        return {"format": _STATE_FORMAT, "version": _STATE_VERSION, **self._identity(),
                "batches_seen": snap["batch"], "rows": snap["rows"],
                "position": sum(s["windows"] for s in sources.values()),
                "targets_seen": self._targets_seen, "global_batch": self.global_batch,
                "world_size": self.world_size, "batch_size": self.batch_size,
                "weights": dict(snap["weights"]), "since": snap["since"],
                "sources": sources, "open_rows_windows": snap["open"]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (see the module docstring: another world size, batch size,
        new weights or an added source are fine).

        The state is checked as a whole before anything is taken from it (see
        :func:`_checked_state`): every field is of its type and range, and the counts are
        those the stream has at that position, recomputed, not read.

        Raises:
            SamplerStateError: not a mixture state, another version or stream parameters, a
                source that the mixture lacks, or a field that the stream cannot have at that
                position (named).
            ForeignDataset: a source whose dataset changed since the state was saved (named).
        """
        check_state_header(state, name="MixtureSampler", format=_STATE_FORMAT,
                           version=_STATE_VERSION)
        for key in (*self._identity(), "batches_seen", "rows", "targets_seen", "weights",
                    "since", "sources", "open_rows_windows"):
            if key not in state:
                raise SamplerStateError(f"the MixtureSampler state lacks the key {key!r}")
        for key, value in self._identity().items():
            if state[key] != value:
                raise SamplerStateError(
                    f"the state has {key} {state[key]!r}, but this sampler has "
                    f"{value!r}; the stream cannot continue under another {key}")
        snap = _checked_state(self, state)
        self._pending.clear()
        self._reset_position(snap, targets_seen=check_int("targets_seen", state["targets_seen"], 0))

    def __repr__(self) -> str:
        weights = ", ".join(f"{n}={float(w):.4g}" for n, w in
                            self.weights_at(self.batches_seen).items())
        return (f"MixtureSampler({weights}; batch_size={self.batch_size}, seed={self.seed}, "
                f"rank={self.rank}, world_size={self.world_size}, unit={self.unit!r}, "
                f"seq_len={self.seq_len}, batches_seen={self.batches_seen})")


# -- a state, checked as a whole -------------------------------------------------------------

_SOURCE_KEYS = ("fingerprint", "size", "epoch", "cursor", "windows", "targets")
_SUM_CHUNK = 1 << 20  # windows whose sizes are read at once when a ledger's targets are summed


def _field(where: str, value: Any, low: int = 0) -> int:
    """An integer field of the state, at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SamplerStateError(
            f"the MixtureSampler state's `{where}` must be an integer of at least "
            f"{low}, but got {str(value)[:80]!r}; the state is damaged or was "
            "edited: resume from the checkpoint's own state")
    return value


def _bad(where: str, what: str) -> SamplerStateError:
    return SamplerStateError(
        f"the MixtureSampler state's `{where}` {what}; the state is damaged or "
        "was edited: resume from the checkpoint's own state")


def _mapping(where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad(where, f"must be a mapping, but got {str(value)[:80]!r}")
    return value


def _targets_drawn(source: Any, order: EpochSampler, epoch: int, cursor: int) -> int:
    """The scored targets of a source's first ``epoch`` epochs and ``cursor`` windows: what
    its ledger's ``targets`` must be (every epoch holds every window once)."""
    def summed(e: int, hi: int) -> int:
        total = 0
        for lo in range(0, hi, _SUM_CHUNK):
            local = order.indices(e, lo, min(hi, lo + _SUM_CHUNK))
            total += int(source.window_sizes(local)[1].sum())
        return total

    whole = 0
    if epoch:
        scored = getattr(source, "scored_targets", None)
        whole = scored if isinstance(scored, int) else summed(0, order.n)
    return epoch * whole + (summed(epoch, cursor) if cursor else 0)


def _weights_of(where: str, raw: Any, names: tuple[str, ...]) -> dict[str, Fraction]:
    """The normalised weights a state records (they sum to exactly 1)."""
    weights = {}
    for name, value in _mapping(where, raw).items():
        if name not in names:
            raise _bad(f"{where}.{name}", "names no source of this mixture")
        try:
            weights[name] = as_fraction(name, value)
        except ValueError as e:
            raise _bad(f"{where}.{name}", f"must be a number, but got {str(value)[:80]!r}") from e
    if sum(weights.values()) != 1:
        raise _bad(where, f"must be normalised weights summing to 1, but sum to "
                   f"{str(sum(weights.values()))[:40]}")
    return weights


def _rule_counts(weights: list[Fraction], total: int) -> list[int] | None:
    """Counting windows, each source's windows after ``total`` draws by the rule from where
    the weights took effect (one period read off, :meth:`reader.mixture.blend.Blend._period`); None
    when the weights have no such period."""
    blend = Blend(weights, unit=1, counts=[0] * len(weights))
    cycle = blend._period()
    if cycle is None:
        return None
    full, r = divmod(total, len(cycle))
    at = np.bincount(cycle[:r], minlength=len(weights)).tolist()
    return [c + full * a for c, a in zip(at, blend._a, strict=True)]


def _checked_state(sampler: MixtureSampler, state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` (a :meth:`MixtureSampler.state_dict`) as a snapshot, checked as a whole.

    Every field has its type and range, every source its fingerprint and size; each source's
    ledger is recomputed from its windows drawn (epoch and cursor from windows and its size,
    targets from its epoch orders' window sizes); the counts since the weights took effect are
    those the rule gives (counting windows, exactly, recomputed from the weights and the
    position; counting targets, within one window of each share, the rule's bound); the open
    rows hold windows of their sources with their lengths. So an edited or damaged state is
    refused here, naming the field, rather than drawing a skewed stream or failing later.

    Raises:
        ValueError: naming the field and the fix.
    """
    mixed, names = sampler.mixed, tuple(sampler.mixed.names)
    fingerprints = mixed.fingerprints
    ledger: dict[str, list[int]] = {}
    for name, entry in _mapping("sources", state["sources"]).items():
        if name not in mixed.sources:
            raise SamplerStateError(
                f"the state names source {name!r}, which this mixture lacks (its sources: "
                f"{', '.join(names)}); keep it in the MixedDataset with weight "
                "0 to stop drawing from it")
        entry = _mapping(f"sources.{name}", entry)
        for key in _SOURCE_KEYS:
            if key not in entry:
                raise _bad(f"sources.{name}", f"lacks the key {key!r}")
        size = len(mixed.sources[name])
        if entry["fingerprint"] != fingerprints[name] or entry["size"] != size:
            raise ForeignDataset(
                f"source {name!r} has changed since the state was saved: fingerprint "
                f"{fingerprints[name]} ({size} windows) here, {entry['fingerprint']} "
                f"({entry['size']} windows) in the state; resume with the same dataset")
        epoch, cursor, windows, targets = (_field(f"sources.{name}.{k}", entry[k])
                                           for k in ("epoch", "cursor", "windows", "targets"))
        if cursor >= size:
            raise SamplerStateError(
                f"the state's cursor {cursor} of source {name!r} is beyond "
                f"its {size} windows")
        if windows != epoch * size + cursor:
            raise _bad(f"sources.{name}.windows", f"is {windows}, but epoch {epoch} and cursor "
                       f"{cursor} of {size} windows make {epoch * size + cursor}")
        order = sampler._orders[names.index(name)]
        expected = _targets_drawn(mixed.sources[name], order, epoch, cursor)
        if targets != expected:
            raise _bad(f"sources.{name}.targets", f"is {targets}, but the {windows} windows "
                       f"drawn from {name!r} hold {expected} scored targets")
        ledger[name] = [epoch, cursor, windows, targets]
    batch = _field("batches_seen", state["batches_seen"])
    rows = _field("rows", state["rows"])
    _field("targets_seen", state["targets_seen"])
    if "position" in state and state["position"] != sum(v[2] for v in ledger.values()):
        raise _bad("position", f"is {str(state['position'])[:40]}, but the sources' windows "
                   f"sum to {sum(v[2] for v in ledger.values())}")
    if sampler.seq_len is None and rows:
        raise _bad("rows", f"is {rows}, but an unpacked stream has no rows")
    weights = _weights_of("weights", state["weights"], names)
    since = _mapping("since", state["since"])
    for key in ("batch", "counts"):
        if key not in since:
            raise _bad("since", f"lacks the key {key!r}")
    since_batch = _field("since.batch", since["batch"])
    if since_batch > batch:
        raise _bad("since.batch", f"is {since_batch}, after batches_seen {batch}")
    counts = {}
    unit = 3 if sampler.unit == "targets" else 2  # the ledger's field the rule counts
    for name, value in _mapping("since.counts", since["counts"]).items():
        if name not in names:
            raise _bad(f"since.counts.{name}", "names no source of this mixture")
        drawn = ledger.get(name, [0, 0, 0, 0])[unit]
        counts[name] = _field(f"since.counts.{name}", value)
        if counts[name] > drawn:
            raise _bad(f"since.counts.{name}", f"is {counts[name]}, more than the {drawn} "
                       f"{sampler.unit} drawn from {name!r} in all")
    # What the rule has drawn since the weights took effect, by source.
    w = [weights.get(n, Fraction(0)) for n in names]
    got = [ledger.get(n, [0, 0, 0, 0])[unit] - counts.get(n, 0) for n in names]
    total = sum(got)
    stray = [n for n, g, x in zip(names, got, w, strict=True) if g and not x]
    if stray:
        raise _bad(f"since.counts.{stray[0]}", f"leaves {got[names.index(stray[0])]} "
                   f"{sampler.unit} drawn from {stray[0]!r} since batch {since_batch}, whose "
                   "weight is 0")
    exact = _rule_counts(w, total) if sampler.unit == "windows" else None
    # How far each source is off what the rule gives; the field named is the furthest off.
    off = [g - e for g, e in zip(got, exact, strict=True)] if exact is not None else [
        g - x * total for g, x in zip(got, w, strict=True)]
    d = max(range(len(names)), key=lambda d: abs(off[d]))
    if (exact is not None and off[d]) or abs(off[d]) >= sampler._unit_size:
        n = names[d]
        share = (f"the rule's {exact[d]}" if exact is not None else
                 f"within {sampler._unit_size} of its share {float(w[d] * total):.6g}")
        raise _bad(f"since.counts.{n}", f"leaves {got[d]} {sampler.unit} drawn from {n!r} of "
                   f"{total} since batch {since_batch}, where the weights give {share}")
    opened = state["open_rows_windows"]
    if not isinstance(opened, list) or (sampler.seq_len is None and opened) or (
            len(opened) > sampler.open_rows):
        raise _bad("open_rows_windows", f"must be a list of at most {sampler.open_rows} open "
                   f"rows{'' if sampler.seq_len else ' (none, unpacked)'}, but got "
                   f"{str(opened)[:80]}")
    open_rows = []
    for i, row in enumerate(opened):
        where = f"open_rows_windows[{i}]"
        if not isinstance(row, list) or len(row) != 2 or not isinstance(row[1], list):
            raise _bad(where, f"must be [free, members], but got {str(row)[:80]}")
        free, members = _field(f"{where}[0]", row[0], 1), []
        for j, member in enumerate(row[1]):
            at = f"{where}[1][{j}]"
            if not isinstance(member, list) or len(member) != 3 or member[0] not in names:
                raise _bad(at, f"must be [source, local index, length], but got "
                           f"{str(member)[:80]}")
            name = member[0]
            local = _field(f"{at}[1]", member[1])
            if local >= len(mixed.sources[name]):
                raise _bad(f"{at}[1]", f"is window {local} of {name!r}, which has "
                           f"{len(mixed.sources[name])}")
            length = int(mixed.sources[name].window_sizes([local])[0][0])
            if member[2] != length:
                raise _bad(f"{at}[2]", f"is {str(member[2])[:40]}, but window {local} of "
                           f"{name!r} has length {length}")
            members.append([name, local, length])
        if not members or free != sampler.seq_len - sum(m[2] for m in members):
            raise _bad(f"{where}[0]", f"is {free}, but a row of {sampler.seq_len} positions "
                       f"holding {sum(m[2] for m in members)} has "
                       f"{sampler.seq_len - sum(m[2] for m in members)} free")
        open_rows.append([free, members])
    waiting = sum(len(members) for _, members in open_rows)
    closed = sum(v[2] for v in ledger.values()) - waiting  # windows in the rows handed out
    if sampler.seq_len is not None and not rows <= closed:
        raise _bad("rows", f"is {rows}, but the {closed} windows drawn and not waiting in open "
                   "rows fill at most that many rows")
    return {"batch": batch, "rows": rows, "ledger": ledger,
            "weights": {n: str(x) for n, x in weights.items()},
            "since": {"batch": since_batch, "counts": counts}, "open": open_rows}
