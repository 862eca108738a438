"""Tokenizers (docs/format.md#tokens)."""

import hashlib
import json
import sys

import numpy as np
import pytest
import sentencepiece as spm

from tests.common.paths import DATA, SAMPLES
from transforms.tokenize.tokenizers import (
    ByteTokenizer,
    HFTokenizer,
    SentencePieceTokenizer,
    hf_config_path,
    tokenizer_from_bytes,
)


def test_bytes_tokenizer():
    tok = ByteTokenizer()
    z = tok.encode("abcde")
    assert z.dtype == np.int32
    assert z.tolist() == [256, 97, 98, 99, 100, 101, 257]
    assert tok.encode("").tolist() == [256, 257]
    assert tok.encode("道").tolist() == [256, 0xE9, 0x81, 0x93, 257]
    assert tok.info().to_json() == {"kind": "bytes", "vocab_size": 258, "bos_id": 256,
                                    "eos_id": 257, "sha256": None}


def test_sentencepiece_matches_the_library():
    model = (DATA / "tiny.model").read_bytes()
    tok = SentencePieceTokenizer(model, where="tiny.model")
    ref = spm.SentencePieceProcessor(model_file=str(DATA / "tiny.model"))
    texts = ["The fox saw the grapes.", "道可道，非常道。", ""]
    for text, z in zip(texts, tok.encode_batch(texts), strict=True):
        assert z.dtype == np.int32
        assert z.tolist() == [ref.bos_id()] + ref.encode(text) + [ref.eos_id()]
    assert (tok.bos_id, tok.eos_id, tok.vocab_size) == (1, 2, 500)
    assert len(tok.info().sha256) == 64


def test_model_without_bos_eos_is_refused():
    with pytest.raises(ValueError, match="no BOS id; retrain it with --bos_id"):
        tokenizer_from_bytes((DATA / "no_bos_eos.model").read_bytes(), where="no_bos_eos.model")


def test_garbage_model_is_refused():
    with pytest.raises(ValueError, match="x.model is not a SentencePiece model"):
        tokenizer_from_bytes(b"not a model", where="x.model")


def test_sentencepiece_batches_with_threads_give_the_same_ids():
    model = (DATA / "tiny.model").read_bytes()
    texts = [f"The fox saw {i} grapes." * (i % 5) for i in range(200)] + ["道可道，非常道。", ""]
    one = SentencePieceTokenizer(model, where="tiny.model", num_threads=1).encode_batch(texts)
    two = SentencePieceTokenizer(model, where="tiny.model", num_threads=2).encode_batch(texts)
    assert [z.tolist() for z in one] == [z.tolist() for z in two]
    assert all(z[0] == 1 and z[-1] == 2 and z.dtype == np.int32 for z in one)


# ------------------------------------------------------------------ Hugging Face tokenizers

REAL = [json.loads(line)["text"] for line in
        (SAMPLES / "corpus" / "en_persuasion.jsonl").read_text(encoding="utf-8").splitlines()[:60]
        ] + ["道可道，非常道。", "", "  two  spaces\nand a newline ", "<s> is text here"]


def test_hf_ids_equal_the_library_with_our_bos_eos(bpe):
    from tokenizers import Tokenizer

    ref = Tokenizer.from_file(str(bpe))
    bos, eos = ref.token_to_id("<s>"), ref.token_to_id("</s>")
    tok = HFTokenizer(bpe.read_bytes(), where=str(bpe), bos_token="<s>", eos_token="</s>")
    want = [[bos, *ref.encode(t, add_special_tokens=False).ids, eos] for t in REAL]
    assert [z.tolist() for z in tok.encode_batch(REAL)] == want
    assert [tok.encode(t).tolist() for t in REAL] == want
    assert all(z.dtype == np.int32 for z in tok.encode_batch(REAL))
    assert sum(len(w) for w in want) > 10 * len(want)  # real merges, not one id per byte
    # The library's thread pool (encode_batch_fast) gives the same ids, batched any way.
    threaded = HFTokenizer(bpe.read_bytes(), where=str(bpe), bos_token="<s>", eos_token="</s>",
                           num_threads=2)
    assert [z.tolist() for z in threaded.encode_batch(REAL)] == want
    assert [z.tolist() for z in threaded.encode_batch(REAL[:7])] == want[:7]
    assert tok.decode(want[1]) == "<s>" + REAL[1] + "</s>"
    assert tok.info().to_json() == {
        "kind": "huggingface", "vocab_size": ref.get_vocab_size(with_added_tokens=True),
        "bos_id": bos, "eos_id": eos, "bos_token": "<s>", "eos_token": "</s>",
        "sha256": hashlib.sha256(bpe.read_bytes()).hexdigest(),
        "file": "tokenizer.json", "path": str(bpe), "engine": "tiktoken"}
    pinned = HFTokenizer(bpe.read_bytes(), where=str(bpe), bos_token="<s>", eos_token="</s>",
                         engine="tokenizers")
    assert pinned.engine == "tokenizers" and pinned.info().engine == "tokenizers"
    assert [z.tolist() for z in pinned.encode_batch(REAL)] == want


