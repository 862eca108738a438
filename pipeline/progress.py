"""Progress of a job on the local runner: a start line, a line every few seconds, then the end.

How the numbers travel (both ``in_memory`` and ``multi_processing``):

* The launcher (`start`) makes a private directory under the system's temp dir and names it
  in the environment variable `ENV` before the pipeline runs; ``multi_processing`` workers
  are child processes, so they inherit it. Nothing of it is in the output directory, the
  graph or any pickled DoFn: the shards and the manifest cannot depend on it.
* Each worker process's `EncodeChunks` calls `encoded` once per encoded batch,
  `chunk_done` once per chunk and `bundle_done` once per bundle, on its bundle thread.
  Without `ENV` (Dataflow, Flink, tests that build pipelines themselves) they return at
  once. With it, the process keeps running totals and, at most every `WRITE_EVERY` seconds
  and at each bundle's end, replaces its own small JSON file in that directory (written aside
  and renamed, so a reader never sees half a file). Not at each chunk's end: a job of 20,000
  small files would write 20,000 files.
* The launcher's `Progress` thread sums those files every `INTERVAL` seconds and prints a
  line on stderr: bytes read of the total, documents, tokens/s and an ETA. On a terminal it
  redraws one line instead. `Progress.stop` prints the last state, restores the environment
  and removes the directory.

Bytes read: a finished chunk counts its exact share of its file; a chunk being read counts
the UTF-8 bytes of the texts it has produced (capped at its share), an estimate that is
close for uncompressed text and JSONL.

Other runners report what the runner gives (the Dataflow UI, Flink's web UI) and the
launcher prints the summary when the job ends.
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
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["ENV", "INTERVAL", "Progress", "bundle_done", "chunk_done", "encoded", "split_summary",
           "start"]

ENV = "TOKEN_WINDOWS_PROGRESS_DIR"
# Seconds between progress lines on a pipe or file (a terminal redraws every second).
INTERVAL = 10.0
TTY_INTERVAL = 1.0
# A worker process rewrites its file at most this often.
WRITE_EVERY = 0.5


# ------------------------------------------------------------------ worker side


class _Tally:
    """One worker process's running totals, written to ``<dir>/<pid>.json``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.file = os.path.join(directory, f"{os.getpid()}.json")
        self.lock = threading.Lock()
        self.documents = 0
        self.tokens = 0
        self.done_bytes = 0
        self.open_bytes: dict[tuple[str, int], int] = {}  # estimate per chunk being read
        self.written = 0.0

    def write(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.written < WRITE_EVERY:
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


_tallies: dict[str, _Tally] = {}
_tallies_lock = threading.Lock()


def _tally() -> _Tally | None:
    directory = os.environ.get(ENV)
    if not directory:
        return None
    with _tallies_lock:
        if directory not in _tallies:
            _tallies[directory] = _Tally(directory)
        return _tallies[directory]


def _share(chunk: Any) -> int:
    """The bytes of its file a chunk covers (row groups count their share of the file)."""
    if not chunk.extent:
        return chunk.size
    return chunk.size * (chunk.end - chunk.start) // chunk.extent


def encoded(chunk: Any, documents: Sequence[Any], tokens: int) -> None:
    """A batch of ``documents`` of ``chunk`` was encoded into ``tokens`` ids (Σ M)."""
    tally = _tally()
    if tally is None:
        return
    text_bytes = sum(len(d.text.encode("utf-8", "surrogatepass")) for d in documents)
    key = (chunk.path, chunk.start)
    with tally.lock:
        tally.documents += len(documents)
        tally.tokens += tokens
        tally.open_bytes[key] = min(_share(chunk), tally.open_bytes.get(key, 0) + text_bytes)
        tally.write()


def chunk_done(chunk: Any) -> None:
    """Every record of ``chunk`` was read: count its exact bytes."""
    tally = _tally()
    if tally is None:
        return
    with tally.lock:
        tally.open_bytes.pop((chunk.path, chunk.start), None)
        tally.done_bytes += _share(chunk)
        tally.write()


def bundle_done() -> None:
    """Every chunk of a bundle was read: write the totals now."""
    tally = _tally()
    if tally is None:
        return
    with tally.lock:
        tally.write(force=True)


# ------------------------------------------------------------------ launcher side


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def _rate(n: float) -> str:
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n / 1e3:.1f} k" if n >= 1e3 else f"{n:.0f} "


class Progress:
    """The launcher's progress thread (see the module's docstring).

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
        self._previous = os.environ.get(ENV)
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._encoded_at: float | None = None
        self._last = ""
        self.lines = 0

    def __enter__(self) -> Progress:
        os.environ[ENV] = self.directory
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def totals(self) -> dict[str, int]:
        """The sum of every worker process's file."""
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
        """Print the last state, stop the thread, restore the environment, clean up."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        last = self.line()
        if self.tty or (self.lines and last.split(";")[0] != self._last.split(";")[0]):
            self._emit(last, final=True)
        if self._previous is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = self._previous
        shutil.rmtree(self.directory, ignore_errors=True)


def start(*, files: dict[str, int], shards: int, tokenizer: str, runner: str,
          stream: TextIO | None = None) -> Progress:
    """Print the start line and return the (started) `Progress` of a local job."""
    stream = stream or sys.stderr
    total = sum(files.values())
    stream.write(f"token-windows: {len(files):,} file{'s' * (len(files) != 1)}, {_mb(total)} "
                 f"matched; {shards} shard{'s' * (shards != 1)} planned; tokenizer {tokenizer}; "
                 f"{runner}\n")
    stream.flush()
    return Progress(total_bytes=total, stream=stream).__enter__()


def split_summary(record: dict[str, Any], output: str, seconds: float,
                  stream: TextIO | None = None) -> None:
    """The last lines of a split job (any runner): one per split, then the whole job's."""
    stream = stream or sys.stdout
    c = record["counts"]
    for s in record["splits"]:
        n = s["num_shards"]
        stream.write(f"wrote {output.rstrip('/')}/{s['dir']}: split {s['name']} "
                     f"({100 * s['fraction']:g} %), {s['documents']:,} documents, "
                     f"{s['windows']:,} windows, {s['tokens']:,} tokens, "
                     f"{s['scored_targets']:,} scored targets; {n} shard{'s' * (n != 1)}\n")
    skipped = sum(c["skipped"].values())
    reasons = ", ".join(f"{k} {v:,}" for k, v in c["skipped"].items())
    sample = record.get("sample")
    left = (f", {c['sampled_out']:,} left out by --sample {sample['fraction']}" if sample
            else "")
    rejects = f"rejects in {output.rstrip('/')}/_rejects/ ({reasons})" if skipped else "no rejects"
    stream.write(f"wrote {output}: {c['records']:,} records -> {c['documents']:,} documents in "
                 f"{len(record['splits'])} splits ({skipped:,} skipped{left}) in {seconds:.1f} s;"
                 f" {rejects}\n")
    stream.flush()
