"""The same job on other engines, proved where no cluster is reachable (README "Running at scale").

* One corpus, one seed, four engines, one set of bytes: the FnApiRunner in one process and
  with two worker processes, Beam's portable path (a job submitted over the Job API to an
  embedded job server and executed by SDK workers that a separate worker pool process starts,
  as on Flink), and ``--runner=DirectRunner`` (which tries Prism first and falls back).
* A Dask cluster: a ``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1, the
  job submitted with ``--runner DaskRunner --dask_npartitions 4``: the same bytes, each
  chunk encoded and each shard written once, both workers encoding (one input file spread
  over both: tests/job/test_dask_chunks.py).
* The Dataflow translation, offline: with gs:// input, tokenizer and output, the job builds
  and translates for Dataflow with ``--setup_file ./setup.py`` while every socket, GCS client
  and credential lookup is made to fail, and the staged package holds the project.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata

import pytest

from tests.common.jobs import dir_bytes, fn_api_pipeline, run_job, write_jsonl
from tests.common.paths import ROOT, SAMPLES
from tests.common.runners import cli, distributed, listening, needs_dask, worker_env
from tests.common.servers import wait_listening
from transforms.dataset.manifest import MANIFEST_NAME
from transforms.dataset.schema import REJECTS_DIR

try:  # only with apache-beam[gcp]
    from apache_beam.runners.dataflow.internal import apiclient
except ImportError:
    apiclient = None

needs_gcp = pytest.mark.skipif(
    apiclient is None,
    reason="the Dataflow translation needs apache-beam[gcp] (pip install -e '.[gcp]')",
)

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop the worker pool and the SDK workers it started (its own process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the pool, or a worker that outlived it
    proc.wait(timeout=10)


@pytest.fixture
def worker_pool(tmp_path: pathlib.Path):
    """Beam's worker pool on a free local port: yields (port, its log file); always stopped."""
    port = _free_port()
    log_path = tmp_path / "worker_pool.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
             f"--service_port={port}"],
            cwd=ROOT,
            env=worker_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # one process group: the pool and its workers
        )
        try:
            wait_listening(proc, port, "the worker pool", log_path)
            yield port, log_path
        finally:
            _stop_group(proc)


# ---------------------------------------------------------------- same bytes everywhere


def _corpus(tmp_path: pathlib.Path) -> list[str]:
    """The sample corpus plus a file of bad records (rejects must match across engines)."""
    extra = write_jsonl(tmp_path / "extra" / "bad.jsonl", [
        {"id": "persuasion-ch01", "text": "a second document with the id of a sample"},
        '{"id": "broken", "text": ',
        {"text": "no id"},
        {"id": "empty", "text": ""},
        {"id": "short", "text": "Short, but a document."},
    ])
    return [
        "--input", str(SAMPLES / "corpus" / "*.jsonl"), "--input", str(extra),
        "--tokenizer", str(SAMPLES / "spm.model"), "--id-field", "id",
        "--window", "64", "--stride", "48", "--tail", "trace_back", "--score", "new",
        "--offset", "random", "--seed", "7", "--num-shards", "3",
    ]


