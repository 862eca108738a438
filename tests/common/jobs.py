"""Running the job in this process and reading what it wrote."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pathlib
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.common.paths import SAMPLES


def run_job(output: pathlib.Path, *args: str, tuning: Any = None) -> dict[str, Any]:
    """Run the job in this process (FnApiRunner) and return its manifest's JSON object (a
    split job's: its ``_splits.json``'s), what the file holds; ``tuning``: its knobs
    (`pipeline.launch.context.Tuning`)."""
    from pipeline.job import run

    manifest = run(["--output", str(output), *args], tuning=tuning)
    assert manifest is not None
    return manifest.to_json()


def manifest_bytes(value: dict[str, Any]) -> bytes:
    """A manifest's JSON object, edited by a test (perhaps damaged), as the file's bytes:
    serialised as `transforms.dataset.manifest.dumps_manifest` serialises a record."""
    return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def exit_code(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run the command line (`pipeline.job.main`) in this process, expecting it to exit;
    return its status and the last line it printed on stderr, which is never a traceback."""
    from pipeline.job import main

    with pytest.raises(SystemExit) as info:
        main(list(args))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return info.value.code, err.strip().splitlines()[-1]


def run_main(*args: str, tuning: Any = None) -> tuple[int, str]:
    """``python -m pipeline ARGS`` in this process (`pipeline.job.main`), whether it exits or
    returns: (exit status, everything it printed on stderr); ``tuning``: the job's knobs."""
    from pipeline.job import main

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            main(list(args), tuning=tuning)
    except SystemExit as e:
        return int(e.code or 0), err.getvalue()
    return 0, err.getvalue()


def read_rows(output: pathlib.Path) -> list[dict[str, Any]]:
    """Every row of every shard, in shard order."""
    from transforms.dataset.manifest import MANIFEST_NAME

    manifest = json.loads((output / MANIFEST_NAME).read_text())
    rows: list[dict[str, Any]] = []
    for shard in manifest["shards"]:
        rows.extend(pq.read_table(output / shard["file"]).to_pylist())
    return rows


def write_jsonl(path: pathlib.Path, records: list[Any]) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n")
    return path


def tree_digest(root: pathlib.Path, *, leave_out: pathlib.Path | None = None) -> dict[str, str]:
    """Every file, directory and link below ``root`` (links not followed; ``leave_out`` and
    what is below it left out): its SHA-256, or what it is."""
    found = {}
    for path in sorted(root.rglob("*")):
        if leave_out is not None and (path == leave_out or leave_out in path.parents):
            continue
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = "link -> " + os.readlink(path)
        elif path.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def dir_bytes(output: pathlib.Path) -> dict[str, bytes]:
    """Every file below ``output`` by relative path, for byte-equality checks."""
    return {
        str(p.relative_to(output)): p.read_bytes() for p in sorted(output.rglob("*")) if p.is_file()
    }


def fn_api_pipeline() -> Any:
    """A pipeline on Beam's FnApiRunner (never the Prism-first DirectRunner)."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    return beam.Pipeline(runner=fn_runner.FnApiRunner())


def train_bpe(directory: pathlib.Path, *, config: dict[str, Any] | None = None) -> pathlib.Path:
    """A small byte-level BPE ``tokenizer.json`` trained on the sample corpus (no download),
    with ``<s>``, ``</s>`` and ``<|endoftext|>`` as special tokens, and optionally a
    ``tokenizer_config.json`` beside it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = [json.loads(line)["text"]
             for f in sorted((SAMPLES / "corpus").glob("*.jsonl"))
             for line in f.read_text(encoding="utf-8").splitlines()[:40]]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>", "<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    tok.save(str(path))
    if config is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return path
