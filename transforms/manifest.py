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

`dumps_manifest` is deterministic (sorted keys, fixed indentation, final newline). Readers
parse a manifest with `transforms.manifest_read.read_manifest` (typed, every value the reader
relies on checked; re-exported here) or `parse_manifest` (the same checks, the JSON object).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from transforms.manifest_read import (
    Counts,
    Manifest,
    ShardEntry,
    TokenizerInfo,
    WindowsInfo,
    read_manifest,
)
from transforms.rows import ShardCounts
from transforms.schema import COUNTS_KEY, FINGERPRINT_KEY, FORMAT, FORMAT_VERSION, SHARD_KEY

__all__ = [
    "LEGACY_MANIFEST_NAME",
    "MANIFEST_NAME",
    "Manifest",
    "SPLITS_FORMAT",
    "WrittenShard",
    "build_manifest",
    "build_splits_record",
    "dumps_manifest",
    "job_fingerprint",
    "parse_manifest",
    "parse_splits_record",
    "read_manifest",
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

    def entry(self) -> ShardEntry:
        """The manifest's entry for this shard."""
        c = self.counts
        return ShardEntry(file=self.file, rows=c.rows, documents=c.documents, tokens=c.tokens,
                          scored_targets=c.scored_targets, bytes=self.bytes, sha256=self.sha256)

    def to_json(self) -> dict[str, Any]:
        """The manifest's entry for this shard, as JSON."""
        return self.entry().to_json()


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
    # Nor is the engine that encoded it (docs/tokenizers.md#engines): its ids are the same.
    model = {k: v for k, v in tokenizer.items() if k not in ("path", "engine")}
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
    counts = Counts(
        records=records, documents=total.documents,
        documents_without_windows=total.documents_without_windows, skipped=skipped,
        repaired={"invalid_utf8": total.repaired_invalid_utf8}, windows=total.rows,
        tokens=total.tokens, pairs=total.pairs, scored_targets=total.scored_targets,
        uncovered_pairs=total.uncovered_pairs,
        # A split's is the job's, under split.job (none has its own).
        sampled_out=sampled_out if sample is not None and split is None else None)
    where = "the manifest being written"
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tokenizer": TokenizerInfo.from_json(tokenizer, where=where).to_json(),
        "windows": WindowsInfo.from_json(windows, where=where).to_json(),
        "inputs": list(inputs),
        "reading": reading,
        "counts": counts.to_json(),
        "num_shards": len(shards),
        "row_group_rows": row_group_rows,
        "shards": [s.entry().to_json() for s in shards],
        "versions": versions,
        **({} if fingerprint is None else {"fingerprint": fingerprint}),
        **({} if sample is None else {"sample": sample}),
        **({} if split is None else {"split": split}),
    }
    read_manifest(dumps_manifest(manifest), where=where)  # what every reader will check
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


def parse_manifest(data: bytes | str, *, where: str = MANIFEST_NAME) -> dict[str, Any]:
    """Parse and check a manifest (`transforms.manifest_read.read_manifest`); returns its JSON
    object. ``where`` names the file in error messages.

    Raises:
        ValueError: the text is not JSON, is another format or version, lacks a key, a value
            has the wrong type or range, or the shards disagree with each other or the counts.
    """
    return read_manifest(data, where=where).json
