"""Exact and near-duplicate documents: the keys, the MinHash signatures and the clusters.

What a duplicate is here (docs/dedup.md says it for users):

* **Exact** (``--dedup exact``): two documents whose `normalize`d texts are equal, i.e. equal
  after Unicode NFC and with every run of whitespace made one space, leading and trailing
  whitespace removed. Case is kept: "Paris" and "PARIS" are different texts. `exact_key` is
  the 16-byte BLAKE2b of the normalized text.
* **Near** (``--dedup near``): two documents whose sets of word n-grams (``ngram`` words,
  default 5) are similar. A word (`words`) is a maximal run of letters, marks and numbers
  (Unicode categories L, M, N) of the casefolded NFC text, except in the scripts written
  without spaces (Han ideographs, hiragana, katakana, Thai, Lao, Khmer, Myanmar), where each
  character is a word on its own. Each document gets a MinHash `signature` of
  ``bands × rows`` values; the signature is cut into ``bands`` bands, each band hashed to a
  key (`band_keys`), and two documents sharing any band key are candidates. Candidates are
  joined transitively (`components`): a chain of copies is one cluster, and the cluster keeps
  its smallest id (`keeper`).

The hashing, all of it stable across processes, machines and runs (nothing from Python's
salted ``hash()``, nothing from the job's ``--seed``):

* a word's hash is ``mix64(Σ cp[i]·P**i mod 2**64)`` over its code points ``cp``, computed for
  a whole batch of texts at once by one segmented sum;
* an n-gram's hash is ``mix64(Σ w[j]·C[j] mod 2**64)`` over its n word hashes ``w``;
* the MinHash value ``i`` of a document is the minimum over its distinct n-gram hashes ``x``
  of ``A[i]·x mod 2**64``, ``A[i]`` odd. An odd multiplier is a bijection of the 64-bit
  hashes, so each value is the minimum of the n-gram set under a permutation; the n-gram
  hashes are already well mixed (the hypothesis tests check that the estimates are within
  their standard error of the true Jaccard), so one multiplication per value is enough, and
  the 112 values of a block of n-grams are one ``(112 × n_grams)`` NumPy product and a
  minimum along its rows. (The textbook ``(a·x + b) mod (2**61 - 1)`` needs 128-bit products,
  which NumPy does not have; datatrove's and datasketch's uint64 version of it overflows.)

``mix64`` is SplitMix64's finalizer; ``P``, ``C`` and ``A`` are fixed constants derived
from BLAKE2b of fixed labels. Changing any of them changes every signature, so they are part
of the format: `SCHEME` names them in the manifest.

Example: with ``DedupSpec(mode="near")``, ``words("Hello, World 42!")`` is
``["hello", "world", "42"]``, ``words("大學之道")`` is ``["大", "學", "之", "道"]``, and a
document's 112 MinHash values cut into 14 bands of 8 give its 14 band keys.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "MODES",
    "PASS_CHARS",
    "SCHEME",
    "DedupSpec",
    "WordBatch",
    "band_keys",
    "components",
    "estimate_jaccard",
    "exact_key",
    "keeper",
    "minhash",
    "ngram_hashes",
    "normalize",
    "signature",
    "signatures",
    "word_batch",
    "word_hashes",
    "words",
]

MODES = ("off", "exact", "near")
# The name of the hashing scheme below; a change to any constant or rule gets a new name.
SCHEME = "tw-minhash-1"
# Bounds that keep a mistyped flag from asking for absurd work; FineWeb uses 5 and 14 × 8.
MAX_NGRAM = 64
MAX_HASHES = 1024

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


def _constant(label: str, count: int) -> NDArray[np.uint64]:
    """``count`` fixed 64-bit constants: BLAKE2b of ``label`` and the index."""
    out = np.empty(count, dtype=_U64)
    for i in range(count):
        digest = hashlib.blake2b(f"{label}:{i}".encode(), digest_size=8).digest()
        out[i] = int.from_bytes(digest, "little")
    return out


_P = int(_constant("tw-dedup-word-base", 1)[0]) | 1
_P_INV = pow(_P, -1, 1 << 64)
_C = _constant("tw-dedup-ngram-position", MAX_NGRAM)
# Signatures of texts without a word start from this n-gram hash: `_EMPTY` for the empty text.
_NO_WORDS = "tw-dedup-no-words"


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


@functools.cache
def _multipliers(count: int) -> NDArray[np.uint64]:
    """The fixed odd multipliers of the first ``count`` MinHash values."""
    return _constant("tw-minhash-a", count) | _U64(1)


def _mix64(z: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """SplitMix64's finalizer, in place on a fresh array: every input bit reaches every bit."""
    z ^= z >> _U64(30)
    z *= _U64(0xBF58476D1CE4E5B9)
    z ^= z >> _U64(27)
    z *= _U64(0x94D049BB133111EB)
    z ^= z >> _U64(31)
    return z


