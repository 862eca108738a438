"""Decontamination: the evaluation n-gram index and its matches
(transforms/dedup/contamination.py)."""

import pickle

import numpy as np
import pytest

from transforms.dedup.contamination import DEFAULT_NGRAM, EvalNgramIndex, Match
from transforms.dedup.duplicates import ngram_hashes

QUESTION = (
    "Which of the following best describes the primary function of the mitochondria in a "
    "eukaryotic cell during aerobic respiration?"
)
PASSAGE = (
    "The Treaty of Westphalia, signed in 1648, ended the Thirty Years War and established the "
    "principle of state sovereignty that shapes international relations to this day."
)
ITEMS = [
    ("evals/mmlu.jsonl", 7, QUESTION),
    ("evals/history.txt", 2, PASSAGE),
    ("evals/history.txt", 3, "Too short to hold a thirteen-gram."),
]
INDEX = EvalNgramIndex.build(ITEMS)


def test_build():
    assert DEFAULT_NGRAM == 13 and INDEX.n == 13
    assert INDEX.files == ("evals/history.txt", "evals/mmlu.jsonl")
    # 20 and 25 words: 8 and 13 distinct 13-grams; the short text has none.
    assert len(INDEX) == 8 + 13
    assert (INDEX.texts, INDEX.short_texts) == (3, 1)
    assert INDEX.hashes.dtype == np.uint64 and np.all(np.diff(INDEX.hashes.astype(object)) > 0)
    assert INDEX.hashes.nbytes + INDEX.file_of.nbytes + INDEX.line_of.nbytes == 21 * 20


def test_first_match_names_the_eval_text_and_the_ngram():
    doc = (
        "Study guide, chapter 4. Quiz: which of the following BEST describes the primary "
        "function of the mitochondria in a eukaryotic cell? Answer below."
    )
    assert INDEX.first_match(doc) == Match(
        eval_file="evals/mmlu.jsonl",
        eval_line=7,
        ngram="which of the following best describes the primary function of the mitochondria in",
    )
    # The first shared n-gram in the document's order is the one reported.
    doc2 = f"Intro text here. {PASSAGE} And later: {QUESTION}"
    match = INDEX.first_match(doc2)
    assert match is not None and match.eval_file == "evals/history.txt" and match.eval_line == 2
    assert match.ngram == "the treaty of westphalia signed in 1648 ended the thirty years war and"


def test_no_match():
    assert INDEX.first_match("") is None
    assert INDEX.first_match("Too short to hold a thirteen-gram.") is None
    # Twelve words of the question in a row are not enough.
    assert INDEX.first_match(" ".join(QUESTION.split()[:12]) + " zebra") is None
    assert EvalNgramIndex.build([]).first_match(QUESTION) is None


def test_the_smallest_origin_wins_whatever_the_order():
    items = [
        ("b.jsonl", 5, QUESTION),
        ("a.jsonl", 9, QUESTION),
        ("a.jsonl", 4, QUESTION),
        ("c.jsonl", 1, PASSAGE),
    ]
    for order in (items, items[::-1], items[1:] + items[:1]):
        index = EvalNgramIndex.build(order)
        match = index.first_match(QUESTION)
        assert match is not None and (match.eval_file, match.eval_line) == ("a.jsonl", 4)
        assert index.hashes.tobytes() == EvalNgramIndex.build(items).hashes.tobytes()


def test_pickles_compactly():
    items = [("evals/big.jsonl", i, f"{QUESTION} variant number {i} of many") for i in range(500)]
    index = EvalNgramIndex.build(items)
    assert index.first_match(QUESTION) is not None  # builds the lookup's bitmap, not pickled
    data = pickle.dumps(index)
    back = pickle.loads(data)
    assert back.first_match(QUESTION) == index.first_match(QUESTION)
    assert np.array_equal(back.hashes, index.hashes)
    # Three flat arrays: about 20 bytes per n-gram, no Python object per n-gram.
    assert len(data) < 20 * len(index) + 1000


def test_the_hashes_are_the_ngram_hashes():
    index = EvalNgramIndex.build([("e", 1, PASSAGE)], n=5)
    assert index.hashes.tolist() == sorted(set(ngram_hashes(PASSAGE, 5).tolist()))


def test_refuses_bad_n():
    with pytest.raises(ValueError, match=r"`n` must be an integer in \[1, 64\], but got 0"):
        EvalNgramIndex.build(ITEMS, n=0)


def test_first_matches_equals_first_match_one_by_one():
    docs = [
        "",
        f"Intro text here. {PASSAGE} And later: {QUESTION}",
        "Nothing to see here at all, just some words that match nothing in the evaluation set.",
        QUESTION.upper(),
        "Too short",
        f"{QUESTION} {PASSAGE}",
    ]
    got = INDEX.first_matches(docs)
    assert got == [INDEX.first_match(d) for d in docs]
    assert [m is not None for m in got] == [False, True, False, True, False, True]
    assert got[5] is not None and got[5].eval_file == "evals/mmlu.jsonl"
    assert INDEX.first_matches([]) == []
