"""Records → documents, with every unusable record turned into a counted reject.

Specified in docs/format.md#documents; the reasons and what fails a job instead in
docs/running.md#bad-input.

A document is ``(doc_id, text)``. ``doc_id`` is the record's own id field when
``--id-field`` names one, otherwise the source file relative to its input pattern's base
plus the record's position: ``books/a.jsonl:17`` is line 17 (1-based, as editors and
``sed -n 17p`` count) of ``books/a.jsonl``; ``web/b.parquet:4`` is row 4 (0-based, as
pyarrow counts) of that Parquet file; a one-document-per-file text is its relative path.

Example: pattern ``corpus/*.jsonl`` matches ``corpus/wiki.jsonl``, whose third line is
``{"text": "abc"}``; the document is ``Document(doc_id="wiki.jsonl:3", text="abc", ...)``.

Nothing here reads files: `transforms.inputs.chunks` hands over bytes or Arrow tables, so the same
code serves the local runner and Dataflow workers.
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

from transforms.json_fields import JsonObject
from transforms.params import ReadSpec

__all__ = [
    "JSON_RECORD_SLACK",
    "MAX_REJECT_RECORD_CHARS",
    "TOO_LARGE_HEAD",
    "Document",
    "Reject",
    "parse_lines",
    "parse_parquet",
    "parse_text_file",
    "record_limit",
    "source_order",
    "too_large_record",
]

# A reject keeps at most this much of its record; its source (file:line) locates the rest.
MAX_REJECT_RECORD_CHARS = 1 << 20
# A `too_large` reject keeps the first this many characters of its record.
TOO_LARGE_HEAD = 4096
# A JSONL line may take 4 × --max-doc-bytes plus this many bytes (`record_limit`).
JSON_RECORD_SLACK = 1 << 20


class Document(typing.NamedTuple):
    """One document. ``source`` is the full file path and position, for messages.

    A NamedTuple, the cheapest record Python has, since there is one per input record; build
    it (and `Reject`) with keywords, except on `parse_lines`' path for plain JSONL lines,
    which makes it from the tuple of its four fields at once (``_new_document``).
    """

    doc_id: str
    text: str
    source: str
    repaired: bool = False  # undecodable bytes were replaced by U+FFFD


# tuple.__new__(Document, (doc_id, text, source, repaired)): a Document without the
# keyword-taking constructor's Python frame, for the one place that makes one per line.
_new_document = tuple.__new__


# How a reject's record is written: ``json.dumps(…, ensure_ascii=False, sort_keys=True)``,
# one encoder for every line (json.dumps builds one per call: a quarter of the time of a
# corpus of copies' 170 MB of kept-aside records). Records are flat: no cycle to look for.
_REJECT_LINE = json.JSONEncoder(ensure_ascii=False, sort_keys=True, check_circular=False)


class Reject(typing.NamedTuple):
    """A record that did not become a document, with why and where."""

    reason: str
    source: str
    detail: str
    record: str
    truncated: bool = False  # ``record`` already holds only the start of the record

    def to_json(self) -> JsonObject:
        """The JSON object written to ``_rejects/<reason>.jsonl``."""
        truncated = self.truncated or len(self.record) > MAX_REJECT_RECORD_CHARS
        return {
            "reason": self.reason,
            "source": self.source,
            "detail": self.detail,
            "record": self.record[:MAX_REJECT_RECORD_CHARS],
            "truncated": truncated,
        }

    def to_line(self) -> bytes:
        """Its line of ``rejects/<reason>.jsonl``: `to_json`, sorted keys, UTF-8 (a lone
        surrogate in the record, which UTF-8 cannot hold, as its backslash escape)."""
        return (_REJECT_LINE.encode(self.to_json()) + "\n").encode("utf-8", "backslashreplace")


def source_order(source: str) -> tuple[str, int]:
    """A sort key that puts sources in input order: by file, then by line or row number
    (``a.jsonl:5`` before ``a.jsonl:45``, ``p.parquet#row=9`` before ``p.parquet#row=10``,
    which plain string order would reverse)."""
    for mark in (":", "#row="):
        path, _, position = source.rpartition(mark)
        if path and position.isdigit():
            return path, int(position)
    return source, -1


def record_limit(spec: ReadSpec, fmt: str) -> int:
    r"""The most bytes one raw record (a line, a whole text file, a Parquet value) may take
    before it is rejected as ``too_large`` unread, so that no record is held whole, whatever
    its size, to learn that its text is too long.

    For ``lines``, ``text`` and Parquet the text is the record's bytes (undecodable bytes
    only grow into U+FFFD), less at most a ``\r`` or a byte order mark: a record longer than
    ``--max-doc-bytes`` + 4 holds too much text, and the limit changes no outcome. A JSONL
    line also holds its escapes (``\u00e9`` is 6 bytes for 2 of text, 3× at most outside
    control characters), its id and other fields: it may take 4 × ``--max-doc-bytes`` +
    `JSON_RECORD_SLACK`; a longer one is ``too_large`` even if its text would fit.

    >>> record_limit(ReadSpec(max_doc_bytes=100), "lines"), record_limit(
    ...     ReadSpec(max_doc_bytes=100), "jsonl")
    (104, 1048976)
    """
    if fmt == "jsonl":
        return 4 * spec.max_doc_bytes + JSON_RECORD_SLACK
    return spec.max_doc_bytes + 4


def too_large_record(*, size: int, head: bytes, source: str, spec: ReadSpec,
                     fmt: str) -> Reject:
    """The ``too_large`` reject of a record of ``size`` bytes longer than its `record_limit`,
    read no further than ``head`` (its first bytes) and its length."""
    limit = record_limit(spec, fmt)
    what = "line" if fmt in ("jsonl", "lines") else "value" if fmt == "parquet" else "file"
    rule = (f"the {limit} bytes a JSONL line may take with --max-doc-bytes="
            f"{spec.max_doc_bytes} (4 × it + {JSON_RECORD_SLACK})" if fmt == "jsonl" else
            f"--max-doc-bytes={spec.max_doc_bytes}")
    return Reject(reason="too_large", source=source,
                  detail=f"a {what} of {size} bytes, more than {rule}; not read further",
                  record=_printable(head[:TOO_LARGE_HEAD].decode("utf-8", errors="replace")),
                  truncated=True)


def _decode(raw: bytes, spec: ReadSpec, source: str) -> tuple[str | None, bool, Reject | None]:
    try:
        return raw.decode("utf-8"), False, None
    except UnicodeDecodeError as e:
        text = raw.decode("utf-8", errors="replace")
        if spec.invalid_utf8 == "reject":
            reject = Reject(reason="invalid_utf8", source=source, detail=str(e), record=text)
            return None, False, reject
        return text, True, None


def _without_surrogates(text: str, spec: ReadSpec, source: str,
                        record: str) -> tuple[str | None, bool, Reject | None]:
    """JSON's ``\\ud800`` escapes can give a string with lone surrogates, which no UTF-8
    tokenizer can take. Like undecodable bytes (the same policy, ``--invalid-utf8``), each
    becomes U+FFFD and the document is counted as repaired, or the record is rejected."""
    try:
        text.encode("utf-8")
        return text, False, None
    except UnicodeEncodeError as e:
        if spec.invalid_utf8 == "reject":
            detail = f"lone surrogate in {spec.text_field!r}: {e}"
            return None, False, Reject(reason="invalid_utf8", source=source, detail=detail,
                                       record=_printable(record))
        return _one_replacement_per_surrogate(text), True, None


def _one_replacement_per_surrogate(text: str) -> str:
    return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)


def _printable(record: str) -> str:
    """A record as it can be written to a UTF-8 reject file (lone surrogates escaped)."""
    try:
        record.encode("utf-8")
        return record
    except UnicodeEncodeError:
        return record.encode("utf-8", "backslashreplace").decode("utf-8")


def _document(
    doc_id: str, text: Any, source: str, spec: ReadSpec, repaired: bool, record: str
) -> Document | Reject:
    if text is None:
        return Reject(reason="missing_text", source=source,
                      detail=f"no {spec.text_field!r} field", record=record)
    if not isinstance(text, str):
        return Reject(
            reason="text_not_string",
            source=source,
            detail=f"{spec.text_field!r} holds {type(text).__name__}, not a string",
            record=record,
        )
    if not text and not spec.keep_empty:
        return Reject(reason="empty", source=source,
                      detail="empty text (pass --keep-empty to keep it)", record=record)
    size = len(text.encode("utf-8")) if len(text) * 4 > spec.max_doc_bytes else len(text)
    if size > spec.max_doc_bytes:
        return Reject(
            reason="too_large",
            source=source,
            detail=f"{size} bytes of text, more than --max-doc-bytes={spec.max_doc_bytes}",
            record=text[:TOO_LARGE_HEAD],
            truncated=len(text) > TOO_LARGE_HEAD,
        )
    return Document(doc_id=doc_id, text=text, source=source, repaired=repaired)


def _record_id(record: JsonObject, spec: ReadSpec, source: str, raw: str) -> str | Reject:
    value = record.get(spec.id_field)  # type: ignore[arg-type]
    if value is None:
        return Reject(reason="missing_id", source=source, detail=f"no {spec.id_field!r} field",
                      record=raw)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return Reject(reason="invalid_id", source=source,
                      detail=f"{spec.id_field!r} holds {type(value).__name__}", record=raw)
    if value == "":
        return Reject(reason="invalid_id", source=source, detail=f"{spec.id_field!r} is empty",
                      record=raw)
    if isinstance(value, str) and _printable(value) != value:
        return Reject(reason="invalid_id", source=source,
                      detail=f"{spec.id_field!r} holds a lone surrogate, not UTF-8 text",
                      record=_printable(raw))
    return str(value)


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

    An unremarkable JSONL line is parsed by orjson when it is installed: valid UTF-8 holding
    a JSON object whose text is a non-empty string (short enough not to need a size check)
    and whose id, if asked for, is a non-empty string or an integer. orjson refuses what
    `json` would read differently (lone surrogates, NaN, huge numbers), so every other line,
    good or bad, takes the `json` path and gets exactly the document or reject it always got.

    Args:
        data: whole lines of the file, newline-terminated except perhaps the file's last.
        fmt: ``lines`` (each line a document) or ``jsonl`` (each line a JSON object).
        path: the file's full path, for messages; rel: its id prefix.
        first_line: the 1-based line number of the first line in ``data``.
        spec: the reading options.
    """
    fast = fmt == "jsonl" and _orjson is not None
    if fast:  # the per-line work of the common case, looked up once
        loads, invalid = _orjson.loads, _orjson.JSONDecodeError  # type: ignore[union-attr]
        text_field, id_field, max_bytes = spec.text_field, spec.id_field, spec.max_doc_bytes
    limit = record_limit(spec, fmt)
    # Each line is a view of ``data`` (what ``data.split(b"\n")`` gives, less a last empty
    # line), copied only where the slow path needs its bytes: no copy of the chunk per line.
    view, end, pos, number = memoryview(data), len(data), 0, first_line - 1
    while pos < end:
        stop = data.find(b"\n", pos)
        if stop == -1:
            stop = end
        lo, pos, number = pos, stop + 1, number + 1
        if stop - lo > limit:  # never parsed: its text cannot fit, or it is a hostile line
            yield too_large_record(size=stop - lo, head=data[lo : min(stop, lo + TOO_LARGE_HEAD)],
                                   source=f"{path}:{number}", spec=spec, fmt=fmt)
            continue
        if stop > lo and data[stop - 1] == 13:  # b"\r"
            stop -= 1
        if fast:
            try:
                record = loads(view[lo:stop])
            except invalid:
                record = None
            if type(record) is dict:
                text = record.get(text_field)
                if type(text) is str and text and len(text) * 4 <= max_bytes:
                    if id_field is None:
                        doc_id: str | None = f"{rel}:{number}"
                    else:
                        value = record.get(id_field)
                        doc_id = (value if type(value) is str and value else
                                  str(value) if type(value) is int else None)
                    if doc_id is not None:
                        yield _new_document(Document, (doc_id, text, f"{path}:{number}", False))
                        continue
        raw = data[lo:stop]
        source = f"{path}:{number}"
        try:
            yield _line_item(raw, fmt=fmt, doc_id=f"{rel}:{number}", source=source, spec=spec)
        except Exception as e:  # one record's failure is its reject, never the job's
            yield Reject(reason="unreadable_record", source=source,
                         detail=f"{type(e).__name__}: {e}",
                         record=_printable(raw.decode("utf-8", errors="replace")))


