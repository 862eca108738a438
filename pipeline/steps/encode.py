"""Chunks → parcels of encoded, planned, keyed documents by shard; rejects; input receipts.

`EncodeChunks` is one DoFn around `transforms.inputs.chunks.read_chunk`,
`transforms.shards.encoding.batch_documents` and `transforms.shards.encoding.pack_documents`: a
document is never a Beam element, and the DoFn itself holds only threads, look-ahead and metrics.

Threads in a worker process (the rules the code keeps):

* The bundle thread parses records, plans and packs batches, and bumps every metric: Beam
  counts a counter bumped on another thread nowhere, so helper threads never touch one.
* Up to ``encoding_ahead`` (`pipeline.launch.context.Tuning`) batches are encoded at once, each on
  a helper thread of the DoFn's pool; SentencePiece releases the GIL and runs
  ``encode_threads`` threads of its own per call. Peak here: 1 + encoding_ahead × (1 +
  encode_threads) threads.
* `pipeline.steps.write.WriteShards` writes up to ``shards_at_once`` shards at once on a pool
  shared by the process, and each shard has one more thread that feeds pyarrow's
  writer (`transforms.shards.parquet.write_shard`). The local runner runs the encoding and writing
  stages one after the other, so their threads do not add up there.
* ``--encode-threads`` is per process: the launcher's default is the machine's cores for the
  in-process local runner, cores ÷ workers for ``multi_processing``, and 1 on runners that
  start one SDK process per core (Dataflow, Flink, portable), which would otherwise run
  cores² threads.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import hashlib
import io
import logging
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, BinaryIO

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils import shared
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from pipeline.files import fs
from pipeline.steps import progress
from pipeline.steps.heap import leave_loaded_out
from pipeline.steps.tagged import PARCELS, RECEIPTS, REJECTS, Outputs, SplitTags, StepFn
from transforms.dedup.removal import Removal, drop_removed
from transforms.inputs.chunks import Chunk, read_chunk
from transforms.inputs.documents import Document, Reject
from transforms.plan.keys import ShardPlan
from transforms.shards.encoding import Encoded, PartBuffer, batch_documents, encode_or_reject
from transforms.shards.spill import RejectRun, SpillWriter, disk_full_message, spill_rejects
from transforms.tokenize.tokenizers import (
    HF_CONFIG_NAME,
    Tokenizer,
    TokenizerSpec,
    hf_config_path,
    tokenizer_from_bytes,
)

if TYPE_CHECKING:
    from pipeline.launch.context import JobContext
    from pipeline.launch.options import JobConfig

__all__ = ["SHUFFLES", "EncodeChunks", "acquire_tokenizer", "load_tokenizer"]

_LOG = logging.getLogger("token_windows")

# How parcels reach the shard writers: through the runner's shuffle, or spilled to files
# under the output's temporary directory with only references through the shuffle
# (`transforms.shards.spill`; the local runner's default, whose GroupByKey lives in memory).
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
    _check_regular(path, "--tokenizer")
    try:
        model = fs.read_bytes(path)
    except Exception as e:  # FileSystems raises BeamIOError, OSError, or a cloud error
        raise ValueError(
            f"--tokenizer {path} cannot be read ({e}); pass the path of a SentencePiece "
            ".model file, a Hugging Face tokenizer.json, or --tokenizer bytes"
        ) from e
    beside, config = hf_config_path(path), None
    if beside and (spec.bos_token is None or spec.eos_token is None) and fs.exists(beside):
        _check_regular(beside, f"the {HF_CONFIG_NAME} beside --tokenizer")
        config = fs.read_bytes(beside)
    return tokenizer_from_bytes(model, where=path, num_threads=num_threads,
                                bos_token=spec.bos_token, eos_token=spec.eos_token,
                                config=config, engine=spec.engine)


def _check_regular(path: str, what: str) -> None:
    """Refuse a tokenizer file that is a FIFO or a device before opening it: reading would
    wait for a writer, or never end (`pipeline.files.fs.special_kind`)."""
    kind = fs.special_kind(path)
    if kind is not None:
        raise ValueError(
            f"{what} {path} is {kind}, not a regular file: it is not read; pass the path of "
            "a SentencePiece .model file, a Hugging Face tokenizer.json, or --tokenizer bytes")


def acquire_tokenizer(handle: shared.Shared, config: JobConfig) -> Tokenizer:
    """The job's tokenizer in this process: loaded once per ``handle`` (the job context's
    ``tokenizer_handle``) by `load_tokenizer` with the job's spec and ``--encode-threads``,
    then shared by whoever acquires it while someone holds it.

    The launcher loads it through the handle first (`pipeline.launch.preflight`) and holds it for
    the run, so the steps of a runner that runs them in the launcher's process (the local
    runner ``in_memory``) take the launcher's; a worker process of any other runner has
    none, and loads its own. The handle pickles as a key: the tokenizer never enters the
    graph. The spec and thread count are the tag: a different one loads anew.

    Raises:
        ValueError: the model cannot be read or is not a usable tokenizer.
    """
    spec, threads = config.tokenizer_spec, config.encode_threads
    return handle.acquire(lambda: load_tokenizer(spec, threads), tag=(spec, threads))


class _EncodeChunkFn(StepFn):
    """A chunk → (shard, parcel) pairs, or (with the bundle's first chunk) the path of the
    bundle's spill file, which holds the parcels; its rejects and its receipt; each as a
    (tag, value) pair (`pipeline.steps.tagged`).

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
        self._config = config
        self._batch_chars = context.tuning.batch_chars
        self._ahead = context.tuning.encoding_ahead
        self._spill_dir = context.spill_dir
        self._progress_dir = context.progress_dir
        self._write_every = context.tuning.progress_write_every
        self._freeze_loaded = context.tuning.freeze_loaded
        self._handle = context.tokenizer_handle
        self._records = Metrics.counter("read", "records")
        self._tokens = Metrics.counter("tokenize", "tokens")
        self._windows_made = Metrics.counter("windows", "windows")
        self._spilled = Metrics.counter("shuffle", "spilled_bytes")
        self._removals: dict[int, Removal] | None = None  # the chunk's, with a dedup pass

    def setup(self) -> None:
        # One model per worker process, however many threads or DoFn instances it runs; in
        # the launcher's process, the launcher's.
        self._tokenizer = acquire_tokenizer(self._handle, self._config)
        self._pool = ThreadPoolExecutor(self._ahead, thread_name_prefix="encode")
        # Beam's DaskRunner drops what finish_bundle emits: there a chunk's batches are all
        # taken in before its end, so that its tokenizer rejects go on from `process`.
        self._emits_late = not _in_dask_worker()
        self._progress = progress.Reporter(self._progress_dir, write_every=self._write_every)
        if self._freeze_loaded:
            leave_loaded_out()  # the model and the worker's modules: later collections skip them

    def teardown(self) -> None:
        pool = getattr(self, "_pool", None)  # None when setup failed
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        self._abandon()  # a failed bundle's files: closed, never read

    def start_bundle(self) -> None:
        self._abandon()  # a failed bundle's files, if finish_bundle never came
        self._bundle: _BundleSpill | None = None

    def process(self, item: Chunk | tuple[Chunk, dict[int, Removal]]) -> Iterator[Any]:
        # With --dedup/--decontaminate, a chunk comes with its removals (`pipeline.steps.dedup`).
        chunk, self._removals = item if isinstance(item, tuple) else (item, None)
        plan = self._plan
        if self._spill_dir is None:
            # Parcels go on through the runner's shuffle, from `process`: each chunk's are
            # emitted before its receipt.
            stream = self._stream(plan, None)
            yield from self._encode(chunk, stream, last=True)
            for _, failed in self._released(stream):
                for reject in failed:
                    yield REJECTS, reject
            return
        if self._bundle is None:
            # One spill file per bundle, not per chunk: 20,000 small files made 20,000 spill
            # files (and up to as many rejects files), each with an index and footer, each
            # opened by every shard writer and deleted at the end. Its path goes on now, from
            # `process` (a runner may drop what `finish_bundle` emits), and the file is
            # complete when the bundle is: the writers read it only after this step has
            # finished, and a failed bundle's outputs, this path among them, are discarded.
            self._bundle = _BundleSpill(self._spill_dir, root=self._output or self._spill_dir,
                                        first=chunk, num_parts=plan.num_parts)
            self._bundle.stream = self._stream(plan, self._bundle.writer)
            yield PARCELS, self._bundle.path
        bundle = self._bundle
        rejects: list[Reject] = []
        with _naming_a_full_disk(self._spill_dir):
            # The bundle's batches stay in flight from one chunk to the next (the last are
            # spilled in `finish_bundle`): the cores never wait at a chunk's end.
            for tag, value in self._encode(chunk, bundle.stream, last=False):
                if tag == REJECTS:
                    rejects.append(value)  # spilled below, not held by the runner
                else:
                    yield tag, value
            runs = bundle.add_rejects(rejects, order=(chunk.path, chunk.start)) if rejects else []
            # Documents the tokenizer failed on, of the chunks whose batches are all taken
            # in: one run per chunk (no parse rejects share their reason), placed by it.
            for done, failed in self._released(bundle.stream):
                runs += bundle.add_rejects(failed, order=(done.path, done.start))
        for run in runs:
            yield REJECTS, run

    def finish_bundle(self) -> list[WindowedValue] | None:
        # Nothing else is emitted here (Beam's DaskRunner drops it): the spill file's path
        # went on with the bundle's first chunk; the batches still in flight are spilled,
        # then the index and footer written. Only the rejects of documents the tokenizer
        # failed on in the last batches, known only now, go on from here (never on Dask,
        # whose chunks leave no batch in flight); were they dropped, the records would not
        # add up and the last step would fail the job, naming the counts.
        bundle, self._bundle = getattr(self, "_bundle", None), None
        runs: list[RejectRun] = []
        if bundle is not None:
            try:
                with _naming_a_full_disk(self._spill_dir):
                    self._drain(bundle.stream)
                    for done, failed in self._released(bundle.stream):
                        runs += bundle.add_rejects(failed, order=(done.path, done.start))
            except BaseException:
                bundle.abandon()
                raise
            self._progress.bundle_done()
            self._spilled.inc(bundle.close())
        else:
            self._progress.bundle_done()
        if not runs:
            return None
        return [WindowedValue((REJECTS, run), MIN_TIMESTAMP, [GlobalWindow()]) for run in runs]

    @staticmethod
    def _released(stream: _Stream) -> list[tuple[Chunk, list[Reject]]]:
        """The documents the tokenizer failed on of each chunk whose batches are all taken
        in since the last call, in chunk order (none held any more)."""
        released, stream.released = stream.released, []
        return released

    def _abandon(self) -> None:
        bundle, self._bundle = getattr(self, "_bundle", None), None
        if bundle is not None:
            bundle.abandon()

    def _stream(self, plan: ShardPlan, spill: SpillWriter | None) -> _Stream:
        # Spilled parcels are written piece by piece, never joined into one byte string.
        return _Stream(PartBuffer(windows=self._windows, plan=plan,
                                  parts_per_shard=1 if spill is None else plan.parts_per_shard,
                                  splits=self._splits, joined=spill is None), spill)

    def _encode(self, chunk: Chunk, stream: _Stream, *, last: bool) -> Iterator[Any]:
        """Parse the chunk's batches and start encoding them, taking in the batches encoded
        meanwhile; ``last``: then every batch of the stream, and flush it."""
        records = sampled_out = position = 0  # position: documents read (rejects not)
        items = read_chunk(chunk, self._spec, fs.open_raw)
        for batch in batch_documents(items, max_chars=self._batch_chars):
            if isinstance(batch, Reject):
                records += 1
                Metrics.counter("rejects", batch.reason).inc()
                yield REJECTS, batch
                continue
            records += len(batch)
            if self._removals is not None:  # copies, benchmark text: never encoded
                position, first = position + len(batch), position
                batch = yield from self._without_removed(batch, first)
                if not batch:
                    continue
            if self._splits is not None:  # --sample: left out before they are encoded
                keep = self._splits.kept([d.doc_id for d in batch])
                sampled_out += len(batch) - sum(keep)
                batch = [d for d, k in zip(batch, keep, strict=True) if k]
                if not batch:
                    continue
            stream.pending.append(
                (chunk, batch, self._pool.submit(encode_or_reject, self._tokenizer, batch)))
            stream.in_flight += 1
            while stream.in_flight > self._ahead:
                yield from self._next(stream)
        stream.pending.append((chunk, None, None))  # the chunk's end, for progress
        if last:
            yield from self._drain(stream)
        elif not self._emits_late:
            while stream.pending:
                yield from self._next(stream)
        # One line per chunk encoded (at DEBUG: a big job has thousands), which tells how
        # often a runner ran the step (tests/job/test_runners.py counts them on Dask workers).
        _LOG.debug("encoded chunk %s@%d: %d records", chunk.path, chunk.start, records)
        self._records.inc(records)
        yield RECEIPTS, chunk.receipt(records, sampled_out)

    def _without_removed(self, batch: list[Document],
                         first: int) -> Iterator[tuple[str, Any]]:
        """Emit the batch's removed documents as rejects; returns the others. ``first``:
        the position of the batch's first document among the chunk's documents."""
        kept, gone = drop_removed(batch, first, self._removals)
        for removed in gone:
            Metrics.counter("rejects", removed.reason).inc()
            yield REJECTS, removed
        return kept

    def _next(self, stream: _Stream) -> list[tuple[str, tuple[int, bytes]]]:
        """Take in the oldest batch in flight (waiting for it), and the chunk ends before it.

        The documents the tokenizer failed on (`transforms.shards.encoding.encode_or_reject`) are
        held by chunk, and released (`_released`) once the chunk's end is taken in."""
        while stream.pending:
            chunk, docs, encoding = stream.pending.popleft()
            key = (chunk.path, chunk.start)
            if docs is None:
                self._progress.chunk_done(chunk)
                if key in stream.failed:
                    stream.released.append((chunk, stream.failed.pop(key)))
                continue
            stream.in_flight -= 1
            docs, tokens, failed = encoding.result()
            if failed:
                stream.failed.setdefault(key, []).extend(failed)
                for reject in failed:
                    Metrics.counter("rejects", reject.reason).inc()
            lengths = np.fromiter(map(len, tokens), np.int64, len(tokens))
            self._progress.encoded(chunk, docs, int(lengths.sum()))
            if not docs:
                return []
            return self._emit(stream.held.add(docs, tokens, lengths), stream.spill)
        return []

    def _drain(self, stream: _Stream) -> list[tuple[str, tuple[int, bytes]]]:
        """Every batch in flight taken in, then what the stream holds packed.

        With a spill file (a bundle's end), what the stream holds is packed first, while
        the encoders finish the batches in flight, and then theirs: the cores would
        otherwise sit idle while the whole buffer is packed (a second, small parcel per
        part is the price)."""
        out = []
        if stream.spill is not None and stream.in_flight:
            out += self._emit(stream.held.flush(), stream.spill)
        while stream.pending:
            out += self._next(stream)
        return out + self._emit(stream.held.flush(), stream.spill)

    def _emit(self, encoded: Encoded,
              spill: SpillWriter | None) -> list[tuple[str, tuple[int, bytes]]]:
        """The (PARCELS, (shard, parcel)) pairs to emit; with a spill file, none: they are
        written."""
        self._tokens.inc(encoded.tokens)
        self._windows_made.inc(encoded.windows)
        if spill is None:
            return [(PARCELS, pair) for pair in encoded.parcels]
        for part, parcel in encoded.parcels:
            spill.write(part, parcel)
        return []


def _in_dask_worker() -> bool:
    """Whether this runs in a Dask worker (Beam's DaskRunner), which drops what a DoFn's
    ``finish_bundle`` emits."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return False
    try:
        distributed.get_worker()
    except ValueError:  # "No worker found": not in a Dask task
        return False
    return True


@dataclasses.dataclass
class _Stream:
    """Batches being encoded, in order (with a (chunk, None, None) entry at each chunk's
    end), and the documents encoded but not yet packed; the spill file they go to, or None
    (emitted)."""

    held: PartBuffer
    spill: SpillWriter | None
    pending: collections.deque[tuple[Chunk, list[Document] | None, Future | None]] = (
        dataclasses.field(default_factory=collections.deque))
    in_flight: int = 0
    # Documents the tokenizer failed on, by chunk (path, start), until the chunk's end is
    # taken in; then released, (chunk, rejects) in chunk order.
    failed: dict[tuple[str, int], list[Reject]] = dataclasses.field(default_factory=dict)
    released: list[tuple[Chunk, list[Reject]]] = dataclasses.field(default_factory=list)


@contextlib.contextmanager
def _naming_a_full_disk(spill_dir: str) -> Iterator[None]:
    """A full disk met in the body names the spill directory
    (`transforms.shards.spill.disk_full_message`)."""
    try:
        yield
    except OSError as e:
        if e.errno == errno.ENOSPC and not isinstance(e, fs.DiskFullError):
            raise fs.DiskFullError(disk_full_message(spill_dir)) from e
        raise


class _BundleSpill:
    """One bundle's spill file (the parcels of all its chunks, by part) and, once a chunk has
    rejects, its rejects file (each chunk's runs end to end, `transforms.shards.spill`); both below
    ``root``, the output directory, through no link (`pipeline.files.confine`).

    A full disk names the spill directory. If writing fails, that error is the one raised:
    `abandon` closes the files quietly, since closing a half-written object-store upload
    fails too (S3's CompleteMultipartUpload without parts: "MalformedXML"), and that error,
    which names no input and suggests a write problem, must not hide the first.
    """

    def __init__(self, directory: str, *, root: str, first: Chunk, num_parts: int) -> None:
        # A name of the bundle's first chunk, plus a random attempt id: a retried bundle
        # never touches the file of an attempt the runner may still use. Temp names never
        # reach the output.
        name = hashlib.sha256(f"{first.path}@{first.start}".encode()).hexdigest()[:16]
        self.path = fs.join(directory, f"{name}-{uuid.uuid4().hex[:12]}.spill")
        self._directory = directory
        self._root = root
        self._rejects_path = self.path.removesuffix(".spill") + ".rejects"
        self._rejects: BinaryIO | None = None
        self._rejects_at = 0
        with _naming_a_full_disk(directory):
            self._file: BinaryIO | None = fs.create(self.path, root=root)
        self.writer = SpillWriter(self._file, num_parts=num_parts)
        self.stream: _Stream | None = None  # the bundle's batches in flight, set by the DoFn

    def add_rejects(self, rejects: list[Reject], *, order: tuple[str, int]) -> list[RejectRun]:
        """Append one chunk's rejects (in input order); their runs, at their offsets in the
        bundle's rejects file."""
        if self._rejects is None:
            self._rejects = fs.create(self._rejects_path, root=self._root)
        buffer = io.BytesIO()
        runs = spill_rejects(rejects, buffer, path=self._rejects_path, order=order)
        data = buffer.getvalue()
        self._rejects.write(data)
        at, self._rejects_at = self._rejects_at, self._rejects_at + len(data)
        return [dataclasses.replace(run, offset=run.offset + at) for run in runs]

    def close(self) -> int:
        """Write the spill file's index and footer and close both files; the bytes of parcels
        spilled."""
        try:
            with _naming_a_full_disk(self._directory):
                spilled = self.writer.finish()
                file, self._file = self._file, None
                if file is not None:
                    file.close()
                if self._rejects is not None:
                    rejects, self._rejects = self._rejects, None
                    rejects.close()
        except BaseException:
            self.abandon()
            raise
        return spilled

    def abandon(self) -> None:
        """Close the files without raising (a failed bundle's: never read)."""
        for f in (self._file, self._rejects):
            if f is not None:
                with contextlib.suppress(Exception):
                    f.close()
        self._file = self._rejects = None


class EncodeChunks(beam.PTransform):
    """Chunks → `pipeline.steps.tagged.Outputs`: ``parcels`` (shard, parcel of packed documents), or
    with the file shuffle one spill file's path per bundle (`transforms.shards.spill`); ``rejects``;
    and ``receipts`` (one `transforms.inputs.chunks.Receipt` per chunk).

    What it reads of the `pipeline.launch.context.JobContext`: how to read the inputs, the window
    parameters (and the seed of the keys), the tokenizer and its threads per worker process
    (``--encode-threads``; each document is encoded alone, so the ids do not depend on it),
    the shard plan, the sample and splits (documents the sample leaves out are counted in
    the receipt and never encoded; each other goes to its split's shards), the spill
    directory (``OUTPUT/.tmp/<attempt>/shuffle``, with ``--shuffle files``; no spill file is
    reached through a link below the output, `pipeline.files.confine`), where progress goes, and
    the knobs ``batch_chars`` and ``encoding_ahead`` (neither changes the output).
    """

    def __init__(self, context: JobContext) -> None:
        super().__init__()
        self._fn = _EncodeChunkFn(context)

    def expand(self, chunks: beam.PCollection) -> Outputs:
        return (
            chunks
            | "Encode" >> beam.ParDo(self._fn)
            | "ByTag" >> SplitTags([PARCELS, REJECTS, RECEIPTS])
        )
