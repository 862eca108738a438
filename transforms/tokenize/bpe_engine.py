"""A byte-level BPE ``tokenizer.json`` run by ``tiktoken``, with ``tokenizers``' ids.

The contract: `convert` turns a ``tokenizer.json`` into tiktoken's form only when the file
itself shows that ``tiktoken`` then gives, on every text, the ids of ``tokenizers``'
``Tokenizer.encode(text, add_special_tokens=False)``; otherwise it says why not, and the
caller keeps ``tokenizers`` (docs/tokenizers.md#engines). What the file must show:

* the model is BPE without dropout, byte fallback, ``continuing_subword_prefix`` or
  ``end_of_word_suffix``, and holds the 256 byte characters of the ByteLevel alphabet;
* the pre-tokenizer is ByteLevel with its GPT-2 split (``use_regex``), or a ``Split`` on a
  regex (``Isolated``, not inverted) followed by ByteLevel without a regex (the Llama 3 and
  Qwen form); the pattern is the file's (tiktoken runs `transforms.tokenize.bpe_patterns.fast_form`
  of it: the same matches);
* the normalizer is none, NFC or NFKC (applied by ``tokenizers`` itself, piece by piece, as
  ``tokenizers`` does); no truncation or padding;
* no two merges make the same token, so a token's rank can be its merge's index;
* no two tokens that BPE can produce meet, in any word, without their merge: for each
  vocabulary token ``t``, the BPE of ``t``'s own bytes is ``[t]``, or ends in three or more
  pieces (then no word can ever hold two adjacent pieces spelling ``t``: the merges inside
  ``t``'s span are the same as in ``t`` alone), or ``t`` is left out of tiktoken's table
  because ``tokenizers`` never outputs it;
* added tokens have no ``lstrip``, ``rstrip`` or ``single_word``. They are split out of the
  text exactly as ``tokenizers`` does even with ``add_special_tokens=False``: the longest
  leftmost match, raw text first for tokens with ``normalized: false``, then the normalized
  pieces for the others; each piece between them is encoded on its own.

Why these suffice: ``tokenizers`` repeatedly merges the adjacent pair with the lowest merge
index (leftmost first); tiktoken merges the adjacent pair whose concatenation has the lowest
rank (leftmost first). With one merge per token and rank = merge index, the two choose the
same pair at every step as long as no adjacent pair concatenates to a token without being a
merge, which the check above rules out. tiktoken looks a whole piece up in its table before
merging; ``tokenizers`` does the same with ``ignore_merges``, and without it the check makes
the look-up harmless (such a piece merges to itself).

Example: a GPT-2 style file converts; one with ``"dropout": 0.1`` gives the reason
``"the model has dropout 0.1 (random merges)"``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from transforms.tokenize.bpe_patterns import FAST_FORMS, GPT2_PATTERN, fast_form

__all__ = ["ENGINES", "GPT2_PATTERN", "PROBE", "BpeTables", "TiktokenEngine", "byte_decoder",
           "convert", "first_difference", "merged_alone", "with_ends"]

ENGINES = ("auto", "tokenizers", "tiktoken")
# The load-time self-check's text: scripts, digits, whitespace runs, emoji, contractions.
PROBE = (
    "The quick brown fox can't, won't, shouldn't; he'd've I'M YOU'RE it's 'tis o'clock.\n"
    "  Two  spaces,\ttab,\t\ttabs\r\nCRLF\n\n\nthree newlines   \n \u00a0nbsp\u3000ideographic "
    "1 12 123 1234 12345 3.14159 -42 1e10 0x1F ٣٤٥ १२३ 一二三\n"
    "Grüße aus Zürich, naïve café, ﬁ ligature, Å Å, e\u0301, ＡＢＣ full width.\n"
    "Привет, мир! Γειά σου κόσμε. שלום עולם. مرحبا بالعالم. नमस्ते दुनिया. สวัสดีชาวโลก.\n"
    "道可道，非常道。名可名，非常名。こんにちは世界、カタカナ。안녕하세요 세계!\n"
    "Emoji: 😀🎉👍🏽 👨‍👩‍👧‍👦 🇯🇵 ❤️ ✓ — “quotes” ‘single’ «guillemets» …\n"
    "code: def f(x): return x**2  # comment\n    if a != b:\n        pass\n"
    "https://example.com/a?b=c&d=e user@example.com $100 50% #tag @name\n"
    "\x00\x01\x7f control \ufeff bom \u200b zwsp\n" + " " * 17 + "\n" + "\n" * 5 + "end")


def byte_decoder() -> dict[str, int]:
    """ByteLevel's characters → bytes: the inverse of GPT-2's ``bytes_to_unicode``."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)}
    others = iter(range(256, 512))  # the other bytes' characters, in byte order
    return {chr(b) if b in printable else chr(next(others)): b for b in range(256)}


