"""The job's graph: which step feeds which.

    SplitInputs ─▶ EncodeChunks ─▶ ShuffleDocuments ─▶ WriteShards
     (chunks)       │          (parcels by shard)           │
                    ├── rejects ─────────▶ WriteRejects ◀────┤ duplicate ids
                    └── input receipts ─▶ FinalizeDataset ◀──┘ written shards
                                          (_manifest.json, written last)

`pipeline.steps.read` holds the first step, `pipeline.steps.encode` the second,
`pipeline.steps.write` the shuffle, shards and rejects, `pipeline.steps.finalize` the last step;
each wraps pure functions of `transforms`, and each is constructed with the job's
`pipeline.launch.context.JobContext` (the flags, the shard plan, the tokenizer's record, the
fingerprint, the temporary directory, the knobs), which the launcher builds once. The shard plan
(`transforms.plan.keys.ShardPlan`: how many shards, of how many parts, for which split) is computed
there, from the sizes of the files the launcher matched, and reaches the steps as a constant, not a
side input: Beam's DaskRunner computes a side input again inside every task that reads it.

The shuffle (``--shuffle``): ``runner`` sends the parcels themselves through the runner's
GroupByKey (ShuffleDocuments); ``files`` spills the parcels of each bundle of chunks to one
indexed file under ``OUTPUT/.tmp/shuffle/`` and hands WriteShards the list of files through
a GroupByKey (not a side input, which Beam's DaskRunner would compute again in each
writer): each shard writer reads its parts from every file, one part at a time, so the
local runner, whose GroupByKey lives in memory, needs memory for a few parts and the list of
files, not for the corpus (`transforms.shards.spill`). Both write the same bytes.

Splits and samples (``--split``, ``--sample``; `transforms.plan.splits`) add no step: EncodeChunks
leaves out the documents the sample does not keep before it encodes them, and sends each
other document to its split's shards, which the plan numbers in one range (split s owns
``[offset_s, offset_s + N_s)``), so the shuffle and the writers see one job; WriteShards
writes a split's shard into ``OUTPUT/NAME/`` under the split's own numbering, and
FinalizeDataset writes a manifest per split, then ``OUTPUT/_splits.json``.

Dedup and decontamination (``--dedup``, ``--decontaminate``; `pipeline.steps.dedup`) add a first
pass over the chunks before EncodeChunks: it finds the documents to remove (copies, text
shared with an evaluation set) without tokenizing anything, and each chunk then reaches
EncodeChunks with the positions of its removed documents, which it keeps aside as rejects
instead of encoding them. A job without these flags has no such pass.

Order never comes from arrival: documents are keyed by `transforms.plan.keys.doc_key` and sorted
inside their shard, so runners, worker counts and bundle sizes do not change a byte.
`beam.Reshuffle` appears only as a fusion break (to spread file chunks over workers).
"""

from __future__ import annotations

import apache_beam as beam

from pipeline.launch.context import JobContext
from pipeline.steps.dedup import FindRemovals, JoinRemovals
from pipeline.steps.encode import EncodeChunks
from pipeline.steps.finalize import ExpectedFiles, FinalizeDataset
from pipeline.steps.read import SplitInputs
from pipeline.steps.write import ShuffleDocuments, WriteRejects, WriteShards
from transforms.inputs.chunks import Chunk

__all__ = ["build_pipeline"]


def build_pipeline(
    p: beam.Pipeline,
    context: JobContext,
    *,
    expected_files: ExpectedFiles | None = None,
    chunks: list[Chunk] | None = None,
    spread_chunks: bool = True,
) -> beam.PCollection:
    """Wire the job into ``p``; returns the PCollection holding the manifest.

    Args:
        context: the job's context (`pipeline.launch.context.job_context`): every step reads what
            it needs from it.
        expected_files: {path: (size, mtime)} (or {path: size}) as the launcher matched
            them (the context's shard plan was computed from their sizes): the last step
            checks that exactly these files were read, each exactly once, and that none
            changed. None only for a graph that is translated, not run (a dry run).
        chunks: the input chunks as the launcher planned and numbered them
            (`transforms.inputs.chunk_plan`): the graph starts from one element per chunk instead of
            matching the patterns on a worker (`pipeline.steps.read.SplitInputs`; the launcher
            plans them for Beam's DaskRunner and for the local runner,
            `pipeline.launch.chunk_plan`).
        spread_chunks: whether the runner spreads those chunks over several workers; False
            for one worker (the local runner ``in_memory``), whose graph then has no step
            between the chunks and their encoding (`pipeline.steps.read.SplitInputs`).
    """
    config = context.config
    chunks = p | "SplitInputs" >> SplitInputs(config.inputs, spec=config.read,
                                              chunk_bytes=context.tuning.chunk_bytes,
                                              chunks=chunks, spread=spread_chunks)
    summary = None
    if context.removal is not None:
        # --dedup, --decontaminate: a first pass over the text finds the documents removed;
        # each chunk then reaches EncodeChunks with its removals (`pipeline.steps.dedup`).
        found = chunks | "FindRemovals" >> FindRemovals(context)
        chunks = (chunks, found.removals) | "JoinRemovals" >> JoinRemovals()
        summary = found.summary
    encoded = chunks | "EncodeChunks" >> EncodeChunks(context)
    if context.spill_dir is not None:
        # Only the spill files' paths go on; the shard writers read their parts from them.
        written = p | "WriteShards" >> WriteShards(context, spills=encoded.parcels)
    else:
        groups = encoded.parcels | "ShuffleDocuments" >> ShuffleDocuments()
        written = groups | "WriteShards" >> WriteShards(context)
    reject_counts = (
        (encoded.rejects, written.rejects)
        | "AllRejects" >> beam.Flatten()
        | "WriteRejects" >> WriteRejects(context)
    )
    return p | "FinalizeDataset" >> FinalizeDataset(
        context,
        expected_files=expected_files,
        shards=written.shards,
        reject_counts=reject_counts,
        receipts=encoded.receipts,
        removal_summary=summary,
    )
