"""--dedup and --decontaminate in the job (docs/dedup.md#in-the-job): which documents are
kept, how the removed ones are counted and kept aside, and that none of it depends on the
runner, the window, the seed or the tokenizer.

The corpus is built here: 40 articles of 300 words; planted among them exact copies
(whitespace and Unicode composition changed), near copies (two words changed, a header and a
footer added), far variants (half the words changed) and benchmark passages.
"""

from __future__ import annotations

import json
import pathlib
import random
import re
import unicodedata

import pytest

from pipeline.launch.context import Tuning
from tests.common.jobs import dir_bytes, read_rows, run_job, run_main, write_jsonl
from tests.common.runners import cli, needs_dask
from transforms.dedup import kernel

SPM = str(pathlib.Path(__file__).resolve().parents[3] / "samples" / "spm.model")
_VOCAB = [f"w{i}" for i in range(3000)]
BENCHMARK = ("the quick brown fox jumps over the lazy dog while seven wise owls "
             "count every star above the silent frozen lake tonight")


def _article(rng: random.Random, n: int = 300) -> list[str]:
    return [rng.choice(_VOCAB) for _ in range(n)]


def _corpus(directory: pathlib.Path) -> tuple[pathlib.Path, dict[str, object]]:
    """The corpus and what it plants: {id of a copy: the id it copies} by kind, the far
    variants' ids, the contaminated ids."""
    rng = random.Random(7)
    base = {f"a{i:02d}": _article(rng) for i in range(40)}
    records = [{"id": k, "text": " ".join(v)} for k, v in base.items()]
    exact = {"b01": "a03", "b02": "a05", "c07": "a05"}  # a05 has two copies: one cluster
    for copy, original in exact.items():
        # Other whitespace runs and a decomposed é: the same normalized text.
        text = "  ".join(base[original]) + " caf\u00e9"
        records.append({"id": copy, "text": unicodedata.normalize("NFD", text) + "\n"})
    for original in set(exact.values()):  # the originals end the same way
        records[int(original[1:])]["text"] += " caf\u00e9"
    near = {"n01": "a10", "n02": "a11", "n03": "a12"}
    for copy, original in near.items():
        w = list(base[original])
        w[100], w[200] = "changed", "words"
        records.append({"id": copy, "text": "Posted by admin. " + " ".join(w)
                        + " Share this article."})
    far = {"f01": "a20", "f02": "a21"}
    for copy, original in far.items():
        w = list(base[original])
        for i in range(0, len(w), 2):
            w[i] = rng.choice(_VOCAB)
        records.append({"id": copy, "text": " ".join(w)})
    contaminated = ["a30", "n09", "z99"]
    for doc_id in contaminated:
        if doc_id == "a30":
            records[30]["text"] = records[30]["text"] + " " + BENCHMARK + "!"
        else:
            records.append({"id": doc_id, "text": " ".join(_article(rng, 50)) + ", "
                            + BENCHMARK + ", " + " ".join(_article(rng, 50))})
    rng.shuffle(records)
    path = write_jsonl(directory / "in" / "web.jsonl", records)
    planted = {"exact": exact, "near": near, "far": far, "contaminated": contaminated}
    return path, planted


def _evals(directory: pathlib.Path) -> pathlib.Path:
    write_jsonl(directory / "evals" / "qa.jsonl", [
        {"text": "an unrelated question about nothing in the corpus at all, surely not"},
        {"text": "Q: " + BENCHMARK + "? A: yes"},
    ])
    (directory / "evals" / "lines.txt").write_text("no shared text here\nnor here either\n")
    return directory / "evals"


def _job(corpus: pathlib.Path, evals: pathlib.Path, *more: str) -> list[str]:
    return ["--input", str(corpus), "--id-field", "id", "--tokenizer", "bytes",
            "--window", "64", "--dedup", "near", "--decontaminate", f"{evals}/*.jsonl",
            f"{evals}/*.txt", *more]


