"""Random access to the windows of a finished output (SPEC §5, §6).

Contract:

* ``WindowDataset(path)`` opens a directory written by the pipeline, on the local disk or
  anywhere ``pyarrow.fs`` reaches (``gs://``, ``s3://``, ``hdfs://``, ``file://``). It reads
  ``manifest.json`` first (no manifest, no dataset), checks its format and version, and
  checks every shard the manifest lists: it exists, its Parquet footer holds the manifest's
  row count and the columns of :data:`transforms.schema.ARROW_SCHEMA`, and, with
  ``verify=True``, its bytes hash to the manifest's SHA-256.
* ``len(ds)`` is the manifest's ``counts.windows``, which must equal the sum of the shards'
  rows. Global index ``i`` runs over the shards in manifest order and the rows of each shard
  in file order, so ``ds[0]`` is the first row of the first shard.
* ``ds[i]`` is a dict: ``tokens`` (``np.int32`` array of ``length + 1`` ids, the stored span
  ``z[start : start + length + 1]``), ``start``, ``length``, ``loss_start``, ``doc_id``,
  ``doc_key``, ``window_index``, ``doc_tokens`` and ``index`` (= ``i``).
* Data is read lazily, one Parquet row group at a time, into a small per-process LRU cache
  bounded in bytes, so a dataset larger than memory is fine. When a row group is loaded it
  is checked, vectorised: every token id in ``[0, vocab_size)``, ``1 <= length <= window``,
  ``len(tokens) == length + 1`` and ``0 <= loss_start < length``; a bad row is a
  ``ValueError`` naming the shard and the row, never a silent out-of-range embedding lookup.
* The object pickles without open files or cached data, and a process that finds itself
  with another pid (a forked ``DataLoader`` worker) drops what it inherited and reopens, so
  every worker holds its own handles and its own cache.

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
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reader import integrity
from transforms.manifest import MANIFEST_NAME, parse_manifest
from transforms.schema import ARROW_SCHEMA, COLUMNS, SHARD_PATTERN

__all__ = ["WindowDataset"]

DEFAULT_CACHE_BYTES = 128 * 2**20
_MAX_OPEN_FILES = 8
_HASH_CHUNK = 8 * 2**20


@dataclass(frozen=True)
class _Shard:
    """What the reader keeps of one shard: its path, rows and row-group boundaries."""

    file: str
    path: str
    rows: int
    row_group_starts: tuple[int, ...]  # first row of each row group, in the shard


@dataclass
class _RowGroup:
    """One decoded, checked row group: column arrays plus flat tokens with offsets."""

    doc_id: list[str]
    doc_key: npt.NDArray[np.uint64]
    window_index: npt.NDArray[np.int32]
    start: npt.NDArray[np.int64]
    length: npt.NDArray[np.int32]
    loss_start: npt.NDArray[np.int32]
    doc_tokens: npt.NDArray[np.int64]
    token_values: npt.NDArray[np.int32]
    token_offsets: npt.NDArray[np.int64]
    nbytes: int


def _open_root(path: str | os.PathLike[str]) -> tuple[pafs.FileSystem, str, str]:
    """The filesystem, the root path inside it, and the name to show in messages."""
    text = os.fspath(path)
    if "://" in text:
        fs, root = pafs.FileSystem.from_uri(text)
        return fs, root.rstrip("/"), text.rstrip("/")
    root = os.path.abspath(text)
    return pafs.LocalFileSystem(), root, root


def _same_type(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Type equality that ignores the nullability of list items (a writer detail)."""
    if pa.types.is_list(expected):
        return pa.types.is_list(actual) and actual.value_type == expected.value_type
    return actual == expected


