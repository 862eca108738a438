"""Exact byte-level BPE engines from PyPI against ``tokenizers``: same files, every document.

The candidates beside our tiktoken engine (`transforms.tokenize.bpe_engine`): ``riptoken`` (a
rewrite of tiktoken; it takes any rank table, so it gets the same table `convert` gives
tiktoken, with the rank → id map, run inside our engine in tiktoken's place: `RiptokenCore`),
``iree-tokenizer`` (reads the ``tokenizer.json`` itself)
and ``bpe-openai`` (GitHub's backtracking ``bpe``: its Python package offers only its bundled
vocabularies, so it has no entry for a file; `bpe_openai_on_cl100k` measures it against
tiktoken on the vocabulary it ships instead). A candidate that is not installed is left out.

Files: `bench_tokenizers.build_bpe`'s 32 000-token byte-level BPEs, trained on the bench
corpus: the GPT-2 recipe (ByteLevel's own split), Llama 3's Split regex and Qwen2's.
Documents (the differential run): the ``--mb`` MB corpus of `bench/corpus.py`, the bundled
samples, the load-time probe and ``--generated`` seeded random texts (Unicode from many
blocks, whitespace runs, digits, contractions, emoji, mixed scripts). Each engine's ids must
equal ``tokenizers``' ``encode(text, add_special_tokens=False)`` on every document (those
run in our engine, also in joined batches, as the job encodes; the count adds both); the
first that differs is printed with the ids around the place.

Speed (the corpus only, ``--repeats`` rounds, engines alternating): CPU seconds on one
thread, and wall seconds with ``--threads`` threads (contiguous slices of the documents, a
ThreadPoolExecutor, as the job's tokenizer does; ``tokenizers`` with its own
``encode_batch_fast`` pool); and the GIL share (`gil_share`: about 1 when the engine
releases the GIL while it encodes, about 0.01 when it holds it)::

    python bench/bench_bpe_engines.py --mb 20 --speed-mb 4 --repeats 3
    python bench/bench_bpe_engines.py --hypothesis 2000   # the tests' generator, instead

The machine's load changes wall times; the ratios are from the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_tokenizers  # noqa: E402
import corpus as bench_corpus  # noqa: E402

from transforms.tokenize.bpe_engine import (  # noqa: E402
    _SEP,
    PROBE,
    TiktokenEngine,
    convert,
    merged_alone,
)
from transforms.tokenize.bpe_patterns import LLAMA3_PATTERN, QWEN2_PATTERN, fast_form  # noqa: E402
from transforms.tokenize.tokenizers import HFTokenizer  # noqa: E402

Encoder = Callable[[str], np.ndarray]
# An engine's first error (an exception where ids were due), by engine.
ERRORS: dict[str, str] = {}
SPLITS = {"gpt2": None, "llama3": LLAMA3_PATTERN, "qwen2": QWEN2_PATTERN}
PIECES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u3000", "\u00a0", "\u2028",
          "'s", "'S", "'ll", "'LL", "'ve", "'re", "'d", "'m", "'t", "n't", "'", "0", "7", "42",
          "123", "1234", "98765", "٣", "१२", "the", " the", "The", "cat", "Mr.", "it's", "I'M",
          "道", "可道", "非常道。", "，", "こんにちは", "안녕", "Привет", "שלום", "مرحبا", "नमस्ते",
          "😀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "e\u0301", "ﬁ", "Å", "Ａ", "!", "?!", "...", "—", "“",
          "#", "$", "_", "\\", "\x00", "\ufeff", "<|endoftext|>", "<|endof"]
# Code point blocks the random characters come from (no surrogates: text is valid UTF-8).
BLOCKS = [(0x20, 0x7F), (0xA0, 0x250), (0x370, 0x530), (0x590, 0x700), (0x900, 0x980),
          (0xE00, 0xE80), (0x3000, 0x3100), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
          (0x1F300, 0x1FAFF), (0x0, 0x20), (0xE000, 0xE100), (0x10000, 0x10100)]


def generated(n: int, seed: int = 0) -> list[str]:
    """``n`` seeded random texts: pieces, random characters and long runs, mixed."""
    rng = random.Random(seed)

    def char() -> str:
        lo, hi = rng.choice(BLOCKS)
        return chr(rng.randrange(lo, hi))

    out = []
    for _ in range(n):
        kind = rng.randrange(4)
        if kind == 0:
            out.append("".join(rng.choice(PIECES) for _ in range(rng.randrange(40))))
        elif kind == 1:
            out.append("".join(char() for _ in range(rng.randrange(80))))
        elif kind == 2:
            out.append("".join(rng.choice(PIECES) if rng.random() < 0.5 else char()
                               for _ in range(rng.randrange(60))))
        else:
            out.append(rng.choice(" \n\ta道") * rng.randrange(400) + rng.choice(PIECES))
    return out


def samples() -> list[str]:
    return [json.loads(line)["text"] for f in sorted((ROOT / "samples" / "corpus").glob("*.jsonl"))
            for line in f.read_text(encoding="utf-8").splitlines()]


def engines(path: pathlib.Path) -> tuple[dict[str, Encoder], dict[str, TiktokenEngine]]:
    """Each installed engine's encoder (text → ids) of the file at ``path``; and those that
    run in our engine, which the job calls with a batch (joined by the separator)."""
    from tokenizers import Tokenizer

    batches: dict[str, TiktokenEngine] = {}
    data = path.read_bytes()
    ref = Tokenizer.from_str(data.decode())
    out: dict[str, Encoder] = {
        "tokenizers": lambda t: np.asarray(ref.encode(t, add_special_tokens=False).ids, np.int64)}
    ours = HFTokenizer(data, where=str(path), bos_token="<|endoftext|>",
                       eos_token="<|endoftext|>", engine="tiktoken")
    out["tiktoken (ours)"] = ours._fast.encode_array
    batches["tiktoken (ours)"] = ours._fast
    spec = json.loads(data)
    tables = convert(spec, lambda strings: merged_alone(ref, spec, strings))
    assert not isinstance(tables, str), tables
    try:
        import riptoken
    except ImportError:
        print("[bench] riptoken is not installed: left out", file=sys.stderr)
    else:
        for name, pattern in (("riptoken", fast_form(tables.pattern)),
                              ("riptoken, file's regex", tables.pattern)):
            core = RiptokenCore(riptoken.CoreBPE(
                tables.ranks, {_SEP: len(tables.rank_bytes)}, pattern))
            engine = TiktokenEngine(tables, normalize=None, core=core, fallback=lambda t: (
                ref.encode(t, add_special_tokens=False).ids))
            out[name], batches[name] = engine.encode_array, engine
    try:
        from iree.tokenizer import Tokenizer as IreeTokenizer
    except ImportError:
        print("[bench] iree-tokenizer is not installed: left out", file=sys.stderr)
    else:
        iree = IreeTokenizer.from_buffer(data)

        def iree_encode(text: str) -> np.ndarray:
            try:
                return iree.encode_to_array(text, add_special_tokens=False)
            except RuntimeError as e:  # counted as a difference, and shown
                ERRORS.setdefault("iree-tokenizer", f"{text[:40]!r}…: {e}")
                return np.array([-1])

        out["iree-tokenizer"] = iree_encode
    return out, batches


def in_batches(engine: TiktokenEngine, docs: list[str]) -> list[np.ndarray]:
    """The job's way: batches of `bench_tokenizers.BATCH` documents, each joined."""
    return [z for i in range(0, len(docs), bench_tokenizers.BATCH)
            for z in engine.encode_batch(docs[i : i + bench_tokenizers.BATCH], bos=0, eos=0)]


