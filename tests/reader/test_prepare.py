"""`reader.prepare`: ``python -m reader.prepare PATH`` builds a dataset's layouts ahead of
training and reports them as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from reader import WindowDataset
from reader.prepare import _command
from reader.prepare import main as prepare_main


def test_prepare_from_the_command_line(small: tuple[Path, list], tmp_path: Path,
                                       capsys: pytest.CaptureFixture) -> None:
    root, rows = small
    report = prepare_main([str(root), "--cache-dir", str(tmp_path / "c")])
    printed = json.loads(capsys.readouterr().out)
    assert printed == report
    assert sorted(report) == ["built", "bytes", "cache_dir", "fingerprint", "path", "seconds",
                              "shards", "windows"]
    assert (report["path"], report["shards"], report["built"], report["windows"]) == (
        str(root), 3, 3, len(rows))
    assert report["cache_dir"] == str(tmp_path / "c") and report["bytes"] > 0
    assert report["fingerprint"] == WindowDataset(root).fingerprint
    assert report["seconds"] == round(report["seconds"], 3)
    assert prepare_main([str(root), "--cache-dir", str(tmp_path / "c"), "--verify"])["built"] == 0


def test_a_refused_dataset_is_one_line_and_status_2(tmp_path: Path, monkeypatch,
                                                    capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(sys, "argv", ["prepare", str(tmp_path / "nothing")])
    assert _command() == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "nothing" in err
