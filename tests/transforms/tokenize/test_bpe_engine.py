"""The tiktoken engine for byte-level BPE tokenizer.json files: ids equal tokenizers' on
every text, or the file stays on tokenizers (docs/tokenizers.md#engines)."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest

tokenizers = pytest.importorskip("tokenizers", reason="the hf extra (tokenizers) is not installed")
pytest.importorskip("tiktoken", reason="tiktoken is not installed")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, trainers  # noqa: E402,I001

from tests.common.bpe import SPECIAL, TEXT, TEXTS, convert_judged, train  # noqa: E402
from transforms.tokenize.bpe_engine import PROBE, byte_decoder, convert  # noqa: E402
from transforms.tokenize.bpe_patterns import (  # noqa: E402
    GPT2_FAST,
    LLAMA3_FAST,
    QWEN2_FAST,
)
from transforms.tokenize.tokenizers import HFTokenizer  # noqa: E402


def _shuffled_ids(text: str) -> str:
    """The same tokenizer with its merged tokens' ids reversed: ids no longer follow the
    merges' order, so the engine must map tiktoken's ranks back to the file's ids."""
    spec = json.loads(text)
    vocab = spec["model"]["vocab"]
    merged = sorted((t for t in vocab if vocab[t] >= len(SPECIAL) + 256), key=vocab.__getitem__)
    for token, new in zip(merged, sorted((vocab[t] for t in merged), reverse=True), strict=True):
        vocab[token] = new
    return json.dumps(spec)


LAYOUTS = ["gpt2", "llama3", "qwen2", "prefix", "nfc", "nfkc", "shuffled"]


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    out = {layout: train(layout) for layout in LAYOUTS if layout != "shuffled"}
    out["shuffled"] = _shuffled_ids(out["gpt2"])
    return out


def _pair(text: str) -> tuple[HFTokenizer, Tokenizer]:
    fast = HFTokenizer(text.encode(), where="t/tokenizer.json", bos_token="<s>",
                       eos_token="</s>", engine="tiktoken")
    return fast, Tokenizer.from_str(text)


def _same(fast: HFTokenizer, ref: Tokenizer, texts: list[str]) -> None:
    want = [ref.encode(t, add_special_tokens=False).ids for t in texts]
    got = [z[1:-1].tolist() for z in fast.encode_batch(texts)]
    for text, g, w in zip(texts, got, want, strict=True):
        assert g == w, text[:80]


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_converts_and_gives_tokenizers_ids_on_the_samples(files, layout):
    fast, ref = _pair(files[layout])
    assert fast.engine == "tiktoken" and fast.info().engine == "tiktoken"
    texts = TEXTS[::2] + [PROBE, "", " ", "\n", "<s>x</s>", "a<|endoftext|>b", "ﬁnal word!"]
    _same(fast, ref, texts)
    fast2 = HFTokenizer(files[layout].encode(), where="t", bos_token="<s>", eos_token="</s>",
                        num_threads=3, engine="tiktoken")
    assert [z.tolist() for z in fast2.encode_batch(texts)] == [
        z.tolist() for z in fast.encode_batch(texts)]
    assert fast2.encode_batch([]) == [] and fast2.encode_batch(texts[:1])[0].tolist() == (
        fast.encode(texts[0]).tolist())


def test_the_shuffled_file_really_needs_the_id_map(files):
    assert convert_judged(files["shuffled"]).rank_ids is not None
    assert convert_judged(files["gpt2"]).rank_ids is None


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=300, deadline=None)
@given(texts=st.lists(TEXT, min_size=1, max_size=8))
def test_every_layout_gives_tokenizers_ids_on_generated_text(files, layout, texts):
    fast, ref = _engines(files, layout)
    _same(fast, ref, texts)


_CACHE: dict[str, tuple[HFTokenizer, Tokenizer]] = {}


def _engines(files, layout):
    if layout not in _CACHE:
        _CACHE[layout] = _pair(files[layout])
    return _CACHE[layout]


