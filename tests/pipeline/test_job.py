"""`pipeline.job`: the command line, and everything it refuses before any work
(docs/running.md#bad-input).

The error cases call `main` in this process (its output captured); one test starts the real
entry point, ``python -m pipeline``, as a user would.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from pipeline.job import main
from tests.common.jobs import exit_code, run_job, write_jsonl
from tests.common.paths import DATA, ROOT
from transforms.dataset.manifest import MANIFEST_NAME
from transforms.dataset.schema import REJECTS_DIR
from transforms.inputs.names import relative_name

FLAGS = ("--input", "--format", "--text-field", "--id-field", "--keep-empty", "--invalid-utf8",
         "--max-doc-bytes", "--tokenizer", "--window", "--stride", "--tail", "--min-tail",
         "--score", "--offset", "--seed", "--output", "--encode-threads", "--num-shards",
         "--overwrite")


def refused(capsys, *args: str) -> str:
    """Run `main`, expect exit status 2, and return what it printed on stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--window", "0"], "`window` must be a positive integer, but got 0"),
        (["--stride", "0"], "`stride` must be a positive integer, but got 0"),
        (["--window", "4", "--min-tail", "5"], "`min_tail` must be at most `window` (4)"),
        (["--tail", "pad"], "argument --tail: invalid choice: 'pad'"),
        (["--num-shards", "0"], "`num_shards` must be a positive integer, but got 0"),
        (["--encode-threads", "0"], "`encode_threads` must be a positive integer, but got 0"),
        (["--direct_running_mode=multi_threading"], "multi_threading is refused"),
    ],
)
def test_invalid_parameters_fail_before_work(capsys, corpus, tmp_path, extra, message):
    err = refused(capsys, "--input", str(corpus), "--tokenizer", "bytes", "--output",
                  str(tmp_path / "o"), *extra)
    assert message in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "{tmp}/none*.jsonl", "--tokenizer", "bytes"],
         "error: --input {tmp}/none*.jsonl matches no file"),
        (["--input", "{corpus}", "--tokenizer", "{tmp}/gone.model"],
         "error: --tokenizer {tmp}/gone.model cannot be read"),
        (["--input", "{corpus}", "--tokenizer", f"{DATA}/no_bos_eos.model"], "has no BOS id"),
        (["--input", "{corpus}", "--tokenizer", f"{DATA}/tiny_corpus.txt"],
         "is not a SentencePiece model"),
        (["--tokenizer", "bytes"], "error: --input is required"),
        (["--input", "{corpus}", "--tokenizer", "bytes", "--window", str(1 << 63)],
         "error: `window` must be a positive integer below 2**63, but got 9223372036854775808"),
        (["--input", "{corpus}", "--tokenizer", "bytes", "--window", "8", "--stride",
          str(1 << 64)], "error: `stride` must be a positive integer below 2**63"),
    ],
)
def test_missing_inputs_and_tokenizers_are_one_line_errors(capsys, corpus, tmp_path, args,
                                                           message):
    fill = {"tmp": tmp_path, "corpus": corpus}
    err = refused(capsys, "--output", str(tmp_path / "o"), *(a.format(**fill) for a in args))
    assert message.format(**fill) in err
    assert err.count("\n") == 1, err


def test_missing_output_is_a_one_line_error(capsys, corpus):
    err = refused(capsys, "--input", str(corpus), "--tokenizer", "bytes")
    assert err == "error: --output is required: pass the directory for the shards\n"


@pytest.mark.slow
def test_existing_output_is_refused_then_overwritten_without_stale_shards(capsys, corpus,
                                                                          tmp_path):
    out = tmp_path / "out"
    run_job(out, "--input", str(corpus), "--tokenizer", "bytes", "--num-shards", "3")
    err = refused(capsys, "--input", str(corpus), "--tokenizer", "bytes", "--output", str(out))
    assert "already holds 5 files" in err and "--overwrite" in err
    run_job(out, "--input", str(corpus), "--tokenizer", "bytes", "--num-shards", "2",
            "--overwrite")
    assert sorted(p.name for p in out.iterdir()) == [
        MANIFEST_NAME, REJECTS_DIR, "part-00000-of-00002.parquet", "part-00001-of-00002.parquet",
    ]
    (out / "notes.txt").write_text("mine")
    err = refused(capsys, "--input", str(corpus), "--tokenizer", "bytes", "--output", str(out),
                  "--overwrite")
    assert "that no manifest (nor a killed job's claim) accounts for, e.g. notes.txt" in err


