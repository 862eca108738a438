"""Opening a dataset: the one path by which `reader.WindowDataset`, ``reader.inspect`` and
``reader.prepare`` (and so a mixture of datasets) find and check a finished output.

What is checked, and when (`docs/integrity.md#the-reader`):

* **On open, always** (one read of the manifest and one listing of the directory, whatever
  the number of shards): the manifest parses (`transforms.dataset.manifest.read_manifest`: every
  value that becomes a path, an index or a count is validated, shard i of N is named
  ``part-i-of-N``, the shards' counts add up to ``counts``), every shard it lists exists, and
  a split of a ``--split`` job has its job's ``_splits.json`` naming this very manifest.
* **When a shard is first read** (its layout is built, `reader.data.layout`): its footer
  (`reader.data.integrity.check_footer`), its SHA-256, its page checksums, every row and its
  BOS/EOS (`reader.data.integrity.check_content`). A cached layout records what was checked and
  is used only for a manifest that says the same.
* **With** ``verify=True`` (and by ``inspect --check``): all of that for every shard at once,
  read from the dataset itself (`verify_files`), and the totals the rows give
  (`reader.data.integrity.check_totals`).

Example::

    files = open_files("out/sample")        # raises on a damaged or unfinished dataset
    verify_files(files)                     # reads every shard once
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import urllib.parse
from collections.abc import Callable

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reader.data import integrity
from reader.data.regular import check_regular
from transforms.dataset.manifest import (
    LEGACY_MANIFEST_NAME,
    MANIFEST_NAME,
    Manifest,
    parse_splits_record,
    read_manifest,
)
from transforms.dataset.schema import shard_file_name
from transforms.errors import DamagedDataset, ForeignDataset, MissingShard, UnfinishedDataset
from transforms.plan.splits import SPLITS_NAME, split_job_message

__all__ = ["DatasetFiles", "Location", "ShardFile", "locate", "open_files", "read_column",
           "read_footer", "row_groups", "sha256_of", "verify_files"]

_HASH_CHUNK = 8 * 2**20


@dataclasses.dataclass(frozen=True)
class Location:
    """A dataset's filesystem, its root path in it, and the name shown in messages."""

    fs: pafs.FileSystem
    root: str
    shown: str

    def where(self, name: str) -> str:
        return f"{self.shown}/{name}"

    def outside(self, directory: str | os.PathLike[str]) -> str:
        """``directory``, absolute, if it is not inside the dataset (a cache must not be).

        Raises:
            ValueError: it is inside.
        """
        path = os.path.abspath(os.fspath(directory))
        if isinstance(self.fs, pafs.LocalFileSystem):
            root = os.path.realpath(self.root)
            if os.path.commonpath([root, os.path.realpath(path)]) == root:
                raise ValueError(f"`cache_dir` must be outside the dataset directory "
                                 f"{self.shown}, but got {path}")
        return path


def locate(path: str | os.PathLike[str], filesystem: pafs.FileSystem | None = None) -> Location:
    """Where ``path`` is: a local path, a URI ``pyarrow.fs`` opens, or a path in
    ``filesystem``. Messages show a URI without credentials or query options."""
    text = os.fspath(path)
    if filesystem is not None:
        root = text.rstrip("/") or text
        return Location(filesystem, root, f"{filesystem.type_name}:{root}")
    if "://" in text:
        fs, root = pafs.FileSystem.from_uri(text)
        parts = urllib.parse.urlsplit(text)
        shown = f"{parts.scheme}://{parts.hostname or ''}{parts.path}".rstrip("/")
        return Location(fs, root.rstrip("/") or root, shown)
    root = os.path.abspath(text)
    return Location(pafs.LocalFileSystem(), root, root)


@dataclasses.dataclass(frozen=True)
class ShardFile:
    """One shard as found on open: its name, path, manifest entry's rows and SHA-256, and
    the (size, mtime in ns) of the file then."""

    index: int
    file: str
    path: str
    where: str
    rows: int
    sha256: str
    stamp: tuple[int, int]


