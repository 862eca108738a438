"""The manifest: its records, serialised and parsed here alone (docs/format.md#the-manifest).

``_manifest.json`` is written last, once every shard and reject file is complete: a directory
without it is not a dataset. Each object of it is a frozen record, built by the writer
(`transforms.shards.manifest_build`) and parsed by every reader (`read_manifest`)::

    format, format_version            "token-windows", 1
    tokenizer   TokenizerInfo         kind, vocab_size, bos_id, eos_id, sha256 (null: bytes)
    windows     WindowsInfo           window, stride, tail, min_tail, score, offset, seed
    inputs, reading                   the --input patterns; how records became documents
    counts      Counts                records, documents, documents_without_windows,
                                      skipped {reason: n}, repaired {invalid_utf8: n},
                                      windows, tokens, pairs, scored_targets, uncovered_pairs
    num_shards, row_group_rows
    shards      ShardEntry            [{file, rows, documents, tokens, scored_targets, bytes,
                                        sha256}] in file order
    versions                          the packages that shape the bytes
    fingerprint                       `job_fingerprint`, also in every shard's footer
    sample      SampleInfo            with --sample: {fraction, seed}
    split       SplitInfo             in a split's manifest: {name, splits, split_seed, job}
    dedup       DedupInfo             with --dedup or --decontaminate: {mode, ngram, bands,
                                      rows, scheme, decontaminate: Decontamination {ngram,
                                      files: {name: removed}}}

A split job also writes ``OUTPUT/_splits.json`` (docs/format.md#the-splits-record), a
`SplitsRecord` (`parse_splits_record`). `read_manifest` checks every value that becomes a
path, an index or a count before anything uses it: a SHA-256 is 64 lowercase hex digits;
shard i of N is named ``part-i-of-N`` (no directory, so the list is in the files' order);
counts are non-negative integers (never a bool); BOS and EOS are below the vocabulary size;
the shards' rows, tokens, documents and scored targets add up to ``counts``. Both parse into
the frozen records above, which readers use as such; `dumps_manifest` is deterministic
(sorted keys, fixed indentation, final newline): ``dumps_manifest(read_manifest(data)) ==
data``.

Example: ``read_manifest(text).shards[0].file == "part-00000-of-00002.parquet"``; a manifest
whose ``shards[0].sha256`` is ``"/home/me" + "/" * 56`` raises ``ValueError: …:
shards[0].sha256 must be 64 lowercase hex digits (a SHA-256), but got '/home/me///…'``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

from transforms.dataset.schema import FORMAT, FORMAT_VERSION, SHARD_PATTERN, shard_file_name
from transforms.errors import DamagedDataset, DatasetError
from transforms.json_fields import Fields, JsonObject, JsonValue

__all__ = ["DEDUP_MODES", "LEGACY_MANIFEST_NAME", "MANIFEST_NAME", "OFFSETS", "SCORES",
           "SPLITS_FORMAT", "TAILS", "Counts", "Decontamination", "DedupInfo", "Manifest",
           "SampleInfo", "ShardEntry", "SplitEntry", "SplitFraction", "SplitInfo", "SplitJob",
           "SplitsRecord", "TokenizerInfo", "WindowsInfo", "dumps_manifest",
           "parse_splits_record", "read_manifest"]

MANIFEST_NAME = "_manifest.json"
# Its name in datasets written by token-windows 0.1.0; readers refuse it with the fix.
LEGACY_MANIFEST_NAME = "manifest.json"
SPLITS_FORMAT = "token-windows-splits"

TAILS, SCORES, OFFSETS = ("keep", "drop", "trace_back"), ("all", "new"), ("zero", "random")
DEDUP_MODES = ("off", "exact", "near")


def _set(record: object) -> JsonObject:
    """A record's fields as JSON, the unset (None) ones left out."""
    return {k: v for k, v in dataclasses.asdict(record).items() if v is not None}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenizerInfo:
    """The manifest's ``tokenizer`` (`transforms.tokenize.tokenizers.Tokenizer.info`): ``engine``,
    the library that ran a ``tokenizer.json``, when set; ``extra``, the rest (file, path …)."""

    kind: str
    vocab_size: int
    bos_id: int
    eos_id: int
    sha256: str | None
    engine: str | None = None
    extra: Mapping[str, JsonValue] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, value: object, *, where: str) -> TokenizerInfo:
        f = Fields(value, "tokenizer", where)
        info = cls(kind=f.text("kind"), vocab_size=f.count("vocab_size"),
                   bos_id=f.count("bos_id"), eos_id=f.count("eos_id"),
                   sha256=f.text("sha256", null=True),
                   engine=f.text("engine") if "engine" in f.value else None,
                   extra={k: v for k, v in f.value.items() if k not in _TOKENIZER_KEYS})
        for key in ("bos_id", "eos_id"):
            if info.vocab_size and getattr(info, key) >= info.vocab_size:
                raise f.fail(key, f"must be below vocab_size {info.vocab_size}, but got "
                                  f"{getattr(info, key)}")
        return info

    def _text(self, key: str) -> str | None:
        value = self.extra.get(key)
        return value if isinstance(value, str) else None

    @property
    def file(self) -> str | None:
        """The model file's name (``extra["file"]``; None for bytes or when not a string)."""
        return self._text("file")

    @property
    def path(self) -> str | None:
        """The model file's path as the job was given it (``extra["path"]``)."""
        return self._text("path")

    @property
    def bos_token(self) -> str | None:
        """A ``tokenizer.json``'s BOS token string (``extra["bos_token"]``)."""
        return self._text("bos_token")

    @property
    def eos_token(self) -> str | None:
        """A ``tokenizer.json``'s EOS token string (``extra["eos_token"]``)."""
        return self._text("eos_token")

    def to_json(self) -> JsonObject:
        """The manifest's ``tokenizer`` object (``engine`` only when set)."""
        return {**self.extra, "kind": self.kind, "vocab_size": self.vocab_size,
                "bos_id": self.bos_id, "eos_id": self.eos_id, "sha256": self.sha256,
                **({} if self.engine is None else {"engine": self.engine})}


