"""``--overwrite`` replaces a dataset only when the new one is complete (docs/integrity.md).

The job writes into ``OUTPUT/.tmp/<attempt>/new/`` and its last step swaps
(`pipeline.files.commit`). A job that fails, or is stopped by SIGINT, SIGTERM or SIGHUP while its
shards are being written, leaves the previous dataset byte for byte, no temporary file and no claim,
and no OUTPUT of its own where there was none. Every test hashes the previous dataset and the tree
outside OUTPUT before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from pipeline.files import commit, confine
from tests.common.jobs import dir_bytes, run_job, run_main, tree_digest, write_jsonl
from tests.common.paths import ROOT, SAMPLES

# README's command 1, run from the repository (the manifest records the paths as given).
SAMPLE = ["--input", "samples/corpus/*.jsonl", "--tokenizer", "samples/spm.model",
          "--id-field", "id", "--window", "512"]
SHARD_SHA = "8b46bea084d7899a7ed35664a0fb3d1bd6bd1938f4c8b6d5289a34c874aed058"
MANIFEST_SHA = "52b9d04e2fb47c01c344f0c806e95ec8e8c9288ac5d59da2859f60ea3a955d7a"


def _sha(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _old_dataset(out: pathlib.Path) -> dict[str, str]:
    """A previous dataset in ``out`` (two shards and a reject file), as `_tree` sees it."""
    src = write_jsonl(out.parent / "old-in" / "old.jsonl",
                      [{"text": f"old document {i} " * 40} for i in range(30)] + ["{broken"])
    run_job(out, "--input", str(src), "--tokenizer", "bytes", "--window", "64",
            "--num-shards", "2")
    tree = tree_digest(out)
    assert sorted(tree) == ["_manifest.json", "_rejects", "_rejects/malformed_json.jsonl",
                            "part-00000-of-00002.parquet", "part-00001-of-00002.parquet"]
    return tree


# ---------------------------------------------------------------- the sample's bytes


@pytest.mark.slow
def test_overwrite_gives_the_sample_bytes_and_removes_the_old_files(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _old_dataset(out)
    monkeypatch.chdir(ROOT)
    code, err = run_main(*SAMPLE, "--output", str(out), "--overwrite")
    assert code == 0, err
    # The old second shard and reject file are gone; the staging and the claim too.
    assert sorted(os.listdir(out)) == ["_manifest.json", "part-00000-of-00001.parquet"]
    assert _sha(out / "part-00000-of-00001.parquet") == SHARD_SHA
    assert _sha(out / "_manifest.json") == MANIFEST_SHA
    code, err = run_main(*SAMPLE, "--output", str(out), "--overwrite")  # over itself
    assert code == 0, err
    assert sorted(os.listdir(out)) == ["_manifest.json", "part-00000-of-00001.parquet"]
    assert (_sha(out / "part-00000-of-00001.parquet"), _sha(out / "_manifest.json")) == (
        SHARD_SHA, MANIFEST_SHA)


# ---------------------------------------------------------------- a job that fails


@pytest.mark.slow
def test_a_failed_job_keeps_the_old_dataset_byte_for_byte(tmp_path):
    out = tmp_path / "out"
    before = _old_dataset(out)
    outside = tree_digest(tmp_path, leave_out=out)
    bad = write_jsonl(tmp_path / "bad.jsonl", ["{broken", "{also broken"])  # all skipped
    code, err = run_main("--input", str(bad), "--tokenizer", "bytes", "--window", "64",
                         "--output", str(out), "--overwrite")
    assert code == 1, err
    assert "error: the job failed:" in err
    assert tree_digest(out) == before  # no .tmp, no .claim, every old file as it was
    assert tree_digest(tmp_path, leave_out=out) == {**outside, "bad.jsonl": _sha(bad)}


@pytest.mark.slow
def test_a_failed_job_on_a_fresh_output_leaves_no_output(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", ["{broken"])
    code, err = run_main("--input", str(bad), "--tokenizer", "bytes", "--output",
                         str(tmp_path / "a" / "b"))
    assert code == 1, err
    assert sorted(os.listdir(tmp_path)) == ["bad.jsonl"]  # not even the parent it made
    # An empty OUTPUT that was there before stays.
    (tmp_path / "mine").mkdir()
    code, err = run_main("--input", str(bad), "--tokenizer", "bytes", "--output",
                         str(tmp_path / "mine"))
    assert code == 1, err
    assert sorted(os.listdir(tmp_path)) == ["bad.jsonl", "mine"]
    assert os.listdir(tmp_path / "mine") == []


# ---------------------------------------------------------------- signals


def _big_corpus(path: pathlib.Path, copies: int) -> pathlib.Path:
    """The sample corpus ``copies`` times over, each copy with its own ids."""
    records = [json.loads(line) for p in sorted((SAMPLES / "corpus").glob("*.jsonl"))
               for line in p.read_text(encoding="utf-8").splitlines()]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for k in range(copies):
            for r in records:
                f.write(json.dumps({**r, "id": f"{k}-{r['id']}"}) + "\n")
    return path


def _start_job(big: pathlib.Path, out: pathlib.Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", "--input", str(big), "--tokenizer", "bytes",
         "--id-field", "id", "--window", "512", "--num-shards", "4", "--output", str(out),
         *extra],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _when_a_shard_is_being_written(proc: subprocess.Popen, out: pathlib.Path) -> None:
    """Wait until a shard's temporary file exists in the job's temporary directory."""
    deadline = time.monotonic() + 300
    while not list((out / ".tmp").glob("*/part-*.parquet.*")):
        if proc.poll() is not None:
            pytest.fail(f"the job ended ({proc.returncode}) before a shard was being written; "
                        f"make the input larger: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no shard was written within 300 s")
        time.sleep(0.005)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return _big_corpus(tmp_path_factory.mktemp("big") / "big.jsonl", copies=30)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_while_shards_are_written_keeps_the_old_dataset(tmp_path, big, name):
    out = tmp_path / "out"
    before = _old_dataset(out)
    outside = tree_digest(tmp_path, leave_out=out)
    proc = _start_job(big, out, "--overwrite")
    try:
        _when_a_shard_is_being_written(proc, out)
        proc.send_signal(getattr(signal, name))
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 1, err.decode()
    assert lines[-1] == (f"error: stopped by {name}: the job's temporary files and its claim "
                         "were removed, and --output holds what it held before; run the "
                         "command again to make the dataset"), err.decode()
    assert "Traceback" not in err.decode()
    assert tree_digest(out) == before  # every old byte; no staging, spill files or claim
    assert tree_digest(tmp_path, leave_out=out) == outside


@pytest.mark.slow
def test_sigterm_on_a_fresh_output_leaves_no_output(tmp_path, big):
    out = tmp_path / "out"
    proc = _start_job(big, out)
    try:
        _when_a_shard_is_being_written(proc, out)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err.decode()
    assert err.decode().strip().splitlines()[-1].startswith("error: stopped by SIGTERM: ")
    assert not out.exists()
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- FIFOs below OUTPUT


def _launch_with_timeout(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pipeline", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("name", [".claim", "_manifest.json"])
def test_a_fifo_below_output_is_refused_at_once(tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / name)
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "hello"}])
    done = _launch_with_timeout("--input", str(src), "--tokenizer", "bytes", "--output",
                                str(out), "--overwrite")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {out / name} is a FIFO (named pipe), not a regular file: the job opens only "
        "regular files below --output (a FIFO would hold it up for ever); remove it "
        f"(rm '{out / name}') or choose another --output")
    assert sorted(os.listdir(out)) == [name]


# ---------------------------------------------------------------- the swap itself


def _files(root: pathlib.Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


OLD = {"_manifest.json": b"old manifest", "part-00000-of-00002.parquet": b"old 0",
       "part-00001-of-00002.parquet": b"old 1", "_rejects/empty.jsonl": b"old rejects"}
NEW = {"_manifest.json": b"new manifest", "part-00000-of-00001.parquet": b"new 0"}


def _staged(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    out = tmp_path / "out"
    tmp = out / ".tmp" / "attempt"
    _files(out, OLD)
    _files(tmp / "new", NEW)
    return out, tmp


def test_order_puts_manifests_last_in_and_first_out():
    rels = ["val/_manifest.json", "_splits.json", "val/part-00000-of-00001.parquet",
            "_rejects/empty.jsonl", "_manifest.json"]
    assert commit.order_new(rels) == ["_rejects/empty.jsonl", "val/part-00000-of-00001.parquet",
                                      "val/_manifest.json", "_manifest.json", "_splits.json"]
    assert commit.order_old(rels) == ["_splits.json", "_manifest.json", "val/_manifest.json",
                                      "_rejects/empty.jsonl", "val/part-00000-of-00001.parquet"]


def test_swap_moves_the_old_aside_and_the_new_in(tmp_path):
    out, tmp = _staged(tmp_path)
    commit.swap(str(out), str(tmp), old=sorted(OLD), new=sorted(NEW))
    assert dir_bytes(out).items() >= NEW.items()
    assert {k: v for k, v in dir_bytes(tmp / "old").items()} == OLD
    assert not (tmp / "new").exists() or dir_bytes(tmp / "new") == {}


@pytest.mark.parametrize("fail_at", range(1, 7))
def test_a_swap_that_fails_part_way_is_undone(tmp_path, monkeypatch, fail_at):
    out, tmp = _staged(tmp_path)
    before = tree_digest(out)
    real, calls = confine.rename, []

    def flaky(root: str, src: str, dst: str) -> None:
        calls.append(src)
        if len(calls) == fail_at:
            raise KeyboardInterrupt  # as a signal would, between two renames
        real(root, src, dst)

    monkeypatch.setattr(confine, "rename", flaky)
    with pytest.raises(KeyboardInterrupt):
        commit.swap(str(out), str(tmp), old=sorted(OLD), new=sorted(NEW))
    assert tree_digest(out, leave_out=out / ".tmp") == {
        k: v for k, v in before.items() if not k.startswith(".tmp")}
    assert dir_bytes(tmp / "new") == NEW  # staged again, for nothing


@pytest.mark.parametrize("killed_after", range(1, 7))
def test_the_next_overwrite_undoes_a_killed_swap(tmp_path, monkeypatch, killed_after):
    out, tmp = _staged(tmp_path)
    before = tree_digest(out, leave_out=out / ".tmp")
    real, calls = confine.rename, []

    def killed(root: str, src: str, dst: str) -> None:
        calls.append(src)
        if len(calls) == killed_after:
            raise SystemExit  # the process dies here: nothing undoes it
        real(root, src, dst)

    monkeypatch.setattr(confine, "rename", killed)
    monkeypatch.setattr(commit, "undo", lambda output, tmp_dir: True)
    with pytest.raises(SystemExit):
        commit.swap(str(out), str(tmp), old=sorted(OLD), new=sorted(NEW))
    monkeypatch.undo()
    # What `pipeline.files.output.claim_output` does with a stale claim's attempt.
    from pipeline.files.output import _recover

    _recover(str(out), "attempt")
    assert tree_digest(out, leave_out=out / ".tmp") == before


# ---------------------------------------------------------------- inputs that hold nothing


@pytest.mark.slow
def test_inputs_of_0_bytes_are_refused_as_a_blank_line_is(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(b"")
    (tmp_path / "in" / "b.jsonl").write_bytes(b"")
    code, err = run_main("--input", str(tmp_path / "in" / "*.jsonl"), "--tokenizer", "bytes",
                         "--output", str(tmp_path / "out"))
    assert code == 2, err
    assert err.strip().splitlines()[-1] == (
        f"error: --input {tmp_path}/in/*.jsonl matches only empty files (2 files of 0 bytes, "
        f"e.g. {tmp_path}/in/a.jsonl): there is no record to make a dataset of; check the "
        "pattern, or wait until the files are written")
    assert not (tmp_path / "out").exists()
    # One blank line: the job fails too (every record skipped).
    (tmp_path / "in" / "a.jsonl").write_bytes(b"\n")
    code, err = run_main("--input", str(tmp_path / "in" / "*.jsonl"), "--tokenizer", "bytes",
                         "--output", str(tmp_path / "out"))
    assert code == 1 and "all 1 records skipped as blank_line" in err, err


@pytest.mark.slow
def test_an_empty_archive_fails_the_job_naming_it(tmp_path):
    import gzip

    src = tmp_path / "e.jsonl.gz"
    src.write_bytes(gzip.compress(b""))
    code, err = run_main("--input", str(src), "--tokenizer", "bytes", "--output",
                         str(tmp_path / "out"))
    assert code == 1, err
    assert err.strip().splitlines()[-1] == (
        "error: the job failed: the input (1 file) holds no record (empty files, or empty "
        "archives or Parquet files): there is nothing to make a dataset of; no manifest was "
        "written: check --input")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- a store that never answers


@pytest.mark.slow
def test_a_gcs_store_that_never_answers_is_refused_after_a_bounded_wait(tmp_path, monkeypatch):
    pytest.importorskip("apache_beam.io.gcp.gcsio", reason="needs apache-beam[gcp]")
    import socket

    from apache_beam.internal.gcp import auth

    from pipeline.launch import preflight

    # A port that takes connections and never says a word: where no network reaches the
    # store, Beam's anonymous client waits and retries just so.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setattr(auth, "get_service_credentials", lambda *args, **kwargs: None)
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "test-project")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setattr(preflight, "GCS_ANSWER_SECONDS", 2.0)
    try:
        code, err = run_main("--input", "gs://bucket/corpus/*.jsonl", "--tokenizer", "bytes",
                             "--output", str(tmp_path / "out"))
    finally:
        silent.close()
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: gs://bucket/corpus/*.jsonl: Google Cloud Storage did not "
                           "answer within 2 s ("), last
    assert last.endswith("); check the network (or STORAGE_EMULATOR_HOST), and the "
                         "credentials: gcloud auth application-default login, or "
                         "GOOGLE_APPLICATION_CREDENTIALS"), last
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- S3 uploads a stopped job began


@pytest.mark.slow
def test_a_stopped_jobs_open_s3_uploads_are_aborted(moto_bucket):
    pytest.importorskip("apache_beam.io.aws.s3io", reason="needs apache-beam[aws]")
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.files import fs

    s3, endpoint = moto_bucket
    fs.set_options(PipelineOptions([
        "--s3_endpoint_url", endpoint, "--s3_access_key_id", "test",
        "--s3_secret_access_key", "test", "--s3_region_name", "us-east-1"]))
    ours = ["out/.tmp/3f2a/shuffle/spill-0", "out/.tmp/3f2a/part-00000-of-00001.parquet.9c1"]
    theirs = ["out/.tmp/3f2ab/x", "other/.tmp/3f2a/y"]  # another attempt; another output
    for key in ours + theirs:
        s3.create_multipart_upload(Bucket="bucket", Key=key)
    assert fs.abort_uploads("s3://bucket/out/.tmp/3f2a") == 2
    left = s3.list_multipart_uploads(Bucket="bucket").get("Uploads", [])
    assert sorted(u["Key"] for u in left) == sorted(theirs)
    assert fs.abort_uploads("gs://bucket/out/.tmp/3f2a") == 0


@pytest.mark.slow
@pytest.mark.parametrize("killed_at", [1, 2])
def test_the_next_overwrite_finishes_a_killed_swap_on_s3(moto_bucket, monkeypatch, killed_at):
    pytest.importorskip("apache_beam.io.aws.s3io", reason="needs apache-beam[aws]")
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.files import fs
    from pipeline.files.output import _recover

    s3, endpoint = moto_bucket
    fs.set_options(PipelineOptions([
        "--s3_endpoint_url", endpoint, "--s3_access_key_id", "test",
        "--s3_secret_access_key", "test", "--s3_region_name", "us-east-1"]))
    for rel, data in OLD.items():
        s3.put_object(Bucket="bucket", Key=f"out/{rel}", Body=data)
    for rel, data in NEW.items():
        s3.put_object(Bucket="bucket", Key=f"out/.tmp/att/new/{rel}", Body=data)
    real, calls = fs.rename, []

    def killed(src: str, dst: str, *, root: str) -> None:
        calls.append(src)
        if len(calls) == killed_at:
            raise SystemExit  # the process dies here: a bucket's swap cannot be undone
        real(src, dst, root=root)

    monkeypatch.setattr(fs, "rename", killed)
    with pytest.raises(SystemExit):
        commit.swap("s3://bucket/out", "s3://bucket/out/.tmp/att", old=sorted(OLD),
                    new=sorted(NEW))
    monkeypatch.undo()

    def stored() -> dict[str, bytes]:
        listed = s3.list_objects_v2(Bucket="bucket", Prefix="out/").get("Contents", [])
        return {o["Key"].removeprefix("out/"):
                s3.get_object(Bucket="bucket", Key=o["Key"])["Body"].read()
                for o in listed if not o["Key"].startswith("out/.tmp/")}

    assert "_manifest.json" not in stored()  # inside the window: no manifest at all
    _recover("s3://bucket/out", "att")  # what the next --overwrite does first
    assert stored() == NEW


# ---------------------------------------------------------------- more shards than documents


@pytest.mark.slow
def test_more_shards_than_documents_fails_before_the_swap(tmp_path):
    out = tmp_path / "out"
    before = _old_dataset(out)
    src = write_jsonl(tmp_path / "three.jsonl", [{"text": f"doc {i}"} for i in range(3)])
    code, err = run_main("--input", str(src), "--tokenizer", "bytes", "--num-shards", "50",
                         "--output", str(out), "--overwrite")
    assert code == 1, err
    assert err.strip().splitlines()[-1] == (
        "error: the job failed: --num-shards 50 is more than the 3 documents of the input: at "
        "least 47 shards would be empty; no manifest was written: pass --num-shards 3 or fewer")
    assert tree_digest(out) == before  # not one of the 47 empty shards written
    code, err = run_main("--input", str(src), "--tokenizer", "bytes", "--num-shards", "3",
                         "--output", str(out), "--overwrite")
    assert code == 0, err
