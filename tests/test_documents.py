"""Records → documents and rejects (SPEC §2, §7)."""

import pyarrow as pa
import pytest

from transforms.documents import (
    Document,
    Reject,
    detect_format,
    line_starts_in,
    parse_lines,
    parse_parquet,
    parse_text_file,
    pattern_base,
    relative_name,
)
from transforms.params import ReadSpec

SPEC = ReadSpec()


def parse(data, fmt="jsonl", spec=SPEC, first=1):
    return list(parse_lines(data, fmt=fmt, path="/c/a.jsonl", rel="a.jsonl", first_line=first,
                            spec=spec))


def test_jsonl_ids_are_file_and_line():
    out = parse(b'{"text": "abc"}\n{"text": "de"}\n', first=7)
    assert out == [
        Document("a.jsonl:7", "abc", "/c/a.jsonl:7"),
        Document("a.jsonl:8", "de", "/c/a.jsonl:8"),
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
    assert doc == Document("a.jsonl:1", "", "/c/a.jsonl:1")


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
        Document("x/y.txt", "hello\nworld\n", "/c/x/y.txt")
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


def test_pattern_base_and_relative_names():
    assert pattern_base("gs://b/corpus/*/part-*.jsonl.gz") == "gs://b/corpus/"
    assert pattern_base("/data/one.jsonl") == "/data/"
    assert pattern_base("rel.jsonl") == ""
    assert relative_name("gs://b/corpus/x/part-1.jsonl.gz", "gs://b/corpus/") == (
        "x/part-1.jsonl.gz"
    )


@pytest.mark.parametrize(
    ("path", "forced", "expected"),
    [
        ("a.jsonl", None, ("jsonl", None)),
        ("a.jsonl.gz", None, ("jsonl", "gzip")),
        ("a.txt.zst", None, ("text", "zstd")),
        ("a.parquet", None, ("parquet", None)),
        ("a.txt.bz2", "lines", ("lines", "bzip2")),
    ],
)
def test_detect_format(path, forced, expected):
    assert detect_format(path, forced) == expected


def test_unknown_extension_needs_format():
    with pytest.raises(ValueError, match="pass --format"):
        detect_format("/c/data.csv", None)


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 100])
def test_line_starts_counted_per_range_add_up(chunk):
    data = b"ab\n\ncd\nefg\n\nh"
    size = len(data)
    total = 0
    for start in range(0, size, chunk):
        end = min(start + chunk, size)
        total += line_starts_in(data[max(start - 1, 0) : end], start, end)
    assert total == 6
    assert line_starts_in(b"x\n", 0, 2) == 1


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
    import transforms.documents as documents

    if documents._orjson is None:
        pytest.skip("orjson is not installed")
    data = b"\n".join(TRICKY_LINES) + b"\n"
    fast = parse(data, spec=spec)
    monkeypatch.setattr(documents, "_orjson", None)
    assert fast == parse(data, spec=spec)


def test_account_inputs_checks_every_file_is_read_exactly_once():
    from transforms.documents import Receipt, account_inputs

    pieces = [Receipt("a", 10, 10, 0, 4, 3), Receipt("a", 10, 10, 4, 10, 2),
              Receipt("p", 99, 3, 0, 3, 7)]
    assert account_inputs(pieces, {"a": 10, "p": 99}) == 12
    assert account_inputs(list(reversed(pieces)), None) == 12
    with pytest.raises(RuntimeError, match=r"a: the range \[4, 10\) was never read"):
        account_inputs(pieces[:1], None)
    with pytest.raises(RuntimeError, match=r"the range \[0, 4\) was read twice"):
        account_inputs([*pieces, pieces[0]], None)
    with pytest.raises(RuntimeError, match=r"1 input files were never read \(e.g. b\)"):
        account_inputs(pieces, {"a": 10, "p": 99, "b": 5})
    with pytest.raises(RuntimeError, match="inputs changed while the job ran"):
        account_inputs(pieces, {"a": 10})
    with pytest.raises(RuntimeError, match="a changed size"):
        account_inputs(pieces, {"a": 11, "p": 99})