class RiptokenCore:
    """riptoken's ``CoreBPE`` as `transforms.tokenize.bpe_engine.TiktokenEngine` calls a core, so
    that it gets everything around tiktoken (added tokens split out, ranks → ids, the
    coverage check, batches joined by the separator): riptoken returns a list, which becomes
    the buffer tiktoken would have returned."""

    def __init__(self, core: object) -> None:
        self._core = core

    def encode_to_tiktoken_buffer(self, text: str, allowed: frozenset[str]) -> bytes:
        return np.asarray(self._core.encode(text, set(allowed)), np.uint32).tobytes()


def first_difference(docs: list[str], want: list[list[int]], encode: Encoder) -> tuple[int, str]:
    """How many documents differ, and where the first one does."""
    count, first = 0, ""
    for i, (text, w) in enumerate(zip(docs, want, strict=True)):
        got = encode(text).tolist()
        if got == w:
            continue
        count += 1
        if not first:
            at = next((k for k, (a, b) in enumerate(zip(got, w, strict=False)) if a != b),
                      min(len(got), len(w)))
            first = (f"document {i} ({len(text)} characters, {text[:30]!r}…): {len(got)} ids "
                     f"against {len(w)}, first difference at id {at}: {got[at:at + 3]} against "
                     f"{w[at:at + 3]}")
    return count, first