@dataclasses.dataclass(frozen=True)
class DatasetFiles:
    """An opened dataset: where it is, its parsed manifest and its shards."""

    location: Location
    manifest: Manifest
    shards: tuple[ShardFile, ...]

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the shards' SHA-256s in order: names the data (for sampler states and
        the cache's dataset index)."""
        return hashlib.sha256("".join(s.sha256 for s in self.shards).encode()).hexdigest()


def _is_file(fs: pafs.FileSystem, path: str, shown: str | None = None) -> bool:
    """Whether ``path`` is there; anything there but a regular file is refused by name."""
    return check_regular(fs, path, shown=shown or path)


def _read(fs: pafs.FileSystem, path: str) -> bytes:
    with fs.open_input_stream(path) as f:
        return f.read()


def _missing_manifest(loc: Location) -> FileNotFoundError:
    if _is_file(loc.fs, f"{loc.root}/{LEGACY_MANIFEST_NAME}", loc.where(LEGACY_MANIFEST_NAME)):
        return UnfinishedDataset(
            f"{loc.shown} holds {LEGACY_MANIFEST_NAME}, the name token-windows 0.1.0 gave the "
            f"manifest; this version reads {MANIFEST_NAME} (so that Parquet readers skip it): "
            "rename it, and rejects/ to _rejects/; the shards need no change")
    splits = f"{loc.root}/{SPLITS_NAME}"
    if _is_file(loc.fs, splits, loc.where(SPLITS_NAME)):
        record = parse_splits_record(_read(loc.fs, splits), where=loc.where(SPLITS_NAME))
        return UnfinishedDataset(split_job_message(loc.shown, [s.name for s in record.splits]))
    message = (f"{loc.where(MANIFEST_NAME)} not found: a directory without a manifest is not a "
               "finished dataset (the pipeline writes the manifest last, after every shard is "
               "complete)")
    if loc.fs.get_file_info(loc.root).type == pafs.FileType.NotFound:
        # No directory at all: more likely a wrong path than a job still running.
        return FileNotFoundError(message)
    return UnfinishedDataset(message)


def _check_split_record(loc: Location, manifest: Manifest, data: bytes) -> None:
    """A split's manifest must be named by its job's ``_splits.json``, written last."""
    name = manifest.split.name  # type: ignore[union-attr]
    parent = loc.root.rsplit("/", 1)[0] if "/" in loc.root.strip("/") else ""
    shown_parent = loc.shown.rsplit("/", 1)[0]
    job = f"the job that wrote {shown_parent} (with --overwrite)"
    path = f"{parent}/{SPLITS_NAME}"
    if not parent or not _is_file(loc.fs, path, f"{shown_parent}/{SPLITS_NAME}"):
        raise UnfinishedDataset(
            f"{loc.shown} is the split {name!r} of a --split job, but {shown_parent}/"
            f"{SPLITS_NAME}, which the job writes after every split, is missing: the job did "
            f"not finish; rerun {job}, or pass allow_unfinished=True to open it anyway")
    record = parse_splits_record(_read(loc.fs, path), where=f"{shown_parent}/{SPLITS_NAME}")
    mine = [s for s in record.splits if s.name == name]
    digest = hashlib.sha256(data).hexdigest()
    if not mine or mine[0].manifest_sha256 != digest:
        raise ForeignDataset(
            f"{shown_parent}/{SPLITS_NAME} does not record {loc.where(MANIFEST_NAME)} (SHA-256 "
            f"{digest}) as its split {name!r}: the split comes from another run of the job; "
            f"rerun {job}, or pass allow_unfinished=True to open it anyway")


# The first shard the manifest lists, as its serialisation writes it (a JSON string cannot
# hold an unescaped quote, so this is a key and its value, never text inside another value).
_FIRST_SHARD = re.compile(rb'"file": *"part-(0{5,})-of-(\d{5,})\.parquet"')
_HEAD = 1 << 20  # bytes of the manifest read to find it


def _check_shard(loc: Location, name: str, info: pafs.FileInfo | None) -> None:
    """A shard the manifest lists must be in the listing, as a regular file."""
    if info is None:
        raise MissingShard(
            f"shard {loc.where(name)}, listed in the manifest, does not exist")
    if info.type != pafs.FileType.File:
        check_regular(loc.fs, f"{loc.root}/{name}", shown=f"shard {loc.where(name)}",
                      fix="a shard is a Parquet file the job wrote; restore it, or rerun the "
                      "job")


