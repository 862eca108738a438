"""Words and their n-gram hashes: what near-duplicate detection and decontamination compare.

A word (`words`) is a maximal run of letters, marks and numbers (Unicode categories L, M, N)
of the casefolded NFC text; punctuation, symbols, whitespace and ``_`` separate words. In the
scripts written without spaces (Han ideographs, hiragana, katakana, Thai, Lao, Khmer,
Myanmar) each character is a word on its own; Hangul is written with spaces and keeps its
runs. docs/dedup.md#what-a-duplicate-is says it for users.

The hashes, stable across processes, machines and runs (nothing from Python's salted
``hash()``):

* a word's hash is ``mix64(Σ cp[i]·P**i mod 2**64)`` over its code points ``cp``, computed for
  a whole batch of texts at once by one segmented sum (`word_batch`);
* an n-gram's hash is ``mix64(Σ w[j]·C[j] mod 2**64)`` over its n word hashes ``w``.

``mix64`` is SplitMix64's finalizer; ``P`` and ``C`` are fixed constants derived from BLAKE2b
of fixed labels (`fixed_constants`), part of the format with the MinHash constants of
`transforms.dedup.duplicates` (whose ``SCHEME`` names them all).

Example: ``words("Hello, World 42!")`` is ``["hello", "world", "42"]``, ``words("大學之道")``
is ``["大", "學", "之", "道"]``, and ``ngram_hashes("a b c d", 3)`` holds 2 hashes, the
first equal to ``ngram_hashes("A, B; C!", 3)[0]``.
"""

from __future__ import annotations

import functools
import hashlib
import unicodedata
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "MAX_NGRAM",
    "Scratch",
    "WordBatch",
    "fixed_constants",
    "mix64",
    "ngram_hashes",
    "short_ngram_hash",
    "word_batch",
    "word_hashes",
    "words",
]

# The largest n-gram size (a bound that keeps a mistyped flag from asking for absurd work).
MAX_NGRAM = 64

_U64 = np.uint64
_MASK = (1 << 64) - 1

# Word classes: 0 separates words, 1 continues a word, 2 is a word on its own.
_SEP, _RUN, _SINGLE = 0, 1, 2
# Scripts written without spaces between words: each character is a word.
_SINGLE_RANGES = (
    (0x0E00, 0x0E7F),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3021, 0x3029),  # Hangzhou numerals
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA9E0, 0xA9FF),  # Myanmar extended-B
    (0xAA60, 0xAA7F),  # Myanmar extended-A
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # Halfwidth katakana
    (0x1B000, 0x1B16F),  # Kana supplement, extended-A, small kana
    (0x20000, 0x3FFFF),  # CJK extensions B–H, compatibility supplement
)
# Code points past these planes are unassigned or private use (never L, M or N).
_PLANES = ((0, 0x40000), (0xE0000, 0xE1000))


def fixed_constants(label: str, count: int) -> NDArray[np.uint64]:
    """``count`` fixed 64-bit constants: BLAKE2b of ``label`` and the index."""
    out = np.empty(count, dtype=_U64)
    for i in range(count):
        digest = hashlib.blake2b(f"{label}:{i}".encode(), digest_size=8).digest()
        out[i] = int.from_bytes(digest, "little")
    return out


_P = int(fixed_constants("tw-dedup-word-base", 1)[0]) | 1
_P_INV = pow(_P, -1, 1 << 64)
_C = fixed_constants("tw-dedup-ngram-position", MAX_NGRAM)


@functools.cache
def _classes() -> NDArray[np.uint8]:
    """The word class of every code point (built once per process, about 0.1 s)."""
    table = np.zeros(0x110000, dtype=np.uint8)
    for lo, hi in _PLANES:
        for cp in range(lo, hi):
            if unicodedata.category(chr(cp))[0] in "LMN":
                table[cp] = _RUN
    for lo, hi in _SINGLE_RANGES:
        part = table[lo : hi + 1]
        part[part == _RUN] = _SINGLE
    return table


