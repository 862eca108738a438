"""The job's graph: which step feeds which.

    SplitInputs ─▶ EncodeChunks ─▶ ShuffleDocuments ─▶ WriteShards
     (chunks)       │ ▲        (blocks by shard)            │
                    │ └── ChooseNumShards (from the chunks)  │
                    ├── rejects ─────────▶ WriteRejects ◀────┤ duplicate ids
                    └── input receipts ─▶ FinalizeDataset ◀──┘ written shards
                                          (_manifest.json, written last)

`pipeline.read` holds the first two steps, `pipeline.encode` the third, `pipeline.write` the
rest; each wraps pure functions of `transforms`.

Order never comes from arrival: documents are keyed by `transforms.keys.doc_key` and sorted
inside their shard, so runners, worker counts and bundle sizes do not change a byte.
`beam.Reshuffle` appears only as a fusion break (to spread file chunks over workers).
"""

from __future__ import annotations

import apache_beam as beam

from pipeline.encode import RECORDS, REJECTS, EncodeChunks
from pipeline.options import JobConfig
from pipeline.read import ChooseNumShards, SplitInputs
from pipeline.write import FinalizeDataset, ShuffleDocuments, WriteRejects, WriteShards

__all__ = ["build_pipeline"]


def build_pipeline(
    p: beam.Pipeline, config: JobConfig, expected_files: dict[str, int] | None = None
) -> beam.PCollection:
    """Wire the job into ``p``; returns the PCollection holding the manifest.

    ``expected_files`` ({path: size}, as the launcher matched them) lets the last step check
    that exactly these files were read, each exactly once.
    """
    chunks = p | "SplitInputs" >> SplitInputs(config.inputs, spec=config.read)
    num_shards = chunks | "ChooseNumShards" >> ChooseNumShards(config.num_shards)
    encoded = chunks | "EncodeChunks" >> EncodeChunks(
        spec=config.read, windows=config.windows, tokenizer_path=config.tokenizer_spec,
        num_shards=num_shards, threads=config.encode_threads,
    )
    groups = encoded.blocks | "ShuffleDocuments" >> ShuffleDocuments()
    written = groups | "WriteShards" >> WriteShards(
        output=config.output, window=config.windows.window, num_shards=num_shards
    )
    reject_counts = (
        (encoded[REJECTS], written[REJECTS])
        | "AllRejects" >> beam.Flatten()
        | "WriteRejects" >> WriteRejects(config.output)
    )
    return p | "FinalizeDataset" >> FinalizeDataset(
        output=config.output,
        windows=config.windows,
        inputs=list(config.inputs),
        reading=config.read.to_json(),
        tokenizer_path=config.tokenizer_spec,
        expected_files=expected_files,
        shards=written.shards,
        reject_counts=reject_counts,
        receipts=encoded[RECORDS],
        num_shards=num_shards,
    )
