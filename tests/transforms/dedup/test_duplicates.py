"""Exact keys, words, MinHash signatures, LSH band keys and clusters
(transforms/dedup/duplicates.py)."""

import hashlib
import json
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.common.paths import SAMPLES
from tests.common.strategies import WORD_TEXTS
from transforms.dedup import duplicates
from transforms.dedup.duplicates import (
    DedupSpec,
    Scratch,
    band_key_matrix,
    band_keys,
    components,
    estimate_jaccard,
    exact_key,
    keeper,
    minhash,
    ngram_hashes,
    normalize,
    signature,
    signatures,
    words,
)
from transforms.dedup.words import fixed_constants

NEAR = DedupSpec(mode="near")


# -- the spec -------------------------------------------------------------------------------


def test_spec_defaults_and_json():
    assert (NEAR.ngram, NEAR.bands, NEAR.rows, NEAR.num_hashes) == (5, 14, 8, 112)
    assert DedupSpec().mode == "off" and not DedupSpec().active
    assert DedupSpec(mode="exact").to_json() == {"mode": "exact"}
    assert NEAR.to_json() == {
        "mode": "near",
        "ngram": 5,
        "bands": 14,
        "rows": 8,
        "scheme": "tw-minhash-1",
    }
    # The S-curve's midpoint at 14 × 8.
    assert NEAR.threshold() == pytest.approx(0.6847, abs=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "fuzzy"}, "`mode` must be one of off, exact, near, but got 'fuzzy'"),
        ({"ngram": 0}, r"`ngram` must be an integer in \[1, 64\], but got 0"),
        ({"ngram": 65}, r"`ngram` must be an integer in \[1, 64\], but got 65"),
        ({"bands": True}, r"`bands` must be an integer in \[1, 1024\], but got True"),
        ({"rows": 2.0}, r"`rows` must be an integer in \[1, 1024\], but got 2.0"),
        ({"bands": 64, "rows": 32}, "at most 1024 MinHash values, but got 64 × 32 = 2048"),
    ],
)
def test_spec_refuses(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DedupSpec(**kwargs)


def test_spec_is_keyword_only_and_frozen():
    with pytest.raises(TypeError):
        DedupSpec("near")  # type: ignore[misc]
    with pytest.raises(AttributeError):
        NEAR.mode = "exact"  # type: ignore[misc]


# -- exact duplicates -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("  Hello \t\n  world  ", "Hello world"),
        ("a\u00a0b\u2003c\u3000d", "a b c d"),  # no-break, em and ideographic spaces
        ("Cafe\u0301", "Caf\u00e9"),  # NFC composes
        ("\u212b", "\u00c5"),  # the Ångström sign's NFC is Å
        ("Hello", "Hello"),  # case kept
        ("", ""),
        (" \n\t", ""),
    ],
)
def test_normalize(text, expected):
    assert normalize(text) == expected


def test_exact_key():
    key = exact_key("Hello world")
    assert len(key) == 16
    assert key.hex() == "92cdbd8b957524a8fb17b7303bb08145"
    assert key == hashlib.blake2b(b"Hello world", digest_size=16, person=b"tw-dedup-exact").digest()
    assert exact_key("  Hello\n\nworld ") == key
    assert exact_key("Cafe\u0301") == exact_key("Caf\u00e9")
    assert exact_key("hello world") != key
    assert exact_key("Hello world.") != key
    # A lone surrogate (JSON allows one) still has a key.
    assert len(exact_key("a\ud800b")) == 16


# -- signatures -----------------------------------------------------------------------------


def test_signature_values_are_pinned():
    """The scheme is part of the format: these values change only with a new SCHEME."""
    sig = signature("The quick brown fox jumps over the lazy dog.", NEAR)
    assert sig.dtype == np.uint64 and sig.shape == (112,)
    assert sig[:3].tolist() == [463664943, 1017523045, 1849277261]
    assert int(sig.max()) < 2**32  # 32-bit values
    keys = band_keys(sig, NEAR)
    assert len(keys) == 14 and {len(k) for k in keys} == {16}
    assert keys[0].hex() == "af2e13cce881bf5087c9ba3a46430013"


def test_signatures_equal_signature_one_by_one():
    texts = [
        "alpha beta gamma delta epsilon zeta eta theta",
        "",
        "!!!",
        "???",
        "two words",
        "大學之道，在明明德，在親民，在止於至善。",
        "alpha beta gamma delta epsilon",
        "one\u00a0two three four five six",
    ]
    batch = signatures(texts, NEAR)
    assert batch.shape == (len(texts), 112)
    for row, text in zip(batch, texts, strict=True):
        assert row.tolist() == signature(text, NEAR).tolist()
    assert signatures([], NEAR).shape == (0, 112)