@pytest.mark.slow
def test_same_bytes_on_fnapi_modes_portable_external_and_direct_runner(tmp_path, worker_pool):
    args = _corpus(tmp_path)
    want = run_job(tmp_path / "in_memory", *args, "--direct_running_mode=in_memory")
    run_job(tmp_path / "mp2", *args, "--direct_running_mode=multi_processing",
            "--direct_num_workers=2")

    port, pool_log = worker_pool
    portable = cli(*args, "--output", str(tmp_path / "portable"),
                    "--runner=PortableRunner", "--job_endpoint=embed",
                    "--environment_type=EXTERNAL", f"--environment_config=localhost:{port}")
    assert portable.returncode == 0, portable.stderr
    # The pool, not the launcher, ran the SDK harness: it logs each worker it starts.
    assert "Starting worker with command" in pool_log.read_text(errors="replace")

    # A bare DirectRunner tries Prism first. A missing --prism_location makes that fail
    # at once, offline or not, and it falls back to the FnApiRunner (Prism itself is not tested).
    direct = cli(*args, "--output", str(tmp_path / "direct"), "--runner=DirectRunner",
                  f"--prism_location={tmp_path / 'no-prism'}")
    assert direct.returncode == 0, direct.stderr

    expected = dir_bytes(tmp_path / "in_memory")
    assert sorted(expected) == sorted([
        MANIFEST_NAME, "part-00000-of-00003.parquet", "part-00001-of-00003.parquet",
        "part-00002-of-00003.parquet", *(f"{REJECTS_DIR}/{r}.jsonl" for r in (
            "duplicate_id", "empty", "malformed_json", "missing_id")),
    ])
    for engine in ("mp2", "portable", "direct"):
        got = dir_bytes(tmp_path / engine)
        assert sorted(got) == sorted(expected), engine
        for name in expected:
            assert got[name] == expected[name], (engine, name)

    assert want["counts"]["skipped"] == {"duplicate_id": 1, "malformed_json": 1,
                                         "missing_id": 1, "empty": 1}
    # What shapes the bytes is recorded (by the worker that wrote the manifest).
    versions = json.loads((tmp_path / "portable" / MANIFEST_NAME).read_text())["versions"]
    for name in ("token-windows", "apache-beam", "pyarrow", "sentencepiece", "numpy"):
        assert versions[name] == metadata.version(name), name


# ---------------------------------------------------------------- a Dask cluster


@pytest.mark.slow
@needs_dask
def test_same_bytes_on_a_dask_cluster_each_step_once_on_both_workers(tmp_path, dask_cluster):
    address, pids, worker_logs = dask_cluster
    for pid in pids:  # nothing of the cluster listens beyond this machine
        assert set(listening(pid)) == {"127.0.0.1"}, (pid, listening(pid))
    args = _corpus(tmp_path)
    run_job(tmp_path / "in_memory", *args, "--direct_running_mode=in_memory")
    with distributed.Client(address, timeout=30) as client:
        client.get_task_stream()  # starts recording (the scheduler's task stream plugin)
        dask = cli(*args, "--output", str(tmp_path / "dask"), "--runner=DaskRunner",
                    f"--dask_client_address={address}", "--dask_npartitions=4")
        assert dask.returncode == 0, dask.stderr
        tasks = client.get_task_stream()
    assert dir_bytes(tmp_path / "dask") == dir_bytes(tmp_path / "in_memory")

    # Each chunk (here: each of the 7 files) encoded once, each shard written once (the
    # shard plan is no side input, which the DaskRunner would compute again in each task).
    logs = [p.read_text(errors="replace") for p in worker_logs]
    chunks = [re.findall(r"encoded chunk (\S+): ", log) for log in logs]
    every = [c for mine in chunks for c in mine]
    assert len(every) == len(set(every)) == 7, chunks
    shards = re.findall(r"wrote (part-\d+-of-00003\.parquet)", "".join(logs))
    assert sorted(shards) == [f"part-0000{i}-of-00003.parquet" for i in range(3)], shards
    # The graph starts from one element per chunk the launcher planned, so
    # --dask_npartitions cuts the chunks into partitions, and both workers encode some.
    assert all(chunks), chunks
    per_worker: dict[str, int] = {}
    for task in tasks:
        per_worker[task["worker"]] = per_worker.get(task["worker"], 0) + 1
    print(f"dask tasks per worker: {per_worker}; chunks encoded per worker: "
          f"{[len(c) for c in chunks]}")
    assert len(per_worker) == 2, per_worker


# ---------------------------------------------------------------- Dataflow, offline

