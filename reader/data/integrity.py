"""The reader's integrity checks, from what each shard carries (`docs/integrity.md`).

Pure functions over a shard's Parquet footer, its rows' small columns and the parsed manifest
(`transforms.dataset.manifest.Manifest`), so that every way of opening a dataset
(`reader.data.opening`, `reader.data.layout`, ``inspect --check``) checks the same things with the
same messages:

* `check_footer`: the shard's columns have the format's types, its row count is the manifest
  entry's, and (when the manifest has a fingerprint) its footer carries the job's fingerprint
  (a shard written by another job is refused), its ``index/num_shards`` (a reordered shard
  list is refused) and its counts (an edited manifest entry is refused);
* `check_content`: the rows agree with the manifest's tokenizer (a window at a document's
  start holds BOS first, one at its end EOS last: BOS and EOS swapped in the manifest are
  refused) and give the shard's documents, pairs and uncovered pairs;
* `check_totals`: those, summed over the shards, agree with the manifest's ``counts``
  (``counts.pairs`` or ``uncovered_pairs`` edited is refused).

Row data is protected by Parquet's CRC-32 page checksums, which the writer stores in every
page header (`transforms.shards.parquet`) and `READ_OPTIONS` makes pyarrow verify on every read; a
read that fails is re-raised by `read_error` naming the shard and the row group.

Example: a shard whose first row (start 0) holds ``[256, 97, 98]`` passes
``check_content(..., bos=256, eos=257)`` and fails with ``bos=257``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.dataset.manifest import Counts, Manifest, ShardEntry
from transforms.dataset.schema import ARROW_SCHEMA, COUNTS_KEY, FINGERPRINT_KEY, SHARD_KEY
from transforms.errors import DamagedDataset, ForeignDataset

__all__ = ["COUNTED", "READ_OPTIONS", "ContentStats", "check_content", "check_footer",
           "check_totals", "footer_error", "read_error"]

READ_OPTIONS: dict[str, bool] = {"page_checksum_verification": True}
# Footer counts → the manifest entry's key of the same count.
COUNTED = ("rows", "documents", "tokens", "scored_targets")


def _same_type(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Type equality that ignores the nullability of list items (a writer detail)."""
    if pa.types.is_list(expected):
        return pa.types.is_list(actual) and actual.value_type == expected.value_type
    return actual == expected


def check_footer(metadata: pq.FileMetaData, schema: pa.Schema, *, manifest: Manifest,
                 index: int, where: str) -> None:
    """Check shard ``index``'s footer against the manifest.

    Raises:
        DamagedDataset: naming the shard and what disagrees.
        ForeignDataset: the shard was written by another job (another fingerprint).
    """
    for field in ARROW_SCHEMA:
        i = schema.get_field_index(field.name)
        if i < 0:
            raise DamagedDataset(f"shard {where} lacks the column {field.name!r}")
        actual = schema.field(i).type
        if not _same_type(actual, field.type):
            raise DamagedDataset(
                f"shard {where}: column {field.name!r} has type {actual}, expected {field.type}")
    entry: ShardEntry = manifest.shards[index]
    if metadata.num_rows != entry.rows:
        raise DamagedDataset(
            f"shard {where} holds {metadata.num_rows} rows, but the manifest says {entry.rows}")
    fingerprint = manifest.fingerprint
    if fingerprint is None:  # a manifest written before fingerprints: nothing to compare
        return
    kv = {k.decode(errors="replace"): v.decode(errors="replace")
          for k, v in (metadata.metadata or {}).items()}
    found = kv.get(FINGERPRINT_KEY)
    if found != fingerprint:
        raise ForeignDataset(
            f"shard {where} was written by another job (fingerprint {found or 'none'}, the "
            f"manifest's is {fingerprint}): the directory mixes two jobs' files; rerun the job")
    position = f"{index}/{len(manifest.shards)}"
    if kv.get(SHARD_KEY) != position:
        raise DamagedDataset(
            f"shard {where} is shard {kv.get(SHARD_KEY)} of its job, but the manifest lists it "
            f"as {position}: the manifest was edited; the dataset is damaged")
    try:
        counts = json.loads(kv[COUNTS_KEY])
        if not isinstance(counts, dict):
            raise ValueError("not an object")
    except (KeyError, ValueError) as e:
        raise DamagedDataset(f"shard {where} has no readable counts in its footer ({e})") from None
    for key in COUNTED:
        said = getattr(entry, key)
        if said is not None and said != counts.get(key):
            raise DamagedDataset(
                f"shard {where} holds {counts.get(key)} {key}, but the manifest says {said}: "
                "the manifest was edited; the dataset is damaged")