@dataclasses.dataclass(frozen=True)
class AddedToken:
    """An added token as ``tokenizers`` splits it out of the text."""

    content: str
    id: int
    normalized: bool


@dataclasses.dataclass(frozen=True)
class BpeTables:
    """A ``tokenizer.json`` in tiktoken's form (`convert`).

    Attributes:
        pattern: the split regex (tiktoken's ``pat_str``).
        ranks: token bytes → tiktoken rank.
        rank_ids: rank → the file's id (None: the ranks are the ids).
        rank_bytes: rank → the token's length in bytes (for the coverage check).
        added: the added tokens, longest first.
        normalizer: the file's normalizer type (None, "NFC" or "NFKC").
        add_prefix_space: ByteLevel's ``add_prefix_space``.
    """

    pattern: str
    ranks: dict[bytes, int]
    rank_ids: npt.NDArray[np.int32] | None
    rank_bytes: npt.NDArray[np.int64]
    added: tuple[AddedToken, ...]
    normalizer: str | None
    add_prefix_space: bool


def _pattern(pre: Any) -> tuple[str, bool] | str:
    """(pattern, add_prefix_space) of a convertible pre-tokenizer, else the reason."""
    if not isinstance(pre, dict):
        return "it has no pre-tokenizer (ByteLevel is needed)"
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    if not isinstance(steps, list) or not steps:
        return "its pre-tokenizer is an empty Sequence"
    kinds = [s.get("type") if isinstance(s, dict) else None for s in steps]
    if kinds == ["ByteLevel"]:
        level = steps[0]
        if level.get("use_regex", True) is not True:
            return "its ByteLevel pre-tokenizer has use_regex false and no Split before it"
        return GPT2_PATTERN, bool(level.get("add_prefix_space", False))
    if kinds == ["Split", "ByteLevel"]:
        split, level = steps
        if level.get("use_regex", True) is not False:
            return "its ByteLevel after a Split also splits (use_regex true)"
        pattern = split.get("pattern")
        if not (isinstance(pattern, dict) and isinstance(pattern.get("Regex"), str)):
            return f"its Split pattern is {pattern!r}, not a regex"
        if split.get("behavior") != "Isolated" or split.get("invert", False) is not False:
            return (f"its Split has behavior {split.get('behavior')!r} and invert "
                    f"{split.get('invert')!r} (Isolated, not inverted, is convertible)")
        return pattern["Regex"], bool(level.get("add_prefix_space", False))
    return f"its pre-tokenizer is {' + '.join(map(str, kinds))} (ByteLevel is convertible)"


def _model_problem(model: Any) -> str | None:
    if not isinstance(model, dict) or model.get("type") != "BPE":
        kind = model.get("type") if isinstance(model, dict) else model
        return f"its model is {kind}, not BPE"
    if model.get("dropout") not in (None, 0, 0.0):
        return f"the model has dropout {model['dropout']} (random merges)"
    if model.get("byte_fallback"):
        return "the model has byte_fallback"
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            return f"the model has {key} {model[key]!r}"
    return None


