"""Rebuild the tiny SentencePiece fixtures: ``python tests/data/make_models.py``.

``tiny.model`` (unigram, 500 pieces, BOS 1, EOS 2) and ``no_bos_eos.model`` (the same text,
BOS and EOS disabled, which the job must refuse) are trained on ``tiny_corpus.txt``.
"""

import io
import pathlib

import sentencepiece as spm

HERE = pathlib.Path(__file__).parent


def train(name: str, **extra: int) -> None:
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        input=str(HERE / "tiny_corpus.txt"),
        model_writer=out,
        model_type="unigram",
        vocab_size=500,
        character_coverage=1.0,
        byte_fallback=True,
        num_threads=1,
        shuffle_input_sentence=False,
        minloglevel=2,
        normalization_rule_name="identity",
        **extra,
    )
    (HERE / name).write_bytes(out.getvalue())


if __name__ == "__main__":
    train("tiny.model", unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    train("no_bos_eos.model", unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1)
