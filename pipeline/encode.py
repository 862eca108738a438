"""Chunks → blocks of encoded, planned, keyed documents by shard; rejects; input receipts.

`EncodeChunks` is one DoFn around `transforms.chunks.read_chunk`,
`transforms.encoding.batch_documents` and `transforms.encoding.pack_documents`: a document is
never a Beam element, and the DoFn itself holds only threads, look-ahead and metrics.

Threads in a worker process (the rules the code keeps):

* The bundle thread parses records, plans and packs batches, and bumps every metric: Beam
  counts a counter bumped on another thread nowhere, so helper threads never touch one.
* Up to ``encoding_ahead`` (`pipeline.context.Tuning`) batches are encoded at once, each on
  a helper thread of the DoFn's pool; SentencePiece releases the GIL and runs
  ``encode_threads`` threads of its own per call. Peak here: 1 + encoding_ahead × (1 +
  encode_threads) threads.
* `pipeline.write.WriteShards` writes up to ``shards_at_once`` shards at once on a pool
  shared by the process, and each shard has one more thread that feeds pyarrow's
  writer (`transforms.parquet.write_shard`). The local runner runs the encoding and writing
  stages one after the other, so their threads do not add up there.
* ``--encode-threads`` is per process: the launcher's default is the machine's cores for the
  in-process local runner, cores ÷ workers for ``multi_processing``, and 1 on runners that
  start one SDK process per core (Dataflow, Flink, portable), which would otherwise run
  cores² threads.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import logging
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, BinaryIO

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils import shared

from pipeline import fs, progress
from pipeline.tagged import BLOCKS, RECEIPTS, REJECTS, Outputs, SplitTags
from transforms.chunks import Chunk, read_chunk
from transforms.documents import Document, Reject
from transforms.encoding import Encoded, PartBuffer, batch_documents
from transforms.keys import ShardPlan
from transforms.spill import SpillWriter, disk_full_message, spill_rejects
from transforms.tokenizers import Tokenizer, TokenizerSpec, hf_config_path, tokenizer_from_bytes

if TYPE_CHECKING:
    from pipeline.context import JobContext

__all__ = ["SHUFFLES", "EncodeChunks", "load_tokenizer"]

_LOG = logging.getLogger("token_windows")

# How blocks reach the shard writers: through the runner's shuffle, or spilled to files
# under the output's temporary directory with only references through the shuffle
# (`transforms.spill`; the local runner's default, whose GroupByKey lives in memory).
SHUFFLES = ("runner", "files")


def load_tokenizer(spec: str | TokenizerSpec | None, num_threads: int = 1) -> Tokenizer:
    """The tokenizer named by ``--tokenizer`` (None: bytes), read through FileSystems.

    ``spec`` is the path of a SentencePiece ``.model`` or a Hugging Face ``tokenizer.json``,
    or a `TokenizerSpec` (the path, ``--bos-token``/``--eos-token`` and
    ``--tokenizer-engine``). A ``tokenizer.json`` takes the BOS/EOS tokens it is not given
    from the ``tokenizer_config.json`` beside it.

    Raises:
        ValueError: the model cannot be read or is not a usable tokenizer.
    """
    if not isinstance(spec, TokenizerSpec):
        spec = TokenizerSpec(spec)
    path = spec.path
    if path is None:
        return tokenizer_from_bytes(None, where="bytes", bos_token=spec.bos_token,
                                    eos_token=spec.eos_token, engine=spec.engine)
    try:
        model = fs.read_bytes(path)
    except Exception as e:  # FileSystems raises BeamIOError, OSError, or a cloud error
        raise ValueError(
            f"--tokenizer {path} cannot be read ({e}); pass the path of a SentencePiece "
            ".model file, a Hugging Face tokenizer.json, or --tokenizer bytes"
        ) from e
    beside, config = hf_config_path(path), None
    if beside and (spec.bos_token is None or spec.eos_token is None) and fs.exists(beside):
        config = fs.read_bytes(beside)
    return tokenizer_from_bytes(model, where=path, num_threads=num_threads,
                                bos_token=spec.bos_token, eos_token=spec.eos_token,
                                config=config, engine=spec.engine)


class _EncodeChunkFn(beam.DoFn):
    """A chunk → (shard, block) pairs, or the path of the spill file that holds its blocks;
    its rejects and its receipt; each as a (tag, value) pair (`pipeline.tagged`).

    While SentencePiece encodes batches on helper threads, this thread parses the batches
    after them and plans and packs the ones before, so the worker's cores stay busy.
    """

    def __init__(self, context: JobContext) -> None:
        config = context.config
        self._spec = config.read
        self._output = context.output
        self._plan = context.plan
        self._splits = context.splits
        self._windows = config.windows
        self._tokenizer_spec = config.tokenizer_spec
        self._threads = config.encode_threads
        self._batch_chars = context.tuning.batch_chars
        self._ahead = context.tuning.encoding_ahead
        self._spill_dir = context.spill_dir
        self._progress_dir = context.progress_dir
        self._write_every = context.tuning.progress_write_every
        self._handle = shared.Shared()
        self._records = Metrics.counter("read", "records")
        self._tokens = Metrics.counter("tokenize", "tokens")
        self._windows_made = Metrics.counter("windows", "windows")
        self._spilled = Metrics.counter("shuffle", "spilled_bytes")

    def setup(self) -> None:
        # One model per worker process, however many threads or DoFn instances it runs.
        self._tokenizer = self._handle.acquire(
            lambda: load_tokenizer(self._tokenizer_spec, self._threads),
            tag=f"{self._tokenizer_spec!r}@{self._threads}",
        )
        self._pool = ThreadPoolExecutor(self._ahead, thread_name_prefix="encode")
        self._progress = progress.Reporter(self._progress_dir, write_every=self._write_every)

    def teardown(self) -> None:
        pool = getattr(self, "_pool", None)  # None when setup failed
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def process(self, chunk: Chunk) -> Iterator[Any]:
        plan = self._plan
        if self._spill_dir is None:
            yield from self._encode(chunk, plan, None)
            return
        # A name of the chunk's own, plus a random attempt id: a retried bundle never
        # touches the file of an attempt the runner may still use. Temp names never reach
        # the output.
        name = hashlib.sha256(f"{chunk.path}@{chunk.start}".encode()).hexdigest()[:16]
        path = fs.join(self._spill_dir, f"{name}-{uuid.uuid4().hex[:12]}.spill")
        rejects: list[Reject] = []
        with _spill_file(path, self._spill_dir, self._output) as f:
            spill = SpillWriter(f, num_parts=plan.num_parts)
            for tag, value in self._encode(chunk, plan, spill):
                if tag == REJECTS:
                    rejects.append(value)  # spilled below, not held by the runner
                else:
                    yield tag, value
            self._spilled.inc(spill.finish())
        yield BLOCKS, path  # complete: its index is written and the file closed
        if rejects:
            runs_path = path.removesuffix(".spill") + ".rejects"
            with _spill_file(runs_path, self._spill_dir, self._output) as f:
                runs = spill_rejects(rejects, f, path=runs_path, order=(chunk.path, chunk.start))
            for run in runs:
                yield REJECTS, run

    def _encode(self, chunk: Chunk, plan: ShardPlan, spill: SpillWriter | None) -> Iterator[Any]:
        pending: collections.deque[tuple[list[Document], Future]] = collections.deque()
        held = PartBuffer(windows=self._windows, plan=plan,
                          parts_per_shard=1 if spill is None else plan.parts_per_shard,
                          splits=self._splits)
        records = sampled_out = 0
        items = read_chunk(chunk, self._spec, fs.open_raw)
        for batch in batch_documents(items, max_chars=self._batch_chars):
            if isinstance(batch, Reject):
                records += 1
                Metrics.counter("rejects", batch.reason).inc()
                yield REJECTS, batch
                continue
            records += len(batch)
            if self._splits is not None:  # --sample: left out before they are encoded
                keep = self._splits.kept([d.doc_id for d in batch])
                sampled_out += len(batch) - sum(keep)
                batch = [d for d, k in zip(batch, keep, strict=True) if k]
                if not batch:
                    continue
            texts = [d.text for d in batch]
            pending.append((batch, self._pool.submit(self._tokenizer.encode_batch, texts)))
            if len(pending) > self._ahead:
                docs, encoding = pending.popleft()
                yield from self._add(held, docs, encoding.result(), spill, chunk)
        while pending:
            docs, encoding = pending.popleft()
            yield from self._add(held, docs, encoding.result(), spill, chunk)
        yield from self._emit(held.flush(), spill)
        self._progress.chunk_done(chunk)
        # One line per chunk encoded (at DEBUG: a big job has thousands), which tells how
        # often a runner ran the step (tests/test_runners.py counts them on Dask workers).
        _LOG.debug("encoded chunk %s@%d: %d records", chunk.path, chunk.start, records)
        self._records.inc(records)
        yield RECEIPTS, chunk.receipt(records, sampled_out)

    def _add(self, held: PartBuffer, docs: list[Document], tokens: list[Any],
             spill: SpillWriter | None, chunk: Chunk) -> list[tuple[str, tuple[int, bytes]]]:
        self._progress.encoded(chunk, docs, sum(map(len, tokens)))
        return self._emit(held.add(docs, tokens), spill)

    def _emit(self, encoded: Encoded,
              spill: SpillWriter | None) -> list[tuple[str, tuple[int, bytes]]]:
        """The (BLOCKS, (shard, block)) pairs to emit; with a spill file, none: they are
        written."""
        self._tokens.inc(encoded.tokens)
        self._windows_made.inc(encoded.windows)
        if spill is None:
            return [(BLOCKS, pair) for pair in encoded.blocks]
        for part, block in encoded.blocks:
            spill.write(part, block)
        return []


@contextlib.contextmanager
def _spill_file(path: str, spill_dir: str, output: str | None) -> Iterator[BinaryIO]:
    """A spill file to write, closed at the end; a full disk names the spill directory
    (`transforms.spill.disk_full_message`).

    If the body fails, its error is the one raised: closing a half-written object-store
    upload fails too (S3's CompleteMultipartUpload without parts: "MalformedXML"), and that
    error, which names no input and suggests a write problem, must not hide the first.
    """
    try:
        f = fs.create(path, root=output or spill_dir)
        try:
            yield f
        except BaseException:
            with contextlib.suppress(Exception):
                f.close()
            raise
        f.close()
    except OSError as e:
        if e.errno == errno.ENOSPC and not isinstance(e, fs.DiskFullError):
            raise fs.DiskFullError(disk_full_message(spill_dir)) from e
        raise


class EncodeChunks(beam.PTransform):
    """Chunks → `pipeline.tagged.Outputs`: ``blocks`` (shard, block of packed documents), or
    with the file shuffle one spill file's path per chunk (`transforms.spill`); ``rejects``;
    and ``receipts`` (one `transforms.chunks.Receipt` per chunk).

    What it reads of the `pipeline.context.JobContext`: how to read the inputs, the window
    parameters (and the seed of the keys), the tokenizer and its threads per worker process
    (``--encode-threads``; each document is encoded alone, so the ids do not depend on it),
    the shard plan, the sample and splits (documents the sample leaves out are counted in
    the receipt and never encoded; each other goes to its split's shards), the spill
    directory (``OUTPUT/.tmp/<attempt>/shuffle``, with ``--shuffle files``; no spill file is
    reached through a link below the output, `pipeline.confine`), where progress goes, and
    the knobs ``batch_chars`` and ``encoding_ahead`` (neither changes the output).
    """

    def __init__(self, context: JobContext) -> None:
        super().__init__()
        self._fn = _EncodeChunkFn(context)

    def expand(self, chunks: beam.PCollection) -> Outputs:
        return (
            chunks
            | "Encode" >> beam.ParDo(self._fn)
            | "ByTag" >> SplitTags([BLOCKS, REJECTS, RECEIPTS])
        )