def gil_share(encode: Encoder, text: str) -> float:
    """How much the calling thread runs while another encodes ``text`` again and again for
    about half a second: a counter's rate there over its rate with the other thread asleep
    (about 1: the encoder releases the GIL; about 0.01: it holds it, as Python code does).
    One short call could end before the counter starts, hence the repeats."""
    def rate(work: Callable[[], object]) -> float:
        done, count = threading.Event(), 0
        thread = threading.Thread(target=lambda: (work(), done.set()))
        start = time.perf_counter()
        thread.start()
        while not done.is_set():
            count += 1
        thread.join()
        return count / (time.perf_counter() - start)

    seconds = time.perf_counter()
    encode(text)
    times = max(1, round(0.5 / (time.perf_counter() - seconds)))
    return rate(lambda: [encode(text) for _ in range(times)]) / rate(lambda: time.sleep(0.5))


def threaded(many: Callable[[list[str]], object], docs: list[str], threads: int,
             pool: ThreadPoolExecutor) -> None:
    """``many`` of ``threads`` contiguous slices of ``docs`` at once (as the job does)."""
    ends = np.cumsum([len(t) for t in docs])
    cuts = [0, *np.searchsorted(ends, ends[-1] / threads * np.arange(1, threads)).tolist(),
            len(docs)]
    list(pool.map(lambda lo, hi: many(docs[lo:hi]), cuts, cuts[1:]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=20, help="corpus MB of the differential run. "
                    "Default: 20.")
    ap.add_argument("--speed-mb", type=float, default=4, help="the first MB of it timed. "
                    "Default: 4.")
    ap.add_argument("--generated", type=int, default=20000, help="random texts. Default: 20000.")
    ap.add_argument("--repeats", type=int, default=3, help="speed rounds. Default: 3.")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="threads of the threaded runs. Default: the cores.")
    ap.add_argument("--hypothesis", type=int, default=0, metavar="N",
                    help="instead, N texts of the tests' generator per layout (`hypothesis_run`)")
    args = ap.parse_args()
    if args.hypothesis:
        hypothesis_run(args.hypothesis)
        return
    from tokenizers import Tokenizer

    corpus = bench_corpus.build_corpus(args.mb)
    texts = bench_tokenizers.corpus_texts(corpus)
    docs = texts + samples() + [PROBE, *PROBE.splitlines(keepends=True)] + generated(
        args.generated)
    timed, size = [], 0
    for t in texts:
        if size >= args.speed_mb * 1e6:
            break
        timed.append(t)
        size += len(t.encode())
    print(f"differential run: {len(docs)} documents ({len(texts)} of {corpus.name}, the samples, "
          f"the probe, {args.generated} generated); speed: {size / 1e6:.1f} MB, "
          f"{args.repeats} rounds, {args.threads} threads, {os.cpu_count()} cores (shared)")
    print("| file | engine | documents differing | CPU s, 1 thread | × tokenizers | "
          "× tiktoken (ours) | wall s, threads | × encode_batch_fast | GIL share |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    model = bench_corpus.build_corpus(bench_corpus.MODEL_CORPUS_MB)
    firsts = []
    for name, split in SPLITS.items():
        path = bench_tokenizers.build_bpe(model, split=split)
        encoders, batches = engines(path)
        want = [encoders["tokenizers"](t).tolist() for t in docs]
        ref = Tokenizer.from_file(str(path))
        runs: dict[str, Callable[[], object]] = {}
        pool = ThreadPoolExecutor(args.threads)
        for engine, encode in encoders.items():
            many = (lambda d, e=encode: [e(t) for t in d]) if engine not in batches else (
                lambda d, b=batches[engine]: in_batches(b, d))
            runs[f"{engine} 1"] = lambda m=many: m(timed)
            runs[f"{engine} n"] = (lambda m=many, p=pool: threaded(m, timed, args.threads, p))
        runs["tokenizers n"] = lambda r=ref: r.encode_batch_fast(timed, add_special_tokens=False)
        cpu: dict[str, list[float]] = {k: [] for k in runs}
        wall: dict[str, list[float]] = {k: [] for k in runs}
        for r in range(args.repeats):
            for key in list(runs) if r % 2 == 0 else list(runs)[::-1]:
                c, w = time.process_time(), time.perf_counter()
                runs[key]()
                cpu[key].append(time.process_time() - c)
                wall[key].append(time.perf_counter() - w)
        pool.shutdown()
        base = statistics.median(cpu["tokenizers 1"])
        ours = statistics.median(cpu["tiktoken (ours) 1"])
        fast = statistics.median(wall["tokenizers n"])
        long_text = " ".join(timed)[:2_000_000]
        for engine, encode in encoders.items():
            count, first = (0, "") if engine == "tokenizers" else first_difference(
                docs, want, encode)
            if first:
                firsts.append(f"{name}, {engine}: {first}")
            if engine in batches:  # and as the job encodes: joined batches
                joined = in_batches(batches[engine], docs)
                count += sum(z[1:-1].tolist() != w for z, w in zip(joined, want, strict=True))
            one, spread = statistics.median(cpu[f"{engine} 1"]), statistics.median(
                wall[f"{engine} n"])
            gil = gil_share(encode, long_text)
            print(f"| {name} | {engine} | {count} | {one:.2f} | {base / one:.2f} | "
                  f"{ours / one:.2f} | {spread:.2f} | {fast / spread:.2f} | {gil:.2f} |")
        print(f"| {name} | tokenizers encode_batch_fast | | | | | {fast:.2f} | 1.00 | |")
    for line in firsts:
        print(line)
    for engine, error in ERRORS.items():
        print(f"{engine}'s first error: {error}")
    bpe_openai_on_cl100k(timed, args.repeats)


def hypothesis_run(n: int) -> None:
    """riptoken (in our engine, alone and in a batch) and iree-tokenizer against
    ``tokenizers`` on ``n`` texts per layout of the tests' hypothesis generator
    (``TEXT`` of tests/common/bpe.py), with the GPT-2, Llama 3 and Qwen2
    files the tests train on the samples: how many differ, or raise, and the first of each."""
    for layout in ("gpt2", "llama3", "qwen2"):
        counts, first = _hypothesis_layout(layout, n)
        print(f"{layout}: {n} texts; differing: {counts}")
        for key, where in first.items():
            print(f"  {key} first: {where}")


def _hypothesis_layout(layout: str, n: int) -> tuple[dict[str, int], dict[str, str]]:
    import riptoken
    from hypothesis import HealthCheck, given, settings
    from iree.tokenizer import Tokenizer as IreeTokenizer
    from tokenizers import Tokenizer

    from tests.common.bpe import TEXT, convert_judged, train

    text = train(layout)
    ref, tables, iree = Tokenizer.from_str(text), convert_judged(text), IreeTokenizer.from_str(text)

    def body(t: str) -> list[int]:
        return ref.encode(t, add_special_tokens=False).ids

    engine = TiktokenEngine(tables, normalize=None, fallback=body, core=RiptokenCore(
        riptoken.CoreBPE(tables.ranks, {_SEP: len(tables.rank_bytes)}, fast_form(tables.pattern))))
    counts = dict.fromkeys(("riptoken", "riptoken batch", "iree-tokenizer", "iree raised"), 0)
    first: dict[str, str] = {}

    def note(key: str, t: str, got: list[int], want: list[int]) -> None:
        counts[key] += 1
        at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                  min(len(got), len(want)))
        first.setdefault(key, f"{t[:50]!r} ({len(t)} characters): {len(got)} ids against "
                              f"{len(want)}, at {at}: {got[at:at + 3]} against {want[at:at + 3]}")

    @settings(max_examples=n, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(t=TEXT)
    def run(t: str) -> None:
        want = body(t)
        if (got := engine.encode(t)) != want:
            note("riptoken", t, got, want)
        if (got := engine.encode_batch(["x", t, "y"], bos=-1, eos=-2)[1][1:-1].tolist()) != want:
            note("riptoken batch", t, got, want)
        try:
            got = iree.encode(t)
        except RuntimeError as e:
            counts["iree raised"] += 1
            first.setdefault("iree raised", f"{t!r}: {str(e)[:120]}")
            return
        if got != want:
            note("iree-tokenizer", t, got, want)

    run()
    return counts, first


def bpe_openai_on_cl100k(timed: list[str], repeats: int) -> None:
    """bpe-openai against tiktoken and riptoken on cl100k_base, the vocabulary it ships (with
    its pattern): ids and one-thread CPU seconds. tiktoken gets the same rank file."""
    try:
        import bpe_openai
        from bpe_openai import registry
    except ImportError:
        print("bpe-openai is not installed: left out")
        return
    import riptoken
    import tiktoken

    spec = registry.cl100k_base()
    tk = tiktoken.Encoding("cl100k", pat_str=spec["pat_str"],
                           mergeable_ranks=spec["mergeable_ranks"], special_tokens={})
    backend = bpe_openai.get_encoding("cl100k_base")._backend  # its Rust encoder, no checks
    rip = riptoken.CoreBPE(spec["mergeable_ranks"], {}, spec["pat_str"])
    encoders: dict[str, Encoder] = {
        "tiktoken": lambda t: np.frombuffer(tk._core_bpe.encode_to_tiktoken_buffer(
            t, frozenset()), np.uint32),
        "bpe-openai": lambda t: np.asarray(backend.encode(t), np.int64),
        "riptoken": lambda t: np.asarray(rip.encode_ordinary(t), np.int64)}
    want = [encoders["tiktoken"](t).tolist() for t in timed]
    cpu: dict[str, list[float]] = {k: [] for k in encoders}
    for r in range(repeats):
        for key in list(encoders) if r % 2 == 0 else list(encoders)[::-1]:
            c = time.process_time()
            [encoders[key](t) for t in timed]
            cpu[key].append(time.process_time() - c)
    base = statistics.median(cpu["tiktoken"])
    for key, encode in encoders.items():
        count, _ = first_difference(timed, want, encode)
        gil = gil_share(encode, " ".join(timed)[:500_000])
        print(f"cl100k_base, {key}: {count} documents differ from tiktoken; "
              f"{statistics.median(cpu[key]):.2f} CPU s, × tiktoken "
              f"{base / statistics.median(cpu[key]):.2f}; the calling thread's share while "
              f"it encodes: {gil:.2f}")


if __name__ == "__main__":
    main()
