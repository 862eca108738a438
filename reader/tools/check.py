"""``python -m reader.inspect OUT --check``: the checks of docs/format.md#checks, recomputed from
the rows.

With the manifest's parameters: **coverage** (every pair of every document is in a window,
but for the pairs the parameters leave out: before a random first origin, gaps when S > W, a
dropped tail), **overlap** (consecutive full windows of a document are S apart; only a
trace_back tail starts earlier), **boundaries** (no window crosses its document); loss_start
as ``--score`` defines it; the ids two windows share agree; the manifest's counts recomputed;
and, in a split of a ``--split`` job, every document's split (and sample) from its doc_id;
with ``--dedup`` or ``--decontaminate``, the removed documents against the rows
(`reader.tools.removed_check`). Any failure names the window. pyarrow only: no Beam, no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.parquet as pq

from reader.data.integrity import READ_OPTIONS
from reader.tools.removed_check import check_removed
from transforms.dataset.manifest import MANIFEST_NAME
from transforms.json_fields import JsonObject
from transforms.params import WindowSpec
from transforms.plan.splits import SplitSpec
from transforms.plan.windows import random_offset

if TYPE_CHECKING:
    from reader.tools.inspect import InspectedDataset

__all__ = ["CHECKED_COLUMNS", "SHOWN_FAILURES", "check"]

# Failures printed before "... and N more" (their number is always exact).
SHOWN_FAILURES = 20
# The columns inspect reads from every shard (--check reads tokens too).
CHECKED_COLUMNS = ("doc_id", "window_index", "start", "length", "loss_start", "doc_tokens")


def _shard_columns(ds: InspectedDataset, i: int) -> dict[str, list[Any]]:
    table = pq.read_table(ds.shard_path(i), filesystem=ds.fs, **READ_OPTIONS)
    tokens = table.column("tokens").combine_chunks()
    return {
        **{c: table.column(c).to_pylist() for c in CHECKED_COLUMNS},
        "ids": tokens.values.to_numpy(),
        "offsets": tokens.offsets.to_numpy(),
    }


def _check_document(doc: str, rows: list[int], col: dict[str, list[Any]], spec: WindowSpec,
                    name: str, fail: Any, bos: int, eos: int) -> int:
    """The three checks on one document's rows; returns its uncovered pairs."""
    W, S = spec.window, spec.stride
    M = col["doc_tokens"][rows[0]]
    P = M - 1
    prev_end = None
    covered = 0
    misnumbered = False
    for k, r in enumerate(rows):
        start, length, ls = col["start"][r], col["length"][r], col["loss_start"][r]
        at = f"{name} row {r} (doc_id {doc!r}, window {col['window_index'][r]}, start {start})"
        if col["doc_tokens"][r] != M:
            fail("boundaries", f"{at}: doc_tokens {col['doc_tokens'][r]}, but its document's "
                 f"first window says {M}")
        if col["window_index"][r] != k and not misnumbered:
            misnumbered = True  # the windows after it are off by as many: say it once
            fail("coverage", f"{at}: window_index {col['window_index'][r]}, expected {k}: a "
                 "window of the document is missing or repeated")
        if start < 0 or length < 1 or start + length > P:
            fail("boundaries", f"{at}: crosses its document: start + length = "
                 f"{start + length} > P = {P}" if start + length > P else
                 f"{at}: start {start} and length {length} must be ≥ 0 and ≥ 1")
        if length > W or not 0 <= ls < max(length, 1):
            fail("boundaries", f"{at}: length {length}, loss_start {ls}: need length ≤ W = {W} "
                 "and 0 ≤ loss_start < length")
        n_ids = col["offsets"][r + 1] - col["offsets"][r]
        if n_ids != length + 1:
            fail("boundaries", f"{at}: {n_ids} ids stored, expected length + 1 = {length + 1}")
        want_ls = 0 if spec.score == "all" or prev_end is None else max(0, prev_end - start)
        if ls != want_ls:
            fail("scoring", f"{at}: loss_start {ls}, but score={spec.score} gives {want_ls}")
        ids = col["ids"][col["offsets"][r] : col["offsets"][r + 1]]
        if (start == 0 and ids[:1].tolist() != [bos]) or (
                start + length == P and ids[-1:].tolist() != [eos]):
            fail("boundaries", f"{at}: a window at the document's start holds BOS ({bos}) "
                 f"first and one at its end EOS ({eos}) last, but it holds "
                 f"{ids[:1].tolist()} … {ids[-1:].tolist()}")
        if k == 0:
            r0 = random_offset(P, spec, doc) if spec.offset == "random" else 0
            if start != r0:
                fail("coverage", f"{at}: the first window starts at {start}, but offset="
                     f"{spec.offset} puts it at {r0}: the pairs before it are in no window")
        else:
            p = rows[k - 1]
            pstart, plen = col["start"][p], col["length"][p]
            traced = (spec.tail == "trace_back" and k == len(rows) - 1
                      and start == max(0, P - W) and 0 < P - (pstart + S) < W)
            if plen != W:
                fail("overlap", f"{at}: follows a window of {plen} pairs; only the last window "
                     f"of a document may be shorter than W = {W}")
            elif start - pstart != S and not traced:
                fail("overlap", f"{at}: starts {start - pstart} after the previous window; "
                     f"stride {S} means consecutive full windows overlap by W - S = {W - S}")
            else:
                shared = pstart + plen + 1 - start  # ids both windows store
                if shared > 0:
                    a = col["ids"][col["offsets"][p] + start - pstart : col["offsets"][p + 1]]
                    b = col["ids"][col["offsets"][r] : col["offsets"][r] + shared]
                    if not np.array_equal(a, b):
                        fail("overlap", f"{at}: its first {shared} ids differ from the same "
                             "positions of the previous window")
        covered += max(0, start + length - max(start, prev_end or 0))  # new pairs only
        prev_end = start + length
    # What the parameters leave out after the last window.
    last = rows[-1]
    end = col["start"][last] + col["length"][last]
    if end < P:
        remaining = P - (col["start"][last] + S)
        allowed = {"keep": remaining < spec.min_tail, "drop": remaining < W,
                   "trace_back": remaining <= 0}[spec.tail]
        if col["length"][last] != W or not allowed:
            fail("coverage", f"{name} row {last} (doc_id {doc!r}): the windows end at pair "
                 f"{end} of P = {P}; with tail={spec.tail} the pairs after it must be covered")
    return max(P - max(covered, 0), 0)


