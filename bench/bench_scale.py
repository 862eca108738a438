"""The launcher and the final step at 10^5 input files and 10^4 shards, without the data.

Each phase runs in a fresh process, on the real functions, with the file system's listing
replaced by a fake one (``--files`` JSONL files of about 10 MB, 1 TB in all, under
``/fake/corpus/``), and reports its wall time and its peak RSS (``ru_maxrss``) beside the RSS
of the same process after its imports:

* ``launch``: what ``python -m pipeline`` does before the job runs, on the default runner
  (the workers match the patterns) and on Dask (the launcher plans the chunks and the graph
  starts from them): flags, the match, the fingerprint of every file's name and size, the
  claim on the output, the shard plan, the chunk plan (Dask), the graph built and translated
  to Beam's portable form (``to_runner_api``, what a portable runner or Dataflow receives).
* ``final``: the job's last step (`pipeline.steps.finalize`) given ``--shards`` fake shard receipts
  (one small real shard file each, copied, since the step reads every footer) and one input
  receipt per file: every input accounted for, the inputs matched again, every footer
  checked, the manifest built and written.

``--compare DIR`` runs the same phases on the code tree DIR too (e.g. a checkout of main), in
the same run, and prints both::

    python bench/bench_scale.py --files 100000 --shards 10000 --compare /work/main

``--throughput MB`` instead measures what a terabyte costs per core: ``python -m pipeline``
on a corpus of the samples repeated to MB megabytes (``bench/bench_tokenizers.py``'s), once
per tokenizer (bytes; ``samples/spm.model``; a byte-level BPE ``tokenizer.json`` of the same
vocabulary, trained there, run through ``tokenizers``), with ``--encode-threads 1`` and the
file shuffle, and on a 1 KB corpus for the fixed cost. It prints the CPU seconds (user +
system of the job's process) per GB of input above the fixed cost, so MB/s per core, and per
MB of input the corpus tokens, the shuffle's bytes (the spill files' peak size, which is what
``--shuffle runner`` sends through the runner's shuffle) and the output's bytes::

    python bench/bench_scale.py --throughput 20
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATTERN = "/fake/corpus/*.jsonl"
MTIME = 1.7e9


def _fake_files(n: int) -> list[tuple[str, int, float]]:
    # Sizes of 9.5 to 10.5 MB (each under the chunk size: one chunk per file).
    return [(f"/fake/corpus/part-{i:06d}.jsonl", 10_000_000 + (i * 7919) % 1_000_001 - 500_000,
             MTIME) for i in range(n)]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _fake_listing(n: int) -> None:
    from pipeline.files import fs

    fake = _fake_files(n)
    fs.match_files = lambda pattern: list(fake) if pattern == PATTERN else []
    fs.broken_links = lambda pattern: []


def _launch(args: argparse.Namespace, out: str) -> dict:
    import apache_beam as beam  # noqa: F401 (imported before the baseline)
    import cloudpickle

    from pipeline import graph

    run = importlib.import_module("pipeline.job")
    _fake_listing(args.files)
    flags = ["--runner=DaskRunner", "--dask_npartitions=64"] if args.runner == "dask" else []
    argv = ["--input", PATTERN, "--tokenizer", "bytes", "--output", out,
            "--num-shards", str(args.shards), *flags]
    base = _rss_mb()
    started = time.perf_counter()
    contexts = importlib.util.find_spec("pipeline.launch.context") is not None
    if contexts:  # the launcher builds one job context (pipeline.launch.context)
        from pipeline.launch import runners

        options, _, (context, files, _, planned) = run._prepare(argv, None)
        runner = runners.runner_for(options)
        config, tmp_dir = context.config, context.tmp_dir
    else:  # the tree before: a Plan, and keywords for build_pipeline
        config, options, _, plan = run._prepare(argv)
        runner = run._runner(options)
        files, planned, tmp_dir = plan.files, getattr(plan, "chunks", None), plan.tmp_dir
    prepared = time.perf_counter()
    p = beam.Pipeline(runner=runner, options=options)
    extra: dict = {}
    create = None
    if planned is not None:  # this tree plans chunks at launch
        from pipeline.launch import chunk_plan

        chunks = chunk_plan.prepare_chunks(planned, options, tmp_dir=tmp_dir,
                                       root=config.output, pipeline=lambda: None)
        extra["chunks"] = create = chunks
    elif args.runner == "dask":  # an older tree: one element per matched file
        extra["matched"] = create = plan.matched
    if contexts:
        graph.build_pipeline(p, context, expected_files=files, **extra)
    else:
        graph.build_pipeline(p, config, plan.files, fingerprint=plan.fingerprint,
                             tmp_dir=plan.tmp_dir, attempt=plan.attempt, **extra)
    built = time.perf_counter()
    proto = p.to_runner_api()
    done = time.perf_counter()
    return {"seconds": done - started, "prepare_s": prepared - started,
            "build_s": built - prepared, "translate_s": done - built,
            "graph_mb": proto.ByteSize() / 1e6,
            "create_elements": None if create is None else len(create),
            "create_pickle_mb": None if create is None else len(cloudpickle.dumps(create)) / 1e6,
            "peak_rss_mb": _rss_mb(), "baseline_rss_mb": base}


def _final(args: argparse.Namespace, out: str) -> dict:
    from pipeline.steps import finalize
    from pipeline.steps.write import write_placed_shard
    from transforms.dataset.manifest import MANIFEST_NAME
    from transforms.dataset.schema import shard_file_name
    from transforms.inputs.receipts import Receipt
    from transforms.plan.keys import ShardPlan
    from transforms.shards.manifest_build import WrittenShard
    from transforms.shards.rows import ShardCounts, ShardRows

    run = importlib.import_module("pipeline.job")
    _fake_listing(args.files)
    argv = ["--input", PATTERN, "--tokenizer", "bytes", "--output", out, "--num-shards",
            str(args.shards)]
    contexts = importlib.util.find_spec("pipeline.launch.context") is not None
    if contexts:
        _, _, (context, files_at_launch, _, _) = run._prepare(argv, None)
        config, fingerprint, tmp_dir = context.config, context.fingerprint, context.tmp_dir
    else:
        config, _, _, plan = run._prepare(argv)
        fingerprint, tmp_dir, files_at_launch = plan.fingerprint, plan.tmp_dir, plan.files
    shards = ShardPlan(num_shards=args.shards)
    first = write_placed_shard(plan=shards, index=0, output=out, fingerprint=fingerprint,
                               rows=ShardRows([]), window=config.windows.window,
                               tmp_dir=tmp_dir)
    for i in range(1, args.shards):  # the step reads each footer: one real file per shard
        shutil.copyfile(os.path.join(out, first.file),
                        os.path.join(out, shard_file_name(i, args.shards)))
    files = _fake_files(args.files)
    per_shard = args.files // args.shards  # one record per file, every one a document
    group = [("shards", WrittenShard(
        file=shard_file_name(i, args.shards), index=i, sha256="0" * 64, bytes=40_000_000,
        counts=ShardCounts(rows=30_000, documents=per_shard + (i < args.files % args.shards),
                           tokens=15_000_000, pairs=10_000_000, scored_targets=10_000_000)))
             for i in range(args.shards)]
    group += [("receipts", Receipt(path=path, size=size, extent=size, start=0, end=size,
                                   records=1, mtime=mtime)) for path, size, mtime in files]
    if contexts:
        import dataclasses

        fn = finalize._FinalizeFn(dataclasses.replace(context, plan=shards), files_at_launch)
    else:
        fn = finalize._FinalizeFn(
            output=out, windows=config.windows, inputs=list(config.inputs),
            reading=config.read.to_json(), tokenizer=config.tokenizer_spec,
            expected_files=plan.files, fingerprint=plan.fingerprint, tmp_dir=plan.tmp_dir,
            attempt=plan.attempt, max_skipped_share=1.0, plan=shards)
    base = _rss_mb()
    started = time.perf_counter()
    (manifest,) = list(fn.process((None, group)))
    seconds = time.perf_counter() - started
    assert manifest["counts"]["documents"] == args.files
    return {"seconds": seconds, "manifest_mb": os.path.getsize(
        os.path.join(out, MANIFEST_NAME)) / 1e6, "peak_rss_mb": _rss_mb(),
        "baseline_rss_mb": base}


def _child(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        out = os.path.join(tmp, "out")
        result = _launch(args, out) if args.phase == "launch" else _final(args, out)
    print(json.dumps(result))


def _run(code: Path, phase: str, runner: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONPATH=str(code))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", phase, "--runner", runner,
           "--files", str(args.files), "--shards", str(args.shards)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{code} {phase} {runner} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _job_cpu(corpus: Path, tokenizer: str, out: Path) -> tuple[float, int, dict]:
    """(CPU s of the job's process, peak bytes under OUTPUT/.tmp, its manifest)."""
    cmd = [sys.executable, "-m", "pipeline", "--input", str(corpus), "--id-field", "id",
           "--tokenizer", tokenizer, "--window", "512", "--stride", "256", "--output", str(out),
           "--encode-threads", "1", "--shuffle", "files"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        peak = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # reaps it: its rusage
            if pid:
                break
            with contextlib.suppress(OSError):
                peak = max(peak, sum(f.stat().st_size for f in (out / ".tmp").rglob("*")
                                     if f.is_file()))
            time.sleep(0.1)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            raise SystemExit(f"the job failed: {err.read().decode()[-2000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return cpu, peak, json.loads((out / "_manifest.json").read_text())


def _throughput(mb: int) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_tokenizers

    corpus = bench_tokenizers.build_corpus(mb)
    size = corpus.stat().st_size
    kinds = {"bytes": "bytes", "sentencepiece (samples/spm.model, 8k)": str(
        bench_tokenizers.SPM), "HF byte-level BPE (8k, tokenizers)": str(
        bench_tokenizers.build_bpe(8000))}
    print(f"corpus {size / 1e6:.1f} MB ({corpus.name}), window 512, stride 256, "
          "--encode-threads 1, file shuffle")
    print("| tokenizer | CPU s per GB | MB/s per core | corpus tokens per MB | "
          "shuffle MB per MB | output MB per MB |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as name:
        tmp = Path(name)
        tiny = tmp / "tiny.jsonl"
        tiny.write_text("".join(json.dumps({"id": f"t{i}", "text": "a few words"}) + "\n"
                                for i in range(50)))
        for kind, tok in kinds.items():
            fixed, _, _ = _job_cpu(tiny, tok, tmp / f"tiny-{len(kind)}")
            cpu, spill, manifest = _job_cpu(corpus, tok, tmp / f"out-{len(kind)}")
            out = sum(f.stat().st_size for f in (tmp / f"out-{len(kind)}").rglob("*.parquet"))
            c = manifest["counts"]
            per_gb = (cpu - fixed) / (size / 1e9)
            print(f"| {kind} | {per_gb:,.0f} | {1000 / per_gb:.1f} | "
                  f"{(c['pairs'] + c['documents']) / (size / 1e6):,.0f} | "
                  f"{spill / size:.2f} | {out / size:.2f} |", flush=True)
            print(f"  ({kind}: job {cpu:.1f} CPU s, fixed {fixed:.1f} CPU s)", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000, help="fake input files")
    parser.add_argument("--shards", type=int, default=10_000, help="shards (--num-shards)")
    parser.add_argument("--compare", type=Path, default=None,
                        help="another code tree to run the same phases on (e.g. main)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per phase and tree")
    parser.add_argument("--phases", default="all", choices=["all", "launch", "dask", "final"],
                        help="which phases to run (dask: the launcher on Dask only)")
    parser.add_argument("--throughput", type=int, default=None, metavar="MB",
                        help="measure CPU s per GB per tokenizer on a corpus of MB megabytes")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--runner", default="default", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.phase = args.child
        _child(args)
        return
    if args.throughput:
        _throughput(args.throughput)
        return
    trees = [("this tree", ROOT)] + ([("compare", args.compare)] if args.compare else [])
    print(f"{args.files:,} fake input files (~{args.files * 10 / 1e6:.1f} TB), "
          f"{args.shards:,} shards; medians of {args.repeats} alternating runs")
    phases = [("launch", "default"), ("launch", "dask"), ("final", "default")]
    for phase, runner in [p for p in phases if args.phases in ("all", p[0], p[1])]:
        runs: dict[str, list[dict]] = {label: [] for label, _ in trees}
        for r in range(args.repeats):
            for label, code in (trees if r % 2 else trees[::-1]):
                runs[label].append(_run(code, phase, runner, args))
        for label, _ in trees[::-1]:
            mine = sorted(runs[label], key=lambda x: x["seconds"])
            mid = mine[len(mine) // 2]
            rss = statistics.median(x["peak_rss_mb"] for x in mine)
            what = phase if phase == "final" else f"{phase} ({runner})"
            details = {k: round(v, 2) if isinstance(v, float) else v for k, v in mid.items()
                       if k not in ("seconds", "peak_rss_mb", "baseline_rss_mb")}
            print(f"{what:16} {label:10} {mid['seconds']:7.2f} s  peak RSS {rss:6.0f} MB "
                  f"(after imports {mid['baseline_rss_mb']:4.0f} MB)  {details}", flush=True)

if __name__ == "__main__":
    main()