def test_signatures_in_several_passes(monkeypatch):
    texts = [f"text number {i} has some words in it, {'more ' * (i % 7)}" for i in range(40)]
    whole = signatures(texts, NEAR)
    monkeypatch.setattr(duplicates, "PASS_CHARS", 100)  # passes of a few texts, one alone
    assert signatures(texts, NEAR).tolist() == whole.tolist()
    assert [signature(t, NEAR).tolist() for t in texts] == whole.tolist()


def test_short_and_empty_texts():
    # Fewer words than the n-gram size: the words as one shingle.
    assert signature("Two words", NEAR).tolist() == signature("two, WORDS!", NEAR).tolist()
    assert signature("two words", NEAR).tolist() != signature("words two", NEAR).tolist()
    # No word at all: the normalized text decides, so different punctuation stays apart.
    assert signature("", NEAR).tolist() == signature(" \n", NEAR).tolist()
    assert signature("!!!", NEAR).tolist() != signature("???", NEAR).tolist()
    assert signature("!!!", NEAR).tolist() != signature("", NEAR).tolist()


def test_signature_is_the_minhash_of_the_ngram_set():
    text = "a b c d e f g a b c d e f g h"
    spec = DedupSpec(mode="near", ngram=3, bands=4, rows=4)
    grams = ngram_hashes(text, 3)
    assert signature(text, spec).tolist() == minhash(grams, spec).tolist()
    assert minhash(np.unique(grams), spec).tolist() == minhash(grams, spec).tolist()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 9000), min_size=1, max_size=6), st.integers(0, 2**32))
def test_a_batch_across_minhash_blocks_is_the_minhash_of_each_set(sizes, seed):
    """Texts of up to 9,000 words in one batch: their n-grams run across the product's
    blocks of 4,096 (a text may start, span or end several), and each row is still the
    minimum over its own n-grams, computed here the plain way."""
    rnd = np.random.default_rng(seed)
    texts = [" ".join(f"w{v}" for v in rnd.integers(0, 50, size=n)) for n in sizes]
    a = fixed_constants("tw-minhash-a32", NEAR.num_hashes) >> np.uint64(32) | np.uint64(1)
    for text, got in zip(texts, signatures(texts, NEAR), strict=True):
        grams = ngram_hashes(text, NEAR.ngram)
        if len(grams) == 0:
            continue
        want = ((a[:, None] * (grams >> np.uint64(32))[None, :]) & np.uint64(2**32 - 1)).min(axis=1)
        assert got.tolist() == want.tolist()


def test_signature_prefix_is_stable_across_sizes():
    small = signature("the same text for both specs here", DedupSpec(mode="near", bands=2, rows=4))
    large = signature("the same text for both specs here", NEAR)
    assert small.tolist() == large[:8].tolist()


_HASHES = st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=200)


@given(_HASHES, st.randoms(use_true_random=False))
def test_signature_of_a_set_equals_that_of_its_shuffle(values, rnd):
    shuffled = list(values) + values[: len(values) // 3]
    rnd.shuffle(shuffled)
    a = minhash(np.array(values, dtype=np.uint64), NEAR)
    b = minhash(np.array(shuffled, dtype=np.uint64), NEAR)
    assert a.tolist() == b.tolist()


@settings(derandomize=True, max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 400),
    st.integers(0, 400),
    st.integers(0, 400),
)
def test_jaccard_estimate_within_the_standard_error(seed, common, only_a, only_b):
    """|estimate - J| <= 4·sqrt(J(1-J)/k) + 4/k over random 64-bit hash sets.

    The count of equal values is about Binomial(k, J): four standard deviations, plus four
    values for small J, where the normal approximation fails (J = 1/353 gave 4 equal values
    of 112, about 1 in 3,000, beyond 4σ + 1/k).
    """
    rng = np.random.default_rng(seed)
    pool = np.unique(rng.integers(0, 2**64, size=common + only_a + only_b, dtype=np.uint64))
    rng.shuffle(pool)
    common = min(common, len(pool))
    only_a = min(only_a, len(pool) - common)
    a = pool[: common + only_a]
    b = np.concatenate([pool[:common], pool[common + only_a :]])
    truth = common / len(pool)
    k = 112
    estimate = estimate_jaccard(minhash(a, NEAR), minhash(b, NEAR))
    assert abs(estimate - truth) <= 4 * math.sqrt(truth * (1 - truth) / k) + 4 / k


