"""Seeded document-level splits and samples: which documents a job keeps, and where each goes.

Both are decided by the document's id alone, so they do not depend on the window parameters,
the shuffle seed and key, the number of shards, the runner or the order of the input:

* **Sample** (``--sample F``, ``--sample-seed``): a document is kept iff
  ``v < ⌊F · 2**64⌋``, ``v`` a 64-bit keyed BLAKE2b of its id in the hash domain
  ``tw-sample``. The bound grows with F, so ``--sample 0.1`` ⊂ ``--sample 0.2``.
* **Split** (``--split NAME=F[,NAME=F…]``, ``--split-seed``): ``u``, the same kind of hash in
  the domain ``tw-split``, falls in exactly one of the intervals that the fractions cut from
  ``[0, 2**64)`` in the order given; the rest of the range, if any, is ``train``. All windows
  of a document therefore go to one split: overlapping windows never leak across splits.

The domains differ from each other and from `transforms.plan.keys.doc_key`'s (``tw-doc-key``), so
the three hashes are independent even with equal seeds: the validation set of a sampled job
is the full job's validation set ∩ the sample.

Fractions are taken as the decimals they print as (``0.1`` is 1/10), so ``0.3 + 0.7`` is
exactly 1 and the bounds are exact integers.

Example: ``SplitSpec(splits=(("val", 0.25),))`` has the splits ``val`` (u < 2**62) and
``train`` (the rest); ``SplitSpec.parse("val=0.01,test=0.01")`` is
``(("val", 0.01), ("test", 0.01))``.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import math
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from transforms.dataset.manifest import SampleInfo, SplitFraction, SplitInfo
from transforms.json_fields import JsonObject

__all__ = [
    "SPLITS_NAME",
    "TRAIN",
    "SplitSpec",
    "apportion_shards",
    "split_fingerprint",
    "split_job_message",
]

TRAIN = "train"
# The job's record at the top of a split job's output (the splits are in OUTPUT/NAME/).
SPLITS_NAME = "_splits.json"
_SPACE = 1 << 64
# Safe directory names: no leading "_" or "." (Parquet readers skip those; _rejects, .tmp and
# .claim live there), no "/" or ".", no case-only differences (macOS file systems).
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def _exact(name: str, value: Any, *, upper_closed: bool) -> Fraction:
    """A fraction in (0, 1) (or (0, 1]) as the decimal it prints as."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    if ok and math.isfinite(value) and 0 < value < 1 or (ok and upper_closed and value == 1):
        return Fraction(repr(float(value)))
    rng = "(0, 1]" if upper_closed else "(0, 1)"
    raise ValueError(f"`{name}` must be a number in {rng}, but got {value!r}")