GS_JOB = [
    "--input", "gs://tw-test-bucket/corpus/*.jsonl",
    "--tokenizer", "gs://tw-test-bucket/models/spm.model",
    "--id-field", "id",
    "--output", "gs://tw-test-bucket/out/sample",
]
DATAFLOW = [
    "--runner=DataflowRunner", "--project=tw-test-project", "--region=us-central1",
    "--temp_location=gs://tw-test-bucket/tmp",
]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Every way to the network or a remote file fails at once and is recorded."""
    from apache_beam.internal.gcp import auth
    from apache_beam.io.gcp import gcsfilesystem, gcsio

    attempts: list[str] = []

    def refuse(what):
        def fail(*args, **kwargs):
            attempts.append(f"{what} {args[1:2]}")
            raise OSError(f"offline test: {what} is not allowed")
        return fail

    local = {"localhost", "127.0.0.1", "::1", None}
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(self, address):
        if self.family != socket.AF_UNIX and address[0] not in local:
            attempts.append(f"connect {address}")
            raise OSError(f"offline test: connect to {address}")
        return real_connect(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host not in local:
            attempts.append(f"getaddrinfo {host}")
            raise socket.gaierror(f"offline test: resolve {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    for name in ("match", "open", "create", "exists", "delete", "rename", "copy", "mkdirs",
                 "size", "checksum", "last_updated", "metadata"):
        monkeypatch.setattr(gcsfilesystem.GCSFileSystem, name, refuse(f"GCSFileSystem.{name}"))
    monkeypatch.setattr(gcsio.GcsIO, "__init__", refuse("GcsIO()"))
    monkeypatch.setattr(auth, "get_service_credentials", refuse("get_service_credentials"))
    import google.auth

    monkeypatch.setattr(google.auth, "default", refuse("google.auth.default"))
    # No credentials to find, and a metadata server that answers "no" at once if asked.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-credentials.json"))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    # Beam stages into temporary directories; keep them in tmp_path.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.chdir(ROOT)  # --setup_file=./setup.py, as a user types it
    return attempts


@pytest.mark.slow
@needs_gcp
def test_gs_job_translates_for_dataflow_offline(offline):
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    from pipeline.job import submit

    job = submit([*GS_JOB, *DATAFLOW, "--setup_file=./setup.py", "--dry_run=True"])
    assert offline == [], offline
    assert job.dry_run and job.result is not None
    translated = job.result.job.proto_pipeline
    names = {t.unique_name for t in translated.components.transforms.values()}
    for step in ("SplitInputs", "SplitInputs/MatchFiles", "EncodeChunks",
                 "ShuffleDocuments", "ShuffleDocuments/GroupByShard",
                 "WriteShards", "WriteRejects", "FinalizeDataset",
                 "FinalizeDataset/WriteManifest"):
        assert step in names, step

    # Dataflow runs it in Beam's own SDK container, installing the staged package.
    (env,) = translated.components.environments.values()
    assert env.urn == common_urns.environments.DOCKER.urn
    image = beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image
    assert image.endswith(f"python{sys.version_info[0]}.{sys.version_info[1]}_sdk:"
                          f"{metadata.version('apache-beam')}")
    staged = {}
    for dep in env.dependencies:
        path = beam_runner_api_pb2.ArtifactFilePayload.FromString(dep.type_payload).path
        to = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dep.role_payload)
        staged[to.staged_name] = path
    assert "workflow.tar.gz" in staged, staged  # what --setup_file builds
    assert "pickled_main_session" not in staged  # every DoFn lives in an installed module

    with tarfile.open(staged["workflow.tar.gz"]) as sdist:
        files = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
        pkg_info = next(n for n in sdist.getnames() if n.count("/") == 1
                        and n.endswith("/PKG-INFO"))
        requires = [line.split(":", 1)[1].strip()
                    for line in sdist.extractfile(pkg_info).read().decode().splitlines()
                    if line.startswith("Requires-Dist:") and "extra ==" not in line]
    for module in ("setup.py", "pipeline/job.py", "pipeline/graph.py", "pipeline/files/fs.py",
                   "transforms/plan/windows.py", "transforms/shards/rows.py",
                   "transforms/dataset/manifest.py"):
        assert module in files, module
    required = {r.split("<")[0].split(">")[0].split("=")[0].split("[")[0] for r in requires}
    assert {"pyarrow", "sentencepiece", "numpy", "orjson", "zstandard"} <= required, requires
    # Beam comes with the workers' SDK image (the same release as the launcher's): the package
    # does not ask for it, so a trainer's `pip install '.[reader]'` never brings it either.
    assert "apache-beam" not in required
    assert "torch" not in required  # workers never import the reader


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--output": "out/local"}, "--output out/local is a local path"),
        ({"--tokenizer": "samples/spm.model"}, "--tokenizer samples/spm.model is a local path"),
        ({"--input": "samples/corpus/*.jsonl"}, "--input samples/corpus/*.jsonl is a local"),
        ({"--setup_file": None}, "needs this project on its workers: pass --setup_file"),
    ],
)
def test_dataflow_job_that_cannot_work_is_refused_before_anything(change, message):
    from pipeline.job import run

    args = dict(zip(GS_JOB[::2], GS_JOB[1::2], strict=True))
    args["--setup_file"] = "./setup.py"
    args.update(change)
    argv = [x for k, v in args.items() if v is not None for x in (k, v)]
    with pytest.raises(ValueError, match=re.escape(message)):
        run([*argv, *DATAFLOW, "--dry_run=True"])


@pytest.mark.slow
def test_local_dry_run_builds_the_graph_and_writes_nothing(tmp_path):
    from pipeline.job import run, submit

    out = tmp_path / "out"
    argv = ["--input", str(tmp_path / "nothing-here-*.jsonl"), "--tokenizer", "bytes",
            "--output", str(out), "--dry_run=True"]
    assert run(argv) is None
    job = submit(argv)
    assert job.dry_run and job.result is None
    assert not out.exists()


_PERIODS: list[int] = []  # module-level: the pickled step below appends here, not to a copy


def _record_period(x: int) -> int:
    from apache_beam.runners.worker import statesampler

    _PERIODS.append(statesampler.get_current_tracker().sampling_period_ms)
    return x


def _periods_seen(options_argv: list[str]) -> list[int]:
    """The state sampler's period in the bundles of a tiny pipeline run in this process under
    `prompt_bundle_ends`."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.launch.runners import prompt_bundle_ends

    _PERIODS.clear()
    with prompt_bundle_ends(PipelineOptions(options_argv)), fn_api_pipeline() as p:
        _ = p | beam.Create([1, 2, 3]) | beam.Map(_record_period)
    return list(_PERIODS)


