"""Chunks → blocks of encoded, planned, keyed documents by shard; rejects; input receipts.

`EncodeChunks` is one DoFn around `transforms.chunks.read_chunk`,
`transforms.encoding.batch_documents` and `transforms.encoding.pack_documents`: a document is
never a Beam element, and the DoFn itself holds only threads, look-ahead and metrics.

Threads in a worker process (the rules the code keeps):

* The bundle thread parses records, plans and packs batches, and bumps every metric: Beam
  counts a counter bumped on another thread nowhere, so helper threads never touch one.
* Up to `ENCODING_AHEAD` batches are encoded at once, each on a helper thread of the DoFn's
  pool; SentencePiece releases the GIL and runs ``encode_threads`` threads of its own per
  call. Peak here: 1 + ENCODING_AHEAD × (1 + encode_threads) threads.
* `pipeline.write.WriteShards` writes up to `pipeline.write.SHARDS_AT_ONCE` shards at once on
  a pool shared by the process, and each shard has one more thread that feeds pyarrow's
  writer (`transforms.parquet.write_shard`). The local runner runs the encoding and writing
  stages one after the other, so their threads do not add up there.
* ``--encode-threads`` is per process: the launcher's default is the machine's cores for the
  in-process local runner, cores ÷ workers for ``multi_processing``, and 1 on runners that
  start one SDK process per core (Dataflow, Flink, portable), which would otherwise run
  cores² threads.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils import shared

from pipeline import fs, progress
from transforms.chunks import Chunk, read_chunk
from transforms.documents import Document, Reject
from transforms.encoding import BATCH_CHARS, batch_documents, pack_documents
from transforms.params import ReadSpec, WindowSpec
from transforms.tokenizers import Tokenizer, TokenizerSpec, hf_config_path, tokenizer_from_bytes

__all__ = ["ENCODING_AHEAD", "RECORDS", "REJECTS", "EncodeChunks", "load_tokenizer"]

# Batches being encoded at once, each on its own helper thread: two keep the cores busy
# when one batch's documents split unevenly across SentencePiece's threads.
ENCODING_AHEAD = 2
REJECTS = "rejects"
RECORDS = "records"


def load_tokenizer(spec: str | TokenizerSpec | None, num_threads: int = 1) -> Tokenizer:
    """The tokenizer named by ``--tokenizer`` (None: bytes), read through FileSystems.

    ``spec`` is the path of a SentencePiece ``.model`` or a Hugging Face ``tokenizer.json``,
    or a `TokenizerSpec` (the path and ``--bos-token``/``--eos-token``). A ``tokenizer.json``
    takes the BOS/EOS tokens it is not given from the ``tokenizer_config.json`` beside it.

    Raises:
        ValueError: the model cannot be read or is not a usable tokenizer.
    """
    if not isinstance(spec, TokenizerSpec):
        spec = TokenizerSpec(spec)
    path = spec.path
    if path is None:
        return tokenizer_from_bytes(None, where="bytes", bos_token=spec.bos_token,
                                    eos_token=spec.eos_token)
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
                                config=config)


class _EncodeChunkFn(beam.DoFn):
    """A chunk → (shard, block) pairs; its rejects and its receipt as tagged outputs.

    While SentencePiece encodes batches on helper threads, this thread parses the batches
    after them and plans and packs the ones before, so the worker's cores stay busy.
    """

    def __init__(self, *, spec: ReadSpec, windows: WindowSpec, tokenizer_path: str | None,
                 threads: int, batch_chars: int) -> None:
        self._spec = spec
        self._windows = windows
        self._path = tokenizer_path
        self._threads = threads
        self._batch_chars = batch_chars
        self._handle = shared.Shared()
        self._records = Metrics.counter("read", "records")
        self._tokens = Metrics.counter("tokenize", "tokens")
        self._windows_made = Metrics.counter("windows", "windows")

    def setup(self) -> None:
        # One model per worker process, however many threads or DoFn instances it runs.
        self._tokenizer = self._handle.acquire(
            lambda: load_tokenizer(self._path, self._threads),
            tag=f"{self._path or 'bytes'}@{self._threads}",
        )
        self._pool = ThreadPoolExecutor(ENCODING_AHEAD, thread_name_prefix="encode")

    def teardown(self) -> None:
        pool = getattr(self, "_pool", None)  # None when setup failed
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def process(self, chunk: Chunk, num_shards: int) -> Iterator[Any]:
        pending: collections.deque[tuple[list[Document], Future]] = collections.deque()
        records = 0
        items = read_chunk(chunk, self._spec, fs.open_raw)
        for batch in batch_documents(items, max_chars=self._batch_chars):
            if isinstance(batch, Reject):
                records += 1
                Metrics.counter("rejects", batch.reason).inc()
                yield beam.pvalue.TaggedOutput(REJECTS, batch)
                continue
            records += len(batch)
            texts = [d.text for d in batch]
            pending.append((batch, self._pool.submit(self._tokenizer.encode_batch, texts)))
            if len(pending) > ENCODING_AHEAD:
                yield from self._pack(*pending.popleft(), num_shards, chunk)
        while pending:
            yield from self._pack(*pending.popleft(), num_shards, chunk)
        progress.chunk_done(chunk)
        self._records.inc(records)
        yield beam.pvalue.TaggedOutput(RECORDS, chunk.receipt(records))

    def _pack(self, docs: list[Document], encoding: Future,
              num_shards: int, chunk: Chunk) -> list[tuple[int, bytes]]:
        encoded = pack_documents(docs, encoding.result(), windows=self._windows,
                                 num_shards=num_shards)
        progress.encoded(chunk, docs, encoded.tokens)
        self._tokens.inc(encoded.tokens)
        self._windows_made.inc(encoded.windows)
        return encoded.blocks


class EncodeChunks(beam.PTransform):
    """Chunks → (shard, block of packed documents), with tagged ``rejects`` and ``records``
    (one `transforms.chunks.Receipt` per chunk).

    Args:
        spec: how to read the inputs.
        windows: the window parameters (and the seed of the keys).
        tokenizer_path: a SentencePiece ``.model`` path, or None for the bytes tokenizer.
        num_shards: the shard count, a singleton PCollection (`pipeline.read.ChooseNumShards`).
        threads: SentencePiece threads per worker process. Each document is encoded alone,
            so the ids do not depend on it.
        batch_chars: documents are encoded in batches of about this many characters (the
            output does not depend on it either).
    """

    def __init__(self, *, spec: ReadSpec, windows: WindowSpec, tokenizer_path: str | None,
                 num_shards: beam.PCollection, threads: int = 1,
                 batch_chars: int = BATCH_CHARS) -> None:
        super().__init__()
        self._fn = _EncodeChunkFn(spec=spec, windows=windows, tokenizer_path=tokenizer_path,
                                  threads=threads, batch_chars=batch_chars)
        self._num_shards = num_shards

    def expand(self, chunks: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return chunks | "Encode" >> beam.ParDo(
            self._fn, num_shards=beam.pvalue.AsSingleton(self._num_shards)
        ).with_outputs(REJECTS, RECORDS, main="blocks")