def _merges(raw: Any) -> list[tuple[str, str]] | str:
    out = []
    for m in raw if isinstance(raw, list) else ():
        pair = m.split(" ") if isinstance(m, str) else m
        if not (type(pair) is list and len(pair) == 2 and type(pair[0]) is type(pair[1]) is str):
            return f"its merge {m!r} is not two tokens"
        out.append((pair[0], pair[1]))
    return out


def convert(data: bytes | str | dict[str, Any], tokenizers_bpe: Any) -> BpeTables | str:
    """The tiktoken form of a ``tokenizer.json``, or the reason it has none (see the module).

    Args:
        data: the file's text (or that text parsed).
        tokenizers_bpe: a callable that BPE-encodes a list of ByteLevel strings with the
            file's merges (and ``ignore_merges`` off), one list of ids per string:
            ``tokenizers`` itself is the judge of what its merges do.
    """
    try:
        spec = data if isinstance(data, dict) else json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"it is not JSON ({e})"
    if not isinstance(spec, dict):
        return "it is not a JSON object"
    for key in ("truncation", "padding"):
        if spec.get(key) is not None:
            return f"it sets {key}"
    model = spec.get("model")
    problem = _model_problem(model)
    if problem:
        return problem
    normalizer = spec.get("normalizer")
    kind = normalizer.get("type") if isinstance(normalizer, dict) else normalizer
    if kind not in (None, "NFC", "NFKC"):
        return f"its normalizer is {kind} (none, NFC or NFKC are convertible)"
    split = _pattern(spec.get("pre_tokenizer"))
    if isinstance(split, str):
        return split
    pattern, add_prefix_space = split
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        return "its model has no vocabulary"
    merges = _merges(model.get("merges"))
    if isinstance(merges, str):
        return merges
    added: list[AddedToken] = []
    for a in spec.get("added_tokens") or ():
        for flag in ("lstrip", "rstrip", "single_word"):
            if a.get(flag):
                return f"its added token {a.get('content')!r} has {flag}"
        if a.get("content"):
            added.append(AddedToken(a["content"], int(a["id"]), bool(a.get("normalized"))))
    decode = byte_decoder()
    missing = [c for c in decode if c not in vocab]
    if missing:
        return f"its vocabulary lacks {len(missing)} of ByteLevel's 256 byte tokens"
    made: dict[str, int] = {}
    for index, (left, right) in enumerate(merges):
        if left + right in made:
            return (f"two merges make the token {left + right!r} (merges {made[left + right]} "
                    f"and {index}), which tiktoken's one rank per token cannot order")
        made[left + right] = index
    ignore_merges = bool(model.get("ignore_merges", False))
    # Added tokens whose text never reaches the model (without a normalizer: NFC alone can
    # turn other text into ASCII, e.g. U+212A into K).
    split_out = {a.content for a in added if kind is None
                 and not (add_prefix_space and a.content.startswith(" "))}
    # Tokens of two or more byte characters, and what BPE makes of each one's own bytes.
    others = str.maketrans(dict.fromkeys(decode))
    longer = [t for t in vocab if len(t) > 1 and not t.translate(others)]
    spell = str.maketrans({c: chr(b) for c, b in decode.items()})
    keep: dict[str, int] = {c: vocab[c] for c in decode}
    for token, ids in zip(longer, tokenizers_bpe(longer), strict=True):
        if len(ids) == 1:  # BPE makes the token from its own bytes
            keep[token] = vocab[token]
            continue
        # Never output: unreachable by merges, and (with ignore_merges) never a whole word
        # because the added token of the same text is split out first.
        text = token.translate(spell).encode("latin-1").decode("utf-8", "replace")
        if not ignore_merges or text in split_out:
            continue
        if len(ids) == 2:
            names = {i: t for t, i in vocab.items() if i in ids}
            return (f"BPE of its token {token!r} stops at {[names[i] for i in ids]!r}, two "
                    "tokens that concatenate to it without a merge, which tiktoken would merge")
        keep[token] = vocab[token]
    ranks, rank_of = _ranks(keep, made)
    table = {t.translate(spell).encode("latin-1"): rank_of[t] for t in keep}
    top = max(ranks)
    rank_bytes = np.zeros(top + 1, dtype=np.int64)
    rank_bytes[list(table.values())] = [len(b) for b in table]
    rank_ids = None
    if any(rank_of[t] != keep[t] for t in keep):
        rank_ids = np.full(top + 1, -1, dtype=np.int32)
        rank_ids[list(rank_of.values())] = [keep[t] for t in rank_of]
    added.sort(key=lambda a: -len(a.content))
    return BpeTables(pattern=pattern, ranks=table, rank_ids=rank_ids, rank_bytes=rank_bytes,
                     added=tuple(added), normalizer=kind, add_prefix_space=add_prefix_space)


