"""The output directory is a Parquet dataset: readers pointed at OUTPUT read exactly the shards.

The manifest and the rejects are named with a leading ``_`` (`MANIFEST_NAME`, `REJECTS_DIR`),
which pyarrow's dataset discovery skips, and with it pandas, polars and Hugging Face
``datasets``. Each README recipe is run here; a library that is not installed skips its test.
"""

from __future__ import annotations

import json
import pathlib

import pyarrow.parquet as pq
import pytest

from tests.common.jobs import read_rows, run_job, write_jsonl
from transforms.dataset.manifest import LEGACY_MANIFEST_NAME, MANIFEST_NAME
from transforms.dataset.schema import LEGACY_REJECTS_DIR, REJECTS_DIR


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> pathlib.Path:
    """A finished dataset with two shards and a reject file beside them."""
    root = tmp_path_factory.mktemp("directory")
    texts = ["abcde", "{oops", "The grapes are sour. " * 9, "道可道，非常道。" * 4, "x"]
    src = write_jsonl(root / "in" / "c.jsonl",
                      [t if t.startswith("{") else {"text": t} for t in texts])
    run_job(root / "out", "--input", str(src), "--tokenizer", "bytes", "--window", "16",
            "--num-shards", "2")
    return root / "out"


def _windows(out: pathlib.Path) -> int:
    return json.loads((out / MANIFEST_NAME).read_text())["counts"]["windows"]


def _expected(out: pathlib.Path) -> list[tuple[str, int, list[int]]]:
    return sorted((r["doc_id"], r["start"], r["tokens"]) for r in read_rows(out))


def _key(rows) -> list[tuple[str, int, list[int]]]:
    return sorted((d, int(s), [int(t) for t in tok]) for d, s, tok in rows)


def test_layout_names_manifest_and_rejects_so_readers_skip_them(out):
    names = sorted(p.name for p in out.iterdir())
    assert names == [MANIFEST_NAME, REJECTS_DIR, "part-00000-of-00002.parquet",
                     "part-00001-of-00002.parquet"]
    assert (out / REJECTS_DIR / "malformed_json.jsonl").exists()
    assert MANIFEST_NAME.startswith("_") and REJECTS_DIR.startswith("_")


def test_pyarrow_reads_exactly_the_windows(out):
    t = pq.read_table(out)
    assert t.num_rows == _windows(out) == len(read_rows(out)) == 21
    assert _key(zip(*(t.column(c).to_pylist() for c in ("doc_id", "start", "tokens")),
                    strict=True)) == _expected(out)


def test_pandas_reads_exactly_the_windows(out):
    pd = pytest.importorskip("pandas", reason="pandas is not installed (the test extra has it)")
    df = pd.read_parquet(out)
    assert len(df) == _windows(out)
    assert _key(zip(df["doc_id"], df["start"], df["tokens"], strict=True)) == _expected(out)


def test_polars_reads_exactly_the_windows(out):
    pl = pytest.importorskip("polars", reason="polars is not installed (the test extra has it)")
    # polars' own directory listing takes every file and refuses mixed extensions, whatever
    # their names: point it at the shards' glob, or let pyarrow discover the dataset.
    for df in (pl.read_parquet(f"{out}/*.parquet"), pl.read_parquet(out, use_pyarrow=True)):
        assert df.height == _windows(out)
        assert _key(df.select("doc_id", "start", "tokens").iter_rows()) == _expected(out)


def test_duckdb_recipe(out):
    duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed (the test extra has it)")
    got = duckdb.sql(
        f"SELECT doc_id, count(*) AS windows, sum(length - loss_start) AS scored "
        f"FROM '{out}/*.parquet' GROUP BY doc_id ORDER BY windows DESC, doc_id LIMIT 5"
    ).fetchall()
    by_doc: dict[str, list[int]] = {}
    for r in read_rows(out):
        by_doc.setdefault(r["doc_id"], [0, 0])
        by_doc[r["doc_id"]][0] += 1
        by_doc[r["doc_id"]][1] += r["length"] - r["loss_start"]
    want = sorted(((d, w, s) for d, (w, s) in by_doc.items()), key=lambda x: (-x[1], x[0]))[:5]
    assert got == want


def test_datasets_recipe(out):
    datasets = pytest.importorskip(
        "datasets", reason="Hugging Face datasets is not installed (the bench extra has it)")
    # datasets skips only names starting with "." or "__": give it the shards' glob.
    ds = datasets.load_dataset("parquet", data_files=f"{out}/*.parquet", split="train",
                               cache_dir=str(out.parent / "hf-cache"))
    assert ds.num_rows == _windows(out)
    assert _key(zip(ds["doc_id"], ds["start"], ds["tokens"], strict=True)) == _expected(out)


@pytest.mark.slow
def test_overwrite_replaces_a_dataset_with_the_old_names(tmp_path, corpus):
    """A directory written before the rename (manifest.json, rejects/) is still ours."""
    out = tmp_path / "old"
    run_job(out, "--input", str(corpus), "--tokenizer", "bytes")
    (out / MANIFEST_NAME).rename(out / LEGACY_MANIFEST_NAME)
    (out / REJECTS_DIR).rename(out / LEGACY_REJECTS_DIR)
    run_job(out, "--input", str(corpus), "--tokenizer", "bytes", "--overwrite")
    # Every old file is gone (the local file system may keep the emptied rejects/ folder).
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        MANIFEST_NAME, f"{REJECTS_DIR}/empty.jsonl", "part-00000-of-00001.parquet"]