# ------------------------------------------------------------ files that stay on tokenizers


def _edit(text: str, **changes) -> str:
    spec = json.loads(text)
    for path, value in changes.items():
        where = spec
        *head, last = path.split("__")
        for key in head:
            where = where[key]
        where[last] = value
    return json.dumps(spec)


@pytest.mark.parametrize(("change", "reason"), [
    ({"model__dropout": 0.1}, "the model has dropout 0.1"),
    ({"model__byte_fallback": True}, "the model has byte_fallback"),
    ({"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                        "split": True}}, "its pre-tokenizer is Metaspace"),
    ({"pre_tokenizer": {"type": "Whitespace"}}, "its pre-tokenizer is Whitespace"),
    ({"normalizer": {"type": "Lowercase"}}, "its normalizer is Lowercase"),
    ({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                        "use_regex": False}}, "its ByteLevel pre-tokenizer has use_regex false"),
    ({"truncation": {"direction": "Right", "max_length": 8, "strategy": "LongestFirst",
                     "stride": 0}}, "it sets truncation"),
])
def test_files_that_do_not_convert_stay_on_tokenizers(files, change, reason, caplog):
    text = _edit(files["gpt2"], **change)
    with caplog.at_level(logging.INFO, logger="token_windows"):
        auto = HFTokenizer(text.encode(), where="t.json", bos_token="<s>", eos_token="</s>")
    assert auto.engine == "tokenizers" and auto.info().engine == "tokenizers"
    assert reason in caplog.text
    with pytest.raises(ValueError, match=r"^--tokenizer-engine tiktoken cannot encode t.json: "
                                         + re.escape(reason)):
        HFTokenizer(text.encode(), where="t.json", bos_token="<s>", eos_token="</s>",
                    engine="tiktoken")
    if not {"model__dropout", "truncation"} & set(change):  # random or cut ids
        ref = Tokenizer.from_str(text)
        _same(auto, ref, TEXTS[:20] + [PROBE])


@pytest.mark.parametrize("key", ["continuing_subword_prefix", "end_of_word_suffix"])
def test_subword_affixes_do_not_convert(files, key):
    # (tokenizers cannot load the edited file: its merges lack the affixed tokens)
    text = _edit(files["gpt2"], **{f"model__{key}": "##"})
    assert convert(text, lambda s: []) == f"the model has {key} '##'"


def test_a_wordpiece_file_stays_on_tokenizers():
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(TEXTS[:50], trainers.WordPieceTrainer(
        vocab_size=300, special_tokens=["[UNK]", "<s>", "</s>"], show_progress=False))
    auto = HFTokenizer(tok.to_str().encode(), where="w.json", bos_token="<s>", eos_token="</s>")
    assert auto.engine == "tokenizers"
    assert auto.encode("The fox").tolist()[1:-1] == tok.encode("The fox").ids
    with pytest.raises(ValueError, match="its model is WordPiece, not BPE"):
        HFTokenizer(tok.to_str().encode(), where="w.json", bos_token="<s>", eos_token="</s>",
                    engine="tiktoken")


# ------------------------------------------------- hand-made merges that tiktoken would not follow


def _hand_made(merges: list[str], *, ignore_merges: bool = False) -> str:
    """A ByteLevel BPE over the 256 byte characters plus the merges' tokens."""
    vocab = {c: i for i, c in enumerate(sorted(byte_decoder(), key=byte_decoder().get))}
    for m in merges:
        vocab.setdefault(m.replace(" ", ""), len(vocab))
    vocab["<s>"], vocab["</s>"] = len(vocab), len(vocab) + 1
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for t in ("<s>", "</s>")],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
                  "vocab": vocab, "merges": merges}})


# "bc" merges before "ab", so BPE of "abc" stops at [a, bc]: a naive table (every token a
# rank) would let tiktoken merge a + bc into "abc", which tokenizers never outputs.
TRAP = ["b c", "a b", "ab c", "abc d"]


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="abcd <>/s", max_size=30))
def test_a_token_bpe_never_makes_is_left_out_and_ids_still_match(text):
    fast, ref = _engines({"trap": _hand_made(TRAP)}, "trap")
    assert fast.engine == "tiktoken"
    _same(fast, ref, [text, "abc", "abcd", "abcabc"])


