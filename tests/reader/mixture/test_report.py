"""`reader.mixture.report`: what a mixture would draw, from the sources' manifests alone
(``inspect --mix``, docs/mixtures.md)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from reader import MixedDataset
from reader.mixture.report import SourceDraw, check_compatible, mixture_report, parse_mix, run_mix
from tests.common.reader_data import edit_manifest, random_docs, write_docs
from transforms.dataset.manifest import TokenizerInfo

TOKENIZER = TokenizerInfo(kind="bytes", vocab_size=258, bos_id=256, eos_id=257, sha256=None)


def test_mixture_report_worked_example() -> None:
    report = mixture_report({"a": (10, 40), "b": (10, 10)}, {"a": 1, "b": 1}, tokens=50)
    assert report.sources["a"] == SourceDraw(weight=0.5, windows=10, targets=40,
                                             windows_drawn=10.0, targets_drawn=40.0, epochs=1.0)
    assert report.sources["b"].epochs == 1.0
    assert report.to_json() == {"unit": "windows", "tokens": 50, "sources": {
        name: dataclasses.asdict(s) for name, s in report.sources.items()}}
    assert list(report.to_json()["sources"]["a"]) == [
        "weight", "windows", "targets", "windows_drawn", "targets_drawn", "epochs"]
    by_targets = mixture_report({"a": (10, 40), "b": (10, 10)}, {"a": 1, "b": 1}, tokens=50,
                                unit="targets")
    assert by_targets.sources["a"].epochs == 0.625  # 25 of its 40 targets
    assert by_targets.sources["b"].epochs == 2.5


def test_inspect_mix_prints_each_sources_epochs(three: MixedDataset, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from reader.tools.inspect import run

    paths = [f"{n}={tmp_path / n}" for n in three.names]
    assert run([*paths, "--mix", "web=2,code=1,books=1", "--tokens", "1000", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    counts = {n: (len(three.sources[n]), three.sources[n].scored_targets) for n in three.names}
    per_window = sum(w * counts[n][1] / counts[n][0]
                     for n, w in zip(three.names, (0.5, 0.25, 0.25), strict=True))
    web = report["sources"]["web"]
    assert web["windows_drawn"] == round(0.5 * 1000 / per_window, 1)
    assert web["epochs"] == round(0.5 * 1000 / per_window / counts["web"][0], 4)
    assert run([*paths, "--mix", "web=1"]) == 0 and "epochs" in capsys.readouterr().out
    assert run([*paths, "--mix", "web"]) == 2
    assert "NAME=WEIGHT" in capsys.readouterr().err
    assert run([*paths]) == 2 and "need --mix" in capsys.readouterr().err
    assert run([*paths, "--mix", "news=1"]) == 2
    assert "'news', which is not a source" in capsys.readouterr().err
    for tokens in ("1e400", "nan", "-5", "0"):  # 1e400 once printed OverflowError's traceback
        assert run([*paths, "--mix", "web=1", "--tokens", tokens]) == 2
        assert capsys.readouterr().err == (
            "error: --tokens must be a finite number of scored targets from 1 to 2**63 - 1 "
            f"(e.g. 1e12), but got {float(tokens)!r}\n")
    edit_manifest(tmp_path / "books", lambda m: m["windows"].update(window=16))
    assert run([*paths, "--mix", "web=1"]) == 2
    assert "'web' and 'books' differ in their window: 8 vs 16" in capsys.readouterr().err


def test_sources_of_another_tokenizer_or_window_are_refused_naming_both() -> None:
    same = (TOKENIZER, 8)
    check_compatible({"a": same, "b": same, "c": same})
    with pytest.raises(ValueError) as info:
        check_compatible({"a": same, "b": same,
                          "c": (dataclasses.replace(TOKENIZER, sha256="ab" * 32), 8)})
    assert str(info.value) == (
        f"sources 'a' and 'c' differ in their tokenizer sha256: None vs {'ab' * 32!r}; a "
        "mixture needs one tokenizer and one window (prepare every source with the same "
        "--tokenizer and --window)")
    with pytest.raises(ValueError, match="'a' and 'b' differ in their window: 8 vs 16;"):
        check_compatible({"a": same, "b": (TOKENIZER, 16)})


def test_the_budget_defaults_to_one_pass_over_the_union() -> None:
    report = mixture_report({"a": (10, 40), "b": (20, 20)}, {"a": 3, "b": 1})
    # N = 60 targets; by windows V·(¾·4 + ¼·1) = 60 → V = 18.46…: a draws ¾ of it.
    assert report.unit == "windows" and report.tokens == 60
    assert report.sources["a"] == SourceDraw(weight=0.75, windows=10, targets=40,
                                             windows_drawn=13.8, targets_drawn=55.4,
                                             epochs=1.3846)
    assert report.sources["b"].windows_drawn == 4.6
    with pytest.raises(ValueError, match="`unit` must be 'windows' or 'targets', but got 'docs'"):
        mixture_report({"a": (1, 1)}, {"a": 1}, unit="docs")


def test_parse_mix() -> None:
    assert parse_mix("web=0.7, code=0.3,,") == {"web": 0.7, "code": 0.3}
    assert parse_mix("") == {}
    for bad in ("web", "web=x", "=1", "web=0.7,code"):
        with pytest.raises(ValueError, match=r"^--mix must be NAME=WEIGHT,… \(e\.g\. "
                                             r"web=0\.7,code=0\.3\), but got '"):
            parse_mix(bad)


def test_run_mix_prints_the_table_and_refuses_two_sources_of_one_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("a", "b"):
        write_docs(tmp_path / name / "web", random_docs(6, seed=len(name)), window=8)
    paths = [str(tmp_path / "a" / "web"), f"b={tmp_path / 'b' / 'web'}"]
    assert run_mix(paths, "web=1,b=1", tokens=100, unit="targets", as_json=False) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "mixture by targets over 100 scored targets"
    assert lines[2].split() == ["source", "weight", "windows", "targets", "windows", "drawn",
                                "targets", "drawn", "epochs"]
    assert [line.split()[:2] for line in lines[3:5]] == [["web", "0.500"], ["b", "0.500"]]
    assert [line.split()[5] for line in lines[3:5]] == ["50", "50"]  # targets drawn
    assert run_mix([str(tmp_path / "a" / "web"), str(tmp_path / "b" / "web")], "web=1",
                   tokens=None, unit="windows", as_json=True) == 2
    assert capsys.readouterr().err == ("error: two datasets are named 'web'; name them "
                                       "NAME=PATH\n")
