"""`transforms.inputs.documents`: records → documents and rejects (docs/format.md#documents).

Parsing only: how files become chunks and chunks become records is in
tests/transforms/inputs/test_chunks.py.
"""

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.inputs.documents import (
    MAX_REJECT_RECORD_CHARS,
    Document,
    Reject,
    parse_lines,
    parse_parquet,
    parse_text_file,
    source_order,
)
from transforms.params import ReadSpec

SPEC = ReadSpec()


def parse(data, fmt="jsonl", spec=SPEC, first=1):
    return list(parse_lines(data, fmt=fmt, path="/c/a.jsonl", rel="a.jsonl", first_line=first,
                            spec=spec))


def test_jsonl_ids_are_file_and_line():
    out = parse(b'{"text": "abc"}\n{"text": "de"}\n', first=7)
    assert out == [
        Document(doc_id="a.jsonl:7", text="abc", source="/c/a.jsonl:7"),
        Document(doc_id="a.jsonl:8", text="de", source="/c/a.jsonl:8"),
    ]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"{not json", "malformed_json"),
        (b"[1, 2]", "not_an_object"),
        (b'{"title": "x"}', "missing_text"),
        (b'{"text": null}', "missing_text"),
        (b'{"text": 5}', "text_not_string"),
        (b'{"text": ""}', "empty"),
        (b"", "blank_line"),
        (b"  ", "blank_line"),
    ],
)
def test_bad_jsonl_records_are_rejected_with_reason_and_line(line, reason):
    (out,) = parse(b'{"text": "ok"}\n' + line + b"\n")[1:]
    assert isinstance(out, Reject)
    assert (out.reason, out.source) == (reason, "/c/a.jsonl:2")


def test_empty_kept_on_request():
    (doc,) = parse(b'{"text": ""}\n', spec=ReadSpec(keep_empty=True))
    assert doc == Document(doc_id="a.jsonl:1", text="", source="/c/a.jsonl:1")


def test_id_field():
    spec = ReadSpec(id_field="id")
    out = parse(b'{"id": "x1", "text": "a"}\n{"id": 7, "text": "b"}\n{"text": "c"}\n'
                b'{"id": [1], "text": "d"}\n', spec=spec)
    assert [o.doc_id if isinstance(o, Document) else o.reason for o in out] == [
        "x1", "7", "missing_id", "invalid_id",
    ]


def test_invalid_utf8_replaced_and_flagged_or_rejected():
    (doc,) = parse(b'{"text": "a\xffb"}\n')
    assert doc.text == "a\ufffdb" and doc.repaired
    (rej,) = parse(b'{"text": "a\xffb"}\n', spec=ReadSpec(invalid_utf8="reject"))
    assert rej.reason == "invalid_utf8" and rej.source == "/c/a.jsonl:1"


def test_too_large():
    (rej,) = parse(b'{"text": "abcdefgh"}\n', spec=ReadSpec(max_doc_bytes=4))
    assert rej.reason == "too_large" and "8 bytes" in rej.detail


def test_lines_format_and_crlf():
    out = parse(b"one\r\ntwo\n\nfour", fmt="lines")
    assert [(o.doc_id, o.text) if isinstance(o, Document) else o.reason for o in out] == [
        ("a.jsonl:1", "one"), ("a.jsonl:2", "two"), "empty", ("a.jsonl:4", "four"),
    ]


def test_text_file_is_one_document():
    assert parse_text_file(b"hello\nworld\n", path="/c/x/y.txt", rel="x/y.txt", spec=SPEC) == (
        Document(doc_id="x/y.txt", text="hello\nworld\n", source="/c/x/y.txt")
    )


def test_parquet_rows():
    table = pa.table({"text": ["a", None, "", "d"], "id": ["i0", "i1", "i2", "i3"]})
    out = list(parse_parquet(table, path="/p/f.parquet", rel="f.parquet", first_row=10,
                             spec=SPEC))
    assert [o.doc_id if isinstance(o, Document) else (o.reason, o.source) for o in out] == [
        "f.parquet:10", ("missing_text", "/p/f.parquet#row=11"),
        ("empty", "/p/f.parquet#row=12"), "f.parquet:13",
    ]
    with pytest.raises(ValueError, match="has no column 'body'"):
        list(parse_parquet(table, path="/p/f.parquet", rel="f", first_row=0,
                           spec=ReadSpec(text_field="body")))