@dataclasses.dataclass(frozen=True)
class ContentStats:
    """What a shard's rows say of its documents (for `check_totals`)."""

    documents: int  # documents with a window (rows with window_index 0)
    pairs: int  # Σ P over those documents
    uncovered: int  # their pairs in no window


def check_content(*, start: npt.NDArray[Any], length: npt.NDArray[Any],
                  doc_tokens: npt.NDArray[Any], window_index: npt.NDArray[Any],
                  first_id: npt.NDArray[Any], last_id: npt.NDArray[Any], bos: int, eos: int,
                  where: str) -> ContentStats:
    """Check a shard's rows (in file order) against the manifest's BOS and EOS.

    ``first_id``/``last_id`` are each row's first and last stored id.

    Raises:
        DamagedDataset: naming the first row whose boundary id is not the manifest's.
    """
    start, length = start.astype(np.int64), length.astype(np.int64)
    P = doc_tokens.astype(np.int64) - 1
    end = start + length
    for mask, ids, want, name in (
            (start == 0, first_id, bos, "BOS"), (end == P, last_id, eos, "EOS")):
        bad = mask & (ids.astype(np.int64) != want)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            at = "first" if name == "BOS" else "last"
            raise DamagedDataset(
                f"shard {where} row {r}: a window at its document's "
                f"{'start' if name == 'BOS' else 'end'} holds {int(ids[r])} {at}, but the "
                f"manifest's {name} is {want}: the manifest's tokenizer is not the shards'; the "
                "dataset is damaged")
    first = window_index == 0
    if len(first):
        first[0] = True
    prev_end = np.where(first, start, np.concatenate([[0], end[:-1]]))
    covered = int(np.maximum(0, end - np.maximum(start, prev_end)).sum())
    pairs = int(P[first].sum())
    return ContentStats(documents=int(first.sum()), pairs=pairs, uncovered=pairs - covered)


def check_totals(stats: list[ContentStats], counts: Counts, *, where: str) -> None:
    """The shards' `ContentStats`, summed, must agree with the manifest's ``counts``.

    Pairs of documents without a window are in no row: each holds at least one pair, all
    uncovered.

    Raises:
        DamagedDataset: naming the count.
    """
    docs = sum(s.documents for s in stats)
    pairs = sum(s.pairs for s in stats)
    uncovered = sum(s.uncovered for s in stats)
    without = counts.documents_without_windows
    hidden = counts.pairs - pairs  # the pairs of documents without a window
    if docs + without != counts.documents:
        raise DamagedDataset(
            f"{where} says counts.documents is {counts.documents} of which {without} without a "
            f"window, but the shards' rows hold {docs} documents; the dataset is damaged")
    if hidden != counts.uncovered_pairs - uncovered or hidden < without or (
            without == 0 and hidden != 0):
        raise DamagedDataset(
            f"{where} says counts.pairs is {counts.pairs} and counts.uncovered_pairs "
            f"{counts.uncovered_pairs}, but the shards' rows give {pairs} pairs, {uncovered} "
            f"uncovered, beside {without} documents without a window; the manifest was "
            "edited; the dataset is damaged")


def read_error(error: Exception, *, where: str, row_group: int) -> DamagedDataset:
    """A failed read of one row group as an error naming the shard and the row group."""
    return DamagedDataset(
        f"shard {where}, row group {row_group}, cannot be read ({error}): the file is damaged "
        "(a page checksum or the compressed data does not match); restore it or rerun the job"
    )


def footer_error(error: Exception, *, where: str) -> DamagedDataset:
    """A shard whose footer cannot be read, as an error naming it."""
    return DamagedDataset(
        f"shard {where}: its Parquet footer cannot be read ({error}): the file is "
        "damaged or truncated; restore it or rerun the job")