def test_in_process_bundles_end_without_waiting_out_the_sampler_and_beam_is_restored():
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.worker import statesampler

    from pipeline.launch.runners import SAMPLING_MS, prompt_bundle_ends

    beams = statesampler.StateSampler
    assert _periods_seen([]) == [SAMPLING_MS] * 3
    assert statesampler.StateSampler is beams  # left as it was after the job
    # Workers in processes of their own, and other runners, keep Beam's period.
    assert _periods_seen(["--direct_running_mode=multi_processing"]) == [
        statesampler.DEFAULT_SAMPLING_PERIOD_MS] * 3
    with pytest.raises(RuntimeError, match="boom"), prompt_bundle_ends(PipelineOptions([])):
        raise RuntimeError("boom")
    assert statesampler.StateSampler is beams  # and after a failed one
    # Two jobs at once in one process: the second leaves the first's in place, and only
    # the first's end puts Beam's back (never the first's class, left behind for good).
    with prompt_bundle_ends(PipelineOptions([])):
        first = statesampler.StateSampler
        with prompt_bundle_ends(PipelineOptions([])):
            assert statesampler.StateSampler is first
        assert statesampler.StateSampler is first is not beams
    assert statesampler.StateSampler is beams
    with prompt_bundle_ends(PipelineOptions(["--runner=DaskRunner"])):
        assert statesampler.StateSampler is beams
    assert statesampler.DEFAULT_SAMPLING_PERIOD_MS > SAMPLING_MS
