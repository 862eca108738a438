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
salted ``hash()``, nothing from the job's ``--seed``); words and n-grams are
`transforms.dedup.words` (re-exported here):

* a word's hash is ``mix64(Σ cp[i]·P**i mod 2**64)`` over its code points ``cp``, computed for
  a whole batch of texts at once by one segmented sum;
* an n-gram's hash is ``mix64(Σ w[j]·C[j] mod 2**64)`` over its n word hashes ``w``;
* the MinHash value ``i`` of a document is the minimum over its distinct n-gram hashes ``x``
  of ``A[i]·(x >> 32) mod 2**32``, ``A[i]`` odd: 32-bit values (stored as uint64). An odd
  multiplier is a bijection of the 32-bit numbers, so each value is the minimum of the
  n-gram set under a permutation; the n-gram hashes are already well mixed (the hypothesis
  tests check that the estimates are within their standard error of the true Jaccard), so
  one multiplication per value is enough, and the 112 values of a block of n-grams are one
  ``(112 × n_grams)`` NumPy product and a minimum along its rows. Two different n-grams
  share their top 32 bits with probability 2**-32, which moves a Jaccard similarity by
  far less than its estimate's error. (The textbook ``(a·x + b) mod (2**61 - 1)`` needs
  128-bit products, which NumPy does not have; datatrove's and datasketch's uint64 version
  of it overflows.)

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
from typing import Any

import numpy as np
from numpy.typing import NDArray

# Words and n-gram hashes live in dedup_words (decontamination uses them too); they are
# re-exported here, the module the job and the docs name.
from transforms.dedup.words import (
    MAX_NGRAM,
    Scratch,
    WordBatch,
    fixed_constants,
    ngram_hashes,
    short_ngram_hash,
    word_batch,
    word_hashes,
    words,
)

__all__ = [
    "MAX_HASHES",
    "MAX_NGRAM",
    "MODES",
    "PASS_CHARS",
    "SCHEME",
    "DedupSpec",
    "Scratch",
    "WordBatch",
    "band_key_matrix",
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
# A bound that keeps a mistyped flag from asking for absurd work; FineWeb uses 14 × 8.
MAX_HASHES = 1024

_U64 = np.uint64
_U32 = np.uint32
# The value of a MinHash number over no n-gram (and the start of every minimum).
_EMPTY = (1 << 32) - 1
# The exact keys' BLAKE2b parameters.
_EXACT_PERSON = b"tw-dedup-exact"
_EXACT_SIZE = 16


@functools.cache
def _multipliers(count: int) -> NDArray[np.uint32]:
    """The fixed odd 32-bit multipliers of the first ``count`` MinHash values."""
    return (fixed_constants("tw-minhash-a32", count) >> _U64(32)).astype(_U32) | _U32(1)


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
    return hashlib.blake2b(data, digest_size=_EXACT_SIZE, person=_EXACT_PERSON).digest()


def _short_shingle(hashes: NDArray[np.uint64], text: str) -> int:
    """The one shingle of a text with fewer words than the n-gram size.

    Its words as one n-gram (`short_ngram_hash`); a text without any word hashes its
    normalized text instead (punctuation-only texts stay apart unless equal; the empty text
    has one fixed signature).
    """
    if not len(hashes):
        key = hashlib.blake2b(
            normalize(text).encode("utf-8", "surrogatepass"), digest_size=8, person=b"tw-no-words"
        ).digest()
        return int.from_bytes(key, "little")
    return short_ngram_hash(hashes)


# Code points per NumPy pass of `signatures` (its memory: about 40 bytes each).
PASS_CHARS = 1 << 22

# Shingles per block of the (hashes × shingles) MinHash product: 3.5 MB of uint64 at 112 values,
# the size that measured fastest (the reduction runs along contiguous rows).
_BLOCK = 4096


def _min_hash(
    shingles: NDArray[np.uint64], owners: NDArray[np.intp], out: NDArray[np.uint32],
    scratch: Scratch | None = None,
) -> None:
    """``out[d, i] = min over d's shingles x of A[i]·(x >> 32) mod 2**32``, block by block.

    ``owners`` is each shingle's row in ``out``, non-decreasing. 32-bit products: NumPy has
    SIMD for them (not for 64-bit ones), twice as fast here.
    """
    a = _multipliers(out.shape[1])[:, None]
    top = (shingles >> _U64(32)).astype(_U32)
    width = min(_BLOCK, len(top))
    if scratch is None:
        buf = np.empty((out.shape[1], width), dtype=_U32)
    else:
        buf = scratch.take("minhash", out.shape[1] * width, _U32).reshape(out.shape[1], width)
    # Where each row's shingles start, for all blocks at once: heads[begin[k]:end[k]] are
    # those inside block k after its first shingle (whose row may go on from the last block:
    # the only row a block can share with another, as owners never decrease).
    count = len(top)
    heads = np.flatnonzero(owners[1:] != owners[:-1]) + 1
    los = np.arange(0, count, _BLOCK)
    begin = np.searchsorted(heads, los, side="right").tolist()
    end = np.searchsorted(heads, los + _BLOCK, side="left").tolist()
    for k, lo in enumerate(los.tolist()):
        x = top[lo : lo + _BLOCK]
        values = buf[:, : len(x)]
        np.multiply(a, x, out=values)
        starts = np.empty(end[k] - begin[k] + 1, dtype=np.intp)
        starts[0] = 0
        np.subtract(heads[begin[k] : end[k]], lo, out=starts[1:])
        rows = owners[starts + lo]
        mins = np.minimum.reduceat(values, starts, axis=1).T
        out[rows[0]] = np.minimum(out[rows[0]], mins[0])
        out[rows[1:]] = mins[1:]


def minhash(hashes: NDArray[np.uint64], spec: DedupSpec) -> NDArray[np.uint64]:
    """The MinHash signature of a set of 64-bit n-gram hashes (order and repeats ignored).

    `signature` (text) is ``minhash(ngram_hashes(text, spec.ngram), spec)`` for a text with at
    least ``ngram`` words. An empty set has the signature of 2**32 - 1 everywhere. The
    hashes must be spread uniformly over the 64-bit numbers (hashes are; small counters are
    not: only their top 32 bits are used).
    """
    values = np.asarray(hashes, dtype=_U64).ravel()
    out = np.full((1, spec.num_hashes), _EMPTY, dtype=_U32)
    _min_hash(values, np.zeros(len(values), dtype=np.intp), out)
    return out[0].astype(_U64)


def signatures(texts: Sequence[str], spec: DedupSpec, *,
               scratch: Scratch | None = None) -> NDArray[np.uint64]:
    """The MinHash signatures of many texts at once (faster than one by one).

    The texts are cut into words, hashed and shingled in NumPy passes over up to `PASS_CHARS`
    code points at a time (a NUL between texts keeps their words apart), so a batch of short
    texts costs about what one long text does, and the memory of a pass stays about 40 bytes
    per code point of the pass (one text longer than `PASS_CHARS` is a pass of its own).

    Args:
        texts: Document texts.
        spec: The n-gram size and the number of values (``bands × rows``).
        scratch: Work arrays to reuse (one per thread; the job keeps one per hashing
            thread, so its batches do not each map fresh memory).

    Returns:
        A ``(len(texts), bands × rows)`` uint64 array (of 32-bit values); row ``i`` is
        `signature` (texts[i]).
    """
    out = np.full((len(texts), spec.num_hashes), _EMPTY, dtype=_U32)
    lo = size = 0
    for hi, text in enumerate(texts):
        if size and size + len(text) > PASS_CHARS:
            _signatures_into(texts[lo:hi], spec, out[lo:hi], scratch)
            lo, size = hi, 0
        size += len(text) + 1
    if lo < len(texts):
        _signatures_into(texts[lo:], spec, out[lo:], scratch)
    return out.astype(_U64)


def _signatures_into(texts: Sequence[str], spec: DedupSpec, out: NDArray[np.uint32],
                     scratch: Scratch | None = None) -> None:
    """One pass of `signatures`: ``out``'s rows (all ones) become the texts' signatures."""
    n = spec.ngram
    batch = word_batch(texts, scratch)
    grams, owners = batch.text_ngrams(n)
    _min_hash(grams, owners, out, scratch)
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


_MIX_1, _MIX_2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_BAND_SEEDS = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xD1B54A32D192ED03))


