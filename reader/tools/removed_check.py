"""``inspect`` of a job with ``--dedup`` or ``--decontaminate``: the lines that say what it
removed (`removal_lines`), and ``--check``'s checks of what the rows, the manifest and the
kept-aside files can prove (`check_removed`).

The shards hold tokens, not texts (and not every tokenizer decodes back to the text), so
the clusters cannot be hashed again from the rows. What is checked instead, from the rows,
the manifest's ``dedup`` and ``counts`` and ``_rejects/{exact_duplicate, near_duplicate,
contaminated}.jsonl`` (in the job's directory: a split's parent):

* each file holds as many records as the job's ``counts.skipped`` says for its reason, and
  ``contaminated.jsonl`` as many per evaluation file as ``dedup.decontaminate.files``;
* no removed doc_id is among the rows' documents;
* a copy names the doc_id kept in its place, which is not larger than its own (the smallest
  of its cluster is kept) and is itself no removed document;
* that kept document is in the rows whenever its doc_id says it belongs here: in this
  dataset (or, with ``--split``, in this split; with ``--sample``, if the sample keeps it),
  unless some document has no window (then it may be one of those). So no copy of a
  document can be in another split than the document.

pyarrow only: no Beam, no torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from reader.data.regular import check_regular
from transforms.dataset.manifest import MANIFEST_NAME, Manifest
from transforms.dataset.schema import REJECTS_DIR
from transforms.plan.splits import SplitSpec

if TYPE_CHECKING:
    from reader.tools.inspect import InspectedDataset

__all__ = ["check_removed", "removal_lines"]

COPIES = ("exact_duplicate", "near_duplicate")
REMOVED = ("contaminated", *COPIES)


def _kept_aside(ds: InspectedDataset, reason: str) -> list[dict] | None:
    """The records of ``_rejects/<reason>.jsonl`` of the job, None if the file is absent."""
    root = ds.files.location.root.rstrip("/")
    job_root = root.rsplit("/", 1)[0] if ds.manifest.split is not None else root
    path = f"{job_root}/{REJECTS_DIR}/{reason}.jsonl"
    if not check_regular(ds.fs, path, shown=path,
                         fix="the job writes only regular files there; rerun it"):
        return None
    with ds.fs.open_input_stream(path) as f:
        return [json.loads(line) for line in f.read().decode("utf-8").splitlines() if line]


def check_removed(ds: InspectedDataset, doc_ids: set[str],
                  fail: Callable[[str, str], None]) -> dict[str, int]:
    """The checks above (nothing without the manifest's ``dedup``); returns the number of
    kept-aside records checked per reason."""
    dedup = ds.manifest.dedup
    if dedup is None:
        return {}
    split, sample = ds.manifest.split, ds.manifest.sample
    job = None if split is None else split.job
    skipped = ds.manifest.counts.skipped if job is None else job.skipped
    records = {reason: _kept_aside(ds, reason) or [] for reason in REMOVED}
    for reason, found in records.items():
        if len(found) != skipped.get(reason, 0):
            fail("dedup", f"{REJECTS_DIR}/{reason}.jsonl holds {len(found)} records, but "
                 f"{MANIFEST_NAME} counts {skipped.get(reason, 0)} skipped as {reason}")
    files = {} if dedup.decontaminate is None else dedup.decontaminate.files
    by_file: dict[str, int] = {}
    for r in records["contaminated"]:
        by_file[r.get("eval_file")] = by_file.get(r.get("eval_file"), 0) + 1
    for name in sorted(set(files) | set(by_file)):
        if files.get(name, 0) != by_file.get(name, 0):
            fail("dedup", f"dedup.decontaminate.files says {name} removed {files.get(name, 0)}"
                 f" documents, {REJECTS_DIR}/contaminated.jsonl holds {by_file.get(name, 0)}")
    # A copy of a record with the same doc_id (both under one --id-field value) leaves that
    # doc_id kept: it is no removed doc_id.
    removed = {r["doc_id"] for found in records.values() for r in found
               if r.get("kept") != r["doc_id"]}
    for doc in sorted(removed & doc_ids):
        fail("dedup", f"doc_id {doc!r} was removed (kept aside in {REJECTS_DIR}/), but the "
             "rows hold it")
    copies = [r for reason in COPIES for r in records[reason]]
    kept = sorted({r["kept"] for r in copies})
    for r in copies:
        if r["kept"] > r["doc_id"] or r["kept"] in removed:
            fail("dedup", f"{r['source']} (doc_id {r['doc_id']!r}) names {r['kept']!r} as the "
                 "document kept in its place, which is not its cluster's smallest kept doc_id")
    here = kept
    if split or sample:
        try:
            spec = SplitSpec.from_manifest(split, sample)
        except (ValueError, KeyError, TypeError):
            return {reason: len(found) for reason, found in records.items()}  # check_split's
        names = spec.names
        here = [doc for doc, k, s in zip(kept, spec.kept(kept), spec.split_of(kept),
                                         strict=True)
                if k and (not split or names[s] == split.name)]
    if ds.manifest.counts.documents_without_windows:
        here = []  # a document without a window is in no row: absence proves nothing
    for doc in here:
        if doc not in doc_ids:
            fail("dedup", f"doc_id {doc!r} is named as the document kept in place of a copy, "
                 "and belongs here, but the rows do not hold it")
    return {reason: len(found) for reason, found in records.items()}


def _job_skipped(manifest: Manifest) -> dict[str, int]:
    """The job's skipped records by reason: a split's are its job's (``split.job``)."""
    split = manifest.split
    if split is not None:
        return {} if split.job is None else split.job.skipped
    return manifest.counts.skipped


def removal_lines(manifest: Manifest) -> list[str]:
    """What --dedup and --decontaminate removed (the job's counts), if the job had them."""
    dedup = manifest.dedup
    if dedup is None:
        return []
    skipped = _job_skipped(manifest)
    lines = []
    if dedup.mode != "off":
        how = (f"MinHash of word {dedup.ngram}-grams, {dedup.bands} bands × "
               f"{dedup.rows} rows" if dedup.mode == "near" else "equal normalized text")
        lines.append(f"dedup        {dedup.mode} ({how}): removed "
                     f"{skipped.get('exact_duplicate', 0):,} exact and "
                     f"{skipped.get('near_duplicate', 0):,} near copies")
    decontaminate = dedup.decontaminate
    if decontaminate:
        files = ", ".join(f"{k} {v:,}" for k, v in decontaminate.files.items())
        lines.append(f"decontam.    removed {skipped.get('contaminated', 0):,} documents sharing "
                     f"a word {decontaminate.ngram}-gram with an evaluation text ({files})")
    return lines
