"""The dedup pass's hashing in C: `signatures` and `exact_keys` of a batch, bit for bit those
of `transforms.dedup.duplicates`, at several times their speed.

The NumPy code of `transforms.dedup.words` and `transforms.dedup.duplicates` defines the
hashes (and stays their reference: the tests compare the two on random text, on every code
point and on texts like the bench corpus's; the three bench corpora, 22 to 312 MB, were
compared whole, batch by batch, when the kernel was written). It runs on one core whatever
the threads: Python's string work and NumPy's many short calls hold the GIL. ``_kernel.c``
does a batch's word cutting, hashing and MinHash in one pass over each text's code points,
as CPython stores them, with the GIL released, so the job's hashing threads run beside its
parsing.

The extension is built by ``pip install`` where a C compiler is found (setup.py; the worker
image of the Dockerfile has one, and so do workers that install the package through
``--setup_file`` on an image with gcc); where it is not, `available` is False and the job
hashes with the NumPy code: the same keys, about 2.6 times slower (docs/dedup.md#costs).

The near form (`transforms.dedup.words` cuts words from the NFC of the casefolded text) is
made in C from a table (`fold_table`): per code point, the one code point it casefolds to,
where that one is certain to be left alone by NFC in any text: a starter (combining class 0)
that NFC keeps as it is and that is never the second of a canonical composition (nor a
Hangul vowel or trailing consonant). A string of such code points passes Unicode's NFC quick
check (UAX #15): it is its own NFC. A text with any other code point (ß, a combining mark, a
decomposable letter whose casefold is one: 0.01 % of the bench corpus's documents) gets its
near form from Python and goes through C again.
"""

from __future__ import annotations

import functools
import threading
import unicodedata
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from transforms.dedup import duplicates, words

try:
    from transforms.dedup import _kernel  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: the NumPy code hashes
    _kernel = None

__all__ = ["available", "exact_keys", "fold_table", "signatures"]

# Whether the C extension was built and loaded.
available = _kernel is not None

# Table entries: a code point's stand-in (bits 0-20), its word class (bits 24-25), or UNSAFE.
_CLASS_SHIFT = 24
_UNSAFE = np.uint32(1 << 31)
# Hangul vowels and trailing consonants compose with what precedes them (algorithmically,
# not through a decomposition that `unicodedata.decomposition` lists).
_HANGUL_SECONDS = (range(0x1161, 0x1176), range(0x11A8, 0x11C3))
_BLOCK = 256
# The tables are built once per process; the job's hashing threads ask for them at once.
_TABLES = threading.Lock()


def _plain_table() -> NDArray[np.uint32]:
    """Every code point standing for itself, with its word class: for texts that are their
    near form already."""
    with _TABLES:
        return _plain()


@functools.cache
def _plain() -> NDArray[np.uint32]:
    classes = words._classes().astype(np.uint32)
    return np.arange(0x110000, dtype=np.uint32) | classes << _CLASS_SHIFT


def fold_table() -> NDArray[np.uint32]:
    """Per code point: the code point it stands for in the near form and its word class, or
    ``UNSAFE`` (bit 31) where the text's near form must come from Python (module docstring).

    Built once per process from this Python's `unicodedata` (about 0.05 s), so it agrees with
    `transforms.dedup.words` whatever the Unicode version; under a lock, as the job's hashing
    threads ask for it at once. Code points past the planes `transforms.dedup.words`
    classifies are unassigned or private use: no case, no decomposition, themselves.
    """
    with _TABLES:
        return _fold_table()


