"""The manifest: one definition of what it holds, used by the writer and the reader.

Specified in docs/format.md#the-manifest (and #the-splits-record).

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
from collections.abc import Sequence
from typing import Any

from transforms.rows import ShardCounts
from transforms.schema import COUNTS_KEY, FINGERPRINT_KEY, FORMAT, FORMAT_VERSION, SHARD_KEY

__all__ = [
    "LEGACY_MANIFEST_NAME",
    "MANIFEST_NAME",
    "SPLITS_FORMAT",
    "WrittenShard",
    "build_manifest",
    "build_splits_record",
    "check_skipped_share",
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


_FIXES = {
    "missing_text": "pass --text-field naming the field that holds the text",
    "text_not_string": "pass --text-field naming a field that holds a string",
    "not_an_object": "the input must hold one JSON object per line (JSONL), not a "
                     "pretty-printed array or other values",
    "malformed_json": "is the input JSONL? pass --format text or lines for plain text",
    "missing_id": "pass --id-field naming a field every record has, or drop --id-field",
    "invalid_id": "pass --id-field naming a string or integer field, or drop --id-field",
    "duplicate_id": "pass --id-field naming a field whose values are unique, or drop it",
    "empty": "pass --text-field naming the field with the text, or --keep-empty",
    "blank_line": "the input holds no records",
    "invalid_utf8": "the input is not UTF-8; convert it, or pass --invalid-utf8 replace",
    "too_large": "raise --max-doc-bytes",
}


def _keys_of(record: str) -> str | None:
    try:
        value = json.loads(record)
    except (ValueError, RecursionError):
        return None
    return ", ".join(map(str, value)) if isinstance(value, dict) else None


def check_skipped_share(*, records: int, skipped: dict[str, int], first: dict[str, Any],
                        max_share: float) -> None:
    """Fail a job whose records were (almost) all skipped: a wrong flag, not dirty data.

    Args:
        records: the records read; skipped: {reason: count}.
        first: {reason: the first `transforms.documents.Reject` of that reason}.
        max_share: the largest share of skipped records tolerated; every record skipped
            always fails (an empty dataset is never what was asked for).

    Raises:
        RuntimeError: naming the reasons, the first record (where it is, its keys) and the
            fix.
    """
    total = sum(skipped.values())
    if records == 0 or (total < records and total <= max_share * records):
        return
    reasons = {k: v for k, v in sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0])) if v}
    top = next(iter(reasons))
    if len(reasons) == 1:
        why = f"as {top}"
    else:
        why = "(" + ", ".join(f"{k} {v}" for k, v in reasons.items()) + ")"
    if total == records:
        head = f"all {records} records skipped {why}"
    else:
        head = (f"{total} of {records} records ({100 * total / records:.1f} %) skipped {why}, "
                f"more than --max-skipped-share {max_share}")
    reject = first.get(top)
    where = ""
    if reject is not None:
        keys = _keys_of(reject.record)
        where = f"; the first record ({reject.source})"
        where += f" has keys {keys}" if keys is not None else f": {reject.detail}"
    fix = _FIXES.get(top, "see rejects/" + top + ".jsonl")
    raise RuntimeError(f"{head}{where}: {fix}; no manifest was written")


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


class _Count:
    """A JSON integer of at least ``least`` (never a bool)."""

    def __init__(self, least: int) -> None:
        self.least = least

    def problem(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or value < self.least:
            kind = "a positive" if self.least == 1 else "a non-negative"
            return f"must be {kind} integer, but got {value!r}"
        return None


class _Json:
    """A JSON value of one of ``types``."""

    def __init__(self, *types: type | None) -> None:
        self.types = tuple(type(None) if t is None else t for t in types)

    def problem(self, value: Any) -> str | None:
        if isinstance(value, self.types) and not (isinstance(value, bool) and int in self.types):
            return None
        names = " or ".join("null" if t is type(None) else _JSON_NAMES[t] for t in self.types)
        return f"must be {names}, but got {value!r}"


_JSON_NAMES = {str: "a string", int: "an integer", dict: "an object", list: "a list"}
_COUNT, _POSITIVE = _Count(0), _Count(1)

# What every manifest must hold, and what the reader relies on in each value.
_REQUIRED: dict[str, Any] = {
    "tokenizer": {"kind": _Json(str), "vocab_size": _COUNT, "bos_id": _COUNT, "eos_id": _COUNT,
                  "sha256": _Json(str, None)},
    "windows": {"window": _POSITIVE, "stride": _POSITIVE, "tail": _Json(str),
                "min_tail": _POSITIVE, "score": _Json(str), "offset": _Json(str),
                "seed": _COUNT},
    "inputs": _Json(list),
    "counts": {"documents": _COUNT, "skipped": _Json(dict), "windows": _COUNT, "tokens": _COUNT,
               "pairs": _COUNT, "scored_targets": _COUNT, "uncovered_pairs": _COUNT},
    "shards": _Json(list),
}
_SHARD = {"file": _Json(str), "rows": _COUNT, "scored_targets": _COUNT, "sha256": _Json(str)}


def _check(where: str, name: str, value: Any, rule: Any) -> None:
    problem = rule.problem(value)
    if problem is not None:
        raise ValueError(f"{where}: {name} {problem}; the dataset is damaged")


def _check_object(where: str, name: str, value: Any, rules: dict[str, Any]) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {name} must be an object, but got {value!r}")
    for key, rule in rules.items():
        if key not in value:
            raise ValueError(f"{where} lacks the key {name}.{key}; the dataset is damaged")
        _check(where, f"{name}.{key}", value[key], rule)


def parse_manifest(data: bytes | str, *, where: str = MANIFEST_NAME) -> dict[str, Any]:
    """Parse and check a manifest; ``where`` names the file in error messages.

    Raises:
        ValueError: the text is not JSON, is another format or version, lacks a key, or a
            value has the wrong type.
    """
    try:
        manifest = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{where} is not valid JSON ({e}); the dataset is damaged") from e
    if not isinstance(manifest, dict):
        raise ValueError(f"{where} must hold a JSON object, but holds {type(manifest).__name__}")
    if manifest.get("format") != FORMAT:
        raise ValueError(
            f"{where} has format {manifest.get('format')!r}, but this reader reads {FORMAT!r}"
        )
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{where} has format_version {manifest.get('format_version')!r}, but this reader "
            f"reads version {FORMAT_VERSION}; install the version of the project that wrote it"
        )
    for key, rule in _REQUIRED.items():
        if key not in manifest:
            raise ValueError(f"{where} lacks the key {key!r}; the dataset is damaged")
        if isinstance(rule, dict):
            _check_object(where, key, manifest[key], rule)
        else:
            _check(where, key, manifest[key], rule)
    for i, shard in enumerate(manifest["shards"]):
        _check_object(where, f"shards[{i}]", shard, _SHARD)
    return manifest
