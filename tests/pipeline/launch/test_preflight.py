"""`pipeline.launch.preflight`: the launcher's checks before any work, the claim, and the context
they settle (its refusals on the command line, with exit status 2: tests/pipeline/test_job.py)."""

from __future__ import annotations

import os
import pathlib

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.files.output import read_claim
from pipeline.launch.options import JobConfig
from pipeline.launch.preflight import preflight
from pipeline.steps import encode
from pipeline.steps.encode import acquire_tokenizer
from tests.common.jobs import write_jsonl
from tests.common.paths import DATA
from transforms.dataset.schema import CLAIM_NAME, TMP_DIR


def launch(*argv: str):
    options = PipelineOptions(list(argv))
    return preflight(JobConfig.from_options(options), options)


def corpus(root: pathlib.Path) -> pathlib.Path:
    write_jsonl(root / "a.jsonl", [{"text": "one"}, {"text": "two"}])
    write_jsonl(root / "sub" / "b.jsonl", [{"text": "three"}])
    return root


def test_every_match_once_per_pattern_every_file_once(tmp_path):
    src = corpus(tmp_path / "in")
    out = tmp_path / "out"
    a, b = str(src / "a.jsonl"), str(src / "sub" / "b.jsonl")
    job = launch("--input", f"{src}/*.jsonl", "--input", f"{src}/**", "--tokenizer", "bytes",
                 "--output", str(out))
    sizes = {a: os.path.getsize(a), b: os.path.getsize(b)}
    assert {p: size for p, (size, _) in job.files.items()} == sizes
    assert sorted((i, p, size) for i, p, size, _ in job.matched) == [
        (0, a, sizes[a]), (1, a, sizes[a]), (1, b, sizes[b])]
    assert job.chunks is None  # only Beam's DaskRunner plans chunks at launch
    context = job.context
    assert (context.tokenizer.kind, context.tokenizer.vocab_size) == ("bytes", 258)
    assert context.plan is not None and len(context.fingerprint) == 64
    # The output is claimed for this attempt, which names the temporary directory.
    assert sorted(os.listdir(out)) == [CLAIM_NAME]
    claim = read_claim(str(out))
    assert claim is not None
    assert (claim.attempt, claim.fingerprint) == (context.attempt, context.fingerprint)
    assert context.tmp_dir == f"{out}/{TMP_DIR}/{context.attempt}"


def test_the_fingerprint_names_the_inputs_relative_to_their_pattern(tmp_path):
    def fingerprint(src: pathlib.Path, out: str, *flags: str) -> str:
        return launch("--input", f"{src}/*.jsonl", "--tokenizer", "bytes", "--output",
                      str(tmp_path / out), *flags).context.fingerprint

    here = fingerprint(corpus(tmp_path / "one"), "o1")
    assert fingerprint(corpus(tmp_path / "two"), "o2") == here  # the same corpus elsewhere
    assert fingerprint(tmp_path / "two", "o3", "--window", "16") != here
    write_jsonl(tmp_path / "two" / "a.jsonl", [{"text": "one"}, {"text": "2"}])
    assert fingerprint(tmp_path / "two", "o4") != here  # a file of another size


def test_a_dry_run_touches_nothing(tmp_path):
    out = tmp_path / "out"
    job = launch("--input", f"{tmp_path}/none/*.jsonl", "--tokenizer", "gone.model",
                 "--output", str(out), "--dry_run=True")
    assert (job.files, job.matched, job.chunks, job.tokenizer) == (None, None, None, None)
    assert (job.context.fingerprint, job.context.tokenizer, job.context.attempt) == (
        "", None, None)
    assert job.context.tmp_dir == f"{out}/{TMP_DIR}/dry-run"
    assert not out.exists()


def test_an_input_inside_the_output_is_refused_and_nothing_claimed(tmp_path):
    out = tmp_path / "out"
    write_jsonl(out / "old.jsonl", [{"text": "x"}])
    with pytest.raises(ValueError) as info:
        launch("--input", f"{tmp_path}/**.jsonl", "--tokenizer", "bytes", "--output",
               str(out))
    assert str(info.value) == (
        f"--output {out} lies where --input {tmp_path}/**.jsonl matches: the job would read "
        "its own output; choose an output outside the input pattern")
    assert sorted(os.listdir(out)) == ["old.jsonl"]


def test_the_tokenizer_loads_beside_the_match_and_a_pattern_error_comes_first(tmp_path):
    # The model loads on a helper thread while the inputs are matched: the input error is
    # still the one reported, and a bad model is reported once the inputs are fine.
    src = corpus(tmp_path / "in")
    (tmp_path / "bad.model").write_bytes(b"not a model")
    with pytest.raises(ValueError, match=r"--input .*/none/\*\.jsonl matches no file"):
        launch("--input", f"{tmp_path}/none/*.jsonl", "--tokenizer",
               str(tmp_path / "bad.model"), "--output", str(tmp_path / "o1"))
    with pytest.raises(ValueError, match=r"bad\.model is not a SentencePiece model"):
        launch("--input", f"{src}/*.jsonl", "--tokenizer", str(tmp_path / "bad.model"),
               "--output", str(tmp_path / "o2"))
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
    model = pathlib.Path(__file__).resolve().parents[3] / "samples" / "spm.model"
    job = launch("--input", f"{src}/*.jsonl", "--tokenizer", str(model), "--output",
                 str(tmp_path / "o3"))
    assert (job.context.tokenizer.kind, job.context.tokenizer.vocab_size) == (
        "sentencepiece", 8000)


def test_the_launcher_loads_the_tokenizer_as_the_steps_would_and_holds_it(tmp_path,
                                                                           monkeypatch):
    made = []
    inner = encode.tokenizer_from_bytes

    def counted(model, *, where, num_threads=1, **kwargs):
        made.append(num_threads)
        return inner(model, where=where, num_threads=num_threads, **kwargs)

    monkeypatch.setattr(encode, "tokenizer_from_bytes", counted)
    job = launch("--input", f"{corpus(tmp_path / 'in')}/*.jsonl", "--tokenizer",
                 str(DATA / "tiny.model"), "--encode-threads", "3", "--output",
                 str(tmp_path / "out"))
    assert made == [3]  # with the steps' threads (`--encode-threads`)
    assert job.context.tokenizer == job.tokenizer.info()
    # Through the context's handle: what a step acquires in this process is the launcher's.
    assert acquire_tokenizer(job.context.tokenizer_handle, job.context.config) is job.tokenizer
    assert made == [3]
