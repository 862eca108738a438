"""Progress of a job on the local runner: a start line, a line every few seconds, then the end.

How the numbers travel (both ``in_memory`` and ``multi_processing``):

* The launcher makes a private directory under the system's temp dir (`Progress`) before it
  builds the graph, and names it in the job's context (`pipeline.launch.context.JobContext`,
  ``progress_dir``), which every EncodeChunks DoFn carries to its worker process, child
  process or not. Nothing of it reaches the output directory: the shards and the manifest
  cannot depend on it. Jobs on other runners, and graphs built without the launcher, carry
  None, and their workers report nothing.
* Each EncodeChunks DoFn makes a `Reporter` in its ``setup`` and calls `Reporter.encoded`
  once per encoded batch, `Reporter.chunk_done` once per chunk and `Reporter.bundle_done`
  once per bundle, on its bundle thread. It keeps running totals and, at most every
  ``progress_write_every`` seconds (`pipeline.launch.context.Tuning`) and at each bundle's end,
  replaces its own small JSON file in that directory (written aside and renamed, so a reader
  never sees half a file). Not at each chunk's end: a job of 20,000 small files would write
  20,000 files.
* The launcher's `Progress` thread sums those files every ``progress_interval`` seconds and
  prints a line on stderr: bytes read of the total, documents, tokens/s and an ETA. On a
  terminal it redraws one line instead. `Progress.stop` prints the last state and removes
  the directory.

Bytes read: a finished chunk counts its exact share of its file; a chunk being read counts
the UTF-8 bytes of the texts it has produced (capped at its share; in a large batch, its
characters times the bytes per character of a sample of its texts), an estimate that is
close for uncompressed text and JSONL.

Other runners report what the runner gives (the Dataflow UI, Flink's web UI) and the
launcher prints the summary when the job ends (`pipeline.launch.summary`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["INTERVAL", "TTY_INTERVAL", "Progress", "Reporter"]

# Seconds between progress lines on a pipe or file, and on a terminal (one redrawn line),
# when the job's `pipeline.launch.context.Tuning` does not say.
INTERVAL = 10.0
TTY_INTERVAL = 1.0
# A batch of more documents than this counts the UTF-8 bytes of a sample of its texts.
_SAMPLE = 64


# ------------------------------------------------------------------ worker side


def _share(chunk: Any) -> int:
    """The bytes of its file a chunk covers (row groups count their share of the file)."""
    if not chunk.extent:
        return chunk.size
    return chunk.size * (chunk.end - chunk.start) // chunk.extent


def _utf8_bytes(documents: Sequence[Any]) -> int:
    """The UTF-8 bytes of the documents' texts: exact for up to `_SAMPLE` documents, else
    their characters times the bytes per character of every k-th text (an estimate that
    costs the bundle thread no pass over every text)."""
    step = max(1, len(documents) // _SAMPLE)
    if step == 1:
        return sum(len(d.text.encode("utf-8", "surrogatepass")) for d in documents)
    sample = [d.text for d in documents[::step]]
    chars = sum(map(len, sample))
    if not chars:
        return 0
    sampled = sum(len(t.encode("utf-8", "surrogatepass")) for t in sample)
    return sum(len(d.text) for d in documents) * sampled // chars


class Reporter:
    """One DoFn's running totals, written to a file of its own in the launcher's directory.

    Args:
        directory: the launcher's progress directory (`pipeline.launch.context.JobContext`); None:
            report nothing (every call returns at once, and no file is written).
        write_every: rewrite the file at most this often (seconds), and at each chunk's end.
    """

    def __init__(self, directory: str | None, *, write_every: float) -> None:
        self.directory = directory
        # A name of its own: several DoFns (and processes) report into one directory.
        self.file = (None if directory is None
                     else os.path.join(directory, f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json"))
        self.write_every = write_every
        self.lock = threading.Lock()
        self.documents = 0
        self.tokens = 0
        self.done_bytes = 0
        self.open_bytes: dict[tuple[str, int], int] = {}  # estimate per chunk being read
        self.written = 0.0

    def _write(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.written < self.write_every:
            return
        self.written = now
        state = {"documents": self.documents, "tokens": self.tokens,
                 "bytes": self.done_bytes + sum(self.open_bytes.values())}
        tmp = f"{self.file}.{threading.get_ident()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(state, f)
            os.replace(tmp, self.file)
        except OSError:  # the launcher removed the directory: the job is ending
            pass

    def encoded(self, chunk: Any, documents: Sequence[Any], tokens: int) -> None:
        """A batch of ``documents`` of ``chunk`` was encoded into ``tokens`` ids (Σ M)."""
        if self.file is None:
            return
        text_bytes = _utf8_bytes(documents)
        key = (chunk.path, chunk.start)
        with self.lock:
            self.documents += len(documents)
            self.tokens += tokens
            self.open_bytes[key] = min(_share(chunk), self.open_bytes.get(key, 0) + text_bytes)
            self._write()

    def chunk_done(self, chunk: Any) -> None:
        """Every record of ``chunk`` was read: count its exact bytes."""
        if self.file is None:
            return
        with self.lock:
            self.open_bytes.pop((chunk.path, chunk.start), None)
            self.done_bytes += _share(chunk)
            self._write()

    def bundle_done(self) -> None:
        """Every chunk of a bundle was read: write the totals now."""
        if self.file is None:
            return
        with self.lock:
            self._write(force=True)


# ------------------------------------------------------------------ launcher side


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def _rate(n: float) -> str:
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n / 1e3:.1f} k" if n >= 1e3 else f"{n:.0f} "


class Progress:
    """The launcher's progress thread (see the module's docstring). Made before the graph is
    built (its `directory` goes into the job's context), started by `start` or as a context
    manager, ended by `stop`.

    Args:
        total_bytes: the bytes of every input file matched at launch.
        stream: where lines go (stderr).
        interval: seconds between lines; None picks `INTERVAL`, or `TTY_INTERVAL` (one
            redrawn line) when ``stream`` is a terminal.
    """

    def __init__(self, *, total_bytes: int, stream: TextIO | None = None,
                 interval: float | None = None) -> None:
        self.total_bytes = total_bytes
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = interval if interval is not None else (
            TTY_INTERVAL if self.tty else INTERVAL)
        self.directory = tempfile.mkdtemp(prefix="token-windows-progress-")
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._encoded_at: float | None = None
        self._last = ""
        self.lines = 0
        self._running = False

    def __enter__(self) -> Progress:
        self._started = time.monotonic()
        self._running = True
        self._thread.start()
        return self

    def start(self, *, files: int, shards: int, tokenizer: str, runner: str) -> Progress:
        """Print the start line and start the thread; returns self."""
        s = "s" if files != 1 else ""
        self.stream.write(f"token-windows: {files:,} file{s}, {_mb(self.total_bytes)} matched; "
                          f"{shards} shard{'s' * (shards != 1)} planned; tokenizer {tokenizer}; "
                          f"{runner}\n")
        self.stream.flush()
        return self.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def totals(self) -> dict[str, int]:
        """The sum of every reporter's file."""
        out = {"documents": 0, "tokens": 0, "bytes": 0}
        try:
            names = os.listdir(self.directory)
        except OSError:
            return out
        for name in names:
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(self.directory, name)) as f:
                    state = json.load(f)
            except (OSError, ValueError):
                continue  # replaced while we read it: the next look gets it
            for key in out:
                out[key] += int(state.get(key, 0))
        return out

    def line(self) -> str:
        t = self.totals()
        now = time.monotonic()
        done, total = min(t["bytes"], self.total_bytes), self.total_bytes
        if done < total or self._encoded_at is None:
            self._encoded_at = now if done >= total else None
        # Tokens/s over the encoding; once every byte is read the rate stops moving.
        elapsed = max((self._encoded_at or now) - self._started, 1e-9)
        rate = f"{_rate(t['tokens'] / elapsed)}tokens/s"
        if done >= total:
            return (f"progress: read all {_mb(total)}: {t['documents']:,} documents, "
                    f"{t['tokens']:,} tokens in {elapsed:.0f} s ({rate}); shuffling and "
                    f"writing shards ({now - self._started:.0f} s)")
        eta = f"ETA {math.ceil(elapsed * (total - done) / done)} s" if done else "ETA unknown"
        return (f"progress: read {_mb(done)} of {_mb(total)} ({done / total:.0%}), "
                f"{t['documents']:,} documents, {rate}, {elapsed:.0f} s, {eta}")

    def _emit(self, text: str, *, final: bool = False) -> None:
        if text == self._last and not final:
            return
        self._last = text
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K" + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.lines += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._emit(self.line())

    def stop(self) -> None:
        """Print the last state (once started), stop the thread, remove the directory."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._running:
            self._thread.join()
            last = self.line()
            if self.tty or (self.lines and last.split(";")[0] != self._last.split(";")[0]):
                self._emit(last, final=True)
        shutil.rmtree(self.directory, ignore_errors=True)
