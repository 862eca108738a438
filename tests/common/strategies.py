"""Hypothesis strategies more than one test file draws from."""

from __future__ import annotations

from hypothesis import strategies as st

# Letters of several scripts, digits, marks, punctuation, whitespace and NUL.
ALPHABET = st.sampled_from(
    list("abcXYZ019 \t\n.,!_-'\0")
    + ["é", "e\u0301", "ß", "İ", "大", "學", "東", "こ", "カ", "ｶ", "한", "글", "ภ", "ा", "क"]
    + ["\u3000", "\u00a0", "😀", "\U00020000", "١", "Ⅻ"]
)


WORD_TEXTS = st.lists(ALPHABET, max_size=40).map("".join)
