"""`pipeline.launch.summary`: the job's last lines, from its manifest or its ``_splits.json``."""

from __future__ import annotations

import dataclasses
import functools
import io

import pytest

from pipeline.launch.summary import print_summary
from tests.common.jobs import run_job
from transforms.dataset.manifest import (
    Counts,
    Manifest,
    SampleInfo,
    ShardEntry,
    SplitEntry,
    SplitsRecord,
    TokenizerInfo,
    WindowsInfo,
)
from transforms.dataset.schema import REJECTS_DIR

COUNTS = Counts(records=1234, documents=1200, documents_without_windows=0,
                skipped={"empty": 30, "malformed_json": 4}, repaired={"invalid_utf8": 2},
                pairs=100_000, windows=20_000, tokens=180_000, uncovered_pairs=500,
                scored_targets=99_500)


TOKENIZER = TokenizerInfo(kind="bytes", vocab_size=258, bos_id=256, eos_id=257, sha256=None)
WINDOWS = WindowsInfo(window=8, stride=4, tail="keep", min_tail=1, score="all", offset="zero",
                      seed=0)


def manifest(counts: Counts = COUNTS, shards: int = 2, **fields: object) -> Manifest:
    entries = tuple(ShardEntry(file=f"part-{i:05d}-of-{shards:05d}.parquet", rows=0,
                               scored_targets=0, sha256="0" * 64) for i in range(shards))
    return Manifest(tokenizer=TOKENIZER, windows=WINDOWS, inputs=("in.jsonl",), counts=counts,
                    shards=entries, num_shards=shards, **fields)


def printed(record: Manifest | SplitsRecord, seconds: float = 2.0) -> list[str]:
    stream = io.StringIO()
    print_summary(record, "/out", seconds, stream=stream)
    assert stream.getvalue().endswith("\n")
    return stream.getvalue().splitlines()


def test_a_dataset_is_one_line_of_its_counts() -> None:
    # Overlap factor: window pairs 180,000 - 20,000 over covered pairs 100,000 - 500;
    # corpus tokens Σ M = pairs + documents = 101,200 in 2 s.
    assert printed(manifest()) == [
        "wrote /out: 1,234 records -> 1,200 documents (34 skipped, 2 repaired); corpus 100,000 "
        "pairs; 20,000 windows hold 180,000 tokens, overlap factor 1.61; 99,500 scored "
        "targets, 500 uncovered pairs; 2 shards in 2.0 s (50,600 corpus tokens/s); rejects in "
        f"/out/{REJECTS_DIR}/ (empty 30, malformed_json 4)"]


def test_a_sample_one_shard_and_no_rejects() -> None:
    counts = dataclasses.replace(COUNTS, skipped={}, repaired=None, sampled_out=1000,
                                 uncovered_pairs=0)
    (line,) = printed(manifest(counts, shards=1, sample=SampleInfo(fraction=0.5, seed=0)),
                      seconds=4.0)
    assert line == (
        "wrote /out: 1,234 records -> 1,200 documents (0 skipped, 0 repaired, 1,000 left out by "
        "--sample 0.5); corpus 100,000 pairs; 20,000 windows hold 180,000 tokens, overlap "
        "factor 1.60; 99,500 scored targets, 0 uncovered pairs; 1 shard in 4.0 s (25,300 "
        "corpus tokens/s); no rejects")


def test_a_dataset_without_covered_pairs_has_overlap_factor_0() -> None:
    counts = dataclasses.replace(COUNTS, uncovered_pairs=COUNTS.pairs)
    assert "overlap factor 0.00;" in printed(manifest(counts))[0]


def test_a_split_job_is_a_line_per_split_and_one_for_the_job() -> None:
    counts = Counts(records=40, documents=8, documents_without_windows=0, windows=80,
                    tokens=7100, pairs=0, scored_targets=720, uncovered_pairs=0,
                    skipped={"empty": 2}, sampled_out=30)
    entry = functools.partial(SplitEntry, fingerprint="a" * 64, manifest_sha256="b" * 64)
    record = SplitsRecord(
        tokenizer=TOKENIZER, windows=WINDOWS, inputs=("in.jsonl",), reading=None,
        split_seed=0, sample=SampleInfo(fraction=0.25, seed=0), counts=counts, versions=None,
        fingerprint="c" * 64, splits=(
            entry(name="train", dir="train", fraction=0.9, num_shards=2, documents=7,
                  windows=70, tokens=7000, scored_targets=630),
            entry(name="val", dir="val", fraction=0.1, num_shards=1, documents=1, windows=10,
                  tokens=100, scored_targets=90)))
    assert printed(record, seconds=3.0) == [
        "wrote /out/train: split train (90 %), 7 documents, 70 windows, 7,000 tokens, 630 "
        "scored targets; 2 shards",
        "wrote /out/val: split val (10 %), 1 documents, 10 windows, 100 tokens, 90 scored "
        "targets; 1 shard",
        "wrote /out: 40 records -> 8 documents in 2 splits (2 skipped, 30 left out by --sample "
        f"0.25) in 3.0 s; rejects in /out/{REJECTS_DIR}/ (empty 2)"]


@pytest.mark.slow
def test_a_jobs_summary_names_repaired_records_where_rejects_are_and_says_1_shard(
        tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"text": "a"}\n{"text": "\\ud800"}\n{"t": 1}\n')
    run_job(tmp_path / "o", "--input", str(src), "--tokenizer", "bytes")
    out = capsys.readouterr().out
    assert "3 records -> 2 documents (1 skipped, 1 repaired)" in out
    assert f"rejects in {tmp_path / 'o' / REJECTS_DIR}/ (missing_text 1)" in out
    assert "; 1 shard in " in out