class WindowDataset:
    """The windows of a finished output, with random access and lazy, bounded reads.

    Args:
        path: the output directory: a local path or a URI that ``pyarrow.fs`` opens.
        verify: also check each shard's SHA-256 against the manifest (reads every byte once).
        cache_bytes: the decoded row groups one process keeps, in bytes (at least one row group
            is always kept). Each ``DataLoader`` worker has its own cache.

    Raises:
        FileNotFoundError: the manifest or a shard it lists does not exist.
        ValueError: the manifest is invalid, of another format or version, or disagrees with
            a shard (row count, columns, checksum), or the counts disagree.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        verify: bool = False,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        if not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise ValueError(f"`cache_bytes` must be a non-negative integer, but got {cache_bytes}")
        self._fs, self._root, self.path = _open_root(path)
        self._cache_bytes = cache_bytes
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
        self._reset_process_state()

    # -- opening and checking -------------------------------------------------------------

    def _where(self, name: str) -> str:
        return f"{self.path}/{name}"

    def _read_manifest(self) -> dict[str, Any]:
        where = self._where(MANIFEST_NAME)
        info = self._fs.get_file_info(f"{self._root}/{MANIFEST_NAME}")
        if info.type != pafs.FileType.File:
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
        starts, total = [], 0
        for g in range(metadata.num_row_groups):
            starts.append(total)
            total += metadata.row_group(g).num_rows
        return _Shard(file=file, path=path, rows=rows, row_group_starts=tuple(starts))

    def _sha256(self, path: str) -> str:
        h = hashlib.sha256()
        with self._fs.open_input_stream(path) as f:
            while chunk := f.read(_HASH_CHUNK):
                h.update(chunk)
        return h.hexdigest()

    # -- per-process state: open files and the row-group cache ----------------------------

    def _reset_process_state(self) -> None:
        self._pid = os.getpid()
        self._files: OrderedDict[int, tuple[Any, pq.ParquetFile]] = OrderedDict()
        self._cache: OrderedDict[tuple[int, int], _RowGroup] = OrderedDict()
        self._cached_bytes = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_files", "_cache", "_cached_bytes", "_pid"):
            state.pop(key)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_process_state()

    def close(self) -> None:
        """Close the open shard files and empty the cache (they reopen on the next read)."""
        if self._pid == os.getpid():
            for handle, _ in self._files.values():
                handle.close()
        self._reset_process_state()

    def _parquet(self, s: int) -> pq.ParquetFile:
        if self._pid != os.getpid():
            # A forked worker: the inherited handles belong to the parent.
            self._reset_process_state()
        entry = self._files.get(s)
        if entry is not None:
            self._files.move_to_end(s)
            return entry[1]
        handle = self._fs.open_input_file(self._shards[s].path)
        pf = pq.ParquetFile(handle, **integrity.READ_OPTIONS)
        self._files[s] = (handle, pf)
        while len(self._files) > _MAX_OPEN_FILES:
            _, (old, _) = self._files.popitem(last=False)
            old.close()
        return pf

    def _row_group(self, s: int, g: int) -> _RowGroup:
        if self._pid != os.getpid():
            self._reset_process_state()
        key = (s, g)
        group = self._cache.get(key)
        if group is not None:
            self._cache.move_to_end(key)
            return group
        group = self._load(s, g)
        self._cache[key] = group
        self._cached_bytes += group.nbytes
        while self._cached_bytes > self._cache_bytes and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._cached_bytes -= old.nbytes
        return group

    def _load(self, s: int, g: int) -> _RowGroup:
        shard = self._shards[s]
        try:
            table = self._parquet(s).read_row_group(g, columns=list(COLUMNS), use_threads=False)
        except (OSError, ValueError) as e:  # pyarrow's errors name no file
            raise integrity.read_error(e, where=self._where(shard.file), row_group=g) from e
        tokens = table.column("tokens").combine_chunks()
        if tokens.null_count:
            raise ValueError(f"shard {self._where(shard.file)}: null tokens in row group {g}")
        offsets = np.asarray(tokens.offsets, dtype=np.int64)
        values = np.asarray(tokens.values, dtype=np.int32)[offsets[0] : offsets[-1]]
        offsets = offsets - offsets[0]

        def col(name: str, dtype: type) -> np.ndarray:
            return table.column(name).to_numpy().astype(dtype, copy=False)

        group = _RowGroup(
            doc_id=table.column("doc_id").to_pylist(),
            doc_key=col("doc_key", np.uint64),
            window_index=col("window_index", np.int32),
            start=col("start", np.int64),
            length=col("length", np.int32),
            loss_start=col("loss_start", np.int32),
            doc_tokens=col("doc_tokens", np.int64),
            token_values=values,
            token_offsets=offsets,
            nbytes=0,
        )
        self._check_rows(s, g, group)
        group.nbytes = (
            values.nbytes
            + offsets.nbytes
            + 41 * len(offsets)  # the fixed-width columns, per row
            + sum(len(d) + 49 for d in group.doc_id)  # a rough size of a Python str
        )
        return group

    def _check_rows(self, s: int, g: int, group: _RowGroup) -> None:
        """Check a freshly loaded row group, vectorised; name the first bad row."""
        shard = self._shards[s]
        first = shard.row_group_starts[g]

        def fail(local: int, why: str) -> None:
            row = first + int(local)
            raise ValueError(
                f"shard {self._where(shard.file)} row {row} (dataset index "
                f"{self._shard_starts[s] + row}): {why}"
            )

        values = group.token_values
        bad = (values < 0) | (values >= self.vocab_size)
        if bad.any():
            at = int(np.flatnonzero(bad)[0])
            local = int(np.searchsorted(group.token_offsets, at, side="right")) - 1
            fail(local, f"token id {int(values[at])} is outside the vocabulary "
                        f"[0, {self.vocab_size}) of the manifest")
        length = group.length.astype(np.int64)
        sizes = np.diff(group.token_offsets)
        checks = (
            ((length < 1) | (length > self.window),
             lambda j: f"length {length[j]} is outside [1, {self.window}] (the window)"),
            (sizes != length + 1,
             lambda j: f"tokens has {sizes[j]} ids, but length {length[j]} needs {length[j] + 1}"),
            ((group.loss_start < 0) | (group.loss_start >= length),
             lambda j: f"loss_start {group.loss_start[j]} is outside [0, {length[j]})"),
        )
        for mask, why in checks:
            if mask.any():
                j = int(np.flatnonzero(mask)[0])
                fail(j, why(j))

    # -- access ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    def _locate(self, index: int) -> tuple[int, int, int]:
        """(shard, row group, row in the row group) of a global index."""
        i = index.__index__() if not isinstance(index, int) else index
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"index {index} is out of range for {self._len} windows")
        s = bisect.bisect_right(self._shard_starts, i) - 1
        # Empty shards share their start with the next one; bisect_right skips them.
        row = i - self._shard_starts[s]
        starts = self._shards[s].row_group_starts
        g = bisect.bisect_right(starts, row) - 1
        return s, g, row - starts[g]

    def _window(self, group: _RowGroup, j: int, index: int) -> dict[str, Any]:
        lo, hi = group.token_offsets[j], group.token_offsets[j + 1]
        return {
            # A copy, so a window kept by the caller does not pin the whole row group.
            "tokens": group.token_values[lo:hi].copy(),
            "start": int(group.start[j]),
            "length": int(group.length[j]),
            "loss_start": int(group.loss_start[j]),
            "doc_id": group.doc_id[j],
            "doc_key": int(group.doc_key[j]),
            "window_index": int(group.window_index[j]),
            "doc_tokens": int(group.doc_tokens[j]),
            "index": index,
        }

    def __getitem__(self, index: int) -> dict[str, Any]:
        """The window at global index ``index`` (negative indices count from the end)."""
        s, g, j = self._locate(index)
        i = self._shard_starts[s] + self._shards[s].row_group_starts[g] + j
        return self._window(self._row_group(s, g), j, i)

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Several windows at once, loading each needed row group once (``DataLoader`` uses it)."""
        located = [self._locate(i) for i in indices]
        out: list[dict[str, Any] | None] = [None] * len(located)
        order = sorted(range(len(located)), key=lambda k: located[k][:2])
        for k in order:
            s, g, j = located[k]
            i = self._shard_starts[s] + self._shards[s].row_group_starts[g] + j
            out[k] = self._window(self._row_group(s, g), j, i)
        return out  # type: ignore[return-value]

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