def check(ds: InspectedDataset) -> JsonObject:
    """The checks of docs/format.md#checks from the rows, and the manifest's counts recomputed.

    Returns ``{"ok": bool, "failures": [{"check", "message"}], "checked": {...}}``.
    """
    spec = ds.windows
    tok = ds.manifest.tokenizer
    failures: list[dict[str, str]] = []

    def fail(kind: str, message: str) -> None:
        failures.append({"check": kind, "message": message})

    totals = dict(windows=0, tokens=0, scored_targets=0, documents=0, pairs=0, uncovered=0)
    seen: set[str] = set()
    for i, entry in enumerate(ds.manifest.shards):
        name = entry.file
        col = _shard_columns(ds, i)
        n = len(col["doc_id"])
        tokens = int(sum(col["length"])) + n
        scored = int(sum(col["length"]) - sum(col["loss_start"]))
        docs: dict[str, list[int]] = {}
        for r, doc in enumerate(col["doc_id"]):
            if doc in docs and docs[doc][-1] != r - 1:
                fail("coverage", f"{name} row {r} (doc_id {doc!r}): the document's windows are "
                     "not consecutive")
            if doc in seen and doc not in docs:
                fail("coverage", f"{name} row {r} (doc_id {doc!r}): the document is in two shards")
            docs.setdefault(doc, []).append(r)
        seen.update(docs)
        for doc, rows in docs.items():
            totals["uncovered"] += _check_document(doc, rows, col, spec, name, fail,
                                                   tok.bos_id, tok.eos_id)
            totals["pairs"] += col["doc_tokens"][rows[0]] - 1
        for key, got in (("rows", n), ("tokens", tokens), ("scored_targets", scored)):
            said = getattr(entry, key)
            if said is not None and said != got:
                fail("counts", f"{name}: the manifest says {key} {said}, the rows give {got}")
        totals["windows"] += n
        totals["tokens"] += tokens
        totals["scored_targets"] += scored
        totals["documents"] += len(docs)
    _check_split(ds, seen, fail)
    kept_aside = check_removed(ds, seen, fail)  # --dedup, --decontaminate: {} without
    c = ds.manifest.counts
    for key in ("windows", "tokens", "scored_targets"):
        if getattr(c, key) != totals[key]:
            fail("counts", f"{MANIFEST_NAME}: counts.{key} is {getattr(c, key)}, the rows give "
                 f"{totals[key]}")
    without = c.documents_without_windows
    if c.documents - without != totals["documents"]:
        fail("counts", f"{MANIFEST_NAME}: counts.documents {c.documents} minus "
             f"{without} without windows is not the {totals['documents']} documents in the rows")
    # Documents without a window hold pairs the rows cannot see, none of them covered.
    if c.pairs - totals["pairs"] != c.uncovered_pairs - totals["uncovered"] or (
            without == 0 and c.pairs != totals["pairs"]):
        fail("counts", f"{MANIFEST_NAME}: counts.pairs {c.pairs} and uncovered_pairs "
             f"{c.uncovered_pairs}, but the rows give {totals['pairs']} pairs of which "
             f"{totals['uncovered']} uncovered")
    if kept_aside:
        totals["kept_aside"] = sum(kept_aside.values())
    return {"ok": not failures, "failures": failures,
            "checked": {k: int(v) for k, v in totals.items()}}


def _check_split(ds: InspectedDataset, doc_ids: set[str], fail: Any) -> None:
    """Every document is in the sample and belongs to this split, as its doc_id says."""
    split, sample = ds.manifest.split, ds.manifest.sample
    if not split and not sample:
        return
    try:
        spec = SplitSpec.from_manifest(split, sample)
    except (ValueError, KeyError, TypeError) as e:
        fail("split", f"{MANIFEST_NAME}: the split or sample it records is not valid ({e})")
        return
    ids = sorted(doc_ids)
    names = spec.names
    for doc, kept, where in zip(ids, spec.kept(ids), spec.split_of(ids), strict=True):
        if not kept:
            shown = None if sample is None else sample.to_json()  # as the manifest holds it
            fail("split", f"doc_id {doc!r} is not in the sample {shown}")
        elif split and names[where] != split.name:
            fail("split", f"doc_id {doc!r} belongs to split {names[where]!r}, not to "
                 f"{split.name!r}")
