"""The job end to end on object stores: corpus, tokenizer and output in the store.

A real S3 server (moto's ``moto_server``) and a real GCS server (``gcp-storage-emulator``),
each started by the test on 127.0.0.1 and stopped by its PID; the job on the local runner
through the command line's entry point (`pipeline.job.main`, in this process); the shards
byte-identical to the same job on local files; ``--overwrite`` and the removal of the job's
temporary files checked in the bucket; the reader (`reader.WindowDataset`) reading the
dataset back from the store through ``pyarrow.fs``. Nothing here reaches anything but
loopback: the AWS clients may not ask the EC2 metadata service, Beam's GCS credential lookup
is replaced by anonymous credentials and the metadata host is a closed loopback port.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pathlib
import socket
import subprocess
from collections.abc import Callable

import pytest

from tests.common.jobs import dir_bytes, run_job, run_main, write_jsonl
from tests.common.paths import SAMPLES
from tests.common.servers import stop_processes, wait_listening
from transforms.dataset.manifest import MANIFEST_NAME
from transforms.dataset.schema import REJECTS_DIR

pytestmark = pytest.mark.slow  # every test here starts an S3 or a GCS server


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _server(cmd: list[str], port: int, log: pathlib.Path, env: dict[str, str] | None = None):
    """Run a server until it accepts connections on 127.0.0.1:port; always stopped by PID."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_listening(proc, port, cmd[0], log)
        yield proc
    finally:
        stop_processes([proc], timeout=10)



def _inputs(tmp_path: pathlib.Path) -> dict[str, bytes]:
    """{name in the store: bytes}: two sample files, a file of bad records, the model."""
    bad = write_jsonl(tmp_path / "bad.jsonl", [
        {"id": "persuasion-ch01", "text": "a second document with the id of a sample"},
        '{"id": "broken", "text": ',
        {"text": "no id"},
    ])
    files = {f"corpus/{p.name}": p.read_bytes()
             for p in sorted((SAMPLES / "corpus").glob("*.jsonl"))[:2]}
    files["corpus/bad.jsonl"] = bad.read_bytes()
    files["models/spm.model"] = (SAMPLES / "spm.model").read_bytes()
    return files


FLAGS = ["--id-field", "id", "--window", "64", "--stride", "48", "--tail", "trace_back",
         "--seed", "7", "--num-shards", "2"]


def _local_run(tmp_path: pathlib.Path, files: dict[str, bytes]) -> pathlib.Path:
    local = tmp_path / "local"
    for name, data in files.items():
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        (local / name).write_bytes(data)
    run_job(tmp_path / "local-out", "--input", str(local / "corpus" / "*.jsonl"),
            "--tokenizer", str(local / "models" / "spm.model"), *FLAGS)
    return tmp_path / "local-out"


def _check_same_dataset(got: dict[str, bytes], want: dict[str, bytes], *, store: str,
                        local: pathlib.Path) -> None:
    """Every shard byte-identical; the reject files and the manifest too, but where they
    name the inputs' and the model's place (the store's, or the local directory)."""
    assert sorted(got) == sorted(want)
    assert sorted(want) == sorted([
        MANIFEST_NAME, "part-00000-of-00002.parquet", "part-00001-of-00002.parquet",
        f"{REJECTS_DIR}/duplicate_id.jsonl", f"{REJECTS_DIR}/malformed_json.jsonl",
        f"{REJECTS_DIR}/missing_id.jsonl"])
    for name in want:
        if name.startswith(REJECTS_DIR):
            assert got[name].replace(store.encode(), str(local).encode()) == want[name], name
        elif name != MANIFEST_NAME:
            assert got[name] == want[name], name
    mine, theirs = json.loads(got[MANIFEST_NAME]), json.loads(want[MANIFEST_NAME])
    assert mine["inputs"] == [f"{store}/corpus/*.jsonl"], mine["inputs"]
    assert mine["tokenizer"]["path"] == f"{store}/models/spm.model"
    mine["inputs"], mine["tokenizer"]["path"] = theirs["inputs"], theirs["tokenizer"]["path"]
    assert mine == theirs


def _check_overwrite(job: list[str], put: Callable[[str], object],
                     remove: Callable[[str], object]) -> None:
    """On the store as on a disk: a second run is refused without ``--overwrite`` and
    replaces the dataset with it; a file no manifest accounts for is never deleted."""
    code, err = run_main(*job)
    assert code == 2 and "--overwrite" in err, err
    code, err = run_main(*job, "--overwrite")
    assert code == 0, err
    put("out/notes.txt")
    code, err = run_main(*job, "--overwrite")
    assert code == 2, err
    assert "no manifest (nor a killed job's claim) accounts for, e.g. notes.txt" in err, err
    remove("out/notes.txt")


