"""The job's graph: which step feeds which.

    SplitInputs ─▶ EncodeChunks ─▶ ShuffleDocuments ─▶ WriteShards
     (chunks)       │          (blocks by shard)            │
                    ├── rejects ─────────▶ WriteRejects ◀────┤ duplicate ids
                    └── input receipts ─▶ FinalizeDataset ◀──┘ written shards
                                          (_manifest.json, written last)

`pipeline.read` holds the first step, `pipeline.encode` the second, `pipeline.write` the
shuffle, shards and rejects, `pipeline.finalize` the last step; each wraps pure functions of
`transforms`. The shard plan (`transforms.keys.ShardPlan`: how many shards, of how many parts,
for which split) is computed at launch from the sizes of the files the launcher matched
(`shard_plan`) and given to EncodeChunks, WriteShards and FinalizeDataset as a constant, not a
side input: Beam's DaskRunner computes a side input again inside every task that reads it.

The shuffle (``--shuffle``): ``runner`` sends the parcels themselves through the runner's
GroupByKey (ShuffleDocuments); ``files`` spills the parcels of each bundle of chunks to one
indexed file under ``OUTPUT/.tmp/shuffle/`` and hands WriteShards the list of files through
a GroupByKey (not a side input, which Beam's DaskRunner would compute again in each
writer): each shard writer reads its parts from every file, one part at a time, so the
local runner, whose GroupByKey lives in memory, needs memory for a few parts and the list of
files, not for the corpus (`transforms.spill`). Both write the same bytes.

Splits and samples (``--split``, ``--sample``; `transforms.splits`) add no step: EncodeChunks
leaves out the documents the sample does not keep before it encodes them, and sends each
other document to its split's shards, which the plan numbers in one range (split s owns
``[offset_s, offset_s + N_s)``), so the shuffle and the writers see one job; WriteShards
writes a split's shard into ``OUTPUT/NAME/`` under the split's own numbering, and
FinalizeDataset writes a manifest per split, then ``OUTPUT/_splits.json``.

Order never comes from arrival: documents are keyed by `transforms.keys.doc_key` and sorted
inside their shard, so runners, worker counts and bundle sizes do not change a byte.
`beam.Reshuffle` appears only as a fusion break (to spread file chunks over workers).
"""

from __future__ import annotations

import apache_beam as beam

from pipeline import fs
from pipeline.encode import RECORDS, REJECTS, EncodeChunks
from pipeline.finalize import FinalizeDataset
from pipeline.options import JobConfig
from pipeline.read import SplitInputs, plan_for_files
from pipeline.write import ShuffleDocuments, WriteRejects, WriteShards
from transforms.chunks import CHUNK_BYTES, Chunk
from transforms.keys import ShardPlan
from transforms.schema import TMP_DIR

__all__ = ["PART_TEXT_BYTES", "build_pipeline", "shard_plan"]

# With the file shuffle, a shard writer holds one part of about this much text at a time.
PART_TEXT_BYTES = 16 << 20


def shard_plan(config: JobConfig,
               files: dict[str, int] | dict[str, tuple[int, float | None]] | None) -> ShardPlan:
    """The job's shard plan from the files the launcher matched (`pipeline.read.plan_for_files`;
    None: a dry run's graph, planned as if there were no input)."""
    return plan_for_files(files, num_shards=config.num_shards,
                          part_bytes=PART_TEXT_BYTES if config.shuffle == "files" else None,
                          splits=config.splits if config.splits.active else None)


def build_pipeline(
    p: beam.Pipeline,
    config: JobConfig,
    expected_files: dict[str, int] | dict[str, tuple[int, float | None]] | None = None,
    *,
    fingerprint: str = "",
    tmp_dir: str | None = None,
    attempt: str | None = None,
    chunks: list[Chunk] | None = None,
) -> beam.PCollection:
    """Wire the job into ``p``; returns the PCollection holding the manifest.

    Args:
        expected_files: {path: (size, mtime)} (or {path: size}) as the launcher matched
            them: the shard plan is computed from their sizes (`shard_plan`), and the last
            step checks that exactly these files were read, each exactly once, and that none
            changed. None only for a graph that is translated, not run (a dry run).
        fingerprint: the job's fingerprint (`transforms.manifest.job_fingerprint`), written
            into the manifest and every shard's footer.
        tmp_dir: the job's temporary directory: every step that writes a temporary file
            writes it there, and the last step removes it. Default ``OUTPUT/.tmp/job``.
        attempt: the id in the job's claim on the output (`pipeline.run`), or None.
        chunks: the input chunks as the launcher planned and numbered them
            (`transforms.launch`): the graph starts from one element per chunk instead of
            matching the patterns on a worker (`pipeline.read.SplitInputs`; the launcher
            passes them to Beam's DaskRunner only).
    """
    if tmp_dir is None:
        tmp_dir = fs.join(config.output, TMP_DIR, "job")
    files = config.shuffle == "files"
    chunks = p | "SplitInputs" >> SplitInputs(config.inputs, spec=config.read,
                                              chunk_bytes=CHUNK_BYTES, chunks=chunks)
    splits = config.splits if config.splits.active else None
    plan = shard_plan(config, expected_files)
    encoded = chunks | "EncodeChunks" >> EncodeChunks(
        spec=config.read, windows=config.windows, tokenizer=config.tokenizer_spec,
        plan=plan, threads=config.encode_threads,
        spill_dir=fs.join(tmp_dir, "shuffle") if files else None, splits=splits,
        output=config.output,
    )
    if files:
        # Only the spill files' paths go on; the shard writers read their parts from them.
        written = p | "WriteShards" >> WriteShards(
            output=config.output, window=config.windows.window, plan=plan,
            fingerprint=fingerprint, tmp_dir=tmp_dir, spills=encoded.blocks)
    else:
        groups = encoded.blocks | "ShuffleDocuments" >> ShuffleDocuments()
        written = groups | "WriteShards" >> WriteShards(
            output=config.output, window=config.windows.window, plan=plan,
            fingerprint=fingerprint, tmp_dir=tmp_dir)
    reject_counts = (
        (encoded[REJECTS], written[REJECTS])
        | "AllRejects" >> beam.Flatten()
        | "WriteRejects" >> WriteRejects(config.output, tmp_dir=tmp_dir, spec=config.read)
    )
    return p | "FinalizeDataset" >> FinalizeDataset(
        output=config.output,
        windows=config.windows,
        inputs=list(config.inputs),
        reading=config.read.to_json(),
        tokenizer=config.tokenizer_spec,
        expected_files=expected_files,
        shards=written.shards,
        reject_counts=reject_counts,
        receipts=encoded[RECORDS],
        plan=plan,
        fingerprint=fingerprint,
        tmp_dir=tmp_dir,
        attempt=attempt,
        max_skipped_share=config.max_skipped_share,
        splits=splits,
    )