def mix64(z: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """SplitMix64's finalizer, in place on a fresh array: every input bit reaches every bit."""
    z ^= z >> _U64(30)
    z *= _U64(0xBF58476D1CE4E5B9)
    z ^= z >> _U64(27)
    z *= _U64(0x94D049BB133111EB)
    z ^= z >> _U64(31)
    return z


def _near_form(text: str) -> str:
    """The text words are cut from: casefolded, then NFC (casefolding can decompose).

    An ASCII text skips both: its casefold is its ``lower()`` (only A-Z change) and NFC
    leaves ASCII as it is, so the form is the same string, made in one pass instead of three.
    """
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFC", text.casefold())


class Scratch:
    """Work arrays reused from one batch to the next by `word_batch` and the MinHash step.

    Each batch's per-code-point arrays are several MB; allocated afresh, every batch maps
    new pages from the system and the kernel zeroes them (a page fault each 4 KB: a third of
    the signatures' CPU time on a 20 MB corpus, measured). One `Scratch` per thread keeps
    them, grown to the largest batch seen, up to `Scratch.KEEP` elements each (a longer
    one, for one huge text, is allocated for its batch only, so what a thread keeps stays
    bounded: about 13 bytes per code point of its largest batch, at most 55 MB). It holds
    no result: every array `word_batch` returns is its own. Not thread-safe: one thread
    uses it at a time.
    """

    # The largest array kept: a batch's code points in one NumPy pass of the signatures.
    KEEP = 1 << 22

    def __init__(self) -> None:
        self._arrays: dict[str, NDArray] = {}

    def take(self, name: str, size: int, dtype: type) -> NDArray:
        """A work array named ``name`` of ``size`` elements (contents undefined)."""
        if size > self.KEEP:
            return np.empty(size, dtype=dtype)
        held = self._arrays.get(name)
        if held is None or len(held) < size:
            held = self._arrays[name] = np.empty(size, dtype=dtype)
        return held[:size]


def _take(scratch: Scratch | None, name: str, size: int, dtype: type) -> NDArray:
    return np.empty(size, dtype=dtype) if scratch is None else scratch.take(name, size, dtype)


def _code_points(text: str) -> NDArray[np.uint32]:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _spans(
    cps: NDArray[np.uint32], scratch: Scratch | None = None,
) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.bool_]]:
    """The start and end (exclusive) of every word in the code points ``cps``, and which code
    points are in a word (in ``scratch``'s arrays if given)."""
    count = len(cps)
    cls = np.take(_classes(), cps, out=_take(scratch, "cls", count, np.uint8))
    run = np.equal(cls, _RUN, out=_take(scratch, "run", count, np.bool_))
    single = np.equal(cls, _SINGLE, out=_take(scratch, "single", count, np.bool_))
    edge = _take(scratch, "edge", count, np.bool_)
    if count:
        # A word starts at a single, or at a run not preceded by a run.
        edge[0] = run[0]
        np.logical_not(run[:-1], out=edge[1:])
        np.logical_and(edge[1:], run[1:], out=edge[1:])
        np.logical_or(edge, single, out=edge)
    starts = np.flatnonzero(edge)
    if count:
        # A word ends after a single, or after a run not followed by a run.
        edge[-1] = run[-1]
        np.logical_not(run[1:], out=edge[:-1])
        np.logical_and(edge[:-1], run[:-1], out=edge[:-1])
        np.logical_or(edge, single, out=edge)
    ends = np.flatnonzero(edge) + 1
    inword = np.not_equal(cls, _SEP, out=_take(scratch, "inword", count, np.bool_))
    return starts, ends, inword


def _powers(base: int, count: int) -> NDArray[np.uint64]:
    """``base**i mod 2**64`` for i in [0, count)."""
    out = np.full(count, base, dtype=_U64)
    if count:
        out[0] = 1
    return np.cumprod(out, dtype=_U64)


# Powers of P are taken as P**(lo + 2**16·hi) = P**lo · (P**2**16)**hi: one small table for lo,
# so a batch of any size needs no table of its own length.
_LOW_BITS = 16
_LOW = 1 << _LOW_BITS