def _mix(z: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """SplitMix64's finalizer (a bijection of 64-bit words), in place."""
    z ^= z >> np.uint64(30)
    z *= _MIX_1
    z ^= z >> np.uint64(27)
    z *= _MIX_2
    z ^= z >> np.uint64(31)
    return z


def band_key_matrix(sigs: NDArray[np.uint64], spec: DedupSpec) -> NDArray[np.void]:
    """Every document's key of every band at once: ``(n, bands)`` 16-byte keys (dtype
    ``V16``), equal whenever the band's ``rows`` MinHash values are.

    Each key is two 64-bit folds of the band's values through SplitMix64's finalizer, from
    two seeds and the band's index, for all documents and bands in a few NumPy passes (a
    cryptographic hash per band and document cost a third of the dedup pass in Python).
    Bands whose values differ share a key with a probability of about 2**-128, and only
    within one band: the index is folded in, so equal values in different bands do not meet.
    """
    n = len(sigs)
    values = np.ascontiguousarray(sigs, dtype=np.uint64).reshape(n, spec.bands, spec.rows)
    out = np.empty((n, spec.bands, 2), np.uint64)
    with np.errstate(over="ignore"):
        for half, seed in enumerate(_BAND_SEEDS):
            h = np.broadcast_to(_mix(np.arange(spec.bands, dtype=np.uint64) ^ seed),
                                (n, spec.bands)).copy()
            for row in range(spec.rows):
                h ^= values[:, :, row]
                _mix(h)
                h += seed
            out[:, :, half] = h
    return out.view("V16").reshape(n, spec.bands)


def band_keys(sig: NDArray[np.uint64], spec: DedupSpec) -> list[bytes]:
    """One document's 16-byte key of each band (`band_key_matrix` of one signature).

    Two documents are near-duplicate candidates iff they share a key.
    """
    values = np.asarray(sig, dtype=np.uint64)
    if values.shape != (spec.num_hashes,):
        raise ValueError(
            f"`sig` must have {spec.num_hashes} values (bands × rows), but got {values.shape}"
        )
    return [key.tobytes() for key in band_key_matrix(values[None, :], spec)[0]]


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
