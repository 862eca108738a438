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
* ``final``: the job's last step (`pipeline.finalize`) given ``--shards`` fake shard receipts
  (one small real shard file each, copied, since the step reads every footer) and one input
  receipt per file: every input accounted for, the inputs matched again, every footer
  checked, the manifest built and written.

``--compare DIR`` runs the same phases on the code tree DIR too (e.g. a checkout of main), in
the same run, and prints both::

    python bench/bench_scale.py --files 100000 --shards 10000 --compare /work/main
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import shutil
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
    from pipeline import fs

    fake = _fake_files(n)
    fs.match_files = lambda pattern: list(fake) if pattern == PATTERN else []
    fs.broken_links = lambda pattern: []


def _launch(args: argparse.Namespace, out: str) -> dict:
    import apache_beam as beam  # noqa: F401 (imported before the baseline)
    import cloudpickle

    from pipeline import graph

    run = importlib.import_module("pipeline.run")  # the package exports a function `run`
    _fake_listing(args.files)
    flags = ["--runner=DaskRunner", "--dask_npartitions=64"] if args.runner == "dask" else []
    argv = ["--input", PATTERN, "--tokenizer", "bytes", "--output", out,
            "--num-shards", str(args.shards), *flags]
    base = _rss_mb()
    started = time.perf_counter()
    job = run._prepare(argv)
    prepared = time.perf_counter()
    config, options, _, plan = job
    p = beam.Pipeline(runner=run._runner(options), options=options)
    extra: dict = {}
    create = None
    if getattr(plan, "chunks", None) is not None:  # this tree plans chunks at launch
        from pipeline import launch

        chunks = launch.prepare_chunks(plan.chunks, options, tmp_dir=plan.tmp_dir,
                                       pipeline=lambda: None)
        extra["chunks"] = create = chunks
    elif args.runner == "dask":  # the tree before: one element per matched file
        extra["matched"] = create = plan.matched
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
    from pipeline import finalize
    from pipeline.write import write_placed_shard
    from transforms.chunks import Receipt
    from transforms.keys import ShardPlan
    from transforms.manifest import MANIFEST_NAME, WrittenShard
    from transforms.rows import ShardCounts, ShardRows
    from transforms.schema import shard_file_name

    run = importlib.import_module("pipeline.run")
    _fake_listing(args.files)
    config, _, _, plan = run._prepare(["--input", PATTERN, "--tokenizer", "bytes", "--output",
                                      out, "--num-shards", str(args.shards)])
    shards = ShardPlan(num_shards=args.shards)
    first = write_placed_shard(plan=shards, index=0, output=out, fingerprint=plan.fingerprint,
                               rows=ShardRows([]), window=config.windows.window,
                               tmp_dir=plan.tmp_dir)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000, help="fake input files")
    parser.add_argument("--shards", type=int, default=10_000, help="shards (--num-shards)")
    parser.add_argument("--compare", type=Path, default=None,
                        help="another code tree to run the same phases on (e.g. main)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--runner", default="default", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.phase = args.child
        _child(args)
        return
    trees = [("this tree", ROOT)] + ([("compare", args.compare)] if args.compare else [])
    print(f"{args.files:,} fake input files (~{args.files * 10 / 1e6:.1f} TB), "
          f"{args.shards:,} shards")
    for phase, runner in (("launch", "default"), ("launch", "dask"), ("final", "default")):
        for label, code in reversed(trees):
            r = _run(code, phase, runner, args)
            what = phase if phase == "final" else f"{phase} ({runner})"
            details = {k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()
                       if k not in ("seconds", "peak_rss_mb", "baseline_rss_mb")}
            print(f"{what:16} {label:10} {r['seconds']:7.2f} s  peak RSS "
                  f"{r['peak_rss_mb']:6.0f} MB (after imports {r['baseline_rss_mb']:4.0f} MB)  "
                  f"{details}", flush=True)


if __name__ == "__main__":
    main()