def test_jaccard_estimate_is_unbiased_over_many_pairs():
    rng = np.random.default_rng(7)
    errors = []
    for _ in range(200):
        pool = rng.integers(0, 2**64, size=300, dtype=np.uint64)
        a, b = pool[:200], pool[100:]
        errors.append(estimate_jaccard(minhash(a, NEAR), minhash(b, NEAR)) - 100 / 300)
    # 200 pairs × 112 values: the mean error's standard error is about 0.003.
    assert abs(float(np.mean(errors))) < 0.012


def test_estimate_jaccard_refuses_other_shapes():
    with pytest.raises(ValueError, match="one shape"):
        estimate_jaccard(np.zeros(3, np.uint64), np.zeros(4, np.uint64))


def test_band_keys():
    sig = signature("some text of several words in a row", NEAR)
    keys = band_keys(sig, NEAR)
    other = sig.copy()
    other[8:16] += np.uint64(1)  # the second band differs, every other band is equal
    changed = band_keys(other, NEAR)
    assert [a == b for a, b in zip(keys, changed, strict=True)] == [True, False] + [True] * 12
    # Equal values in different bands make different keys.
    flat = np.zeros(112, np.uint64)
    assert len(set(band_keys(flat, NEAR))) == 14
    with pytest.raises(ValueError, match=r"`sig` must have 112 values \(bands × rows\)"):
        band_keys(sig[:100], NEAR)


# -- near copies and far variants on real text ----------------------------------------------


def _passages(count: int, length: int = 300) -> list[list[str]]:
    """``count`` passages of ``length`` words of Persuasion (real English prose)."""
    with open(SAMPLES / "corpus" / "en_persuasion.jsonl", encoding="utf-8") as f:
        tokens = " ".join(json.loads(line)["text"] for line in f).split()
    step = len(tokens) // count
    return [tokens[i * step : i * step + length] for i in range(count)]


def _replace(tokens: list[str], positions: list[int], rnd: random.Random) -> list[str]:
    out = list(tokens)
    for p in positions:
        out[p] = rnd.choice(["zebra", "quantum", "harbour", "violet", "engine", "marble"])
        out[p] += str(rnd.randrange(1000))
    return out


