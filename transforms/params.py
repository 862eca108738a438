"""Validated, frozen parameter objects: the pure code never sees argparse.

Every check runs at construction, so a bad flag fails before any pipeline work starts,
with a message of the form "`stride` must be a positive integer, but got 0".
"""

from __future__ import annotations

import dataclasses
from typing import Any

from transforms.json_fields import JsonObject

__all__ = [
    "FORMATS",
    "OFFSETS",
    "SCORES",
    "TAILS",
    "UTF8_POLICIES",
    "ReadSpec",
    "WindowSpec",
    "check_positive_int",
    "default_of",
]

TAILS = ("keep", "drop", "trace_back")
SCORES = ("all", "new")
OFFSETS = ("zero", "random")
FORMATS = ("text", "lines", "jsonl", "parquet")
UTF8_POLICIES = ("replace", "reject")

_UINT64 = 1 << 64
# Window origins, lengths and strides are int64 in the planning arithmetic and the shards
# (`transforms.plan.windows`, the ``start`` column): a larger value cannot be stored.
_INT64 = 1 << 63


def check_positive_int(name: str, value: Any) -> None:
    """Raise ``ValueError("`name` must be a positive integer, but got …")`` unless it is one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, but got {value!r}")


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {', '.join(choices)}, but got {value!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowSpec:
    """How each document is cut into windows (docs/format.md#windows).

    Attributes:
        window: W, the most pairs in a window (the model's input length T).
        stride: S, the distance between the origins of consecutive full windows.
        tail: what to do when fewer than W pairs remain: keep, drop or trace_back.
        min_tail: with tail=keep, the shortest tail that is kept.
        score: all (every target of every window scored) or new (only targets no earlier
            window of the document scored).
        offset: zero, or random (a seeded first origin per document).
        seed: seeds the random offsets and the document shuffle keys.
    """

    window: int
    stride: int
    tail: str = "keep"
    min_tail: int = 1
    score: str = "all"
    offset: str = "zero"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("window", "stride", "min_tail"):
            check_positive_int(name, getattr(self, name))
            if getattr(self, name) >= _INT64:
                raise ValueError(f"`{name}` must be a positive integer below 2**63, but got "
                                 f"{getattr(self, name)}")
        _choice("tail", self.tail, TAILS)
        _choice("score", self.score, SCORES)
        _choice("offset", self.offset, OFFSETS)
        if self.min_tail > self.window:
            raise ValueError(
                f"`min_tail` must be at most `window` ({self.window}), but got {self.min_tail}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"`seed` must be an integer, but got {self.seed!r}")
        if not 0 <= self.seed < _UINT64:
            raise ValueError(f"`seed` must be in [0, 2**64), but got {self.seed}")

    def to_json(self) -> JsonObject:
        """The manifest's ``windows`` object."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadSpec:
    """How input records become documents (docs/format.md#documents).

    Attributes:
        format: text (one document per file), lines (one per line), jsonl or parquet; None
            picks by file extension.
        text_field: the JSON key / Parquet column holding the text.
        id_field: the JSON key / Parquet column holding the document id; None derives the id
            from the file and the record's position.
        keep_empty: keep empty documents (they still have their BOS → EOS pair).
        invalid_utf8: replace undecodable bytes with U+FFFD (counted) or reject the record.
        max_doc_bytes: a document whose UTF-8 text is longer is rejected as ``too_large``.
    """

    format: str | None = None
    text_field: str = "text"
    id_field: str | None = None
    keep_empty: bool = False
    invalid_utf8: str = "replace"
    max_doc_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        if self.format is not None:
            _choice("format", self.format, FORMATS)
        _choice("invalid_utf8", self.invalid_utf8, UTF8_POLICIES)
        if not self.text_field:
            raise ValueError("`text_field` must be a non-empty string, but got ''")
        if self.id_field == "":
            raise ValueError("`id_field` must be a non-empty string or unset, but got ''")
        check_positive_int("max_doc_bytes", self.max_doc_bytes)

    def to_json(self) -> JsonObject:
        """The manifest's ``reading`` object."""
        return dataclasses.asdict(self)


def default_of(spec: type, name: str) -> Any:
    """The default of a spec's field: the one place a default is written (the CLI asks here)."""
    for field in dataclasses.fields(spec):
        if field.name == name:
            if field.default is dataclasses.MISSING:
                raise KeyError(f"{spec.__name__}.{name} has no default")
            return field.default
    raise KeyError(f"{spec.__name__} has no field {name!r}")
