"""`pipeline.steps.finalize`: the last step writes a manifest only over its own job's shards, and
only when the records add up and enough of them became documents."""

from __future__ import annotations

import pytest

from tests.common.jobs import exit_code, run_job, write_jsonl
from transforms.dataset.manifest import MANIFEST_NAME


@pytest.mark.slow
def test_a_shard_of_another_job_never_sits_under_the_manifest(corpus, tmp_path):
    from pipeline.steps.finalize import _check_shard_footer

    run_job(tmp_path / "a", "--input", str(corpus), "--tokenizer", "bytes", "--seed", "1")
    b = run_job(tmp_path / "b", "--input", str(corpus), "--tokenizer", "bytes", "--seed", "2")
    shard = tmp_path / "a" / "part-00000-of-00001.parquet"
    with pytest.raises(RuntimeError, match="was written by another job"):
        _check_shard_footer(str(shard), b["fingerprint"])


@pytest.mark.slow
def test_every_record_rejected_fails_the_job(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [{"uid": i, "body": "x", "meta": {}}
                                              for i in range(40)])
    code, err = exit_code(capsys, "--input", str(src), "--tokenizer", "bytes", "--output",
                          str(tmp_path / "o"))
    assert code == 1
    assert (f"all 40 records skipped as missing_text; the first record ({src}:1) has keys "
            "uid, body, meta: pass --text-field") in err
    assert not (tmp_path / "o" / MANIFEST_NAME).exists()


@pytest.mark.slow
def test_max_skipped_share_fails_a_mostly_rejected_job(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "a"}, {"body": "b"}, {"body": "c"}])
    run_job(tmp_path / "ok", "--input", str(src), "--tokenizer", "bytes")
    with pytest.raises(Exception, match=r"2 of 3 records \(66.7 %\) skipped as missing_text"):
        run_job(tmp_path / "o", "--input", str(src), "--tokenizer", "bytes",
                "--max-skipped-share", "0.5")


def test_a_value_of_no_known_type_fails_the_last_step_before_anything_is_written():
    from pipeline.steps.finalize import _FinalizeFn

    fn = _FinalizeFn.__new__(_FinalizeFn)  # process sorts the group before it reads the context
    with pytest.raises(TypeError, match=r"FinalizeDataset got a str, which is no written "
                                        r"shard, input receipt or \(reason, RejectCount\)"):
        next(fn.process((None, ["shard?"])))
    with pytest.raises(TypeError, match="got a tuple"):
        next(fn.process((None, [("missing_text", 3)])))
