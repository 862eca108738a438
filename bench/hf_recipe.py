"""The Hugging Face ``datasets`` recipe for the same work, as its users write it.

``load_dataset("json")`` → ``map(tokenize, batched=True, num_proc=2)`` → ``map(windows,
batched=True)`` → ``to_parquet`` with datasets' own defaults (snappy, dictionary pages,
content-defined chunking: lighter than the job's zstd). Tokenizing adds BOS and EOS; the
windows are the job's defaults (``--tail keep``, ``--score all``): one row per window with
the job's columns but ``doc_key`` (there is no shuffle), in input order, ids as int64 (what
datasets infers). The Arrow cache goes to ``--cache-dir``, whose size the benchmark reports.

    python bench/hf_recipe.py --input 'bench/work/corpus-…/*.jsonl' \\
        --tokenizer bench/work/spm-….model --output /tmp/hf --cache-dir /tmp/hf-cache \\
        --window 512 --stride 256

Needs the ``bench`` extra (``pip install -e '.[bench]'``); runs offline.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import sentencepiece as spm  # noqa: E402

_SP: spm.SentencePieceProcessor | None = None


def _sp(model: str) -> spm.SentencePieceProcessor:
    global _SP
    if _SP is None:  # once per map worker process
        _SP = spm.SentencePieceProcessor(model_file=model)
    return _SP


def tokenize(batch: dict, model: str) -> dict:
    return {"input_ids": _sp(model).encode(batch["text"], add_bos=True, add_eos=True)}


def windows(batch: dict, window: int, stride: int, id_field: str) -> dict:
    out: dict[str, list] = {k: [] for k in ("doc_id", "window_index", "start", "length",
                                            "loss_start", "doc_tokens", "tokens")}
    for doc_id, z in zip(batch[id_field], batch["input_ids"], strict=True):
        pairs = len(z) - 1
        full = 0 if window > pairs else (pairs - window) // stride + 1
        starts = list(range(0, stride * full, stride))
        lengths = [window] * full
        tail = stride * full
        if not (full and starts[-1] + window == pairs) and tail < pairs:
            starts.append(tail)
            lengths.append(pairs - tail)
        for i, (s, n) in enumerate(zip(starts, lengths, strict=True)):
            out["doc_id"].append(str(doc_id))
            out["window_index"].append(i)
            out["start"].append(s)
            out["length"].append(n)
            out["loss_start"].append(0)
            out["doc_tokens"].append(len(z))
            out["tokens"].append(z[s : s + n + 1])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="JSONL glob")
    parser.add_argument("--tokenizer", required=True, help="SentencePiece .model")
    parser.add_argument("--output", required=True, help="output directory")
    parser.add_argument("--cache-dir", required=True, help="the datasets cache (emptied first)")
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--stride", type=int, default=None)
    parser.add_argument("--id-field", default="id")
    parser.add_argument("--num-proc", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    stride = args.stride or args.window

    started = time.monotonic()
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    ds = datasets.load_dataset("json", data_files=sorted(glob.glob(args.input)), split="train",
                               cache_dir=args.cache_dir)
    ds = ds.map(tokenize, batched=True, num_proc=args.num_proc,
                fn_kwargs={"model": args.tokenizer}, remove_columns=["text"])
    ds = ds.map(windows, batched=True, remove_columns=ds.column_names,
                fn_kwargs={"window": args.window, "stride": stride, "id_field": args.id_field})
    Path(args.output).mkdir(parents=True, exist_ok=True)
    ds.to_parquet(os.path.join(args.output, "part-00000-of-00001.parquet"))
    print(json.dumps({"windows": ds.num_rows, "seconds": round(time.monotonic() - started, 3)}))


if __name__ == "__main__":
    sys.exit(main())