def _windows(ds) -> list[dict]:
    return [{**w, "tokens": w["tokens"].tolist()} for w in (ds[i] for i in range(len(ds)))]


# ---------------------------------------------------------------- S3 (moto_server)

@pytest.fixture
def s3(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch):
    """moto's S3 server on 127.0.0.1: yields (endpoint, boto3 client). No AWS client here
    may ask the EC2 instance metadata service (169.254.169.254) for anything."""
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    pytest.importorskip("moto.server", reason="the S3 test needs moto[server]")
    boto3 = pytest.importorskip("boto3", reason="the S3 test needs boto3 (apache-beam[aws])")
    port = _free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
    with _server(["moto_server", "-H", "127.0.0.1", "-p", str(port)], port,
                 tmp_path / "moto.log", env):
        endpoint = f"http://127.0.0.1:{port}"
        yield endpoint, boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                                     aws_secret_access_key="test", region_name="us-east-1")


def test_s3_corpus_tokenizer_and_output_same_bytes_overwrite_and_the_reader(tmp_path, s3):
    pytest.importorskip("apache_beam.io.aws.s3io", reason="needs apache-beam[aws]")
    from reader import WindowDataset

    endpoint, client = s3
    files = _inputs(tmp_path)
    client.create_bucket(Bucket="bucket")
    for name, data in files.items():
        client.put_object(Bucket="bucket", Key=name, Body=data)
    want = dir_bytes(_local_run(tmp_path, files))

    options = ["--s3_endpoint_url", endpoint, "--s3_access_key_id", "test",
               "--s3_secret_access_key", "test", "--s3_region_name", "us-east-1"]
    job = ["--input", "s3://bucket/corpus/*.jsonl", "--tokenizer", "s3://bucket/models/spm.model",
           "--output", "s3://bucket/out", *FLAGS, *options]

    def stored() -> dict[str, bytes]:
        listed = client.list_objects_v2(Bucket="bucket", Prefix="out/").get("Contents", [])
        return {o["Key"].removeprefix("out/"):
                client.get_object(Bucket="bucket", Key=o["Key"])["Body"].read() for o in listed}

    code, err = run_main(*job)
    assert code == 0, err
    # Every key under out/ is the dataset's: the claim and OUTPUT/.tmp/ are gone.
    _check_same_dataset(stored(), want, store="s3://bucket", local=tmp_path / "local")

    _check_overwrite(job,
                     lambda key: client.put_object(Bucket="bucket", Key=key, Body=b"not ours"),
                     lambda key: client.delete_object(Bucket="bucket", Key=key))
    _check_same_dataset(stored(), want, store="s3://bucket", local=tmp_path / "local")

    local = _windows(WindowDataset(tmp_path / "local-out", cache_dir=tmp_path / "c0"))
    import pyarrow.fs as pafs

    host = endpoint.removeprefix("http://")
    by_filesystem = WindowDataset("bucket/out", cache_dir=tmp_path / "c1", filesystem=(
        pafs.S3FileSystem(endpoint_override=host, scheme="http", access_key="test",
                          secret_key="test", region="us-east-1")))
    by_uri = WindowDataset(f"s3://test:test@bucket/out?endpoint_override={host}&scheme=http"
                           "&region=us-east-1", cache_dir=tmp_path / "c2")
    assert len(local) > 0
    assert _windows(by_filesystem) == local
    assert _windows(by_uri) == local


# ---------------------------------------------------------------- GCS (gcp-storage-emulator)


