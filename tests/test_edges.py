"""Issue 10, "Nothing lost at the edges": one test per case of the issue's table and per
smaller point. Each fails on 7e4ee42 (the code before the issue was resolved)."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import zlib

import pyarrow.parquet as pq
import pytest

from pipeline.run import main
from tests.conftest import read_rows, run_job, write_jsonl
from transforms.chunks import Chunk, open_local, plan_chunks, read_chunk, relative_name
from transforms.documents import Reject, parse_lines
from transforms.manifest import MANIFEST_NAME
from transforms.params import ReadSpec
from transforms.schema import REJECTS_DIR

SPEC = ReadSpec()


def exit_code(capsys, *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return info.value.code, err.strip().splitlines()[-1]


def items(path: pathlib.Path, spec: ReadSpec = SPEC) -> list:
    (chunk,) = plan_chunks(str(path), rel=path.name, size=path.stat().st_size, spec=spec,
                           open_file=open_local, mtime=path.stat().st_mtime)
    return list(read_chunk(chunk, spec, open_local))


# -- inputs that end early or change while the job runs --------------------------------------

def test_gz_cut_at_a_deflate_flush_point_fails_naming_the_file(tmp_path):
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    data = c.compress(b'{"text": "a"}\n' * 5000) + c.flush(zlib.Z_FULL_FLUSH)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data)  # a valid prefix: every record decodes, the trailer is missing
    with pytest.raises(OSError, match=r"cut.jsonl.gz.*(ended before|end-of-stream)"):
        items(path)


def test_zst_with_flipped_bytes_fails_naming_the_file_and_the_codec_error(tmp_path):
    import zstandard

    raw = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(  # as the zstd CLI
        b'{"text": "abc"}\n' * 1000))
    raw[len(raw) // 2] ^= 0xFF
    path = tmp_path / "flip.jsonl.zst"
    path.write_bytes(bytes(raw))
    with pytest.raises(OSError, match=r"cannot read input file .*flip.jsonl.zst"):
        items(path)


def _planned(path: pathlib.Path, chunk_bytes: int) -> list[Chunk]:
    return list(plan_chunks(str(path), rel=path.name, size=path.stat().st_size, spec=SPEC,
                            open_file=open_local, chunk_bytes=chunk_bytes,
                            mtime=path.stat().st_mtime))


def test_input_truncated_while_the_job_runs_fails_naming_it(tmp_path):
    path = write_jsonl(tmp_path / "big.jsonl", [{"text": f"t{i}"} for i in range(300)])
    chunks = _planned(path, 1000)
    os.truncate(path, path.stat().st_size * 2 // 3)  # after planning, before reading
    with pytest.raises(OSError, match=r"input file .*big.jsonl changed while the job ran"):
        for c in chunks:
            list(read_chunk(c, SPEC, open_local))


def test_text_file_appended_to_while_the_job_runs_fails(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("first")
    (chunk,) = _planned(path, 1 << 20)
    with path.open("a") as f:
        f.write(" and more")
    with pytest.raises(OSError, match=r"a.txt changed while the job ran"):
        list(read_chunk(chunk, SPEC, open_local))


def test_input_changed_since_launch_fails_the_job(corpus, tmp_path):
    from transforms.chunks import Receipt, account_inputs

    size = corpus.stat().st_size
    receipt = Receipt(path="c", size=size, extent=size, start=0, end=size, records=7, mtime=2.0)
    assert account_inputs([receipt], {"c": (size, 2.0)}) == 7
    with pytest.raises(RuntimeError, match="input file c changed while the job ran"):
        account_inputs([receipt], {"c": (size, 1.0)})


# -- the output directory ------------------------------------------------------------------

def test_two_jobs_into_one_output_at_once_the_second_stops_early(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".claim").write_text('{"attempt": "a1", "pid": 1, "host": "h"}')  # job A runs
    code, err = exit_code(capsys, "--input", str(corpus), "--tokenizer", "bytes", "--output",
                          str(out))
    assert code == 2
    assert "is claimed by another job (attempt a1, pid 1 on h" in err
    assert "if it was killed, pass --overwrite to take its claim over" in err
    assert sorted(os.listdir(out)) == [".claim"]
    manifest = run_job(out, "--input", str(corpus), "--tokenizer", "bytes", "--overwrite")
    assert sorted(os.listdir(out)) == [MANIFEST_NAME, REJECTS_DIR,
                                       "part-00000-of-00001.parquet"]  # no claim, no .tmp
    assert len(manifest["fingerprint"]) == 64


def test_a_shard_of_another_job_never_sits_under_the_manifest(corpus, tmp_path):
    from pipeline.finalize import _check_shard_footer

    run_job(tmp_path / "a", "--input", str(corpus), "--tokenizer", "bytes", "--seed", "1")
    b = run_job(tmp_path / "b", "--input", str(corpus), "--tokenizer", "bytes", "--seed", "2")
    shard = tmp_path / "a" / "part-00000-of-00001.parquet"
    with pytest.raises(RuntimeError, match="was written by another job"):
        _check_shard_footer(str(shard), b["fingerprint"])


@pytest.mark.parametrize("stray", [f"{REJECTS_DIR}/my_analysis.csv", ".tmp/keep.txt",
                                   "part-00007-of-00009.parquet"])
def test_overwrite_refuses_files_the_old_manifest_does_not_list(corpus, tmp_path, capsys, stray):
    out = tmp_path / "out"
    run_job(out, "--input", str(corpus), "--tokenizer", "bytes")
    (out / stray).parent.mkdir(parents=True, exist_ok=True)
    (out / stray).write_text("mine")
    before = sorted(str(p) for p in out.rglob("*"))
    code, err = exit_code(capsys, "--input", str(corpus), "--tokenizer", "bytes", "--output",
                          str(out), "--overwrite")
    assert code == 2 and f"e.g. {stray};" in err
    assert sorted(str(p) for p in out.rglob("*")) == before  # nothing deleted


def test_identical_jobs_write_identical_bytes_with_the_fingerprint(corpus, tmp_path):
    a = run_job(tmp_path / "a", "--input", str(corpus), "--tokenizer", "bytes")
    b = run_job(tmp_path / "b", "--input", str(corpus), "--tokenizer", "bytes")
    assert a["fingerprint"] == b["fingerprint"]
    name = "part-00000-of-00001.parquet"
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    meta = pq.read_metadata(tmp_path / "a" / name).metadata
    assert meta[b"token_windows.fingerprint"] == a["fingerprint"].encode()
    assert meta[b"token_windows.shard"] == b"0/1"
    c = run_job(tmp_path / "c", "--input", str(corpus), "--tokenizer", "bytes", "--seed", "3")
    assert c["fingerprint"] != a["fingerprint"]


def test_shards_do_not_depend_on_where_the_tokenizer_model_lies(corpus, tmp_path, monkeypatch):
    """The same model by another path (copied, relative or absolute) is the same job."""
    import shutil

    from tests.conftest import DATA

    copy = tmp_path / "models" / "tiny.model"
    copy.parent.mkdir()
    shutil.copy(DATA / "tiny.model", copy)
    monkeypatch.chdir(tmp_path)
    args = ("--input", str(corpus), "--window", "8")
    a = run_job(tmp_path / "a", *args, "--tokenizer", str(DATA / "tiny.model"))
    b = run_job(tmp_path / "b", *args, "--tokenizer", "models/tiny.model")
    assert a["tokenizer"]["path"] != b["tokenizer"]["path"]
    assert a["fingerprint"] == b["fingerprint"]
    name = "part-00000-of-00001.parquet"
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_output_is_an_existing_regular_file_is_refused(corpus, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    code, err = exit_code(capsys, "--input", str(corpus), "--tokenizer", "bytes", "--output",
                          str(tmp_path / "f"))
    assert (code, err) == (2, f"error: --output {tmp_path / 'f'} is a file, not a directory: "
                              "choose a directory")


def test_output_inside_a_recursive_input_glob_is_refused(corpus, tmp_path, capsys):
    code, err = exit_code(capsys, "--input", str(tmp_path / "**"), "--tokenizer", "bytes",
                          "--output", str(tmp_path / "in" / "out"))
    assert code == 2 and "the job would read its own output" in err


# -- flags --------------------------------------------------------------------------------

@pytest.mark.parametrize(("flag", "meant"), [("--widow", "--window"), ("--strid", "--stride"),
                                             ("--text_field", "--text-field"),
                                             ("--num_shards", "--num-shards")])
def test_misspelled_flags_are_refused_with_the_suggestion(corpus, tmp_path, capsys, flag,
                                                          meant):
    code, err = exit_code(capsys, "--input", str(corpus), "--tokenizer", "bytes", "--output",
                          str(tmp_path / "o"), flag, "3")
    assert code == 2 and f"error: {flag} is not an option; did you mean {meant}?" in err
    assert not (tmp_path / "o").exists()


def test_beams_own_flags_still_pass(corpus, tmp_path):
    run_job(tmp_path / "o", "--input", str(corpus), "--tokenizer", "bytes",
            "--direct_running_mode=in_memory", "--direct_num_workers", "1")


# -- records ------------------------------------------------------------------------------

def lines(data: bytes, spec: ReadSpec = SPEC) -> list:
    return list(parse_lines(data, fmt="jsonl", path="p", rel="p", first_line=1, spec=spec))


def test_lone_surrogate_escape_is_repaired_and_counted_or_rejected():
    (doc,) = lines(b'{"text": "a \\ud800 b"}\n')
    assert (doc.text, doc.repaired) == ("a \ufffd b", True)
    (reject,) = lines(b'{"text": "a \\ud800 b"}\n', ReadSpec(invalid_utf8="reject"))
    assert (reject.reason, reject.source) == ("invalid_utf8", "p:1")


def test_lone_surrogate_end_to_end_with_bytes_and_sentencepiece(tmp_path):
    from tests.conftest import DATA

    src = write_jsonl(tmp_path / "in.jsonl", ['{"text": "a \\ud800 b"}', {"text": "ok"}])
    for tok in ("bytes", str(DATA / "tiny.model")):
        out = tmp_path / pathlib.Path(tok).name
        m = run_job(out, "--input", str(src), "--tokenizer", tok)
        assert m["counts"]["documents"] == 2 and m["counts"]["repaired"]["invalid_utf8"] == 1


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
    import transforms.documents as documents

    def boom(*args, **kwargs):
        raise KeyError("surprise")

    monkeypatch.setattr(documents, "_line_item", boom)
    (reject,) = lines(b'{"text": "x", "n": NaN}\n')  # orjson refuses NaN: the json path
    assert (reject.reason, reject.source, reject.detail) == (
        "unreadable_record", "p:1", "KeyError: 'surprise'")


def test_utf8_bom_is_stripped(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"text": "abc"}\n')
    (doc,) = items(path)
    assert doc.text == "abc"
    text = tmp_path / "b.txt"
    text.write_bytes(b"\xef\xbb\xbfhello")
    assert items(text)[0].text == "hello"


def test_too_large_reject_truncated_flag_tells_the_truth():
    (reject,) = lines(json.dumps({"text": "x" * 5000}).encode() + b"\n",
                      ReadSpec(max_doc_bytes=100))
    assert reject.reason == "too_large"
    assert reject.to_json()["truncated"] is True and len(reject.record) == 4096
    assert Reject(reason="r", source="s", detail="d", record="x").to_json()["truncated"] is False


def test_non_utf8_file_name_is_refused_with_the_name_escaped(tmp_path, capsys):
    name = os.fsdecode(b"caf\xe9.jsonl")
    write_jsonl(tmp_path / "in" / name, [{"text": "abc"}])
    assert relative_name(str(tmp_path / "in" / name), str(tmp_path / "in") + "/") == (
        "caf\\xe9.jsonl")
    code, err = exit_code(capsys, "--input", str(tmp_path / "in" / "*.jsonl"), "--tokenizer",
                          "bytes", "--output", str(tmp_path / "o"))
    assert code == 2 and "caf\\xe9.jsonl, whose name is not UTF-8" in err


def test_parquet_with_a_truncated_footer_names_the_file_exit_1(tmp_path, capsys):
    import pyarrow as pa

    src = tmp_path / "in" / "p.parquet"
    src.parent.mkdir()
    pq.write_table(pa.table({"text": ["a", "b"]}), src)
    src.write_bytes(src.read_bytes()[:-20])
    code, err = exit_code(capsys, "--input", str(src), "--tokenizer", "bytes", "--output",
                          str(tmp_path / "o"))
    assert code == 1 and f"cannot read input file {src}" in err


def test_every_record_rejected_fails_the_job(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [{"uid": i, "body": "x", "meta": {}}
                                              for i in range(40)])
    code, err = exit_code(capsys, "--input", str(src), "--tokenizer", "bytes", "--output",
                          str(tmp_path / "o"))
    assert code == 1
    assert (f"all 40 records skipped as missing_text; the first record ({src}:1) has keys "
            "uid, body, meta: pass --text-field") in err
    assert not (tmp_path / "o" / MANIFEST_NAME).exists()


def test_max_skipped_share_fails_a_mostly_rejected_job(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "a"}, {"body": "b"}, {"body": "c"}])
    run_job(tmp_path / "ok", "--input", str(src), "--tokenizer", "bytes")
    with pytest.raises(Exception, match=r"2 of 3 records \(66.7 %\) skipped as missing_text"):
        run_job(tmp_path / "o", "--input", str(src), "--tokenizer", "bytes",
                "--max-skipped-share", "0.5")


def test_two_patterns_whose_files_share_names_get_ids_that_cannot_collide(tmp_path):
    write_jsonl(tmp_path / "c" / "en" / "part-0.jsonl", [{"text": "hello"}])
    write_jsonl(tmp_path / "c" / "zh" / "part-0.jsonl", [{"text": "你好"}])
    write_jsonl(tmp_path / "c" / "zh" / "only.jsonl", [{"text": "x"}])
    m = run_job(tmp_path / "o", "--input", str(tmp_path / "c" / "en" / "*.jsonl"), "--input",
                str(tmp_path / "c" / "zh" / "*.jsonl"), "--tokenizer", "bytes")
    assert m["counts"]["skipped"] == {}
    assert sorted(r["doc_id"] for r in read_rows(tmp_path / "o")) == [
        "en/part-0.jsonl:1", "only.jsonl:1", "zh/part-0.jsonl:1"]


@pytest.mark.parametrize("kind", ["dangling", "loop"])
def test_symlink_loop_or_dangling_symlink_matched_by_a_glob_is_refused(corpus, tmp_path,
                                                                      capsys, kind):
    d = corpus.parent
    if kind == "dangling":
        (d / "gone.jsonl").symlink_to(d / "nowhere.jsonl")
    else:
        (d / "loop.jsonl").symlink_to(d / "loop.jsonl")
    code, err = exit_code(capsys, "--input", str(d / "*.jsonl"), "--tokenizer", "bytes",
                          "--output", str(tmp_path / "o"))
    assert code == 2 and "broken symbolic links" in err


def test_summary_names_repaired_records_where_rejects_are_and_says_1_shard(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"text": "a"}\n{"text": "\\ud800"}\n{"t": 1}\n')
    run_job(tmp_path / "o", "--input", str(src), "--tokenizer", "bytes")
    out = capsys.readouterr().out
    assert "3 records -> 2 documents (1 skipped, 1 repaired)" in out
    assert f"rejects in {tmp_path / 'o' / REJECTS_DIR}/ (missing_text 1)" in out
    assert "; 1 shard in " in out


def test_a_failure_while_running_is_one_line_exit_1(tmp_path, capsys):
    src = tmp_path / "x.jsonl.gz"
    src.write_bytes(gzip.compress(b'{"text": "a"}\n' * 100)[:-30])
    code, err = exit_code(capsys, "--input", str(src), "--tokenizer", "bytes", "--output",
                          str(tmp_path / "o"))
    assert code == 1 and err.startswith(f"error: the job failed: cannot read input file {src}")
    assert sorted(os.listdir(tmp_path / "o")) == []  # claim and temporary files removed
