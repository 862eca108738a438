"""The job's throughput with a Hugging Face tokenizer.json next to SentencePiece, same corpus.

Builds (once, in ``bench/work/tokenizers/``) a corpus of the bundled samples repeated to
``--mb`` MB (ids suffixed, so every document is distinct) and a byte-level BPE
``tokenizer.json`` trained on the samples with the same vocabulary size as
``samples/spm.model`` (8000), the GPT-2 recipe with ``<|endoftext|>`` as BOS and EOS. Then,
alternating, ``--repeats`` rounds of ``python -m pipeline`` with each tokenizer (window 512,
stride 256, the default runner) and, for reference, each library alone on the same texts
(SentencePiece ``encode(batch, num_threads=cores)``; tokenizers ``encode_batch_fast``, which
uses every core). Prints medians: wall s, M corpus tokens/s (Σ M, so the two tokenizers'
different token counts do not flatter either), MB/s of input.

    python bench/bench_tokenizers.py                 # 25 MB, 3 rounds
    python bench/bench_tokenizers.py --mb 50 --repeats 5 --python bench/work/venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / "work" / "tokenizers"
SPM = ROOT / "samples" / "spm.model"


def build_corpus(mb: int) -> pathlib.Path:
    path = WORK / f"corpus-{mb}mb.jsonl"
    if path.exists():
        return path
    records = [json.loads(line) for f in sorted((ROOT / "samples" / "corpus").glob("*.jsonl"))
               for line in f.read_text(encoding="utf-8").splitlines()]
    WORK.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    size, copy = 0, 0
    with tmp.open("w", encoding="utf-8") as f:
        while size < mb * 1_000_000:
            for r in records:
                line = json.dumps({"id": f"{r['id']}~{copy}", "text": r["text"]},
                                  ensure_ascii=False) + "\n"
                size += len(line.encode())
                f.write(line)
            copy += 1
    tmp.rename(path)
    return path


def build_bpe(vocab_size: int) -> pathlib.Path:
    path = WORK / f"bpe-{vocab_size}" / "tokenizer.json"
    if path.exists():
        return path
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = [json.loads(line)["text"] for f in sorted((ROOT / "samples" / "corpus").glob("*.jsonl"))
             for line in f.read_text(encoding="utf-8").splitlines()]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    (path.parent / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}))
    return path


def run_job(python: str, corpus: pathlib.Path, tokenizer: pathlib.Path,
            out: pathlib.Path) -> tuple[float, dict]:
    cmd = [python, "-m", "pipeline", "--input", str(corpus), "--id-field", "id",
           "--tokenizer", str(tokenizer), "--window", "512", "--stride", "256",
           "--output", str(out), "--overwrite"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, env=env, capture_output=True, timeout=3600)
    wall = time.perf_counter() - t0
    return wall, json.loads((out / "_manifest.json").read_text())


def library_alone(corpus: pathlib.Path, tokenizer: pathlib.Path) -> tuple[float, int]:
    texts = [json.loads(line)["text"] for line in corpus.open(encoding="utf-8")]
    cores = os.cpu_count() or 1
    t0 = time.perf_counter()
    if tokenizer.suffix == ".json":
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tokenizer))
        tokens = 0
        for i in range(0, len(texts), 4096):
            tokens += sum(len(e.ids) + 2 for e in tok.encode_batch_fast(
                texts[i : i + 4096], add_special_tokens=False))
    else:
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
        tokens = 0
        for i in range(0, len(texts), 4096):
            tokens += sum(len(z) for z in sp.encode(texts[i : i + 4096], add_bos=True,
                                                      add_eos=True, num_threads=cores))
    return time.perf_counter() - t0, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=25, help="corpus size in MB. Default: 25.")
    ap.add_argument("--repeats", type=int, default=3, help="rounds. Default: 3.")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter that runs the job (e.g. a lean venv's).")
    args = ap.parse_args()
    corpus = build_corpus(args.mb)
    bpe = build_bpe(8000)
    mb = corpus.stat().st_size / 1e6
    kinds = {"sentencepiece": SPM, "huggingface": bpe}
    job: dict[str, list[float]] = {k: [] for k in kinds}
    alone: dict[str, list[float]] = {k: [] for k in kinds}
    tokens: dict[str, int] = {}
    for r in range(args.repeats):
        for kind, path in kinds.items():
            wall, manifest = run_job(args.python, corpus, path, WORK / f"out-{kind}")
            c = manifest["counts"]
            tokens[kind] = c["pairs"] + c["documents"]
            job[kind].append(wall)
            seconds, n = library_alone(corpus, path)
            assert n == tokens[kind], (kind, n, tokens[kind])
            alone[kind].append(seconds)
            print(f"round {r + 1}: {kind:<13} job {wall:6.2f} s, library alone {seconds:6.2f} s",
                  file=sys.stderr)
    print(f"corpus: {mb:.1f} MB, {corpus.name}; window 512, stride 256; {os.cpu_count()} cores; "
          f"medians of {args.repeats}")
    print("| tokenizer | tokens | job wall s | job M tokens/s | job MB/s | library alone "
          "M tokens/s |")
    print("|---|---:|---:|---:|---:|---:|")
    rates = {}
    for kind in kinds:
        w, a = statistics.median(job[kind]), statistics.median(alone[kind])
        rates[kind] = tokens[kind] / w
        print(f"| {kind} | {tokens[kind] / 1e6:.1f} M | {w:.2f} | {tokens[kind] / w / 1e6:.2f} | "
              f"{mb / w:.1f} | {tokens[kind] / a / 1e6:.2f} |")
    print(f"huggingface / sentencepiece, job tokens/s: "
          f"{rates['huggingface'] / rates['sentencepiece']:.2f}")


if __name__ == "__main__":
    main()