def _rejects(output: pathlib.Path, reason: str) -> list[dict]:
    path = output / "_rejects" / f"{reason}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _kept_ids(output: pathlib.Path) -> set[str]:
    return {r["doc_id"] for r in read_rows(output)}


@pytest.mark.slow
def test_copies_and_benchmark_text_are_removed_exactly(tmp_path):
    corpus, planted = _corpus(tmp_path)
    evals = _evals(tmp_path)
    manifest = run_job(tmp_path / "out", *_job(corpus, evals))
    out = tmp_path / "out"
    kept = _kept_ids(out)
    exact, near = planted["exact"], planted["near"]
    assert not kept & (set(exact) | set(near) | set(planted["contaminated"]))
    assert set(exact.values()) | set(near.values()) <= kept  # the smallest id of each
    assert set(planted["far"]) | set(planted["far"].values()) <= kept  # far variants stay
    assert manifest["counts"]["skipped"] == {"contaminated": 3, "exact_duplicate": 3,
                                             "near_duplicate": 3}
    assert manifest["counts"]["documents"] == len(kept) == 40 + 2 - 1  # a30 contaminated
    lines = corpus.read_text().splitlines()
    copies = _rejects(out, "exact_duplicate") + _rejects(out, "near_duplicate")
    named = {}
    for r in copies:  # each names its file:line and the doc_id kept in its place
        path, line = r["source"].rsplit(":", 1)
        assert path == str(corpus)
        named[json.loads(lines[int(line) - 1])["id"]] = r["kept"]
    assert named == {**exact, **near}
    assert [r["reason"] for r in _rejects(out, "near_duplicate")] == ["near_duplicate"] * 3
    dirty = _rejects(out, "contaminated")
    assert len(dirty) == 3
    assert {(r["eval_file"], r["eval_line"]) for r in dirty} == {("qa.jsonl", 2)}
    assert all(r["ngram"] in BENCHMARK for r in dirty)
    assert manifest["dedup"] == {
        "mode": "near", "ngram": 5, "bands": 14, "rows": 8, "scheme": "tw-minhash-1",
        "decontaminate": {"ngram": 13, "files": {"lines.txt": 0, "qa.jsonl": 3}}}