def _ranks(keep: dict[str, int], made: dict[str, int]) -> tuple[list[int], dict[str, int]]:
    """Each kept token's tiktoken rank: its id, if the ids of merged tokens rise with their
    merge's index (true of files that ``tokenizers`` trained); else bytes first, then merged
    tokens in merge order, then the rest."""
    merged = sorted((t for t in keep if t in made), key=made.__getitem__)
    ids = [keep[t] for t in merged]
    unique = len(set(keep.values())) == len(keep)
    if unique and all(a < b for a, b in zip(ids, ids[1:], strict=False)):
        return list(keep.values()), dict(keep)
    order = [t for t in keep if len(t) == 1] + merged
    order += [t for t in keep if len(t) > 1 and t not in made]
    rank_of = {t: r for r, t in enumerate(order)}
    return list(rank_of.values()), rank_of


_CORES: dict[int, tuple[BpeTables, Any]] = {}
# tiktoken's one special token: it joins a batch's texts (`TiktokenEngine.encode_batch`) and
# is allowed only there; with none allowed, tiktoken's buffer encode is `encode_ordinary` into
# an array (an empty special set would be a pattern matching everywhere). Its first character
# occurs in it once, so two of its occurrences never overlap.
_SEP = "\x00<|token-windows: a text ends here|>\x01"
_NONE_ALLOWED: frozenset[str] = frozenset()
_SEP_ALLOWED = frozenset({_SEP})


def _core(tables: BpeTables) -> Any:
    """tiktoken's encoder of ``tables``, made once per tables (it is immutable and
    thread-safe; making one takes a noticeable moment for a large vocabulary)."""
    import tiktoken

    held = _CORES.get(id(tables))
    if held is None or held[0] is not tables:
        while len(_CORES) >= 4:
            _CORES.pop(next(iter(_CORES)))
        core = tiktoken.Encoding("token-windows", pat_str=fast_form(tables.pattern),
                                 mergeable_ranks=tables.ranks,
                                 special_tokens={_SEP: len(tables.rank_bytes)})._core_bpe
        held = _CORES[id(tables)] = (tables, core)
    return held[1]


def _splitter(tokens: Sequence[AddedToken]) -> re.Pattern[str] | None:
    """One pattern matching any of ``tokens`` (None for none), which the caller has sorted
    longest first, so that the leftmost match is also the longest there (tokenizers'
    Aho-Corasick LeftmostLongest); one group, so that `re.split` keeps the matches."""
    if not tokens:
        return None
    alternatives = "|".join(re.escape(t.content) for t in tokens)
    return re.compile("(" + alternatives + ")")


