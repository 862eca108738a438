"""`reader.tools.plot`: ``inspect --plot``'s four panels of a dataset's distributions."""

from __future__ import annotations

import struct
import sys

import pytest

from reader.tools.inspect import open_dataset, summarize
from reader.tools.plot import plot
from transforms.params import WindowSpec
from transforms.testing import write_dataset

pytest.importorskip("matplotlib", reason="--plot needs matplotlib (the plot extra)")


def dataset(root) -> None:
    # Documents of 13 and 6 tokens (P = 12 and 5), W = 4, S = 2: windows of lengths
    # 4, 4, 4, 4, 4 (starts 0..8) and 4, 3 (starts 0, 2, the tail kept).
    write_dataset(root, [("a", [256, *range(11), 257]), ("b", [256, 1, 2, 3, 4, 257])],
                  windows=WindowSpec(window=4, stride=2, score="new"))


def test_one_png_of_1100_by_750_pixels(tmp_path):
    dataset(tmp_path / "ds")
    ds = open_dataset(str(tmp_path / "ds"))
    plot(ds, summarize(ds), str(tmp_path / "d.png"))
    png = (tmp_path / "d.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    assert struct.unpack(">II", png[16:24]) == (1100, 750)


def test_the_panels_hold_the_datasets_values(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    dataset(tmp_path / "ds")
    ds = open_dataset(str(tmp_path / "ds"))
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot(ds, summarize(ds), str(tmp_path / "d.png"))
    (fig,) = figures
    lengths = ds.column("length").tolist()
    assert fig._suptitle.get_text() == (
        f"{tmp_path / 'ds'}: 2 documents, {len(lengths)} windows, 17 corpus pairs, overlap "
        f"×{summarize(ds)['summary']['overlap_factor']:.2f}")
    docs, windows, padding, targets = fig.axes
    assert docs.get_title() == "document tokens M (per document)"
    assert sum(p.get_height() for p in docs.patches) == 2  # one count per document
    # Window lengths: a histogram of one bin per length 1..W.
    heights = [p.get_height() for p in windows.patches]
    assert heights == [lengths.count(n) for n in range(1, 5)]
    # Padding by batch size: none in batches of one window.
    (line,) = padding.get_lines()
    assert list(line.get_xdata()) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert line.get_ydata()[0] == 0
    assert targets.get_legend_handles_labels()[1] == ["targets held", "scored"]


def test_without_matplotlib_it_says_which_extra_to_install(tmp_path, monkeypatch):
    dataset(tmp_path / "ds")
    ds = open_dataset(str(tmp_path / "ds"))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ValueError, match=r"^--plot needs matplotlib: pip install "
                                         r"'token-windows\[plot\]'$"):
        plot(ds, summarize(ds), str(tmp_path / "d.png"))
    assert not (tmp_path / "d.png").exists()
