"""Records → documents, with every unusable record turned into a counted reject (SPEC §2, §7).

A document is ``(doc_id, text)``. ``doc_id`` is the record's own id field when
``--id-field`` names one, otherwise the source file relative to its input pattern's base
plus the record's position: ``books/a.jsonl:17`` is line 17 (1-based, as editors and
``sed -n 17p`` count) of ``books/a.jsonl``; ``web/b.parquet:4`` is row 4 (0-based, as
pyarrow counts) of that Parquet file; a one-document-per-file text is its relative path.

Example: pattern ``corpus/*.jsonl`` matches ``corpus/wiki.jsonl``, whose third line is
``{"text": "abc"}``; the document is ``Document(doc_id="wiki.jsonl:3", text="abc", ...)``.

Nothing here reads files: the pipeline hands over bytes or Arrow tables, so the same code
serves the DirectRunner and Dataflow workers.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

try:  # optional: parses JSONL about 3× faster; used only where it agrees with `json`
    import orjson as _orjson
except ImportError:  # pragma: no cover - the json module alone gives the same documents
    _orjson = None

from transforms.params import ReadSpec

__all__ = [
    "COMPRESSIONS",
    "MAX_REJECT_RECORD_CHARS",
    "Document",
    "Receipt",
    "Reject",
    "account_inputs",
    "detect_format",
    "line_starts_in",
    "parse_lines",
    "parse_parquet",
    "parse_text_file",
    "pattern_base",
    "relative_name",
    "source_order",
]

COMPRESSIONS = {".gz": "gzip", ".bz2": "bzip2", ".zst": "zstd"}
_EXTENSIONS = {
    ".txt": "text",
    ".text": "text",
    ".md": "text",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
}
# A reject keeps at most this much of its record; its source (file:line) locates the rest.
MAX_REJECT_RECORD_CHARS = 1 << 20


class Document(typing.NamedTuple):
    """One document. ``source`` is the full file path and position, for messages."""

    doc_id: str
    text: str
    source: str
    repaired: bool = False  # undecodable bytes were replaced by U+FFFD


class Reject(typing.NamedTuple):
    """A record that did not become a document, with why and where."""

    reason: str
    source: str
    detail: str
    record: str

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to ``rejects/<reason>.jsonl``."""
        truncated = len(self.record) > MAX_REJECT_RECORD_CHARS
        return {
            "reason": self.reason,
            "source": self.source,
            "detail": self.detail,
            "record": self.record[:MAX_REJECT_RECORD_CHARS],
            "truncated": truncated,
        }


class Receipt(typing.NamedTuple):
    """What one parsed piece of an input file says about itself.

    ``start``/``end`` are byte offsets, or row-group indices for Parquet, in ``[0, extent)``;
    ``extent`` is the file's size in bytes, or its number of row groups.
    """

    path: str
    size: int
    extent: int
    start: int
    end: int
    records: int


def account_inputs(receipts: Iterable[Receipt], expected: dict[str, int] | None) -> int:
    """The number of records read, after checking that every input was read exactly once.

    The pieces of each file must tile ``[0, extent)`` with no gap and no overlap, and, when
    ``expected`` ({path: size} as matched before the job started) is given, every expected
    file must be there with its size and no other. A runner that lost or repeated work
    thus fails the job instead of writing a dataset that silently lacks (or doubles) part of
    its input.

    Raises:
        RuntimeError: naming the file and what is wrong with it.
    """
    by_path: dict[str, list[Receipt]] = {}
    for r in receipts:
        by_path.setdefault(r.path, []).append(r)
    if expected is not None:
        missing = sorted(set(expected) - set(by_path))
        if missing:
            raise RuntimeError(
                f"{len(missing)} input files were never read (e.g. {missing[0]}): the runner "
                "lost work; no manifest was written, rerun the job"
            )
        extra = sorted(set(by_path) - set(expected))
        if extra:
            raise RuntimeError(
                f"{extra[0]} was read but did not match when the job started: inputs changed "
                "while the job ran; no manifest was written"
            )
    total = 0
    for path, pieces in sorted(by_path.items()):
        pieces.sort(key=lambda r: (r.start, r.end))
        sizes = {(r.size, r.extent) for r in pieces}
        if len(sizes) != 1 or (expected is not None and pieces[0].size != expected[path]):
            raise RuntimeError(
                f"{path} changed size while the job ran ({sorted(sizes)}, expected "
                f"{expected.get(path) if expected else '?'} bytes); no manifest was written"
            )
        position = 0
        for r in pieces:
            if r.start != position:
                what = "was read twice" if r.start < position else "was never read"
                raise RuntimeError(
                    f"{path}: the range [{min(r.start, position)}, {max(r.start, position)}) "
                    f"{what}: the runner lost or repeated work; no manifest was written"
                )
            position = r.end
            total += r.records
        if position != pieces[0].extent:
            raise RuntimeError(
                f"{path}: the range [{position}, {pieces[0].extent}) was never read: the "
                "runner lost work; no manifest was written"
            )
    return total