TRICKY_LINES = [
    b'{"text": "plain", "id": "a"}',
    b'{"text": "esc \\u00e9 \\n \\"q\\"", "id": 7}',
    b'{"text": "lone \\ud800 surrogate", "id": "b"}',
    b'{"text": "x", "id": 123456789012345678901234567890}',
    b'{"text": "x", "id": 1.5}',
    b'{"text": "x", "id": true}',
    b'{"text": "x", "id": ""}',
    b'{"text": "x"}',
    b'{"text": "", "id": "e"}',
    b'{"text": 3, "id": "f"}',
    b'{"id": "g"}',
    b'{"text": "dup", "text": "last wins", "id": "h"}',
    b'{"text": NaN, "id": "i"}',
    b'{"text": "big", "n": 1e400, "id": "j"}',
    b'\xef\xbb\xbf{"text": "bom", "id": "k"}',
    b'{"text": "bad \xff utf8", "id": "l"}',
    b'[1, 2]',
    b'{"text": "trailing"} x',
    b'   ',
    b'',
    b'{"text": "crlf", "id": "m"}\r',
    b'{"text": "' + "長".encode() * 40 + b'", "id": "n"}',
]


@pytest.mark.parametrize(
    "spec",
    [ReadSpec(id_field="id"), ReadSpec(), ReadSpec(keep_empty=True, invalid_utf8="reject"),
     ReadSpec(id_field="id", max_doc_bytes=100)],
)
def test_orjson_fast_path_gives_what_json_gives(monkeypatch, spec):
    """Every line, good or bad, becomes the same document or reject with or without orjson."""
    import transforms.inputs.documents as documents

    assert documents._orjson is not None  # orjson is a requirement: the fast path is on
    data = b"\n".join(TRICKY_LINES) + b"\n"
    fast = parse(data, spec=spec)
    monkeypatch.setattr(documents, "_orjson", None)
    assert fast == parse(data, spec=spec)


@pytest.mark.parametrize(
    ("sources", "in_order"),
    [
        (["a.jsonl:45", "a.jsonl:5", "b.jsonl:1"], ["a.jsonl:5", "a.jsonl:45", "b.jsonl:1"]),
        (["gs://b/x.jsonl:10", "gs://b/x.jsonl:9"], ["gs://b/x.jsonl:9", "gs://b/x.jsonl:10"]),
        (["/p/f.parquet#row=10", "/p/f.parquet#row=9"], ["/p/f.parquet#row=9",
                                                         "/p/f.parquet#row=10"]),
        (["books/b.txt", "books/a.txt"], ["books/a.txt", "books/b.txt"]),
    ],
)
def test_source_order_is_input_order(sources, in_order):
    assert sorted(sources, key=source_order) == in_order


def test_source_order_keys():
    assert source_order("a.jsonl:5") == ("a.jsonl", 5)
    assert source_order("gs://b/f.parquet#row=12") == ("gs://b/f.parquet", 12)
    assert source_order("x/y.txt") == ("x/y.txt", -1)
    assert source_order("c:/w:x") == ("c:/w:x", -1)


def test_reject_json_truncates_huge_records():
    small = Reject(reason="empty", source="a:1", detail="d", record="r")
    assert small.to_json() == {"reason": "empty", "source": "a:1", "detail": "d", "record": "r",
                               "truncated": False}
    big = Reject(reason="too_large", source="a:2", detail="d",
                 record="x" * (MAX_REJECT_RECORD_CHARS + 1)).to_json()
    assert big["truncated"] is True and len(big["record"]) == MAX_REJECT_RECORD_CHARS

def lines(data: bytes, spec: ReadSpec = SPEC) -> list:
    return list(parse_lines(data, fmt="jsonl", path="p", rel="p", first_line=1, spec=spec))


def test_lone_surrogate_escape_is_repaired_and_counted_or_rejected():
    (doc,) = lines(b'{"text": "a \\ud800 b"}\n')
    assert (doc.text, doc.repaired) == ("a \ufffd b", True)
    (reject,) = lines(b'{"text": "a \\ud800 b"}\n', ReadSpec(invalid_utf8="reject"))
    assert (reject.reason, reject.source) == ("invalid_utf8", "p:1")