@dataclasses.dataclass(frozen=True, kw_only=True)
class DedupSpec:
    """What ``--dedup`` removes, and the MinHash parameters of ``near``.

    Attributes:
        mode: ``"off"`` (nothing removed), ``"exact"`` (equal normalized texts) or ``"near"``
            (MinHash candidates over word n-grams, exact copies included).
        ngram: Words per n-gram (shingle); FineWeb's 5.
        bands: LSH bands; two documents sharing one band's values are candidates.
        rows: MinHash values per band. 14 × 8 (112 values) makes documents with a Jaccard
            similarity of about 0.75 and up candidates (P = 1 - (1 - J**rows)**bands).
    """

    mode: str = "off"
    ngram: int = 5
    bands: int = 14
    rows: int = 8

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"`mode` must be one of {', '.join(MODES)}, but got {self.mode!r}")
        for name, top in (("ngram", MAX_NGRAM), ("bands", MAX_HASHES), ("rows", MAX_HASHES)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise ValueError(f"`{name}` must be an integer in [1, {top}], but got {value!r}")
        if self.bands * self.rows > MAX_HASHES:
            raise ValueError(
                f"`bands` × `rows` must be at most {MAX_HASHES} MinHash values, but got "
                f"{self.bands} × {self.rows} = {self.bands * self.rows}"
            )

    @property
    def active(self) -> bool:
        return self.mode != "off"

    @property
    def num_hashes(self) -> int:
        """The signature's length, ``bands × rows``."""
        return self.bands * self.rows

    def threshold(self) -> float:
        """The Jaccard similarity at which a pair is a candidate with probability 1/2."""
        return float((1 - 0.5 ** (1 / self.bands)) ** (1 / self.rows))

    def to_json(self) -> dict[str, Any]:
        """The manifest's record of the parameters (``exact`` has none but the mode)."""
        if self.mode != "near":
            return {"mode": self.mode}
        return {
            "mode": self.mode,
            "ngram": self.ngram,
            "bands": self.bands,
            "rows": self.rows,
            "scheme": SCHEME,
        }


def normalize(text: str) -> str:
    """The text exact duplicates are compared on.

    Unicode NFC, then every run of whitespace (``str.split``'s, Unicode-aware) made one space,
    and leading and trailing whitespace removed. Case and punctuation are kept.

    Args:
        text: A document's text.

    Returns:
        The normalized text.
    """
    return " ".join(unicodedata.normalize("NFC", text).split())


def exact_key(text: str) -> bytes:
    """The 16-byte BLAKE2b of `normalize` (text) in UTF-8: equal keys, exact duplicates."""
    data = normalize(text).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16, person=b"tw-dedup-exact").digest()


def _near_form(text: str) -> str:
    """The text words are cut from: casefolded, then NFC (casefolding can decompose)."""
    return unicodedata.normalize("NFC", text.casefold())


def _code_points(text: str) -> NDArray[np.uint32]:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _spans(
    cps: NDArray[np.uint32],
) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.bool_]]:
    """The start and end (exclusive) of every word in the code points ``cps``, and which code
    points are in a word."""
    cls = _classes()[cps]
    run = cls == _RUN
    single = cls == _SINGLE
    prev_run = np.empty_like(run)
    next_run = np.empty_like(run)
    if len(run):
        prev_run[0] = False
        prev_run[1:] = run[:-1]
        next_run[-1] = False
        next_run[:-1] = run[1:]
    starts = np.flatnonzero(single | (run & ~prev_run))
    ends = np.flatnonzero(single | (run & ~next_run)) + 1
    return starts, ends, cls != _SEP


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
    cps: NDArray[np.uint32], inword: NDArray[np.bool_], starts: NDArray[np.intp]
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
    x = np.zeros(blocks << _LOW_BITS, dtype=_U64)
    np.multiply(cps, inword, out=x[:count], casting="unsafe")
    grid = x.reshape(blocks, _LOW)
    grid *= low
    grid *= _powers(int(low[-1]) * _P & _MASK, blocks)[:, None]
    sums = np.add.reduceat(x, starts)
    high_inv = _powers(int(low_inv[-1]) * _P_INV & _MASK, blocks)
    sums *= low_inv[starts & (_LOW - 1)]
    sums *= high_inv[starts >> _LOW_BITS]
    return _mix64(sums)