def _line_item(raw: bytes, *, fmt: str, doc_id: str, source: str,
               spec: ReadSpec) -> Document | Reject:
    """The document or reject of one line (``lines`` or ``jsonl``)."""
    text, repaired, reject = _decode(raw, spec, source)
    if text is None:
        return reject  # type: ignore[return-value]
    if fmt == "lines":
        return _document(doc_id, text, source, spec, repaired, text)
    if not text.strip():
        return Reject(reason="blank_line", source=source,
                      detail="a blank line in a JSONL file", record=text)
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        return Reject(reason="malformed_json", source=source, detail=str(e), record=text)
    except RecursionError:
        return Reject(reason="malformed_json", source=source,
                      detail="JSON nested too deeply to parse", record=text)
    if not isinstance(record, dict):
        return Reject(reason="not_an_object", source=source,
                      detail=f"a JSON {type(record).__name__}, not an object", record=text)
    if spec.id_field is not None:
        doc_id_or_reject = _record_id(record, spec, source, text)
        if isinstance(doc_id_or_reject, Reject):
            return doc_id_or_reject
        doc_id = doc_id_or_reject
    value = record.get(spec.text_field)
    if isinstance(value, str):
        value, fixed, reject = _without_surrogates(value, spec, source, text)
        if reject is not None:
            return reject
        repaired = repaired or fixed
    return _document(doc_id, value, source, spec, repaired, _printable(text))


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
        try:
            yield _parquet_item(text, None if ids is None else ids[i], doc_id=f"{rel}:{row}",
                                source=source, spec=spec)
        except Exception as e:  # one record's failure is its reject, never the job's
            yield Reject(reason="unreadable_record", source=source,
                         detail=f"{type(e).__name__}: {e}", record=_printable(repr(text)))


def _parquet_item(text: Any, row_id: Any, *, doc_id: str, source: str,
                  spec: ReadSpec) -> Document | Reject:
    raw = text if isinstance(text, str) else repr(text)
    if isinstance(text, bytes):
        decoded, repaired, reject = _decode(text, spec, source)
        if reject is not None:
            return reject
        text = decoded
    else:
        repaired = False
    if spec.id_field is not None:
        found = _record_id({spec.id_field: row_id}, spec, source, raw)
        if isinstance(found, Reject):
            return found
        doc_id = found
    return _document(doc_id, text, source, spec, repaired, raw)