@functools.cache
def _fold_table() -> NDArray[np.uint32]:
    classes = words._classes().astype(np.uint32)
    table = _plain().copy()
    # What NFC could change or join to its neighbour in some text: a combining mark, a
    # decomposable code point NFC does not keep, the second of a canonical pair.
    moving = np.zeros(0x110000, dtype=bool)
    seconds: set[int] = {cp for part in _HANGUL_SECONDS for cp in part}
    # What each code point casefolds to, -1 for more than one code point.
    folds_to = np.arange(0x110000, dtype=np.int64)
    # Most blocks of code points need no look at each one: none casefolds to another, none
    # decomposes (NFD leaves the block as it is), none is a combining mark.
    for lo, hi in words._PLANES:
        for start in range(lo, hi, _BLOCK):
            cps = range(start, min(start + _BLOCK, hi))
            block = "".join(map(chr, cps))
            if any(map(unicodedata.combining, block)):
                for cp, char in zip(cps, block, strict=True):
                    moving[cp] |= unicodedata.combining(char) != 0
            if unicodedata.normalize("NFD", block) != block:
                for cp, char in zip(cps, block, strict=True):
                    decomposition = unicodedata.decomposition(char)
                    if not decomposition or decomposition.startswith("<"):
                        continue  # none, or a compatibility one (NFC ignores it)
                    parts = decomposition.split()
                    if len(parts) == 2:
                        seconds.add(int(parts[1], 16))
                    moving[cp] |= unicodedata.normalize("NFC", char) != char
            if block.casefold() != block:
                for cp, char in zip(cps, block, strict=True):
                    folded = char.casefold()
                    folds_to[cp] = ord(folded) if len(folded) == 1 else -1
    moving[list(seconds)] = True
    planes = np.concatenate([np.arange(lo, hi) for lo, hi in words._PLANES])
    target = folds_to[planes]
    unsafe = (target < 0) | moving[np.maximum(target, 0)]
    target = np.maximum(target, 0).astype(np.uint32)
    table[planes] = np.where(unsafe, _UNSAFE, target | classes[target] << _CLASS_SHIFT)
    return table


def signatures(texts: Sequence[str], spec: duplicates.DedupSpec) -> NDArray[np.uint64]:
    """`transforms.dedup.duplicates.signatures` (texts, spec), in C.

    Raises:
        RuntimeError: the extension is not built (`available` is False).
    """
    _built("signatures")
    texts = list(texts)
    multipliers = duplicates._multipliers(spec.num_hashes)
    out = np.empty((len(texts), spec.num_hashes), dtype=np.uint32)
    state = _hash(texts, fold_table(), spec, multipliers, out)
    slow = np.flatnonzero(state == 2)
    if len(slow):  # code points the table cannot fold: Python's near form, hashed as it is
        forms = [words._near_form(texts[i]) for i in slow.tolist()]
        rows = np.empty((len(forms), spec.num_hashes), dtype=np.uint32)
        state[slow] = _hash(forms, _plain_table(), spec, multipliers, rows)
        out[slow] = rows
    for i in np.flatnonzero(state == 1).tolist():  # no word: the normalized text's shingle
        shingle = duplicates._short_shingle(np.empty(0, dtype=np.uint64), texts[i])
        out[i] = duplicates.minhash(np.array([shingle], dtype=np.uint64), spec)
    return out.astype(np.uint64)


def _built(name: str) -> None:
    """Raises RuntimeError naming the NumPy function to use where the extension is not built."""
    if _kernel is None:
        raise RuntimeError("transforms.dedup._kernel is not built (no C compiler when the "
                           f"package was installed): use transforms.dedup.duplicates.{name}")


def _hash(texts: list[str], table: NDArray[np.uint32], spec: duplicates.DedupSpec,
          multipliers: NDArray[np.uint32], out: NDArray[np.uint32]) -> NDArray[np.uint8]:
    """``_kernel.signatures`` into ``out``; each text's state (0 hashed, 1 no word, 2 a code
    point the table marks)."""
    state = np.empty(len(texts), dtype=np.uint8)
    _kernel.signatures(texts, table, words._P, words._C, multipliers, spec.ngram, out, state)
    return state


def exact_keys(texts: Sequence[str]) -> list[bytes]:
    """[`transforms.dedup.duplicates.exact_key` (text) for text in texts], in C (after NFC,
    which stays Python's: cheap, as most texts are NFC already).

    Raises:
        RuntimeError: the extension is not built (`available` is False).
    """
    _built("exact_key")
    nfc = [unicodedata.normalize("NFC", text) for text in texts]
    return _kernel.exact_keys(nfc, duplicates._EXACT_PERSON, duplicates._EXACT_SIZE)
