"""Hostile inputs to the job: a tokenizer that fails on one document costs that document (a
``tokenizer_error`` reject), never the job; a FIFO or a device given as the tokenizer or an
input is refused by name before any work, never opened (docs/running.md#bad-input)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.common.jobs import run_job, run_main
from transforms.inputs.documents import Document, Reject
from transforms.shards.encoding import encode_or_reject
from transforms.tokenize.tokenizers import ByteTokenizer, tokenizer_failed

REPO = pathlib.Path(__file__).resolve().parents[2]
# A pre-tokenizer whose regex backtracks: "a" * 40 + "!" exceeds Oniguruma's retry limit,
# and tokenizers panics (pyo3_runtime.PanicException, a BaseException).
BACKTRACKING = r"(a+)+$|\s+|[^a\s]+"
HOSTILE = "a" * 40 + "!"


def backtracking_tokenizer(directory: pathlib.Path) -> pathlib.Path:
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"<s>": 0, "</s>": 1, "[UNK]": 2}
    for c in "abcdefghijklmnopqrstuvwxyz! ":
        vocab.setdefault(c, len(vocab))
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(
        tokenizers.Regex(BACKTRACKING), behavior="isolated")
    tok.add_special_tokens(["<s>", "</s>"])
    path = directory / "tokenizer.json"
    tok.save(str(path))
    return path


class _Failing(ByteTokenizer):
    """The bytes tokenizer, failing with ``error`` on any text holding "!"."""

    def __init__(self, error: BaseException) -> None:
        self._error = error

    def encode_batch(self, texts):
        if any("!" in t for t in texts):
            raise self._error
        return super().encode_batch(texts)


def _docs(*texts: str) -> list[Document]:
    return [Document(doc_id=f"a:{i}", text=t, source=f"/c/a.jsonl:{i}")
            for i, t in enumerate(texts, 1)]


def test_the_document_a_tokenizer_fails_on_is_a_reject_and_the_others_keep_their_ids():
    docs = _docs("ab", "no!\nsecond line", "cd")
    kept, tokens, rejects = encode_or_reject(_Failing(ValueError("bad text\nmore")), docs)
    assert kept == [docs[0], docs[2]]
    assert [t.tolist() for t in tokens] == [[256, 97, 98, 257], [256, 99, 100, 257]]
    assert rejects == [Reject(reason="tokenizer_error", source="/c/a.jsonl:2",
                              detail="ValueError: bad text", record="no!\nsecond line")]


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemExit(1)])
def test_an_interrupt_while_encoding_is_not_a_reject(error):
    assert not tokenizer_failed(error)
    with pytest.raises(type(error)):
        encode_or_reject(_Failing(error), _docs("x!"))


def test_a_rust_panic_is_a_tokenizer_failure(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(backtracking_tokenizer(tmp_path)))
    with pytest.raises(BaseException) as info:  # noqa: PT011 - the panic's type is not importable
        tok.encode(HOSTILE)
    assert not isinstance(info.value, Exception)
    assert tokenizer_failed(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", ["files", "runner"])
def test_a_tokenizer_that_panics_on_one_document_costs_that_document(tmp_path, shuffle):
    tokenizer = backtracking_tokenizer(tmp_path)
    source = tmp_path / "in.jsonl"
    texts = ["a good text", HOSTILE, "another good one", HOSTILE + " again"]
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = tmp_path / "out"
    manifest = run_job(out, "--input", str(source), "--tokenizer", str(tokenizer),
                       "--bos-token", "<s>", "--eos-token", "</s>", "--shuffle", shuffle)
    assert manifest["counts"]["documents"] == 2
    assert manifest["counts"]["skipped"] == {"tokenizer_error": 2}
    rejects = [json.loads(line) for line in
               (out / "_rejects" / "tokenizer_error.jsonl").read_text().splitlines()]
    assert [(r["source"], r["record"]) for r in rejects] == [
        (f"{source}:2", HOSTILE), (f"{source}:4", HOSTILE + " again")]
    assert {r["detail"] for r in rejects} == {
        "PanicException: Onig: Regex search error: retry-limit-in-match over"}


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", ["files", "runner"])
def test_tokenizer_rejects_of_many_chunks_and_batches_are_all_kept_in_input_order(tmp_path,
                                                                                 shuffle):
    """Byte ranges of a few hundred bytes and batches of a few documents: the failures come
    to light while later chunks are encoded, or at the bundle's end; each is kept once, in
    input order, and the other documents are those of a job without them."""
    from pipeline.launch.context import Tuning

    tokenizer = backtracking_tokenizer(tmp_path)
    hostile = {5, 41, 42, 97, 150}
    texts = [HOSTILE if i in hostile else f"text number {i}" for i in range(1, 151)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    tuning = Tuning(chunk_bytes=300, batch_chars=60, encoding_ahead=2)
    args = ("--tokenizer", str(tokenizer), "--bos-token", "<s>", "--eos-token", "</s>",
            "--shuffle", shuffle, "--num-shards", "1")
    manifest = run_job(tmp_path / "out", "--input", str(source), *args, tuning=tuning)
    assert manifest["counts"]["skipped"] == {"tokenizer_error": 5}
    lines = (tmp_path / "out" / "_rejects" / "tokenizer_error.jsonl").read_text().splitlines()
    assert [json.loads(line)["source"] for line in lines] == [
        f"{source}:{i}" for i in sorted(hostile)]
    clean = tmp_path / "clean.jsonl"
    clean.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts if t != HOSTILE))
    without = run_job(tmp_path / "without", "--input", str(clean), *args, tuning=tuning)
    same = ("documents", "pairs", "tokens", "windows", "scored_targets")
    assert manifest["counts"]["documents"] == 145
    assert {k: manifest["counts"][k] for k in same} == {k: without["counts"][k] for k in same}


def run_capped(*args: str, timeout: float = 120) -> tuple[int, str]:
    """``python -m pipeline ARGS`` in a subprocess with at most 4 GB of address space and
    ``timeout`` seconds (a job that waits on a FIFO, or reads a device, fails the test
    instead of hanging it or filling the machine): (exit status, its last stderr line)."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=timeout, preexec_fn=cap,
                          check=False)
    return done.returncode, done.stderr.strip().splitlines()[-1]


