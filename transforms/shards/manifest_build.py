"""Building the manifest: the writer's side of `transforms.dataset.manifest`
(docs/format.md#the-manifest).

`build_manifest` sums the shards' own counts into the `transforms.dataset.manifest.Manifest` record
and checks that records add up; `build_splits_record` does the same for a split job's
``OUTPUT/_splits.json`` (docs/format.md#the-splits-record). A split's own ``counts`` are its
documents' (records = documents, skipped = {}); the job's are in ``split.job`` and in the
splits record (records = documents of every split + skipped + sampled_out); the job's
rejects are in ``OUTPUT/_rejects/``.

Example: a job that read 3 records, skipped 2 as ``empty`` and kept one document "abc"
(window 4) has ``counts.records == 3``, ``counts.skipped == {"empty": 2}``,
``counts.windows == 1`` and ``counts.tokens == 5``. Records that do not add up
(records ≠ documents + skipped) are a `RuntimeError`: no manifest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence

from transforms.dataset.manifest import (
    Counts,
    DedupInfo,
    Manifest,
    SampleInfo,
    ShardEntry,
    SplitEntry,
    SplitInfo,
    SplitsRecord,
    TokenizerInfo,
    WindowsInfo,
    dumps_manifest,
    read_manifest,
)
from transforms.dataset.schema import COUNTS_KEY, FINGERPRINT_KEY, FORMAT, FORMAT_VERSION, SHARD_KEY
from transforms.json_fields import JsonObject
from transforms.params import WindowSpec
from transforms.shards.rows import ShardCounts

__all__ = ["WrittenShard", "build_manifest", "build_splits_record", "job_fingerprint",
           "shard_metadata"]


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


def job_fingerprint(
    *,
    tokenizer: TokenizerInfo,
    windows: JsonObject,
    reading: JsonObject,
    num_shards: int | None,
    files: Sequence[tuple[int, str, int]],
    splits: JsonObject | None = None,
    dedup: JsonObject | None = None,
) -> str:
    """A SHA-256 hex digest that names the job: its parameters (as the manifest records
    them), its tokenizer (with the model's SHA-256) and its matched inputs (pattern index,
    relative name, size).

    Derived from the job alone, so the same job gives the same fingerprint (and the same
    bytes) on any machine: no clock, no random part, no absolute paths, no mtimes (a copied
    corpus has other mtimes but the same content; changes while a job runs are caught by
    comparing mtimes, not through the fingerprint). ``splits``: the sample and split
    definition (`transforms.plan.splits.SplitSpec.to_json`), None (or empty) for a job without.
    ``dedup``: the dedup and decontamination parameters
    (`transforms.dedup.removal.RemovalSpec.fingerprint_json`), None for a job without them, whose
    fingerprint is what it was before those flags existed.
    """
    # The model is named by its content: where it lies (the manifest's tokenizer.path, as
    # the job was given it) is no part of the job.
    # Nor is the engine that encoded it (docs/tokenizers.md#engines): its ids are the same.
    model = {k: v for k, v in tokenizer.to_json().items() if k not in ("path", "engine")}
    job = {"format": FORMAT, "format_version": FORMAT_VERSION, "tokenizer": model,
           "windows": windows, "reading": reading, "num_shards": num_shards,
           "files": sorted([int(i), str(rel), int(size)] for i, rel, size in files)}
    if splits:
        job["splits"] = splits
    if dedup:
        job["dedup"] = dedup
    text = json.dumps(job, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def shard_metadata(*, fingerprint: str, index: int, num_shards: int,
                   counts: ShardCounts) -> dict[str, str]:
    """The key-value metadata of a shard's Parquet footer (`transforms.dataset.schema`)."""
    return {
        FINGERPRINT_KEY: fingerprint,
        SHARD_KEY: f"{index}/{num_shards}",
        COUNTS_KEY: json.dumps({"rows": counts.rows, "documents": counts.documents,
                                "tokens": counts.tokens,
                                "scored_targets": counts.scored_targets}, sort_keys=True),
    }


def _nonzero(skipped: Mapping[str, int]) -> dict[str, int]:
    return {k: v for k, v in sorted(skipped.items()) if v}