_TOKENIZER_KEYS = ("kind", "vocab_size", "bos_id", "eos_id", "sha256", "engine")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowsInfo:
    """The manifest's ``windows``: the window parameters and the seed
    (`transforms.params.WindowSpec`, docs/format.md#windows)."""

    window: int
    stride: int
    tail: str
    min_tail: int
    score: str
    offset: str
    seed: int

    @classmethod
    def from_json(cls, value: object, *, where: str) -> WindowsInfo:
        f = Fields(value, "windows", where)
        return cls(window=f.count("window", 1), stride=f.count("stride", 1),
                   tail=f.text("tail", choices=TAILS), min_tail=f.count("min_tail", 1),
                   score=f.text("score", choices=SCORES),
                   offset=f.text("offset", choices=OFFSETS), seed=f.count("seed"))

    def to_json(self) -> JsonObject:
        """The manifest's ``windows`` object."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Counts:
    """The manifest's ``counts`` (computed by the job from the rows); also the whole job's in
    a `SplitsRecord`. ``records``, ``repaired`` and ``sampled_out`` are None when absent."""

    documents: int
    documents_without_windows: int
    windows: int
    tokens: int
    pairs: int
    scored_targets: int
    uncovered_pairs: int
    skipped: dict[str, int]
    records: int | None = None  # the writer's fields below; older manifests may lack them
    repaired: dict[str, int] | None = None
    sampled_out: int | None = None

    def to_json(self) -> JsonObject:
        """The manifest's ``counts`` object (the optional counts only when set)."""
        return _set(self)

    @classmethod
    def from_json(cls, value: object, *, where: str) -> Counts:
        f = Fields(value, "counts", where)
        return cls(documents=f.count("documents"),
                   documents_without_windows=f.count("documents_without_windows", 0, 0),
                   windows=f.count("windows"), tokens=f.count("tokens"), pairs=f.count("pairs"),
                   scored_targets=f.count("scored_targets"),
                   uncovered_pairs=f.count("uncovered_pairs"), skipped=f.counts("skipped"),
                   records=f.count("records", 0, None), sampled_out=f.count("sampled_out", 0, None),
                   repaired=f.counts("repaired") if "repaired" in f.value else None)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardEntry:
    """One of the manifest's ``shards``: a file name of the format, its counts and SHA-256."""

    file: str
    rows: int
    scored_targets: int
    sha256: str
    documents: int | None = None
    tokens: int | None = None
    bytes: int | None = None

    @classmethod
    def from_json(cls, value: object, *, index: int, where: str) -> ShardEntry:
        f = Fields(value, f"shards[{index}]", where)
        file = f.text("file")
        if not SHARD_PATTERN.match(file):
            raise f.fail("file", f"must be a shard name like 'part-00000-of-00001.parquet' "
                                 f"(no directory), but got {file!r}")
        return cls(file=file, rows=f.count("rows"), scored_targets=f.count("scored_targets"),
                   sha256=f.sha256("sha256"), documents=f.count("documents", 0, None),
                   tokens=f.count("tokens", 0, None), bytes=f.count("bytes", 0, None))

    def to_json(self) -> JsonObject:
        """The manifest's entry for this shard."""
        return _set(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SampleInfo:
    """The manifest's ``sample`` (``--sample``): the share of documents kept, and its seed."""

    fraction: float
    seed: int

    @classmethod
    def from_json(cls, value: object, *, where: str) -> SampleInfo:
        f = Fields(value, "sample", where)
        return cls(fraction=f.fraction("fraction"), seed=f.count("seed"))

    def to_json(self) -> JsonObject:
        """The manifest's ``sample`` object."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SplitFraction:
    """One split of a ``--split`` definition: its name and share of the documents."""

    name: str
    fraction: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class SplitJob:
    """A split's manifest's ``split.job``: the whole job's record and document counts."""

    records: int
    documents: dict[str, int]  # {split name: its documents}
    skipped: dict[str, int]
    sampled_out: int
    fingerprint: str

    @classmethod
    def from_json(cls, value: object, *, where: str) -> SplitJob:
        f = Fields(value, "split.job", where)
        return cls(records=f.count("records"), documents=f.counts("documents"),
                   skipped=f.counts("skipped"), sampled_out=f.count("sampled_out"),
                   fingerprint=f.sha256("fingerprint"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SplitInfo:
    """A split's manifest's ``split``: its name (a directory name), the job's split definition
    (`transforms.plan.splits.SplitSpec.split_fractions`) and the job's record (None when absent)."""

    name: str
    splits: tuple[SplitFraction, ...] = ()
    split_seed: int | None = None
    job: SplitJob | None = None

    @classmethod
    def from_json(cls, value: object, *, where: str) -> SplitInfo:
        f = Fields(value, "split", where)
        name = f.text("name")
        if not name or name in (".", "..") or "/" in name or "\\" in name:
            raise DamagedDataset(f"{where}: split.name must be a directory name, but got {name!r}")
        listed = f.value.get("splits", [])
        if not isinstance(listed, list):
            raise f.fail("splits", f"must be a list, but got {listed!r}")
        splits = []
        for i, entry in enumerate(listed):
            g = Fields(entry, f"split.splits[{i}]", where)
            splits.append(SplitFraction(name=g.text("name"), fraction=g.fraction("fraction")))
        job = None
        if "job" in f.value:
            job = SplitJob.from_json(f.value["job"], where=where)
        return cls(name=name, splits=tuple(splits), split_seed=f.count("split_seed", 0, None),
                   job=job)

    def to_json(self) -> JsonObject:
        """The manifest's ``split`` object (what is unset left out)."""
        out = _set(self)
        out["splits"] = [dataclasses.asdict(s) for s in self.splits]
        if not self.splits:
            del out["splits"]
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decontamination:
    """The manifest's ``dedup.decontaminate`` (``--decontaminate``): the n of the word n-grams
    shared with an evaluation text, and the documents each evaluation file removed (every file
    by its name relative to its pattern, zeros too); ``extra``, keys of a later version."""

    ngram: int
    files: dict[str, int]
    extra: Mapping[str, JsonValue] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, value: object, *, where: str) -> Decontamination:
        f = Fields(value, "dedup.decontaminate", where)
        return cls(ngram=f.count("ngram", 1), files=f.counts("files"),
                   extra={k: v for k, v in f.value.items() if k not in ("ngram", "files")})

    def to_json(self) -> JsonObject:
        """The manifest's ``dedup.decontaminate`` object (keys sorted, as the file holds it)."""
        return dict(sorted({**self.extra, "ngram": self.ngram, "files": dict(self.files)}.items()))


@dataclasses.dataclass(frozen=True, kw_only=True)
class DedupInfo:
    """The manifest's ``dedup`` (``--dedup``, ``--decontaminate``; `transforms.dedup.removal.
    RemovalSpec.to_json`): the mode, the MinHash parameters and scheme (``near`` only, else
    None), the decontamination (None without it); ``extra``, keys of a later version."""

    mode: str
    ngram: int | None = None
    bands: int | None = None
    rows: int | None = None
    scheme: str | None = None
    decontaminate: Decontamination | None = None
    extra: Mapping[str, JsonValue] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, value: object, *, where: str) -> DedupInfo:
        """The manifest's ``dedup`` object, checked: a mode, positive parameters, and for each
        evaluation file a count of the documents it removed."""
        f = Fields(value, "dedup", where)
        return cls(mode=f.text("mode", choices=DEDUP_MODES), ngram=f.count("ngram", 1, None),
                   bands=f.count("bands", 1, None), rows=f.count("rows", 1, None),
                   scheme=f.text("scheme") if "scheme" in f.value else None,
                   decontaminate=Decontamination.from_json(f.value["decontaminate"], where=where)
                   if "decontaminate" in f.value else None,
                   extra={k: v for k, v in f.value.items() if k not in _DEDUP_KEYS})

    def to_json(self) -> JsonObject:
        """The manifest's ``dedup`` object (what is unset left out; keys sorted, as the file
        holds it)."""
        optional = {"ngram": self.ngram, "bands": self.bands, "rows": self.rows,
                    "scheme": self.scheme, "decontaminate": None if self.decontaminate is None
                    else self.decontaminate.to_json()}
        out = {**self.extra, "mode": self.mode,
               **{k: v for k, v in optional.items() if v is not None}}
        return dict(sorted(out.items()))


_DEDUP_KEYS = ("mode", "ngram", "bands", "rows", "scheme", "decontaminate")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Manifest:
    """A manifest (`read_manifest`, `dumps_manifest`): None for what is absent; ``extra``
    keeps unknown keys, so that a manifest reads back as it was written."""

    tokenizer: TokenizerInfo
    windows: WindowsInfo
    inputs: tuple[str, ...]
    counts: Counts
    shards: tuple[ShardEntry, ...]
    num_shards: int | None = None  # None: absent (then the length of ``shards``)
    # `transforms.params.ReadSpec.to_json`, kept as JSON: only carried (into the fingerprint
    # and _splits.json), never read back, and another version's keys must read back as written.
    reading: JsonObject | None = None
    row_group_rows: int | None = None
    versions: dict[str, str] | None = None
    fingerprint: str | None = None
    sample: SampleInfo | None = None
    split: SplitInfo | None = None
    dedup: DedupInfo | None = None  # absent from a job without --dedup or --decontaminate
    extra: Mapping[str, JsonValue] = dataclasses.field(default_factory=dict)

    def to_json(self) -> JsonObject:
        """The manifest as the JSON object ``_manifest.json`` holds."""
        optional = {"num_shards": self.num_shards, "reading": self.reading,
                    "dedup": None if self.dedup is None else self.dedup.to_json(),
                    "row_group_rows": self.row_group_rows, "versions": self.versions,
                    "fingerprint": self.fingerprint,
                    "sample": None if self.sample is None else self.sample.to_json(),
                    "split": None if self.split is None else self.split.to_json()}
        return {**self.extra, "format": FORMAT, "format_version": FORMAT_VERSION,
                "tokenizer": self.tokenizer.to_json(), "windows": self.windows.to_json(),
                "inputs": list(self.inputs), "counts": self.counts.to_json(),
                "shards": [s.to_json() for s in self.shards],
                **{k: v for k, v in optional.items() if v is not None}}


_MANIFEST_KEYS = ("format", "format_version", "tokenizer", "windows", "inputs", "counts",
                  "shards", "num_shards", "reading", "row_group_rows", "versions",
                  "fingerprint", "sample", "split", "dedup")


def read_manifest(data: bytes | str, *, where: str = MANIFEST_NAME) -> Manifest:
    """Parse and check a manifest; ``where`` names the file in error messages.

    Raises:
        DamagedDataset: the text is not JSON, lacks a key, a value has the wrong type or
            range, or the shards disagree with each other or the counts.
        DatasetError: another format or format version.
    """
    manifest = _load(data, where, "dataset")
    if manifest.get("format") != FORMAT:
        raise DatasetError(
            f"{where} has format {manifest.get('format')!r}, but this reader reads {FORMAT!r}")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise DatasetError(
            f"{where} has format_version {manifest.get('format_version')!r}, but this reader "
            f"reads version {FORMAT_VERSION}; install the version of the project that wrote it")
    for key in ("tokenizer", "windows", "inputs", "counts", "shards"):
        if key not in manifest:
            raise DamagedDataset(f"{where} lacks the key {key!r}; the dataset is damaged")
    for key in ("inputs", "shards"):
        if not isinstance(manifest[key], list):
            raise DamagedDataset(f"{where}: {key} must be a list, but got {manifest[key]!r}")
    f = Fields(manifest, "", where)
    for key, kind in (("reading", dict), ("versions", dict)):
        if not isinstance(manifest.get(key, {}), kind):
            raise f.fail(key, f"must be an object, but got {manifest[key]!r}")
    parsed = Manifest(
        tokenizer=TokenizerInfo.from_json(manifest["tokenizer"], where=where),
        windows=WindowsInfo.from_json(manifest["windows"], where=where),
        inputs=tuple(manifest["inputs"]),
        counts=Counts.from_json(manifest["counts"], where=where),
        shards=tuple(ShardEntry.from_json(s, index=i, where=where)
                     for i, s in enumerate(manifest["shards"])),
        num_shards=manifest.get("num_shards"), reading=manifest.get("reading"),
        row_group_rows=f.count("row_group_rows", 1, None), versions=manifest.get("versions"),
        fingerprint=f.sha256("fingerprint", null=True) if "fingerprint" in manifest else None,
        sample=SampleInfo.from_json(manifest["sample"], where=where)
        if "sample" in manifest else None,
        split=SplitInfo.from_json(manifest["split"], where=where)
        if "split" in manifest else None,
        dedup=DedupInfo.from_json(manifest["dedup"], where=where)
        if "dedup" in manifest else None,
        extra={k: v for k, v in manifest.items() if k not in _MANIFEST_KEYS})
    _check_shard_list(parsed, where=where)
    return parsed


def _load(data: bytes | str, where: str, what: str) -> JsonObject:
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise DamagedDataset(f"{where} is not valid JSON ({e}); the {what} is damaged") from e
    if not isinstance(value, dict):
        raise DamagedDataset(f"{where} must hold a JSON object, but holds {type(value).__name__}")
    return value


def _check_shard_list(m: Manifest, *, where: str) -> None:
    """The invariants a manifest holds by itself: names in order, sums equal the counts."""
    n = len(m.shards)
    said = n if m.num_shards is None else m.num_shards
    if said != n or isinstance(said, bool):
        raise DamagedDataset(
            f"{where}: num_shards is {said!r}, but it lists {n} shards; the "
            "dataset is damaged")
    for i, s in enumerate(m.shards):
        if s.file != shard_file_name(i, n):
            raise DamagedDataset(
                f"{where}: shards[{i}] is {s.file!r}, but shard {i} of {n} is "
                f"{shard_file_name(i, n)!r}: the shard list was edited or reordered; the "
                "dataset is damaged")
    for key, total in (("rows", "windows"), ("scored_targets", "scored_targets"),
                       ("tokens", "tokens"), ("documents", "documents")):
        values = [getattr(s, key) for s in m.shards]
        if any(v is None for v in values):
            continue
        if sum(values) != getattr(m.counts, total):
            raise DamagedDataset(
                f"{where} says counts.{total} is {getattr(m.counts, total)}, but its shards' "
                f"{key} add up to {sum(values)}; the dataset is damaged")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SplitEntry:
    """One of ``_splits.json``'s ``splits`` (its manifest's SHA-256 ties it to this run)."""

    name: str
    dir: str
    fraction: float
    num_shards: int
    fingerprint: str
    manifest_sha256: str
    documents: int
    windows: int
    tokens: int
    scored_targets: int

    @classmethod
    def from_json(cls, value: object, *, index: int, where: str) -> SplitEntry:
        f = Fields(value, f"splits[{index}]", where)
        name, directory = f.text("name"), f.text("dir")
        for key, text in (("name", name), ("dir", directory)):
            if not text or text in (".", "..") or "/" in text or "\\" in text:
                raise f.fail(key, f"must be a directory name, but got {text!r}")
        return cls(name=name, dir=directory, fraction=f.fraction("fraction"),
                   num_shards=f.count("num_shards"), fingerprint=f.text("fingerprint"),
                   manifest_sha256=f.sha256("manifest_sha256"), documents=f.count("documents"),
                   windows=f.count("windows"), tokens=f.count("tokens"),
                   scored_targets=f.count("scored_targets"))

    def to_json(self) -> JsonObject:
        """``_splits.json``'s entry for this split."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SplitsRecord:
    """``OUTPUT/_splits.json``, written after every split's manifest (`build_splits_record`)
    and read back by `parse_splits_record`."""

    tokenizer: TokenizerInfo
    windows: WindowsInfo
    inputs: tuple[str, ...]
    reading: JsonObject | None  # as in the manifests: carried, never read
    split_seed: int
    sample: SampleInfo | None
    counts: Counts  # the whole job's: records = Σ documents + skipped + sampled_out
    splits: tuple[SplitEntry, ...]
    versions: dict[str, str] | None
    fingerprint: str
    dedup: DedupInfo | None = None  # the job's, as in each split's manifest

    def to_json(self) -> JsonObject:
        """The JSON object ``_splits.json`` holds."""
        return {"format": SPLITS_FORMAT, "format_version": FORMAT_VERSION,
                "tokenizer": self.tokenizer.to_json(), "windows": self.windows.to_json(),
                "inputs": list(self.inputs), "reading": self.reading, "split_seed": self.split_seed,
                **({} if self.sample is None else {"sample": self.sample.to_json()}),
                "counts": self.counts.to_json(),
                "splits": [s.to_json() for s in self.splits],
                "versions": self.versions, "fingerprint": self.fingerprint,
                **({} if self.dedup is None else {"dedup": self.dedup.to_json()})}

    @classmethod
    def from_json(cls, value: object, *, where: str) -> SplitsRecord:
        f = Fields(value, "", where)
        for key in _SPLITS_KEYS:
            if key not in f.value:
                raise DamagedDataset(f"{where} lacks the key {key!r}; the output is damaged")
        for key in ("inputs", "splits"):
            if not isinstance(f.get(key), list):
                raise f.fail(key, f"must be a list, but got {f.value[key]!r}")
        for key in ("reading", "versions"):
            if not isinstance(f.get(key), dict | None):
                raise f.fail(key, f"must be an object or null, but got {f.value[key]!r}")
        return cls(
            tokenizer=TokenizerInfo.from_json(f.get("tokenizer"), where=where),
            windows=WindowsInfo.from_json(f.get("windows"), where=where),
            inputs=tuple(f.value["inputs"]), reading=f.value["reading"],
            split_seed=f.count("split_seed"),
            sample=SampleInfo.from_json(f.value["sample"], where=where)
            if "sample" in f.value else None,
            counts=Counts.from_json(f.get("counts"), where=where),
            splits=tuple(SplitEntry.from_json(s, index=i, where=where)
                         for i, s in enumerate(f.value["splits"])),
            versions=f.value["versions"], fingerprint=f.text("fingerprint"),
            dedup=DedupInfo.from_json(f.value["dedup"], where=where)
            if "dedup" in f.value else None)


_SPLITS_KEYS = ("tokenizer", "windows", "inputs", "reading", "split_seed", "counts", "splits",
                "versions", "fingerprint")


def parse_splits_record(data: bytes | str, *, where: str) -> SplitsRecord:
    """Parse and check ``_splits.json``; ``where`` names the file in error messages.

    Raises:
        DamagedDataset: the text is not JSON, not a split record, lacks a key, or a value has
            the wrong type or range.
    """
    record = _load(data, where, "output")
    if record.get("format") != SPLITS_FORMAT:
        raise DamagedDataset(f"{where} is not a token-windows split record")
    splits = record.get("splits")
    if not isinstance(splits, list) or not all(
            isinstance(s, dict) and isinstance(s.get("name"), str) for s in splits):
        raise DamagedDataset(
            f"{where}: splits must be a list of objects with a name; the output "
            "is damaged")
    counts = record.get("counts")
    if not isinstance(counts, dict) or not isinstance(counts.get("skipped"), dict):
        raise DamagedDataset(f"{where} lacks counts.skipped; the output is damaged")
    return SplitsRecord.from_json(record, where=where)


def dumps_manifest(manifest: Manifest | SplitsRecord) -> bytes:
    """A manifest or splits record as bytes, deterministically (sorted keys, an indent of 2,
    a final newline): ``_manifest.json`` and ``_splits.json`` as written."""
    text = json.dumps(manifest.to_json(), sort_keys=True, indent=2, ensure_ascii=False)
    return (text + "\n").encode()
