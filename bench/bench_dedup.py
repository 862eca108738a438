"""What near-duplicate detection costs, and how it agrees with datatrove's MinHash.

``--core`` (the pure functions of ``transforms/dedup/duplicates.py``, one process, one core): on the
same texts, in alternating rounds (rotating which goes first), the median CPU time of

* ``ours``: `transforms.dedup.duplicates.signatures` in batches of about `BATCH_BYTES` of text, then
the
  14 band keys of each document (everything the job needs per document);
* ``ours-sig``: the signatures alone;
* ``datatrove``: datatrove's ``MinhashDedupSignature.get_shingles`` + ``get_signature`` per
  document (its stage 1 without the file writes), with the same parameters: word 5-grams,
  14 buckets × 8 hashes, 64-bit; its English word tokenizer (spaCy's) on every text, and
  its hash function as named (``xxhash``, datatrove's default, or ``sha1``).

and prints MB of UTF-8 text per CPU-second (one core) and the ratio to datatrove. CPU time,
not wall time: the machine may be shared, and both sides are single-threaded.

Agreement: `AGREE_DOCS` documents of the corpus, each with a planted near copy (3 words in
100 changed, a header and a footer added) and a far variant (half the words changed); the
candidate pairs (sharing a band) of each method, compared. Both should find every near copy
and no far variant; pairs between different corpus documents are reported as they come.

    python bench/bench_dedup.py --core                           # samples/corpus (2 MB)
    python bench/bench_dedup.py --core --corpus bench/work/corpus-v1-pkg-20mb --mb 20

``--job``: the whole job (``python -m pipeline``) with ``--dedup near`` against the same job
without it, on every ``*.jsonl`` of ``--corpus``, alternating which goes first: median wall
and CPU time and peak RSS of each, and the ratios (goal: wall ≤ 1.3×).

    python bench/bench_dedup.py --job --corpus bench/work/corpus-v1-pkg-20mb --rounds 2

``--pass``: the dedup pass's own work alone, as the job's KeyChunks step does it (read every
chunk, exact keys, signatures on ``--threads`` hashing threads, band keys; no Beam, no
encoding), with the C kernel (`transforms.dedup.kernel`, what the job uses where it is
built) and with the NumPy code (where it is not), alternating, once per round in a fresh
process (its first batches pay what the job's do): median wall and CPU seconds, MB of
JSONL per CPU-second and the ratios, ``--mode near`` or ``exact``.

    python bench/bench_dedup.py --pass --corpus bench/work/corpus-v1-pkg-20mb --rounds 4

``--split``: the same work on one thread, part by part (reading and parsing, exact keys,
the near form, word boundaries and hashes, n-gram hashes, the MinHash products, band
keys), each timed alone over the job's batches, and the C kernel's two calls: where the
pass's CPU goes.

    python bench/bench_dedup.py --split --corpus bench/work/corpus-v1-pkg-100mb --rounds 3

``--job --datatrove``: the job's removed set (``--dedup near``) against datatrove's MinHash
pipeline (its four stages on the local executor, 2 tasks, the same parameters) on ``--mb`` MB
of ``--corpus`` with a planted near copy of every 20th document: both removed sets, their
intersection, and each side's CPU time.

    python bench/bench_dedup.py --job --datatrove --corpus bench/work/corpus-v1-pkg-20mb --mb 5

Needs ``pip install datatrove spacy`` (datatrove's English tokenizer is spaCy's).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from transforms.dedup.duplicates import DedupSpec, band_keys, signatures  # noqa: E402

SPEC = DedupSpec(mode="near", ngram=5, bands=14, rows=8)
BATCH_BYTES = 1 << 20
BATCH_DOCS = 512  # the job's batches (transforms.dedup.removal.chunk_keys)
AGREE_DOCS = 300


def load_texts(corpus: Path, mb: float) -> list[str]:
    """The texts of ``corpus``'s ``*.jsonl`` files (sorted), up to ``mb`` MB of UTF-8."""
    texts: list[str] = []
    size = 0
    for path in sorted(corpus.glob("*.jsonl")):
        with path.open(encoding="utf-8") as f:
            for line in f:
                text = json.loads(line)["text"]
                texts.append(text)
                size += len(text.encode("utf-8"))
                if size >= mb * 1e6:
                    return texts
    return texts


