"""Byte-level BPE tokenizer.json files of each layout, trained on the bundled samples, and the
texts the engine's differential tests draw (also used by bench/bench_bpe_engines.py)."""

from __future__ import annotations

import json

import tokenizers
from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from tests.common.paths import SAMPLES
from transforms.tokenize.bpe_engine import convert, merged_alone
from transforms.tokenize.bpe_patterns import LLAMA3_PATTERN, QWEN2_PATTERN

SPECIAL = ["<s>", "</s>", "<|endoftext|>"]


TEXTS = [json.loads(line)["text"] for f in sorted((SAMPLES / "corpus").glob("*.jsonl"))
         for line in f.read_text(encoding="utf-8").splitlines()]


def train(layout: str, vocab_size: int = 1500) -> str:
    """A tokenizer.json of ``layout`` trained on the bundled samples, as text."""
    tok = Tokenizer(models.BPE(ignore_merges=layout in ("llama3", "qwen2")))
    level = pre_tokenizers.ByteLevel(add_prefix_space=layout == "prefix", use_regex=True)
    if layout in ("llama3", "qwen2"):  # the models' own Split regex (test_bpe_patterns.py)
        split = LLAMA3_PATTERN if layout == "llama3" else QWEN2_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = level
    if layout in ("nfc", "nfkc"):
        tok.normalizer = normalizers.NFC() if layout == "nfc" else normalizers.NFKC()
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXTS[::3], trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if layout == "nfkc":  # a normalized, non-special added token: matched after NFKC
        tok.add_tokens([tokenizers.AddedToken("ﬁnal word", normalized=True)])
    return tok.to_str()


def convert_judged(text: str):
    """`convert` judged by tokenizers, as the engine does it."""
    tok = Tokenizer.from_str(text)
    spec = json.loads(text)
    return convert(spec, lambda strings: merged_alone(tok, spec, strings))


PIECES = st.sampled_from([
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u3000", "\u00a0", "\u2028",
    "'s", "'S", "'ll", "'LL", "'ve", "'re", "'d", "'m", "'t", "n't", "'", "''",
    "0", "7", "42", "123", "1234", "98765", "٣", "१२",
    "the", "The", " the", "cat", "elizabeth", "Mr.", "Darcy", "it's", "I'M",
    "道", "可道", "非常道。", "，", "こんにちは", "안녕", "Привет", "שלום", "مرحبا", "नमस्ते",
    "😀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "e\u0301", "ﬁ", "Å", "Ａ", "\u212a",
    "<s>", "</s>", "<|endoftext|>", "<|endof", "ﬁnal word", "final word",
    "!", "?!", "...", "—", "“", "(", ")", "#", "$", "%", "_", "\\", "\x00", "\ufeff",
])


TEXT = st.one_of(
    st.lists(PIECES, max_size=40).map("".join),
    st.text(max_size=60),
    st.lists(st.one_of(PIECES, st.text(max_size=5)), max_size=30).map("".join),
    st.builds(lambda n, c: c * n, st.integers(0, 300), st.sampled_from([" ", "\n", "\t", "a"])),
)