def test_hf_one_token_may_be_bos_and_eos(bpe):
    tok = tokenizer_from_bytes(bpe.read_bytes(), where=str(bpe), bos_token="<|endoftext|>",
                               eos_token="<|endoftext|>")
    z = tok.encode("ab").tolist()
    assert z[0] == z[-1] == tok.bos_id == tok.eos_id == 2


def test_hf_tokens_come_from_the_flags_else_the_config_beside_it(bpe):
    config = (bpe.parent / "tokenizer_config.json").read_bytes()
    tok = tokenizer_from_bytes(bpe.read_bytes(), where=str(bpe), config=config)
    assert (tok.bos_id, tok.eos_id) == (0, 1)
    tok = tokenizer_from_bytes(bpe.read_bytes(), where=str(bpe), config=config,
                               eos_token="<|endoftext|>")
    assert (tok.bos_id, tok.eos_id) == (0, 2)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, r"^--tokenizer t/tokenizer.json has no BOS token: pass --bos-token "),
    ({"bos_token": "<s>"}, r"^--tokenizer t/tokenizer.json has no EOS token: pass --eos-token "),
    ({"bos_token": "<bos>", "eos_token": "</s>"}, r"^--bos-token '<bos>' is not a token of "),
    ({"config": b'{"bos_token": null, "eos_token": "</s>"}'}, "has no BOS token"),
])
def test_hf_without_bos_or_eos_is_a_one_line_refusal(bpe, kwargs, message):
    with pytest.raises(ValueError, match=message) as caught:
        tokenizer_from_bytes(bpe.read_bytes(), where="t/tokenizer.json", **kwargs)
    assert "\n" not in str(caught.value)


def test_hf_garbage_and_misplaced_flags_are_refused():
    with pytest.raises(ValueError, match="x.json is not a Hugging Face tokenizer.json"):
        tokenizer_from_bytes(b'{"not": "a tokenizer"}', where="x.json", bos_token="a",
                             eos_token="b")
    with pytest.raises(ValueError, match="is a SentencePiece model, which has its own BOS"):
        tokenizer_from_bytes((DATA / "tiny.model").read_bytes(), where="tiny.model",
                             bos_token="<s>")
    with pytest.raises(ValueError, match="--tokenizer bytes has BOS 256"):
        tokenizer_from_bytes(None, where="bytes", eos_token="</s>")


def test_hf_config_path_on_any_file_system():
    assert hf_config_path("gs://b/m/tokenizer.json") == "gs://b/m/tokenizer_config.json"
    assert hf_config_path("tokenizer.json") == "tokenizer_config.json"
    assert hf_config_path("m/spm.model") is None


def test_decode_gives_back_the_text():
    assert ByteTokenizer().decode([256, 97, 0xE9, 0x81, 0x93, 257]) == "<bos>a道<eos>"
    model = (DATA / "tiny.model").read_bytes()
    sp = SentencePieceTokenizer(model, where="tiny.model")
    assert sp.decode(sp.encode("The fox saw the grapes.").tolist()) == (
        "<s>The fox saw the grapes.</s>")
    assert sp.info().extra == {"file": "tiny.model", "path": "tiny.model"}


@pytest.mark.slow
def test_the_job_with_a_tokenizer_json_writes_the_library_ids(bpe, corpus, tmp_path):
    from tokenizers import Tokenizer

    from tests.common.jobs import read_rows, run_job

    manifest = run_job(tmp_path / "out", "--input", str(corpus), "--tokenizer", str(bpe),
                       "--window", "1000", "--eos-token", "<|endoftext|>", "--keep-empty")
    ref = Tokenizer.from_file(str(bpe))
    texts = [json.loads(x)["text"] for x in corpus.read_text().splitlines()]
    assert {r["doc_id"]: r["tokens"] for r in read_rows(tmp_path / "out")} == {
        f"c.jsonl:{i + 1}": [0, *ref.encode(t, add_special_tokens=False).ids, 2]
        for i, t in enumerate(texts)}
    info = manifest["tokenizer"]
    assert (info["kind"], info["file"], info["bos_token"], info["eos_token"]) == (
        "huggingface", "tokenizer.json", "<s>", "<|endoftext|>")
    assert info["sha256"] == hashlib.sha256(bpe.read_bytes()).hexdigest()