@pytest.fixture
def gcs_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No credential lookup: Beam's GCS client would retry Google's default credentials
    for about 30 s before it settles for anonymous ones, which the emulator takes; and the
    metadata server, should anything ask, is a closed port on 127.0.0.1."""
    from apache_beam.internal.gcp import auth

    monkeypatch.setattr(auth, "get_service_credentials", lambda *args, **kwargs: None)
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "test-project")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)


def test_gcs_corpus_tokenizer_and_output_same_bytes_overwrite_and_the_reader(
        tmp_path, monkeypatch, gcs_env):
    pytest.importorskip("apache_beam.io.gcp.gcsio", reason="needs apache-beam[gcp]")
    storage = pytest.importorskip("google.cloud.storage", reason="needs apache-beam[gcp]")
    if subprocess.run(["which", "gcp-storage-emulator"], capture_output=True).returncode:
        pytest.skip("the GCS test needs gcp-storage-emulator (pip install -e '.[test]')")
    from google.auth.credentials import AnonymousCredentials

    from reader import WindowDataset

    port = _free_port()
    with _server(["gcp-storage-emulator", "start", "--host", "127.0.0.1", "--port", str(port),
                  "--in-memory", "--quiet"], port, tmp_path / "gcs.log"):
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
        client = storage.Client(project="test-project", credentials=AnonymousCredentials())
        bucket = client.create_bucket("bucket")
        files = _inputs(tmp_path)
        for name, data in files.items():
            bucket.blob(name).upload_from_string(data)
        want = dir_bytes(_local_run(tmp_path, files))

        job = ["--input", "gs://bucket/corpus/*.jsonl", "--tokenizer",
               "gs://bucket/models/spm.model", "--output", "gs://bucket/out", *FLAGS]

        def stored() -> dict[str, bytes]:
            return {b.name.removeprefix("out/"): b.download_as_bytes()
                    for b in client.list_blobs("bucket", prefix="out/")}

        code, err = run_main(*job)
        assert code == 0, err
        _check_same_dataset(stored(), want, store="gs://bucket", local=tmp_path / "local")

        _check_overwrite(job, lambda key: bucket.blob(key).upload_from_string(b"not ours"),
                         lambda key: bucket.blob(key).delete())
        _check_same_dataset(stored(), want, store="gs://bucket", local=tmp_path / "local")

        local = _windows(WindowDataset(tmp_path / "local-out", cache_dir=tmp_path / "c0"))
        remote = WindowDataset(f"gs://anonymous@bucket/out?endpoint_override=127.0.0.1:{port}"
                               "&scheme=http", cache_dir=tmp_path / "c1")
        assert len(local) > 0
        assert _windows(remote) == local


# ---------------------------------------------------------------- S3: confined keys, read errors
# (docs/integrity.md#the-job)


@pytest.mark.slow
def test_s3_output_with_dot_dot_is_refused_and_the_bucket_untouched(tmp_path, s3):
    pytest.importorskip("apache_beam.io.aws.s3io", reason="needs apache-beam[aws]")
    endpoint, client = s3
    client.create_bucket(Bucket="bucket")
    client.put_object(Bucket="bucket", Key="victim/empty.jsonl", Body=b"precious\n")

    def stored() -> dict[str, bytes]:
        listed = client.list_objects_v2(Bucket="bucket").get("Contents", [])
        return {o["Key"]: client.get_object(Bucket="bucket", Key=o["Key"])["Body"].read()
                for o in listed}

    before = stored()
    job_input = write_jsonl(tmp_path / "in.jsonl", [{"text": ""}, {"text": "ok"}])
    code, err = run_main("--input", str(job_input), "--tokenizer", "bytes",
                     "--output", "s3://bucket/data/../victim", "--s3_endpoint_url", endpoint,
                     "--s3_access_key_id", "test", "--s3_secret_access_key", "test",
                     "--s3_region_name", "us-east-1")
    assert code == 2, err
    assert "--output s3://bucket/data/../victim has '..' as a segment" in err, err
    assert stored() == before


@pytest.mark.slow
def test_an_input_bucket_deleted_mid_run_names_the_input(tmp_path, s3, monkeypatch):
    """The inputs were matched and their chunks planned; then, as the first chunk is read,
    their bucket is gone. The error names the input (not the spill file's
    CompleteMultipartUpload that the failure interrupted: "MalformedXML")."""
    pytest.importorskip("apache_beam.io.aws.s3io", reason="needs apache-beam[aws]")
    endpoint, client = s3
    client.create_bucket(Bucket="inputs")
    client.create_bucket(Bucket="outputs")
    for i in range(2):
        lines = [json.dumps({"text": f"document {k} of file {i}"}) for k in range(300)]
        client.put_object(Bucket="inputs", Key=f"corpus/{i}.jsonl",
                          Body="\n".join(lines).encode() + b"\n")
    encode = importlib.import_module("pipeline.steps.encode")
    reading = encode.read_chunk

    def bucket_gone(chunk, spec, open_file):
        with contextlib.suppress(client.exceptions.NoSuchBucket):  # the first chunk only
            for o in client.list_objects_v2(Bucket="inputs").get("Contents", []):
                client.delete_object(Bucket="inputs", Key=o["Key"])
            client.delete_bucket(Bucket="inputs")
        return reading(chunk, spec, open_file)

    monkeypatch.setattr(encode, "read_chunk", bucket_gone)
    code, err = run_main("--input", "s3://inputs/corpus/*.jsonl", "--tokenizer", "bytes",
                     "--output", "s3://outputs/ds", "--shuffle", "files",
                     "--s3_endpoint_url", endpoint, "--s3_access_key_id", "test",
                     "--s3_secret_access_key", "test", "--s3_region_name", "us-east-1")
    assert code == 1, err
    assert "error: the job failed: cannot read input file s3://inputs/corpus/" in err, err
    assert "MalformedXML" not in err and "CompleteMultipartUpload" not in err, err
    listed = client.list_objects_v2(Bucket="outputs").get("Contents", [])
    assert [o["Key"] for o in listed] == []  # the claim and the temporary files removed