def _check_listing(loc: Location, head: bytes, listed: dict[str, pafs.FileInfo]) -> None:
    """Before the manifest is parsed: the shard count its first shard's name gives
    (``part-00000-of-N``: the manifest must list exactly ``part-i-of-N``, i < N, in order),
    against the directory listing. A manifest listing millions of shards of which some are
    missing is refused by the first missing name at the cost of the listing, not of parsing
    every entry. ``head``: the manifest's first bytes."""
    found = _FIRST_SHARD.search(head)
    if found is None:
        return  # parsed in full next, which finds what is wrong
    n = int(found.group(2))
    of = f"-of-{found.group(2).decode()}.parquet"
    present = sum(1 for name, info in listed.items()
                  if name.endswith(of) and info.type == pafs.FileType.File)
    if present >= n:
        return
    if shard_file_name(0, n).endswith(of):
        for i in range(n):  # the first one missing: at most ``present`` + 1 names
            name = shard_file_name(i, n)
            _check_shard(loc, name, listed.get(name))
    raise MissingShard(  # names of another width than shard_name's: count only
        f"{loc.where(MANIFEST_NAME)} lists {n} shards (part-…{of}), but only {present} are "
        f"in {loc.shown}: the dataset is incomplete; copy it again, or rerun the job")


def open_files(path: str | os.PathLike[str], *, filesystem: pafs.FileSystem | None = None,
               allow_unfinished: bool = False) -> DatasetFiles:
    """Open a finished dataset: read and check its manifest, find every shard it lists.

    Args:
        path: the dataset directory (local, or a URI ``pyarrow.fs`` opens).
        filesystem: a ``pyarrow.fs.FileSystem`` in which ``path`` is a path.
        allow_unfinished: open a split whose job's ``_splits.json`` is missing or names
            another manifest (to look at what a killed job left; never to train on).

    Raises:
        UnfinishedDataset: no manifest (a dataset under the old name, or a split job's top
            directory, is refused with the fix), or an unfinished split; a
            ``FileNotFoundError``, plain when ``path`` names no directory at all.
        MissingShard: a shard the manifest lists is missing (a ``FileNotFoundError``).
        DamagedDataset: the manifest is damaged or disagrees with itself.
        ForeignDataset: a split that its job's record does not name (another run).
        DatasetError: a manifest of another format or version.
    """
    loc = locate(path, filesystem)
    manifest_path = f"{loc.root}/{MANIFEST_NAME}"
    if not _is_file(loc.fs, manifest_path, loc.where(MANIFEST_NAME)):
        raise _missing_manifest(loc)
    # One listing for every shard (one round trip per page, not per shard, when remote).
    listed = {os.path.basename(info.path): info
              for info in loc.fs.get_file_info(pafs.FileSelector(loc.root))}
    with loc.fs.open_input_stream(manifest_path) as f:
        head = f.read(_HEAD)
        _check_listing(loc, head, listed)
        data = head + f.read()
    manifest = read_manifest(data, where=loc.where(MANIFEST_NAME))
    if manifest.split is not None and not allow_unfinished:
        _check_split_record(loc, manifest, data)
    shards = []
    for i, entry in enumerate(manifest.shards):
        info = listed.get(entry.file)
        _check_shard(loc, entry.file, info)
        assert info is not None
        mtime = info.mtime_ns if info.mtime_ns is not None else -1
        shards.append(ShardFile(index=i, file=entry.file, path=f"{loc.root}/{entry.file}",
                                where=loc.where(entry.file), rows=entry.rows,
                                sha256=entry.sha256,
                                stamp=(int(info.size or 0), int(mtime))))
    return DatasetFiles(location=loc, manifest=manifest, shards=tuple(shards))


def read_footer(files: DatasetFiles, s: int) -> pq.FileMetaData:
    """Shard ``s``'s footer, checked against the manifest (`reader.data.integrity.check_footer`)."""
    shard = files.shards[s]
    with files.location.fs.open_input_file(shard.path) as f:
        try:
            pf = pq.ParquetFile(f, **integrity.READ_OPTIONS)
        except (OSError, ValueError) as e:
            raise integrity.footer_error(e, where=shard.where) from e
        metadata, schema = pf.metadata, pf.schema_arrow
    integrity.check_footer(metadata, schema, manifest=files.manifest, index=s,
                           where=shard.where)
    return metadata


