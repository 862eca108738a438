"""Building one shard's layout (`reader.data.layout`): read, check, convert, and digest.

`write_layout` converts a (downloaded, hashed) Parquet shard into the flat arrays of a layout
directory. On the way it checks the footer against the manifest
(`reader.data.integrity.check_footer`), verifies every page checksum, checks every row (token ids
in the vocabulary, ``1 <= length <= window``, ``len(tokens) == length + 1``,
``0 <= loss_start < length``) and the rows' BOS/EOS (`reader.data.integrity.check_content`), and
records in ``layout.json`` what it checked against and a digest of every file it wrote
(`file_digest`): its size, its SHA-256 and the digest of sampled pages (`sample_digest`), so
that reuse can check the files cheaply (sampled pages) or surely (SHA-256, with
``verify=True``).

Example: a shard of 3 windows gives ``tokens.bin`` of 9 ids and ``layout.json`` with
``files["tokens.bin"] == {"bytes": 18, "sha256": ..., "sample": ...}`` (uint16 ids).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reader.data import integrity
from reader.data.regular import NotRegularFileError, file_kind, open_regular
from transforms.dataset.manifest import Manifest
from transforms.errors import DamagedDataset
from transforms.json_fields import JsonObject

__all__ = ["FILES", "RECORD", "SAMPLE_PAGES", "WINDOW_FIELDS", "ShardSource", "download",
           "file_digest", "files_problem", "sample_digest", "sha256_local", "write_layout"]

# One record per window. ``shard`` is 0 in a shard's layout; the dataset index
# (`reader.data.layout.LayoutCache.build_dataset_index`) concatenates the shards' records and sets
# it.
RECORD = np.dtype([("lo", "<i8"), ("start", "<i8"), ("doc_tokens", "<i8"), ("doc_key", "<u8"),
                   ("length", "<i4"), ("loss_start", "<i4"), ("window_index", "<i4"),
                   ("shard", "<u4")])
# The integer fields of a window that its record keeps and `reader.WindowDataset` items carry.
WINDOW_FIELDS = ("start", "length", "loss_start", "doc_tokens", "doc_key", "window_index")
_DTYPES = {name: RECORD.fields[name][0] for name in RECORD.names}

# The files of a layout, but layout.json; nothing else is ever opened or removed by name.
FILES = ("doc_id_offsets.npy", "doc_ids.bin", "doc_rows.npy", "tokens.bin", "windows.npy")
SAMPLE_PAGES = 16
_PAGE = 4096
_COPY_CHUNK = 8 * 2**20


@dataclasses.dataclass(frozen=True, kw_only=True)
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
        manifest: the dataset's parsed manifest (ids must be in ``[0, vocab_size)``,
            lengths in ``[1, window]``, BOS/EOS its own; the footer must agree with it).
        index: the shard's position in the manifest.
    """

    fs: pafs.FileSystem
    path: str
    where: str
    sha256: str
    stamp: tuple[int, int]
    rows: int
    first_index: int
    manifest: Manifest
    index: int

    @property
    def vocab_size(self) -> int:
        return self.manifest.tokenizer.vocab_size

    @property
    def window(self) -> int:
        return self.manifest.windows.window

    def checked(self) -> JsonObject:
        """What a layout built from this shard was checked against (``layout.json``'s
        ``checked``): reused only for a manifest that says the same."""
        m, entry = self.manifest, self.manifest.shards[self.index]
        return {"vocab_size": self.vocab_size, "window": self.window,
                "bos_id": m.tokenizer.bos_id, "eos_id": m.tokenizer.eos_id,
                "fingerprint": m.fingerprint,
                "position": None if m.fingerprint is None else [self.index, len(m.shards)],
                "entry": {k: getattr(entry, k) for k in integrity.COUNTED}}



# What to do about a file in the cache that is not a regular file (the cache writes only those).
_FIX = "the layout cache holds only files it wrote; remove it (or clear the cache directory)"


