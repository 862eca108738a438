"""Reading a manifest: the typed, checked values every reader uses (`docs/format.md`).

`read_manifest` parses ``_manifest.json`` into frozen dataclasses (`Manifest` of
`TokenizerInfo`, `WindowsInfo`, `Counts`, `ShardEntry`, `SplitInfo`), checking every value
that becomes a path, an index or a count before anything uses it, and the invariants a
manifest holds by itself:

* a SHA-256 is 64 lowercase hex digits (it names a cache directory);
* a shard's ``file`` matches ``part-NNNNN-of-NNNNN.parquet`` (no directory), and shard i of
  N is ``part-i-of-N`` (so the list is in the files' order);
* counts are non-negative integers (never a bool), BOS and EOS are ids below the vocabulary
  size, window parameters are in range;
* the shards' rows, tokens, documents and scored targets add up to ``counts``.

The whole JSON object stays available as ``Manifest.json``.

Example: ``read_manifest(text).shards[0].file == "part-00000-of-00002.parquet"``; a manifest
whose ``shards[0].sha256`` is ``"/home/me" + "/" * 56`` raises ``ValueError: …:
shards[0].sha256 must be 64 lowercase hex digits (a SHA-256), but got '/home/me///…'``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from typing import Any

from transforms.schema import FORMAT, FORMAT_VERSION, SHARD_PATTERN, shard_file_name

__all__ = ["OFFSETS", "SCORES", "TAILS", "Counts", "Manifest", "ShardEntry", "SplitInfo",
           "TokenizerInfo", "WindowsInfo", "read_manifest"]

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
TAILS, SCORES, OFFSETS = ("keep", "drop", "trace_back"), ("all", "new"), ("zero", "random")


_REQUIRED = object()


class _Fields:
    """The values of one JSON object of a manifest, each checked as it is taken."""

    def __init__(self, value: Any, name: str, where: str) -> None:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: {name} must be an object, but got {value!r}")
        self.value, self.name, self.where = value, name, where

    def fail(self, key: str, problem: str) -> ValueError:
        name = f"{self.name}.{key}" if self.name else key
        return ValueError(f"{self.where}: {name} {problem}; the dataset is damaged")

    def get(self, key: str) -> Any:
        if key not in self.value:
            raise ValueError(f"{self.where} lacks the key {self.name}.{key}; the dataset is "
                             "damaged")
        return self.value[key]

    def count(self, key: str, least: int = 0, default: Any = _REQUIRED) -> Any:
        """A JSON integer of at least ``least`` (never a bool); ``default`` if absent."""
        if key not in self.value and default is not _REQUIRED:
            return default
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            kind = "a positive" if least == 1 else "a non-negative"
            raise self.fail(key, f"must be {kind} integer, but got {value!r}")
        return value

    def text(self, key: str, *, null: bool = False, choices: Sequence[str] = ()) -> Any:
        value = self.get(key)
        if value is None and null:
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string{' or null' if null else ''}, but got "
                                 f"{value!r}")
        if choices and value not in choices:
            raise self.fail(key, f"must be one of {tuple(choices)}, but got {value!r}")
        return value

    def sha256(self, key: str, *, null: bool = False) -> Any:
        value = self.text(key, null=null)
        if value is not None and not _SHA256.match(value):
            raise self.fail(key, f"must be 64 lowercase hex digits (a SHA-256), but got "
                                 f"{value!r}")
        return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenizerInfo:
    """The manifest's ``tokenizer``: what the reader needs of it (the rest stays in ``json``).

    ``engine`` names the library that ran a ``tokenizer.json`` (recorded only when set).
    """

    kind: str
    vocab_size: int
    bos_id: int
    eos_id: int
    sha256: str | None
    engine: str | None = None
    # What else the tokenizer records (file, path, bos_token …): kept as written.
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, value: Any, *, where: str) -> TokenizerInfo:
        f = _Fields(value, "tokenizer", where)
        info = cls(kind=f.text("kind"), vocab_size=f.count("vocab_size"),
                   bos_id=f.count("bos_id"), eos_id=f.count("eos_id"),
                   sha256=f.text("sha256", null=True),
                   engine=f.text("engine") if "engine" in f.value else None,
                   extra={k: v for k, v in value.items() if k not in _TOKENIZER_KEYS})
        for key in ("bos_id", "eos_id"):
            if info.vocab_size and getattr(info, key) >= info.vocab_size:
                raise f.fail(key, f"must be below vocab_size {info.vocab_size}, but got "
                                  f"{getattr(info, key)}")
        return info

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``tokenizer`` object (``engine`` only when set)."""
        return {**self.extra, "kind": self.kind, "vocab_size": self.vocab_size,
                "bos_id": self.bos_id, "eos_id": self.eos_id, "sha256": self.sha256,
                **({} if self.engine is None else {"engine": self.engine})}