def row_groups(files: DatasetFiles, s: int) -> tuple[int, ...]:
    """The rows of each row group of shard ``s``, from its (checked) footer."""
    metadata = read_footer(files, s)
    return tuple(metadata.row_group(g).num_rows for g in range(metadata.num_row_groups))


def read_column(files: DatasetFiles, s: int, name: str) -> np.ndarray:
    """One column of shard ``s`` (its footer checked first), page checksums verified."""
    read_footer(files, s)
    shard = files.shards[s]
    with files.location.fs.open_input_file(shard.path) as f:
        try:
            table = pq.ParquetFile(f, **integrity.READ_OPTIONS).read(columns=[name])
        except (OSError, ValueError) as e:
            raise integrity.read_error(e, where=shard.where, row_group=-1) from e
    return table.column(name).to_numpy()


def sha256_of(fs: pafs.FileSystem, path: str) -> str:
    """The SHA-256 of a file, read in chunks."""
    h = hashlib.sha256()
    with fs.open_input_stream(path) as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _content(files: DatasetFiles, s: int, metadata: pq.FileMetaData) -> integrity.ContentStats:
    shard = files.shards[s]
    names = ("start", "length", "doc_tokens", "window_index")
    parts: dict[str, list[np.ndarray]] = {n: [] for n in (*names, "first", "last")}
    with files.location.fs.open_input_file(shard.path) as f:
        pf = pq.ParquetFile(f, **integrity.READ_OPTIONS)
        for g in range(metadata.num_row_groups):
            try:
                table = pf.read_row_group(g, columns=[*names, "tokens"])
            except (OSError, ValueError) as e:
                raise integrity.read_error(e, where=shard.where, row_group=g) from e
            tokens = table.column("tokens").combine_chunks()
            off = np.asarray(tokens.offsets, dtype=np.int64)
            values = np.asarray(tokens.values)
            sizes = np.diff(off)
            if (sizes < 1).any():
                raise DamagedDataset(f"shard {shard.where}, row group {g}: a window stores no id")
            for n in names:
                parts[n].append(table.column(n).to_numpy())
            parts["first"].append(values[off[:-1] - off[0]])
            parts["last"].append(values[off[1:] - off[0] - 1])
    cat = {n: np.concatenate(v) if v else np.zeros(0, np.int64) for n, v in parts.items()}
    tok = files.manifest.tokenizer
    return integrity.check_content(
        start=cat["start"], length=cat["length"], doc_tokens=cat["doc_tokens"],
        window_index=cat["window_index"], first_id=cat["first"], last_id=cat["last"],
        bos=tok.bos_id, eos=tok.eos_id, where=shard.where)


def verify_files(files: DatasetFiles, *, totals: bool = True,
                 known: Callable[[int], integrity.ContentStats | None] | None = None) -> None:
    """Everything `open_files` leaves to the first read, for every shard now: its footer,
    SHA-256, page checksums and BOS/EOS, and (``totals``) the totals the rows give
    (``inspect --check`` recomputes those itself, naming the window that is wrong).
    ``known(s)``: shard ``s``'s `reader.data.integrity.ContentStats` if a check of its rows
    against this manifest is on record (a cached layout built from these bytes), else None:
    its rows are then not decoded again.

    Raises:
        DamagedDataset: naming the shard (or the manifest's count) that disagrees.
        ForeignDataset: naming a shard that another job wrote.
    """
    stats = []
    for s, shard in enumerate(files.shards):
        metadata = read_footer(files, s)
        digest = sha256_of(files.location.fs, shard.path)
        if digest != shard.sha256:
            raise DamagedDataset(
                f"shard {shard.where} has SHA-256 {digest}, but the manifest says "
                f"{shard.sha256}; the file is damaged or was replaced")
        recorded = None if known is None else known(s)
        stats.append(recorded if recorded is not None else _content(files, s, metadata))
    if totals:
        integrity.check_totals(stats, files.manifest.counts,
                               where=files.location.where(MANIFEST_NAME))
