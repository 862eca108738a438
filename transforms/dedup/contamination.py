"""Decontamination: documents that share a word n-gram with an evaluation text.

GPT-3's rule, with its n = 13 as the default: a training document is contaminated when any
of its word 13-grams is also a 13-gram of some evaluation text. Words are
`transforms.dedup.words.words` (casefolded, Unicode-aware; each Han or kana character a word), and
n-grams are compared by their stable 64-bit hashes (`transforms.dedup.words.ngram_hashes`).

The index of the evaluation n-grams is three parallel NumPy arrays, sorted by hash: the hash,
the evaluation file (an index into a tuple of names) and the line. It holds no Python object
per n-gram, pickles as a few buffers (it is a Beam side input) and answers a document with one
``np.searchsorted`` over the document's n-gram hashes. When an n-gram occurs in several
evaluation texts, the index keeps the smallest (file, line), so the answer does not depend on
the order the evaluation texts were read in. `EvalNgramIndex.first_matches` answers a batch
of documents in one pass (about 4× faster than one by one on short documents).

An evaluation text with fewer than n words has no n-gram and can match nothing; the builder
counts those (`EvalNgramIndex.short_texts`) so the job can say so.

Example: ``EvalNgramIndex.build([("eval.jsonl", 3, text)], n=13).first_match(doc)`` is
``Match(eval_file="eval.jsonl", eval_line=3, ngram="…13 words…")`` for the first 13-gram of
``doc`` (in document order) that ``text`` also holds, or ``None``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

from transforms.dedup.words import MAX_NGRAM, ngram_hashes, word_batch

__all__ = ["DEFAULT_NGRAM", "EvalNgramIndex", "Match"]

DEFAULT_NGRAM = 13


@dataclasses.dataclass(frozen=True)
class Match:
    """Where a document met an evaluation text.

    Attributes:
        eval_file: The evaluation file's name, as given to `EvalNgramIndex.build`.
        eval_line: The line (or record number) of the evaluation text in it.
        ngram: The shared n-gram: the document's words, joined by one space.
    """

    eval_file: str
    eval_line: int
    ngram: str


@dataclasses.dataclass(frozen=True, eq=False)
class EvalNgramIndex:
    """The n-grams of a set of evaluation texts, for `first_match`.

    Build it with `EvalNgramIndex.build`; the arrays are parallel and sorted by ``hashes``,
    which has no repeats.

    Attributes:
        n: Words per n-gram.
        files: The evaluation files' names, sorted; ``file_of`` indexes into it.
        hashes: The distinct n-gram hashes, ascending.
        file_of: Per hash, the file of its first (smallest file, then line) occurrence.
        line_of: Per hash, that occurrence's line.
        texts: Evaluation texts read.
        short_texts: Those with fewer than ``n`` words (they can match nothing).
    """

    n: int
    files: tuple[str, ...]
    hashes: NDArray[np.uint64]
    file_of: NDArray[np.int32]
    line_of: NDArray[np.int64]
    texts: int = 0
    short_texts: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or not 1 <= self.n <= MAX_NGRAM:
            raise ValueError(f"`n` must be an integer in [1, {MAX_NGRAM}], but got {self.n!r}")
        sizes = {len(self.hashes), len(self.file_of), len(self.line_of)}
        if len(sizes) != 1:
            raise ValueError(
                "`hashes`, `file_of` and `line_of` must have one length, but got "
                f"{len(self.hashes)}, {len(self.file_of)} and {len(self.line_of)}"
            )

    @classmethod
    def build(cls, items: Iterable[tuple[str, int, str]], n: int = DEFAULT_NGRAM) -> EvalNgramIndex:
        """The index of the n-grams of ``(source_name, line, text)`` triples.

        Args:
            items: Each evaluation text with the file it came from and its line there.
            n: Words per n-gram (GPT-3's 13 by default).

        Returns:
            The index; equal for the same triples in any order.
        """
        names: dict[str, int] = {}
        chunks: list[NDArray[np.uint64]] = []
        file_parts: list[NDArray[np.int32]] = []
        line_parts: list[NDArray[np.int64]] = []
        texts = short = 0
        for name, line, text in items:
            texts += 1
            grams = ngram_hashes(text, n)
            if not len(grams):
                short += 1
                continue
            grams = np.unique(grams)
            chunks.append(grams)
            file_parts.append(np.full(len(grams), names.setdefault(name, len(names)), np.int32))
            line_parts.append(np.full(len(grams), line, np.int64))
        files = tuple(sorted(names))
        if not chunks:
            return cls(
                n,
                files,
                np.empty(0, np.uint64),
                np.empty(0, np.int32),
                np.empty(0, np.int64),
                texts,
                short,
            )
        # Renumber the files in sorted order, so the smallest (file, line) is the smallest pair.
        rank = np.empty(len(names), np.int32)
        for name, i in names.items():
            rank[i] = files.index(name)
        hashes = np.concatenate(chunks)
        file_of = rank[np.concatenate(file_parts)]
        line_of = np.concatenate(line_parts)
        order = np.lexsort((line_of, file_of, hashes))
        hashes, file_of, line_of = hashes[order], file_of[order], line_of[order]
        first = np.ones(len(hashes), dtype=bool)
        first[1:] = hashes[1:] != hashes[:-1]
        return cls(n, files, hashes[first], file_of[first], line_of[first], texts, short)

    @functools.cached_property
    def _filter(self) -> tuple[int, NDArray[np.uint8]]:
        """A bitmap of the hashes' top bits, about 32 bits per n-gram (3 % false hits).

        Built on first use in each process and not pickled: the side input stays the arrays.
        """
        top = max(10, (32 * len(self.hashes)).bit_length())
        shift = 64 - top
        bits = np.zeros(1 << (top - 3), dtype=np.uint8)
        prefix = self.hashes >> np.uint64(shift)
        np.bitwise_or.at(
            bits, prefix >> np.uint64(3), np.left_shift(1, prefix & np.uint64(7)).astype(np.uint8)
        )
        return shift, bits

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("_filter", None)
        return state

    def __len__(self) -> int:
        return len(self.hashes)

    def first_match(self, text: str) -> Match | None:
        """The first n-gram of ``text`` (in its order) that an evaluation text holds, if any."""
        return self.first_matches([text])[0]

    def first_matches(self, texts: Sequence[str]) -> list[Match | None]:
        """`first_match` of many texts at once: their n-grams hashed and looked up together.

        Args:
            texts: Document texts.

        Returns:
            One `Match` or None per text, in order.
        """
        out: list[Match | None] = [None] * len(texts)
        if not len(self.hashes) or not len(texts):
            return out
        batch = word_batch(texts)
        grams, at = batch.ngrams(self.n)
        # Most n-grams are in no evaluation text: a bit per hash prefix rules them out with
        # one gather, and only the rest are looked up.
        shift, bits = self._filter
        prefix = grams >> np.uint64(shift)
        maybe = np.flatnonzero((bits[prefix >> np.uint64(3)] >> (prefix & np.uint64(7))) & 1)
        where = np.searchsorted(self.hashes, grams[maybe])
        where[where == len(self.hashes)] = 0
        found = self.hashes[where] == grams[maybe]
        hits, where = maybe[found], where[found]
        if not len(hits):
            return out
        word_owner = batch.owners()
        owners = word_owner[at[hits]]
        # The first hit of each text: hits are in text order, then in the text's order.
        firsts = np.flatnonzero(np.diff(owners, prepend=-1))
        for j in firsts.tolist():
            w = int(at[hits[j]])
            k = int(where[j])
            out[int(word_owner[w])] = Match(
                eval_file=self.files[int(self.file_of[k])],
                eval_line=int(self.line_of[k]),
                ngram=batch.text(w, w + self.n),
            )
        return out