def test_near_copies_share_a_band_and_far_variants_none():
    rnd = random.Random(41)
    header = "Posted on 12 March 2021 by the editors"
    footer = "Share this story. Comments (3)"
    for passage in _passages(20):
        text = " ".join(passage)
        near = _replace(passage, rnd.sample(range(len(passage)), 3), rnd)
        near_text = f"{header}\n\n{' '.join(near)}\n\n{footer}"
        far = _replace(passage, rnd.sample(range(len(passage)), len(passage) // 2), rnd)
        far_text = " ".join(far)
        sigs = signatures([text, near_text, far_text], NEAR)
        keys = [set(band_keys(s, NEAR)) for s in sigs]
        assert keys[0] & keys[1], "a near copy must share a band key"
        assert not keys[0] & keys[2], "a far variant must share none"
        assert estimate_jaccard(sigs[0], sigs[1]) > 0.75
        assert estimate_jaccard(sigs[0], sigs[2]) < 0.1


def _chinese_passages(count: int, length: int = 400) -> list[str]:
    """``count`` passages of ``length`` characters of 古文觀止 (classical Chinese prose)."""
    with open(SAMPLES / "corpus" / "zh_guwenguanzhi.jsonl", encoding="utf-8") as f:
        text = "".join(json.loads(line)["text"] for line in f)
    step = len(text) // count
    return [text[i * step : i * step + length] for i in range(count)]


def test_chinese_near_copies_share_a_band_and_far_variants_none():
    """One character a word: the same rule on text without spaces.

    400 characters are about 320 words (punctuation is not a word); 2 changed and a header
    and footer added is J of 0.90 to 0.93, which 14 × 8 misses less than once in 4,000 pairs.
    """
    rnd = random.Random(7)
    other = "天地玄黃宇宙洪荒日月盈昃辰宿列張寒來暑往秋收冬藏"
    for passage in _chinese_passages(20):
        chars = list(passage)
        near = list(chars)
        for p in rnd.sample(range(len(chars)), 2):
            near[p] = rnd.choice(other)
        far = list(chars)
        for p in rnd.sample(range(len(chars)), len(chars) // 2):
            far[p] = rnd.choice(other)
        near_text = "轉載自某網站。\n" + "".join(near) + "\n版權所有"
        sigs = signatures([passage, near_text, "".join(far)], NEAR)
        keys = [set(band_keys(s, NEAR)) for s in sigs]
        assert keys[0] & keys[1], "a near copy must share a band key"
        assert not keys[0] & keys[2], "a far variant must share none"


def test_different_passages_share_no_band():
    texts = [" ".join(p) for p in _passages(40)] + _chinese_passages(40)
    sigs = signatures(texts, NEAR)
    seen: dict[bytes, int] = {}
    for i, sig in enumerate(sigs):
        for key in band_keys(sig, NEAR):
            assert seen.setdefault(key, i) == i


# -- clusters -------------------------------------------------------------------------------


def test_components_and_keeper():
    edges = [("doc/c", "doc/b"), ("doc/b", "doc/a"), ("x", "y"), ("z", "z")]
    assert components(edges) == {
        "doc/a": "doc/a",
        "doc/b": "doc/a",
        "doc/c": "doc/a",
        "x": "x",
        "y": "x",
        "z": "z",
    }
    assert components([]) == {}
    assert keeper(["b.jsonl:10", "b.jsonl:9", "a.jsonl:99"]) == "a.jsonl:99"
    # Python's string order, not a numeric one.
    assert keeper(["f:10", "f:9"]) == "f:10"


_IDS = st.text(alphabet="abcdef", min_size=1, max_size=3)


@given(st.lists(_IDS, min_size=2, max_size=30, unique=True), st.randoms(use_true_random=False))
def test_a_chain_is_one_cluster_with_the_smallest_id(ids, rnd):
    edges = list(zip(ids, ids[1:], strict=False))
    rnd.shuffle(edges)
    edges = [(b, a) if rnd.random() < 0.5 else (a, b) for a, b in edges]
    assert components(edges) == {i: min(ids) for i in ids}


@given(st.lists(st.tuples(_IDS, _IDS), max_size=40), st.randoms(use_true_random=False))
def test_components_do_not_depend_on_edge_order(edges, rnd):
    expected = components(edges)
    shuffled = [(b, a) if rnd.random() < 0.5 else (a, b) for a, b in edges]
    rnd.shuffle(shuffled)
    assert components(shuffled) == expected
    # Each representative is the smallest member of its cluster, and its own representative.
    clusters: dict[str, list[str]] = {}
    for member, rep in expected.items():
        clusters.setdefault(rep, []).append(member)
    for rep, members in clusters.items():
        assert rep == keeper(members) and expected[rep] == rep
    # Every edge's ends are in one cluster.
    assert all(expected[a] == expected[b] for a, b in edges)


# -- batches of mixed-script texts -------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(WORD_TEXTS, max_size=8))
def test_a_batch_equals_its_texts_one_by_one(texts):
    spec = DedupSpec(mode="near", ngram=3, bands=4, rows=2)
    batch = signatures(texts, spec)
    for row, text in zip(batch, texts, strict=True):
        assert row.tolist() == signature(text, spec).tolist()
        if len(words(text)) >= 3:
            assert row.tolist() == minhash(ngram_hashes(text, 3), spec).tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(WORD_TEXTS, max_size=6), min_size=1, max_size=5))
def test_a_reused_scratch_changes_no_signature(batches):
    # One Scratch for batches of any sizes, larger and smaller than the last: its arrays
    # hold the previous batch's values, which must not reach the next one's signatures.
    spec = DedupSpec(mode="near", ngram=3, bands=4, rows=2)
    scratch = Scratch()
    for texts in batches:
        got = signatures(texts, spec, scratch=scratch)
        assert got.tolist() == signatures(texts, spec).tolist()


def test_a_scratch_keeps_no_array_longer_than_its_bound(monkeypatch):
    monkeypatch.setattr(Scratch, "KEEP", 64)
    texts = [(" ".join(f"w{i}" for i in range(n))) for n in (3, 40, 5)]
    scratch = Scratch()
    for text in texts:  # the middle one is past the bound, the others within it
        got = signatures([text], NEAR, scratch=scratch)
        assert got.tolist() == [signature(text, NEAR).tolist()]
    assert scratch._arrays and all(len(a) <= 64 for a in scratch._arrays.values())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=6, max_size=6), min_size=1, max_size=30))
def test_band_keys_are_equal_exactly_when_the_band_values_are(rows):
    # Few distinct values, so that equal bands are common; 3 bands of 2 rows.
    spec = DedupSpec(mode="near", bands=3, rows=2)
    sigs = np.array(rows, np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    keys = band_key_matrix(sigs, spec)
    assert keys.shape == (len(rows), 3)
    for i in range(len(rows)):
        for j in range(len(rows)):
            for b in range(3):
                same = rows[i][2 * b: 2 * b + 2] == rows[j][2 * b: 2 * b + 2]
                assert (keys[i, b].tobytes() == keys[j, b].tobytes()) == same
    # A band's key never equals another band's, even for equal values.
    flat = np.zeros((1, 6), np.uint64)
    k = band_key_matrix(flat, spec)
    assert len({k[0, b].tobytes() for b in range(3)}) == 3
