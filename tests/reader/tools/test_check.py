"""`reader.tools.check`: the checks of docs/format.md#checks recomputed from a dataset's rows.

Each damaged dataset is forged with care (`tests.common.inspect_data.rewrite_first_shard` makes the
manifest agree with the edited file), so what is found is what only the recomputations can
find, and every failure names its check, its shard, row, document and window.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from reader.tools.check import check
from reader.tools.inspect import open_dataset
from tests.common.inspect_data import FAMILIES, TEXTS, bytes_dataset, rewrite_first_shard, spec_of
from transforms.dataset.manifest import MANIFEST_NAME, SampleInfo
from transforms.plan.splits import SplitSpec
from transforms.tokenize.tokenizers import ByteTokenizer

SHARD = "part-00000-of-00001.parquet"


def failures(root: pathlib.Path) -> list[tuple[str, str]]:
    result = check(open_dataset(str(root)))
    assert result["ok"] == (not result["failures"])
    return [(f["check"], f["message"]) for f in result["failures"]]


def window(rows: list[dict], doc: str, index: int) -> dict:
    return next(r for r in rows if r["doc_id"] == doc and r["window_index"] == index)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: "-".join(map(str, f)))
def test_check_passes_on_every_window_family(tmp_path, family):
    manifest = bytes_dataset(tmp_path, spec_of(family))
    result = check(open_dataset(str(tmp_path)))
    assert (result["ok"], result["failures"]) == (True, [])
    c = manifest["counts"]
    got = result["checked"]
    assert {k: got[k] for k in ("windows", "tokens", "scored_targets", "documents")} == {
        "windows": c["windows"], "tokens": c["tokens"], "scored_targets": c["scored_targets"],
        "documents": c["documents"] - c["documents_without_windows"]}
    # The rows see the pairs of the documents with windows; every pair they cover is counted.
    assert got["pairs"] - got["uncovered"] == c["pairs"] - c["uncovered_pairs"]
    assert (got["pairs"] == c["pairs"]) == (c["documents_without_windows"] == 0)


def test_a_window_that_crosses_its_document(tmp_path):
    bytes_dataset(tmp_path, spec_of(FAMILIES[1]), num_shards=1)

    def cross(rows):
        r = window(rows, "d0", 1)
        r["length"] += 1
        r["tokens"] = r["tokens"] + [257]
        return rows
    rewrite_first_shard(tmp_path, cross)
    at = f"{SHARD} row 65 (doc_id 'd0', window 1, start 2)"
    assert failures(tmp_path) == [
        ("boundaries", f"{at}: crosses its document: start + length = 7 > P = 6"),
        ("boundaries", f"{at}: length 5, loss_start 2: need length ≤ W = 4 and 0 ≤ loss_start "
                       "< length")]


def test_a_missing_window(tmp_path):
    bytes_dataset(tmp_path, spec_of(FAMILIES[0]), num_shards=1)
    rewrite_first_shard(tmp_path, lambda rows: [
        r for r in rows if not (r["doc_id"] == "d5" and r["window_index"] == 3)])
    at = f"{SHARD} row 247 (doc_id 'd5', window 4, start 16)"
    assert failures(tmp_path) == [
        ("coverage", f"{at}: window_index 4, expected 3: a window of the document is missing "
                     "or repeated"),
        ("overlap", f"{at}: starts 8 after the previous window; stride 4 means consecutive "
                    "full windows overlap by W - S = 0"),
        ("counts", f"{MANIFEST_NAME}: counts.pairs 1214 and uncovered_pairs 0, but the rows "
                   "give 1214 pairs of which 4 uncovered")]


def test_a_wrong_overlap(tmp_path):
    bytes_dataset(tmp_path, spec_of(FAMILIES[2]), num_shards=1)

    def shift(rows):
        r = window(rows, "d3", 2)
        r["start"] += 1
        r["tokens"] = list(ByteTokenizer().encode(TEXTS[3])[r["start"]: r["start"] + 5])
        return rows
    rewrite_first_shard(tmp_path, shift)
    assert failures(tmp_path) == [
        ("overlap", f"{SHARD} row 331 (doc_id 'd3', window 2, start 5): starts 3 after the "
                    "previous window; stride 2 means consecutive full windows overlap by "
                    "W - S = 2"),
        ("overlap", f"{SHARD} row 332 (doc_id 'd3', window 3, start 6): starts 1 after the "
                    "previous window; stride 2 means consecutive full windows overlap by "
                    "W - S = 2")]


def test_stored_ids_that_disagree_where_two_windows_overlap(tmp_path):
    bytes_dataset(tmp_path, spec_of(FAMILIES[1]), num_shards=1)

    def poke(rows):
        r = window(rows, "d3", 1)
        r["tokens"] = [r["tokens"][0] ^ 1, *r["tokens"][1:]]
        return rows
    rewrite_first_shard(tmp_path, poke)
    assert failures(tmp_path) == [
        ("overlap", f"{SHARD} row 348 (doc_id 'd3', window 1, start 2): its first 3 ids differ "
                    "from the same positions of the previous window")]


def test_the_manifests_counts_are_recomputed(tmp_path):
    bytes_dataset(tmp_path, spec_of(FAMILIES[0]), num_shards=1)
    path = tmp_path / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["counts"]["pairs"] += 1
    path.write_text(json.dumps(manifest))
    assert failures(tmp_path) == [
        ("counts", f"{MANIFEST_NAME}: counts.pairs 1215 and uncovered_pairs 0, but the rows give "
                   "1214 pairs of which 0 uncovered")]


def test_every_document_outside_the_recorded_sample_is_named(tmp_path):
    bytes_dataset(tmp_path, spec_of(FAMILIES[0]))
    path = tmp_path / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["sample"] = {"fraction": 0.5, "seed": 0}
    path.write_text(json.dumps(manifest))
    ids = sorted(r for r in open_dataset(str(tmp_path)).column("doc_id"))
    ids = sorted(set(ids))
    kept = SplitSpec.from_manifest(None, SampleInfo(fraction=0.5, seed=0)).kept(ids)
    left_out = [d for d, k in zip(ids, kept, strict=True) if not k]
    assert 0 < len(left_out) < len(ids)
    assert failures(tmp_path) == [
        ("split", f"doc_id {d!r} is not in the sample {{'fraction': 0.5, 'seed': 0}}")
        for d in left_out]
