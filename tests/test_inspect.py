"""`reader.inspect`: summary, distributions, --decode, --check, --plot, --json."""

from __future__ import annotations

import hashlib
import json
import pathlib
import re
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reader import inspect
from tests.conftest import DATA, ROOT
from transforms.manifest import LEGACY_MANIFEST_NAME, MANIFEST_NAME, TokenizerInfo
from transforms.params import WindowSpec
from transforms.schema import ARROW_SCHEMA
from transforms.testing import write_dataset
from transforms.tokenizers import ByteTokenizer, SentencePieceTokenizer

TEXTS = ["abcde", "abcd", "x", "The grapes are sour, and not ripe.", "道可道，非常道。" * 3,
         "Slow but steady wins the race. " * 4, "ab"]
# (window, stride, tail, min_tail, score, offset): every family of docs/format.md#the-planner.
FAMILIES = [
    (4, 4, "keep", 1, "all", "zero"),
    (4, 2, "keep", 1, "new", "zero"),
    (4, 2, "drop", 1, "all", "zero"),
    (4, 2, "trace_back", 1, "new", "zero"),
    (4, 6, "keep", 1, "all", "zero"),
    (4, 6, "trace_back", 1, "new", "random"),
    (5, 3, "keep", 3, "all", "random"),
    (5, 3, "trace_back", 1, "new", "random"),
    (4, 4, "drop", 1, "new", "random"),
    (8, 3, "drop", 1, "all", "zero"),
    (1, 1, "keep", 1, "all", "zero"),
    (7, 7, "keep", 7, "new", "zero"),
]


def _spec(family) -> WindowSpec:
    w, s, tail, min_tail, score, offset = family
    return WindowSpec(window=w, stride=s, tail=tail, min_tail=min_tail, score=score,
                      offset=offset, seed=3)


def _bytes_dataset(root: pathlib.Path, spec: WindowSpec, num_shards: int = 2) -> dict:
    tok = ByteTokenizer()
    docs = [(f"d{i}", tok.encode(t)) for i, t in enumerate(TEXTS)]
    rng = np.random.default_rng(0)
    docs += [(f"r{i}", [256, *rng.integers(0, 256, int(n)), 257])
             for i, n in enumerate(rng.integers(0, 60, 30))]
    return write_dataset(root, docs, windows=spec, num_shards=num_shards).to_json()


def _rewrite(root: pathlib.Path, edit) -> None:
    """Apply ``edit`` to the rows of the first shard and write it back, and make the manifest
    agree with the file (its SHA-256 and counts), as a careful forger would: what is left to
    find is what only --check's recomputations can."""
    path = root / "part-00000-of-00001.parquet"
    rows = edit(pq.read_table(path).to_pylist())
    pq.write_table(pa.Table.from_pylist(rows, schema=ARROW_SCHEMA), path)
    manifest = json.loads((root / MANIFEST_NAME).read_text())
    entry = manifest["shards"][0]
    counts = {"rows": len(rows), "tokens": sum(len(r["tokens"]) for r in rows),
              "scored_targets": sum(r["length"] - r["loss_start"] for r in rows)}
    entry.update(sha256=hashlib.sha256(path.read_bytes()).hexdigest(), **counts)
    manifest["counts"].update(windows=counts["rows"], tokens=counts["tokens"],
                              scored_targets=counts["scored_targets"])
    (root / MANIFEST_NAME).write_text(json.dumps(manifest))


def _run(capsys, *args) -> tuple[int, str]:
    code = inspect.run([str(a) for a in args])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: "-".join(map(str, f)))
def test_check_passes_on_every_window_family(tmp_path, family):
    manifest = _bytes_dataset(tmp_path, _spec(family))
    result = inspect.check(inspect.open_dataset(str(tmp_path)))
    assert result["failures"] == []
    c = manifest["counts"]
    assert result["checked"]["windows"] == c["windows"]
    assert result["checked"]["tokens"] == c["tokens"]
    assert result["checked"]["scored_targets"] == c["scored_targets"]


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


def test_check_fails_naming_the_window_that_crosses_its_document(tmp_path, capsys):
    _bytes_dataset(tmp_path, _spec(FAMILIES[1]), num_shards=1)

    def cross(rows):
        r = next(r for r in rows if r["doc_id"] == "d0" and r["window_index"] == 1)
        r["length"] += 1
        r["tokens"] = r["tokens"] + [257]
        return rows
    _rewrite(tmp_path, cross)
    code, out = _run(capsys, tmp_path, "--check")
    assert code == 1
    assert re.search(r"boundaries: part-00000-of-00001.parquet row \d+ \(doc_id 'd0', window 1, "
                     r"start 2\): crosses its document: start \+ length = 7 > P = 6\n", out)