@pytest.fixture
def corpus(tmp_path: pathlib.Path) -> pathlib.Path:
    """A directory holding one good JSONL file and a FIFO, both matched by ``*.jsonl``."""
    directory = tmp_path / "corpus"
    directory.mkdir()
    (directory / "a.jsonl").write_text('{"text": "a good text"}\n')
    os.mkfifo(directory / "b.jsonl")
    return directory


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_special_tokenizer_file_is_refused_unopened(tmp_path, corpus, kind):
    if kind == "fifo":
        tokenizer = tmp_path / "spm.model"
        os.mkfifo(tokenizer)
    else:
        tokenizer = pathlib.Path("/dev/zero")
    code, err = run_capped("--input", str(corpus / "a.jsonl"), "--tokenizer", str(tokenizer),
                           "--output", str(tmp_path / "out"))
    what = "a FIFO (named pipe)" if kind == "fifo" else "a character device"
    assert (code, err) == (2, f"error: --tokenizer {tokenizer} is {what}, not a regular file: "
                              "it is not read; pass the path of a SentencePiece .model file, "
                              "a Hugging Face tokenizer.json, or --tokenizer bytes")
    assert not (tmp_path / "out").exists()


def test_a_fifo_tokenizer_config_is_refused_unopened(tmp_path, corpus):
    tokenizer = backtracking_tokenizer(tmp_path)
    os.mkfifo(tmp_path / "tokenizer_config.json")
    code, err = run_capped("--input", str(corpus / "a.jsonl"), "--tokenizer", str(tokenizer),
                           "--output", str(tmp_path / "out"))
    assert code == 2
    assert err.startswith(f"error: the tokenizer_config.json beside --tokenizer "
                          f"{tmp_path / 'tokenizer_config.json'} is a FIFO (named pipe)")


@pytest.mark.parametrize("how", ["named", "glob", "link to /dev/zero"])
def test_a_special_input_file_is_refused_unopened(tmp_path, corpus, how):
    if how == "named":
        pattern = special = corpus / "b.jsonl"
    elif how == "glob":
        pattern, special = corpus / "*.jsonl", corpus / "b.jsonl"
    else:
        (corpus / "b.jsonl").unlink()
        special = corpus / "z.jsonl"
        special.symlink_to("/dev/zero")
        pattern = corpus / "*.jsonl"
    code, err = run_capped("--input", str(pattern), "--tokenizer", "bytes", "--output",
                           str(tmp_path / "out"))
    what = "a character device" if how.startswith("link") else "a FIFO (named pipe)"
    assert (code, err) == (2, f"error: --input {pattern} matches {special}, {what}, not a "
                              "regular file: the job reads only regular files (a FIFO would "
                              "wait for a writer, a device never ends); remove it or narrow "
                              "the pattern")
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_that_cannot_encode_plain_text_is_refused_before_any_work(tmp_path, corpus):
    """A WordLevel model whose unknown token is not in its vocabulary fails on every text
    with a character it lacks: refused at load (exit 2), not document by document."""
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"<s>": 0, "</s>": 1, "a": 2}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    code, err = run_main("--input", str(corpus / "a.jsonl"), "--tokenizer", str(path),
                         "--bos-token", "<s>", "--eos-token", "</s>", "--output",
                         str(tmp_path / "out"))
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"error: --tokenizer {path} fails to encode the text 'Hello, world! 123\\n' "
        "(Exception: WordLevel error: Missing [UNK] token from the vocabulary); it cannot be "
        "used: fix it, or pass another tokenizer")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_tokenizer_rejects_reach_the_output_on_dask_with_the_file_shuffle(tmp_path):
    """Beam's DaskRunner drops what a DoFn's finish_bundle emits: in a Dask worker each
    chunk's batches are taken in before its end, so its rejects go on from process."""
    pytest.importorskip("distributed", reason="needs dask and distributed")
    tokenizer = backtracking_tokenizer(tmp_path)
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n"
                              for t in ["a good text", HOSTILE, "more good text"]))
    code, err = run_capped("--input", str(source), "--tokenizer", str(tokenizer),
                           "--bos-token", "<s>", "--eos-token", "</s>", "--output",
                           str(tmp_path / "out"), "--runner", "DaskRunner", "--shuffle",
                           "files", timeout=600)
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["counts"]["skipped"] == {"tokenizer_error": 1}
    (reject,) = (tmp_path / "out" / "_rejects" / "tokenizer_error.jsonl").read_text().splitlines()
    assert json.loads(reject)["source"] == f"{source}:2"
