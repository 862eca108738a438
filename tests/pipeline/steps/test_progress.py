"""`pipeline.steps.progress`: the job's start and progress lines (and, at its end, the summary
printed from its manifest: `pipeline.launch.summary`, tests/pipeline/launch/test_summary.py)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import types

import pytest

from pipeline.job import finish, main, submit
from pipeline.launch.context import Tuning
from pipeline.steps import progress
from tests.common.jobs import dir_bytes, run_job, write_jsonl
from tests.common.paths import ROOT
from transforms.dataset.manifest import MANIFEST_NAME, read_manifest
from transforms.dataset.schema import REJECTS_DIR


def _chunk(path="f.jsonl", start=0, end=100, size=100, extent=100):
    return types.SimpleNamespace(path=path, start=start, end=end, size=size, extent=extent)


def _doc(text):
    return types.SimpleNamespace(text=text)


# A line every 2 ms, and workers that rewrite their files at every batch.
FAST = Tuning(progress_interval=0.002, progress_write_every=0.0)


@pytest.fixture
def big(tmp_path):
    texts = [f"The grapes are sour, said the fox {i}. " * (i % 17 + 1) for i in range(3000)]
    path = write_jsonl(tmp_path / "in" / "c.jsonl",
                       [{"text": t} for t in texts] + ["{broken", {"text": ""}])
    with path.open("ab") as f:
        f.write(b'{"text": "caf\xe9"}\n')  # not UTF-8: repaired
    return path


@pytest.mark.slow
def test_lines_appear_during_a_run_and_the_summary_is_the_manifests(capsys, big, tmp_path):
    out = tmp_path / "out"
    job = submit(["--input", str(big), "--tokenizer", "bytes", "--window", "64", "--stride",
                  "48", "--output", str(out)], tuning=FAST)
    finish(job)
    captured = capsys.readouterr()
    manifest = read_manifest((out / MANIFEST_NAME).read_bytes()).to_json()
    c = manifest["counts"]
    err = captured.err.splitlines()
    assert err[0] == (f"token-windows: 1 file, {big.stat().st_size / 1e6:,.1f} MB matched; "
                      "1 shard planned; tokenizer bytes; local runner (in_memory)")
    lines = [x for x in err if x.startswith("progress: ")]
    assert len(lines) >= 2
    # The last line has every document encoded, and their tokens (Σ M = pairs + documents).
    assert lines[-1].startswith(f"progress: read all {big.stat().st_size / 1e6:,.1f} MB: "
                                f"{c['documents']:,} documents, "
                                f"{c['pairs'] + c['documents']:,} tokens in ")
    (summary,) = [x for x in captured.out.splitlines() if x.startswith("wrote ")]
    numbers = {
        "records": r"wrote .*: ([\d,]+) records", "documents": r"-> ([\d,]+) documents",
        "skipped": r"\(([\d,]+) skipped", "repaired": r"([\d,]+) repaired\)",
        "pairs": r"corpus ([\d,]+) pairs", "windows": r"; ([\d,]+) windows hold",
        "tokens": r"hold ([\d,]+) tokens", "scored_targets": r"([\d,]+) scored targets",
        "uncovered_pairs": r"([\d,]+) uncovered pairs", "num_shards": r"; (\d+) shard",
    }
    got = {k: int(re.search(p, summary).group(1).replace(",", "")) for k, p in numbers.items()}
    assert got == {**{k: c[k] for k in ("records", "documents", "pairs", "windows", "tokens",
                                        "scored_targets", "uncovered_pairs")},
                   "skipped": 2, "repaired": c["repaired"]["invalid_utf8"], "num_shards": 1}
    assert c["skipped"] == {"empty": 1, "malformed_json": 1} and got["repaired"] == 1
    factor = (c["tokens"] - c["windows"]) / (c["pairs"] - c["uncovered_pairs"])
    assert f"overlap factor {factor:.2f};" in summary and factor > 1.2
    assert summary.endswith(f"rejects in {out}/{REJECTS_DIR}/ (empty 1, malformed_json 1)")
    # The workers reported through the directory the context named, which is gone.
    directory = job.context.progress_dir
    assert directory == job.progress.directory and "token-windows-progress-" in directory
    assert not os.path.exists(directory)


@pytest.mark.slow
def test_progress_does_not_change_a_byte(capsys, big, tmp_path):
    args = ["--input", str(big), "--tokenizer", "bytes", "--window", "32", "--num-shards", "3"]
    main([*args, "--output", str(tmp_path / "quiet")])  # every 10 s: no line in this run
    main([*args, "--output", str(tmp_path / "chatty")],
         tuning=Tuning(progress_interval=0.001, progress_write_every=0.0))
    assert "progress: " in capsys.readouterr().err
    assert dir_bytes(tmp_path / "quiet") == dir_bytes(tmp_path / "chatty")


def test_a_reporter_writes_its_own_file_and_without_a_directory_nothing(tmp_path):
    # With the launcher's directory named, each reporter writes a file of its own there ...
    for _ in range(2):
        reporter = progress.Reporter(str(tmp_path), write_every=0.0)
        reporter.encoded(_chunk(), [_doc("abc")], 5)
        reporter.chunk_done(_chunk())
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 2 and all(n.startswith(f"{os.getpid()}-") for n in names)
    # ... and without it (other runners, graphs built without the launcher) no file at all.
    silent = progress.Reporter(None, write_every=0.0)
    silent.encoded(_chunk(), [_doc("abc")], 5)
    silent.chunk_done(_chunk())
    assert silent.file is None and silent.documents == 0


def test_a_large_batch_estimates_its_bytes_from_a_sample_of_its_texts(tmp_path):
    # Up to 64 documents: their exact UTF-8 bytes; more: their characters times the bytes
    # per character of every k-th text (here every second: all "道c", 4 bytes in 2).
    reporter = progress.Reporter(str(tmp_path), write_every=0.0)
    reporter.encoded(_chunk(size=10**6, end=10**6, extent=10**6),
                     [_doc("道c"), _doc("ab")] * 32, 1)
    assert reporter.open_bytes[("f.jsonl", 0)] == 32 * 6
    reporter.chunk_done(_chunk(size=10**6, end=10**6, extent=10**6))
    reporter.encoded(_chunk(size=10**6, end=10**6, extent=10**6),
                     [_doc("道c"), _doc("ab")] * 64, 1)
    assert reporter.open_bytes[("f.jsonl", 0)] == 256 * 4 // 2  # exact: 64 * 6


def test_totals_sum_the_processes_and_a_chunk_counts_its_exact_share():
    stream = io.StringIO()
    with progress.Progress(total_bytes=300, stream=stream, interval=3600) as p:
        # This process: a batch of 2 documents (6 UTF-8 bytes) of a 100-byte range of a file.
        mine = progress.Reporter(p.directory, write_every=0.0)
        mine.encoded(_chunk(start=100, end=200, size=300, extent=300),
                     [_doc("ab"), _doc("道c")], 9)
        assert p.totals() == {"documents": 2, "tokens": 9, "bytes": 6}
        # A worker process reports into the directory its context names (no environment).
        child = (
            "import importlib.util, sys, types;"
            "s = importlib.util.spec_from_file_location('progress', 'pipeline/steps/progress.py');"
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m);"
            "c = types.SimpleNamespace(path='g.parquet', start=0, end=1, size=200, extent=2);"
            "r = m.Reporter(sys.argv[1], write_every=0.0);"
            "r.encoded(c, [types.SimpleNamespace(text='x' * 500)], 40); r.chunk_done(c)"
        )
        subprocess.run([sys.executable, "-c", child, p.directory], check=True, cwd=ROOT,
                       timeout=60)
        assert p.totals() == {"documents": 3, "tokens": 49, "bytes": 106}  # 6 + 1/2 of 200
        mine.chunk_done(_chunk(start=100, end=200, size=300, extent=300))
        assert p.totals() == {"documents": 3, "tokens": 49, "bytes": 200}
        assert re.fullmatch(r"progress: read 0\.0 MB of 0\.0 MB \(67%\), 3 documents, "
                            r"[\d.]+ k?tokens/s, \d+ s, ETA \d+ s", p.line())
    assert not os.path.exists(p.directory)


@pytest.mark.slow  # two worker processes
def test_two_processes_report_through_the_context(capsys, big, tmp_path):
    """multi_processing workers are other processes: the context carries them the
    directory, and the last line counts every document both encoded."""
    out = tmp_path / "out"
    manifest = run_job(out, "--input", str(big), "--tokenizer", "bytes", "--window", "64",
                       "--direct_running_mode=multi_processing", "--direct_num_workers=2",
                       tuning=FAST)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("progress: ")]
    c = manifest["counts"]
    assert lines and lines[-1].startswith(
        f"progress: read all {big.stat().st_size / 1e6:,.1f} MB: {c['documents']:,} documents, "
        f"{c['pairs'] + c['documents']:,} tokens in ")


def test_a_terminal_gets_one_redrawn_line():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    with progress.Progress(total_bytes=10, stream=stream, interval=0.001) as p:
        reporter = progress.Reporter(p.directory, write_every=0.0)
        reporter.encoded(_chunk(end=10, size=10, extent=10), [_doc("abcde")], 7)
        reporter.chunk_done(_chunk(end=10, size=10, extent=10))
    text = stream.getvalue()
    assert text.startswith("\rprogress: ") and text.endswith("\x1b[K\n")
    assert text.count("\n") == 1 and "read all 0.0 MB: 1 documents, 7 tokens" in text
