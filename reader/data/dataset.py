"""Random access to the windows of a finished output (docs/format.md).

Contract:

* ``WindowDataset(path)`` opens a directory written by the pipeline, on the local disk or
  anywhere ``pyarrow.fs`` reaches (``gs://``, ``s3://``, ``hdfs://``, ``file://``), through
  `reader.data.opening.open_files`: the manifest is read and checked, and every shard it lists
  must exist (one listing, whatever the number of shards). Each shard's footer, SHA-256,
  page checksums, rows and BOS/EOS are checked when the shard is first read (its layout is
  built); with ``verify=True``, for every shard at open, and every cached layout file is
  hashed on first use (`docs/integrity.md#the-reader`).
* ``len(ds)`` is the manifest's ``counts.windows`` (the sum of the shards' rows). Global
  index ``i`` runs over the shards in manifest order and the rows of each shard in file
  order, so ``ds[0]`` is the first row of the first shard.
* ``ds[i]`` is a dict: ``tokens`` (``np.int32`` array of ``length + 1`` ids, the stored span
  ``z[start : start + length + 1]``), ``start``, ``length``, ``loss_start``, ``doc_id``,
  ``doc_key``, ``window_index``, ``doc_tokens`` and ``index`` (= ``i``).
* Reads go through the local layout of :mod:`reader.data.layout`, built once per shard into a
  cache directory (``cache_dir``, never inside the dataset), which every process then
  memory-maps; a bad row is a ``ValueError`` naming the shard, the row and the dataset
  index, never a silent out-of-range embedding lookup. A remote shard is downloaded into
  the cache on demand; ``cache_limit`` bounds the cache's bytes.
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
import dataclasses
import os
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow.fs as pafs

from reader.data import integrity
from reader.data.layout import (
    RECORD,
    LayoutCache,
    ShardLayout,
    ShardSource,
    default_cache_dir,
)
from reader.data.opening import open_files, read_column, row_groups, verify_files
from reader.data.windowbatch import Window, WindowBatch, WindowRows, window_item
from transforms.dataset.manifest import MANIFEST_NAME, Manifest
from transforms.errors import DamagedDataset
from transforms.json_fields import JsonObject

__all__ = ["BLOCK_UNITS", "WindowBatch", "WindowDataset", "WindowRows"]

BLOCK_UNITS = ("shard", "row_group")
# A record as one block of bytes: a fancy index copies it at once, where a structured array's
# goes field by field (3x slower at 32 records, 5x at 128).
RAW = np.dtype((np.void, RECORD.itemsize))


class WindowDataset:
    """The windows of a finished output, with random access through a memory-mapped layout.

    Args:
        path: the output directory: a local path or a URI that ``pyarrow.fs`` opens
            (``s3://``, ``gs://``, ``file://`` …).
        verify: check every shard at open (footer, SHA-256, page checksums, BOS/EOS, the
            counts its rows give: reads every byte once) and hash every cached layout file on
            first use; a shard's layout is always built from bytes that hash to it.
        filesystem: a ``pyarrow.fs.FileSystem`` in which ``path`` is a path (e.g.
            ``S3FileSystem(endpoint_override=...)`` for an S3-compatible store); default: from
            the URI, or the local disk.
        cache_dir: where the layouts live (default :func:`reader.data.layout.default_cache_dir`:
            ``$TOKEN_WINDOWS_CACHE``, else ``$XDG_CACHE_HOME/token-windows`` or
            ``~/.cache/token-windows``); never inside the dataset directory.
        cache_limit: at most this many bytes of layouts in ``cache_dir`` (``None``: no bound);
            least recently used layouts are removed first. With a bound smaller than the
            dataset's layout, read in ``blocks`` order by shard (see the README).
        cache_bytes: ignored (the in-memory row-group cache of earlier releases; memory is
            now the operating system's page cache). Passing it warns.

        allow_unfinished: open a split whose job's ``_splits.json`` is missing (to look at
            what a killed job left; never to train on).

    Attributes:
        manifest: the dataset's ``_manifest.json`` as read and checked, a frozen
            `transforms.dataset.manifest.Manifest` (``ds.manifest.counts.windows``,
            ``ds.manifest.tokenizer.sha256`` …; ``to_json()`` gives its JSON object).

    Raises:
        UnfinishedDataset: no manifest, or a split of an unfinished job (also a
            ``FileNotFoundError``; a path that names no directory is a plain one).
        MissingShard: a shard the manifest lists does not exist (also a
            ``FileNotFoundError``).
        DamagedDataset: the manifest is invalid or disagrees with itself or (with ``verify``)
            a shard (footer, checksum, BOS/EOS, counts).
        ForeignDataset: (with ``verify``) a shard of another job, or a split of another run.
        DatasetError: a manifest of another format or version.
        ValueError: ``cache_dir`` is inside the dataset (all of the above are ValueErrors).
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
        allow_unfinished: bool = False,
    ) -> None:
        if cache_bytes is not None:
            warnings.warn("`cache_bytes` no longer applies: windows are read from a memory-mapped "
                          "layout (see `cache_dir` and `cache_limit`)", DeprecationWarning,
                          stacklevel=2)
        files = open_files(path, filesystem=filesystem, allow_unfinished=allow_unfinished)
        self._files = files
        self._fs, self._root, self.path = files.location.fs, files.location.root, \
            files.location.shown
        directory = files.location.outside(cache_dir if cache_dir is not None
                                           else default_cache_dir())
        self._layouts = LayoutCache(directory, limit_bytes=cache_limit, verify=verify)
        self.manifest: Manifest = files.manifest
        tokenizer = files.manifest.tokenizer
        self.vocab_size: int = tokenizer.vocab_size
        self.bos_id: int = tokenizer.bos_id
        self.eos_id: int = tokenizer.eos_id
        self.window: int = files.manifest.windows.window
        self._shards = files.shards
        self._shard_starts: list[int] = []
        total = 0
        for shard in self._shards:
            self._shard_starts.append(total)
            total += shard.rows
        self._len = total  # the manifest's counts.windows (read_manifest checks the sum)
        self._starts = np.array([*self._shard_starts, total], dtype=np.int64)
        self.fingerprint: str = files.fingerprint
        self._row_groups: tuple[int, ...] | None = None
        self._lengths: npt.NDArray[np.int32] | None = None
        self._reset_process_state()
        if verify:  # rows a cached layout checked against this manifest are not decoded again
            verify_files(files, known=lambda s: self._layouts.content(self._source(s)))

    def _where(self, name: str) -> str:
        return f"{self.path}/{name}"

    @property
    def _index_checked(self) -> JsonObject:
        """What the dataset index was checked against: reused only for the same manifest."""
        return {"counts": dataclasses.asdict(self._files.manifest.counts),
                "tokenizer": dataclasses.asdict(self._files.manifest.tokenizer)}

    # -- per-process state: the mapped layouts -------------------------------------------

    def _reset_process_state(self) -> None:
        self._pid = os.getpid()
        self._open: list[ShardLayout | None] = [None] * len(self._shards)
        self._tokens: list[npt.NDArray[Any] | None] = [None] * len(self._shards)
        self._index: npt.NDArray[Any] | None = None
        self._index_looked = False
        self._raw: tuple[npt.NDArray[Any], npt.NDArray[Any]] | None = None  # (index, RAW view)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_open", "_tokens", "_index", "_index_looked", "_raw", "_pid"):
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
        return ShardSource(fs=self._fs, path=shard.path, where=shard.where,
                           sha256=shard.sha256, stamp=shard.stamp, rows=shard.rows,
                           first_index=self._shard_starts[s], manifest=self._files.manifest,
                           index=s)

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
                # Every shard is local: the totals its rows give must be the manifest's.
                integrity.check_totals([x.content for x in self._open],  # type: ignore[union-attr]
                                       self._files.manifest.counts,
                                       where=self._where(MANIFEST_NAME))
                self._index = self._layouts.build_dataset_index(
                    self.fingerprint, self._open, self._index_checked)  # type: ignore[arg-type]
                self._index_looked = True
        return layout

    def _dataset_index(self) -> npt.NDArray[Any] | None:
        """Every window's record in one map, once every shard's layout has been built."""
        self._check_pid()
        if not self._index_looked:
            self._index_looked = True
            self._index = self._layouts.open_dataset_index(self.fingerprint, self._len,
                                                           self._index_checked)
        return self._index

    def _raw_index(self) -> npt.NDArray[Any] | None:
        """The dataset index as :data:`RAW` records, or None (see :meth:`_dataset_index`)."""
        index = self._dataset_index()
        if index is None:
            return None
        raw = self._raw
        if raw is None or raw[0] is not index:
            raw = self._raw = (index, index.view(RAW))
        return raw[1]

    def _token_arrays(self) -> list[npt.NDArray[Any] | None]:
        """Each shard's mapped ids (None for a shard not mapped yet: ``_layout(s).tokens``),
        this process's list, filled in place as shards are mapped."""
        self._check_pid()
        return self._tokens

    @property
    def cache_dir(self) -> str:
        """The cache directory that holds the layouts."""
        return self._layouts.directory

    @property
    def layout_builds(self) -> int:
        """Shard layouts this process has built (0 when every one was already cached)."""
        return self._layouts.builds

    def prepare(self) -> JsonObject:
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

    def __getitem__(self, index: int) -> Window:
        """The window at global index ``index`` (negative indices count from the end)."""
        i = self._normalise_index(index)
        s, j = self._locate(i)
        layout = self._layout(s)
        rec = layout.records[j]
        lo, n = int(rec["lo"]), int(rec["length"]) + 1
        return window_item(layout.tokens[lo : lo + n].astype(np.int32), rec,
                           doc_id=layout.doc_id(j), index=i)

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
                lengths = np.concatenate([np.zeros(0, np.int32), *(
                    read_column(self._files, s, "length").astype(np.int32)
                    for s in range(len(self._shards)))])
            if len(lengths) != self._len:
                raise DamagedDataset(
                    f"{self.path}: read {len(lengths)} lengths for {self._len} "
                    "windows; the dataset is damaged")
            if self._len and (int(lengths.min()) < 1 or int(lengths.max()) > self.window):
                bad = int(np.flatnonzero((lengths < 1) | (lengths > self.window))[0])
                raise DamagedDataset(
                    f"{self.path}: window {bad} has length {int(lengths[bad])}, "
                    f"outside [1, {self.window}]; the dataset is damaged")
            lengths.setflags(write=False)
            self._lengths = lengths
        return self._lengths

    def _doc_id(self, s: int, i: int) -> str:
        return self._layout(s).doc_id(i - self._shard_starts[s])

    def doc_id(self, index: Any) -> str | list[str]:
        """The ``doc_id`` of window ``index`` (an int), or a list for each of a sequence or
        tensor of them (``batch["index"]``; in ``[0, len)``: a packed batch's −1 is refused)."""
        if np.ndim(index) == 0:
            i = int(index)
            if not 0 <= i < self._len:
                raise IndexError(f"index {i} is out of range for {self._len} windows")
            return self._doc_id(self._locate(i)[0], i)
        return [self.doc_id(i) for i in np.asarray(index).reshape(-1).tolist()]

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
        rec = self.records(idx)
        sizes = rec["length"].astype(np.int64) + 1
        offsets = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        tokens = np.empty(int(offsets[-1]), np.int32)
        self.copy_tokens(rec, tokens, offsets)
        return WindowBatch(tokens=tokens, offsets=offsets, index=idx, records=rec,
                           doc_id=self._doc_id)

    def records(self, idx: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """The layout records (`reader.data.layout.RECORD`: shard, place of its ids, length,
        ``loss_start`` …) of the windows at in-range indices ``idx``: with `copy_tokens`, the
        gather ``__getitems__`` makes, and a mixture makes over several datasets."""
        raw = self._raw_index()
        if raw is not None:
            return raw[idx].view(RECORD)  # one block per record
        # Not every shard is local yet (first epoch, or a bounded cache).
        shard = np.searchsorted(self._starts, idx, side="right") - 1
        rec = np.empty(len(idx), RECORD)
        for s in np.unique(shard).tolist():
            at = np.flatnonzero(shard == s)
            rec[at] = self._layout(s).records[idx[at] - self._starts[s]]
        rec["shard"] = shard
        return rec

    def copy_tokens(self, rec: npt.NDArray[Any], out: npt.NDArray[np.int32],
                    starts: npt.NDArray[np.int64]) -> None:
        """Copy the ids of the windows of ``rec`` (from :meth:`records`) into ``out``, window
        k from ``starts[k]`` on."""
        arrays = self._token_arrays()
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
        idx = np.asarray(indices, dtype=np.int64)
        index = self._dataset_index()
        if index is not None:  # two fields gathered, not whole records (14x faster at 8192)
            lengths, loss_starts = index["length"][idx], index["loss_start"][idx]
        else:
            rec = self.records(idx)
            lengths, loss_starts = rec["length"], rec["loss_start"]
        lengths = lengths.astype(np.int64)
        return lengths, lengths - loss_starts

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
        if self._row_groups is None:  # from the footers, read (and checked) once
            self._row_groups = tuple(
                size for s in range(len(self._shards)) for size in row_groups(self._files, s))
        return self._row_groups

    @property
    def shard_files(self) -> tuple[str, ...]:
        """The shard file names, in manifest (and global index) order."""
        return tuple(s.file for s in self._shards)

    @property
    def scored_targets(self) -> int:
        """The manifest's ``counts.scored_targets``: Σ (length − loss_start) over windows."""
        return self.manifest.counts.scored_targets

    def __repr__(self) -> str:
        return (
            f"WindowDataset({self.path!r}, windows={self._len}, shards={len(self._shards)}, "
            f"window={self.window}, vocab_size={self.vocab_size})"
        )
