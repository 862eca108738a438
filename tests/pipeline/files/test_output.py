"""`pipeline.files.output`: the output directory: one job's claim on it, what --overwrite may
delete, and what the job refuses to write into before any work."""

from __future__ import annotations

import os

import pytest

from pipeline.files.output import Claim, read_claim
from tests.common.jobs import exit_code, run_job
from transforms.dataset.manifest import MANIFEST_NAME
from transforms.dataset.schema import REJECTS_DIR


@pytest.mark.slow
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


@pytest.mark.parametrize("stray", [f"{REJECTS_DIR}/my_analysis.csv", ".tmp/keep.txt",
                                   "part-00007-of-00009.parquet"])
@pytest.mark.slow
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


@pytest.mark.parametrize(("text", "claim", "holder"), [
    ('{"attempt": "a1", "fingerprint": "f", "host": "h", "pid": 7, "made_dirs": 2, '
     '"started": "2026-12-04T02:00:00+0000"}',
     Claim(attempt="a1", fingerprint="f", host="h", pid=7, made_dirs=2,
           started="2026-12-04T02:00:00+0000"),
     "attempt a1, pid 7 on h, since 2026-12-04T02:00:00+0000"),
    ('{"attempt": "a1", "pid": 1, "host": "h"}', Claim(attempt="a1", pid=1, host="h"),
     "attempt a1, pid 1 on h, since ?"),
    # Unreadable, or values of another type: still a claim, of an unknown job.
    ("{not json", Claim(), "attempt ?, pid ? on ?, since ?"),
    ("[1, 2]", Claim(), "attempt ?, pid ? on ?, since ?"),
    ('{"attempt": 5, "pid": true, "made_dirs": "2", "host": null}', Claim(),
     "attempt ?, pid ? on ?, since ?"),
])
def test_a_claim_is_read_as_far_as_it_can_be(tmp_path, text, claim, holder):
    assert read_claim(str(tmp_path)) is None
    (tmp_path / ".claim").write_text(text)
    assert read_claim(str(tmp_path)) == claim
    assert claim.holder() == holder
