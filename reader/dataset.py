"""Random access to the windows of a finished output (docs/format.md#reader-semantics).

Contract:

* ``WindowDataset(path)`` opens a directory written by the pipeline, on the local disk or
  anywhere ``pyarrow.fs`` reaches (``gs://``, ``s3://``, ``hdfs://``, ``file://``). It reads
  ``_manifest.json`` first (no manifest, no dataset), checks its format and version, and
  checks every shard the manifest lists: it exists, its Parquet footer holds the manifest's
  row count and the columns of :data:`transforms.schema.ARROW_SCHEMA`, and, with
  ``verify=True``, its bytes hash to the manifest's SHA-256.
* ``len(ds)`` is the manifest's ``counts.windows``, which must equal the sum of the shards'
  rows. Global index ``i`` runs over the shards in manifest order and the rows of each shard
  in file order, so ``ds[0]`` is the first row of the first shard.
* ``ds[i]`` is a dict: ``tokens`` (``np.int32`` array of ``length + 1`` ids, the stored span
  ``z[start : start + length + 1]``), ``start``, ``length``, ``loss_start``, ``doc_id``,
  ``doc_key``, ``window_index``, ``doc_tokens`` and ``index`` (= ``i``).
* Reads go through the local layout of :mod:`reader.layout`: each shard, the first time it
  is read (or all at once with :meth:`WindowDataset.prepare`), is verified against the
  manifest's SHA-256, checked row by row (token ids in ``[0, vocab_size)``,
  ``1 <= length <= window``, ``len(tokens) == length + 1``, ``0 <= loss_start < length``; a
  bad row is a ``ValueError`` naming the shard, the row and the dataset index, never a
  silent out-of-range embedding lookup) and written as flat arrays into a cache directory
  (``cache_dir``, never inside the dataset), which every process then memory-maps. A remote
  shard is downloaded into the cache on demand; ``cache_limit`` bounds the cache's bytes.
* ``ds.__getitems__(indices)`` (what ``DataLoader`` calls for a batch) gathers the windows
  vectorised into a :class:`WindowBatch`, a sequence of the same dicts that
  :func:`reader.collate` pads without a per-window loop.
* The object pickles without open files or maps, and a process that finds itself with
  another pid (a forked ``DataLoader`` worker) drops what it inherited and maps the layout
  itself, so nothing large is pickled and every worker holds its own maps.

Example::

    ds = WindowDataset("out/sample")
    w = ds[0]
    w["tokens"][: w["length"]]       # the inputs;  w["tokens"][1:] are the targets
    ds.eos_id, ds.vocab_size, ds.window
"""

from __future__ import annotations

import bisect
import hashlib
import os
import time
import urllib.parse
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reader import integrity
from reader.layout import COLUMNS as LAYOUT_COLUMNS
from reader.layout import RECORD, LayoutCache, ShardLayout, ShardSource, default_cache_dir
from transforms.manifest import MANIFEST_NAME, parse_manifest, parse_splits_record
from transforms.schema import ARROW_SCHEMA, SHARD_PATTERN
from transforms.splits import SPLITS_NAME, split_job_message

__all__ = ["BLOCK_UNITS", "WindowBatch", "WindowDataset", "WindowRows"]

BLOCK_UNITS = ("shard", "row_group")
_HASH_CHUNK = 8 * 2**20


@dataclass(frozen=True)
class _Shard:
    """What the reader keeps of one shard: its path, rows, row groups and SHA-256."""

    file: str
    path: str
    rows: int
    row_group_starts: tuple[int, ...]  # first row of each row group, in the shard
    sha256: str
    stamp: tuple[int, int]  # (size, mtime in ns) of the file when the dataset was opened


def _open_root(path: str | os.PathLike[str],
               filesystem: pafs.FileSystem | None) -> tuple[pafs.FileSystem, str, str]:
    """The filesystem, the root path inside it, and the name to show in messages."""
    text = os.fspath(path)
    if filesystem is not None:
        root = text.rstrip("/")
        return filesystem, root, f"{filesystem.type_name}:{root}"
    if "://" in text:
        fs, root = pafs.FileSystem.from_uri(text)
        # Shown in messages: without credentials (s3://KEY:SECRET@bucket/…) or query options.
        parts = urllib.parse.urlsplit(text)
        shown = f"{parts.scheme}://{parts.hostname or ''}{parts.path}".rstrip("/")
        return fs, root.rstrip("/"), shown
    root = os.path.abspath(text)
    return pafs.LocalFileSystem(), root, root