def source_order(source: str) -> tuple[str, int]:
    """A sort key that puts sources in input order: by file, then by line or row number
    (``a.jsonl:5`` before ``a.jsonl:45``, which plain string order would reverse)."""
    path, _, position = source.rpartition(":")
    if path and position.isdigit():
        return path, int(position)
    return source, -1


def pattern_base(pattern: str) -> str:
    """The directory part of a pattern before its first glob character, with a final '/'.

    >>> pattern_base("gs://b/corpus/*/part-*.jsonl.gz")
    'gs://b/corpus/'
    """
    cut = len(pattern)
    for ch in "*?[":
        i = pattern.find(ch)
        if i != -1:
            cut = min(cut, i)
    return pattern[: pattern.rfind("/", 0, cut) + 1]


def relative_name(path: str, base: str) -> str:
    """The path of a matched file relative to its pattern's base (stable across machines)."""
    return path[len(base) :] if base and path.startswith(base) else path.rsplit("/", 1)[-1]


def detect_format(path: str, forced: str | None) -> tuple[str, str | None]:
    """(format, compression) of a file from its extension, unless ``forced``.

    Raises:
        ValueError: the extension says nothing and no format was given.
    """
    stem, compression = path, None
    for ext, kind in COMPRESSIONS.items():
        if path.endswith(ext):
            stem, compression = path[: -len(ext)], kind
            break
    if forced is not None:
        return forced, compression
    dot = stem.rfind(".")
    fmt = _EXTENSIONS.get(stem[dot:].lower()) if dot > stem.rfind("/") else None
    if fmt is None:
        raise ValueError(
            f"cannot tell the format of {path} from its extension; pass --format "
            "text|lines|jsonl|parquet"
        )
    return fmt, compression


def line_starts_in(data: bytes, start: int, end: int) -> int:
    """How many lines of a file begin at a byte offset in [start, end).

    ``data`` holds the file's bytes ``[max(start − 1, 0), end)``: the byte before the range
    tells whether the range begins a line. Lines begin at offset 0 and after every newline
    that is not the file's last byte; a newline at offset ``end − 1`` begins a line in the
    next range, so it is not counted here.
    """
    first = 1 if start == 0 and end > 0 else 0
    return first + data.count(b"\n", 0, end - 1 - max(start - 1, 0))


def _decode(raw: bytes, spec: ReadSpec, source: str) -> tuple[str | None, bool, Reject | None]:
    try:
        return raw.decode("utf-8"), False, None
    except UnicodeDecodeError as e:
        text = raw.decode("utf-8", errors="replace")
        if spec.invalid_utf8 == "reject":
            return None, False, Reject("invalid_utf8", source, str(e), text)
        return text, True, None


def _document(
    doc_id: str, text: Any, source: str, spec: ReadSpec, repaired: bool, record: str
) -> Document | Reject:
    if text is None:
        return Reject("missing_text", source, f"no {spec.text_field!r} field", record)
    if not isinstance(text, str):
        return Reject(
            "text_not_string",
            source,
            f"{spec.text_field!r} holds {type(text).__name__}, not a string",
            record,
        )
    if not text and not spec.keep_empty:
        return Reject("empty", source, "empty text (pass --keep-empty to keep it)", record)
    size = len(text.encode("utf-8")) if len(text) * 4 > spec.max_doc_bytes else len(text)
    if size > spec.max_doc_bytes:
        return Reject(
            "too_large",
            source,
            f"{size} bytes of text, more than --max-doc-bytes={spec.max_doc_bytes}",
            text[:4096],
        )
    return Document(doc_id, text, source, repaired)


def _record_id(record: dict[str, Any], spec: ReadSpec, source: str, raw: str) -> str | Reject:
    value = record.get(spec.id_field)  # type: ignore[arg-type]
    if value is None:
        return Reject("missing_id", source, f"no {spec.id_field!r} field", raw)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return Reject(
            "invalid_id", source, f"{spec.id_field!r} holds {type(value).__name__}", raw
        )
    if value == "":
        return Reject("invalid_id", source, f"{spec.id_field!r} is empty", raw)
    return str(value)