@pytest.mark.slow
def test_the_job_refuses_a_tokenizer_json_without_eos_in_one_line(capsys, corpus, tmp_path):
    from pipeline.job import main
    from tests.common.jobs import train_bpe

    bare = train_bpe(tmp_path / "bare")  # no tokenizer_config.json beside it
    with pytest.raises(SystemExit) as exit_info:
        main(["--input", str(corpus), "--tokenizer", str(bare), "--bos-token", "<s>",
              "--output", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == (f"error: --tokenizer {bare} has no EOS token: pass --eos-token (e.g. "
                   "--eos-token '<|endoftext|>'; one token may be both), or put a "
                   "tokenizer_config.json naming eos_token beside it\n")
    assert not (tmp_path / "o").exists()


def test_hf_without_the_library_is_a_one_line_refusal(monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers → ImportError
    with pytest.raises(ValueError, match=r"^--tokenizer t.json needs the Hugging Face "
                                         r"tokenizers library: pip install 'token-windows\[hf\]'"):
        tokenizer_from_bytes(b"{}", where="t.json", bos_token="a", eos_token="b")


@pytest.mark.slow
def test_the_engine_changes_neither_the_shards_nor_the_fingerprint(bpe, tmp_path):
    from tests.common.jobs import run_job

    outputs = {}
    for engine in ("tiktoken", "tokenizers", "auto"):
        out = tmp_path / engine
        manifest = run_job(out, "--input", str(SAMPLES / "corpus" / "*.jsonl"), "--id-field",
                           "id", "--tokenizer", str(bpe), "--window", "200",
                           "--tokenizer-engine", engine)
        assert manifest["tokenizer"]["engine"] == ("tokenizers" if engine == "tokenizers"
                                                   else "tiktoken")
        outputs[engine] = (manifest, {p.name: p.read_bytes() for p in out.glob("*.parquet")})
    tiktoken, tokenizers = outputs["tiktoken"], outputs["tokenizers"]
    assert tiktoken[1] == tokenizers[1] == outputs["auto"][1] and len(tiktoken[1]) >= 1
    assert tiktoken[0]["fingerprint"] == tokenizers[0]["fingerprint"]
    strip = lambda m: {**m, "tokenizer": {**m["tokenizer"], "engine": None}}  # noqa: E731
    assert strip(tiktoken[0]) == strip(tokenizers[0])


@pytest.mark.parametrize(("tokenizer", "message"), [
    ("samples/spm.model", "error: --tokenizer-engine tiktoken applies to a Hugging Face "
                          "tokenizer.json; --tokenizer is samples/spm.model, a SentencePiece "
                          "model: drop --tokenizer-engine\n"),
    ("bytes", "error: --tokenizer-engine tiktoken applies to a Hugging Face tokenizer.json; "
              "--tokenizer is bytes: drop --tokenizer-engine\n"),
    ("dropout", "error: --tokenizer-engine tiktoken cannot encode {path}: the model has "
                "dropout 0.5 (random merges), so tiktoken's ids could differ from "
                "tokenizers'; use --tokenizer-engine auto (or tokenizers)\n"),
])
def test_a_pinned_engine_that_cannot_run_is_refused_before_any_work(
        bpe, corpus, tmp_path, capsys, monkeypatch, tokenizer, message):
    from pipeline.job import main

    monkeypatch.chdir(SAMPLES.parent)
    if tokenizer == "dropout":
        spec = json.loads(bpe.read_text())
        spec["model"]["dropout"] = 0.5
        tokenizer = str(tmp_path / "tokenizer.json")
        (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
        message = message.format(path=tokenizer)
    tokens = ["--bos-token", "<s>", "--eos-token", "</s>"] if tokenizer.endswith(".json") else []
    with pytest.raises(SystemExit) as exit_info:
        main(["--input", str(corpus), "--tokenizer", tokenizer, *tokens,
              "--tokenizer-engine", "tiktoken", "--output", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == message
    assert not (tmp_path / "o").exists()