def test_the_trap_would_catch_a_naive_table():
    ref = Tokenizer.from_str(_hand_made(TRAP))
    assert ref.encode("abc").tokens == ["a", "bc"]  # not "abc"


def test_ignore_merges_with_a_token_bpe_stops_short_of_is_refused():
    text = _hand_made(TRAP, ignore_merges=True)
    reason = convert_judged(text)
    assert reason == ("BPE of its token 'abc' stops at ['a', 'bc'], two tokens that "
                      "concatenate to it without a merge, which tiktoken would merge")
    assert HFTokenizer(text.encode(), where="t", bos_token="<s>", eos_token="</s>"
                       ).engine == "tokenizers"


def test_two_merges_of_one_token_are_refused():
    text = _hand_made(["a b", "b c", "ab c", "a bc"])
    assert convert_judged(text) == (
        "two merges make the token 'abc' (merges 2 and 3), which tiktoken's one rank per "
        "token cannot order")


def test_a_disagreement_on_the_probe_falls_back_with_a_warning(files, monkeypatch, caplog):
    from transforms.tokenize import bpe_engine

    real = bpe_engine.TiktokenEngine.encode
    monkeypatch.setattr(bpe_engine.TiktokenEngine, "encode",
                        lambda self, text: real(self, text)[::-1])
    with caplog.at_level(logging.WARNING, logger="token_windows"):
        tok = HFTokenizer(files["gpt2"].encode(), where="t.json", bos_token="<s>",
                          eos_token="</s>")
    assert tok.engine == "tokenizers"
    assert "tiktoken's ids differ from tokenizers' on \"The quick brown fox" in caplog.text
    with pytest.raises(ValueError, match="tiktoken cannot encode t.json: tiktoken's ids differ"):
        HFTokenizer(files["gpt2"].encode(), where="t.json", bos_token="<s>", eos_token="</s>",
                    engine="tiktoken")


# ------------------------------------------------------------ the array path


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(text=TEXT)
def test_the_buffer_encode_is_tiktokens_ordinary_encode(files, text):
    """Alone, a text is encoded from tiktoken's buffer with its special token (the batch
    separator) not allowed, so nothing is split out: that must be ``encode_ordinary``, even
    where the separator's text is in the text."""
    from transforms.tokenize.bpe_engine import _NONE_ALLOWED, _SEP

    fast, ref = _engines(files, "gpt2")
    core = fast._fast._core
    for t in (text, f"{text}{_SEP}{text}", _SEP):
        got = np.frombuffer(core.encode_to_tiktoken_buffer(t, _NONE_ALLOWED), np.uint32)
        assert got.tolist() == core.encode_ordinary(t)
        assert fast.encode(t)[1:-1].tolist() == ref.encode(t, add_special_tokens=False).ids


@pytest.mark.parametrize(("layout", "pattern"), [
    ("gpt2", GPT2_FAST), ("llama3", LLAMA3_FAST), ("qwen2", QWEN2_FAST), ("nfc", GPT2_FAST)])
def test_tiktoken_runs_the_fast_form_of_the_files_pattern(files, layout, pattern, monkeypatch):
    """So every differential test of these layouts runs the fast form through tiktoken's own
    regex engine (the forms' matches: tests/transforms/tokenize/test_bpe_patterns.py)."""
    import tiktoken

    from transforms.tokenize.bpe_engine import _core

    given, real = [], tiktoken.Encoding
    monkeypatch.setattr(tiktoken, "Encoding",
                        lambda *a, **k: given.append(k["pat_str"]) or real(*a, **k))
    _core(convert_judged(files[layout]))
    assert given == [pattern]