def _plain_jsonl_document(
    raw: bytes, number: int, path: str, rel: str, spec: ReadSpec
) -> Document | None:
    """The document of an unremarkable JSONL line, parsed by orjson; None for any other line.

    Unremarkable: valid UTF-8 holding a JSON object whose text is a non-empty string (short
    enough not to need a size check) and whose id, if asked for, is a non-empty string or an
    integer. orjson refuses what `json` would read differently (lone surrogates, NaN, huge
    numbers), so every other line, good or bad, takes the `json` path and gets exactly the
    document or reject it always got.
    """
    try:
        record = _orjson.loads(raw)  # type: ignore[union-attr]
    except _orjson.JSONDecodeError:  # type: ignore[union-attr]
        return None
    if type(record) is not dict:
        return None
    text = record.get(spec.text_field)
    if type(text) is not str or not text or len(text) * 4 > spec.max_doc_bytes:
        return None
    if spec.id_field is None:
        return Document(f"{rel}:{number}", text, f"{path}:{number}")
    value = record.get(spec.id_field)
    if type(value) is str and value:
        return Document(value, text, f"{path}:{number}")
    if type(value) is int:
        return Document(str(value), text, f"{path}:{number}")
    return None


def parse_lines(
    data: bytes,
    *,
    fmt: str,
    path: str,
    rel: str,
    first_line: int,
    spec: ReadSpec,
) -> Iterator[Document | Reject]:
    """Parse complete lines (``lines`` or ``jsonl``) that begin at line ``first_line``.

    Args:
        data: whole lines of the file, newline-terminated except perhaps the file's last.
        fmt: ``lines`` (each line a document) or ``jsonl`` (each line a JSON object).
        path: the file's full path, for messages; rel: its id prefix.
        first_line: the 1-based line number of the first line in ``data``.
        spec: the reading options.
    """
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    fast = fmt == "jsonl" and _orjson is not None
    for number, raw in enumerate(lines, start=first_line):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if fast:
            doc = _plain_jsonl_document(raw, number, path, rel, spec)
            if doc is not None:
                yield doc
                continue
        source = f"{path}:{number}"
        text, repaired, reject = _decode(raw, spec, source)
        if text is None:
            yield reject  # type: ignore[misc]
            continue
        if fmt == "lines":
            yield _document(f"{rel}:{number}", text, source, spec, repaired, text)
            continue
        if not text.strip():
            yield Reject("blank_line", source, "a blank line in a JSONL file", text)
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as e:
            yield Reject("malformed_json", source, str(e), text)
            continue
        if not isinstance(record, dict):
            yield Reject(
                "not_an_object", source, f"a JSON {type(record).__name__}, not an object", text
            )
            continue
        doc_id: str | Reject = f"{rel}:{number}"
        if spec.id_field is not None:
            doc_id = _record_id(record, spec, source, text)
            if isinstance(doc_id, Reject):
                yield doc_id
                continue
        yield _document(doc_id, record.get(spec.text_field), source, spec, repaired, text)


def parse_text_file(data: bytes, *, path: str, rel: str, spec: ReadSpec) -> Document | Reject:
    """A whole file as one document; its id is the relative path."""
    text, repaired, reject = _decode(data, spec, path)
    if text is None:
        return reject  # type: ignore[return-value]
    return _document(rel, text, path, spec, repaired, text)


def parse_parquet(
    table: pa.Table, *, path: str, rel: str, first_row: int, spec: ReadSpec
) -> Iterable[Document | Reject]:
    """Parse the rows of (a row range of) a Parquet file that begins at row ``first_row``.

    Raises:
        ValueError: the file has no column named ``text_field`` (or ``id_field``): every row
            would fail the same way, so the job stops naming the file and the columns.
    """
    names = table.column_names
    for field in (spec.text_field, spec.id_field):
        if field is not None and field not in names:
            raise ValueError(
                f"{path} has no column {field!r} (columns: {', '.join(names)}); pass "
                "--text-field / --id-field naming the right columns"
            )
    texts = table.column(spec.text_field).to_pylist()
    ids = table.column(spec.id_field).to_pylist() if spec.id_field else None
    for i, text in enumerate(texts):
        row = first_row + i
        source = f"{path}#row={row}"
        raw = text if isinstance(text, str) else repr(text)
        if isinstance(text, bytes):
            decoded, repaired, reject = _decode(text, spec, source)
            if reject is not None:
                yield reject
                continue
            text = decoded
        else:
            repaired = False
        doc_id: str | Reject = f"{rel}:{row}"
        if ids is not None:
            doc_id = _record_id({spec.id_field: ids[i]}, spec, source, raw)
            if isinstance(doc_id, Reject):
                yield doc_id
                continue
        yield _document(doc_id, text, source, spec, repaired, raw)
