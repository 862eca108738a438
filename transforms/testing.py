"""Write a valid dataset without running the job: for tests, benchmarks and examples.

`write_dataset` goes through the very code the job uses after its shuffle (seeded keys,
window plans, parcels by shard, `transforms.shards.rows.ShardRows`,
`transforms.shards.parquet.write_rows`, `transforms.shards.manifest_build.build_manifest`), so what
it writes is what the job would write for the same documents and parameters, but for the manifest's
``inputs``, ``reading`` and ``versions``. It writes to a local directory with plain file calls (no
Beam).

Example::

    write_dataset("/tmp/ds", [("a", [256, 97, 98, 257])], windows=WindowSpec(window=2, stride=2))

writes ``/tmp/ds/part-00000-of-00001.parquet`` with two windows and its manifest.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from transforms.dataset.manifest import MANIFEST_NAME, Manifest, TokenizerInfo, dumps_manifest
from transforms.dataset.schema import shard_file_name
from transforms.params import WindowSpec
from transforms.plan.keys import doc_keys
from transforms.plan.windows import plan_windows_batch
from transforms.shards.manifest_build import WrittenShard, build_manifest, shard_metadata
from transforms.shards.parcels import pack_parcels
from transforms.shards.parquet import row_group_rows, write_rows
from transforms.shards.rows import ShardRows
from transforms.tokenize.tokenizers import ByteTokenizer

__all__ = ["write_dataset"]


def write_dataset(
    directory: str | os.PathLike[str],
    documents: Sequence[tuple[str, Sequence[int] | npt.NDArray[np.integer]]],
    *,
    windows: WindowSpec,
    tokenizer: TokenizerInfo | None = None,
    num_shards: int = 1,
    rows_per_group: int | None = None,
    fingerprint: str | None = None,
) -> Manifest:
    """Write ``documents`` as a finished dataset in ``directory``; returns its manifest.

    Args:
        directory: a local directory (made if missing).
        documents: (doc_id, z) pairs, z the whole token array with BOS and EOS; ids unique.
        windows: the window parameters and the seed of the keys.
        tokenizer: the manifest's ``tokenizer`` record (default: the bytes tokenizer's).
        num_shards: the number of shards.
        rows_per_group: rows per Parquet row group (default: the job's, from the window);
            small values give many row groups.
        fingerprint: the job fingerprint to record in the manifest and the shards' footers
            (`transforms.shards.manifest_build.shard_metadata`); None records none.
    """
    root = os.fspath(directory)
    os.makedirs(root, exist_ok=True)
    ids = [doc_id for doc_id, _ in documents]
    tokens = [np.asarray(z, dtype=np.int32) for _, z in documents]
    m = np.fromiter(map(len, tokens), np.int64, len(tokens))
    parcels = dict(pack_parcels(
        doc_keys=doc_keys(windows.seed, ids), doc_ids=ids,
        sources=[f"{doc_id}:1" for doc_id in ids], tokens=tokens,
        plans=plan_windows_batch(m - 1, windows, ids), repaired=[False] * len(ids),
        num_shards=num_shards,
    ))
    group = rows_per_group or row_group_rows(windows.window)
    shards = []
    for index in range(num_shards):
        rows = ShardRows([parcels[index]] if index in parcels else [])
        name = shard_file_name(index, num_shards)
        with open(os.path.join(root, name), "wb") as f:
            metadata = None if fingerprint is None else shard_metadata(
                fingerprint=fingerprint, index=index, num_shards=num_shards, counts=rows.counts)
            sha, size = write_rows(rows, f, window=windows.window, rows_per_group=group,
                                   metadata=metadata)
        shards.append(WrittenShard(file=name, index=index, sha256=sha, bytes=size,
                                   counts=rows.counts))
    manifest = build_manifest(
        tokenizer=tokenizer or ByteTokenizer().info(), windows=windows,
        inputs=["(transforms.testing)"], reading={}, shards=shards, skipped={},
        records=len(ids), row_group_rows=group, versions={}, fingerprint=fingerprint,
    )
    with open(os.path.join(root, MANIFEST_NAME), "wb") as f:
        f.write(dumps_manifest(manifest))
    return manifest