def _same_type(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Type equality that ignores the nullability of list items (a writer detail)."""
    if pa.types.is_list(expected):
        return pa.types.is_list(actual) and actual.value_type == expected.value_type
    return actual == expected


class WindowDataset:
    """The windows of a finished output, with random access through a memory-mapped layout.

    Args:
        path: the output directory: a local path or a URI that ``pyarrow.fs`` opens
            (``s3://``, ``gs://``, ``file://`` …).
        verify: also check each shard's SHA-256 against the manifest at open (reads every
            byte once; a shard's layout is always built from bytes that hash to it).
        filesystem: a ``pyarrow.fs.FileSystem`` in which ``path`` is a path (e.g.
            ``S3FileSystem(endpoint_override=...)`` for an S3-compatible store); default: from
            the URI, or the local disk.
        cache_dir: where the layouts live (default :func:`reader.layout.default_cache_dir`:
            ``$TOKEN_WINDOWS_CACHE``, else ``$XDG_CACHE_HOME/token-windows`` or
            ``~/.cache/token-windows``); never inside the dataset directory.
        cache_limit: at most this many bytes of layouts in ``cache_dir`` (``None``: no bound);
            least recently used layouts are removed first. With a bound smaller than the
            dataset's layout, read in ``blocks`` order by shard (see the README).
        cache_bytes: ignored (the in-memory row-group cache of earlier releases; memory is
            now the operating system's page cache). Passing it warns.

    Raises:
        FileNotFoundError: the manifest or a shard it lists does not exist.
        ValueError: the manifest is invalid, of another format or version, or disagrees with
            a shard (row count, columns, checksum), the counts disagree, or ``cache_dir`` is
            inside the dataset.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        verify: bool = False,
        *,
        filesystem: pafs.FileSystem | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        cache_bytes: int | None = None,
    ) -> None:
        if cache_bytes is not None:
            warnings.warn("`cache_bytes` no longer applies: windows are read from a memory-mapped "
                          "layout (see `cache_dir` and `cache_limit`)", DeprecationWarning,
                          stacklevel=2)
        self._fs, self._root, self.path = _open_root(path, filesystem)
        directory = os.path.abspath(os.fspath(cache_dir if cache_dir is not None
                                              else default_cache_dir()))
        if isinstance(self._fs, pafs.LocalFileSystem):
            real_root = os.path.realpath(self._root)
            real_cache = os.path.realpath(directory)
            if os.path.commonpath([real_root, real_cache]) == real_root:
                raise ValueError(f"`cache_dir` must be outside the dataset directory "
                                 f"{self.path}, but got {directory}")
        self._layouts = LayoutCache(directory, limit_bytes=cache_limit)
        self.manifest: dict[str, Any] = self._read_manifest()
        tokenizer = self.manifest["tokenizer"]
        self.vocab_size: int = int(tokenizer["vocab_size"])
        self.bos_id: int = int(tokenizer["bos_id"])
        self.eos_id: int = int(tokenizer["eos_id"])
        self.window: int = int(self.manifest["windows"]["window"])
        self._footer_counts: list[dict[str, int] | None] = []
        self._shards = tuple(self._check_shard(i, s, verify) for i, s in enumerate(self._entries))
        integrity.check_totals(self._footer_counts, self.manifest,
                               where=self._where(MANIFEST_NAME))
        self._shard_starts: list[int] = []
        total = 0
        for shard in self._shards:
            self._shard_starts.append(total)
            total += shard.rows
        expected = self.manifest["counts"]["windows"]
        if total != expected:
            raise ValueError(
                f"{self._where(MANIFEST_NAME)} says counts.windows is {expected}, but its shards "
                f"hold {total} rows; the dataset is damaged"
            )
        self._len = total
        self._starts = np.array([*self._shard_starts, total], dtype=np.int64)
        self.fingerprint: str = hashlib.sha256(
            "".join(s.sha256 for s in self._shards).encode()).hexdigest()
        self._lengths: npt.NDArray[np.int32] | None = None
        self._reset_process_state()

    # -- opening and checking -------------------------------------------------------------

    def _where(self, name: str) -> str:
        return f"{self.path}/{name}"

    def _read_manifest(self) -> dict[str, Any]:
        where = self._where(MANIFEST_NAME)
        info = self._fs.get_file_info(f"{self._root}/{MANIFEST_NAME}")
        if info.type != pafs.FileType.File:
            splits = f"{self._root}/{SPLITS_NAME}"
            if self._fs.get_file_info(splits).type == pafs.FileType.File:
                with self._fs.open_input_stream(splits) as f:
                    record = parse_splits_record(f.read(), where=self._where(SPLITS_NAME))
                raise FileNotFoundError(split_job_message(self.path, record))
            raise FileNotFoundError(
                f"{where} not found: a directory without a manifest is not a finished dataset "
                "(the pipeline writes the manifest last, after every shard is complete)"
            )
        with self._fs.open_input_stream(f"{self._root}/{MANIFEST_NAME}") as f:
            data = f.read()
        # Keys, and the types of the values read below, are checked there.
        return parse_manifest(data, where=where)

    @property
    def _entries(self) -> list[dict[str, Any]]:
        return self.manifest["shards"]

    def _check_shard(self, i: int, entry: dict[str, Any], verify: bool) -> _Shard:
        file = entry["file"]
        if not isinstance(file, str) or not SHARD_PATTERN.match(file):
            raise ValueError(
                f"{self._where(MANIFEST_NAME)}: shards[{i}].file must be a shard name like "
                f"'part-00000-of-00001.parquet', but got {file!r}"
            )
        path = f"{self._root}/{file}"
        where = self._where(file)
        info = self._fs.get_file_info(path)
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(f"shard {where}, listed in the manifest, does not exist")
        with self._fs.open_input_file(path) as f:
            try:
                pf = pq.ParquetFile(f, **integrity.READ_OPTIONS)
            except (OSError, ValueError) as e:
                raise integrity.footer_error(e, where=where) from e
            metadata = pf.metadata
            schema = pf.schema_arrow
        self._footer_counts.append(integrity.check_footer(
            metadata, entry, index=i, manifest=self.manifest, where=where))
        for field in ARROW_SCHEMA:
            index = schema.get_field_index(field.name)
            if index < 0:
                raise ValueError(f"shard {where} lacks the column {field.name!r}")
            actual = schema.field(index).type
            if not _same_type(actual, field.type):
                raise ValueError(
                    f"shard {where}: column {field.name!r} has type {actual}, expected {field.type}"
                )
        rows = entry["rows"]
        if metadata.num_rows != rows:
            raise ValueError(
                f"shard {where} holds {metadata.num_rows} rows, but the manifest says {rows}"
            )
        if verify:
            digest = self._sha256(path)
            if digest != entry["sha256"]:
                raise ValueError(
                    f"shard {where} has SHA-256 {digest}, but the manifest says "
                    f"{entry['sha256']}; the file is damaged or was replaced"
                )
        sha256 = entry["sha256"]
        if not isinstance(sha256, str) or len(sha256) != 64:
            raise ValueError(f"{self._where(MANIFEST_NAME)}: shards[{i}].sha256 must be a "
                             f"SHA-256 in hex, but got {sha256!r}")
        starts, total = [], 0
        for g in range(metadata.num_row_groups):
            starts.append(total)
            total += metadata.row_group(g).num_rows
        mtime = info.mtime_ns if info.mtime_ns is not None else -1
        return _Shard(file=file, path=path, rows=rows, row_group_starts=tuple(starts),
                      sha256=sha256, stamp=(int(info.size or 0), int(mtime)))

    def _sha256(self, path: str) -> str:
        h = hashlib.sha256()
        with self._fs.open_input_stream(path) as f:
            while chunk := f.read(_HASH_CHUNK):
                h.update(chunk)
        return h.hexdigest()

    # -- per-process state: the mapped layouts -------------------------------------------

    def _reset_process_state(self) -> None:
        self._pid = os.getpid()
        self._open: list[ShardLayout | None] = [None] * len(self._shards)
        self._tokens: list[npt.NDArray[Any] | None] = [None] * len(self._shards)
        self._index: npt.NDArray[Any] | None = None
        self._index_looked = False

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_open", "_tokens", "_index", "_index_looked", "_pid"):
            state.pop(key)
        state["_lengths"] = None  # O(n): read again where it is needed, not pickled
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_process_state()

    def close(self) -> None:
        """Drop this process's maps of the layouts (they are mapped again on the next read)."""
        self._reset_process_state()

    def _source(self, s: int) -> ShardSource:
        shard = self._shards[s]
        return ShardSource(fs=self._fs, path=shard.path, where=self._where(shard.file),
                           sha256=shard.sha256, stamp=shard.stamp, rows=shard.rows,
                           first_index=self._shard_starts[s], vocab_size=self.vocab_size,
                           window=self.window)

    def _check_pid(self) -> None:
        if self._pid != os.getpid():
            # A forked worker: map the layouts itself rather than share the parent's.
            self._reset_process_state()

    def _layout(self, s: int) -> ShardLayout:
        self._check_pid()
        layout = self._open[s]
        if layout is None:
            layout = self._layouts.get(self._source(s))
            self._open[s] = layout
            self._tokens[s] = layout.tokens
            if self._index is None and all(x is not None for x in self._open):
                self._index = self._layouts.build_dataset_index(
                    self.fingerprint, self._open)  # type: ignore[arg-type]
                self._index_looked = True
        return layout

    def _dataset_index(self) -> npt.NDArray[Any] | None:
        """Every window's record in one map, once every shard's layout has been built."""
        self._check_pid()
        if not self._index_looked:
            self._index_looked = True
            self._index = self._layouts.open_dataset_index(self.fingerprint, self._len)
        return self._index

    @property
    def cache_dir(self) -> str:
        """The cache directory that holds the layouts."""
        return self._layouts.directory

    @property
    def layout_builds(self) -> int:
        """Shard layouts this process has built (0 when every one was already cached)."""
        return self._layouts.builds

    def prepare(self) -> dict[str, Any]:
        """Build (or check) the layout of every shard now, rather than on first read.

        Returns:
            ``{"shards", "built", "bytes", "seconds", "cache_dir"}``: the layouts built now
            (0 when all were cached), their total size on disk and the time taken.
        """
        began = time.perf_counter()
        before = self._layouts.builds
        size = 0
        for s in range(len(self._shards)):
            layout = self._layout(s)
            size += sum(os.path.getsize(os.path.join(layout.directory, f))
                        for f in os.listdir(layout.directory))
        if self._len:
            size += self._dataset_index().nbytes  # type: ignore[union-attr]
        return {"shards": len(self._shards), "built": self._layouts.builds - before,
                "bytes": size, "seconds": time.perf_counter() - began,
                "cache_dir": self.cache_dir}

    # -- access ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    def _normalise_index(self, index: int) -> int:
        i = index.__index__() if not isinstance(index, int) else index
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"index {index} is out of range for {self._len} windows")
        return i

    def _locate(self, i: int) -> tuple[int, int]:
        """(shard, row in the shard) of a global index in range."""
        s = bisect.bisect_right(self._shard_starts, i) - 1
        # Empty shards share their start with the next one; bisect_right skips them.
        return s, i - self._shard_starts[s]

    def __getitem__(self, index: int) -> dict[str, Any]:
        """The window at global index ``index`` (negative indices count from the end)."""
        i = self._normalise_index(index)
        s, j = self._locate(i)
        layout = self._layout(s)
        rec = layout.records[j]
        lo, n = int(rec["lo"]), int(rec["length"]) + 1
        window: dict[str, Any] = {"tokens": layout.tokens[lo : lo + n].astype(np.int32)}
        for name in LAYOUT_COLUMNS:
            window[name] = int(rec[name])
        window["doc_id"] = layout.doc_id(j)
        window["index"] = i
        return window

    @property
    def lengths(self) -> npt.NDArray[np.int32]:
        """Every window's ``length``, in index order (int32, read once, then kept).

        Read from the dataset index when every layout is local, else from each shard's
        Parquet ``length`` column alone (no token is read or converted), and checked to be in
        ``[1, window]``. For :class:`reader.PackedSampler`.
        """
        if self._lengths is None:
            index = self._dataset_index()
            if index is not None:
                lengths = np.ascontiguousarray(index["length"], dtype=np.int32)
            else:
                parts = [np.zeros(0, np.int32)]
                for shard in self._shards:
                    with self._fs.open_input_file(shard.path) as f:
                        pf = pq.ParquetFile(f, **integrity.READ_OPTIONS)
                        column = pf.read(columns=["length"]).column("length")
                    parts.append(column.to_numpy().astype(np.int32))
                lengths = np.concatenate(parts)
            if len(lengths) != self._len:
                raise ValueError(f"{self.path}: read {len(lengths)} lengths for {self._len} "
                                 "windows; the dataset is damaged")
            if self._len and (int(lengths.min()) < 1 or int(lengths.max()) > self.window):
                bad = int(np.flatnonzero((lengths < 1) | (lengths > self.window))[0])
                raise ValueError(f"{self.path}: window {bad} has length {int(lengths[bad])}, "
                                 f"outside [1, {self.window}]; the dataset is damaged")
            lengths.setflags(write=False)
            self._lengths = lengths
        return self._lengths

    def _doc_id(self, s: int, i: int) -> str:
        return self._layout(s).doc_id(i - self._shard_starts[s])

    def __getitems__(self, indices: Sequence[Any]) -> Any:
        """Several windows at once, gathered vectorised (``DataLoader`` calls this per batch).

        ``indices`` is a list of ints (a :class:`WindowBatch` is returned) or, for a batch of
        :class:`reader.PackedSampler`, a list of rows, each a list of ints (a
        :class:`WindowRows`, gathered in one pass, for :func:`reader.collate_packed`).
        """
        if len(indices) and isinstance(indices[0], (list, tuple, np.ndarray)):
            sizes = [len(row) for row in indices]
            flat = [i for row in indices for i in row]
            return WindowRows(self.__getitems__(flat), np.cumsum([0, *sizes]))
        idx = np.asarray(indices if len(indices) else [], dtype=np.int64)
        if idx.ndim != 1:
            raise ValueError(f"`indices` must be a sequence of integers, but got shape "
                             f"{idx.shape}")
        idx = np.where(idx < 0, idx + self._len, idx)
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= self._len):
            bad = next(int(v) for v in indices if not -self._len <= int(v) < self._len)
            raise IndexError(f"index {bad} is out of range for {self._len} windows")
        rec = self._records(idx)
        sizes = rec["length"].astype(np.int64) + 1
        offsets = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        tokens = np.empty(int(offsets[-1]), np.int32)
        self._copy_tokens(rec, tokens, offsets)
        return WindowBatch(tokens=tokens, offsets=offsets, index=idx, records=rec,
                           doc_id=self._doc_id)

    def _records(self, idx: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """The layout records of the windows at in-range indices ``idx``."""
        index = self._dataset_index()
        if index is not None:
            return index[idx]  # one gather of every field
        # Not every shard is local yet (first epoch, or a bounded cache).
        shard = np.searchsorted(self._starts, idx, side="right") - 1
        rec = np.empty(len(idx), RECORD)
        for s in np.unique(shard).tolist():
            at = np.flatnonzero(shard == s)
            rec[at] = self._layout(s).records[idx[at] - self._starts[s]]
        rec["shard"] = shard
        return rec

    def _copy_tokens(self, rec: npt.NDArray[Any], out: npt.NDArray[np.int32],
                     starts: npt.NDArray[np.int64]) -> None:
        """Copy the ids of the windows of ``rec`` (from :meth:`_records`) into ``out``, window
        k from ``starts[k]`` on (also used by :class:`reader.MixedDataset`, which gathers a
        batch of several datasets in one pass)."""
        arrays = self._tokens
        for o, s, lo, n in zip(starts.tolist(), rec["shard"].tolist(), rec["lo"].tolist(),
                               (rec["length"].astype(np.int64) + 1).tolist(), strict=False):
            source = arrays[s]
            if source is None:
                source = self._layout(s).tokens
            out[o : o + n] = source[lo : lo + n]

    def window_sizes(self, indices: npt.ArrayLike) -> tuple[npt.NDArray[np.int64],
                                                             npt.NDArray[np.int64]]:
        """``length`` and scored targets (``length − loss_start``) of the windows at
        ``indices`` (in range), read from the layout's records alone (no token is read): what
        :class:`reader.MixtureSampler` needs of the windows it draws."""
        rec = self._records(np.asarray(indices, dtype=np.int64))
        lengths = rec["length"].astype(np.int64)
        return lengths, lengths - rec["loss_start"]

    def blocks(self, unit: str = "row_group") -> tuple[int, ...]:
        """Block sizes in dataset order, for ``EpochSampler(order="blocks", blocks=...)``.

        Args:
            unit: ``"row_group"`` (each Parquet row group: finer mixing, for a prepared local
                layout) or ``"shard"`` (each shard: a buffer of k blocks touches k shards, so
                only k layouts need to be local at once; for remote data and a bounded cache).

        Raises:
            ValueError: an unknown unit.
        """
        if unit not in BLOCK_UNITS:
            raise ValueError(f"`unit` must be one of {BLOCK_UNITS}, but got {unit!r}")
        if unit == "shard":
            return tuple(s.rows for s in self._shards)
        out: list[int] = []
        for shard in self._shards:
            edges = [*shard.row_group_starts, shard.rows]
            out += [b - a for a, b in zip(edges, edges[1:], strict=False)]
        return tuple(out)

    @property
    def shard_files(self) -> tuple[str, ...]:
        """The shard file names, in manifest (and global index) order."""
        return tuple(s.file for s in self._shards)

    @property
    def scored_targets(self) -> int:
        """The manifest's ``counts.scored_targets``: Σ (length − loss_start) over windows."""
        return int(self.manifest["counts"]["scored_targets"])

    def __repr__(self) -> str:
        return (
            f"WindowDataset({self.path!r}, windows={self._len}, shards={len(self._shards)}, "
            f"window={self.window}, vocab_size={self.vocab_size})"
        )


class WindowBatch(Sequence):
    """Windows gathered by :meth:`WindowDataset.__getitems__`: flat arrays, one row each.

    A sequence of the dicts ``WindowDataset[i]`` gives (built when an item is asked for);
    :func:`reader.collate` reads the arrays directly. ``tokens`` holds every window's ids back
    to back (int32), window k being ``tokens[offsets[k] : offsets[k + 1]]``; ``columns``
    holds ``start``, ``length``, ``loss_start``, ``doc_tokens``, ``doc_key`` and
    ``window_index``, one value per window; ``index`` the dataset indices. It pickles as the
    list of its dicts (it holds a reference to the dataset, which maps the layout).
    """

    def __init__(self, *, tokens: npt.NDArray[np.int32], offsets: npt.NDArray[np.int64],
                 index: npt.NDArray[np.int64], records: npt.NDArray[Any],
                 doc_id: Callable[[int, int], str]) -> None:
        self.tokens = tokens
        self.offsets = offsets
        self.index = index
        self.records = records
        self.columns = {name: records[name] for name in LAYOUT_COLUMNS}
        self._doc_id = doc_id

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, k: int) -> dict[str, Any]:  # type: ignore[override]
        if isinstance(k, slice):
            raise TypeError("WindowBatch does not slice; index one window at a time")
        k = range(len(self))[k]
        window: dict[str, Any] = {
            "tokens": self.tokens[self.offsets[k] : self.offsets[k + 1]].copy()}
        for name, values in self.columns.items():
            window[name] = int(values[k])
        window["doc_id"] = self._doc_id(int(self.records["shard"][k]), int(self.index[k]))
        window["index"] = int(self.index[k])
        return window

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[k] for k in range(len(self)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


class WindowRows(Sequence):
    """The rows of a packed batch, gathered at once: row r is windows
    ``starts[r] : starts[r + 1]`` of ``windows`` (a :class:`WindowBatch`).

    A sequence of rows, each a list of the dicts ``WindowDataset[i]`` gives;
    :func:`reader.collate_packed` reads the flat arrays directly. It pickles as its lists.
    """

    def __init__(self, windows: WindowBatch, starts: npt.ArrayLike) -> None:
        self.windows = windows
        self.starts = np.asarray(starts, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, r: int) -> list[dict[str, Any]]:  # type: ignore[override]
        if isinstance(r, slice):
            raise TypeError("WindowRows does not slice; index one row at a time")
        r = range(len(self))[r]
        return [self.windows[k] for k in range(int(self.starts[r]), int(self.starts[r + 1]))]

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        return (self[r] for r in range(len(self)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))