def test_json_nested_1500_deep_is_malformed_json():
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Python's default (pytest may raise it)
    try:
        nested = b'{"text": "x", "m": ' + b"[" * 1500 + b"]" * 1500 + b"}\n"
        (reject,) = lines(nested + b"[" * 100_000 + b"]" * 100_000 + b"\n")[:1]
        deeper = lines(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    finally:
        sys.setrecursionlimit(limit)
    assert (reject.reason, reject.source) == ("malformed_json", "p:1")
    assert [(r.reason, r.detail) for r in deeper] == [
        ("malformed_json", "JSON nested too deeply to parse")]


def test_any_exception_turning_a_record_into_a_document_is_a_reject(monkeypatch):
    import transforms.inputs.documents as documents

    def boom(*args, **kwargs):
        raise KeyError("surprise")

    monkeypatch.setattr(documents, "_line_item", boom)
    (reject,) = lines(b'{"text": "x", "n": NaN}\n')  # orjson refuses NaN: the json path
    assert (reject.reason, reject.source, reject.detail) == (
        "unreadable_record", "p:1", "KeyError: 'surprise'")


def test_too_large_reject_truncated_flag_tells_the_truth():
    (reject,) = lines(json.dumps({"text": "x" * 5000}).encode() + b"\n",
                      ReadSpec(max_doc_bytes=100))
    assert reject.reason == "too_large"
    assert reject.to_json()["truncated"] is True and len(reject.record) == 4096
    assert Reject(reason="r", source="s", detail="d", record="x").to_json()["truncated"] is False


_LINES = [b'{"text": "abc", "id": 3}', b'{"text": "\xe4\xb8\xad"}', b"", b"   ", b"\r",
          b'{"text": ""}', b"{oops", b"plain text", b"\xff\xfe bad utf-8", b'["a list"]',
          b'{"text": "x"}\r', b'{"text": "\\ud800"}', b'{"id": "i", "text": "t"}\r\r']


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.sampled_from(_LINES), max_size=12), newline=st.booleans(),
       fmt=st.sampled_from(["jsonl", "lines"]), id_field=st.sampled_from([None, "id"]))
def test_a_chunk_parses_as_its_lines_one_by_one(lines, newline, fmt, id_field):
    # A chunk's lines are those of data.split(b"\n") (less a last empty one), each with its
    # number: parsing the chunk gives what parsing each line alone (newline-terminated) at
    # its number gives.
    data = b"\n".join(lines) + (b"\n" if newline and lines else b"")
    spec = ReadSpec(id_field=id_field)
    split = data.split(b"\n")
    if split and split[-1] == b"":
        split.pop()
    one_by_one = [item for number, line in enumerate(split, start=5)
                  for item in parse(line + b"\n", fmt=fmt, spec=spec, first=number)]
    assert parse(data, fmt=fmt, spec=spec, first=5) == one_by_one
    assert len(one_by_one) == len(split)


@pytest.mark.parametrize(("fmt", "limit"), [("lines", 104), ("jsonl", 4 * 100 + (1 << 20))])
def test_a_line_over_the_record_limit_is_too_large_unparsed(fmt, limit):
    """A line longer than its record limit (`record_limit`) is rejected without being
    parsed, naming its length; one byte shorter, it is parsed."""
    from transforms.inputs.documents import record_limit

    spec = ReadSpec(max_doc_bytes=100, format=fmt)
    assert record_limit(spec, fmt) == limit
    over = b'{"text": "' + b"a" * (limit - 11) + b'"' + b"}"
    assert len(over) == limit + 1
    out = parse(b"x\n" + over + b"\r\n", fmt=fmt, spec=spec)
    assert out[1] == Reject(
        reason="too_large", source="/c/a.jsonl:2",
        detail=f"a line of {limit + 2} bytes, more than "
               + ("--max-doc-bytes=100" if fmt == "lines" else
                  f"the {limit} bytes a JSONL line may take with --max-doc-bytes=100 "
                  f"(4 × it + {1 << 20})") + "; not read further",
        record=(over + b"\r")[:4096].decode(), truncated=True)
    (shorter,) = parse(over[:-1] + b"\n", fmt="lines", spec=ReadSpec(max_doc_bytes=limit))
    assert isinstance(shorter, Document)


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text(max_size=20), st.booleans())
def test_a_reject_line_is_its_json_with_sorted_keys_in_utf8(record, detail, truncated):
    """What json.dumps writes (non-ASCII as itself, keys sorted), a lone surrogate as its
    backslash escape: the line every reader of ``_rejects/`` gets."""
    reject = Reject(reason="malformed_json", source="f.jsonl:3", detail=detail, record=record,
                    truncated=truncated)
    want = json.dumps(reject.to_json(), ensure_ascii=False, sort_keys=True) + "\n"
    assert reject.to_line() == want.encode("utf-8", "backslashreplace")
