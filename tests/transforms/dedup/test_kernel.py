"""The dedup pass's C hashing (`transforms.dedup.kernel`) against its definition, the NumPy
code of `transforms.dedup.duplicates`: the same signatures and exact keys, bit for bit, on
random text, on every code point and on the bench corpus's kinds of text."""

from __future__ import annotations

import os
import unicodedata

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transforms.dedup import duplicates, kernel, words
from transforms.dedup.duplicates import DedupSpec

pytestmark = pytest.mark.skipif(
    not kernel.available and not os.environ.get("CI"),
    reason="transforms.dedup._kernel is not built (no C compiler at install)")

SPECS = [DedupSpec(mode="near"), DedupSpec(mode="near", ngram=1, bands=3, rows=5),
         DedupSpec(mode="near", ngram=3, bands=1, rows=1),
         DedupSpec(mode="near", ngram=64, bands=20, rows=9)]

# Pieces that exercise the word rules and the near form: ASCII, CJK, kana, Thai, Hangul
# (syllables and jamo), combining marks, casefolds of more than one code point (ß, ﬁ, ΐ),
# decomposable letters, NFC's singletons and exclusions, every kind of whitespace, NUL,
# lone surrogates, astral code points.
PIECES = st.sampled_from([
    "a", "B", "word", "Ünïcode", "ß", "İ", "ﬁ", "Σς", "e\u0301", "\u0301", "\u0308", "大", "學",
    "之道", "ひらがな", "カタカナ", "ｶﾀｶﾅ", "ภาษาไทย", "한국어", "ᄀ", "1", "42", "٣", "½", "_",
    "-", ",", "!", "'", " ", "  ", "\t", "\n", "\r\n", "\x0b", "\x1c", "\x85", "\xa0", "\u1680",
    "\u2003", "\u2028", "\u202f", "\u205f", "\u3000", "\u200b", "\0", "\ud800", "\udfff",
    "\U00020000", "\U0001F600", "\U0001B000", "\U000E0100", "\U0010FFFF", "々", "〇", "Ǆ", "ᾳ",
    "Ω", "\u212a", "\u212b", "\u1e9e", "ǅ", "ﬀ", "ᅡ", "ᆨ", "가", "\u0b47", "\u0b3e", "\u0344",
    "\u0340", "\u0958", "\u2126", "ΐ", "\u0345", "\u03c2", "\u0130\u0307", "A\u030a",
    "α\u0345\u0313", "ᾀ",
])
# Code points on either side of a canonical decomposition, and Hangul jamo and syllables.
_DECOMPOSITIONS = [unicodedata.decomposition(chr(cp)) for cp in range(0x30000)]
_COMPOSING = sorted({int(part, 16) for d in _DECOMPOSITIONS if d and not d.startswith("<")
                     for part in d.split()}
                    | set(range(0x1100, 0x1200)) | set(range(0xAC00, 0xAC40)))
TEXT = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF)),
    st.lists(PIECES, max_size=40).map("".join),
    st.lists(st.one_of(PIECES, st.text(max_size=4)), max_size=30).map(" ".join),
    st.lists(st.one_of(st.sampled_from([chr(c) for c in _COMPOSING]), PIECES),
             max_size=30).map("".join),
)


def test_the_kernel_is_built_in_ci():
    # CI installs with a compiler: the job there must hash in C, and these tests must run.
    assert kernel.available


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(TEXT, max_size=12), st.sampled_from(SPECS))
def test_signatures_equal_the_numpy_signatures(texts, spec):
    assert np.array_equal(kernel.signatures(texts, spec), duplicates.signatures(texts, spec))


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(TEXT, max_size=12))
def test_exact_keys_equal_exact_key(texts):
    assert kernel.exact_keys(texts) == [duplicates.exact_key(t) for t in texts]


@pytest.mark.parametrize("size", [0, 1, 111, 127, 128, 129, 255, 256, 257, 1000])
def test_exact_keys_of_every_blake2b_block_boundary(size):
    text = "".join(chr(0x61 + i % 26) for i in range(size))
    assert kernel.exact_keys([text, text + "é"]) == [duplicates.exact_key(text),
                                                      duplicates.exact_key(text + "é")]


def _code_points():
    return [cp for lo, hi in (*words._PLANES, (0x10FFF0, 0x110000)) for cp in range(lo, hi)]


def test_every_code_point_alone_and_in_words():
    """Each code point alone, and between words (where NFC could join it to a neighbour),
    through the fold table or Python's near form, whichever the kernel takes."""
    spec = DedupSpec(mode="near", ngram=2, bands=2, rows=2)
    texts = [t for cp in _code_points() for t in (chr(cp), "Ab" + chr(cp) + "c D\u0301 " + chr(cp))]
    for lo in range(0, len(texts), 8192):
        batch = texts[lo : lo + 8192]
        assert np.array_equal(kernel.signatures(batch, spec), duplicates.signatures(batch, spec))


def test_every_code_point_exact_key():
    texts = [t for cp in _code_points()
             for t in (chr(cp), " a\t" + chr(cp) + "  b\u3000" + chr(cp))]
    for lo in range(0, len(texts), 8192):
        batch = texts[lo : lo + 8192]
        assert kernel.exact_keys(batch) == [duplicates.exact_key(t) for t in batch]


def test_the_fold_table_folds_what_is_safe_and_marks_the_rest():
    table = kernel.fold_table()
    stand_in = table & 0x1FFFFF
    assert stand_in[ord("A")] == ord("a") and stand_in[ord("大")] == ord("大")
    assert table[ord("A")] >> 24 == 1 and table[ord("大")] >> 24 == 2 and table[ord(" ")] == 0x20
    # ß casefolds to two code points; a combining mark may join its neighbour under NFC; the
    # Kelvin sign casefolds to k; a Hangul vowel joins a leading consonant.
    for char in ("ß", "\u0301", "\u1161"):
        assert table[ord(char)] == 1 << 31, char
    assert stand_in[0x212A] == ord("k")


def test_the_job_text_kinds_hash_alike():
    """Texts like the bench corpus's: English prose and code, classical Chinese, mixed."""
    spec = DedupSpec(mode="near")
    texts = ["The quick brown fox jumps over the lazy dog. " * 20,
             "def f(x):\n    return x ** 2  # squares\n" * 10,
             "床前明月光，疑是地上霜。舉頭望明月，低頭思故鄉。" * 5,
             "Straße café naïve ﬁnance ΣΊΣΥΦΟΣ " * 10, "", "   ", "!!!", "one two"]
    assert np.array_equal(kernel.signatures(texts, spec), duplicates.signatures(texts, spec))
    assert kernel.exact_keys(texts) == [duplicates.exact_key(t) for t in texts]


def test_a_text_list_of_something_else_is_refused():
    with pytest.raises(TypeError, match="texts must be a list of str"):
        kernel.signatures(["text", b"bytes"], DedupSpec(mode="near"))  # type: ignore[list-item]
