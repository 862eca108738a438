"""Tokenizers (SPEC §2)."""

import pathlib

import numpy as np
import pytest
import sentencepiece as spm

from transforms.tokenizers import ByteTokenizer, SentencePieceTokenizer, tokenizer_from_bytes

DATA = pathlib.Path(__file__).parent / "data"


def test_bytes_tokenizer():
    tok = ByteTokenizer()
    z = tok.encode("abcde")
    assert z.dtype == np.int32
    assert z.tolist() == [256, 97, 98, 99, 100, 101, 257]
    assert tok.encode("").tolist() == [256, 257]
    assert tok.encode("道").tolist() == [256, 0xE9, 0x81, 0x93, 257]
    assert tok.info() == {"kind": "bytes", "vocab_size": 258, "bos_id": 256, "eos_id": 257,
                          "sha256": None}


def test_sentencepiece_matches_the_library():
    model = (DATA / "tiny.model").read_bytes()
    tok = SentencePieceTokenizer(model, where="tiny.model")
    ref = spm.SentencePieceProcessor(model_file=str(DATA / "tiny.model"))
    texts = ["The fox saw the grapes.", "道可道，非常道。", ""]
    for text, z in zip(texts, tok.encode_batch(texts), strict=True):
        assert z.dtype == np.int32
        assert z.tolist() == [ref.bos_id()] + ref.encode(text) + [ref.eos_id()]
    assert (tok.bos_id, tok.eos_id, tok.vocab_size) == (1, 2, 500)
    assert len(tok.info()["sha256"]) == 64


def test_model_without_bos_eos_is_refused():
    with pytest.raises(ValueError, match="no BOS id; retrain it with --bos_id"):
        tokenizer_from_bytes((DATA / "no_bos_eos.model").read_bytes(), where="no_bos_eos.model")


def test_garbage_model_is_refused():
    with pytest.raises(ValueError, match="x.model is not a SentencePiece model"):
        tokenizer_from_bytes(b"not a model", where="x.model")


def test_sentencepiece_batches_with_threads_give_the_same_ids():
    model = (DATA / "tiny.model").read_bytes()
    texts = [f"The fox saw {i} grapes." * (i % 5) for i in range(200)] + ["道可道，非常道。", ""]
    one = SentencePieceTokenizer(model, where="tiny.model", num_threads=1).encode_batch(texts)
    two = SentencePieceTokenizer(model, where="tiny.model", num_threads=2).encode_batch(texts)
    assert [z.tolist() for z in one] == [z.tolist() for z in two]
    assert all(z[0] == 1 and z[-1] == 2 and z.dtype == np.int32 for z in one)