def test_check_fails_on_a_missing_window(tmp_path, capsys):
    _bytes_dataset(tmp_path, _spec(FAMILIES[0]), num_shards=1)
    _rewrite(tmp_path, lambda rows: [r for r in rows
                                     if not (r["doc_id"] == "d5" and r["window_index"] == 3)])
    code, out = _run(capsys, tmp_path, "--check")
    assert code == 1
    assert "(doc_id 'd5', window 4, start 16): window_index 4, expected 3" in out
    assert "overlap: " in out and "starts 8 after the previous window; stride 4" in out


def test_check_fails_on_a_wrong_overlap(tmp_path, capsys):
    _bytes_dataset(tmp_path, _spec(FAMILIES[2]), num_shards=1)

    def shift(rows):
        r = next(r for r in rows if r["doc_id"] == "d3" and r["window_index"] == 2)
        src = next(x for x in rows if x["doc_id"] == "d3" and x["window_index"] == 0)
        r["start"] += 1
        r["tokens"] = list(ByteTokenizer().encode(TEXTS[3])[r["start"]: r["start"] + 5])
        assert src["start"] == 0
        return rows
    _rewrite(tmp_path, shift)
    code, out = _run(capsys, tmp_path, "--check")
    assert code == 1
    assert ("overlap: part-00000-of-00001.parquet row" in out
            and "(doc_id 'd3', window 2, start 5): starts 3 after the previous window; stride 2 "
            "means consecutive full windows overlap by W - S = 2" in out)


def test_check_fails_when_stored_ids_disagree(tmp_path, capsys):
    _bytes_dataset(tmp_path, _spec(FAMILIES[1]), num_shards=1)

    def poke(rows):
        r = next(r for r in rows if r["doc_id"] == "d3" and r["window_index"] == 1)
        r["tokens"] = [r["tokens"][0] ^ 1, *r["tokens"][1:]]
        return rows
    _rewrite(tmp_path, poke)
    code, out = _run(capsys, tmp_path, "--check")
    assert code == 1 and "(doc_id 'd3', window 1, start 2): its first 3 ids differ" in out


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
    from transforms.tokenizers import HFTokenizer

    tok = HFTokenizer(bpe.read_bytes(), where=str(bpe), bos_token="<s>", eos_token="</s>")
    text = "It was a truth universally acknowledged."
    write_dataset(tmp_path, [("a", tok.encode(text))], windows=WindowSpec(window=64, stride=64),
                  tokenizer=tok.info())
    ds = inspect.open_dataset(str(tmp_path))
    (window,) = inspect.decode(ds, 100, inspect.manifest_tokenizer(ds))
    assert (window["context"], window["scored"]) == ("<s>", text + "</s>")


def test_json_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (the plot extra)")
    _bytes_dataset(tmp_path / "ds", _spec(FAMILIES[3]))
    png = tmp_path / "dist.png"
    code, out = _run(capsys, tmp_path / "ds", "--json", "--check", "--plot", png,
                     "--decode", "2", "--batch-size", "4")
    report = json.loads(out)
    assert code == 0 and report["check"]["ok"] and len(report["decoded"]) == 2
    assert report["padding"]["batch_size"] == 4
    assert set(report) >= {"summary", "distributions", "padding", "tokenizer", "windows"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_old_dataset_is_refused_with_the_fix(tmp_path, capsys):
    _bytes_dataset(tmp_path, _spec(FAMILIES[0]))
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
    for module in ("inspect.py", "check.py", "plot.py", "opening.py", "integrity.py",
                   "mixreport.py", "blend.py"):
        tree = ast.parse((ROOT / "reader" / module).read_text())
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {n for n in names if n.split(".")[0] == "reader"} == {
        "reader", "reader.check", "reader.inspect", "reader.integrity", "reader.opening",
        "reader.plot", "reader.mixreport", "reader.blend"}
    tops = {n.split(".")[0] for n in names} - {"reader"}
    assert tops - set(sys.stdlib_module_names) == {"numpy", "pyarrow", "transforms", "matplotlib"}


def test_a_split_shows_its_split_and_check_recomputes_it(tmp_path, capsys):
    from tests.conftest import run_job, write_jsonl

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
