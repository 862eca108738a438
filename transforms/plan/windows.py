"""Window planning: the contract of docs/format.md#the-planner, a pure function.

A document's tokens are ``z = [BOS, x1 … xn, EOS]`` (length M); it has ``P = M − 1`` pairs,
input ``z[i]`` → target ``z[i+1]``. A window is a run of consecutive pairs of one document:
``(start, length, loss_start)`` means inputs ``z[start : start+length]``, targets
``z[start+1 : start+length+1]``, and targets before ``loss_start`` are context only.

The reference algorithm (r is the first origin, 0 unless ``offset=random``)::

    s = r
    while s < P:
        L = min(W, P - s)
        if L == W:                      # a full window
            emit(s, W)
            if s + W == P: break        # it reaches the end: nothing is left
            s += S
            continue
        keep:       emit(s, L) if L >= min_tail
        drop:       nothing
        trace_back: s2 = max(0, P - W); emit(s2, P - s2)
        break

Worked example: P = 1200, W = 512, S = 256. ``drop`` gives starts 0, 256, 512 (the count is
⌊(P − W)/S⌋ + 1 = 3); ``trace_back`` adds (688, 512), whose ``loss_start`` under
``score=new`` is 1024 − 688 = 336, so the four windows score each of the 1200 targets once.

``plan_windows_batch`` computes the same windows in closed form, vectorised across a batch
of documents (no Python loop per window or per document), and hands them back end to end
(`WindowPlans`); ``plan_windows`` is its one-document case. The tests hold both to the
reference loop.
"""

from __future__ import annotations

import hashlib
import typing
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from transforms.params import WindowSpec

__all__ = ["WindowPlan", "WindowPlans", "plan_windows", "plan_windows_batch", "random_offset"]


class WindowPlan(typing.NamedTuple):
    """The windows of one document, in window order.

    Attributes:
        starts: int64 origins (index in z of each window's first input).
        lengths: int32 pair counts.
        loss_starts: int32; targets before this index of the window are not scored.
        covered: the number of the document's pairs that some window holds.
    """

    starts: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int32]
    loss_starts: npt.NDArray[np.int32]
    covered: int


class WindowPlans(typing.NamedTuple):
    """The windows of a batch of documents, document after document.

    Attributes:
        counts: int64, the number of windows of each document.
        covered: int64, each document's covered pairs.
        starts, lengths, loss_starts: every window (as in `WindowPlan`), end to end.
    """

    counts: npt.NDArray[np.int64]
    covered: npt.NDArray[np.int64]
    starts: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int32]
    loss_starts: npt.NDArray[np.int32]

    @classmethod
    def of(cls, plans: Sequence[WindowPlan]) -> WindowPlans:
        """Single plans, end to end."""

        def cat(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.empty(
                0, dtype)

        return cls(
            np.fromiter((len(p.starts) for p in plans), np.int64, len(plans)),
            np.fromiter((p.covered for p in plans), np.int64, len(plans)),
            cat([p.starts for p in plans], np.int64),
            cat([p.lengths for p in plans], np.int32),
            cat([p.loss_starts for p in plans], np.int32),
        )

    def split(self) -> list[WindowPlan]:
        """One `WindowPlan` per document (views into these arrays)."""
        b = [0, *np.cumsum(self.counts).tolist()]
        c = self.covered.tolist()
        return [
            WindowPlan(self.starts[b[i] : b[i + 1]], self.lengths[b[i] : b[i + 1]],
                       self.loss_starts[b[i] : b[i + 1]], c[i])
            for i in range(len(c))
        ]


def random_offset(pairs: int, spec: WindowSpec, doc_id: str) -> int:
    """The first origin of a document under ``offset=random``, drawn from (seed, doc_id).

    Uniform in ``[0, min(S, P − W + 1))`` when ``P > W``, else 0, so a document that can
    hold a full window still does.
    """
    if pairs <= spec.window:
        return 0
    bound = min(spec.stride, pairs - spec.window + 1)
    digest = hashlib.blake2b(
        doc_id.encode("utf-8"),
        digest_size=8,
        key=spec.seed.to_bytes(8, "little"),
        person=b"tw-offset",
    ).digest()
    # Multiply-shift maps a uniform 64-bit value onto [0, bound) without a modulo.
    return (int.from_bytes(digest, "big") * bound) >> 64


def plan_windows(pairs: int, spec: WindowSpec, doc_id: str = "") -> WindowPlan:
    """Plan the windows of a document of ``pairs`` pairs (P = M − 1 ≥ 1).

    Args:
        pairs: P, the document's number of (input, target) pairs.
        spec: the window parameters.
        doc_id: the document's id; only ``offset=random`` uses it.

    Returns:
        The windows in order, as arrays (see `WindowPlan`).
    """
    return plan_windows_batch([pairs], spec, [doc_id]).split()[0]


def plan_windows_batch(
    pairs: Sequence[int], spec: WindowSpec, doc_ids: Sequence[str]
) -> WindowPlans:
    """`plan_windows` of many documents at once: the same plans, vectorised across them.

    Args:
        pairs: P of each document.
        spec: the window parameters.
        doc_ids: the documents' ids (only ``offset=random`` uses them).

    Returns:
        The plans end to end (``.split()`` gives one `WindowPlan` per document).
    """
    p = np.asarray(pairs, dtype=np.int64).reshape(-1)
    count = len(p)
    if count and int(p.min()) < 1:
        raise ValueError(
            f"a document has at least one pair (BOS → EOS), but got P = {int(p.min())}"
        )
    w, s = spec.window, spec.stride
    if spec.offset == "random":
        r = np.fromiter(
            (random_offset(int(x), spec, d) for x, d in zip(p, doc_ids, strict=True)),
            np.int64,
            count,
        )
    else:
        r = np.zeros(count, np.int64)

    full = np.where(r + w > p, 0, (p - w - r) // s + 1)
    last_end = np.where(full > 0, r + s * (full - 1) + w, 0)
    rest = r + s * full  # where the tail would start
    open_end = ~((full > 0) & (last_end == p)) & (rest < p)
    if spec.tail == "keep":
        tail = open_end & (p - rest >= spec.min_tail)
        tail_start = rest
    elif spec.tail == "trace_back":
        tail = open_end
        tail_start = np.maximum(0, p - w)
    else:
        tail = np.zeros(count, bool)
        tail_start = rest
    tail_len = np.where(tail, p - tail_start, 0)
    overlap = max(0, w - s)
    tail_new = np.where(tail & (full > 0), np.maximum(0, last_end - tail_start), 0)
    covered = full * w + tail_len - overlap * np.maximum(0, full - 1) - tail_new

    n = full + tail
    bounds = np.zeros(count + 1, np.int64)
    np.cumsum(n, out=bounds[1:])
    doc = np.repeat(np.arange(count), n)
    k = np.arange(int(bounds[-1])) - bounds[doc]  # window number within its document
    is_tail = tail[doc] & (k == full[doc])
    starts = np.where(is_tail, tail_start[doc], r[doc] + s * k)
    lengths = np.where(is_tail, tail_len[doc], w).astype(np.int32)
    if spec.score == "new":
        loss = np.where(is_tail, tail_new[doc], np.where(k > 0, overlap, 0)).astype(np.int32)
    else:
        loss = np.zeros(len(k), np.int32)
    return WindowPlans(n.astype(np.int64), covered.astype(np.int64), starts.astype(np.int64),
                       lengths, loss)
