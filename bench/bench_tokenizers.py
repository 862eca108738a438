"""A byte-level BPE ``tokenizer.json`` job with each engine, against ``tokenizers`` alone.

Corpus: `bench/corpus.py`'s real text (``--mb`` MB: Linux documentation and classical
Chinese, from packages). Tokenizer: a 32 000-token byte-level BPE trained, the GPT-2 recipe
(ByteLevel, ``<|endoftext|>`` as BOS and EOS), on an evenly spread 12 MB sample of the 100 MB
corpus's lines; built once into ``bench/work/``. Nothing is downloaded but the corpus
packages (`bench/corpus.py`).

Each round, alternating: the job (``python -m pipeline``, window 512, stride 256, the
default runner) with ``--tokenizer-engine auto`` (tiktoken, when the file converts) and
with ``--tokenizer-engine tokenizers``; then, in this process, ``tokenizers``' own
``encode_batch_fast`` (its thread pool, every core) and the tiktoken engine alone
(`transforms.tokenize.tokenizers.HFTokenizer`, every core) on the same texts, batches of 4096. Every
row of the two jobs' shards is hashed (doc_id, start, tokens) and the hashes must be equal,
as must the shards' bytes and the fingerprints; the engines alone must give the same ids.
Prints medians and the ratios that matter, each from the same rounds::

    python bench/bench_tokenizers.py                 # 25 MB, 3 rounds
    python bench/bench_tokenizers.py --mb 100 --repeats 2
    python bench/bench_tokenizers.py --mb 100 --repeats 2 --before /tmp/before

``--before DIR`` adds, in the same rounds, the job with tiktoken run from the code in DIR (a
``git archive`` of an earlier commit): "job before auto", whose rows must be the same too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import corpus as bench_corpus  # noqa: E402

from transforms.tokenize.bpe_patterns import LLAMA3_PATTERN  # noqa: E402

VOCAB = 32000
TRAIN_BYTES = 12 << 20
BATCH = 4096
RUNS = ("job auto", "job tokenizers", "tokenizers alone", "tiktoken alone", "job before auto")
# CPU seconds (every thread; the job's whole process) of each run, beside the wall times: on
# a shared machine they say what the work costs whatever the other load took.
CPU: dict[str, list[float]] = {k: [] for k in RUNS}


def build_bpe(corpus: pathlib.Path, *, split: str | None = None) -> pathlib.Path:
    """The 32k byte-level BPE trained on a sample of ``corpus`` (cached): the GPT-2 recipe
    (ByteLevel's own split), or with ``split`` the Llama 3 one (a ``Split`` on that regex,
    Isolated, then ByteLevel without its regex; ``ignore_merges``)."""
    # Llama 3's split keeps the name it had; any other split gets its regex's digest.
    name = "bpe" if split is None else "bpe-split" if split == LLAMA3_PATTERN else (
        "bpe-split-" + hashlib.sha256(split.encode()).hexdigest()[:8])
    path = corpus.parent / f"{name}-{corpus.name}-{VOCAB}" / "tokenizer.json"
    if path.exists():
        return path
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    lines = [x for text in corpus_texts(corpus) for x in text.split("\n") if x.strip()]
    total = sum(len(x.encode()) for x in lines)
    step = max(1, round(total / TRAIN_BYTES))
    if split is None:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    started = time.perf_counter()
    tok.train_from_iterator(lines[::step], trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tok.save(str(tmp))
    tmp.rename(path)
    (path.parent / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}))
    print(f"[bench] trained {path} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return path


def corpus_texts(corpus: pathlib.Path) -> list[str]:
    return [json.loads(line)["text"] for f in sorted(corpus.glob("*.jsonl"))
            for line in f.open(encoding="utf-8")]


def run_job(corpus: pathlib.Path, tokenizer: pathlib.Path, engine: str,
            out: pathlib.Path, code: pathlib.Path = ROOT, name: str = "job") -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "pipeline", "--input", str(corpus / "*.jsonl"), "--id-field",
           "id", "--tokenizer", str(tokenizer), "--window", "512", "--stride", "256",
           "--tokenizer-engine", engine, "--output", str(out), "--overwrite"]
    # Bytecode cached, as Python does by default (bench_job.py says why).
    env = {**os.environ, "PYTHONPATH": str(code)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = _children_cpu()
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=code, env=env, capture_output=True, timeout=7200)
    wall = time.perf_counter() - t0
    CPU[f"{name} {engine}"].append(_children_cpu() - before)
    return wall, json.loads((out / "_manifest.json").read_text())


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def row_hashes(out: pathlib.Path, manifest: dict) -> tuple[str, list[str]]:
    """A SHA-256 over every row (doc_id, start, tokens) in shard order; the shards' SHA-256."""
    import pyarrow.parquet as pq

    h = hashlib.sha256()
    for shard in manifest["shards"]:
        table = pq.read_table(out / shard["file"], columns=["doc_id", "start", "tokens"])
        for doc_id, start, tokens in zip(*(table.column(c).to_pylist() for c in
                                           ("doc_id", "start", "tokens")), strict=True):
            h.update(f"{doc_id}\0{start}\0{','.join(map(str, tokens))}\n".encode())
    return h.hexdigest(), [s["sha256"] for s in manifest["shards"]]