def build_manifest(
    *,
    tokenizer: TokenizerInfo,
    windows: WindowSpec,
    inputs: Sequence[str],
    reading: JsonObject,
    shards: Sequence[WrittenShard],
    skipped: Mapping[str, int],
    records: int,
    row_group_rows: int,
    versions: dict[str, str],
    fingerprint: str | None = None,
    sample: SampleInfo | None = None,
    sampled_out: int = 0,
    split: SplitInfo | None = None,
    dedup: DedupInfo | None = None,
) -> Manifest:
    """The manifest, with counts summed from the shards' own counts.

    ``reading`` is `transforms.params.ReadSpec.to_json`; ``sample`` and ``sampled_out``
    describe ``--sample``; ``split`` is a split's own record (its name, the split definition
    and the job's counts); ``dedup`` the manifest's ``dedup`` record
    (`transforms.dedup.removal.RemovalSpec.to_json`, parsed), None for a job without --dedup or
    --decontaminate.

    Raises:
        RuntimeError: records read ≠ documents written + records skipped (+ sampled out):
            something was lost, and the dataset must not look finished.
    """
    shards = sorted(shards, key=lambda s: s.file)
    total = sum((s.counts for s in shards), ShardCounts())
    skipped = _nonzero(skipped)
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
    manifest = Manifest(
        tokenizer=tokenizer, windows=WindowsInfo(**dataclasses.asdict(windows)),
        inputs=tuple(inputs), reading=reading, counts=counts, num_shards=len(shards),
        row_group_rows=row_group_rows, shards=tuple(s.entry() for s in shards),
        versions=versions, fingerprint=fingerprint, sample=sample, split=split, dedup=dedup)
    # What every reader will check, on the bytes every reader will see.
    read_manifest(dumps_manifest(manifest), where="the manifest being written")
    return manifest


def build_splits_record(
    *,
    manifests: Mapping[str, Manifest],
    fractions: Mapping[str, float],
    split_seed: int,
    skipped: Mapping[str, int],
    records: int,
    sampled_out: int,
    fingerprint: str,
    dedup: DedupInfo | None = None,
) -> SplitsRecord:
    """``OUTPUT/_splits.json``: the job's record of its splits, written after their manifests.

    Args:
        manifests: {split name: its manifest, as built}, in the order of the splits.
        fractions: {split name: its share}; split_seed: the job's ``--split-seed``.
        skipped, records, sampled_out: the whole job's; fingerprint: the job's.

    Raises:
        RuntimeError: records ≠ Σ documents of the splits + skipped + sampled out.
    """
    skipped = _nonzero(skipped)
    counted = ("documents", "documents_without_windows", "windows", "tokens", "pairs",
               "scored_targets", "uncovered_pairs")
    totals = {k: sum(getattr(m.counts, k) for m in manifests.values()) for k in counted}
    if totals["documents"] + sum(skipped.values()) + sampled_out != records:
        raise RuntimeError(
            f"accounting failed: {records} records were read but the splits hold "
            f"{totals['documents']} documents, {sum(skipped.values())} were skipped and "
            f"{sampled_out} left out by the sample; no manifest was written")
    first = next(iter(manifests.values()))
    repaired = sum((m.counts.repaired or {}).get("invalid_utf8", 0) for m in manifests.values())
    return SplitsRecord(
        tokenizer=first.tokenizer, windows=first.windows, inputs=first.inputs,
        reading=first.reading, split_seed=split_seed, sample=first.sample,
        counts=Counts(records=records, **totals, skipped=skipped, sampled_out=sampled_out,
                      repaired={"invalid_utf8": repaired}),
        splits=tuple(
            SplitEntry(name=name, dir=name, fraction=fractions[name],
                       num_shards=len(m.shards), fingerprint=m.fingerprint or "",
                       manifest_sha256=hashlib.sha256(dumps_manifest(m)).hexdigest(),
                       documents=m.counts.documents, windows=m.counts.windows,
                       tokens=m.counts.tokens, scored_targets=m.counts.scored_targets)
            for name, m in manifests.items()),
        versions=first.versions, fingerprint=fingerprint, dedup=dedup)