def _word_hash_reference(word: str) -> int:
    """One word's hash the slow way (tests check the vectorised one against it)."""
    total = 0
    for i, ch in enumerate(word):
        total = (total + ord(ch) * pow(_P, i, 1 << 64)) & _MASK
    return int(_mix64(np.array([total], dtype=_U64))[0])


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
    return _mix64(out)


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


def _short_shingle(hashes: NDArray[np.uint64], text: str) -> int:
    """The one shingle of a text with fewer words than the n-gram size.

    Its words as one n-gram, tagged with their count so it cannot equal a full n-gram's; a
    text without any word hashes its normalized text instead (punctuation-only texts stay
    apart unless equal; the empty text has one fixed signature).
    """
    if not len(hashes):
        key = hashlib.blake2b(
            normalize(text).encode("utf-8", "surrogatepass"), digest_size=8, person=b"tw-no-words"
        ).digest()
        return int.from_bytes(key, "little")
    value = (int(np.sum(hashes * _C[: len(hashes)], dtype=_U64)) ^ (len(hashes) << 56)) & _MASK
    return int(_mix64(np.array([value], dtype=_U64))[0])


# Code points per NumPy pass of `signatures` (its memory: about 40 bytes each).
PASS_CHARS = 1 << 22

# Shingles per block of the (hashes × shingles) MinHash product: 3.5 MB of uint64 at 112 values,
# the size that measured fastest (the reduction runs along contiguous rows).
_BLOCK = 4096


def _min_hash(
    shingles: NDArray[np.uint64], owners: NDArray[np.intp], out: NDArray[np.uint64]
) -> None:
    """``out[d, i] = min over d's shingles x of A[i]·x mod 2**64``, block by block.

    ``owners`` is each shingle's row in ``out``, non-decreasing.
    """
    a = _multipliers(out.shape[1])[:, None]
    buf = np.empty((out.shape[1], min(_BLOCK, len(shingles))), dtype=_U64)
    for lo in range(0, len(shingles), _BLOCK):
        x = shingles[lo : lo + _BLOCK]
        own = owners[lo : lo + _BLOCK]
        values = buf[:, : len(x)]
        np.multiply(a, x, out=values)
        heads = np.flatnonzero(np.diff(own)) + 1
        heads = np.concatenate((np.zeros(1, dtype=heads.dtype), heads))
        rows = own[heads]
        out[rows] = np.minimum(out[rows], np.minimum.reduceat(values, heads, axis=1).T)


def minhash(hashes: NDArray[np.uint64], spec: DedupSpec) -> NDArray[np.uint64]:
    """The MinHash signature of a set of 64-bit n-gram hashes (order and repeats ignored).

    `signature` (text) is ``minhash(ngram_hashes(text, spec.ngram), spec)`` for a text with at
    least ``ngram`` words. An empty set has the all-ones signature, which no hash reaches
    in practice.
    """
    values = np.asarray(hashes, dtype=_U64).ravel()
    out = np.full((1, spec.num_hashes), _MASK, dtype=_U64)
    _min_hash(values, np.zeros(len(values), dtype=np.intp), out)
    return out[0]


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
        at = np.arange(len(grams))
        # An n-gram starting at word w belongs to its text iff its n words all do.
        valid = self.last[self.owners()[: len(grams)]] - at >= n
        return grams[valid], at[valid]

    def text(self, lo: int, hi: int) -> str:
        """Words ``lo`` … ``hi - 1``, joined by one space."""
        spans = zip(self.starts[lo:hi].tolist(), self.ends[lo:hi].tolist(), strict=True)
        return " ".join(self.joined[a:b] for a, b in spans)


def word_batch(texts: Sequence[str]) -> WordBatch:
    """The `words` of many texts and their hashes, in one pass (a NUL keeps texts apart)."""
    forms = [_near_form(t) for t in texts]
    joined = "\0".join(forms)
    cps = _code_points(joined)
    starts, ends, inword = _spans(cps)
    hashes = _hash_spans(cps, inword, starts)
    text_starts = np.cumsum([0] + [len(f) + 1 for f in forms[:-1]])
    owner = np.searchsorted(text_starts, starts, side="right") - 1
    ids = np.arange(len(texts))
    first = np.searchsorted(owner, ids, side="left")
    last = np.searchsorted(owner, ids, side="right")
    return WordBatch(joined, starts, ends, hashes, first, last)


