"""What verifying input Parquet page checksums costs: one corpus read with and without.

Writes (once, into a temporary directory) a Parquet corpus from the repository's sample texts
repeated to ``--mb`` MB, with a CRC in every page header (``write_page_checksum=True``, as
Spark and parquet-mr write by default), in row groups of 64 MiB of text, snappy-compressed
(pyarrow's default) and zstd-compressed. Then, alternating within each round (and rotating
which goes first), it reads every row group of every file:

* ``decode, unverified``: ``pq.ParquetFile(f).read_row_groups(...)``, as the job read input
  Parquet before;
* ``decode, verified``: `transforms.inputs.parquet.read_row_groups`, as the job reads it now
  (``page_checksum_verification=True``);
* ``read_chunk``: `transforms.inputs.chunks.read_chunk` over the job's chunks, verified: the decode
  plus turning every row into a document, which is what one worker does per chunk (and the
  tokenizer, not timed here, costs several times more);

and prints the median seconds of each, MB/s of text, and the verified/unverified ratios
measured in the same rounds::

    python bench/bench_checksums.py                    # 100 MB, 7 rounds of 5 reads each
    python bench/bench_checksums.py --mb 50 --repeats 15 --inner 3
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from transforms.inputs.chunks import plan_chunks, read_chunk  # noqa: E402
from transforms.inputs.parquet import read_row_groups  # noqa: E402
from transforms.params import ReadSpec  # noqa: E402

ROW_GROUP_TEXT = 64 << 20


def _texts() -> list[str]:
    return [json.loads(line)["text"] for f in sorted((ROOT / "samples" / "corpus").glob("*.jsonl"))
            for line in f.read_text(encoding="utf-8").splitlines()]


def write_corpus(directory: Path, mb: int, compression: str) -> tuple[Path, int]:
    """A Parquet file of about ``mb`` MB of text; (its path, bytes of text)."""
    base = _texts()
    texts, size, i = [], 0, 0
    while size < mb * 1_000_000:
        text = f"{i} {base[i % len(base)]}"
        texts.append(text)
        size += len(text.encode())
        i += 1
    per_group = max(1, int(len(texts) * ROW_GROUP_TEXT / size))
    path = directory / f"corpus-{compression}.parquet"
    pq.write_table(pa.table({"id": [str(k) for k in range(len(texts))], "text": texts}), path,
                   row_group_size=per_group, compression=compression, write_page_checksum=True)
    return path, size


def _timed(work, times: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process, every thread) of one ``work()``, averaged
    over ``times`` calls in a row."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(times):
        work()
    return (time.perf_counter() - wall) / times, (time.process_time() - cpu) / times


def _decode(data: bytes, verified: bool) -> None:
    f = io.BytesIO(data)  # in memory: the disk and the page cache are not measured
    groups = pq.ParquetFile(f).metadata.num_row_groups
    if verified:
        read_row_groups(f, start=0, end=groups, first_row=0, name="corpus")
    else:
        pq.ParquetFile(f).read_row_groups(range(groups))


def _read_chunks(data: bytes) -> None:
    spec = ReadSpec()
    chunks = plan_chunks("corpus.parquet", rel="corpus.parquet", size=len(data), spec=spec,
                         open_file=lambda _: io.BytesIO(data))
    documents = sum(1 for c in chunks for _ in read_chunk(c, spec, lambda _: io.BytesIO(data)))
    assert documents > 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100, help="MB of text per corpus")
    parser.add_argument("--repeats", type=int, default=7, help="rounds")
    parser.add_argument("--inner", type=int, default=5, help="reads of each case per round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for compression in ("snappy", "zstd"):
            path, size = write_corpus(Path(tmp), args.mb, compression)
            data = path.read_bytes()
            cases = {"decode, unverified": lambda d=data: _decode(d, False),
                     "decode, verified": lambda d=data: _decode(d, True),
                     "read_chunk, verified": lambda d=data: _read_chunks(d)}
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
            names = list(cases)
            for r in range(args.repeats):
                for name in names[r % len(names):] + names[: r % len(names)]:
                    times[name].append(_timed(cases[name], args.inner))
            print(f"\n{compression}: {size / 1e6:.0f} MB of text in {len(data) / 1e6:.0f} MB of "
                  f"Parquet, {pq.ParquetFile(path).metadata.num_row_groups} row groups, medians "
                  f"of {args.repeats} rounds")
            print("| read | wall s | CPU s | MB/s of text (CPU) |")
            print("|---|---:|---:|---:|")
            for name, runs in times.items():
                wall = statistics.median(w for w, _ in runs)
                cpu = statistics.median(c for _, c in runs)
                print(f"| {name} | {wall:.3f} | {cpu:.3f} | {size / 1e6 / cpu:,.0f} |")
            for k, what in ((0, "wall"), (1, "CPU")):
                ratios = [v[k] / u[k] for v, u in zip(times["decode, verified"],
                                                      times["decode, unverified"], strict=True)]
                print(f"verified / unverified decode, {what}: {statistics.median(ratios):.3f} "
                      f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)})")
            extra = (statistics.median(c for _, c in times["decode, verified"])
                     - statistics.median(c for _, c in times["decode, unverified"]))
            whole = statistics.median(c for _, c in times["read_chunk, verified"])
            print(f"checksums' share of read_chunk's CPU: {extra / whole:.1%}")

if __name__ == "__main__":
    main()
