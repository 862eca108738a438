"""Build a dataset's local layout ahead of training: ``python -m reader.prepare PATH``.

The same work as the first read of each shard (download when remote, SHA-256 against the
manifest, row checks, conversion into :mod:`reader.data.layout`'s memory-mapped arrays), done at
once, so that training starts on a warm cache. Prints the cache directory, the layouts built
(0 when every one was already there), their size and the time taken, as JSON.

Example::

    python -m reader.prepare out/sample
    python -m reader.prepare s3://bucket/shards --cache-dir /scratch/token-windows
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from reader.data.dataset import WindowDataset
from transforms.json_fields import JsonObject

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> JsonObject:
    """Prepare the dataset named on the command line; returns (and prints) the report."""
    p = argparse.ArgumentParser(prog="python -m reader.prepare", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("path", help="a finished output directory or URI (s3://, gs://, file://)")
    p.add_argument("--cache-dir", default=None,
                   help="where the layouts go (default: $TOKEN_WINDOWS_CACHE, else "
                        "$XDG_CACHE_HOME/token-windows or ~/.cache/token-windows)")
    p.add_argument("--verify", action="store_true",
                   help="verify every shard at open as WindowDataset(verify=True) does (SHA-256, "
                        "footers, page checksums, BOS/EOS) and hash every cached layout file")
    args = p.parse_args(argv)
    ds = WindowDataset(args.path, args.verify, cache_dir=args.cache_dir)
    report = {"path": ds.path, "windows": len(ds), "fingerprint": ds.fingerprint,
              **ds.prepare()}
    report["seconds"] = round(report["seconds"], 3)
    print(json.dumps(report))
    return report


def _command() -> int:
    """``python -m reader.prepare``: a refused dataset is one line naming it, exit status 2."""
    try:
        main()
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(_command())
