"""`reader.inspect`: summary, distributions, --decode, --check, --plot, --json."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from reader.tools import inspect
from tests.common.inspect_data import FAMILIES, TEXTS, bytes_dataset, spec_of
from tests.common.paths import DATA, ROOT
from transforms.dataset.manifest import LEGACY_MANIFEST_NAME, MANIFEST_NAME, TokenizerInfo
from transforms.params import WindowSpec
from transforms.testing import write_dataset
from transforms.tokenize.tokenizers import ByteTokenizer, SentencePieceTokenizer


def _run(capsys, *args) -> tuple[int, str]:
    code = inspect.run([str(a) for a in args])
    return code, capsys.readouterr().out


def test_summary_of_a_worked_example(tmp_path):
    # abcde: z of 7 ids, P = 6; W = S = 2 → 3 windows, 9 ids stored, overlap factor 1.
    write_dataset(tmp_path, [("a", ByteTokenizer().encode("abcde"))],
                  windows=WindowSpec(window=2, stride=2))
    s = inspect.summarize(inspect.open_dataset(str(tmp_path)), batch_size=2)
    assert {k: s["summary"][k] for k in ("documents", "windows", "corpus_pairs", "window_tokens",
                                         "overlap_factor", "scored_targets", "context_targets",
                                         "uncovered_pairs", "shards")} == {
        "documents": 1, "windows": 3, "corpus_pairs": 6, "window_tokens": 9,
        "overlap_factor": 1.0, "scored_targets": 6, "context_targets": 0, "uncovered_pairs": 0,
        "shards": 1}
    assert s["distributions"]["document_tokens"]["p50"] == 7
    assert s["distributions"]["window_length"] == {
        "p0": 2, "p10": 2, "p50": 2, "p90": 2, "p99": 2, "p100": 2, "mean": 2}
    assert s["padding"] == {"batch_size": 2, "share": 0.0}


def test_overlap_factor_and_padding(tmp_path):
    # One document of P = 12 pairs, W = 4, S = 2: starts 0, 2, 4, 6, 8 → 20 window pairs.
    write_dataset(tmp_path, [("a", list(range(13)))], windows=WindowSpec(window=4, stride=2),
                  tokenizer=TokenizerInfo(kind="bytes", vocab_size=258, bos_id=0, eos_id=12,
                                          sha256=None))
    s = inspect.summarize(inspect.open_dataset(str(tmp_path)))
    assert (s["summary"]["window_pairs"], s["summary"]["overlap_factor"]) == (20, 1.6667)  # 20 / 12
    # Windows of 4 and 2 pairs in batches of 2: padding is 2 of the batch's 8 positions.
    assert inspect.padding_share(np.array([4, 2]), 2) == 0.25
    assert inspect.padding_share(np.array([4, 2, 3]), 3) == 0.25
    assert inspect.padding_share(np.array([4, 2, 3]), 1) == 0.0


def test_decode_gives_back_the_text_with_bytes(tmp_path, capsys):
    tok = ByteTokenizer()
    write_dataset(tmp_path, [(f"d{i}", tok.encode(t)) for i, t in enumerate(TEXTS)],
                  windows=WindowSpec(window=512, stride=512))
    ds = inspect.open_dataset(str(tmp_path))
    got = {w["doc_id"]: w for w in inspect.decode(ds, 100, inspect.manifest_tokenizer(ds))}
    assert {d: w["context"] + w["scored"] for d, w in got.items()} == {
        f"d{i}": f"<bos>{t}<eos>" for i, t in enumerate(TEXTS)}
    code, out = _run(capsys, tmp_path, "--decode", "1")
    assert code == 0 and "start 0, length" in out and "scored from target 0 (▌)" in out


def test_decode_with_sentencepiece_finds_and_checks_the_model(tmp_path, capsys):
    model = DATA / "tiny.model"
    sp = SentencePieceTokenizer(model.read_bytes(), where=str(model))
    texts = ["The fox saw the grapes.", "Slow but steady wins the race."]
    write_dataset(tmp_path / "ds", [(f"d{i}", sp.encode(t)) for i, t in enumerate(texts)],
                  windows=WindowSpec(window=64, stride=64, score="new"), tokenizer=sp.info())
    ds = inspect.open_dataset(str(tmp_path / "ds"))
    got = {w["doc_id"]: w["context"] + w["scored"]
           for w in inspect.decode(ds, 2, inspect.manifest_tokenizer(ds))}
    assert got == {f"d{i}": f"<s>{t}</s>" for i, t in enumerate(texts)}

    other = DATA / "no_bos_eos.model"
    code = inspect.run([str(tmp_path / "ds"), "--decode", "1", "--tokenizer", str(other)])
    err = capsys.readouterr().err
    assert code == 2 and f"{other} has SHA-256 {hashlib.sha256(other.read_bytes()).hexdigest()}" \
        in err and "pass the right file with --tokenizer" in err


def test_decode_with_a_tokenizer_json(tmp_path, bpe):
    from transforms.tokenize.tokenizers import HFTokenizer

    tok = HFTokenizer(bpe.read_bytes(), where=str(bpe), bos_token="<s>", eos_token="</s>")
    text = "It was a truth universally acknowledged."
    write_dataset(tmp_path, [("a", tok.encode(text))], windows=WindowSpec(window=64, stride=64),
                  tokenizer=tok.info())
    ds = inspect.open_dataset(str(tmp_path))
    (window,) = inspect.decode(ds, 100, inspect.manifest_tokenizer(ds))
    assert (window["context"], window["scored"]) == ("<s>", text + "</s>")


def test_json_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (the plot extra)")
    bytes_dataset(tmp_path / "ds", spec_of(FAMILIES[3]))
    png = tmp_path / "dist.png"
    code, out = _run(capsys, tmp_path / "ds", "--json", "--check", "--plot", png,
                     "--decode", "2", "--batch-size", "4")
    report = json.loads(out)
    assert code == 0 and report["check"]["ok"] and len(report["decoded"]) == 2
    assert report["padding"]["batch_size"] == 4
    assert set(report) >= {"summary", "distributions", "padding", "tokenizer", "windows"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_old_dataset_is_refused_with_the_fix(tmp_path, capsys):
    bytes_dataset(tmp_path, spec_of(FAMILIES[0]))
    (tmp_path / MANIFEST_NAME).rename(tmp_path / LEGACY_MANIFEST_NAME)
    code = inspect.run([str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "holds manifest.json, the name token-windows 0.1.0 gave the manifest" in err
    assert "rename it" in err
    (tmp_path / LEGACY_MANIFEST_NAME).unlink()
    assert inspect.run([str(tmp_path)]) == 2
    assert "is not a finished dataset" in capsys.readouterr().err


def test_inspect_never_imports_beam():
    """Its own imports: the standard library, numpy, pyarrow, transforms (which
    tests/test_boundaries.py keeps free of Beam) and, for --plot, matplotlib."""
    import ast

    names: set[str] = set()
    # --check's, --plot's and --mix's own modules, which inspect imports
    for module in ("tools/inspect.py", "tools/check.py", "tools/plot.py", "data/opening.py",
                   "data/integrity.py", "mixture/report.py", "mixture/blend.py", "data/regular.py",
                   "tools/removed_check.py"):
        tree = ast.parse((ROOT / "reader" / module).read_text())
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {n for n in names if n.split(".")[0] == "reader"} == {
        "reader.data", "reader.tools.check", "reader.tools.inspect", "reader.data.integrity",
        "reader.data.opening", "reader.tools.plot", "reader.mixture.report", "reader.mixture.blend",
        "reader.data.regular", "reader.tools.removed_check"}
    tops = {n.split(".")[0] for n in names} - {"reader"}
    assert tops - set(sys.stdlib_module_names) == {"numpy", "pyarrow", "transforms", "matplotlib"}


@pytest.mark.slow
def test_a_split_shows_its_split_and_check_recomputes_it(tmp_path, capsys):
    from tests.common.jobs import run_job, write_jsonl

    src = write_jsonl(tmp_path / "c.jsonl", [{"text": f"doc {i} " * (i % 5)} for i in range(200)])
    out = tmp_path / "out"
    record = run_job(out, "--input", str(src), "--tokenizer", "bytes", "--window", "8",
                     "--stride", "4", "--split", "val=0.25", "--sample", "0.5")
    capsys.readouterr()
    code, text = _run(capsys, str(out / "val"), "--check")
    assert code == 0, text
    job = record["counts"]
    docs = {s["name"]: s["documents"] for s in record["splits"]}
    assert "split        val of val 0.25, train 0.75 (split seed 0)" in text
    assert (f"job          200 records: documents train {docs['train']}, val {docs['val']}; "
            f"{sum(job['skipped'].values())} skipped, {job['sampled_out']} left out by the "
            "sample") in text
    assert "sample       0.5 of the documents (sample seed 0)" in text
    assert "check: ok" in text
    # The job's top directory names its splits and the fix.
    code = inspect.run([str(out)])
    text = capsys.readouterr().err
    assert code == 2 and f"{out} holds the splits val, train of one job (_splits.json)" in text
    assert f"open {out}/val" in text
    # A manifest that claims the documents for another split fails --check, naming one.
    path = out / "val" / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["split"]["name"] = "train"
    path.write_text(json.dumps(manifest))
    code = inspect.run([str(out / "val")])  # _splits.json does not name this manifest
    assert code == 2 and "does not record" in capsys.readouterr().err
    record_path = out / "_splits.json"
    edited = json.loads(record_path.read_text())  # nor would a forger's
    edited["splits"][[s["name"] for s in edited["splits"]].index("train")]["manifest_sha256"] = (
        hashlib.sha256(path.read_bytes()).hexdigest())
    record_path.write_text(json.dumps(edited))
    code, text = _run(capsys, str(out / "val"), "--check")
    assert code == 1 and re.search(r"split: doc_id 'c\.jsonl:\d+' belongs to split 'val', "
                                   r"not to 'train'", text), text


def test_inspect_usage(capsys):
    with pytest.raises(SystemExit):
        inspect.run(["--help"])
    assert capsys.readouterr().out.startswith("usage: python -m reader.inspect [-h]")


def _sp_dataset(tmp_path, path: str):
    """A SentencePiece dataset whose manifest records the tokenizer at ``path``."""
    model = DATA / "tiny.model"
    sp = SentencePieceTokenizer(model.read_bytes(), where=str(model))
    info = dataclasses.replace(sp.info(), extra={"file": "tiny.model", "path": path})
    write_dataset(tmp_path / "ds", [("d0", sp.encode("The fox saw the grapes."))],
                  windows=WindowSpec(window=64, stride=64), tokenizer=info)
    return tmp_path / "ds"


def _inspect_in_a_process(*args) -> subprocess.CompletedProcess:
    """``inspect`` in a fresh interpreter: a FIFO that hangs it fails the test, not the run."""
    return subprocess.run([sys.executable, "-m", "reader.inspect", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_decode_never_opens_a_url_the_manifest_records(tmp_path, capsys, monkeypatch):
    url = ("s3://AKIAEXAMPLE:wJalrXUtnFEMI@bucket/tiny.model?endpoint_override=10.9.8.7:9000"
           "&secret_key=hunter2&region=eu")
    root = _sp_dataset(tmp_path, url)

    located = inspect.locate

    def locate(path, *args, **kw):
        assert "://" not in str(path), "a filesystem was made from the manifest's URL"
        return located(path, *args, **kw)

    monkeypatch.setattr(inspect, "locate", locate)
    code = inspect.run([str(root), "--decode", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: the sentencepiece tokenizer file was not found")
    assert ("s3://***@bucket/tiny.model?endpoint_override=10.9.8.7:9000&secret_key=***"
            "&region=eu is a URL, never opened because the manifest names it") in err
    assert "AKIAEXAMPLE" not in err and "wJalr" not in err and "hunter2" not in err
    # The file beside the dataset, or one the user names, is read (its SHA-256 checked).
    shutil.copy(DATA / "tiny.model", root / "tiny.model")
    assert inspect.run([str(root), "--decode", "1"]) == 0
    (root / "tiny.model").unlink()
    assert inspect.run([str(root), "--decode", "1", "--tokenizer", str(DATA / "tiny.model")]) == 0


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_decode_reads_only_a_regular_file(tmp_path, special):
    path = tmp_path / "tokenizer.fifo" if special == "fifo" else special
    if special == "fifo":
        os.mkfifo(path)
    kind = "a FIFO (named pipe)" if special == "fifo" else "a character device"
    for args in ([_sp_dataset(tmp_path, str(path))],  # the manifest's path
                 [_sp_dataset(tmp_path / "b", "gone.model"), "--tokenizer", path]):  # the user's
        done = _inspect_in_a_process(*args, "--decode", "1")
        assert done.returncode == 2
        assert done.stderr == (f"error: {path} is not a regular file but {kind}; the reader "
                               "reads only regular files: pass the tokenizer file with "
                               "--tokenizer\n")