class TiktokenEngine:
    """Encodes with tiktoken what `convert` made of a ``tokenizer.json``.

    Args:
        tables: `convert`'s result.
        normalize: the file's normalizer as a function (``tokenizers``' own), or None.
        fallback: encodes one text with ``tokenizers`` (body ids): used for a text that the
            split pattern does not cover whole (tiktoken drops what no match covers).
        core: the encoder of ``tables`` (None: tiktoken's, `_core`): anything with tiktoken's
            ``encode_to_tiktoken_buffer(text, allowed_special)``, the separator `_SEP` a
            special token of rank ``len(tables.rank_bytes)`` (bench/bench_bpe_engines.py
            runs other engines through this class so).
    """

    def __init__(self, tables: BpeTables, *, normalize: Any, fallback: Any,
                 core: Any = None) -> None:
        self._core = _core(tables) if core is None else core
        self._normalize = normalize if tables.normalizer else None
        self._fallback = fallback
        # tokenizers splits in two passes: tokens with normalized false out of the raw text,
        # then the others (their text normalized too) out of each piece once normalized.
        raw = [a for a in tables.added if not a.normalized]
        late = [a if self._normalize is None else
                dataclasses.replace(a, content=self._normalize(a.content))
                for a in tables.added if a.normalized]
        late.sort(key=lambda a: -len(a.content))
        self._raw = _splitter(raw)
        self._late = _splitter(late)
        self._ids = {a.content: a.id for a in raw}
        self._late_ids = {a.content: a.id for a in late}
        self._prefix = tables.add_prefix_space
        self._plain = self._normalize is None and not self._prefix
        # The rank tables with one more place, the separator's (`_SEP`): no id, no bytes.
        self._sep = len(tables.rank_bytes)
        self._rank_ids = (None if tables.rank_ids is None else
                          np.append(tables.rank_ids, np.int32(-1)))
        # ByteLevel's own split, Llama 3's and Qwen2's match every character (each has a
        # branch for \p{L}, \p{N}, [^\s\p{L}\p{N}] and \s); another Split pattern may not,
        # and tiktoken drops what no match covers.
        self._lengths = (None if tables.pattern in FAST_FORMS else
                         np.append(np.asarray(tables.rank_bytes, np.int64), 0))

    def encode(self, text: str) -> list[int]:
        """``tokenizers``' ``encode(text, add_special_tokens=False).ids``."""
        return self.encode_array(text).tolist()

    def encode_array(self, text: str) -> npt.NDArray[np.integer]:
        """`encode` as an array, made from tiktoken's own buffer: no Python int per token."""
        try:
            if self._plain and not self._added_in(text):
                ids = self._piece(text)  # the common case: one piece, nothing to split out
            else:
                ids = self._encode(text)
        except UnicodeEncodeError:  # a lone surrogate: whatever tokenizers does with it
            ids = None
        if ids is None:
            return np.asarray(self._fallback(text), np.int64)
        return ids

    def encode_batch(self, texts: Sequence[str], *, bos: int,
                     eos: int) -> list[npt.NDArray[np.int32]]:
        """``[bos] + encode(text) + [eos]`` of each text, as int32 arrays (views of one): the
        texts joined by `_SEP` in one tiktoken call that releases the GIL for the whole batch
        (its pattern runs on each stretch between special tokens alone, so each text is still
        encoded on its own). A text holding `_SEP` or an added token, or a file with a
        normalizer or ``add_prefix_space``, goes through `encode_array`."""
        alone = [not self._plain or _SEP in t or self._added_in(t) for t in texts]
        joined = self._joined([t for t, a in zip(texts, alone, strict=True) if not a], bos, eos)
        if joined is None:  # a lone surrogate, or a gap between matches (`_piece`)
            alone = [True] * len(alone)
            joined = []
        rest = iter(joined)
        return [with_ends(self.encode_array(t), bos, eos) if a else next(rest)
                for t, a in zip(texts, alone, strict=True)]

    def _joined(self, texts: list[str], bos: int, eos: int) -> list[npt.NDArray[np.int32]] | None:
        if not texts:
            return []
        joined = _SEP.join(texts)
        try:
            ranks = np.frombuffer(self._core.encode_to_tiktoken_buffer(joined, _SEP_ALLOWED),
                                  np.uint32)
        except UnicodeEncodeError:
            return None
        n = len(texts)
        if self._lengths is not None:
            covered = int(self._lengths[ranks].sum())  # the separators' length counts 0
            if covered != len(joined.encode("utf-8")) - (n - 1) * len(_SEP):
                return None  # a gap between matches (`_piece`)
        cuts = np.flatnonzero(ranks == self._sep)
        ids = ranks.astype(np.int32) if self._rank_ids is None else self._rank_ids[ranks]
        ids[cuts] = eos  # each separator becomes the EOS of the text before it
        starts = np.concatenate(([0], cuts + 1))  # of each text's ids in `ids`
        z = np.insert(ids, np.append(starts, len(ids)), np.array([bos] * n + [eos], np.int32))
        return np.split(z, (starts + np.arange(n))[1:])  # text i's z starts i places later

    def _added_in(self, text: str) -> bool:
        """Whether ``text`` holds an added token (of either pass)."""
        if self._raw is not None and self._raw.search(text):
            return True
        return self._late is not None and self._late.search(text) is not None

    def _encode(self, text: str) -> npt.NDArray[np.integer] | None:
        out: list[npt.NDArray[np.integer]] = []
        for piece, is_added in _split(self._raw, text):
            if is_added:
                out.append(np.array([self._ids[piece]], np.int64))
                continue
            if self._normalize is not None:
                piece = self._normalize(piece)
            for sub, sub_added in _split(self._late, piece):
                if sub_added:
                    out.append(np.array([self._late_ids[sub]], np.int64))
                    continue
                ids = self._piece(" " + sub if self._prefix and sub[:1] != " " else sub)
                if ids is None:
                    return None
                out.append(ids)
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def _piece(self, text: str) -> npt.NDArray[np.integer] | None:
        ranks = np.frombuffer(self._core.encode_to_tiktoken_buffer(text, _NONE_ALLOWED),
                              np.uint32)
        if self._lengths is not None:
            covered = int(self._lengths[ranks].sum())
            if covered != len(text.encode("utf-8")):
                return None  # a gap between matches: tokenizers keeps it, tiktoken drops it
        return ranks if self._rank_ids is None else self._rank_ids[ranks]


