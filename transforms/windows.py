"""Window planning: the contract of SPEC §3 as a pure function.

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

``plan_windows`` computes the same windows without a Python loop per window.
"""

from __future__ import annotations

import hashlib
import typing

import numpy as np
import numpy.typing as npt

from transforms.params import WindowSpec

__all__ = ["WindowPlan", "plan_windows", "random_offset"]


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
    if pairs < 1:
        raise ValueError(f"a document has at least one pair (BOS → EOS), but got P = {pairs}")
    w, s = spec.window, spec.stride
    r = random_offset(pairs, spec, doc_id) if spec.offset == "random" else 0

    full = 0 if r + w > pairs else (pairs - w - r) // s + 1
    starts = r + s * np.arange(full, dtype=np.int64)
    lengths = np.full(full, w, dtype=np.int64)

    tail_start = r + s * full
    reaches_end = full > 0 and int(starts[-1]) + w == pairs
    if not reaches_end and tail_start < pairs:
        tail_len = pairs - tail_start
        tail: tuple[int, int] | None = None
        if spec.tail == "keep" and tail_len >= spec.min_tail:
            tail = (tail_start, tail_len)
        elif spec.tail == "trace_back":
            back = max(0, pairs - w)
            tail = (back, pairs - back)
        if tail is not None:
            starts = np.append(starts, tail[0])
            lengths = np.append(lengths, tail[1])

    ends = starts + lengths
    # End of everything covered before each window; starts ascend and ends never go down.
    prev_end = np.concatenate(([0], ends[:-1])) if len(ends) else ends
    new = np.maximum(0, prev_end - starts)
    new[:1] = 0
    covered = int((lengths - new).sum())
    loss = new if spec.score == "new" else np.zeros_like(new)
    return WindowPlan(
        starts=starts,
        lengths=lengths.astype(np.int32),
        loss_starts=loss.astype(np.int32),
        covered=covered,
    )