@functools.cache
def _low_powers() -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """``P**i`` and ``P**-i`` for i in [0, 2**16)."""
    return _powers(_P, _LOW), _powers(_P_INV, _LOW)


def _hash_spans(
    cps: NDArray[np.uint32], inword: NDArray[np.bool_], starts: NDArray[np.intp],
    scratch: Scratch | None = None,
) -> NDArray[np.uint64]:
    """Each word's hash, ``mix64(Σ cp[i]·P**i)``, from one segmented sum over the code points.

    With ``x[j] = cp[j]·P**j`` (0 outside words), the sum of ``x`` from a word's start to the
    next word's start is ``P**s`` times the word's own polynomial, whatever its position
    ``s``; all of it mod 2**64, which NumPy's uint64 arithmetic is.
    """
    if not len(starts):
        return np.empty(0, dtype=_U64)
    low, low_inv = _low_powers()
    count = len(cps)
    blocks = (count + _LOW - 1) >> _LOW_BITS
    high = _powers(int(low[-1]) * _P & _MASK, blocks)
    x = _take(scratch, "x", count, _U64)
    np.multiply(cps, inword, out=x, casting="unsafe")
    full = count >> _LOW_BITS
    grid = x[: full << _LOW_BITS].reshape(full, _LOW)
    grid *= low
    grid *= high[:full, None]
    tail = x[full << _LOW_BITS :]
    if len(tail):
        tail *= low[: len(tail)]
        tail *= high[full]
    sums = np.add.reduceat(x, starts)
    high_inv = _powers(int(low_inv[-1]) * _P_INV & _MASK, blocks)
    sums *= low_inv[starts & (_LOW - 1)]
    sums *= high_inv[starts >> _LOW_BITS]
    return mix64(sums)


def _word_hash_reference(word: str) -> int:
    """One word's hash the slow way (tests check the vectorised one against it)."""
    total = 0
    for i, ch in enumerate(word):
        total = (total + ord(ch) * pow(_P, i, 1 << 64)) & _MASK
    return int(mix64(np.array([total], dtype=_U64))[0])


