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
  ``layout.json``               written last: version, SHA-256, the shard's (size, mtime),
                                what the build checked against (``checked``: vocabulary,
                                window, BOS/EOS, fingerprint, position, the entry's counts),
                                the rows' totals (``content``) and, for every file above,
                                its size, SHA-256 and sampled-page digest
  ============================  =========================================================

* The SHA-256 that names a layout's directory is validated (64 lowercase hex digits) before
  any path is built from it, so no manifest can name a directory outside the cache.
* Building (`reader.data.layout_build`) reads the shard (downloaded first into the cache's
  ``tmp/`` when it is remote), checks its footer against the manifest, its page checksums,
  every row (token ids in the vocabulary, ``1 <= length <= window``,
  ``len(tokens) == length + 1``, ``0 <= loss_start < length``) and its BOS/EOS, refuses a
  shard whose SHA-256 is not the manifest's, and writes into ``tmp/<sha>.<pid>.<random>/``,
  renamed to its final name only when complete, under a per-shard ``flock`` so that two
  processes never build the same shard at once. A crash leaves at most a temporary
  directory, which the next build sweeps. A full disk is an ``OSError`` naming the cache and
  the knobs (``cache_dir=``, ``$TOKEN_WINDOWS_CACHE``, ``cache_limit=``).
* Reuse, on a layout's first map in a process: ``layout.json`` names this version, shard,
  file stamp and ``checked`` (a layout built for another manifest is rebuilt, which checks
  the shard against this one), and every file has its recorded size and sampled-page
  digest (16 pages of 4 KiB; the whole file when smaller), or, with ``verify``, its
  SHA-256. A layout whose files fail is never served: a ``RuntimeWarning`` names it, and it
  is rebuilt from the shard. The dataset index is checked the same way.
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
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow.fs as pafs

from reader.data import integrity
from reader.data.layout_build import (
    _FIX,
    FILES,
    RECORD,
    WINDOW_FIELDS,
    ShardSource,
    download,
    file_digest,
    files_problem,
    sha256_local,
    write_layout,
)
from reader.data.regular import NotRegularFileError, open_regular
from transforms.errors import DamagedDataset
from transforms.json_fields import JsonObject

__all__ = [
    "WINDOW_FIELDS",
    "LAYOUT_VERSION",
    "RECORD",
    "LayoutCache",
    "ShardLayout",
    "ShardSource",
    "default_cache_dir",
]

LAYOUT_VERSION = 3
_META = "layout.json"
_HEX = re.compile(r"^[0-9a-f]{64}$")
_TOKEN_DTYPES = ("uint16", "int32")
_FULL = ("ENOSPC", "EDQUOT")


def _hex(value: str, what: str) -> str:
    """``value`` if it is a SHA-256 in lowercase hex (it names a directory), else raise."""
    if not isinstance(value, str) or not _HEX.match(value):
        raise ValueError(f"{what} must be 64 lowercase hex digits, but got {value!r}")
    return value


def _full_disk(e: OSError, directory: str, what: str) -> OSError:
    """Disk full (or over quota) in the cache, as an error naming it and the knobs."""
    return OSError(e.errno, f"no space left in the layout cache {directory} while building "
                   f"{what} ({e.strerror}): free space there, point `cache_dir=` (or "
                   "$TOKEN_WINDOWS_CACHE, or --cache-dir) at a larger disk, or bound the cache "
                   "with `cache_limit=`")


def default_cache_dir() -> str:
    """``$TOKEN_WINDOWS_CACHE``, else ``$XDG_CACHE_HOME/token-windows``, else ``~/.cache/…``."""
    if os.environ.get("TOKEN_WINDOWS_CACHE"):
        return os.path.abspath(os.environ["TOKEN_WINDOWS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "token-windows")


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

    def __init__(self, directory: str, meta: JsonObject) -> None:
        self.directory = directory
        self.rows: int = meta["rows"]
        dtype = np.dtype(meta["token_dtype"])
        size = meta["files"]["tokens.bin"]["bytes"] // dtype.itemsize
        self.tokens: npt.NDArray[Any] = _map(os.path.join(directory, "tokens.bin"), dtype, size)
        self.records: npt.NDArray[Any] = _load(os.path.join(directory, "windows.npy"))
        self.doc_rows: npt.NDArray[np.int64] = _load(os.path.join(directory, "doc_rows.npy"))
        self._doc_id_offsets = _load(os.path.join(directory, "doc_id_offsets.npy"))
        with open_regular(os.path.join(directory, "doc_ids.bin"), fix=_FIX) as f:
            self._doc_ids = f.read()
        self.content = integrity.ContentStats(**meta["content"])
        if self.records.dtype != RECORD or len(self.records) != self.rows or (
                self.rows and int(self.records["lo"][-1]) + int(self.records["length"][-1]) + 1
                != size):
            raise DamagedDataset(f"layout {directory} is inconsistent: records do not match tokens")

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
        verify: check every cached file's SHA-256 when a layout is first opened in this
            process (default: sampled pages only, see `reader.data.layout_build.sample_digest`).

    Raises:
        ValueError: ``limit_bytes`` is not a positive integer or ``None``.
    """

    def __init__(self, directory: str | os.PathLike[str], *, limit_bytes: int | None = None,
                 verify: bool = False) -> None:
        if limit_bytes is not None and (
            isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < 1
        ):
            raise ValueError(f"`limit_bytes` must be a positive integer or None, but got "
                             f"{limit_bytes!r}")
        self.directory = os.path.abspath(os.fspath(directory))
        self.limit_bytes = limit_bytes
        self.verify = verify
        self._root = os.path.join(self.directory, f"layouts-v{LAYOUT_VERSION}")
        self._tmp = os.path.join(self._root, "tmp")
        self._locks = os.path.join(self._root, "locks")
        self.builds = 0  # layouts this object built (for tests and the benchmark)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "builds": 0}  # a count per process

    def path(self, sha256: str) -> str:
        """The directory of the layout of the shard with this SHA-256.

        Raises:
            ValueError: ``sha256`` is not 64 lowercase hex digits (it would name another
                directory).
        """
        return os.path.join(self._root, _hex(sha256, "a shard's SHA-256"))

    # -- reuse -------------------------------------------------------------------------------

    def content(self, source: ShardSource) -> integrity.ContentStats | None:
        """What the rows of the shard gave when its cached layout was built and checked
        against a manifest that says what this one says (None: no such layout)."""
        meta = self._valid_meta(source, warn=False, files=False)
        return None if meta is None else integrity.ContentStats(**meta["content"])

    def _valid_meta(self, source: ShardSource, *, warn: bool = True,
                    files: bool = True) -> JsonObject | None:
        """The layout's ``layout.json`` if its check passes, else ``None`` (and, when files
        were there but fail their digests, a warning: the layout is rebuilt)."""
        directory = self.path(source.sha256)
        try:
            with open_regular(os.path.join(directory, _META), fix=_FIX) as f:
                meta = json.loads(f.read())
        except NotRegularFileError:
            raise
        except (OSError, ValueError):
            return None
        expected = {"version": LAYOUT_VERSION, "sha256": source.sha256, "rows": source.rows,
                    "source": list(source.stamp), "checked": source.checked()}
        # Stale (another manifest, a rewritten shard) or another version: not used.
        if not isinstance(meta, dict):
            return None
        if any(meta.get(key) != value for key, value in expected.items()):
            return None
        if meta.get("token_dtype") not in _TOKEN_DTYPES:
            return None
        if not isinstance(meta.get("content"), dict):
            return None
        if sorted(meta.get("files") or ()) != sorted(FILES):
            return None
        if not files:
            return meta
        problem = files_problem(directory, meta["files"], verify=self.verify)
        if problem is not None:
            if warn:
                warnings.warn(f"the cached layout of {source.where} in {directory} is damaged "
                              f"({problem}): it is not used, and is rebuilt from the shard",
                              RuntimeWarning, stacklevel=4)
            return None
        return meta

    def _open(self, source: ShardSource, *, warn: bool = True) -> ShardLayout | None:
        meta = self._valid_meta(source, warn=warn)
        if meta is None:
            return None
        try:
            layout = ShardLayout(self.path(source.sha256), meta)
        except NotRegularFileError:
            raise
        except (OSError, ValueError, TypeError, KeyError):
            return None
        with contextlib.suppress(OSError):
            os.utime(os.path.join(layout.directory, _META))  # recently used, for eviction
        return layout

    def get(self, source: ShardSource) -> ShardLayout:
        """The shard's layout, built first if it is missing, stale, partial or damaged.

        Raises:
            ValueError: the shard's SHA-256 is not valid or its bytes do not hash to it, its
                footer disagrees with the manifest, or a row is invalid (the message names the
                shard, the row and the dataset index).
            OSError: the cache's disk is full (naming it and the knobs).
        """
        directory = self.path(source.sha256)  # validated before anything is opened
        layout = self._open(source)
        if layout is not None:
            return layout
        with self._lock(source.sha256):
            layout = self._open(source, warn=False)  # another process may have built it
            if layout is None:
                shutil.rmtree(directory, ignore_errors=True)  # stale, partial or damaged
                self._build(source)
                self.builds += 1
                layout = self._open(source, warn=False)
                if layout is None:
                    raise OSError(f"the layout of {source.where} in {self._root} could not be "
                                  "reopened after it was built")
        if self.limit_bytes is not None:
            self._evict(keep=source.sha256)
        return layout

    def _index_paths(self, fingerprint: str) -> tuple[str, str]:
        directory = os.path.join(self._root, "datasets", _hex(fingerprint, "a fingerprint"))
        return os.path.join(directory, "windows.npy"), os.path.join(directory, "index.json")

    def open_dataset_index(self, fingerprint: str, n: int, checked: Any = None, *,
                           warn: bool = True) -> npt.NDArray[Any] | None:
        """The dataset's index (every window's record, in dataset order) if it is built.

        Checked as a layout is: ``index.json`` names this version, fingerprint, n and what
        was checked at build (``checked``), and the file has the size and digest it records.
        The index holds no tokens: each shard's ``tokens.bin`` is still read from its layout.
        """
        array_path, meta_path = self._index_paths(fingerprint)
        try:
            with open_regular(meta_path, fix=_FIX) as f:
                meta = json.loads(f.read())
            if not isinstance(meta, dict) or (meta.get("version"), meta.get("fingerprint"),
                                              meta.get("n"), meta.get("checked")) != (
                    LAYOUT_VERSION, fingerprint, n, checked):
                return None
            problem = files_problem(os.path.dirname(array_path),
                                    {"windows.npy": meta.get("file")}, verify=self.verify)
            if problem is not None:
                if warn:
                    warnings.warn(f"the cached dataset index {array_path} is damaged ({problem}): "
                                  "it is not used, and is rebuilt", RuntimeWarning,
                                  stacklevel=3)
                return None
            index = _load(array_path)
        except NotRegularFileError:
            raise
        except (OSError, ValueError, KeyError, AttributeError):
            return None
        return index if index.dtype == RECORD and len(index) == n else None

    def build_dataset_index(self, fingerprint: str, layouts: list[ShardLayout],
                            checked: Any = None) -> npt.NDArray[Any]:
        """Concatenate the shards' records into the dataset's index (see
        :meth:`open_dataset_index`), written to a temporary name and renamed."""
        n = sum(layout.rows for layout in layouts)
        array_path, meta_path = self._index_paths(fingerprint)
        with self._lock(f"dataset-{fingerprint}"):
            if self.open_dataset_index(fingerprint, n, checked, warn=False) is None:
                try:
                    self._write_index(fingerprint, layouts, n, checked, array_path)
                except OSError as e:
                    if errno.errorcode.get(e.errno or 0) in _FULL:
                        raise _full_disk(e, self.directory, f"the index of {n} windows") from e
                    raise
        index = self.open_dataset_index(fingerprint, n, checked, warn=False)
        if index is None:
            raise OSError(f"the dataset index {array_path} could not be reopened after it "
                          "was built")
        return index

    def _write_index(self, fingerprint: str, layouts: list[ShardLayout], n: int,
                     checked: Any, array_path: str) -> None:
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
            with open(os.path.join(tmp, "index.json"), "w") as f:
                json.dump({"version": LAYOUT_VERSION, "fingerprint": fingerprint, "n": n,
                           "checked": checked,
                           "file": file_digest(os.path.join(tmp, "windows.npy"))}, f)
            shutil.rmtree(directory, ignore_errors=True)
            os.makedirs(os.path.dirname(directory), exist_ok=True)
            os.rename(tmp, directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def is_ready(self, source: ShardSource) -> bool:
        """Whether a valid layout of the shard is in the cache (its check passes)."""
        return self._valid_meta(source, warn=False) is not None

    @contextlib.contextmanager
    def _lock(self, name: str) -> Iterator[None]:
        os.makedirs(self._locks, exist_ok=True)
        with open(os.path.join(self._locks, f"{name}.lock"), "a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # -- building ----------------------------------------------------------------------------

    def _build(self, source: ShardSource) -> None:
        try:
            os.makedirs(self._tmp, exist_ok=True)
            self._sweep(source.sha256)
            tmp = os.path.join(self._tmp, f"{source.sha256}.{os.getpid()}."
                                          f"{secrets.token_hex(4)}")
            os.makedirs(tmp)
        except OSError as e:
            if errno.errorcode.get(e.errno or 0) in _FULL:
                raise _full_disk(e, self.directory, f"the layout of {source.where}") from e
            raise
        try:
            if isinstance(source.fs, pafs.LocalFileSystem):
                local, digest = source.path, sha256_local(source.path)
            else:  # download once, hashing on the way; read the local copy
                local = os.path.join(tmp, "shard.parquet")
                digest = download(source.fs, source.path, local)
            # Converting first verifies Parquet's page checksums, whose error names the row
            # group; the hash then covers every byte.
            built = write_layout(source, local, tmp)
            if digest != source.sha256:
                raise DamagedDataset(
                    f"shard {source.where} has SHA-256 {digest}, but the manifest says "
                    f"{source.sha256}; the file is damaged or was replaced"
                )
            if local != source.path:
                os.remove(local)
            meta = {"version": LAYOUT_VERSION, "sha256": source.sha256,
                    "source": list(source.stamp), "checked": source.checked(), **built}
            with open(os.path.join(tmp, _META), "w") as f:
                json.dump(meta, f, sort_keys=True)
            os.rename(tmp, self.path(source.sha256))
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if errno.errorcode.get(e.errno or 0) in _FULL:
                raise _full_disk(e, self.directory, f"the layout of {source.where}") from e
            raise
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
        out: list[tuple[str, int, float]] = []
        if not os.path.isdir(self._root):
            return out
        for name in os.listdir(self._root):
            if not _HEX.match(name):
                continue  # tmp/, locks/, datasets/: never a layout
            meta_path = os.path.join(self._root, name, _META)
            try:
                with open_regular(meta_path, fix=_FIX) as f:
                    meta = json.loads(f.read())
                size = sum(int(v["bytes"]) for v in meta["files"].values())
                out.append((name, size, os.stat(meta_path).st_mtime))
            except NotRegularFileError:
                raise
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
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