def alone(texts: list[str], tokenizer: pathlib.Path, engine: str) -> tuple[float, str]:
    """Seconds for one library to encode every text, and a hash of the ids."""
    cores = os.cpu_count() or 1
    cpu = time.process_time()
    if engine == "tokenizers":
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tokenizer))
        t0 = time.perf_counter()
        ids = [e.ids for i in range(0, len(texts), BATCH)
               for e in tok.encode_batch_fast(texts[i : i + BATCH], add_special_tokens=False)]
    else:
        from transforms.tokenize.tokenizers import HFTokenizer

        tok = HFTokenizer(tokenizer.read_bytes(), where=str(tokenizer), num_threads=cores,
                          bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                          engine="tiktoken")
        t0 = time.perf_counter()
        ids = [z[1:-1] for i in range(0, len(texts), BATCH)
               for z in tok.encode_batch(texts[i : i + BATCH])]
    seconds = time.perf_counter() - t0
    CPU[f"{engine} alone"].append(time.process_time() - cpu)
    h = hashlib.sha256()
    for x in ids:
        h.update(",".join(map(str, list(x))).encode() + b"\n")
    return seconds, h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=25, help="corpus size in MB. Default: 25.")
    ap.add_argument("--repeats", type=int, default=3, help="rounds. Default: 3.")
    ap.add_argument("--before", type=pathlib.Path, default=None, metavar="DIR",
                    help="also run the job with tiktoken from the code in DIR (an earlier "
                    "commit's tree), in the same rounds")
    args = ap.parse_args()
    before = args.before.resolve() if args.before is not None else None
    corpus = bench_corpus.build_corpus(args.mb)
    bpe = build_bpe(bench_corpus.build_corpus(bench_corpus.MODEL_CORPUS_MB))
    texts = corpus_texts(corpus)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    work = bench_corpus.WORK / "tokenizers"
    runs = [k for k in RUNS if before is not None or k != "job before auto"]
    times: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(args.repeats):
        hashes, fingerprints = {}, {}
        jobs = ["auto", "tokenizers"] + (["before auto"] if before is not None else [])
        for engine in jobs if r % 2 == 0 else jobs[::-1]:
            out = work / f"out-{engine.replace(' ', '-')}"
            if engine == "before auto":
                wall, manifest = run_job(corpus, bpe, "auto", out, before, "job before")
            else:
                wall, manifest = run_job(corpus, bpe, engine, out)
            want = "tokenizers" if engine == "tokenizers" else "tiktoken"
            if manifest["tokenizer"].get("engine") != want:
                raise SystemExit(f"the job with --tokenizer-engine {engine} ran "
                                 f"{manifest['tokenizer'].get('engine')}, not {want}")
            times[f"job {engine}"].append(wall)
            hashes[engine] = row_hashes(out, manifest)
            fingerprints[engine] = manifest["fingerprint"]
        if (len({(rows, tuple(shards)) for rows, shards in hashes.values()}) != 1
                or len(set(fingerprints.values())) != 1):
            raise SystemExit("the engines' jobs differ: rows, shards or fingerprint")
        ids = {}
        for engine in ("tokenizers", "tiktoken") if r % 2 == 0 else ("tiktoken", "tokenizers"):
            seconds, ids[engine] = alone(texts, bpe, engine)
            times[f"{engine} alone"].append(seconds)
        if ids["tokenizers"] != ids["tiktoken"]:
            raise SystemExit("tiktoken's ids differ from tokenizers' alone")
        # Each run's CPU seconds beside its wall: a slow round with no more CPU than the
        # others was the machine, not the run.
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s ({CPU[k][-1]:.1f} CPU s)"
                                             for k, v in times.items())
              + f"; rows identical ({hashes['auto'][0][:12]})", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu = {k: statistics.median(v) for k, v in CPU.items() if v}
    print(f"corpus: {mb:.1f} MB of text, {len(texts)} documents ({corpus.name}); {bpe.parent.name}"
          f"; window 512, stride 256; {os.cpu_count()} cores; medians of {args.repeats} rounds")
    print("| run | wall s | MB/s | CPU s |")
    print("|---|---:|---:|---:|")
    for k, v in med.items():
        print(f"| {k} | {v:.2f} | {mb / v:.2f} | {cpu[k]:.2f} |")
    per_round = [b / a for a, b in zip(times["job auto"], times["tokenizers alone"], strict=True)]
    print(f"tokenizers' encode_batch_fast alone / job with tiktoken: "
          f"{med['tokenizers alone'] / med['job auto']:.2f} (rounds: "
          f"{', '.join(f'{x:.2f}' for x in per_round)})")
    print(f"the same in CPU seconds: {cpu['tokenizers alone'] / cpu['job auto']:.2f}")
    print(f"job tokenizers / job tiktoken: {med['job tokenizers'] / med['job auto']:.2f}; "
          f"tokenizers alone / tiktoken alone: "
          f"{med['tokenizers alone'] / med['tiktoken alone']:.2f}")
    if before is not None:
        per_round = [b / a for a, b in zip(times["job before auto"], times["tokenizers alone"],
                                           strict=True)]
        print(f"the same for the job before: {med['tokenizers alone'] / med['job before auto']:.2f}"
              f" (rounds: {', '.join(f'{x:.2f}' for x in per_round)}); job before / job: "
              f"{med['job before auto'] / med['job auto']:.2f}")
    print("rows, shard bytes and fingerprints identical across engines in every round")


if __name__ == "__main__":
    main()
