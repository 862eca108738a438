"""The one-process reference: the same work as the job, written as a plain script.

Reads JSONL (orjson when installed, as the job does), encodes batches of about 1 M
characters with SentencePiece (``num_threads`` = the cores, ``out_type='numpy'``, BOS and
EOS added), cuts every document's ``z = [BOS, ids…, EOS]`` into windows of ``--window``
pairs every ``--stride`` (the short tail kept, as the job's default ``keep`` does) with
numpy, vectorised over the batch, and streams one zstd Parquet file with the job's schema,
compression and row-group size. Rows stay in input order: there is no shuffle, no
duplicate-id check, no reject accounting and no manifest, which is what the job adds.

It is the practical limit on one machine for this work, and what the benchmark divides by::

    python bench/reference.py --input 'bench/work/corpus-…/*.jsonl' \\
        --tokenizer bench/work/spm-….model --output /tmp/ref --window 512 --stride 256
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

try:  # the parser the job uses when it is there
    from orjson import loads
except ImportError:
    from json import loads
import pyarrow.parquet as pq
import sentencepiece as spm

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from transforms.dataset.schema import ARROW_SCHEMA  # noqa: E402  (the same columns as the job)

BATCH_CHARS = 1 << 20  # encode about this many characters at a time


def windows(pairs: np.ndarray, window: int, stride: int) -> tuple[np.ndarray, ...]:
    """Per document: full windows every ``stride``, then the short tail if one is left.

    Returns (document of each window, its origin, its length), vectorised over documents.
    """
    full = np.where(pairs < window, 0, (pairs - window) // stride + 1)
    rest = stride * full
    tail = ~((full > 0) & (rest - stride + window == pairs)) & (rest < pairs)
    n = full + tail
    doc = np.repeat(np.arange(len(pairs)), n)
    first = np.zeros(len(pairs), np.int64)
    np.cumsum(n[:-1], out=first[1:])
    k = np.arange(len(doc)) - first[doc]
    starts = stride * k
    lengths = np.where(k < full[doc], window, pairs[doc] - starts)
    return doc, starts, lengths


def key_of(seed: int, doc_id: str) -> int:
    digest = hashlib.blake2b(doc_id.encode(), digest_size=8, key=seed.to_bytes(8, "little"),
                             person=b"tw-doc-key").digest()
    return int.from_bytes(digest, "big")


def table_of(ids: list[str], bodies: list[np.ndarray], window: int, stride: int) -> pa.Table:
    """The rows of a batch of documents (each ``z`` with BOS and EOS), in input order."""
    m = np.fromiter(map(len, bodies), np.int64, len(bodies))
    z = np.concatenate(bodies)
    doc, starts, lengths = windows(m - 1, window, stride)
    z_start = np.zeros(len(m), np.int64)
    np.cumsum(m[:-1], out=z_start[1:])
    lo = (z_start[doc] + starts).tolist()
    hi = (z_start[doc] + starts + lengths + 1).tolist()
    tokens = np.concatenate([z[a:b] for a, b in zip(lo, hi, strict=True)])
    offsets = np.zeros(len(doc) + 1, np.int32)
    np.cumsum(lengths + 1, out=offsets[1:])
    keys = np.array([key_of(0, i) for i in ids], np.uint64)
    first = np.zeros(len(m), np.int64)
    np.cumsum(np.bincount(doc, minlength=len(m))[:-1], out=first[1:])
    return pa.Table.from_arrays(
        [
            pa.array(ids, pa.string()).take(pa.array(doc)),
            pa.array(keys[doc]),
            pa.array((np.arange(len(doc)) - first[doc]).astype(np.int32)),
            pa.array(starts.astype(np.int64)),
            pa.array(lengths.astype(np.int32)),
            pa.array(np.zeros(len(doc), np.int32)),
            pa.array(m[doc]),
            pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens)).cast(
                ARROW_SCHEMA.field("tokens").type),
        ],
        schema=ARROW_SCHEMA,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="JSONL glob")
    parser.add_argument("--tokenizer", required=True, help="SentencePiece .model")
    parser.add_argument("--output", required=True, help="output directory")
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--stride", type=int, default=None)
    parser.add_argument("--id-field", default="id")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    stride = args.stride or args.window

    started = time.monotonic()
    sp = spm.SentencePieceProcessor(model_file=args.tokenizer)
    os.makedirs(args.output, exist_ok=True)
    row_group = max(16, (1 << 20) // (4 * (args.window + 1)))  # the job's row groups
    out = os.path.join(args.output, "part-00000-of-00001.parquet")
    docs = rows = 0
    with pq.ParquetWriter(out, ARROW_SCHEMA, compression="zstd", compression_level=3,
                          use_dictionary=["doc_id"],
                          write_statistics=["doc_id", "doc_key", "window_index", "start"]) as w:

        def flush(ids: list[str], texts: list[str]) -> None:
            nonlocal docs, rows
            bodies = sp.encode(texts, out_type="numpy", num_threads=args.threads,
                               add_bos=True, add_eos=True)
            table = table_of(ids, bodies, args.window, stride)
            w.write_table(table, row_group_size=row_group)
            docs, rows = docs + len(ids), rows + table.num_rows

        for path in sorted(glob.glob(args.input)):
            ids: list[str] = []
            texts: list[str] = []
            chars = 0
            with open(path, "rb") as f:
                for line in f:
                    record = loads(line)
                    ids.append(str(record[args.id_field]))
                    texts.append(record["text"])
                    chars += len(texts[-1])
                    if chars >= BATCH_CHARS:
                        flush(ids, texts)
                        ids, texts, chars = [], [], 0
            if ids:
                flush(ids, texts)
    seconds = time.monotonic() - started
    print(json.dumps({"documents": docs, "windows": rows, "seconds": round(seconds, 3)}))


if __name__ == "__main__":
    main()