def _seed(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _SPACE:
        raise ValueError(f"`{name}` must be an integer in [0, 2**64), but got {value!r}")


def _hasher(seed: int, domain: bytes) -> hashlib.blake2b:
    return hashlib.blake2b(digest_size=8, key=seed.to_bytes(8, "little"), person=domain)


def _points(seed: int, domain: bytes, doc_ids: Sequence[str]) -> list[int]:
    base = _hasher(seed, domain)
    out = []
    for doc_id in doc_ids:
        h = base.copy()
        h.update(doc_id.encode("utf-8"))
        out.append(int.from_bytes(h.digest(), "big"))
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class SplitSpec:
    """Which documents a job keeps (sample) and which split each goes to.

    Attributes:
        splits: (name, fraction) of each named split, in the order given; the rest of the
            documents (1 − Σ fractions) go to ``train``. Empty: one dataset, no split dirs.
        seed: the split seed (``--split-seed``), independent of the shuffle's ``--seed``.
        sample: the share of documents kept, in (0, 1]; 1 keeps every document.
        sample_seed: the sample's seed (``--sample-seed``).

    Raises:
        ValueError: a name is not a safe directory name or repeats, a fraction is not in
            (0, 1), the fractions add up to more than 1, ``train`` is named but the fractions
            do not add up to 1, or the sample is not in (0, 1].
    """

    splits: tuple[tuple[str, float], ...] = ()
    seed: int = 0
    sample: float = 1.0
    sample_seed: int = 0

    def __post_init__(self) -> None:
        _seed("split_seed", self.seed)
        _seed("sample_seed", self.sample_seed)
        _exact("sample", self.sample, upper_closed=True)
        seen: set[str] = set()
        total = Fraction(0)
        for item in self.splits:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
                raise ValueError(f"a split must be (name, fraction), but got {item!r}")
            name, fraction = item
            if not _NAME.match(name):
                raise ValueError(
                    f"split name {name!r} is not a safe directory name: use letters, digits, "
                    "'_' and '-' (not first), at most 64, e.g. --split val=0.01")
            if name.lower() in seen:
                raise ValueError(f"split name {name!r} is given twice; give each split once")
            seen.add(name.lower())
            total += _exact(f"split {name}", fraction, upper_closed=False)
        if total > 1:
            raise ValueError(
                f"the split fractions add up to {float(total)}, more than 1; make them smaller "
                "(the rest of the documents goes to train)")
        if TRAIN in seen and total != 1:
            raise ValueError(
                f"--split names {TRAIN}, so the fractions must add up to 1, but they add up to "
                f"{float(total)}; drop {TRAIN}=… to give it the rest")

    @classmethod
    def parse(cls, text: str) -> tuple[tuple[str, float], ...]:
        """``NAME=FRACTION[,NAME=FRACTION…]`` → the (name, fraction) pairs.

        Raises:
            ValueError: an item is not NAME=FRACTION with a number.
        """
        out = []
        for item in text.split(","):
            name, eq, value = item.strip().partition("=")
            try:
                fraction = float(value)
            except ValueError:
                fraction = None
            if not eq or not name or fraction is None:
                raise ValueError(
                    f"--split {text!r}: {item.strip()!r} is not NAME=FRACTION; write e.g. "
                    "--split val=0.01,test=0.01")
            out.append((name.strip(), fraction))
        return tuple(out)

    @property
    def active(self) -> bool:
        """Whether the job samples or splits at all (else it is the plain job)."""
        return bool(self.splits) or self.sample < 1

    @property
    def names(self) -> tuple[str, ...]:
        """Every split the job writes, in the order of their intervals (train last when it is
        the rest); () for a job without splits."""
        if not self.splits:
            return ()
        given = tuple(name for name, _ in self.splits)
        return given if TRAIN in given or self._total() == 1 else (*given, TRAIN)

    def fractions(self) -> tuple[Fraction, ...]:
        """The share of the kept documents each split in `names` expects."""
        given = tuple(Fraction(repr(float(f))) for _, f in self.splits)
        return given if len(given) == len(self.names) else (*given, 1 - self._total())

    def _total(self) -> Fraction:
        return sum((Fraction(repr(float(f))) for _, f in self.splits), Fraction(0))

    def _bounds(self) -> list[int]:
        """The exclusive upper bound of every interval but the last."""
        bounds, cum = [], Fraction(0)
        for f in self.fractions()[:-1]:
            cum += f
            bounds.append(math.floor(cum * _SPACE))
        return bounds

    def kept(self, doc_ids: Sequence[str]) -> list[bool]:
        """Whether each document is in the sample."""
        if self.sample >= 1:
            return [True] * len(doc_ids)
        bound = math.floor(Fraction(repr(float(self.sample))) * _SPACE)
        return [v < bound for v in _points(self.sample_seed, b"tw-sample", doc_ids)]

    def split_of(self, doc_ids: Sequence[str]) -> list[int]:
        """The split (an index into `names`) of each document; all 0 without splits."""
        if len(self.names) < 2:
            return [0] * len(doc_ids)
        bounds = self._bounds()
        return [bisect.bisect_right(bounds, u) for u in _points(self.seed, b"tw-split", doc_ids)]

    @classmethod
    def from_manifest(cls, split: SplitInfo | None, sample: SampleInfo | None) -> SplitSpec:
        """The spec a manifest's ``split`` and ``sample`` records (`split_fractions`,
        `sample_info`).

        Raises:
            ValueError: they do not describe a valid spec.
        """
        pairs = [] if split is None else [(s.name, float(s.fraction)) for s in split.splits]
        if pairs and pairs[-1][0] == TRAIN:
            pairs.pop()  # the rest, whether it was named or not: the same interval
        return cls(splits=tuple(pairs),
                   seed=0 if split is None or split.split_seed is None else split.split_seed,
                   sample=1.0 if sample is None else float(sample.fraction),
                   sample_seed=0 if sample is None else sample.seed)

    def split_fractions(self) -> tuple[SplitFraction, ...]:
        """Each split of `names` and its share, as the manifests record them (train's is the
        rest); () for a job without splits."""
        return tuple(SplitFraction(name=n, fraction=float(f))
                     for n, f in zip(self.names, self.fractions(), strict=True))

    def sample_info(self) -> SampleInfo | None:
        """The manifests' ``sample`` record; None for a job that keeps every document."""
        if self.sample >= 1:
            return None
        return SampleInfo(fraction=float(self.sample), seed=self.sample_seed)

    def to_json(self) -> JsonObject:
        """The split definition as the job's fingerprint holds it."""
        out: JsonObject = {}
        if self.splits:
            out["splits"] = [dataclasses.asdict(f) for f in self.split_fractions()]
            out["split_seed"] = self.seed
        sample = self.sample_info()
        if sample is not None:
            out["sample"] = sample.to_json()
        return out


def apportion_shards(spec: SplitSpec, *, num_shards: int | None, input_bytes: int,
                     shard_bytes: int) -> tuple[int, ...]:
    """How many shards each split of ``spec.names`` gets (one entry: the job without splits).

    ``--num-shards N`` is the shard count of the whole kept corpus: a split gets its share,
    ``max(1, round(N × fraction))``, so a 1 % validation set of a 64-shard job has one shard
    and train keeps 63 or 64. Without it, each split gets one shard per ``shard_bytes`` of its
    expected share of the input (input bytes × sample × fraction), at least one, which is
    the job's rule for its whole input.

    Example: ``--num-shards 8 --split val=0.01`` gives val 1 and train 8 shards.
    """
    shares = spec.fractions() or (Fraction(1),)
    sample = Fraction(repr(float(spec.sample)))
    if num_shards is not None:
        if len(shares) == 1:
            return (num_shards,)
        return tuple(max(1, math.floor(num_shards * f + Fraction(1, 2))) for f in shares)
    return tuple(max(1, math.ceil(input_bytes * sample * f / shard_bytes)) for f in shares)


def split_fingerprint(job: str, name: str) -> str:
    """The fingerprint of split ``name`` of the job whose fingerprint is ``job`` (in its
    manifest and its shards' footers): derived, so a split's shard is told from another
    split's, and a killed job's shards are found from its claim alone."""
    return hashlib.sha256(f"{job}/split/{name}".encode()).hexdigest()


def split_job_message(root: str, names: Sequence[str]) -> str:
    """Why ``root`` (the top directory of a split job whose splits are ``names``) is not one
    dataset, and the fix."""
    first = names[0] if names else "NAME"
    return (f"{root} holds the splits {', '.join(names) or '(none)'} of one job "
            f"({SPLITS_NAME}), each a dataset of its own: open {root.rstrip('/')}/{first}")