@pytest.mark.slow
def test_inspect_shows_the_removals_and_check_proves_them(tmp_path, capsys):
    from reader.tools.inspect import run

    corpus, _ = _corpus(tmp_path)
    evals = _evals(tmp_path)
    run_job(tmp_path / "out", *_job(corpus, evals), "--split", "val=0.3")
    for split in ("train", "val"):
        assert run([str(tmp_path / "out" / split), "--check"]) == 0
        text = capsys.readouterr().out
        assert "removed 3 exact and 3 near copies" in text, text
        assert "(lines.txt 0, qa.jsonl 3)" in text
    assert run([str(tmp_path / "out" / "val"), "--check", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["check"]["ok"] and report["check"]["checked"]["kept_aside"] == 9
    # A kept-aside record lost, and another naming a larger doc_id as kept: both found.
    near = tmp_path / "out" / "_rejects" / "near_duplicate.jsonl"
    lines = near.read_text().splitlines()
    edited = {**json.loads(lines[1]), "kept": "zzz"}
    near.write_text(json.dumps(edited) + "\n" + "\n".join(lines[2:]) + "\n")
    assert run([str(tmp_path / "out" / "train"), "--check", "--json"]) == 1
    messages = [f["message"] for f in json.loads(capsys.readouterr().out)["check"]["failures"]]
    assert messages == [
        "_rejects/near_duplicate.jsonl holds 2 records, but _manifest.json counts 3 skipped "
        "as near_duplicate",
        f"{edited['source']} (doc_id {edited['doc_id']!r}) names 'zzz' as the document kept "
        "in its place, which is not its cluster's smallest kept doc_id",
        "doc_id 'zzz' is named as the document kept in place of a copy, and belongs here, "
        "but the rows do not hold it"]


@pytest.mark.slow
def test_same_documents_kept_for_another_window_seed_tokenizer_and_runner(tmp_path):
    corpus, _ = _corpus(tmp_path)
    evals = _evals(tmp_path)
    run_job(tmp_path / "a", *_job(corpus, evals))
    run_job(tmp_path / "b", *_job(corpus, evals), "--direct_running_mode=multi_processing",
            "--direct_num_workers=2", "--shuffle", "runner")
    assert dir_bytes(tmp_path / "a") == dir_bytes(tmp_path / "b")
    # The key spill files (the file shuffle) written by two worker processes: the same.
    run_job(tmp_path / "b2", *_job(corpus, evals), "--direct_running_mode=multi_processing",
            "--direct_num_workers=2", tuning=Tuning(chunk_bytes=4096))
    assert dir_bytes(tmp_path / "a") == dir_bytes(tmp_path / "b2")
    other = [*_job(corpus, evals)]
    other[other.index("bytes")] = SPM
    other[other.index("64")] = "17"
    run_job(tmp_path / "c", *other, "--seed", "5")
    assert _kept_ids(tmp_path / "c") == _kept_ids(tmp_path / "a")
    for reason in ("exact_duplicate", "near_duplicate", "contaminated"):
        assert (tmp_path / "c" / "_rejects" / f"{reason}.jsonl").read_bytes() == (
            tmp_path / "a" / "_rejects" / f"{reason}.jsonl").read_bytes()


@pytest.mark.skipif(not kernel.available, reason="transforms.dedup._kernel is not built")
def test_the_numpy_hashing_writes_what_the_c_kernel_writes(tmp_path, monkeypatch):
    """Where the package was built without a C compiler, the pass hashes with NumPy: the
    same removals and kept-aside records, the same bytes."""
    corpus, _ = _corpus(tmp_path)
    evals = _evals(tmp_path)
    run_job(tmp_path / "kernel", *_job(corpus, evals))
    monkeypatch.setattr(kernel, "available", False)
    run_job(tmp_path / "numpy", *_job(corpus, evals))
    assert dir_bytes(tmp_path / "kernel") == dir_bytes(tmp_path / "numpy")
    assert (tmp_path / "numpy" / "_rejects" / "near_duplicate.jsonl").stat().st_size > 0


@pytest.mark.slow
def test_no_copy_across_a_split(tmp_path):
    corpus, planted = _corpus(tmp_path)
    evals = _evals(tmp_path)
    record = run_job(tmp_path / "out", *_job(corpus, evals), "--split", "val=0.3")
    pairs = {**planted["exact"], **planted["near"]}
    by_split = {name: _kept_ids(tmp_path / "out" / name) for name in ("train", "val")}
    assert by_split["val"] and not by_split["train"] & by_split["val"]
    for copy, original in pairs.items():
        holders = [name for name, ids in by_split.items() if copy in ids or original in ids]
        assert holders == [name for name, ids in by_split.items() if original in ids]
    assert record["counts"]["skipped"]["near_duplicate"] == 3
    assert record["dedup"]["decontaminate"]["files"]["qa.jsonl"] == 3


@pytest.mark.slow
def test_without_the_flags_nothing_changes_and_exact_mode_keeps_near_copies(tmp_path):
    corpus, planted = _corpus(tmp_path)
    base = ["--input", str(corpus), "--id-field", "id", "--tokenizer", "bytes",
            "--window", "64"]
    manifest = run_job(tmp_path / "plain", *base)
    assert "dedup" not in manifest and not manifest["counts"]["skipped"]
    exact = run_job(tmp_path / "exact", *base, "--dedup", "exact")
    assert exact["counts"]["skipped"] == {"exact_duplicate": 3}
    assert exact["dedup"] == {"mode": "exact"}
    assert set(planted["near"]) <= _kept_ids(tmp_path / "exact")
    assert exact["fingerprint"] != manifest["fingerprint"]


@pytest.mark.parametrize(("args", "message"), [
    (["--dedup-bands", "4"], "--dedup-bands 4 does nothing without --dedup near"),
    (["--dedup", "near", "--dedup-rows", "0"], "--dedup-rows"),
    (["--decontaminate-ngram", "8"], "does nothing without --decontaminate"),
    (["--decontaminate", "nowhere/*.jsonl"], "--decontaminate nowhere/*.jsonl matches no file"),
    (["--decontaminate", "EVALS", "--decontaminate-ngram", "0"], "--decontaminate-ngram"),
    (["--decontaminate", "WRONG"], "--decontaminate file w.jsonl holds no text to compare "
     "with (missing_text 1): its records need the text in --text-field 'text'"),
])
def test_bad_flags_are_refused_before_any_work(tmp_path, args, message):
    corpus = write_jsonl(tmp_path / "in" / "c.jsonl", [{"text": "a b c"}])
    write_jsonl(tmp_path / "evals" / "e.jsonl", [{"text": "a b c"}])
    write_jsonl(tmp_path / "evals" / "w.jsonl", [{"question": "a b c"}])
    named = {"EVALS": "e.jsonl", "WRONG": "w.jsonl"}
    args = [str(tmp_path / "evals" / named[a]) if a in named else a for a in args]
    code, err = run_main("--input", str(corpus), "--tokenizer", "bytes", "--output",
                         str(tmp_path / "out"), *args)
    assert code == 2, err
    assert message in err
    assert not (tmp_path / "out" / "_manifest.json").exists()


@pytest.mark.slow
@needs_dask
def test_same_bytes_on_a_dask_cluster(tmp_path, dask_cluster):  # noqa: F811 (the fixture)
    address, _, worker_logs = dask_cluster
    corpus, _ = _corpus(tmp_path)
    evals = _evals(tmp_path)
    args = _job(corpus, evals)
    run_job(tmp_path / "in_memory", *args, "--direct_running_mode=in_memory")
    dask = cli(*args, "--output", str(tmp_path / "dask"), "--runner=DaskRunner",
                f"--dask_client_address={address}", "--dask_npartitions=4")
    assert dask.returncode == 0, dask.stderr
    assert dir_bytes(tmp_path / "dask") == dir_bytes(tmp_path / "in_memory")
    # The removals reach EncodeChunks through a GroupByKey, not a side input that Dask
    # would compute again: the one chunk is encoded once.
    logs = "".join(p.read_text(errors="replace") for p in worker_logs)
    assert len(re.findall(r"encoded chunk (\S+): ", logs)) == 1


@pytest.mark.slow
def test_text_files_read_in_runs_and_parquet_inputs_and_evaluation_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(3)
    texts = [" ".join(_article(rng, 40)) for _ in range(6)]
    for i, text in enumerate(texts):  # small files, read as runs of files
        (tmp_path / "txt").mkdir(exist_ok=True)
        (tmp_path / "txt" / f"{i}.txt").write_text(text)
    (tmp_path / "txt" / "9-copy.txt").write_text(texts[2] + "\n")
    pq.write_table(pa.table({"text": [texts[4], "other words entirely " * 5, texts[5]]}),
                   tmp_path / "rows.parquet", row_group_size=1)
    pq.write_table(pa.table({"text": [" ".join(texts[5].split()[3:20])]}),
                   tmp_path / "eval.parquet")
    manifest = run_job(tmp_path / "out", "--input", str(tmp_path / "txt" / "*.txt"),
                       "--input", str(tmp_path / "rows.parquet"), "--tokenizer", "bytes",
                       "--dedup", "exact", "--decontaminate", str(tmp_path / "eval.parquet"))
    assert manifest["counts"]["skipped"] == {"contaminated": 2, "exact_duplicate": 2}
    exact = _rejects(tmp_path / "out", "exact_duplicate")
    assert sorted((r["doc_id"], r["kept"]) for r in exact) == [("9-copy.txt", "2.txt"),
                                                                ("rows.parquet:0", "4.txt")]
    dirty = _rejects(tmp_path / "out", "contaminated")
    assert sorted(r["doc_id"] for r in dirty) == ["5.txt", "rows.parquet:2"]
    assert {(r["eval_file"], r["eval_line"]) for r in dirty} == {("eval.parquet", 0)}
    assert manifest["dedup"]["decontaminate"]["files"] == {"eval.parquet": 2}


@pytest.mark.slow
def test_a_copy_under_the_same_id_is_removed_and_check_accepts_it(tmp_path, capsys):
    from reader.tools.inspect import run

    corpus = write_jsonl(tmp_path / "in" / "c.jsonl", [
        {"id": "x", "text": "one text, twice"}, {"id": "y", "text": "another"},
        {"id": "x", "text": "one  text, twice"}])
    manifest = run_job(tmp_path / "out", "--input", str(corpus), "--id-field", "id",
                       "--tokenizer", "bytes", "--dedup", "exact")
    assert manifest["counts"]["skipped"] == {"exact_duplicate": 1}  # no duplicate_id left
    (removed,) = _rejects(tmp_path / "out", "exact_duplicate")
    assert (removed["doc_id"], removed["kept"], removed["source"]) == ("x", "x", f"{corpus}:3")
    assert run([str(tmp_path / "out"), "--check"]) == 0, capsys.readouterr().out


@pytest.mark.slow
def test_removals_do_not_count_toward_the_skipped_share_unless_nothing_is_left(tmp_path):
    corpus = write_jsonl(tmp_path / "in" / "c.jsonl", [
        {"text": "the same words"}, {"text": "the  same words"}, {"text": "other ones"}])
    manifest = run_job(tmp_path / "a", "--input", str(corpus), "--tokenizer", "bytes",
                       "--dedup", "exact", "--max-skipped-share", "0.1")
    assert manifest["counts"]["skipped"] == {"exact_duplicate": 1}
    evals = write_jsonl(tmp_path / "e.jsonl", [{"text": "the same words other ones"}])
    code, err = run_main("--input", str(corpus), "--tokenizer", "bytes", "--output",
                         str(tmp_path / "b"), "--decontaminate", str(evals),
                         "--decontaminate-ngram", "2")
    assert code == 1
    assert "all 3 records skipped as contaminated" in err
    assert "check the --decontaminate files (or raise --decontaminate-ngram)" in err


@pytest.mark.slow
def test_a_sample_leaves_the_removed_set_as_it_is(tmp_path):
    corpus, planted = _corpus(tmp_path)
    evals = _evals(tmp_path)
    whole = run_job(tmp_path / "all", *_job(corpus, evals))
    half = run_job(tmp_path / "half", *_job(corpus, evals), "--sample", "0.5")
    assert half["counts"]["skipped"] == whole["counts"]["skipped"]
    for reason in ("exact_duplicate", "near_duplicate", "contaminated"):
        assert (tmp_path / "half" / "_rejects" / f"{reason}.jsonl").read_bytes() == (
            tmp_path / "all" / "_rejects" / f"{reason}.jsonl").read_bytes()
    kept = _kept_ids(tmp_path / "half")
    assert kept < _kept_ids(tmp_path / "all")
    assert half["counts"]["documents"] + half["counts"]["sampled_out"] == 41
    assert _check_passes(tmp_path / "half")


def _check_passes(output: pathlib.Path) -> bool:
    from reader.tools.inspect import run

    return run([str(output), "--check"]) == 0


def test_a_worker_without_the_c_kernel_says_so_once(tmp_path, monkeypatch, caplog):
    from pipeline.steps import dedup

    corpus, _ = _corpus(tmp_path)
    monkeypatch.setattr(kernel, "available", False)
    dedup._say_numpy_hashes.cache_clear()
    with caplog.at_level("WARNING", logger="token_windows"):
        run_job(tmp_path / "out", "--input", str(corpus), "--id-field", "id", "--tokenizer",
                "bytes", "--dedup", "exact")
    said = [r.getMessage() for r in caplog.records if "hashes with NumPy" in r.getMessage()]
    assert len(said) == 1 and "no C compiler" in said[0]
    dedup._say_numpy_hashes.cache_clear()