def words(text: str) -> list[str]:
    """The words near-duplicate detection compares: casefolded, Unicode-aware.

    A word is a maximal run of letters, marks and numbers (Unicode categories L, M, N) of the
    casefolded NFC text; punctuation, symbols, whitespace and ``_`` separate words. In the
    scripts written without spaces (Han, hiragana, katakana, Thai, Lao, Khmer, Myanmar) each
    character is a word. Hangul is written with spaces and keeps its runs.

    Args:
        text: A document's text.

    Returns:
        The words in order, e.g. ``words("Don't stop, 東京!")`` is
        ``["don", "t", "stop", "東", "京"]``.
    """
    form = _near_form(text)
    starts, ends, _ = _spans(_code_points(form))
    return [form[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]


def word_hashes(text: str) -> NDArray[np.uint64]:
    """The 64-bit hash of each of `words` (text), in order."""
    cps = _code_points(_near_form(text))
    starts, _, inword = _spans(cps)
    return _hash_spans(cps, inword, starts)


def _combine(hashes: NDArray[np.uint64], n: int) -> NDArray[np.uint64]:
    """The hash of every run of ``n`` consecutive word hashes (``len - n + 1`` of them)."""
    count = len(hashes) - n + 1
    if count <= 0:
        return np.empty(0, dtype=_U64)
    out = hashes[:count] * _C[0]
    for j in range(1, n):
        out += hashes[j : j + count] * _C[j]
    return mix64(out)


def ngram_hashes(text: str, n: int) -> NDArray[np.uint64]:
    """The hash of every word n-gram of ``text``, in order (none if it has fewer words).

    Args:
        text: A document's text.
        n: Words per n-gram, in [1, 64].

    Returns:
        ``max(0, len(words(text)) - n + 1)`` hashes; equal n-grams have equal hashes in any
        text, process or machine.
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_NGRAM:
        raise ValueError(f"`n` must be an integer in [1, {MAX_NGRAM}], but got {n!r}")
    return _combine(word_hashes(text), n)


def short_ngram_hash(hashes: NDArray[np.uint64]) -> int:
    """The one n-gram of a text with fewer words than the n-gram size: all its words.

    Tagged with the word count, so it cannot equal a full n-gram of another size.

    Args:
        hashes: The text's word hashes (at least one).
    """
    value = (int(np.sum(hashes * _C[: len(hashes)], dtype=_U64)) ^ (len(hashes) << 56)) & _MASK
    return int(mix64(np.array([value], dtype=_U64))[0])


class WordBatch(NamedTuple):
    """The words of a batch of texts, found and hashed in one NumPy pass (`word_batch`).

    Attributes:
        joined: The texts' casefolded NFC forms, joined by NUL (a separator).
        starts: Each word's first code point in ``joined``.
        ends: Each word's end (exclusive).
        hashes: Each word's 64-bit hash.
        first: Per text, the index of its first word (``last`` if it has none).
        last: Per text, the index after its last word.
    """

    joined: str
    starts: NDArray[np.intp]
    ends: NDArray[np.intp]
    hashes: NDArray[np.uint64]
    first: NDArray[np.intp]
    last: NDArray[np.intp]

    def owners(self) -> NDArray[np.intp]:
        """Each word's text (non-decreasing)."""
        return np.repeat(np.arange(len(self.first)), self.last - self.first)

    def ngrams(self, n: int) -> tuple[NDArray[np.uint64], NDArray[np.intp]]:
        """Every word n-gram that lies within one text: its hash and its first word's index.

        Both in order, so the n-grams of text ``i`` are a contiguous run, in its order.
        """
        grams = _combine(self.hashes, n)
        valid = self._within(n, len(grams))
        return grams[valid], np.flatnonzero(valid)

    def text_ngrams(self, n: int) -> tuple[NDArray[np.uint64], NDArray[np.intp]]:
        """Every word n-gram that lies within one text: its hash and its text (in order, as
        `ngrams`)."""
        grams = _combine(self.hashes, n)
        per_text = np.maximum(self.last - self.first - (n - 1), 0)
        return grams[self._within(n, len(grams))], np.repeat(np.arange(len(per_text)), per_text)

    def _within(self, n: int, count: int) -> NDArray[np.bool_]:
        """Which of the ``count`` runs of ``n`` consecutive words lie within one text.

        The run starting at word w does iff w <= last - n of w's text: all but the runs
        starting at the last n - 1 words of each text. Those are set in one pass over at most
        (n - 1) × texts positions, not over every word (as a word → text array would be).
        """
        valid = np.ones(count, dtype=bool)
        lo = np.maximum(self.first, self.last - (n - 1))
        sizes = self.last - lo
        total = int(sizes.sum())
        if total:
            # The positions lo[t], lo[t] + 1, …, last[t] - 1 of every text t, end to end.
            at = np.arange(total) - np.repeat(np.cumsum(sizes) - sizes - lo, sizes)
            valid[at[at < count]] = False
        return valid

    def text(self, lo: int, hi: int) -> str:
        """Words ``lo`` … ``hi - 1``, joined by one space."""
        spans = zip(self.starts[lo:hi].tolist(), self.ends[lo:hi].tolist(), strict=True)
        return " ".join(self.joined[a:b] for a, b in spans)


def word_batch(texts: Sequence[str], scratch: Scratch | None = None) -> WordBatch:
    """The `words` of many texts and their hashes, in one pass (a NUL keeps texts apart),
    with ``scratch``'s work arrays if given."""
    forms = [_near_form(t) for t in texts]
    joined = "\0".join(forms)
    cps = _code_points(joined)
    starts, ends, inword = _spans(cps, scratch)
    hashes = _hash_spans(cps, inword, starts, scratch)
    # Text i spans [bounds[i], bounds[i + 1] - 1) of ``joined`` (a NUL after each but the
    # last), and no word crosses a NUL: its words are those starting in that span, found by
    # one search per text rather than one per word.
    bounds = np.cumsum([0] + [len(f) + 1 for f in forms])
    at = np.searchsorted(starts, bounds, side="left")
    return WordBatch(joined, starts, ends, hashes, at[:-1], at[1:])
