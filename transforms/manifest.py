"""The manifest: one definition of what it holds, used by the writer and the reader (SPEC §5).

``_manifest.json`` is written last, once every shard and reject file is complete: a directory
without it is not a dataset. It holds the job's parameters and exact counts computed from the
rows themselves::

    format, format_version            "token-windows", 1
    tokenizer                         kind, vocab_size, bos_id, eos_id, sha256 (null: bytes)
    windows                           window, stride, tail, min_tail, score, offset, seed
    inputs, reading                   the --input patterns; how records became documents
    counts                            records, documents, documents_without_windows,
                                      skipped {reason: n}, repaired {invalid_utf8: n},
                                      windows, tokens, pairs, scored_targets, uncovered_pairs
    num_shards, row_group_rows
    shards                            [{file, rows, documents, tokens, scored_targets, bytes,
                                        sha256}] in file order
    versions                          the packages that shape the bytes
    fingerprint                       `job_fingerprint`, also in every shard's footer
    sample                            with --sample: {fraction, seed}; counts.sampled_out
                                      then counts the documents it left out
    split                             in a split's manifest: {name, splits, split_seed, job}
                                      (`transforms.splits`)

A split job (``--split``) writes one dataset per split in ``OUTPUT/NAME/`` and, last, the
job's record ``OUTPUT/_splits.json`` (`build_splits_record`): the whole job's counts
(records = documents of every split + skipped + sampled_out) and each split's. A split's
own ``counts`` are its documents' (records = documents, skipped = {}); the job's rejects are
in ``OUTPUT/_rejects/``.

Example: a job that read 3 records, skipped 2 as ``empty`` and kept one document "abc"
(window 4) has ``counts.records == 3``, ``counts.skipped == {"empty": 2}``,
``counts.windows == 1`` and ``counts.tokens == 5``. Records that do not add up
(records ≠ documents + skipped) are a `RuntimeError`: no manifest.

`dumps_manifest` is deterministic (sorted keys, fixed indentation, final newline);
`parse_manifest` checks the format, the version, every required key and the type of every
value the reader relies on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from transforms.rows import ShardCounts
from transforms.schema import (
    COUNTS_KEY,
    FINGERPRINT_KEY,
    FORMAT,
    FORMAT_VERSION,
    SHARD_KEY,
    SHARD_PATTERN,
    shard_file_name,
)

__all__ = [
    "LEGACY_MANIFEST_NAME",
    "MANIFEST_NAME",
    "SPLITS_FORMAT",
    "WrittenShard",
    "build_manifest",
    "build_splits_record",
    "dumps_manifest",
    "job_fingerprint",
    "parse_manifest",
    "parse_splits_record",
    "shard_metadata",
]

SPLITS_FORMAT = "token-windows-splits"

MANIFEST_NAME = "_manifest.json"
# Its name in datasets written by token-windows 0.1.0; readers refuse it with the fix.
LEGACY_MANIFEST_NAME = "manifest.json"


@dataclasses.dataclass(frozen=True, kw_only=True)
class WrittenShard:
    """One shard as written: its file name, index, checksum, size and counts."""

    file: str
    index: int
    sha256: str
    bytes: int
    counts: ShardCounts

    def to_json(self) -> dict[str, Any]:
        """The manifest's entry for this shard."""
        c = self.counts
        return {"file": self.file, "rows": c.rows, "documents": c.documents, "tokens": c.tokens,
                "scored_targets": c.scored_targets, "bytes": self.bytes, "sha256": self.sha256}


