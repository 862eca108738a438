"""Tokenizers: text → ``z = [BOS, x1 … xn, EOS]`` as an int32 array (SPEC §2).

* ``bytes``: the UTF-8 bytes 0..255, BOS = 256, EOS = 257, vocabulary 258; needs no file.
* SentencePiece: a ``*.model`` file's bytes; BOS and EOS are the model's own ids, and a
  model without them is refused.

Example: ``ByteTokenizer().encode("abcde")`` is ``[256, 97, 98, 99, 100, 101, 257]``.

Models arrive as bytes (the pipeline reads them through Beam's FileSystems, so ``gs://``
works); nothing here touches a file system.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "BYTES",
    "ByteTokenizer",
    "SentencePieceTokenizer",
    "Tokenizer",
    "tokenizer_from_bytes",
]

BYTES = "bytes"


class Tokenizer(Protocol):
    """What the pipeline needs of a tokenizer."""

    kind: str
    vocab_size: int
    bos_id: int
    eos_id: int
    sha256: str | None

    def encode(self, text: str) -> npt.NDArray[np.int32]:
        """``[BOS] + ids(text) + [EOS]`` as int32."""
        ...

    def encode_batch(self, texts: Sequence[str]) -> list[npt.NDArray[np.int32]]:
        """``encode`` of each text."""
        ...

    def info(self) -> dict[str, Any]:
        """The manifest's ``tokenizer`` object."""
        ...


class ByteTokenizer:
    """UTF-8 bytes as ids, with BOS 256 and EOS 257."""

    kind = BYTES
    vocab_size = 258
    bos_id = 256
    eos_id = 257
    sha256 = None

    def encode(self, text: str) -> npt.NDArray[np.int32]:
        body = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        z = np.empty(len(body) + 2, dtype=np.int32)
        z[0], z[-1] = self.bos_id, self.eos_id
        z[1:-1] = body
        return z

    def encode_batch(self, texts: Sequence[str]) -> list[npt.NDArray[np.int32]]:
        return [self.encode(t) for t in texts]

    def info(self) -> dict[str, Any]:
        return _info(self)


class SentencePieceTokenizer:
    """A SentencePiece model loaded from the bytes of its ``.model`` file.

    Args:
        model: the serialized model.
        where: the model's path, for error messages.
        num_threads: threads for batch encoding.

    Raises:
        ValueError: the bytes are not a SentencePiece model, or it has no BOS or EOS.
    """

    kind = "sentencepiece"

    def __init__(self, model: bytes, *, where: str, num_threads: int = 1) -> None:
        import sentencepiece as spm

        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(model)
        except (RuntimeError, OSError, TypeError) as e:
            raise ValueError(
                f"--tokenizer {where} is not a SentencePiece model ({e}); pass a *.model "
                "file written by spm_train, or --tokenizer bytes"
            ) from e
        self.vocab_size = int(self._sp.GetPieceSize())
        self.bos_id = int(self._sp.bos_id())
        self.eos_id = int(self._sp.eos_id())
        for name, value in (("BOS", self.bos_id), ("EOS", self.eos_id)):
            if value < 0:
                raise ValueError(
                    f"--tokenizer {where} has no {name} id; retrain it with "
                    f"--{name.lower()}_id set (e.g. spm_train --bos_id=1 --eos_id=2)"
                )
        self.sha256 = hashlib.sha256(model).hexdigest()
        self._num_threads = num_threads

    def encode(self, text: str) -> npt.NDArray[np.int32]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[npt.NDArray[np.int32]]:
        # SentencePiece adds BOS and EOS itself and hands back int32 arrays over its own
        # buffers: no copy per document. Each text is encoded on its own, so the result does
        # not depend on the batch or the thread count.
        return self._sp.encode(
            texts if isinstance(texts, list) else list(texts),
            out_type="numpy",
            add_bos=True,
            add_eos=True,
            num_threads=self._num_threads,
        )

    def info(self) -> dict[str, Any]:
        return _info(self)


def _info(tok: Tokenizer) -> dict[str, Any]:
    return {
        "kind": tok.kind,
        "vocab_size": tok.vocab_size,
        "bos_id": tok.bos_id,
        "eos_id": tok.eos_id,
        "sha256": tok.sha256,
    }


def tokenizer_from_bytes(model: bytes | None, *, where: str, num_threads: int = 1) -> Tokenizer:
    """The bytes tokenizer when ``model`` is None, else a SentencePiece model."""
    if model is None:
        return ByteTokenizer()
    return SentencePieceTokenizer(model, where=where, num_threads=num_threads)
