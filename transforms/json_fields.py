"""Reading JSON objects value by value, each checked as it is taken (the manifest's parser).

Every failure is a ``ValueError`` naming the file, the key and the value, e.g.
``out/_manifest.json: shards[0].rows must be a non-negative integer, but got -1; the dataset
is damaged``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from transforms.errors import DamagedDataset

__all__ = ["SHA256", "Fields", "JsonObject", "JsonValue"]

# What json.loads returns and json.dumps takes: the type of a record's ``to_json``.
JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]
JsonObject = dict[str, JsonValue]

SHA256 = re.compile(r"^[0-9a-f]{64}$")

_REQUIRED = object()


class Fields:
    """The values of one JSON object of a manifest, each checked as it is taken."""

    def __init__(self, value: object, name: str, where: str) -> None:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: {name} must be an object, but got {value!r}")
        self.value, self.name, self.where = value, name, where

    def fail(self, key: str, problem: str) -> DamagedDataset:
        name = f"{self.name}.{key}" if self.name else key
        return DamagedDataset(f"{self.where}: {name} {problem}; the dataset is damaged")

    def get(self, key: str) -> Any:
        if key not in self.value:
            raise ValueError(f"{self.where} lacks the key {self.name}.{key}; the dataset is "
                             "damaged")
        return self.value[key]

    def count(self, key: str, least: int = 0, default: Any = _REQUIRED) -> Any:
        """A JSON integer of at least ``least`` (never a bool); ``default`` if absent."""
        if key not in self.value and default is not _REQUIRED:
            return default
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            kind = "a positive" if least == 1 else "a non-negative"
            raise self.fail(key, f"must be {kind} integer, but got {value!r}")
        return value

    def fraction(self, key: str) -> float:
        """A JSON number in (0, 1]."""
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
            raise self.fail(key, f"must be a number in (0, 1], but got {value!r}")
        return value

    def text(self, key: str, *, null: bool = False, choices: Sequence[str] = ()) -> Any:
        value = self.get(key)
        if value is None and null:
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string{' or null' if null else ''}, but got "
                                 f"{value!r}")
        if choices and value not in choices:
            raise self.fail(key, f"must be one of {tuple(choices)}, but got {value!r}")
        return value

    def sha256(self, key: str, *, null: bool = False) -> Any:
        value = self.text(key, null=null)
        if value is not None and not SHA256.match(value):
            raise self.fail(key, f"must be 64 lowercase hex digits (a SHA-256), but got "
                                 f"{value!r}")
        return value

    def counts(self, key: str) -> dict[str, int]:
        """An object of counts ({reason: n})."""
        inner = Fields(self.get(key), f"{self.name}.{key}" if self.name else key, self.where)
        return {k: inner.count(k) for k in inner.value}
