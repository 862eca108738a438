"""What a mixture would draw, from the sources' manifests alone (no torch, no shard read):
``python -m reader.inspect web=out/web code=out/code --mix web=0.7,code=0.3``.

For weights ``w_d`` and a budget of N scored targets (``--tokens``; default: the sources'
targets together, one pass over the union), a mixture counting ``windows`` draws the share
``w_d`` of the windows, V of them in all where ``Σ w_d·V·m_d = N`` (``m_d`` is source d's
mean scored targets per window); counting ``targets``, it draws ``w_d·N`` targets of source d.
Each source's **epochs** are its windows drawn over its windows: how many times each of its
windows is seen (0.5: half of it; 3.0: every window three times).

Example: sources a (10 windows, 40 targets) and b (10 windows, 10 targets), weights 1:1 by
windows, N = 50 → V = 50 / (½·4 + ½·1) = 20 windows: a draws 10 (1.0 epoch, 40 targets), b
draws 10 (1.0 epoch, 10 targets).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Mapping

from reader.data.opening import open_files
from reader.data.regular import masked
from reader.mixture.blend import normalise_weights
from transforms.dataset.manifest import Manifest, TokenizerInfo
from transforms.json_fields import JsonObject

__all__ = ["TOKENIZER_KEYS", "MixtureReport", "SourceDraw", "check_compatible",
           "mixture_report", "parse_mix", "run_mix"]

TOKENIZER_KEYS = ("kind", "vocab_size", "bos_id", "eos_id", "sha256")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourceDraw:
    """One source of a `MixtureReport`: its weight (normalised), one epoch of it (windows,
    scored targets), and what the mixture draws of it (``epochs``: windows drawn over its
    windows)."""

    weight: float
    windows: int
    targets: int
    windows_drawn: float
    targets_drawn: float
    epochs: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class MixtureReport:
    """What a mixture would draw (`mixture_report`): by ``unit`` (``"windows"`` or
    ``"targets"``), ``tokens`` scored targets in all, per source in the sources' order."""

    unit: str
    tokens: int
    sources: dict[str, SourceDraw]

    def to_json(self) -> JsonObject:
        """The report as ``inspect --mix --json`` prints it."""
        return dataclasses.asdict(self)


def check_compatible(sources: Mapping[str, tuple[TokenizerInfo, int]]) -> None:
    """Refuse sources whose tokenizer (kind, vocabulary, BOS, EOS, model SHA-256) or window
    differ, naming both sources and both values (``sources``: name → (its manifest's
    tokenizer, its window))."""
    names = list(sources)

    def described(name: str) -> list[tuple[str, object]]:
        tokenizer, window = sources[name]
        return [*((f"tokenizer {k}", getattr(tokenizer, k)) for k in TOKENIZER_KEYS),
                ("window", int(window))]

    reference = described(names[0])
    for name in names[1:]:
        for (what, value), (_, mine) in zip(reference, described(name), strict=True):
            if mine != value:
                raise ValueError(
                    f"sources {names[0]!r} and {name!r} differ in their {what}: {value!r} vs "
                    f"{mine!r}; a mixture needs one tokenizer and one window (prepare "
                    "every source with the same --tokenizer and --window)")


def mixture_report(counts: Mapping[str, tuple[int, int]], weights: Mapping[str, float], *,
                   tokens: int | None = None, unit: str = "windows") -> MixtureReport:
    """Per source: its weight, windows and targets per epoch, and what N targets draw.

    Args:
        counts: name → (windows, scored targets) of one epoch of the source.
        weights: name → weight (normalised; missing names weigh 0).
        tokens: N, the scored targets drawn in all (default: Σ of the sources' targets).
        unit: ``"windows"`` or ``"targets"``, as ``MixtureSampler``'s ``unit``.
    """
    names = list(counts)
    w = normalise_weights(weights, names)
    budget = sum(t for _, t in counts.values()) if tokens is None else int(tokens)
    if unit == "windows":
        per_window = sum(float(w[n]) * counts[n][1] / counts[n][0] for n in names)
        drawn = {n: float(w[n]) * budget / per_window for n in names}
    elif unit == "targets":
        drawn = {n: float(w[n]) * budget * counts[n][0] / counts[n][1] for n in names}
    else:
        raise ValueError(f"`unit` must be 'windows' or 'targets', but got {unit!r}")
    sources = {}
    for n in names:
        windows, targets = counts[n]
        sources[n] = SourceDraw(weight=float(w[n]), windows=windows, targets=targets,
                                windows_drawn=round(drawn[n], 1),
                                targets_drawn=round(drawn[n] * targets / windows, 1),
                                epochs=round(drawn[n] / windows, 4))
    return MixtureReport(unit=unit, tokens=budget, sources=sources)


def parse_mix(text: str) -> dict[str, float]:
    """``"web=0.7,code=0.3"`` → ``{"web": 0.7, "code": 0.3}``.

    Raises:
        ValueError: an item that is not NAME=NUMBER.
    """
    out: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ValueError(f"--mix must be NAME=WEIGHT,… (e.g. web=0.7,code=0.3), but got "
                             f"{item!r}")
    return out


def _read_manifest(root: str) -> Manifest:
    # The readers' one open path: the same checks and messages as WindowDataset's.
    return open_files(root).manifest


def run_mix(outputs: list[str], mix: str | None, *, tokens: float | None, unit: str,
            as_json: bool) -> int:
    """``inspect`` on several datasets (``NAME=PATH`` or ``PATH``, named by its last
    directory) with ``--mix``: prints the report; returns the exit status (2: refused)."""
    try:
        if tokens is not None and not (math.isfinite(tokens) and 1 <= tokens < 2**63):
            raise ValueError(f"--tokens must be a finite number of scored targets from 1 to "
                             f"2**63 - 1 (e.g. 1e12), but got {tokens!r}")
        named: dict[str, str] = {}
        for item in outputs:
            name, sep, path = item.partition("=")
            if not sep:
                name, path = os.path.basename(item.rstrip("/")), item
            if name in named:
                raise ValueError(f"two datasets are named {name!r}; name them NAME=PATH")
            named[name] = path
        if mix is None:
            raise ValueError("several datasets need --mix NAME=WEIGHT,… (what to mix)")
        manifests = {name: _read_manifest(path) for name, path in named.items()}
        check_compatible({n: (m.tokenizer, m.windows.window) for n, m in manifests.items()})
        counts = {n: (m.counts.windows, m.counts.scored_targets) for n, m in manifests.items()}
        empty = [n for n, (w, _) in counts.items() if w == 0]
        if empty:
            raise ValueError(f"source {empty[0]!r} holds no window")
        report = mixture_report(counts, parse_mix(mix),
                                tokens=None if tokens is None else int(tokens), unit=unit)
    except (ValueError, OSError) as e:
        print(f"error: {masked(str(e))}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
        return 0
    print(f"mixture by {report.unit} over {report.tokens:,} scored targets\n")
    print(f"{'source':<12}{'weight':>8}{'windows':>14}{'targets':>16}{'windows drawn':>16}"
          f"{'targets drawn':>16}{'epochs':>9}")
    for name, s in report.sources.items():
        print(f"{name:<12}{s.weight:>8.3f}{s.windows:>14,}{s.targets:>16,}"
              f"{s.windows_drawn:>16,.0f}{s.targets_drawn:>16,.0f}{s.epochs:>9.2f}")
    print("\nepochs: how many times each window of the source is drawn (its windows drawn / "
          "its windows)")
    return 0
