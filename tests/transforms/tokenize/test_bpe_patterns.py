"""Split patterns' fast forms: the same matches as the file's pattern on every text
(docs/tokenizers.md#engines)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, find, given, settings
from hypothesis import strategies as st

from transforms.tokenize.bpe_patterns import (
    FAST_FORMS,
    GPT2_FAST,
    GPT2_PATTERN,
    LLAMA3_FAST,
    LLAMA3_PATTERN,
    QWEN2_FAST,
    QWEN2_PATTERN,
    fast_form,
)

regex = pytest.importorskip("regex", reason="the regex module (a tiktoken dependency) is missing")

# Whitespace of every kind \s knows, and two characters it does not (zero-width space, BOM).
SPACES = [" ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x85", "\u00a0", "\u1680", "\u2003",
          "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u200b", "\ufeff"]
# Contractions in every case, the long s (which (?i) folds to s) and near misses: a strategy
# of their own, so that each text is likely to hold some.
CONTRACTIONS = st.one_of(
    st.sampled_from(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'", "''", "'x", "\u2019s",
                     "n't", "it's"]),
    st.sampled_from(["'S", "'\u017f", "'T", "'RE", "'Re", "'rE", "'VE", "'vE", "'M", "'LL",
                     "'lL", "'Ll", "'D"]),
)
PIECES = st.sampled_from([
    # digits: runs of every length, other scripts' digits, other numbers (No, Nl)
    "0", "7", "42", "123", "1234", "98765", "\u0663\u0664", "\u0967\u0968\u0969\u096a",
    "\u00b2", "\u216b", "3.14", "1,000",
    # letters of several scripts, marks, emoji, punctuation, controls
    "a", "the", "The", "CAT", "Ωμέγα", "Привет", "道可道", "こんにちは", "안녕", "مرحبا",
    "नमस्ते", "ไทย", "e\u0301", "\u0301", "ﬁ",
    "\U0001f600", "\U0001f44d\U0001f3fd", ".", "!?", "--", "(", ")", "\"", "#", "$", "%", "\\",
    "\x00", "\x7f", "\u2014", "\u201c",
])
RUN = st.lists(st.sampled_from(SPACES), min_size=1, max_size=12).map("".join)
TEXT = st.one_of(
    st.lists(st.one_of(CONTRACTIONS, PIECES, RUN), max_size=40).map("".join),
    st.text(max_size=80),
    st.lists(st.one_of(CONTRACTIONS, PIECES, RUN, st.text(max_size=4)), max_size=30).map(
        "".join),
    st.builds(lambda n, c: c * n, st.integers(1, 200), st.sampled_from(SPACES)),
)


def _differs(fast: str, pattern: str, text: str) -> bool:
    return any(regex.findall(fast, t) != regex.findall(pattern, t)
               for t in (text, text + "\n  x", "  " + text + " \t"))


@pytest.mark.parametrize("pattern", list(FAST_FORMS), ids=["gpt2", "llama3", "qwen2"])
@settings(max_examples=1000, deadline=None)
@given(text=TEXT)
# Each near miss below, for certain; the generated texts alone hit each one too (the rarest,
# the long s, in about 1% of them).
@example("'S 'Ll \u017f'\u017f.")
@example("a \nb \n \nx\t\r\n  y .\n(\tword)")
@example("1234 12345 ٣٤٥٦")
def test_each_fast_form_has_the_same_matches(pattern, text):
    assert not _differs(FAST_FORMS[pattern], pattern, text)


@pytest.mark.parametrize("pattern", list(FAST_FORMS), ids=["gpt2", "llama3", "qwen2"])
@settings(max_examples=300, deadline=None)
@given(text=TEXT)
@example("a\u200b\ufeff \x00\x7f\U0001f600")
def test_each_known_pattern_matches_every_character(pattern, text):
    """Its matches, end to end, are the text: the engine skips its coverage check for these
    (tiktoken drops what no match covers), so a gap would lose characters."""
    assert "".join(regex.findall(pattern, text)) == text


# Rewrites that look as harmless and are not: the property above must catch each one.
NEAR_MISSES = [pytest.param(wrong, base, id=name) for name, wrong, base in [
    ("case-sensitive", LLAMA3_FAST.replace("(?i:", "(?:"), LLAMA3_PATTERN),
    ("no-long-s", LLAMA3_FAST.replace("(?i:'s|'t|'re|'ve|'m|'ll|'d)",
                                      "'[sStTmMdD]|'[rRvV][eE]|'[lL][lL]"), LLAMA3_PATTERN),
    ("look-ahead-first", LLAMA3_FAST.replace(r"\s*[\r\n]+)|\s+(?!\S)",
                                             r"\s+(?!\S)|\s*[\r\n]+)"), LLAMA3_PATTERN),
    ("newlines-alone", LLAMA3_FAST.replace(r"\s*[\r\n]+)", r"[\r\n]+)"), LLAMA3_PATTERN),
    ("no-look-ahead", LLAMA3_FAST.replace(r"|\s+(?!\S)|\s", r"|\s"), LLAMA3_PATTERN),
    ("punct-no-newlines", LLAMA3_FAST.replace(r"[\r\n]*|", "|"), LLAMA3_PATTERN),
    ("digit-runs", LLAMA3_FAST.replace(r"\p{N}{1,3}", r"\p{N}+"), LLAMA3_PATTERN),
    ("space-letters", LLAMA3_FAST.replace(r"[^\r\n\p{L}\p{N}]?\p{L}+", r" ?\p{L}+"),
     LLAMA3_PATTERN),
    ("qwen2-three-digits", QWEN2_FAST.replace(r"\p{N}|", r"\p{N}{1,3}|"), QWEN2_PATTERN),
    ("gpt2-no-look-ahead", GPT2_FAST.replace(r"|\s+(?!\S)|\s", r"|\s+"), GPT2_PATTERN),
]]


@pytest.mark.parametrize(("wrong", "pattern"), NEAR_MISSES)
def test_the_property_catches_each_near_miss(wrong, pattern):
    assert wrong != FAST_FORMS[pattern]
    found = find(TEXT, lambda t: _differs(wrong, pattern, t), settings=settings(
        max_examples=5000, database=None, suppress_health_check=list(HealthCheck)))
    assert _differs(wrong, pattern, found)


def test_the_patterns_are_the_files_strings():
    """Character for character as the models' tokenizer.json files hold them (JSON text)."""
    llama3 = json.loads(r'''"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|'''
                        r'''\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|'''
                        r'''\\s+"''')
    qwen2 = llama3.replace(r"\p{N}{1,3}", r"\p{N}")
    assert (llama3, qwen2) == (LLAMA3_PATTERN, QWEN2_PATTERN)
    assert fast_form(llama3) == LLAMA3_FAST and fast_form(qwen2) == QWEN2_FAST
    assert fast_form(GPT2_PATTERN) == GPT2_FAST


@pytest.mark.parametrize("pattern", [
    r"\w+|\s+",
    LLAMA3_PATTERN.replace(r"\s*[\r\n]+", r"\s*[\r\n]"),  # tiktoken's own cl100k form
    LLAMA3_PATTERN + " ",
    GPT2_PATTERN.replace("'s|", ""),
])
def test_any_other_pattern_is_given_as_it_is(pattern):
    assert fast_form(pattern) == pattern