@pytest.mark.slow  # runs `python -m pipeline` as subprocesses
def test_the_real_entry_point_helps_and_refuses(corpus, tmp_path):
    """``python -m pipeline`` as a user runs it: --help lists every option; an error is one
    line (after whatever Beam logs on import), status 2, no traceback."""
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True,
                              text=True, cwd=ROOT, timeout=300)

    r = cli("--help")
    assert r.returncode == 0
    for flag in FLAGS:
        assert flag in r.stdout
    r = cli("--input", str(corpus), "--tokenizer", "bytes", "--output", str(tmp_path / "o"),
            "--window", "0")
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == "error: `window` must be a positive integer, but got 0"
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()

def test_a_misspelled_flag_is_refused_before_any_work(corpus, tmp_path, capsys):
    # Which flag is meant: tests/pipeline/launch/test_flags.py.
    code, err = exit_code(capsys, "--input", str(corpus), "--tokenizer", "bytes", "--output",
                          str(tmp_path / "o"), "--widow", "3")
    assert code == 2 and err == "error: --widow is not an option; did you mean --window?"
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_beams_own_flags_still_pass(corpus, tmp_path):
    plain = run_job(tmp_path / "a", "--input", str(corpus), "--tokenizer", "bytes")
    with_flags = run_job(tmp_path / "o", "--input", str(corpus), "--tokenizer", "bytes",
                         "--direct_running_mode=in_memory", "--direct_num_workers", "1")
    assert with_flags["counts"]["documents"] == plain["counts"]["documents"] > 0
    assert [s["sha256"] for s in with_flags["shards"]] == [s["sha256"] for s in plain["shards"]]


def test_non_utf8_file_name_is_refused_with_the_name_escaped(tmp_path, capsys):
    name = os.fsdecode(b"caf\xe9.jsonl")
    write_jsonl(tmp_path / "in" / name, [{"text": "abc"}])
    assert relative_name(str(tmp_path / "in" / name), str(tmp_path / "in") + "/") == (
        "caf\\xe9.jsonl")
    code, err = exit_code(capsys, "--input", str(tmp_path / "in" / "*.jsonl"), "--tokenizer",
                          "bytes", "--output", str(tmp_path / "o"))
    assert code == 2 and "caf\\xe9.jsonl, whose name is not UTF-8" in err


@pytest.mark.slow
def test_parquet_with_a_truncated_footer_names_the_file_exit_1(tmp_path, capsys):
    import pyarrow as pa

    src = tmp_path / "in" / "p.parquet"
    src.parent.mkdir()
    pq.write_table(pa.table({"text": ["a", "b"]}), src)
    src.write_bytes(src.read_bytes()[:-20])
    code, err = exit_code(capsys, "--input", str(src), "--tokenizer", "bytes", "--output",
                          str(tmp_path / "o"))
    assert code == 1 and f"cannot read input file {src}" in err


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


@pytest.mark.slow
def test_a_failure_while_running_is_one_line_exit_1(tmp_path, capsys):
    src = tmp_path / "x.jsonl.gz"
    src.write_bytes(gzip.compress(b'{"text": "a"}\n' * 100)[:-30])
    code, err = exit_code(capsys, "--input", str(src), "--tokenizer", "bytes", "--output",
                          str(tmp_path / "o"))
    assert code == 1 and err.startswith(f"error: the job failed: cannot read input file {src}")
    # Claim and temporary files removed, and the OUTPUT it made itself.
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("mode", "spread"), [
    ((), False),  # the local runner in_memory: one worker, the chunks fused with encoding
    (("--direct_running_mode", "multi_processing", "--direct_num_workers", "2"), True),
])
def test_the_local_runner_spreads_the_chunks_only_over_several_workers(
        corpus, tmp_path, monkeypatch, mode, spread):
    run_module = sys.modules["pipeline.job"]
    built = {}

    class Built(Exception):
        pass

    def build(p, context, **kwargs):
        built.update(kwargs)
        raise Built

    monkeypatch.setattr(run_module, "build_pipeline", build)
    with pytest.raises(Built):
        run_module.submit(["--input", str(corpus), "--tokenizer", "bytes", "--output",
                           str(tmp_path / "o"), *mode])
    assert [c.rel for c in built["chunks"]] == [corpus.name]
    assert built["spread_chunks"] is spread
    assert not (tmp_path / "o" / ".claim").exists()  # released: nothing ran
