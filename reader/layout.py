"""The local random-access layout: each verified shard as flat arrays that memory-map.

Contract:

* Parquet stays the published format; the reader turns each shard, once, into a *layout* in
  a cache directory (never inside the dataset directory): Megatron's .bin/.idx idea, one
  directory per shard named by the shard's SHA-256 (from the manifest), so the cache is
  keyed by the dataset's fingerprint shard by shard, a dataset whose shards change gets new
  entries, and two datasets sharing a shard share its entry. A layout holds

  ============================  =========================================================
  ``tokens.bin``                every window's ``tokens`` back to back (``uint16`` when the
                                vocabulary fits, else ``int32``), memory-mapped
  ``windows.npy``               one record per window (:data:`RECORD`): ``lo`` (window j is
                                ``tokens[lo : lo + length + 1]``), ``start``, ``length``,
                                ``loss_start``, ``doc_tokens``, ``doc_key``, ``window_index``
  ``doc_rows.npy``              int64, documents + 1: the first row of each document
  ``doc_ids.bin``, ``doc_id_offsets.npy``  the documents' ids, UTF-8, back to back
  ``layout.json``               written last: version, SHA-256, rows, vocabulary, window, the
                                size of every file above
  ============================  =========================================================

* Building reads the shard (downloaded first into the cache's ``tmp/`` when it is remote),
  hashes its bytes and refuses a shard whose SHA-256 is not the manifest's, checks every row
  (token ids in the vocabulary, ``1 <= length <= window``, ``len(tokens) == length + 1``,
  ``0 <= loss_start < length``) and writes into ``tmp/<sha>.<pid>.<random>/``, renamed to
  its final name only when complete, under a per-shard ``flock`` so that two processes
  never build the same shard at once. A crash leaves at most a temporary directory, which
  the next build sweeps.
* Reuse is checked cheaply (no hashing): ``layout.json`` parses and names this version,
  shard, row count, vocabulary and window, and every file has the size it records. A
  layout that fails the check is stale or partial: it is removed and rebuilt.
* ``limit_bytes`` bounds the cache: after a build, the least recently used layouts are
  removed until the total fits (the one just built always stays; a process that has a
  layout mapped keeps reading it: POSIX unlinks only the name).

Example::

    cache = LayoutCache(default_cache_dir())
    layout = cache.get(source)         # opens the shard's layout, building it first if needed
    layout.tokens[layout.offsets[0] : layout.offsets[1]]   # window 0's tokens
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reader import integrity

__all__ = [
    "COLUMNS",
    "LAYOUT_VERSION",
    "RECORD",
    "LayoutCache",
    "ShardLayout",
    "ShardSource",
    "default_cache_dir",
]

LAYOUT_VERSION = 2
_META = "layout.json"
# One record per window. ``shard`` is 0 in a shard's layout; the dataset index
# (:meth:`LayoutCache.dataset_index`) concatenates the shards' records and sets it.
RECORD = np.dtype([("lo", "<i8"), ("start", "<i8"), ("doc_tokens", "<i8"), ("doc_key", "<u8"),
                   ("length", "<i4"), ("loss_start", "<i4"), ("window_index", "<i4"),
                   ("shard", "<u4")])
COLUMNS = ("start", "length", "loss_start", "doc_tokens", "doc_key", "window_index")
_DTYPES = {name: RECORD.fields[name][0] for name in RECORD.names}
_ARRAYS = ("windows", "doc_rows", "doc_id_offsets")
_COPY_CHUNK = 8 * 2**20


def default_cache_dir() -> str:
    """``$TOKEN_WINDOWS_CACHE``, else ``$XDG_CACHE_HOME/token-windows``, else ``~/.cache/…``."""
    if os.environ.get("TOKEN_WINDOWS_CACHE"):
        return os.path.abspath(os.environ["TOKEN_WINDOWS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "token-windows")


@dataclass(frozen=True, kw_only=True)
class ShardSource:
    """Where a shard is and what the manifest says of it (what a build checks against).

    Args:
        fs: the shard's filesystem.
        path: its path in ``fs``.
        where: its name in messages (the dataset's path or URI and the file).
        sha256: the manifest's SHA-256 of the file.
        stamp: the file's (size, mtime in ns) now: a layout built from a file with another
            stamp (the file was rewritten, or this is a copy) is rebuilt, which re-reads and
            re-verifies the file.
        rows: the manifest's row count.
        first_index: the dataset index of its first row (for messages).
        vocab_size: ids must be in ``[0, vocab_size)``.
        window: lengths must be in ``[1, window]``.
    """

    fs: pafs.FileSystem
    path: str
    where: str
    sha256: str
    stamp: tuple[int, int]
    rows: int
    first_index: int
    vocab_size: int
    window: int


def _map(path: str, dtype: np.dtype, count: int) -> npt.NDArray[Any]:
    """A read-only ndarray over the file (a plain ndarray: ``np.memmap``'s subclass hooks cost
    more than the copy for a window)."""
    if count == 0:
        return np.empty(0, dtype)
    return np.asarray(np.memmap(path, dtype=dtype, mode="r", shape=(count,))).view(np.ndarray)


def _load(path: str) -> npt.NDArray[Any]:
    return np.load(path, mmap_mode="r").view(np.ndarray)


class ShardLayout:
    """One shard's layout, memory-mapped read-only (see the module docstring)."""

    def __init__(self, directory: str, meta: dict[str, Any]) -> None:
        self.directory = directory
        self.rows: int = meta["rows"]
        dtype = np.dtype(meta["token_dtype"])
        size = meta["files"]["tokens.bin"] // dtype.itemsize
        self.tokens: npt.NDArray[Any] = _map(os.path.join(directory, "tokens.bin"), dtype, size)
        self.records: npt.NDArray[Any] = _load(os.path.join(directory, "windows.npy"))
        self.doc_rows: npt.NDArray[np.int64] = _load(os.path.join(directory, "doc_rows.npy"))
        self._doc_id_offsets = _load(os.path.join(directory, "doc_id_offsets.npy"))
        with open(os.path.join(directory, "doc_ids.bin"), "rb") as f:
            self._doc_ids = f.read()
        if self.records.dtype != RECORD or len(self.records) != self.rows or (
                self.rows and int(self.records["lo"][-1]) + int(self.records["length"][-1]) + 1
                != size):
            raise ValueError(f"layout {directory} is inconsistent: records do not match tokens")

    def doc_id(self, row: int) -> str:
        """The ``doc_id`` of window ``row`` of the shard."""
        d = int(np.searchsorted(self.doc_rows, row, side="right")) - 1
        lo, hi = int(self._doc_id_offsets[d]), int(self._doc_id_offsets[d + 1])
        return self._doc_ids[lo:hi].decode()


class LayoutCache:
    """A directory of shard layouts, built on demand and bounded in size.

    Args:
        directory: the cache directory (created if missing).
        limit_bytes: at most this many bytes of layouts are kept (``None``: no bound).

    Raises:
        ValueError: ``limit_bytes`` is not a positive integer or ``None``.
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, limit_bytes: int | None = None
    ) -> None:
        if limit_bytes is not None and (
            isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < 1
        ):
            raise ValueError(f"`limit_bytes` must be a positive integer or None, but got "
                             f"{limit_bytes!r}")
        self.directory = os.path.abspath(os.fspath(directory))
        self.limit_bytes = limit_bytes
        self._root = os.path.join(self.directory, f"layouts-v{LAYOUT_VERSION}")
        self._tmp = os.path.join(self._root, "tmp")
        self._locks = os.path.join(self._root, "locks")
        self.builds = 0  # layouts this object built (for tests and the benchmark)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "builds": 0}  # a count per process

    def path(self, sha256: str) -> str:
        """The directory of the layout of the shard with this SHA-256."""
        return os.path.join(self._root, sha256)

    # -- reuse -------------------------------------------------------------------------------

    def _valid_meta(self, source: ShardSource) -> dict[str, Any] | None:
        """The layout's ``layout.json`` if the cheap check passes, else ``None``."""
        directory = self.path(source.sha256)
        try:
            with open(os.path.join(directory, _META), "rb") as f:
                meta = json.loads(f.read())
        except (OSError, ValueError):
            return None
        expected = {"version": LAYOUT_VERSION, "sha256": source.sha256, "rows": source.rows,
                    "vocab_size": source.vocab_size, "window": source.window,
                    "source": list(source.stamp)}
        if not isinstance(meta, dict) or any(meta.get(k) != v for k, v in expected.items()):
            return None
        files = meta.get("files")
        if not isinstance(files, dict):
            return None
        for name, size in files.items():
            try:
                if os.stat(os.path.join(directory, name)).st_size != size:
                    return None
            except OSError:
                return None
        return meta

    def _open(self, source: ShardSource) -> ShardLayout | None:
        meta = self._valid_meta(source)
        if meta is None:
            return None
        try:
            layout = ShardLayout(self.path(source.sha256), meta)
        except (OSError, ValueError):
            return None
        with contextlib.suppress(OSError):
            os.utime(os.path.join(layout.directory, _META))  # recently used, for eviction
        return layout

    def get(self, source: ShardSource) -> ShardLayout:
        """The shard's layout, built first if it is missing, stale or partial.

        Raises:
            ValueError: the shard's bytes do not hash to the manifest's SHA-256, or a row is
                invalid (the message names the shard, the row and the dataset index).
        """
        layout = self._open(source)
        if layout is not None:
            return layout
        with self._lock(source.sha256):
            layout = self._open(source)  # another process may have built it meanwhile
            if layout is None:
                shutil.rmtree(self.path(source.sha256), ignore_errors=True)  # stale or partial
                self._build(source)
                self.builds += 1
                layout = self._open(source)
                if layout is None:
                    raise OSError(f"the layout of {source.where} in {self._root} could not be "
                                  "reopened after it was built")
        if self.limit_bytes is not None:
            self._evict(keep=source.sha256)
        return layout

    def _index_paths(self, fingerprint: str) -> tuple[str, str]:
        directory = os.path.join(self._root, "datasets", fingerprint)
        return os.path.join(directory, "windows.npy"), os.path.join(directory, "index.json")

    def open_dataset_index(self, fingerprint: str, n: int) -> npt.NDArray[Any] | None:
        """The dataset's index (every window's record, in dataset order) if it is built.

        Checked cheaply: ``index.json`` names this version, fingerprint and n, and the file
        has the size it records. The index holds no tokens: each shard's ``tokens.bin`` is
        still read from its layout.
        """
        array_path, meta_path = self._index_paths(fingerprint)
        try:
            with open(meta_path, "rb") as f:
                meta = json.loads(f.read())
            if (meta.get("version"), meta.get("fingerprint"), meta.get("n")) != (
                    LAYOUT_VERSION, fingerprint, n) or os.stat(array_path).st_size != meta["bytes"]:
                return None
            index = _load(array_path)
        except (OSError, ValueError, KeyError, AttributeError):
            return None
        return index if index.dtype == RECORD and len(index) == n else None

    def build_dataset_index(self, fingerprint: str,
                            layouts: list[ShardLayout]) -> npt.NDArray[Any]:
        """Concatenate the shards' records into the dataset's index (see
        :meth:`open_dataset_index`), written to a temporary name and renamed."""
        n = sum(layout.rows for layout in layouts)
        array_path, meta_path = self._index_paths(fingerprint)
        with self._lock(f"dataset-{fingerprint}"):
            index = self.open_dataset_index(fingerprint, n)
            if index is not None:
                return index
            directory = os.path.dirname(array_path)
            os.makedirs(self._tmp, exist_ok=True)
            tmp = os.path.join(self._tmp, f"dataset-{fingerprint}.{os.getpid()}."
                                          f"{secrets.token_hex(4)}")
            os.makedirs(tmp)
            try:
                parts = []
                for s, layout in enumerate(layouts):
                    rec = np.array(layout.records)
                    rec["shard"] = s
                    parts.append(rec)
                np.save(os.path.join(tmp, "windows.npy"),
                        np.concatenate(parts) if parts else np.zeros(0, RECORD))
                size = os.stat(os.path.join(tmp, "windows.npy")).st_size
                with open(os.path.join(tmp, "index.json"), "w") as f:
                    json.dump({"version": LAYOUT_VERSION, "fingerprint": fingerprint, "n": n,
                               "bytes": size}, f)
                shutil.rmtree(directory, ignore_errors=True)
                os.makedirs(os.path.dirname(directory), exist_ok=True)
                os.rename(tmp, directory)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        index = self.open_dataset_index(fingerprint, n)
        if index is None:
            raise OSError(f"the dataset index {array_path} could not be reopened after it "
                          "was built")
        return index

    def is_ready(self, source: ShardSource) -> bool:
        """Whether a valid layout of the shard is in the cache (the cheap check)."""
        return self._valid_meta(source) is not None

    @contextlib.contextmanager
    def _lock(self, sha256: str) -> Iterator[None]:
        os.makedirs(self._locks, exist_ok=True)
        with open(os.path.join(self._locks, f"{sha256}.lock"), "a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # -- building ----------------------------------------------------------------------------

    def _build(self, source: ShardSource) -> None:
        os.makedirs(self._tmp, exist_ok=True)
        self._sweep(source.sha256)
        tmp = os.path.join(self._tmp, f"{source.sha256}.{os.getpid()}.{secrets.token_hex(4)}")
        os.makedirs(tmp)
        try:
            if isinstance(source.fs, pafs.LocalFileSystem):
                local, digest = source.path, _sha256_local(source.path)
            else:  # download once, hashing on the way; read the local copy
                local = os.path.join(tmp, "shard.parquet")
                digest = _download(source.fs, source.path, local)
            # Converting first verifies Parquet's page checksums, whose error names the row
            # group; the hash then covers every byte.
            _write_layout(source, local, tmp)
            if digest != source.sha256:
                raise ValueError(
                    f"shard {source.where} has SHA-256 {digest}, but the manifest says "
                    f"{source.sha256}; the file is damaged or was replaced"
                )
            if local != source.path:
                os.remove(local)
            os.rename(tmp, self.path(source.sha256))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _sweep(self, sha256: str) -> None:
        """Remove temporary directories of this shard that crashed builds left behind."""
        for name in os.listdir(self._tmp):
            if name.startswith(sha256 + "."):
                shutil.rmtree(os.path.join(self._tmp, name), ignore_errors=True)

    def entries(self) -> list[tuple[str, int, float]]:
        """(SHA-256, bytes, last use) of every complete layout in the cache."""
        out = []
        if not os.path.isdir(self._root):
            return out
        for name in os.listdir(self._root):
            meta_path = os.path.join(self._root, name, _META)
            try:
                with open(meta_path, "rb") as f:
                    meta = json.loads(f.read())
                out.append((name, int(sum(meta["files"].values())), os.stat(meta_path).st_mtime))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out

    def _evict(self, keep: str) -> None:
        entries = sorted(self.entries(), key=lambda e: e[2])
        total = sum(size for _, size, _ in entries)
        for sha, size, _ in entries:
            if total <= (self.limit_bytes or 0):
                break
            if sha == keep:
                continue
            with self._lock(sha):
                shutil.rmtree(self.path(sha), ignore_errors=True)
            total -= size


def _sha256_local(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_COPY_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _download(fs: pafs.FileSystem, path: str, local: str) -> str:
    h = hashlib.sha256()
    with fs.open_input_stream(path) as src, open(local, "wb") as dst:
        while chunk := src.read(_COPY_CHUNK):
            h.update(chunk)
            dst.write(chunk)
    return h.hexdigest()


def _check_rows(source: ShardSource, first_row: int, values: npt.NDArray[np.int64],
                offsets: npt.NDArray[np.int64], cols: dict[str, npt.NDArray[Any]]) -> None:
    """Check one row group, vectorised; name the first bad row."""

    def fail(local: int, why: str) -> None:
        row = first_row + int(local)
        raise ValueError(f"shard {source.where} row {row} (dataset index "
                         f"{source.first_index + row}): {why}")

    bad = (values < 0) | (values >= source.vocab_size)
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        local = int(np.searchsorted(offsets, at, side="right")) - 1
        fail(local, f"token id {int(values[at])} is outside the vocabulary "
                    f"[0, {source.vocab_size}) of the manifest")
    length = cols["length"].astype(np.int64)
    loss_start = cols["loss_start"].astype(np.int64)
    sizes = np.diff(offsets)
    checks: tuple[tuple[npt.NDArray[np.bool_], Callable[[int], str]], ...] = (
        ((length < 1) | (length > source.window),
         lambda j: f"length {length[j]} is outside [1, {source.window}] (the window)"),
        (sizes != length + 1,
         lambda j: f"tokens has {sizes[j]} ids, but length {length[j]} needs {length[j] + 1}"),
        ((loss_start < 0) | (loss_start >= length),
         lambda j: f"loss_start {loss_start[j]} is outside [0, {length[j]})"),
    )
    for mask, why in checks:
        if mask.any():
            j = int(np.flatnonzero(mask)[0])
            fail(j, why(j))


def _write_layout(source: ShardSource, local: str, out: str) -> None:
    """Convert the (verified) Parquet file ``local`` into a layout in the directory ``out``."""
    dtype = np.dtype(np.uint16 if source.vocab_size <= 2**16 else np.int32)
    records: list[npt.NDArray[Any]] = []
    doc_rows: list[int] = []
    doc_ids: list[bytes] = []
    last_id: str | None = None
    total = rows = 0
    try:
        pf = pq.ParquetFile(local, **integrity.READ_OPTIONS)
    except (OSError, ValueError) as e:
        raise integrity.footer_error(e, where=source.where) from e
    with open(os.path.join(out, "tokens.bin"), "wb") as tokens_file:
        for g in range(pf.metadata.num_row_groups):
            try:  # page checksums are verified on the way (pyarrow's errors name no file)
                table = pf.read_row_group(g, columns=["doc_id", "tokens", *COLUMNS])
            except (OSError, ValueError) as e:
                raise integrity.read_error(e, where=source.where, row_group=g) from e
            tokens = table.column("tokens").combine_chunks()
            if tokens.null_count:
                raise ValueError(f"shard {source.where}: null tokens in row group {g}")
            off = np.asarray(tokens.offsets, dtype=np.int64)
            values = np.asarray(tokens.values)[off[0] : off[-1]]
            off = off - off[0]
            group = {name: table.column(name).to_numpy().astype(_DTYPES[name], copy=False)
                     for name in COLUMNS}
            _check_rows(source, rows, values, off, group)
            tokens_file.write(values.astype(dtype).tobytes())
            rec = np.zeros(table.num_rows, RECORD)
            rec["lo"] = off[:-1] + total
            for name in COLUMNS:
                rec[name] = group[name]
            records.append(rec)
            for j, doc_id in enumerate(table.column("doc_id").to_pylist()):
                if doc_id != last_id:
                    doc_rows.append(rows + j)
                    doc_ids.append(doc_id.encode())
                    last_id = doc_id
            total += int(off[-1])
            rows += table.num_rows
    if rows != source.rows:
        raise ValueError(f"shard {source.where} holds {rows} rows, but the manifest says "
                         f"{source.rows}")
    arrays: dict[str, npt.NDArray[Any]] = {
        "windows": np.concatenate(records) if records else np.zeros(0, RECORD),
        "doc_rows": np.array([*doc_rows, rows], np.int64),
        "doc_id_offsets": np.concatenate([[0], np.cumsum([len(d) for d in doc_ids],
                                                         dtype=np.int64)]).astype(np.int64),
    }
    for name, array in arrays.items():
        np.save(os.path.join(out, f"{name}.npy"), array)
    with open(os.path.join(out, "doc_ids.bin"), "wb") as f:
        f.write(b"".join(doc_ids))
    files = {name: os.stat(os.path.join(out, name)).st_size for name in sorted(os.listdir(out))
             if name != "shard.parquet"}
    meta = {"version": LAYOUT_VERSION, "sha256": source.sha256, "rows": rows,
            "vocab_size": source.vocab_size, "window": source.window,
            "source": list(source.stamp),
            "token_dtype": dtype.name, "files": files, "built": time.time()}
    with open(os.path.join(out, _META), "w") as f:
        json.dump(meta, f, sort_keys=True)
