"""Tokenizers: text → ``z = [BOS, x1 … xn, EOS]`` as an int32 array (docs/format.md#tokens).

* ``bytes``: the UTF-8 bytes 0..255, BOS = 256, EOS = 257, vocabulary 258; needs no file.
* SentencePiece: a ``*.model`` file's bytes; BOS and EOS are the model's own ids, and a
  model without them is refused.
* Hugging Face ``tokenizers``: a ``tokenizer.json`` file's bytes; BOS and EOS are token
  strings (``--bos-token``/``--eos-token``, else the ``bos_token``/``eos_token`` of the
  ``tokenizer_config.json`` beside it), one token may serve as both (GPT-2's
  ``<|endoftext|>``), and a tokenizer without them is refused. The ids between BOS and EOS
  are ``Tokenizer.encode(text, add_special_tokens=False).ids``: the file's own post-processor
  (which may add BOS itself) is not applied, so no document gets two.

Example: ``ByteTokenizer().encode("abcde")`` is ``[256, 97, 98, 99, 100, 101, 257]``.

Models arrive as bytes (the pipeline reads them through Beam's FileSystems, so ``gs://``
works); nothing here touches a file system. `TokenizerSpec` is what a job names: the path and
the BOS/EOS token strings; `is_hf_tokenizer` tells the two file kinds apart by name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import posixpath
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from transforms.dataset.manifest import TokenizerInfo
from transforms.tokenize.bpe_engine import (
    ENGINES,
    PROBE,
    BpeTables,
    TiktokenEngine,
    convert,
    first_difference,
    merged_alone,
    with_ends,
)

__all__ = [
    "BYTES",
    "HF_CONFIG_NAME",
    "ByteTokenizer",
    "HFTokenizer",
    "SentencePieceTokenizer",
    "Tokenizer",
    "TokenizerSpec",
    "first_line",
    "hf_config_path",
    "hf_special_tokens",
    "is_hf_tokenizer",
    "tokenizer_failed",
    "tokenizer_from_bytes",
]

_LOG = logging.getLogger("token_windows")

BYTES = "bytes"
HF = "huggingface"
# Where Hugging Face keeps a tokenizer's special tokens, beside its tokenizer.json.
HF_CONFIG_NAME = "tokenizer_config.json"
# A loaded tokenizer.json must encode this text, or it is refused before any work.
LOAD_PROBE = "Hello, world! 123\n"


def tokenizer_failed(error: BaseException) -> bool:
    """Whether ``error``, raised while loading or encoding, is the tokenizer's own failure:
    an ``Exception``, or a panic of a Rust library (``pyo3_runtime.PanicException``, which
    derives from ``BaseException`` alone); never ``KeyboardInterrupt``, ``SystemExit`` or
    ``GeneratorExit``."""
    kind = type(error)
    return isinstance(error, Exception) or (
        kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime")


def first_line(error: BaseException) -> str:
    """``Type: the first line of its message`` (a Rust panic's, not its backtrace)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else 'no message'}"


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    """The tokenizer a job names: a file (None: bytes) and, for a ``tokenizer.json``, the
    BOS and EOS token strings (None: from its ``tokenizer_config.json``) and the engine
    (``--tokenizer-engine``: auto, tokenizers or tiktoken)."""

    path: str | None
    bos_token: str | None = None
    eos_token: str | None = None
    engine: str = "auto"


def is_hf_tokenizer(path: str) -> bool:
    """Whether ``path`` names a Hugging Face ``tokenizer.json`` (else a SentencePiece model)."""
    return path.lower().endswith(".json")


def hf_config_path(path: str) -> str | None:
    """The ``tokenizer_config.json`` beside a ``tokenizer.json`` (None for other kinds); any
    file system's path: ``gs://b/m/tokenizer.json`` → ``gs://b/m/tokenizer_config.json``."""
    if not is_hf_tokenizer(path):
        return None
    return path.rsplit("/", 1)[0] + "/" + HF_CONFIG_NAME if "/" in path else HF_CONFIG_NAME


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

    def info(self) -> TokenizerInfo:
        """The manifest's ``tokenizer`` record."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (BOS and EOS shown as the tokenizer spells them)."""
        ...


class ByteTokenizer:
    """UTF-8 bytes as ids, with BOS 256 and EOS 257."""

    kind = BYTES
    vocab_size = 258
    bos_id = 256
    eos_id = 257
    sha256 = None

    def encode(self, text: str) -> npt.NDArray[np.int32]:
        return with_ends(np.frombuffer(text.encode("utf-8"), dtype=np.uint8), self.bos_id,
                         self.eos_id)

    def encode_batch(self, texts: Sequence[str]) -> list[npt.NDArray[np.int32]]:
        return [self.encode(t) for t in texts]

    def info(self) -> TokenizerInfo:
        return _info(self)

    def decode(self, ids: Sequence[int]) -> str:
        out, body = [], bytearray()
        for i in ids:
            if 0 <= i < 256:
                body.append(i)
                continue
            out.append(body.decode("utf-8", errors="replace"))
            body.clear()
            out.append({self.bos_id: "<bos>", self.eos_id: "<eos>"}.get(i, f"<{i}>"))
        out.append(body.decode("utf-8", errors="replace"))
        return "".join(out)


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
        self.path = where
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

    def info(self) -> TokenizerInfo:
        return _info(self)

    def decode(self, ids: Sequence[int]) -> str:
        # SentencePiece drops BOS and EOS when decoding; show them, as the other kinds do.
        ids = list(ids)
        head = "<s>" if ids[:1] == [self.bos_id] else ""
        tail = "</s>" if len(ids) > len(head) and ids[-1] == self.eos_id else ""
        body = ids[bool(head) : len(ids) - bool(tail)]
        return head + self._sp.decode(body) + tail


class HFTokenizer:
    """A Hugging Face ``tokenizers`` tokenizer loaded from the bytes of its ``tokenizer.json``.

    Args:
        data: the file's bytes.
        where: its path, for error messages and the manifest.
        bos_token, eos_token: the BOS and EOS token strings (may be the same token).
        num_threads: above 1, a batch is encoded on several threads: with ``tokenizers``,
            through ``encode_batch_fast``, which encodes each text on its own on the
            library's thread pool; with tiktoken, in this many slices at once. 1 encodes on
            the calling thread. The ids are the same either way.
        engine: ``auto`` encodes with tiktoken when the file converts to it exactly and the
            self-check agrees (`transforms.tokenize.bpe_engine`), else with ``tokenizers``;
            ``tokenizers`` always uses the library; ``tiktoken`` refuses a file that does not
            convert. The ids are ``tokenizers``' with every engine.

    Raises:
        ValueError: the bytes are not a tokenizer.json, a token is missing, or it is not in
            the vocabulary; or ``engine`` is ``tiktoken`` and the file does not convert.
    """

    kind = HF

    def __init__(self, data: bytes, *, where: str, bos_token: str | None,
                 eos_token: str | None, num_threads: int = 1, engine: str = "auto") -> None:
        if engine not in ENGINES:
            raise ValueError(f"`tokenizer_engine` must be one of {', '.join(ENGINES)}, but got "
                             f"{engine!r}")
        try:
            import tokenizers
        except ImportError as e:
            raise ValueError(
                f"--tokenizer {where} needs the Hugging Face tokenizers library: pip install "
                "'token-windows[hf]' (on Dataflow or Flink workers too: --requirements_file, "
                "or an image that has it)"
            ) from e

        try:
            self._tok = tokenizers.Tokenizer.from_str(data.decode("utf-8"))
        except BaseException as e:  # a plain Exception on a bad file, or a Rust panic
            if not tokenizer_failed(e):
                raise
            raise ValueError(
                f"--tokenizer {where} is not a Hugging Face tokenizer.json "
                f"({str(e).splitlines()[0] if str(e) else type(e).__name__}); pass the "
                "tokenizer.json that tokenizers.Tokenizer.save wrote"
            ) from e
        ids = {}
        for name, token in (("bos", bos_token), ("eos", eos_token)):
            if token is None:
                raise ValueError(
                    f"--tokenizer {where} has no {name.upper()} token: pass --{name}-token "
                    f"(e.g. --{name}-token '<|endoftext|>'; one token may be both), or put a "
                    f"{HF_CONFIG_NAME} naming {name}_token beside it"
                )
            ids[name] = self._tok.token_to_id(token)
            if ids[name] is None:
                raise ValueError(
                    f"--{name}-token {token!r} is not a token of {where}; pass one of its "
                    "special tokens (its added_tokens)"
                )
        self.bos_id, self.eos_id = int(ids["bos"]), int(ids["eos"])
        self.bos_token, self.eos_token = bos_token, eos_token
        self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.path = where
        self._num_threads = num_threads
        self._fast = None if engine == "tokenizers" else _fast_engine(
            data, self._tok, where=where, pinned=engine == "tiktoken")
        self.engine = "tokenizers" if self._fast is None else "tiktoken"
        # tiktoken's threads (it releases the GIL while it encodes); made here, not on first
        # use, as several threads may encode batches at once.
        self._pool = (ThreadPoolExecutor(num_threads, thread_name_prefix="tiktoken")
                      if self._fast is not None and num_threads > 1 else None)
        try:  # a tokenizer that cannot encode plain text is refused now, not document by document
            self.encode_batch([LOAD_PROBE])
        except BaseException as e:
            if not tokenizer_failed(e):
                raise
            raise ValueError(
                f"--tokenizer {where} fails to encode the text {LOAD_PROBE!r} "
                f"({first_line(e)}); it cannot be used: fix it, or pass another tokenizer"
            ) from None

    def encode(self, text: str) -> npt.NDArray[np.int32]:
        if self._fast is not None:
            return self._wrap(self._fast.encode_array(text))
        return self._wrap(self._tok.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[npt.NDArray[np.int32]]:
        texts = texts if isinstance(texts, list) else list(texts)
        if self._fast is None:
            if self._num_threads > 1:  # tokenizers, on its own thread pool
                encoded = self._tok.encode_batch_fast(texts, add_special_tokens=False)
                return [self._wrap(e.ids) for e in encoded]
            return [self.encode(t) for t in texts]
        if self._pool is None or len(texts) < 2:
            return self._fast.encode_batch(texts, bos=self.bos_id, eos=self.eos_id)
        return self._encode_slices(texts)

    def _encode_slices(self, texts: list[str]) -> list[npt.NDArray[np.int32]]:
        """tiktoken on the pool: contiguous slices of about as many characters, one per
        thread, each encoded as one batch; the arrays in the order of ``texts``."""
        k = self._num_threads
        ends = np.cumsum([len(t) for t in texts])
        # Where the running character count passes each k-th of the total.
        inner = np.searchsorted(ends, ends[-1] / k * np.arange(1, k)).tolist()
        cuts = [0, *inner, len(texts)]

        def encode_slice(lo: int, hi: int) -> list[npt.NDArray[np.int32]]:
            return self._fast.encode_batch(texts[lo:hi], bos=self.bos_id, eos=self.eos_id)

        parts = self._pool.map(encode_slice, cuts, cuts[1:])
        return [z for part in parts for z in part]

    def _wrap(self, ids: Sequence[int] | npt.NDArray[np.integer]) -> npt.NDArray[np.int32]:
        return with_ends(ids, self.bos_id, self.eos_id)

    def info(self) -> TokenizerInfo:
        # The engine that encodes (docs/tokenizers.md#engines): a record of how, never part
        # of what (the ids are the same, and the job's fingerprint leaves it out).
        return _info(self, engine=self.engine,
                     extra={"bos_token": self.bos_token, "eos_token": self.eos_token})

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)


# `convert`'s verdict by the file's SHA-256: a pure function of the file (and the installed
# tokenizers), slow for a large vocabulary, and asked again by each job a process runs (a
# test session, a Python caller; one job's steps take the launcher's tokenizer in process,
# `pipeline.steps.encode.acquire_tokenizer`). A few files at most.
_CONVERTED: dict[str, BpeTables | str] = {}


def _fast_engine(data: bytes, tok: Any, *, where: str, pinned: bool) -> Any:
    """tiktoken for this ``tokenizer.json`` when it converts
    (`transforms.tokenize.bpe_engine.convert`) and agrees with ``tokenizers`` on the probe text,
    else None; ``pinned`` (``--tokenizer-engine tiktoken``) raises instead of returning None."""

    def without(why: str) -> None:
        if pinned:
            raise ValueError(f"--tokenizer-engine tiktoken cannot encode {where}: {why}; use "
                             "--tokenizer-engine auto (or tokenizers)")
        _LOG.info("--tokenizer %s is encoded with tokenizers: %s", where, why)

    try:
        import tiktoken  # noqa: F401
    except ImportError:
        return without("tiktoken is not installed (pip install 'token-windows[hf]')")
    key = hashlib.sha256(data).hexdigest()
    if key not in _CONVERTED:
        spec = json.loads(data)
        while len(_CONVERTED) >= 4:
            _CONVERTED.pop(next(iter(_CONVERTED)))
        _CONVERTED[key] = convert(spec, lambda strings: merged_alone(tok, spec, strings))
    tables = _CONVERTED[key]
    if isinstance(tables, str):
        return without(f"{tables}, so tiktoken's ids could differ from tokenizers'")

    def body(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    try:
        engine = TiktokenEngine(tables, fallback=body,
                                normalize=getattr(tok.normalizer, "normalize_str", None))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # tiktoken's Rust side panics (a BaseException) on a bad table
        return without(f"tiktoken refused its table ({type(e).__name__}: {e})")
    probes = [PROBE, *PROBE.splitlines(keepends=True)]
    probes += [f"x{a.content}y {a.content}\n{a.content}{a.content} z" for a in tables.added]
    # The ids must agree both ways the engine is asked: one text at a time, and the probes as
    # one batch, as a job encodes them (joined into one tiktoken call; BOS and EOS cut off).
    batch = engine.encode_batch(probes, bos=-1, eos=-1)

    def in_batch(text: str) -> npt.NDArray[np.int32]:
        return batch[probes.index(text)][1:-1]

    difference = first_difference(probes, engine.encode, body)
    if difference is None:
        difference = first_difference(probes, in_batch, body)
    if difference is None:
        return engine
    if pinned:
        without(f"tiktoken's ids differ from tokenizers' {difference}")
    _LOG.warning("--tokenizer %s: tiktoken's ids differ from tokenizers' %s; encoding with "
                 "tokenizers", where, difference)
    return None


def _info(tok: Tokenizer, *, engine: str | None = None,
          extra: Mapping[str, object] | None = None) -> TokenizerInfo:
    """The manifest's ``tokenizer`` record of ``tok``: its file (if it has one), then
    ``extra``, beside the fields every kind has."""
    details: dict[str, object] = {}
    path = getattr(tok, "path", None)
    if path is not None:
        # Which file it was, so that inspect --decode can find it again (and check it).
        details["file"] = posixpath.basename(path)
        details["path"] = path
    if extra is not None:
        details.update(extra)
    return TokenizerInfo(
        kind=tok.kind,
        vocab_size=tok.vocab_size,
        bos_id=tok.bos_id,
        eos_id=tok.eos_id,
        sha256=tok.sha256,
        engine=engine,
        extra=details,
    )


def hf_special_tokens(config: bytes | None, *, where: str) -> dict[str, str | None]:
    """``bos_token`` and ``eos_token`` from a ``tokenizer_config.json`` (None where absent).

    Raises:
        ValueError: the file is not a JSON object.
    """
    if config is None:
        return {"bos_token": None, "eos_token": None}
    try:
        data = json.loads(config)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{where} is not valid JSON ({e}); fix it or pass --bos-token and "
                         "--eos-token") from e
    if not isinstance(data, dict):
        raise ValueError(f"{where} must hold a JSON object; pass --bos-token and --eos-token")
    out: dict[str, str | None] = {}
    for key in ("bos_token", "eos_token"):
        value = data.get(key)
        if isinstance(value, dict):  # an AddedToken: {"content": "<s>", "lstrip": false, ...}
            value = value.get("content")
        out[key] = value if isinstance(value, str) and value else None
    return out


def tokenizer_from_bytes(model: bytes | None, *, where: str, num_threads: int = 1,
                         bos_token: str | None = None, eos_token: str | None = None,
                         config: bytes | None = None, engine: str = "auto") -> Tokenizer:
    """The bytes tokenizer when ``model`` is None, a Hugging Face tokenizer when ``where``
    names a ``.json`` file, else a SentencePiece model.

    For a Hugging Face tokenizer, ``bos_token`` and ``eos_token`` win over those of
    ``config`` (the bytes of the ``tokenizer_config.json`` beside it, or None), and
    ``engine`` chooses the library that encodes (`HFTokenizer`); the other kinds take only
    ``auto``.

    Raises:
        ValueError: the model is unusable, lacks BOS or EOS, or BOS/EOS tokens or an engine
            were given for a tokenizer that takes its own.
    """
    if engine != "auto" and (model is None or not is_hf_tokenizer(where)):
        what = "bytes" if model is None else f"{where}, a SentencePiece model"
        raise ValueError(f"--tokenizer-engine {engine} applies to a Hugging Face tokenizer.json; "
                         f"--tokenizer is {what}: drop --tokenizer-engine")
    if model is None:
        if bos_token is not None or eos_token is not None:
            raise ValueError("--bos-token and --eos-token apply to a Hugging Face "
                             "tokenizer.json; --tokenizer bytes has BOS 256 and EOS 257")
        return ByteTokenizer()
    if is_hf_tokenizer(where):
        special = hf_special_tokens(config, where=posixpath.join(
            posixpath.dirname(where), HF_CONFIG_NAME))
        return HFTokenizer(model, where=where, num_threads=num_threads, engine=engine,
                           bos_token=bos_token or special["bos_token"],
                           eos_token=eos_token or special["eos_token"])
    if bos_token is not None or eos_token is not None:
        raise ValueError(
            f"--bos-token and --eos-token apply to a Hugging Face tokenizer.json; {where} is a "
            "SentencePiece model, which has its own BOS and EOS ids: drop them"
        )
    return SentencePieceTokenizer(model, where=where, num_threads=num_threads)