_TOKENIZER_KEYS = ("kind", "vocab_size", "bos_id", "eos_id", "sha256", "engine")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowsInfo:
    """The manifest's ``windows``: the window parameters and the seed."""

    window: int
    stride: int
    tail: str
    min_tail: int
    score: str
    offset: str
    seed: int

    @classmethod
    def from_json(cls, value: Any, *, where: str) -> WindowsInfo:
        f = _Fields(value, "windows", where)
        return cls(window=f.count("window", 1), stride=f.count("stride", 1),
                   tail=f.text("tail", choices=TAILS), min_tail=f.count("min_tail", 1),
                   score=f.text("score", choices=SCORES),
                   offset=f.text("offset", choices=OFFSETS), seed=f.count("seed"))

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``windows`` object."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Counts:
    """The manifest's ``counts`` (computed by the job from the rows)."""

    documents: int
    documents_without_windows: int
    windows: int
    tokens: int
    pairs: int
    scored_targets: int
    uncovered_pairs: int
    skipped: dict[str, int]
    records: int | None = None  # the writer's fields below; older manifests may lack them
    repaired: dict[str, int] | None = None
    sampled_out: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``counts`` object (the optional counts only when set)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return out

    @classmethod
    def from_json(cls, value: Any, *, where: str) -> Counts:
        f = _Fields(value, "counts", where)
        skipped = _counts(f.get("skipped"), "counts.skipped", where)
        return cls(documents=f.count("documents"),
                   documents_without_windows=f.count("documents_without_windows", 0, 0),
                   windows=f.count("windows"), tokens=f.count("tokens"), pairs=f.count("pairs"),
                   scored_targets=f.count("scored_targets"),
                   uncovered_pairs=f.count("uncovered_pairs"),
                   skipped=skipped,
                   records=f.count("records", 0, None), sampled_out=f.count("sampled_out", 0, None),
                   repaired=_counts(value["repaired"], "counts.repaired", where)
                   if "repaired" in value else None)


def _counts(value: Any, name: str, where: str) -> dict[str, int]:
    f = _Fields(value, name, where)
    return {k: f.count(k) for k in value}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardEntry:
    """One of the manifest's ``shards``: a file name of the format, its counts and SHA-256."""

    file: str
    rows: int
    scored_targets: int
    sha256: str
    documents: int | None = None
    tokens: int | None = None
    bytes: int | None = None

    @classmethod
    def from_json(cls, value: Any, *, index: int, where: str) -> ShardEntry:
        f = _Fields(value, f"shards[{index}]", where)
        file = f.text("file")
        if not SHARD_PATTERN.match(file):
            raise f.fail("file", f"must be a shard name like 'part-00000-of-00001.parquet' "
                                 f"(no directory), but got {file!r}")
        return cls(file=file, rows=f.count("rows"), scored_targets=f.count("scored_targets"),
                   sha256=f.sha256("sha256"), documents=f.count("documents", 0, None),
                   tokens=f.count("tokens", 0, None), bytes=f.count("bytes", 0, None))

    def to_json(self) -> dict[str, Any]:
        """The manifest's entry for this shard."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SplitInfo:
    """A split's manifest's ``split``: its name (a directory name) and the job's record."""

    name: str

    @classmethod
    def from_json(cls, value: Any, *, where: str) -> SplitInfo:
        name = _Fields(value, "split", where).text("name")
        if not name or name in (".", "..") or "/" in name or "\\" in name:
            raise ValueError(f"{where}: split.name must be a directory name, but got {name!r}")
        return cls(name=name)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Manifest:
    """A parsed manifest: the typed values the reader uses, and the whole JSON object.

    Built by :func:`read_manifest`, which checks every value that becomes a path, an index or
    a count, and the invariants the manifest holds by itself: shard i of N is named
    ``part-i-of-N`` (so the list order is the files' order), and the shards' rows, tokens,
    documents and scored targets add up to ``counts``.
    """

    tokenizer: TokenizerInfo
    windows: WindowsInfo
    counts: Counts
    shards: tuple[ShardEntry, ...]
    fingerprint: str | None
    split: SplitInfo | None
    json: dict[str, Any]