def with_ends(ids: Sequence[int] | np.ndarray, bos: int, eos: int) -> npt.NDArray[np.int32]:
    """A document's z, ``[bos, *ids, eos]``, as one int32 array (every tokenizer kind's)."""
    z = np.empty(len(ids) + 2, np.int32)
    z[0] = bos
    z[1:-1] = ids
    z[-1] = eos
    return z


def _split(pattern: re.Pattern[str] | None, text: str) -> list[tuple[str, bool]]:
    """``text`` as (piece, is an added token) in order; no empty piece."""
    pieces = pattern.split(text) if pattern else [text]
    # re.split with one group: the matches (the added tokens) at the odd places.
    return [(piece, i % 2 == 1) for i, piece in enumerate(pieces) if piece]


def first_difference(texts: Sequence[str], a: Any, b: Any) -> str | None:
    """Where two encoders (text → ids) first disagree on ``texts``, or None."""
    for text in texts:
        x, y = [*a(text), "missing"], [*b(text), "missing"]
        if x != y:
            at = next(i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q)
            return f"on {text[:40]!r}: id {at} is {x[at]} against {y[at]}"
    return None


def merged_alone(tok: Any, spec: dict[str, Any], strings: list[str]) -> list[list[int]]:
    """What the BPE merges of ``tok`` (whose file is ``spec``) make of each ByteLevel string
    taken as one word, without normalizer, pre-tokenizer, added tokens or ``ignore_merges``:
    ``tokenizers`` itself is the judge of what its merges do."""
    import tokenizers

    model = tok.model
    if spec["model"].get("ignore_merges"):
        model = tokenizers.models.BPE(
            vocab=spec["model"]["vocab"], ignore_merges=False,
            merges=[tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                    for m in spec["model"]["merges"]])
    alone = tokenizers.Tokenizer(model)  # shares the model: nothing is copied
    return [e.ids for e in alone.encode_batch_fast(strings, add_special_tokens=False)]
