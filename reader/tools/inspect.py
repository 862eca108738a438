"""Look at a finished dataset: ``python -m reader.inspect OUT`` (or ``token-windows-inspect``).

Reads ``OUT/_manifest.json`` and the shards it lists with pyarrow alone (never Beam, local or
any file system pyarrow opens), and prints:

* a summary: documents, windows, corpus pairs (Σ P over documents) and window tokens
  (Σ (length + 1) over windows) side by side with the **overlap factor** (window pairs per
  covered corpus pair: 1.00 without overlap, about W/S with it), scored and context targets,
  uncovered pairs, shards, bytes;
* distributions (quantiles) of document tokens M and window lengths, and the share of
  padding a batch of ``--batch-size`` windows in a random order carries (collate pads each
  batch to its longest window);
* ``--decode N``: the first N windows decoded with the manifest's tokenizer (the file the
  manifest names, checked against its SHA-256; ``--tokenizer`` points elsewhere), showing
  doc_id, start, length and where scoring starts (``▌``);
* ``--check``: first everything ``WindowDataset(path, verify=True)`` checks
  (`reader.data.opening.verify_files`: every shard's SHA-256, footer, fingerprint and place in the
  list, page checksums, BOS/EOS), then docs/format.md's checks recomputed from the rows, with
  the manifest's parameters (`reader.tools.check`): **coverage**, **overlap**, **boundaries**,
  loss_start as ``--score`` defines it, the ids two windows share agree, and the manifest's
  counts recomputed. Any failure names the shard or the window and exits with status 1;
* ``--plot FILE.png`` (matplotlib: the ``plot`` extra): the same distributions as a picture;
* ``--json``: everything above as one JSON object, for scripts.

A split of a ``--split`` job (``OUT/val``) shows its split and the job's accounting, and
``--check`` also recomputes every document's split (and ``--sample``) from its doc_id; the
job's top directory (``_splits.json``) is not one dataset and is refused naming its splits.

Exit status: 0 fine, 1 ``--check`` failed, 2 the dataset (or a flag) is unusable.

Example: a dataset of one document ``abcde`` (bytes, W = S = 2) has 3 windows, 6 corpus
pairs, 9 window tokens, overlap factor 1.00, and ``--check`` passes.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reader.data.integrity import READ_OPTIONS
from reader.data.opening import DatasetFiles, locate, open_files, read_footer, verify_files
from reader.data.regular import check_regular, masked, open_regular, shown_url
from reader.tools.check import CHECKED_COLUMNS, SHOWN_FAILURES, check
from reader.tools.plot import plot
from reader.tools.removed_check import removal_lines
from transforms.dataset.manifest import MANIFEST_NAME, Manifest
from transforms.json_fields import JsonObject
from transforms.params import WindowSpec
from transforms.tokenize.tokenizers import BYTES, Tokenizer, tokenizer_from_bytes

__all__ = ["InspectedDataset", "check", "decode", "main", "manifest_tokenizer", "open_dataset",
           "padding_share", "read_columns", "summarize"]

QUANTILES = (0.0, 0.1, 0.5, 0.9, 0.99, 1.0)
DEFAULT_BATCH = 8
_READ_CHUNK = 8 * 2**20  # a tokenizer file is hashed as it is read


@dataclasses.dataclass
class InspectedDataset:
    """A finished dataset as inspect reads it: its manifest and, per shard, its rows' small
    columns (opened by `reader.data.opening.open_files`, as `reader.WindowDataset` is)."""

    files: DatasetFiles
    shards: list[pa.Table]  # CHECKED_COLUMNS of each shard, in manifest order

    @property
    def root(self) -> str:
        return self.files.location.shown

    @property
    def manifest(self) -> Manifest:
        return self.files.manifest

    @property
    def fs(self) -> pafs.FileSystem:
        return self.files.location.fs

    @property
    def windows(self) -> WindowSpec:
        return WindowSpec(**dataclasses.asdict(self.manifest.windows))

    def shard_path(self, i: int) -> str:
        return self.files.shards[i].path

    def column(self, name: str) -> np.ndarray:
        """One column of every shard, end to end."""
        parts = [t.column(name).to_numpy() for t in self.shards]
        return np.concatenate(parts) if parts else np.zeros(0)


def open_dataset(root: str, *, verify: bool = False,
                 allow_unfinished: bool = False) -> InspectedDataset:
    """Open the dataset as `reader.WindowDataset` does (`reader.data.opening.open_files`), check
    every shard's footer, and read the rows' small columns (not the token ids).

    Args:
        root: the dataset directory (local or a URI).
        verify: first check everything ``WindowDataset(verify=True)`` checks
            (`reader.data.opening.verify_files`): what ``--check`` starts with.
        allow_unfinished: open a split whose job's ``_splits.json`` is missing.

    Raises:
        ValueError, OSError: the dataset is missing, unfinished, damaged or not this job's.
    """
    files = open_files(root, allow_unfinished=allow_unfinished)
    if verify:
        verify_files(files)
    return read_columns(files)


def read_columns(files: DatasetFiles) -> InspectedDataset:
    """Check every shard's footer and read its rows' small columns."""
    shards = []
    for s, shard in enumerate(files.shards):
        read_footer(files, s)
        shards.append(pq.read_table(shard.path, columns=list(CHECKED_COLUMNS),
                                    filesystem=files.location.fs, **READ_OPTIONS))
    return InspectedDataset(files=files, shards=shards)


# ------------------------------------------------------------------ summary and distributions


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {}
    out = {f"p{round(q * 100)}": float(np.quantile(values, q, method="lower"))
           for q in QUANTILES}
    out["mean"] = float(values.mean())
    return out


def padding_share(lengths: np.ndarray, batch_size: int, seed: int = 0) -> float:
    """The share of a batch's positions that are padding, over an epoch of batches of
    ``batch_size`` windows in a seeded random order (each padded to its longest window)."""
    if len(lengths) == 0:
        return 0.0
    order = np.random.default_rng(seed).permutation(len(lengths))
    lengths = lengths[order].astype(np.int64)
    pad = np.zeros(-len(lengths) % batch_size, np.int64)  # the short last batch: no padding
    grid = np.concatenate([lengths, pad]).reshape(-1, batch_size)
    real = (grid > 0).sum(axis=1)
    positions = (grid.max(axis=1) * real).sum()
    return float(1 - grid.sum() / positions)


def summarize(ds: InspectedDataset, *, batch_size: int = DEFAULT_BATCH) -> JsonObject:
    """The summary table, the distributions and the padding share (a JSON-able dict)."""
    m = ds.manifest
    c = m.counts
    lengths = ds.column("length").astype(np.int64)
    first = ds.column("window_index") == 0
    doc_tokens = ds.column("doc_tokens")[first]
    covered = c.pairs - c.uncovered_pairs
    recorded = {"split": m.split, "sample": m.sample, "dedup": m.dedup}
    return {
        "dataset": ds.root,
        "tokenizer": {"kind": m.tokenizer.kind, "file": m.tokenizer.file,
                      "vocab_size": m.tokenizer.vocab_size},
        "windows": m.windows.to_json(),
        "summary": {
            "documents": c.documents,
            "documents_without_windows": c.documents_without_windows,
            "windows": c.windows,
            "corpus_pairs": c.pairs,
            "window_tokens": c.tokens,
            "window_pairs": int(lengths.sum()),
            "overlap_factor": round(float(lengths.sum()) / covered, 4) if covered else 0.0,
            "scored_targets": c.scored_targets,
            "context_targets": int(lengths.sum()) - c.scored_targets,
            "uncovered_pairs": c.uncovered_pairs,
            "skipped": dict(c.skipped),
            "shards": len(m.shards),
            "bytes": sum(s.bytes or 0 for s in m.shards),
        },
        "distributions": {
            "document_tokens": _quantiles(doc_tokens),
            "window_length": _quantiles(lengths),
        },
        "padding": {"batch_size": batch_size,
                    "share": round(padding_share(lengths, batch_size), 4)},
        **{k: r.to_json() for k, r in recorded.items() if r is not None},
        **({"sampled_out": c.sampled_out} if c.sampled_out is not None else {}),
    }


def _table(summary: JsonObject, manifest: Manifest) -> str:
    """The report as text: ``summary`` (`summarize`) and what the ``manifest`` records of the
    split, the sample and the dedup pass."""
    s = summary["summary"]
    w = summary["windows"]
    tok = summary["tokenizer"]
    lines = [
        f"dataset      {summary['dataset']}",
        f"tokenizer    {tok['kind']}{' ' + tok['file'] if tok.get('file') else ''} "
        f"(vocabulary {tok['vocab_size']:,})",
        f"windows      W {w['window']}, S {w['stride']}, tail {w['tail']} (min {w['min_tail']}), "
        f"score {w['score']}, offset {w['offset']}, seed {w['seed']}",
        *_split_lines(manifest),
        "",
    ]
    rows = [
        ("documents", s["documents"], f"{s['documents_without_windows']:,} without a window"),
        ("windows", s["windows"], ""),
        ("corpus pairs", s["corpus_pairs"], "Σ P over documents: the corpus size in targets"),
        ("window tokens", s["window_tokens"], "Σ (length + 1): ids stored, overlaps counted"),
        ("overlap factor", None, f"{s['overlap_factor']:.2f} window pairs per covered pair"),
        ("scored targets", s["scored_targets"], ""),
        ("context targets", s["context_targets"], "before loss_start: not scored"),
        ("uncovered pairs", s["uncovered_pairs"], "in no window"),
        ("skipped records", sum(s["skipped"].values()),
         ", ".join(f"{k} {v}" for k, v in s["skipped"].items())),
        ("shards", s["shards"], f"{s['bytes'] / 1e6:,.1f} MB"),
    ]
    for name, value, note in rows:
        shown = "" if value is None else f"{value:,}"
        lines.append(f"{name:<16}{shown:>14}  {note}".rstrip())
    lines.append("")
    names = [f"p{round(q * 100)}" for q in QUANTILES] + ["mean"]
    lines.append(f"{'quantiles':<16}" + "".join(f"{n:>9}" for n in names))
    for key, label in (("document_tokens", "document tokens"), ("window_length", "window length")):
        d = summary["distributions"][key]
        lines.append(f"{label:<16}" + "".join(
            f"{d[n]:>9,.1f}" if n == "mean" else f"{d[n]:>9,.0f}" for n in names if n in d))
    p = summary["padding"]
    lines.append(f"\npadding        {p['share']:.1%} of positions at batch size {p['batch_size']} "
                 "(random order, each batch padded to its longest window)")
    return "\n".join(lines)


def _split_lines(manifest: Manifest) -> list[str]:
    """The split and sample a dataset was made with, if any."""
    lines = []
    split, sample = manifest.split, manifest.sample
    if split:
        job = split.job
        parts = ", ".join(f"{s.name} {s.fraction:g}" for s in split.splits)
        docs = ", ".join(f"{k} {v:,}" for k, v in (job.documents if job else {}).items())
        lines.append(f"split        {split.name} of {parts} (split seed "
                     f"{split.split_seed or 0})")
        lines.append(f"job          {job.records if job else 0:,} records: documents {docs}; "
                     f"{sum(job.skipped.values()) if job else 0:,} skipped, "
                     f"{job.sampled_out if job else 0:,} left out by the sample")
    lines += removal_lines(manifest)
    if sample:
        out = manifest.counts.sampled_out
        lines.append(f"sample       {sample.fraction:g} of the documents (sample seed "
                     f"{sample.seed})" + (f", {out:,} left out" if out is not None else ""))
    return lines


# ------------------------------------------------------------------ decode


def manifest_tokenizer(ds: InspectedDataset, path: str | None = None) -> Tokenizer:
    """The manifest's tokenizer: bytes needs no file; a model file is the one ``path`` names
    (the user's ``--tokenizer``: a local path or a URL), else the manifest's ``path`` only as
    a local file, else its ``file`` beside the dataset. Only a regular file is read, and its
    SHA-256 must be the manifest's. A manifest never chooses what is read: a URL it records
    is not opened (it could name any host), and messages show URLs without credentials.

    Raises:
        ValueError: no file found, or a file with another SHA-256.
        OSError: the file is not a regular file (a FIFO, a device), named.
    """
    info = ds.manifest.tokenizer
    if info.kind == BYTES and path is None:
        return tokenizer_from_bytes(None, where=BYTES)
    file = info.file
    beside = file and "/" not in file and "\\" not in file and (
        file not in (".", ".."))  # a plain name beside the dataset, never a path out of it
    recorded = info.path
    skipped = []  # URLs the manifest records: never opened
    candidates: list[tuple[str, pafs.FileSystem, str]] = []  # (shown, filesystem, path)
    if path:
        loc = locate(path)
        candidates.append((path, loc.fs, loc.root))
    else:
        if recorded and "://" in recorded:
            skipped.append(recorded)
        elif recorded:
            candidates.append((recorded, pafs.LocalFileSystem(), os.path.abspath(recorded)))
        if beside:
            candidates.append((f"{ds.root.rstrip('/')}/{file}", ds.fs,
                               f"{ds.files.location.root}/{file}"))
    for candidate, fs, where in candidates:
        shown = shown_url(candidate)
        fix = "pass the tokenizer file with --tokenizer"
        if not check_regular(fs, where, shown=shown, fix=fix):
            continue
        opened = (open_regular(where, shown=shown, fix=fix)
                  if isinstance(fs, pafs.LocalFileSystem) else fs.open_input_stream(where))
        digest, parts = hashlib.sha256(), []
        with opened as f:
            while chunk := f.read(_READ_CHUNK):
                digest.update(chunk)
                parts.append(chunk)
        sha = digest.hexdigest()
        if sha != info.sha256:
            raise ValueError(
                f"{shown} has SHA-256 {sha}, but {MANIFEST_NAME} says the dataset was "
                f"tokenized by {info.sha256}; pass the right file with --tokenizer"
            )
        return tokenizer_from_bytes(b"".join(parts), where=shown,
                                    bos_token=info.bos_token, eos_token=info.eos_token)
    tried = ", ".join(shown_url(c) for c, _, _ in candidates) or "none recorded"
    refused = "".join(f"; the recorded {shown_url(u)} is a URL, never opened because the "
                      "manifest names it" for u in skipped)
    raise ValueError(f"the {info.kind} tokenizer file was not found (tried {tried}"
                     f"{refused}); pass it with --tokenizer")


def _token_rows(ds: InspectedDataset, limit: int) -> Iterator[JsonObject]:
    left = limit
    for i in range(len(ds.shards)):
        if left <= 0:
            return
        table = pq.ParquetFile(ds.shard_path(i), filesystem=ds.fs).iter_batches(
            batch_size=min(left, 1024))
        for batch in table:
            for row in batch.to_pylist()[:left]:
                left -= 1
                yield row
            if left <= 0:
                return


def decode(ds: InspectedDataset, n: int, tokenizer: Tokenizer) -> list[JsonObject]:
    """The first ``n`` windows, their text split where scoring starts."""
    out = []
    for row in _token_rows(ds, n):
        tokens, ls = row["tokens"], row["loss_start"]
        # tokens[: ls + 1] are the inputs before the first scored target; the rest is scored.
        out.append({k: row[k] for k in ("doc_id", "window_index", "start", "length",
                                        "loss_start")} | {
            "context": tokenizer.decode(tokens[: ls + 1]),
            "scored": tokenizer.decode(tokens[ls + 1 :]),
        })
    return out


# ------------------------------------------------------------------ command line


def _parser() -> argparse.ArgumentParser:
    named = os.path.basename(sys.argv[0]).startswith("token-windows-inspect")
    p = argparse.ArgumentParser(
        prog="token-windows-inspect" if named else "python -m reader.inspect",
        description="Summarise, check, decode and plot a finished token-windows dataset.")
    p.add_argument("output", metavar="OUT", nargs="+",
                   help="the dataset directory (local or a URI); with --mix, several, each "
                   "NAME=PATH or PATH (named by its last directory)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH,
                   help="batch size for the padding share. Default: %(default)s.")
    p.add_argument("--decode", type=int, default=0, metavar="N",
                   help="decode the first N windows to text. Default: none.")
    p.add_argument("--tokenizer", type=str, default=None, metavar="PATH",
                   help="the tokenizer file for --decode (a path or a URL). Default: the "
                   "manifest's path if it is a local file, else its file beside the dataset "
                   "(its SHA-256 checked); a URL the manifest records is never opened.")
    p.add_argument("--check", action="store_true",
                   help="verify every shard as WindowDataset(verify=True) does (SHA-256, "
                   "footers, page checksums, BOS/EOS), then recompute coverage, overlap, "
                   "boundaries and the counts; exit 1 on any failure.")
    p.add_argument("--allow-unfinished", action="store_true",
                   help="open a split whose job's _splits.json is missing (to look at what a "
                   "killed job left).")
    p.add_argument("--plot", type=str, default=None, metavar="FILE.png",
                   help="draw the distributions into FILE.png (needs matplotlib).")
    p.add_argument("--json", action="store_true", help="print one JSON object instead.")
    p.add_argument("--mix", type=str, default=None, metavar="NAME=W,...",
                   help="what a mixture of the datasets with these weights draws from each "
                   "(see docs/mixtures.md). Default: no mixture.")
    p.add_argument("--tokens", type=float, default=None, metavar="N",
                   help="with --mix: the scored targets drawn in all. Default: the datasets' "
                   "scored targets together.")
    p.add_argument("--unit", choices=("windows", "targets"), default="windows",
                   help="with --mix: what the weights share. Default: %(default)s.")
    return p


def run(argv: Sequence[str] | None = None) -> int:
    """The command: prints the report; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.mix is not None or len(args.output) > 1:
        from reader.mixture.report import run_mix

        return run_mix(args.output, args.mix, tokens=args.tokens, unit=args.unit,
                       as_json=args.json)
    args.output = args.output[0]
    if args.batch_size < 1 or args.decode < 0:
        print("error: --batch-size must be ≥ 1 and --decode ≥ 0", file=sys.stderr)
        return 2
    try:
        files = open_files(args.output, allow_unfinished=args.allow_unfinished)
    except (ValueError, OSError) as e:
        print(f"error: {masked(str(e))}", file=sys.stderr)
        return 2
    if args.check:  # everything opening checks, and reading, before the recomputations
        try:
            verify_files(files, totals=False)  # check() recomputes the totals by window
        except (ValueError, OSError) as e:
            print(f"check: failed: {masked(str(e))}")
            return 1
    try:
        ds = read_columns(files)
        report = summarize(ds, batch_size=args.batch_size)
        if args.decode:
            report["decoded"] = decode(ds, args.decode, manifest_tokenizer(ds, args.tokenizer))
        if args.plot:
            plot(ds, report, args.plot)
            report["plot"] = args.plot
        if args.check:
            report["check"] = check(ds)
    except (ValueError, OSError) as e:
        print(f"error: {masked(str(e))}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False, default=int))
    else:
        print(_table(report, ds.manifest))
        for w in report.get("decoded", []):
            print(f"\n[{w['doc_id']} #{w['window_index']}] start {w['start']}, length "
                  f"{w['length']}, scored from target {w['loss_start']} (▌)\n"
                  f"{w['context']}▌{w['scored']}")
        if args.plot:
            print(f"\nplot: {args.plot}")
        if args.check:
            result = report["check"]
            if result["ok"]:
                print(f"\ncheck: ok (shards verified; coverage, overlap, boundaries, counts "
                      f"of {result['checked']['windows']:,} windows)")
            else:
                print(f"\ncheck: {len(result['failures'])} failures")
                for f in result["failures"][:SHOWN_FAILURES]:
                    print(f"  {f['check']}: {f['message']}")
                if len(result["failures"]) > SHOWN_FAILURES:
                    print(f"  ... and {len(result['failures']) - SHOWN_FAILURES} more")
    return 1 if args.check and not report["check"]["ok"] else 0


def main() -> None:
    """The ``token-windows-inspect`` console script."""
    raise SystemExit(run())


if __name__ == "__main__":
    main()