def read_manifest(data: bytes | str, *, where: str = "_manifest.json") -> Manifest:
    """Parse and check a manifest; ``where`` names the file in error messages.

    Raises:
        ValueError: the text is not JSON, is another format or version, lacks a key, a value
            has the wrong type or range, or the shards disagree with each other or the counts.
    """
    try:
        manifest = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"{where} is not valid JSON ({e}); the dataset is damaged") from e
    if not isinstance(manifest, dict):
        raise ValueError(f"{where} must hold a JSON object, but holds {type(manifest).__name__}")
    if manifest.get("format") != FORMAT:
        raise ValueError(
            f"{where} has format {manifest.get('format')!r}, but this reader reads {FORMAT!r}")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{where} has format_version {manifest.get('format_version')!r}, but this reader "
            f"reads version {FORMAT_VERSION}; install the version of the project that wrote it")
    for key in ("tokenizer", "windows", "inputs", "counts", "shards"):
        if key not in manifest:
            raise ValueError(f"{where} lacks the key {key!r}; the dataset is damaged")
    for key, kind in (("inputs", list), ("shards", list)):
        if not isinstance(manifest[key], kind):
            raise ValueError(f"{where}: {key} must be a list, but got {manifest[key]!r}")
    shards = tuple(ShardEntry.from_json(s, index=i, where=where)
                   for i, s in enumerate(manifest["shards"]))
    parsed = Manifest(
        tokenizer=TokenizerInfo.from_json(manifest["tokenizer"], where=where),
        windows=WindowsInfo.from_json(manifest["windows"], where=where),
        counts=Counts.from_json(manifest["counts"], where=where), shards=shards,
        fingerprint=_Fields(manifest, "", where).sha256("fingerprint", null=True)
        if "fingerprint" in manifest else None,
        split=SplitInfo.from_json(manifest["split"], where=where) if "split" in manifest
        else None,
        json=manifest)
    _check_shard_list(parsed, where=where)
    return parsed


def _check_shard_list(m: Manifest, *, where: str) -> None:
    """The invariants a manifest holds by itself: names in order, sums equal the counts."""
    n = len(m.shards)
    said = m.json.get("num_shards", n)
    if said != n or isinstance(said, bool):
        raise ValueError(f"{where}: num_shards is {said!r}, but it lists {n} shards; the "
                         "dataset is damaged")
    for i, s in enumerate(m.shards):
        if s.file != shard_file_name(i, n):
            raise ValueError(
                f"{where}: shards[{i}] is {s.file!r}, but shard {i} of {n} is "
                f"{shard_file_name(i, n)!r}: the shard list was edited or reordered; the "
                "dataset is damaged")
    for key, total in (("rows", "windows"), ("scored_targets", "scored_targets"),
                       ("tokens", "tokens"), ("documents", "documents")):
        values = [getattr(s, key) for s in m.shards]
        if any(v is None for v in values):
            continue
        if sum(values) != getattr(m.counts, total):
            raise ValueError(
                f"{where} says counts.{total} is {getattr(m.counts, total)}, but its shards' "
                f"{key} add up to {sum(values)}; the dataset is damaged")