def _batches(texts: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    size = 0
    for text in texts:
        if size >= BATCH_BYTES:
            out.append([])
            size = 0
        out[-1].append(text)
        size += len(text)
    return out


def ours(texts: list[str], *, keys: bool) -> list[set[bytes]]:
    """Our signatures (and band keys) of ``texts``, batched as the job would."""
    found: list[set[bytes]] = []
    for batch in _batches(texts):
        sigs = signatures(batch, SPEC)
        if keys:
            found.extend(set(band_keys(sig, SPEC)) for sig in sigs)
    return found


def datatrove_step(hash_fc: str) -> Any:
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
    from datatrove.utils.hashing import HashConfig

    config = MinhashConfig(
        n_grams=5,
        num_buckets=14,
        hashes_per_bucket=8,
        hash_config=HashConfig(precision=64, hash_fc="sha1" if hash_fc == "sha1" else "xxhash"),
    )
    step = MinhashDedupSignature(output_folder="/tmp/bench-dedup-unused", config=config)
    if hash_fc == "xxhash":
        import xxhash

        # datatrove 0.10 passes str to xxhash, which xxhash 4 refuses: encode it first.
        step._hash_func = lambda s: xxhash.xxh64_intdigest(s.encode("utf-8"))
    return step


def datatrove(step: Any, texts: list[str], *, keys: bool) -> list[set[bytes]]:
    """datatrove's signatures of ``texts`` (and each band made a key, for the agreement)."""
    found: list[set[bytes]] = []
    for text in texts:
        shingles = step.get_shingles(text)
        if shingles.size == 0:
            found.append(set())
            continue
        sig = step.get_signature(shingles)
        if keys:
            found.append({repr((i, tuple(b))).encode() for i, b in enumerate(sig)})
    return found


def _cpu(fn: Callable[[], object]) -> float:
    started = time.process_time()
    fn()
    return time.process_time() - started


def run_core(texts: list[str], rounds: int, hash_fcs: list[str]) -> dict[str, float]:
    size = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    steps = {f"datatrove-{h}": datatrove_step(h) for h in hash_fcs}
    runs: dict[str, Callable[[], object]] = {
        "ours": lambda: ours(texts, keys=True),
        "ours-sig": lambda: ours(texts, keys=False),
    }
    for name, step in steps.items():
        runs[name] = lambda step=step: datatrove(step, texts, keys=False)
    ours(texts[:50], keys=True)  # the word-class table, built once per process
    seconds: dict[str, list[float]] = {n: [] for n in runs}
    names = list(runs)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            seconds[name].append(_cpu(runs[name]))
    print(f"{len(texts)} documents, {size:.2f} MB of UTF-8 text, {rounds} rounds (median CPU s)")
    rates = {}
    for name in names:
        med = statistics.median(seconds[name])
        rates[name] = size / med
        print(f"  {name:18s} {med:8.3f} s  {size / med:8.2f} MB/s per core")
    for name in names:
        if name.startswith("datatrove"):
            print(f"  ours / {name}: {rates['ours'] / rates[name]:.1f}×, signatures alone "
                  f"{rates['ours-sig'] / rates[name]:.1f}× the throughput per core")
    return rates


def _alter(words: list[str], share: float, rnd: random.Random) -> list[str]:
    out = list(words)
    for p in rnd.sample(range(len(out)), max(1, int(len(out) * share))):
        out[p] = f"w{rnd.randrange(10**6)}"
    return out


def _pairs(keysets: list[set[bytes]]) -> set[tuple[int, int]]:
    buckets: dict[bytes, list[int]] = {}
    for i, keys in enumerate(keysets):
        for key in keys:
            buckets.setdefault(key, []).append(i)
    return {p for docs in buckets.values() for p in itertools.combinations(sorted(docs), 2)}


def run_agreement(texts: list[str], hash_fc: str) -> None:
    rnd = random.Random(41)
    base = [t for t in texts if len(t.split()) >= 100][:AGREE_DOCS]
    docs: list[str] = []
    for text in base:
        words = text.split()
        near = " ".join(_alter(words, 0.01, rnd))
        docs += [text, f"Posted on 3 May 2021 by admin\n\n{near}\n\nShare this story",
                 " ".join(_alter(words, 0.5, rnd))]
    mine = _pairs(ours(docs, keys=True))
    theirs = _pairs(datatrove(datatrove_step(hash_fc), docs, keys=True))
    near = {(3 * i, 3 * i + 1) for i in range(len(base))}
    far = {(3 * i, 3 * i + 2) for i in range(len(base))}
    print(f"agreement on {len(base)} documents + a near copy + a far variant each:")
    for name, pairs in (("ours", mine), (f"datatrove-{hash_fc}", theirs)):
        other = len(pairs - near - far)
        print(f"  {name:18s} near copies found {len(pairs & near)}/{len(near)}, far variants "
              f"{len(pairs & far)}/{len(far)}, other pairs {other}")
    print(f"  candidate pairs: both {len(mine & theirs)}, ours only {len(mine - theirs)}, "
          f"datatrove only {len(theirs - mine)}")


def run_job_bench(corpus: Path, *, rounds: int, tokenizer: str, extra: list[str]) -> None:
    """``--job``: ``python -m pipeline`` on every ``*.jsonl`` of ``corpus`` with
    ``--dedup near`` and without, alternating which runs first, each in a fresh process;
    the median wall and CPU seconds, peak RSS (`bench_job.measure`) and their ratios."""
    import shutil
    import tempfile

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_job import measure

    size = sum(p.stat().st_size for p in corpus.glob("*.jsonl")) / 1e6
    base = [sys.executable, "-m", "pipeline", "--input", str(corpus / "*.jsonl"),
            "--id-field", "id", "--tokenizer", tokenizer, "--window", "2048", *extra]
    variants = {"without": [], "--dedup near": ["--dedup", "near"]}
    runs: dict[str, list[Any]] = {name: [] for name in variants}
    removed: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-dedup-") as tmp:
        for rnd in range(rounds):
            order = list(variants) if rnd % 2 == 0 else list(variants)[::-1]
            for name in order:
                out = Path(tmp) / f"out-{rnd}-{len(runs[name])}"
                got = measure([*base, *variants[name], "--output", str(out)])
                runs[name].append(got)
                skipped = json.loads((out / "_manifest.json").read_text())["counts"]["skipped"]
                removed = {k: v for k, v in skipped.items() if "duplicate" in k} or removed
                print(f"round {rnd} {name:14s} wall {got.wall_s:6.1f} s  cpu {got.cpu_s:6.1f} s"
                      f"  peak RSS {got.peak_rss_mb:6.0f} MB  (others used "
                      f"{got.others_cores:.2f} cores)", flush=True)
                shutil.rmtree(out)
    med = {name: {k: statistics.median(getattr(r, k) for r in rs)
                  for k in ("wall_s", "cpu_s", "peak_rss_mb")} for name, rs in runs.items()}
    a, b = med["without"], med["--dedup near"]
    from transforms.dedup import kernel

    hashing = "the C kernel" if kernel.available else "NumPy (the C kernel is not built)"
    print(f"\n{size:.0f} MB of JSONL, {rounds} rounds, {' '.join(extra) or 'in_memory'}, "
          f"hashing with {hashing}; removed {removed}")
    print(f"{'':16s}{'wall s':>9s}{'cpu s':>9s}{'peak RSS MB':>13s}")
    for name, m in med.items():
        print(f"{name:16s}{m['wall_s']:9.1f}{m['cpu_s']:9.1f}{m['peak_rss_mb']:13.0f}")
    print(f"{'ratio':16s}{b['wall_s'] / a['wall_s']:9.2f}{b['cpu_s'] / a['cpu_s']:9.2f}"
          f"{b['peak_rss_mb'] / a['peak_rss_mb']:13.2f}")


def pass_once(corpus: Path, mode: str, threads: int, engine: str) -> tuple[float, float]:
    """The KeyChunks work on every chunk of ``corpus``'s ``*.jsonl``, in this process:
    (wall s, CPU s). ``engine``: ``kernel`` (what the job uses where it is built) or
    ``numpy`` (what it uses where it is not)."""
    import os
    import queue
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.files import fs
    from transforms.dedup import kernel
    from transforms.dedup.removal import RemovalSpec, chunk_keys
    from transforms.inputs.chunks import plan_chunks, read_chunk
    from transforms.inputs.documents import Document
    from transforms.params import ReadSpec

    read = ReadSpec(id_field="id")
    chunks = [chunk for path in sorted(corpus.glob("*.jsonl"))
              for chunk in plan_chunks(str(path), rel=path.name, size=path.stat().st_size,
                                       spec=read, open_file=fs.open_raw)]
    spec = RemovalSpec(dedup=DedupSpec(mode=mode))
    if engine == "numpy":
        kernel.available = False  # this process only: chunk_keys asks it at each batch
    elif not kernel.available:
        sys.exit("transforms.dedup._kernel is not built: pip install -e . with a C compiler")
    pool = ThreadPoolExecutor(threads) if threads else None
    scratches: queue.SimpleQueue = queue.SimpleQueue()
    wall, cpu = time.perf_counter(), os.times()
    for chunk in chunks:
        docs = (d for d in read_chunk(chunk, read, fs.open_raw) if isinstance(d, Document))
        chunk_keys(docs, chunk=(chunk.path, chunk.start), spec=spec, index=None, pool=pool,
                   ahead=max(1, threads), scratches=scratches)
    end = os.times()
    return time.perf_counter() - wall, end.user + end.system - cpu.user - cpu.system


def run_pass_bench(corpus: Path, *, rounds: int, mode: str, threads: int) -> None:
    """``--pass``: `pass_once` with the C kernel and with the NumPy code, alternating, in a
    fresh process per round; medians and ratios."""
    import subprocess

    size = sum(p.stat().st_size for p in corpus.glob("*.jsonl")) / 1e6
    runs: dict[str, list[tuple[float, float]]] = {"kernel": [], "numpy": []}
    for rnd in range(rounds):
        for engine in list(runs) if rnd % 2 == 0 else list(runs)[::-1]:
            out = subprocess.run([sys.executable, __file__, "--pass-once", "--corpus",
                                  str(corpus), "--mode", mode, "--threads", str(threads),
                                  "--engine", engine],
                                 check=True, capture_output=True, text=True).stdout.split()
            wall, cpu = float(out[0]), float(out[1])
            runs[engine].append((wall, cpu))
            print(f"round {rnd} {engine:6s}: wall {wall:.3f} s  cpu {cpu:.3f} s", flush=True)
    print(f"{size:.0f} MB of JSONL, --dedup {mode}, {threads} hashing threads, {rounds} rounds:")
    med = {}
    for engine, got in runs.items():
        med[engine] = (statistics.median(r[0] for r in got), statistics.median(r[1] for r in got))
        wall, cpu = med[engine]
        print(f"  {engine:6s} wall {wall:.3f} s, cpu {cpu:.3f} s "
              f"({size / cpu:.0f} MB per CPU-second)")
    print(f"  numpy / kernel: wall {med['numpy'][0] / med['kernel'][0]:.2f}x, "
          f"cpu {med['numpy'][1] / med['kernel'][1]:.2f}x")


def run_split(corpus: Path, rounds: int) -> None:
    """``--split``: the dedup pass's work on one thread, part by part (each part timed
    alone over every batch of `BATCH_DOCS` documents, as the job hashes them): the median
    CPU seconds of each over ``rounds`` rounds, and its share."""
    import numpy as np

    from pipeline.files import fs
    from transforms.dedup import duplicates as dedup
    from transforms.dedup import kernel
    from transforms.dedup import words as dedup_words
    from transforms.inputs.chunks import plan_chunks, read_chunk
    from transforms.inputs.documents import Document
    from transforms.params import ReadSpec

    read = ReadSpec(id_field="id")
    chunks = [chunk for path in sorted(corpus.glob("*.jsonl"))
              for chunk in plan_chunks(str(path), rel=path.name, size=path.stat().st_size,
                                       spec=read, open_file=fs.open_raw)]
    size = sum(p.stat().st_size for p in corpus.glob("*.jsonl")) / 1e6

    def parse() -> list[str]:
        return [d.text for c in chunks for d in read_chunk(c, read, fs.open_raw)
                if isinstance(d, Document)]

    texts = parse()
    batches = [texts[i : i + BATCH_DOCS] for i in range(0, len(texts), BATCH_DOCS)]
    scratch = dedup_words.Scratch()
    grams = [dedup_words.word_batch(b, scratch).text_ngrams(SPEC.ngram) for b in batches]
    sigs = [dedup.signatures(b, SPEC, scratch=scratch) for b in batches]

    def each(fn: Callable[[Any], object], items: list[Any]) -> Callable[[], None]:
        def run() -> None:
            for item in items:  # each result dropped at once, as the job drops it
                fn(item)
        return run

    def min_hash(item: tuple[Any, list[str]]) -> None:
        (g, owners), b = item
        out = np.full((len(b), SPEC.num_hashes), (1 << 32) - 1, dtype=np.uint32)
        dedup._min_hash(g, owners, out, scratch)

    parts: dict[str, Callable[[], object]] = {
        "read + parse (read_chunk)": parse,
        "exact keys (NFC, whitespace, BLAKE2b)": each(dedup.exact_key, texts),
        "  of which NFC + whitespace": each(dedup.normalize, texts),
        "near form (casefold, NFC)": each(dedup_words._near_form, texts),
        "words: boundaries and hashes": each(lambda b: dedup_words.word_batch(b, scratch),
                                             batches),
        "n-grams (words again)": each(
            lambda b: dedup_words.word_batch(b, scratch).text_ngrams(SPEC.ngram), batches),
        "MinHash products and minima": each(min_hash, list(zip(grams, batches, strict=True))),
        "band keys": each(lambda s: dedup.band_key_matrix(s, SPEC), sigs),
        "signatures, all of it": each(lambda b: dedup.signatures(b, SPEC, scratch=scratch),
                                      batches),
    }
    if kernel.available:
        parts["C kernel: exact keys"] = each(kernel.exact_keys, batches)
        parts["C kernel: signatures"] = each(lambda b: kernel.signatures(b, SPEC), batches)
    took: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(rounds):
        for name, fn in parts.items():
            took[name].append(_cpu(fn))
    med = {name: statistics.median(values) for name, values in took.items()}
    # The parts timed alone overlap (the word pass includes the near form, the n-grams the
    # word pass): each row below is its own share.
    words = med["words: boundaries and hashes"] - med["near form (casefold, NFC)"]
    grams = med["n-grams (words again)"] - med["words: boundaries and hashes"]
    sig = med["signatures, all of it"]
    rows = [
        ("read + parse (read_chunk)", med["read + parse (read_chunk)"]),
        ("exact keys (NFC, whitespace, BLAKE2b)", med["exact keys (NFC, whitespace, BLAKE2b)"]),
        ("  of which NFC + whitespace", med["  of which NFC + whitespace"]),
        ("signatures", sig),
        ("  near form (casefold, NFC)", med["near form (casefold, NFC)"]),
        ("  word boundaries and hashes", words),
        ("  n-gram hashes", grams),
        ("  MinHash products and minima", med["MinHash products and minima"]),
        ("  the rest (short texts, bookkeeping)",
         sig - med["n-grams (words again)"] - med["MinHash products and minima"]),
        ("band keys", med["band keys"]),
    ]
    whole = (med["read + parse (read_chunk)"] + med["exact keys (NFC, whitespace, BLAKE2b)"]
             + sig + med["band keys"])
    print(f"{size:.0f} MB of JSONL, {len(texts)} documents, {rounds} rounds, one thread: "
          f"CPU s (medians) and share of the whole, {whole:.2f} s (the NumPy code)")
    for name, value in rows:
        print(f"  {name:40s}{value:7.3f} s {100 * value / whole:5.0f} %")
    if kernel.available:
        c_exact, c_sig = med["C kernel: exact keys"], med["C kernel: signatures"]
        c_whole = med["read + parse (read_chunk)"] + c_exact + c_sig + med["band keys"]
        print(f"with the C kernel (transforms.dedup.kernel), {c_whole:.2f} s:")
        for name, value in [("read + parse (read_chunk)", med["read + parse (read_chunk)"]),
                            ("exact keys (NFC in Python, the rest in C)", c_exact),
                            ("signatures", c_sig), ("band keys", med["band keys"])]:
            print(f"  {name:40s}{value:7.3f} s {100 * value / c_whole:5.0f} %")


def _write_planted(corpus: Path, out: Path, mb: float) -> tuple[Path, int]:
    """``mb`` MB of ``corpus``'s texts as ``{"id", "text"}`` JSONL, and for every 20th text
    of 100 words or more a near copy (1 word in 100 changed, a header and a footer added)
    under another id; returns the file and the number of copies planted."""
    rnd = random.Random(5)
    texts = load_texts(corpus, mb)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "planted.jsonl"
    planted = 0
    with path.open("w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": f"d{i:07d}", "text": text}, ensure_ascii=False) + "\n")
            words = text.split()
            if i % 20 == 0 and len(words) >= 100:
                near = " ".join(_alter(words, 0.01, rnd))
                copy = f"Posted on 3 May 2021 by admin\n\n{near}\n\nShare this story"
                f.write(json.dumps({"id": f"e{i:07d}", "text": copy}, ensure_ascii=False)
                        + "\n")
                planted += 1
    return path, planted


