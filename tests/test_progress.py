"""`pipeline.progress` and the job's start, progress and summary lines."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import types

import pytest

from pipeline import progress
from pipeline.run import main
from tests.conftest import ROOT, dir_bytes, run_job, write_jsonl
from transforms.manifest import MANIFEST_NAME, parse_manifest
from transforms.schema import REJECTS_DIR


def _chunk(path="f.jsonl", start=0, end=100, size=100, extent=100):
    return types.SimpleNamespace(path=path, start=start, end=end, size=size, extent=extent)


def _doc(text):
    return types.SimpleNamespace(text=text)


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(progress, "INTERVAL", 0.002)
    monkeypatch.setattr(progress, "WRITE_EVERY", 0.0)


@pytest.fixture
def big(tmp_path):
    texts = [f"The grapes are sour, said the fox {i}. " * (i % 17 + 1) for i in range(3000)]
    path = write_jsonl(tmp_path / "in" / "c.jsonl",
                       [{"text": t} for t in texts] + ["{broken", {"text": ""}])
    with path.open("ab") as f:
        f.write(b'{"text": "caf\xe9"}\n')  # not UTF-8: repaired
    return path


def test_lines_appear_during_a_run_and_the_summary_is_the_manifests(capsys, fast, big,
                                                                    tmp_path, monkeypatch):
    made = []
    mkdtemp = progress.tempfile.mkdtemp

    def recording(*args, **kwargs):
        made.append(mkdtemp(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr(progress.tempfile, "mkdtemp", recording)
    out = tmp_path / "out"
    main(["--input", str(big), "--tokenizer", "bytes", "--window", "64", "--stride", "48",
          "--output", str(out)])
    captured = capsys.readouterr()
    manifest = parse_manifest((out / MANIFEST_NAME).read_bytes())
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
    # Nothing is left behind: the environment and the progress directory are gone.
    assert progress.ENV not in os.environ
    ours = [d for d in made if "token-windows-progress-" in d]
    assert len(ours) == 1 and not os.path.exists(ours[0])


def test_progress_does_not_change_a_byte(monkeypatch, capsys, big, tmp_path):
    args = ["--input", str(big), "--tokenizer", "bytes", "--window", "32", "--num-shards", "3"]
    main([*args, "--output", str(tmp_path / "quiet")])  # INTERVAL 10 s: no line in this run
    monkeypatch.setattr(progress, "INTERVAL", 0.001)
    monkeypatch.setattr(progress, "WRITE_EVERY", 0.0)
    main([*args, "--output", str(tmp_path / "chatty")])
    assert "progress: " in capsys.readouterr().err
    assert dir_bytes(tmp_path / "quiet") == dir_bytes(tmp_path / "chatty")


def test_workers_report_nothing_without_the_launcher(tmp_path, monkeypatch):
    # With the launcher's directory named, a worker's calls write its file there ...
    monkeypatch.setattr(progress, "_tallies", {})
    monkeypatch.setenv(progress.ENV, str(tmp_path))
    progress.encoded(_chunk(), [_doc("abc")], 5)
    progress.chunk_done(_chunk())
    assert os.listdir(tmp_path) == [f"{os.getpid()}.json"]
    # ... and without it they keep no tally and write nothing, anywhere.
    monkeypatch.setattr(progress, "_tallies", {})
    monkeypatch.delenv(progress.ENV)
    writes = []
    monkeypatch.setattr(progress._Tally, "write", lambda self, **kw: writes.append(self.file))
    progress.encoded(_chunk(), [_doc("abc")], 5)
    progress.chunk_done(_chunk())
    assert progress._tallies == {} and writes == []


def test_totals_sum_the_processes_and_a_chunk_counts_its_exact_share(monkeypatch, fast):
    stream = io.StringIO()
    with progress.Progress(total_bytes=300, stream=stream, interval=3600) as p:
        # This process: a batch of 2 documents (6 UTF-8 bytes) of a 100-byte range of a file.
        progress.encoded(_chunk(start=100, end=200, size=300, extent=300),
                         [_doc("ab"), _doc("道c")], 9)
        assert p.totals() == {"documents": 2, "tokens": 9, "bytes": 6}
        # A worker process started after the launcher inherits the directory and adds its file.
        child = (
            "import importlib.util, sys, types;"
            "s = importlib.util.spec_from_file_location('progress', 'pipeline/progress.py');"
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m);"
            "c = types.SimpleNamespace(path='g.parquet', start=0, end=1, size=200, extent=2);"
            "m.encoded(c, [types.SimpleNamespace(text='x' * 500)], 40); m.chunk_done(c)"
        )
        subprocess.run([sys.executable, "-c", child], check=True, cwd=ROOT, timeout=60)
        assert p.totals() == {"documents": 3, "tokens": 49, "bytes": 106}  # 6 + 1/2 of 200
        progress.chunk_done(_chunk(start=100, end=200, size=300, extent=300))
        assert p.totals() == {"documents": 3, "tokens": 49, "bytes": 200}
        assert re.fullmatch(r"progress: read 0\.0 MB of 0\.0 MB \(67%\), 3 documents, "
                            r"[\d.]+ k?tokens/s, \d+ s, ETA \d+ s", p.line())
    assert progress.ENV not in os.environ and not os.path.exists(p.directory)


def test_a_terminal_gets_one_redrawn_line(monkeypatch, fast):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    with progress.Progress(total_bytes=10, stream=stream, interval=0.001):
        progress.encoded(_chunk(end=10, size=10, extent=10), [_doc("abcde")], 7)
        progress.chunk_done(_chunk(end=10, size=10, extent=10))
    text = stream.getvalue()
    assert text.startswith("\rprogress: ") and text.endswith("\x1b[K\n")
    assert text.count("\n") == 1 and "read all 0.0 MB: 1 documents, 7 tokens" in text

def test_summary_names_repaired_records_where_rejects_are_and_says_1_shard(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"text": "a"}\n{"text": "\\ud800"}\n{"t": 1}\n')
    run_job(tmp_path / "o", "--input", str(src), "--tokenizer", "bytes")
    out = capsys.readouterr().out
    assert "3 records -> 2 documents (1 skipped, 1 repaired)" in out
    assert f"rejects in {tmp_path / 'o' / REJECTS_DIR}/ (missing_text 1)" in out
    assert "; 1 shard in " in out
