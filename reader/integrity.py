"""Cheap integrity checks for the reader, from what each shard carries
(docs/format.md#footer-metadata).

Pure functions over a shard's ``pyarrow.parquet.FileMetaData`` and its manifest entry, so a
reader calls them when it opens a dataset, without reading a single row:

* every shard's footer carries the job's fingerprint (the manifest's ``fingerprint``): a shard
  written by another job (two jobs into one directory, a file copied in) is refused;
* its ``index/num_shards`` says where it belongs: a manifest whose shard order was edited
  is refused;
* its counts (rows, documents, tokens, scored targets) must equal its manifest entry's, and
  their sums the manifest's ``counts``: an edited manifest is refused.

Row data is protected by Parquet's CRC-32 page checksums, which the writer stores in every
page header (`transforms.parquet`) and `READ_OPTIONS` makes pyarrow verify on every read; a
read that fails is re-raised by `read_error` naming the shard and the row group.

Example::

    pf = pq.ParquetFile(f, **READ_OPTIONS)
    counts = check_footer(pf.metadata, manifest["shards"][0], index=0, manifest=manifest,
                          where="out/part-00000-of-00001.parquet")
    check_totals([counts], manifest, where="out/manifest.json")

A manifest without a fingerprint (written by token-windows 0.1.0) skips the footer checks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow.parquet as pq

from transforms.schema import COUNTS_KEY, FINGERPRINT_KEY, SHARD_KEY

__all__ = ["COUNTED", "READ_OPTIONS", "check_footer", "check_totals", "footer_error",
           "read_error"]

READ_OPTIONS: dict[str, Any] = {"page_checksum_verification": True}
# Footer counts → the manifest's counts key of the same total.
COUNTED = {"rows": "windows", "documents": "documents", "tokens": "tokens",
           "scored_targets": "scored_targets"}


def check_footer(metadata: pq.FileMetaData, entry: dict[str, Any], *, index: int,
                 manifest: dict[str, Any], where: str) -> dict[str, int] | None:
    """Check one shard's footer against its manifest entry; returns its counts (None when
    the manifest has no fingerprint to check against).

    Raises:
        ValueError: naming the shard and what disagrees.
    """
    fingerprint = manifest.get("fingerprint")
    if fingerprint is None:
        return None
    kv = {k.decode(): v.decode() for k, v in (metadata.metadata or {}).items()}
    found = kv.get(FINGERPRINT_KEY)
    if found != fingerprint:
        raise ValueError(
            f"shard {where} was written by another job (fingerprint {found or 'none'}, the "
            f"manifest's is {fingerprint}): the directory mixes two jobs' files; rerun the job"
        )
    position = f"{index}/{len(manifest['shards'])}"
    if kv.get(SHARD_KEY) != position:
        raise ValueError(
            f"shard {where} is shard {kv.get(SHARD_KEY)} of its job, but the manifest lists it "
            f"as {position}: the manifest was edited; the dataset is damaged"
        )
    try:
        counts = json.loads(kv[COUNTS_KEY])
    except (KeyError, ValueError) as e:
        raise ValueError(f"shard {where} has no readable counts in its footer ({e})") from None
    for key in COUNTED:
        if key in entry and entry[key] != counts.get(key):
            raise ValueError(
                f"shard {where} holds {counts.get(key)} {key}, but the manifest says "
                f"{entry[key]}: the manifest was edited; the dataset is damaged"
            )
    return {key: int(counts[key]) for key in COUNTED}


def check_totals(counts: Sequence[dict[str, int] | None], manifest: dict[str, Any], *,
                 where: str) -> None:
    """The manifest's ``counts`` must be the sums of the shards' footer counts.

    Raises:
        ValueError: naming the count.
    """
    if not counts or any(c is None for c in counts):
        return
    for key, total in COUNTED.items():
        have = sum(c[key] for c in counts)  # type: ignore[index]
        said = manifest["counts"].get(total)
        if said != have:
            raise ValueError(
                f"{where} says counts.{total} is {said}, but its shards' footers add up to "
                f"{have}: the manifest was edited; the dataset is damaged"
            )


def read_error(error: Exception, *, where: str, row_group: int) -> ValueError:
    """A failed read of one row group as an error naming the shard and the row group."""
    return ValueError(
        f"shard {where}, row group {row_group}, cannot be read ({error}): the file is damaged "
        "(a page checksum or the compressed data does not match); restore it or rerun the job"
    )


def footer_error(error: Exception, *, where: str) -> ValueError:
    """A shard whose footer cannot be read, as an error naming it."""
    return ValueError(f"shard {where}: its Parquet footer cannot be read ({error}): the file is "
                      "damaged or truncated; restore it or rerun the job")
