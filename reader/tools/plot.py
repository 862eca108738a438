"""``python -m reader.inspect OUT --plot FILE.png``: the distributions as a picture.

Four panels (matplotlib, the ``plot`` extra): document tokens M, window lengths L, the padding
share of random batches by batch size, and the targets held and scored by position in the
window. Example: ``plot(ds, summarize(ds), "out.png")`` writes one PNG of 1100 × 750 pixels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from transforms.json_fields import JsonObject

if TYPE_CHECKING:
    from reader.tools.inspect import InspectedDataset

__all__ = ["plot"]


def plot(ds: InspectedDataset, summary: JsonObject, path: str) -> None:
    """Four panels: document tokens, window lengths, padding by batch size, scored share by
    position in the window.

    Raises:
        ValueError: matplotlib is not installed.
    """
    from reader.tools.inspect import padding_share as _padding_share

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ValueError("--plot needs matplotlib: pip install 'token-windows[plot]'") from e
    W = ds.windows.window
    lengths = ds.column("length").astype(np.int64)
    loss = ds.column("loss_start").astype(np.int64)
    doc_tokens = ds.column("doc_tokens")[ds.column("window_index") == 0]
    s = summary["summary"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    fig.suptitle(f"{ds.root}: {s['documents']:,} documents, {s['windows']:,} windows, "
                 f"{s['corpus_pairs']:,} corpus pairs, overlap ×{s['overlap_factor']:.2f}")

    ax = axes[0, 0]
    if len(doc_tokens):
        bins = np.geomspace(max(doc_tokens.min(), 1), max(doc_tokens.max(), 2), 40)
        ax.hist(doc_tokens, bins=bins, color="#4C72B0")
        ax.set_xscale("log")
        ax.axvline(W + 1, color="#C44E52", ls="--", label=f"W + 1 = {W + 1}")
        ax.legend()
    ax.set(title="document tokens M (per document)", xlabel="tokens (log)", ylabel="documents")

    ax = axes[0, 1]
    ax.hist(lengths, bins=min(50, W), range=(0.5, W + 0.5), color="#55A868")
    ax.set_yscale("log")
    ax.set(title="window length L (pairs)", xlabel="length", ylabel="windows (log)")

    ax = axes[1, 0]
    sizes = np.array([1, 2, 4, 8, 16, 32, 64, 128])
    ax.plot(sizes, [100 * _padding_share(lengths, int(b)) for b in sizes], marker="o",
            color="#8172B2")
    ax.set_xscale("log", base=2)
    ax.set(title="padding in random batches", xlabel="batch size", ylabel="% of positions",
           ylim=(0, None))

    ax = axes[1, 1]
    pos = np.arange(W)
    present = (lengths[None, :] > pos[:, None]).sum(axis=1) if len(lengths) * W < 5e7 else None
    if present is not None:
        scored = ((lengths[None, :] > pos[:, None]) & (loss[None, :] <= pos[:, None])).sum(axis=1)
        ax.fill_between(pos, present, color="#DD8452", alpha=0.4, label="targets held")
        ax.fill_between(pos, scored, color="#C44E52", alpha=0.8, label="scored")
        ax.legend()
    ax.set(title="targets by position in the window", xlabel="position t", ylabel="windows")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