def _datatrove_removed(path: Path, work: Path, tasks: int) -> tuple[set[str], float]:
    """datatrove's MinHash pipeline (its four stages, local executor, ``tasks`` tasks, word
    5-grams, 14 × 8, 64-bit xxhash) on ``path``: the ids it removes, and its CPU seconds."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig

    config = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8,
                           hash_config=HashConfig(precision=64, hash_fc="xxhash"))
    signature = MinhashDedupSignature(output_folder=str(work / "sigs"), config=config)
    import xxhash

    # datatrove 0.10 passes str to xxhash, which xxhash 4 refuses: encode it first.
    signature._hash_func = lambda s: xxhash.xxh64_intdigest(s.encode("utf-8"))

    def reader() -> Any:
        return JsonlReader(str(path.parent), glob_pattern=path.name, id_key="id")

    stages = [
        ([reader(), signature], 1),
        ([MinhashDedupBuckets(input_folder=str(work / "sigs"),
                              output_folder=str(work / "buckets"), config=config)],
         config.num_buckets),
        ([MinhashDedupCluster(input_folder=str(work / "buckets"),
                              output_folder=str(work / "remove_ids"), config=config)], 1),
        ([reader(), MinhashDedupFilter(input_folder=str(work / "remove_ids"),
                                       exclusion_writer=JsonlWriter(str(work / "removed"),
                                                                    compression=None)),
          JsonlWriter(str(work / "kept"), compression=None)], 1),
    ]
    started = _cpu_now()
    for i, (steps, n) in enumerate(stages):
        LocalPipelineExecutor(pipeline=steps, tasks=n, workers=min(n, tasks),
                              logging_dir=str(work / f"logs-{i}")).run()
    cpu = _cpu_now() - started
    removed = set()
    for f in (work / "removed").glob("*.jsonl"):
        removed |= {json.loads(line)["id"] for line in f.read_text().splitlines()}
    return removed, cpu


def _cpu_now() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run_job_agreement(corpus: Path, mb: float) -> None:
    """``--job --datatrove``: our job's removed set against datatrove's MinHash pipeline on
    the same texts (``mb`` MB of ``corpus`` with planted near copies)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-dedup-agree-") as tmp:
        path, planted = _write_planted(corpus, Path(tmp) / "in", mb)
        size = path.stat().st_size / 1e6
        out = Path(tmp) / "out"
        started = _cpu_now()
        subprocess.run([sys.executable, "-m", "pipeline", "--input", str(path), "--id-field",
                        "id", "--tokenizer", "bytes", "--window", "4096", "--dedup", "near",
                        "--output", str(out)], check=True, cwd=ROOT, capture_output=True)
        ours_cpu = _cpu_now() - started
        mine = set()
        for reason in ("exact_duplicate", "near_duplicate"):
            f = out / "_rejects" / f"{reason}.jsonl"
            if f.exists():
                mine |= {json.loads(line)["doc_id"] for line in f.read_text().splitlines()}
        theirs, their_cpu = _datatrove_removed(path, Path(tmp) / "dt", tasks=2)
    copies = {f"e{i:07d}" for i in range(0, 10**7, 20)}
    print(f"{size:.1f} MB, {planted} near copies planted (ids e…):")
    print(f"  ours (the whole job, bytes tokenizer): removed {len(mine)}, of them planted "
          f"copies {len(mine & copies)}; CPU {ours_cpu:.1f} s ({size / ours_cpu:.2f} MB/s "
          "per core)")
    print(f"  datatrove (4 stages, 2 tasks):           removed {len(theirs)}, of them planted "
          f"copies {len(theirs & copies)}; CPU {their_cpu:.1f} s "
          f"({size / their_cpu:.2f} MB/s per core)")
    print(f"  removed by both {len(mine & theirs)}, ours only {len(mine - theirs)} "
          f"{sorted(mine - theirs)[:8]}, datatrove only {len(theirs - mine)} "
          f"{sorted(theirs - mine)[:8]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", action="store_true", help="the pure functions vs datatrove's")
    parser.add_argument("--corpus", type=Path, default=ROOT / "samples" / "corpus")
    parser.add_argument("--mb", type=float, default=2.0, help="MB of text to read (default 2)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hash", nargs="+", default=["xxhash", "sha1"],
                        choices=["xxhash", "sha1"], help="datatrove's hash function(s)")
    parser.add_argument("--job", action="store_true",
                        help="the job with --dedup near vs the same job without")
    parser.add_argument("--tokenizer", type=str, default=str(ROOT / "samples" / "spm.model"),
                        help="--job: the job's tokenizer (default: samples/spm.model)")
    parser.add_argument("--runner-args", nargs="*", default=[],
                        help="--job: more flags for both jobs (e.g. "
                        "--direct_running_mode=multi_processing)")
    parser.add_argument("--datatrove", action="store_true",
                        help="--job: our removed set against datatrove's MinHash pipeline "
                        "on --mb MB of --corpus with planted near copies")
    parser.add_argument("--pass", dest="pass_", action="store_true",
                        help="the dedup pass's own work alone, a fresh process per round")
    parser.add_argument("--pass-once", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=["near", "exact"], default="near",
                        help="--pass: the dedup mode")
    parser.add_argument("--threads", type=int, default=2,
                        help="--pass: hashing threads (the job's --encode-threads)")
    parser.add_argument("--engine", choices=["kernel", "numpy"], default="kernel",
                        help=argparse.SUPPRESS)  # --pass-once: which hashing code
    parser.add_argument("--split", action="store_true",
                        help="the pass's work part by part, one thread (CPU s)")
    args = parser.parse_args()
    if args.split:
        run_split(args.corpus, args.rounds)
        return
    if args.pass_once:
        print(*pass_once(args.corpus, args.mode, args.threads, args.engine))
        return
    if args.pass_:
        run_pass_bench(args.corpus, rounds=args.rounds, mode=args.mode, threads=args.threads)
        return
    if args.job and args.datatrove:
        run_job_agreement(args.corpus, args.mb)
        return
    if args.job:
        run_job_bench(args.corpus, rounds=args.rounds, tokenizer=args.tokenizer,
                      extra=args.runner_args)
        return
    if not args.core:
        parser.error("choose a mode: --core, --job or --pass")
    texts = load_texts(args.corpus, args.mb)
    run_core(texts, args.rounds, args.hash)
    run_agreement(texts, args.hash[0])


if __name__ == "__main__":
    main()
