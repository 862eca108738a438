"""The job's last lines (any runner): what the corpus holds and what the windows hold.

One dataset: one line, from its manifest. A split job: one line per split, then the whole
job's, from ``_splits.json``. Corpus pairs (Σ P over documents) are the corpus size in
targets; window tokens (Σ (length + 1)) count every overlap again. Their ratio, the overlap
factor, is window pairs per covered corpus pair.
"""

from __future__ import annotations

import sys
from typing import TextIO

from pipeline.files import fs
from transforms.dataset.manifest import Manifest, SplitsRecord
from transforms.dataset.schema import REJECTS_DIR

__all__ = ["print_summary"]


def print_summary(record: Manifest | SplitsRecord, output: str, seconds: float, *,
                  stream: TextIO | None = None) -> None:
    """Print the end of a job whose manifest is ``record`` (a split job: its
    ``_splits.json``, `transforms.dataset.manifest.parse_splits_record`), written to
    ``output`` in ``seconds``."""
    stream = stream or sys.stdout
    if isinstance(record, Manifest):
        lines = [_dataset_line(record, output, seconds)]
    else:
        lines = _split_lines(record, output, seconds)
    stream.write("".join(line + "\n" for line in lines))
    stream.flush()


def _skipped(skipped: dict[str, int], sampled_out: int | None, fraction: float | None,
             output: str) -> tuple[int, str, str]:
    """(records skipped, the sample's words, where the rejects are)."""
    total = sum(skipped.values())
    reasons = ", ".join(f"{k} {v:,}" for k, v in skipped.items())
    sampled = (f", {sampled_out:,} left out by --sample {fraction}"
               if fraction is not None else "")
    rejects = (f"rejects in {fs.join(output, REJECTS_DIR)}/ ({reasons})" if total
               else "no rejects")
    return total, sampled, rejects


def _dataset_line(manifest: Manifest, output: str, seconds: float) -> str:
    c = manifest.counts
    skipped, sampled, rejects = _skipped(
        c.skipped, c.sampled_out, None if manifest.sample is None else manifest.sample.fraction,
        output)
    window_pairs = c.tokens - c.windows
    covered = c.pairs - c.uncovered_pairs
    corpus_tokens = c.pairs + c.documents  # Σ M
    repaired = sum((c.repaired or {}).values())
    n = len(manifest.shards)  # read_manifest checked it is num_shards
    shards = f"{n} shard" if n == 1 else f"{n} shards"
    return (
        f"wrote {output}: {c.records or 0:,} records -> {c.documents:,} documents "
        f"({skipped:,} skipped, {repaired:,} repaired{sampled}); corpus {c.pairs:,} pairs; "
        f"{c.windows:,} windows hold {c.tokens:,} tokens, overlap factor "
        f"{window_pairs / covered if covered else 0:.2f}; {c.scored_targets:,} scored "
        f"targets, {c.uncovered_pairs:,} uncovered pairs; {shards} "
        f"in {seconds:.1f} s ({corpus_tokens / max(seconds, 1e-9):,.0f} corpus tokens/s); "
        f"{rejects}"
    )


def _split_lines(record: SplitsRecord, output: str, seconds: float) -> list[str]:
    c = record.counts
    lines = []
    for s in record.splits:
        n = s.num_shards
        lines.append(f"wrote {output.rstrip('/')}/{s.dir}: split {s.name} "
                     f"({100 * s.fraction:g} %), {s.documents:,} documents, "
                     f"{s.windows:,} windows, {s.tokens:,} tokens, "
                     f"{s.scored_targets:,} scored targets; {n} shard{'s' * (n != 1)}")
    sample = record.sample
    skipped, sampled, rejects = _skipped(c.skipped, c.sampled_out,
                                         sample.fraction if sample else None, output)
    lines.append(f"wrote {output}: {c.records or 0:,} records -> {c.documents:,} documents in "
                 f"{len(record.splits)} splits ({skipped:,} skipped{sampled}) in "
                 f"{seconds:.1f} s; {rejects}")
    return lines
