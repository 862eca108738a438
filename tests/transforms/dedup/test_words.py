"""Words and their n-gram hashes (transforms/dedup/words.py)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.common.strategies import WORD_TEXTS
from transforms.dedup.words import _word_hash_reference as word_hash_reference
from transforms.dedup.words import ngram_hashes, word_batch, word_hashes, words

# -- words ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello, World 42!", ["hello", "world", "42"]),
        ("Don't stop_now: x@y.org", ["don", "t", "stop", "now", "x", "y", "org"]),
        ("Straße STRASSE", ["strasse", "strasse"]),  # casefolded
        ("naïve nai\u0308ve", ["naïve", "naïve"]),  # NFC after casefolding
        ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),  # marks stay inside their word
        ("大學之道，在明明德。", ["大", "學", "之", "道", "在", "明", "明", "德"]),
        ("東京に行きます", ["東", "京", "に", "行", "き", "ま", "す"]),
        ("カタカナ and ｶﾀｶﾅ", ["カ", "タ", "カ", "ナ", "and", "ｶ", "ﾀ", "ｶ", "ﾅ"]),
        ("안녕하세요 세계", ["안녕하세요", "세계"]),  # Hangul is written with spaces
        ("ภาษาไทย", ["ภ", "า", "ษ", "า", "ไ", "ท", "ย"]),
        ("GPT-4は2023年に", ["gpt", "4", "は", "2023", "年", "に"]),
        ("", []),
        ("... !!! ---", []),
    ],
)
def test_words(text, expected):
    assert words(text) == expected


def test_word_hashes_match_the_slow_reference():
    text = "Hello, wörld 大學 𠀀x naïve ภาษา " * 3
    expected = [word_hash_reference(w) for w in words(text)]
    assert word_hashes(text).tolist() == expected
    # The same word hashes the same wherever it is.
    hashes = word_hashes("alpha beta alpha gamma alpha")
    assert hashes[0] == hashes[2] == hashes[4] != hashes[1]


def test_word_hashes_across_the_power_tables_blocks():
    # Powers of the base come in blocks of 2**16 code points: words on and past the seams.
    text = " " * 65533 + "hello " + "x" * 70000 + " 大學 " * 40000 + "end"
    hashes = word_hashes(text)
    found = words(text)
    assert len(hashes) == len(found) == 2 + 80000 + 1
    assert hashes[0] == word_hash_reference("hello")
    assert hashes[1] == word_hash_reference("x" * 70000)
    assert hashes[2] == hashes[4] == word_hash_reference("大") != hashes[3]
    assert hashes[-1] == word_hash_reference("end")


def test_ngram_hashes():
    text = "one two three four five six"
    grams = ngram_hashes(text, 5)
    assert len(grams) == 2 and grams[0] != grams[1]
    assert ngram_hashes("x " + text, 5)[1:].tolist() == grams.tolist()
    assert len(ngram_hashes("one two three four", 5)) == 0
    # Punctuation and case do not make n-grams differ; word order does.
    assert ngram_hashes("One, TWO; three four five", 5).tolist() == grams[:1].tolist()
    assert ngram_hashes("two one three four five", 5)[0] != grams[0]
    with pytest.raises(ValueError, match=r"`n` must be an integer in \[1, 64\], but got 0"):
        ngram_hashes(text, 0)


# -- properties ----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(WORD_TEXTS)
def test_words_are_what_they_say(text):
    found = words(text)
    # Words hold no separator, and their hashes are the reference's.
    assert all(w and not any(c.isspace() or c in ".,!_-'\0" for c in w) for w in found)
    assert word_hashes(text).tolist() == [word_hash_reference(w) for w in found]
    # Cutting the words out again changes nothing.
    assert words(" ".join(found)) == found
    # Which separators, and case, do not matter.
    assert words(text.replace(",", " ").replace("\n", "  ")) == found
    assert words(text.upper()) == found


@settings(max_examples=200, deadline=None)
@given(st.lists(WORD_TEXTS, max_size=6), st.integers(1, 6))
def test_a_batch_has_each_texts_ngrams_in_order(texts, n):
    batch = word_batch(texts)
    grams, at = batch.ngrams(n)
    by_text, owners = batch.text_ngrams(n)
    expected = [(i, int(h)) for i, text in enumerate(texts) for h in ngram_hashes(text, n)]
    assert [int(h) for h in grams] == [h for _, h in expected]
    assert [int(h) for h in by_text] == [h for _, h in expected]
    assert owners.tolist() == [i for i, _ in expected]
    # Each n-gram's first word is one of its text's words.
    assert all(batch.first[i] <= a < batch.last[i] for i, a in zip(owners, at, strict=True))