def signatures(texts: Sequence[str], spec: DedupSpec) -> NDArray[np.uint64]:
    """The MinHash signatures of many texts at once (faster than one by one).

    The texts are cut into words, hashed and shingled in NumPy passes over up to `PASS_CHARS`
    code points at a time (a NUL between texts keeps their words apart), so a batch of short
    texts costs about what one long text does, and the memory of a pass stays about 40 bytes
    per code point of the pass (one text longer than `PASS_CHARS` is a pass of its own).

    Args:
        texts: Document texts.
        spec: The n-gram size and the number of values (``bands × rows``).

    Returns:
        A ``(len(texts), bands × rows)`` uint64 array; row ``i`` is `signature` (texts[i]).
    """
    out = np.full((len(texts), spec.num_hashes), _MASK, dtype=_U64)
    lo = size = 0
    for hi, text in enumerate(texts):
        if size and size + len(text) > PASS_CHARS:
            _signatures_into(texts[lo:hi], spec, out[lo:hi])
            lo, size = hi, 0
        size += len(text) + 1
    if lo < len(texts):
        _signatures_into(texts[lo:], spec, out[lo:])
    return out


def _signatures_into(texts: Sequence[str], spec: DedupSpec, out: NDArray[np.uint64]) -> None:
    """One pass of `signatures`: ``out``'s rows (all ones) become the texts' signatures."""
    n = spec.ngram
    batch = word_batch(texts)
    grams, at = batch.ngrams(n)
    _min_hash(grams, batch.owners()[at], out)
    short = np.flatnonzero(batch.last - batch.first < n)
    if len(short):
        one = [
            _short_shingle(batch.hashes[batch.first[i] : batch.last[i]], texts[i])
            for i in short.tolist()
        ]
        _min_hash(np.array(one, dtype=_U64), short, out)


def signature(text: str, spec: DedupSpec) -> NDArray[np.uint64]:
    """The MinHash signature of one text: ``bands × rows`` uint64 values.

    The values are taken over the set of the text's word n-grams (`words`, ``spec.ngram``
    words each), so neither their order nor repeats matter. A text with fewer than ``ngram``
    words has its words as one n-gram; a text without words, its normalized text.

    Args:
        text: A document's text.
        spec: The n-gram size and the number of values.

    Returns:
        The signature, shape ``(bands × rows,)``.
    """
    return signatures([text], spec)[0]


def band_keys(sig: NDArray[np.uint64], spec: DedupSpec) -> list[bytes]:
    """One 16-byte key per band: BLAKE2b of the band's index and its ``rows`` values.

    Two documents are near-duplicate candidates iff they share a key (the index is in the
    key, so equal values in different bands do not meet).
    """
    values = np.ascontiguousarray(sig, dtype="<u8")
    if values.shape != (spec.num_hashes,):
        raise ValueError(
            f"`sig` must have {spec.num_hashes} values (bands × rows), but got {values.shape}"
        )
    raw = values.tobytes()
    width = 8 * spec.rows
    return [
        hashlib.blake2b(
            band.to_bytes(4, "little") + raw[band * width : (band + 1) * width],
            digest_size=16,
            person=b"tw-dedup-band",
        ).digest()
        for band in range(spec.bands)
    ]


def estimate_jaccard(a: NDArray[np.uint64], b: NDArray[np.uint64]) -> float:
    """The share of equal values of two signatures: an unbiased Jaccard estimate."""
    if a.shape != b.shape:
        raise ValueError(f"signatures must have one shape, but got {a.shape} and {b.shape}")
    return float(np.mean(a == b))


def keeper(ids: Iterable[str]) -> str:
    """The document a cluster keeps: the smallest id (Python's string order)."""
    return min(ids)


def components(edges: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Connected components of candidate pairs: every id → its cluster's smallest id.

    Union-find with path halving; each root is its component's smallest id, so the answer
    does not depend on the order of the edges or of the ids in them. A chain a–b, b–c is one
    cluster; an id paired only with itself is its own cluster.

    Args:
        edges: Pairs of document ids.

    Returns:
        Every id that appears in an edge, mapped to its representative (`keeper`).
    """
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        root = parent.setdefault(x, x)
        while parent[root] != root:
            parent[root] = parent[parent[root]]
            root = parent[root]
        return root

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            if rb < ra:
                ra, rb = rb, ra
            parent[rb] = ra
    return {x: find(x) for x in parent}
