"""The tiktoken engine with a ``Split`` pattern as the file gives it, against faster forms.

Tokenizer: a 32 000-token byte-level BPE trained the Llama 3 way (a ``Split`` on the Llama 3
regex, Isolated, then ByteLevel without its regex; ``ignore_merges``) on an evenly spread
12 MB sample of the 100 MB corpus's lines (`bench/corpus.py`); built once into
``bench/work/``. Texts: every k-th document of that corpus, about ``--mb`` MB.

Each round, in a rotating order, the engine's batch path
(`transforms.tokenize.tokenizers.HFTokenizer` ``encode_batch`` on ``--threads`` threads, batches of
4096, as the job calls it) encodes every text once with each pattern: tiktoken's encoder is rebuilt
with that pattern and the same ranks, nothing else changes. Every pattern's ids must hash the same
in every round. Prints each round's wall and CPU seconds and the medians' ratios against the file's
own pattern::

    python bench/bench_patterns.py                    # Llama 3's pattern, 25 MB, 5 rounds
    python bench/bench_patterns.py --family qwen2     # Qwen2's (the same vocabulary)
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import corpus as bench_corpus  # noqa: E402
from bench_tokenizers import BATCH, build_bpe, corpus_texts  # noqa: E402

from transforms.tokenize.bpe_patterns import LLAMA3_PATTERN, QWEN2_PATTERN, fast_form  # noqa: E402

# The forms tried: the branches without look-ahead grouped (one regex-crate search), the last
# `\s+` as `\s`, and both.
FORMS = {
    "grouped, \\s": lambda p: "(?:" + p.replace(r"|\s+(?!\S)|\s+", r")|\s+(?!\S)|\s"),
    "grouped": lambda p: "(?:" + p.replace(r"|\s+(?!\S)|\s+", r")|\s+(?!\S)|\s+"),
    "\\s": lambda p: p.replace(r"|\s+(?!\S)|\s+", r"|\s+(?!\S)|\s"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=25, help="text size in MB. Default: 25.")
    ap.add_argument("--repeats", type=int, default=5, help="rounds. Default: 5.")
    ap.add_argument("--threads", type=int, default=2, help="encoding threads. Default: 2.")
    ap.add_argument("--family", choices=("llama3", "qwen2"), default="llama3",
                    help="whose Split pattern to run. Default: llama3.")
    args = ap.parse_args()
    import tiktoken

    from transforms.tokenize import bpe_engine
    from transforms.tokenize.tokenizers import HFTokenizer

    corpus = bench_corpus.build_corpus(bench_corpus.MODEL_CORPUS_MB)
    path = build_bpe(corpus, split=LLAMA3_PATTERN)
    every = corpus_texts(corpus)
    total = sum(len(t.encode()) for t in every)
    texts = every[:: max(1, round(total / (args.mb * 1e6)))]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    original = LLAMA3_PATTERN if args.family == "llama3" else QWEN2_PATTERN
    patterns = {"file's": original, **{k: f(original) for k, f in FORMS.items()}}
    if fast_form(original) not in patterns.values():
        patterns["the engine's"] = fast_form(original)
    tok = HFTokenizer(path.read_bytes(), where=str(path), num_threads=args.threads,
                      bos_token="<|endoftext|>", eos_token="<|endoftext|>", engine="tiktoken")
    engine = tok._fast
    # The tables the engine was made from (`transforms.tokenize.bpe_engine._core` keeps them).
    tables = next(t for t, c in bpe_engine._CORES.values() if c is engine._core)
    special = {bpe_engine._SEP: engine._sep}
    cores = {k: tiktoken.Encoding(f"bench-{i}", pat_str=p, mergeable_ranks=tables.ranks,
                                  special_tokens=special)._core_bpe
             for i, (k, p) in enumerate(patterns.items())}
    wall: dict[str, list[float]] = {k: [] for k in patterns}
    cpu: dict[str, list[float]] = {k: [] for k in patterns}
    names = list(patterns)
    for r in range(args.repeats):
        hashes = {}
        for name in names[r % len(names):] + names[: r % len(names)]:
            engine._core = cores[name]
            c0, t0 = time.process_time(), time.perf_counter()
            ids = [z for i in range(0, len(texts), BATCH)
                   for z in tok.encode_batch(texts[i : i + BATCH])]
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            h = hashlib.sha256()
            for z in ids:
                h.update(z.tobytes())
            hashes[name] = h.hexdigest()
        if len(set(hashes.values())) != 1:
            raise SystemExit(f"round {r + 1}: the patterns' ids differ: {hashes}")
        print(f"round {r + 1}: " + ", ".join(
            f"{k} {wall[k][-1]:.2f} s ({cpu[k][-1]:.1f} CPU s)" for k in names)
            + f"; ids identical ({hashes[names[0]][:12]})", file=sys.stderr)
    print(f"{args.family} Split pattern; {mb:.1f} MB of text, {len(texts)} documents "
          f"({corpus.name}); {path.parent.name}; {args.threads} threads; medians of "
          f"{args.repeats} rounds, alternating")
    print("| pattern | wall s | MB/s | CPU s | file's / this (wall; rounds) |")
    print("|---|---:|---:|---:|---|")
    base = statistics.median(wall["file's"])
    for k in names:
        w = statistics.median(wall[k])
        rounds = ", ".join(f"{a / b:.2f}" for a, b in zip(wall["file's"], wall[k], strict=True))
        used = " (the engine's)" if patterns[k] == fast_form(original) != original else ""
        print(f"| {k}{used} `{patterns[k]}` | {w:.2f} | {mb / w:.2f} | "
              f"{statistics.median(cpu[k]):.2f} | {base / w:.2f} ({rounds}) |")


if __name__ == "__main__":
    main()