@pytest.mark.parametrize("layout", ["gpt2", "llama3", "shuffled", "nfkc"])
def test_a_batch_is_encoded_joined_and_cut_apart_exactly(files, layout, monkeypatch):
    """A batch goes to tiktoken as one text joined by its separator: empty texts, texts at
    the batch's ends, texts holding the separator or an added token (encoded alone, in
    their place), an added token only spanning a join; a lone surrogate goes to tokenizers
    (which refuses it)."""
    from transforms.tokenize.bpe_engine import _SEP

    fast, ref = _engines(files, layout)
    texts = ["", "a  \n", " b", "", f"x{_SEP}y", "c<|endoftext|>d", "<|endof", "text|>e", "",
             "ﬁnal word", "\n\n", TEXTS[0], ""]
    for batch in (texts, texts[1:3], [""], [_SEP], ["<|endof", "text|>"], []):
        got = fast._fast.encode_batch(batch, bos=-7, eos=-9)
        assert [z.dtype for z in got] == [np.dtype(np.int32)] * len(batch)
        assert [z.tolist() for z in got] == [
            [-7, *ref.encode(t, add_special_tokens=False).ids, -9] for t in batch]
    with pytest.raises(TypeError, match="TextInputSequence must be str"):
        fast._fast.encode_batch(["a", "\ud800"], bos=-7, eos=-9)
    # Only the texts holding the separator or an added token went alone (all of them with a
    # normalizer).
    alone, real = [], type(fast._fast).encode_array
    monkeypatch.setattr(type(fast._fast), "encode_array",
                        lambda self, t: alone.append(t) or real(self, t))
    fast._fast.encode_batch(texts, bos=-7, eos=-9)
    assert alone == (texts if layout == "nfkc" else [f"x{_SEP}y", "c<|endoftext|>d"])


@pytest.mark.parametrize("layout", ["shuffled", "llama3", "nfkc"])
def test_the_array_path_maps_ids_checks_gaps_and_splits_added_tokens(files, layout):
    """The three array steps beyond tiktoken's buffer: ranks → the file's ids, the coverage
    check of a Split pattern, added tokens between pieces; exact ids, as int32 with BOS/EOS."""
    fast, ref = _engines(files, layout)
    texts = ["x<|endoftext|>y </s>\n\n  ﬁnal word", "\x00\ufeff a\u2028b", "", "<s>"]
    for t in texts:
        z = fast.encode(t)
        assert z.dtype == np.int32 and z[0] == fast.bos_id and z[-1] == fast.eos_id
        assert z[1:-1].tolist() == ref.encode(t, add_special_tokens=False).ids


def test_another_core_runs_inside_the_engine(files):
    """`TiktokenEngine` takes any core with tiktoken's buffer call (how bench/bench_bpe_engines.py
    runs riptoken): everything around the core (added tokens, the batch's separator, ranks →
    ids) is the engine's, so the ids are still tokenizers'."""
    from transforms.tokenize.bpe_engine import _SEP_ALLOWED, TiktokenEngine, _core

    calls = []

    class Recording:
        def __init__(self, core):
            self._core = core

        def encode_to_tiktoken_buffer(self, text, allowed):
            calls.append(allowed)
            return self._core.encode_to_tiktoken_buffer(text, allowed)

    tables = convert_judged(files["shuffled"])
    ref = Tokenizer.from_str(files["shuffled"])
    engine = TiktokenEngine(tables, normalize=None, core=Recording(_core(tables)),
                            fallback=lambda t: ref.encode(t, add_special_tokens=False).ids)
    texts = ["a<|endoftext|>b  c", TEXTS[0], "", "\n\n x"]
    got = engine.encode_batch(texts, bos=-7, eos=-9)
    assert [z.tolist() for z in got] == [
        [-7, *ref.encode(t, add_special_tokens=False).ids, -9] for t in texts]
    assert engine.encode(TEXTS[1]) == ref.encode(TEXTS[1], add_special_tokens=False).ids
    # The batch joined once (the separator allowed), the added token's two pieces, TEXTS[1].
    assert len(calls) == 4 and calls.count(_SEP_ALLOWED) == 1