def job_fingerprint(
    *,
    tokenizer: dict[str, Any],
    windows: dict[str, Any],
    reading: dict[str, Any],
    num_shards: int | None,
    files: Sequence[tuple[int, str, int]],
    splits: dict[str, Any] | None = None,
) -> str:
    """A SHA-256 hex digest that names the job: its parameters, its tokenizer (with the
    model's SHA-256) and its matched inputs (pattern index, relative name, size).

    Derived from the job alone, so the same job gives the same fingerprint (and the same
    bytes) on any machine: no clock, no random part, no absolute paths, no mtimes (a copied
    corpus has other mtimes but the same content; changes while a job runs are caught by
    comparing mtimes, not through the fingerprint). ``splits``: the sample and split
    definition (`transforms.splits.SplitSpec.to_json`), None (or empty) for a job without.
    """
    # The model is named by its content: where it lies (the manifest's tokenizer.path, as
    # the job was given it) is no part of the job.
    model = {k: v for k, v in tokenizer.items() if k != "path"}
    job = {"format": FORMAT, "format_version": FORMAT_VERSION, "tokenizer": model,
           "windows": windows, "reading": reading, "num_shards": num_shards,
           "files": sorted([int(i), str(rel), int(size)] for i, rel, size in files)}
    if splits:
        job["splits"] = splits
    text = json.dumps(job, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def shard_metadata(*, fingerprint: str, index: int, num_shards: int,
                   counts: ShardCounts) -> dict[str, str]:
    """The key-value metadata of a shard's Parquet footer (`transforms.schema`)."""
    return {
        FINGERPRINT_KEY: fingerprint,
        SHARD_KEY: f"{index}/{num_shards}",
        COUNTS_KEY: json.dumps({"rows": counts.rows, "documents": counts.documents,
                                "tokens": counts.tokens,
                                "scored_targets": counts.scored_targets}, sort_keys=True),
    }


def build_manifest(
    *,
    tokenizer: dict[str, Any],
    windows: dict[str, Any],
    inputs: Sequence[str],
    reading: dict[str, Any],
    shards: Sequence[WrittenShard],
    skipped: dict[str, int],
    records: int,
    row_group_rows: int,
    versions: dict[str, str],
    fingerprint: str | None = None,
    sample: dict[str, Any] | None = None,
    sampled_out: int = 0,
    split: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest, with counts summed from the shards' own counts.

    ``sample`` ({fraction, seed}) and ``sampled_out`` describe ``--sample``; ``split`` is a
    split's own object (its name, the split definition and the job's counts).

    Raises:
        RuntimeError: records read ≠ documents written + records skipped (+ sampled out):
            something was lost, and the dataset must not look finished.
    """
    shards = sorted(shards, key=lambda s: s.file)
    total = sum((s.counts for s in shards), ShardCounts())
    skipped = {k: v for k, v in sorted(skipped.items()) if v}
    if total.documents + sum(skipped.values()) + sampled_out != records:
        out = f", {sampled_out} left out by the sample" if sample else ""
        raise RuntimeError(
            f"accounting failed: {records} records were read but {total.documents} "
            f"documents were written and {sum(skipped.values())} skipped ({skipped}){out}; "
            "no manifest was written"
        )
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tokenizer": tokenizer,
        "windows": windows,
        "inputs": list(inputs),
        "reading": reading,
        "counts": {
            "records": records,
            "documents": total.documents,
            "documents_without_windows": total.documents_without_windows,
            "skipped": skipped,
            "repaired": {"invalid_utf8": total.repaired_invalid_utf8},
            "windows": total.rows,
            "tokens": total.tokens,
            "pairs": total.pairs,
            "scored_targets": total.scored_targets,
            "uncovered_pairs": total.uncovered_pairs,
        },
        "num_shards": len(shards),
        "row_group_rows": row_group_rows,
        "shards": [s.to_json() for s in shards],
        "versions": versions,
    }
    if fingerprint is not None:
        manifest["fingerprint"] = fingerprint
    if sample is not None:
        manifest["sample"] = sample
        if split is None:  # a split's is the job's, under split.job (none has its own)
            manifest["counts"]["sampled_out"] = sampled_out  # type: ignore[index]
    if split is not None:
        manifest["split"] = split
    return manifest


def build_splits_record(
    *,
    manifests: dict[str, dict[str, Any]],
    definition: dict[str, Any],
    skipped: dict[str, int],
    records: int,
    sampled_out: int,
    fingerprints: dict[str, str],
    fingerprint: str,
) -> dict[str, Any]:
    """``OUTPUT/_splits.json``: the job's record of its splits, written after their manifests.

    Args:
        manifests: {split name: its manifest, as built}, in the order of the splits.
        definition: `transforms.splits.SplitSpec.to_json`; fingerprints: {name: the split's}.
        skipped, records, sampled_out: the whole job's.

    Raises:
        RuntimeError: records ≠ Σ documents of the splits + skipped + sampled out.
    """
    skipped = {k: v for k, v in sorted(skipped.items()) if v}
    counted = ("documents", "documents_without_windows", "windows", "tokens", "pairs",
               "scored_targets", "uncovered_pairs")
    totals = {k: sum(m["counts"][k] for m in manifests.values()) for k in counted}
    if totals["documents"] + sum(skipped.values()) + sampled_out != records:
        raise RuntimeError(
            f"accounting failed: {records} records were read but the splits hold "
            f"{totals['documents']} documents, {sum(skipped.values())} were skipped and "
            f"{sampled_out} left out by the sample; no manifest was written")
    first = next(iter(manifests.values()))
    fractions = {s["name"]: s["fraction"] for s in definition["splits"]}
    return {
        "format": SPLITS_FORMAT,
        "format_version": FORMAT_VERSION,
        "tokenizer": first["tokenizer"],
        "windows": first["windows"],
        "inputs": first["inputs"],
        "reading": first["reading"],
        **{k: v for k, v in definition.items() if k != "splits"},
        "counts": {"records": records, **totals, "skipped": skipped, "sampled_out": sampled_out,
                   "repaired": {"invalid_utf8": sum(m["counts"]["repaired"]["invalid_utf8"]
                                                    for m in manifests.values())}},
        "splits": [
            {"name": name, "dir": name, "fraction": fractions[name],
             "num_shards": m["num_shards"], "fingerprint": fingerprints[name],
             "manifest_sha256": hashlib.sha256(dumps_manifest(m)).hexdigest(),
             **{k: m["counts"][k] for k in ("documents", "windows", "tokens",
                                            "scored_targets")}}
            for name, m in manifests.items()
        ],
        "versions": first["versions"],
        "fingerprint": fingerprint,
    }


def parse_splits_record(data: bytes | str, *, where: str) -> dict[str, Any]:
    """Parse ``_splits.json``; raises ValueError if it is not one (naming ``where``)."""
    try:
        record = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{where} is not valid JSON ({e}); the output is damaged") from e
    if not isinstance(record, dict) or record.get("format") != SPLITS_FORMAT:
        raise ValueError(f"{where} is not a token-windows split record")
    splits = record.get("splits")
    if not isinstance(splits, list) or not all(
            isinstance(s, dict) and isinstance(s.get("name"), str) for s in splits):
        raise ValueError(f"{where}: splits must be a list of objects with a name; the output "
                         "is damaged")
    counts = record.get("counts")
    if not isinstance(counts, dict) or not isinstance(counts.get("skipped"), dict):
        raise ValueError(f"{where} lacks counts.skipped; the output is damaged")
    return record


def dumps_manifest(manifest: dict[str, Any]) -> bytes:
    """Serialise a manifest deterministically (sorted keys, fixed separators, final newline)."""
    return (json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


# -- the parsed manifest -------------------------------------------------------------------

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

    @classmethod
    def from_json(cls, value: Any, *, where: str) -> TokenizerInfo:
        f = _Fields(value, "tokenizer", where)
        info = cls(kind=f.text("kind"), vocab_size=f.count("vocab_size"),
                   bos_id=f.count("bos_id"), eos_id=f.count("eos_id"),
                   sha256=f.text("sha256", null=True),
                   engine=f.text("engine") if "engine" in f.value else None)
        for key in ("bos_id", "eos_id"):
            if info.vocab_size and getattr(info, key) >= info.vocab_size:
                raise f.fail(key, f"must be below vocab_size {info.vocab_size}, but got "
                                  f"{getattr(info, key)}")
        if info.bos_id == info.eos_id and info.vocab_size:
            raise f.fail("eos_id", f"must differ from bos_id, but both are {info.bos_id}")
        return info


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

    @classmethod
    def from_json(cls, value: Any, *, where: str) -> Counts:
        f = _Fields(value, "counts", where)
        skipped = f.get("skipped")
        if not isinstance(skipped, dict):
            raise f.fail("skipped", f"must be an object, but got {skipped!r}")
        reasons = _Fields(skipped, "counts.skipped", where)
        return cls(documents=f.count("documents"),
                   documents_without_windows=f.count("documents_without_windows", 0, 0),
                   windows=f.count("windows"), tokens=f.count("tokens"), pairs=f.count("pairs"),
                   scored_targets=f.count("scored_targets"),
                   uncovered_pairs=f.count("uncovered_pairs"),
                   skipped={k: reasons.count(k) for k in skipped})


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


def read_manifest(data: bytes | str, *, where: str = MANIFEST_NAME) -> Manifest:
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


def parse_manifest(data: bytes | str, *, where: str = MANIFEST_NAME) -> dict[str, Any]:
    """:func:`read_manifest`'s checks; returns the manifest's JSON object."""
    return read_manifest(data, where=where).json