def sample_digest(path: str, size: int) -> str:
    """BLAKE2b of ``SAMPLE_PAGES`` pages of 4 KiB spread evenly over the file, first and
    last included (the whole file when it is smaller than those pages): a cheap check that
    catches another file of the same size, and most damage."""
    h = hashlib.blake2b(digest_size=16)
    h.update(str(size).encode())
    with open_regular(path, fix=_FIX) as f:
        if size <= _PAGE * SAMPLE_PAGES:
            h.update(f.read())
        else:
            for i in range(SAMPLE_PAGES):
                f.seek((size - _PAGE) * i // (SAMPLE_PAGES - 1))
                h.update(f.read(_PAGE))
    return h.hexdigest()


def sha256_local(path: str) -> str:
    """The SHA-256 of a local file."""
    h = hashlib.sha256()
    with open_regular(path, fix=_FIX) as f:
        while chunk := f.read(_COPY_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def file_digest(path: str) -> JsonObject:
    """What ``layout.json`` records of one file: bytes, SHA-256, sampled-page digest."""
    size = os.stat(path).st_size
    return {"bytes": size, "sha256": sha256_local(path), "sample": sample_digest(path, size)}


def files_problem(directory: str, files: Any, *, verify: bool) -> str | None:
    """Why a layout's files do not match the digests ``layout.json`` records (None: they
    match): sizes always; then sampled pages, or every byte's SHA-256 with ``verify``."""
    if not isinstance(files, dict) or not set(files) <= set(FILES):
        return "its file list is not a layout's"
    for name, want in files.items():
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):  # placed there: refused by name, never removed
                raise NotRegularFileError(f"{path} is not a regular file but "
                                          f"{file_kind(st.st_mode)}; the reader reads only "
                                          f"regular files: {_FIX}")
            size = st.st_size
            if not isinstance(want, dict) or size != want.get("bytes"):
                return (f"{name} has {size} bytes, not the "
                        f"{want.get('bytes') if isinstance(want, dict) else want} recorded")
            if verify:
                if sha256_local(path) != want.get("sha256"):
                    return f"{name} does not hash to the SHA-256 recorded at build"
            elif sample_digest(path, size) != want.get("sample"):
                return f"{name}'s sampled pages are not the ones recorded at build"
        except NotRegularFileError:
            raise  # placed there by someone: refused by name, never read or removed
        except OSError as e:
            return f"{name} cannot be read ({e})"
    return None


def download(fs: pafs.FileSystem, path: str, local: str) -> str:
    """Copy a remote file to ``local``, hashing on the way; returns its SHA-256."""
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
        raise DamagedDataset(
            f"shard {source.where} row {row} (dataset index "
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


def write_layout(source: ShardSource, local: str, out: str) -> JsonObject:
    """Convert the Parquet file ``local`` into a layout in the directory ``out``, checking
    it on the way; returns what ``layout.json`` records of it (but the cache's own keys).

    Raises:
        ValueError: the footer disagrees with the manifest, a page checksum or a row is bad
            (naming the shard, the row and its dataset index), or BOS/EOS are not the
            manifest's.
    """
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
    integrity.check_footer(pf.metadata, pf.schema_arrow, manifest=source.manifest,
                           index=source.index, where=source.where)
    firsts: list[npt.NDArray[Any]] = []
    lasts: list[npt.NDArray[Any]] = []
    with open(os.path.join(out, "tokens.bin"), "wb") as tokens_file:
        for g in range(pf.metadata.num_row_groups):
            try:  # page checksums are verified on the way (pyarrow's errors name no file)
                table = pf.read_row_group(g, columns=["doc_id", "tokens", *WINDOW_FIELDS])
            except (OSError, ValueError) as e:
                raise integrity.read_error(e, where=source.where, row_group=g) from e
            tokens = table.column("tokens").combine_chunks()
            if tokens.null_count:
                raise DamagedDataset(f"shard {source.where}: null tokens in row group {g}")
            off = np.asarray(tokens.offsets, dtype=np.int64)
            values = np.asarray(tokens.values)[off[0] : off[-1]]
            off = off - off[0]
            group = {name: table.column(name).to_numpy().astype(_DTYPES[name], copy=False)
                     for name in WINDOW_FIELDS}
            _check_rows(source, rows, values, off, group)
            firsts.append(values[off[:-1]])
            lasts.append(values[off[1:] - 1])
            tokens_file.write(values.astype(dtype).tobytes())
            rec = np.zeros(table.num_rows, RECORD)
            rec["lo"] = off[:-1] + total
            for name in WINDOW_FIELDS:
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
        raise DamagedDataset(
            f"shard {source.where} holds {rows} rows, but the manifest says "
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
    stats = integrity.check_content(
        **{name: arrays["windows"][name] for name in ("start", "length", "doc_tokens",
                                                      "window_index")},
        first_id=np.concatenate([np.zeros(0, np.int64), *firsts]),
        last_id=np.concatenate([np.zeros(0, np.int64), *lasts]),
        bos=source.manifest.tokenizer.bos_id, eos=source.manifest.tokenizer.eos_id,
        where=source.where)
    return {"rows": rows, "token_dtype": dtype.name,
            "files": {name: file_digest(os.path.join(out, name)) for name in FILES},
            "content": dataclasses.asdict(stats), "built": time.time()}
