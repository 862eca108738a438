"""The names of input files: document id prefixes and how a path is shown
(docs/format.md#documents).

A matched file's id prefix is its path relative to its pattern's base (`pattern_base`,
`relative_name`), the same on every machine; two files of one job with the same relative
name are told apart by their path from the patterns' common base (`disambiguated_name`,
`distinct_names`), and a file that several patterns match is read as the first's
(`chosen_match`): the launcher and the job's own matching step both name files by these two.
A name that is not UTF-8 is shown with its undecodable bytes escaped (`shown_name`).

Example: ``relative_name("gs://b/c/en/part-0.jsonl", pattern_base("gs://b/c/*/part-*"))``
is ``"en/part-0.jsonl"``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["Match", "chosen_match", "common_base", "disambiguated_name", "distinct_names",
           "pattern_base", "relative_name", "shown_name"]

Match = tuple[int, str, int, "float | None"]  # pattern index, name, size, mtime


def pattern_base(pattern: str) -> str:
    """The directory part of a pattern before its first glob character, with a final '/'.

    >>> pattern_base("gs://b/corpus/*/part-*.jsonl.gz")
    'gs://b/corpus/'
    """
    cut = len(pattern)
    for ch in "*?[":
        i = pattern.find(ch)
        if i != -1:
            cut = min(cut, i)
    return pattern[: pattern.rfind("/", 0, cut) + 1]


def relative_name(path: str, base: str) -> str:
    """The path of a matched file relative to its pattern's base (stable across machines).

    A name that is not valid UTF-8 (a local file name Python holds with surrogate escapes)
    is shown with its undecodable bytes escaped: ``caf\\xe9.jsonl``.
    """
    rel = path[len(base) :] if base and path.startswith(base) else path.rsplit("/", 1)[-1]
    return shown_name(rel)


def shown_name(path: str) -> str:
    """``path`` with bytes that are not UTF-8 (surrogate escapes) shown as ``\\xNN``."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def common_base(bases: Iterable[str]) -> str:
    """The longest directory prefix (ending in '/') shared by pattern bases, or ''.

    >>> common_base(["c/en/", "c/zh/"])
    'c/'
    """
    bases = list(bases)
    prefix = os.path.commonprefix(bases) if bases else ""
    return prefix[: prefix.rfind("/") + 1]


def disambiguated_name(path: str, bases: Iterable[str]) -> str:
    """The id prefix of a file whose `relative_name` is shared by another file of the job:
    its path relative to the common base of every pattern (the full path if there is none),
    so ``en/part-0.jsonl`` and ``zh/part-0.jsonl`` stay apart."""
    base = common_base(bases)
    return shown_name(path[len(base) :] if base and path.startswith(base) else path)


def distinct_names(matches: Iterable[tuple[str, Match]],
                   bases: Iterable[str]) -> list[tuple[str, Match]]:
    """The matches that share one relative name, each ``(path, match)``: where two different
    files share it (``en/part-0.jsonl`` and ``zh/part-0.jsonl`` under ``en/*`` and ``zh/*``),
    each is renamed relative to the patterns' common base; otherwise the name is kept (and
    with it its documents' ids).

    >>> distinct_names([("c/en/a", (0, "a", 1, None)), ("c/zh/a", (1, "a", 2, None))],
    ...                ["c/en/", "c/zh/"])
    [('c/en/a', (0, 'en/a', 1, None)), ('c/zh/a', (1, 'zh/a', 2, None))]
    """
    matches = list(matches)
    bases = list(bases)
    clash = len({path for path, _ in matches}) > 1
    return [(path, (index, disambiguated_name(path, bases) if clash else name, size, mtime))
            for path, (index, name, size, mtime) in matches]


def chosen_match(matches: Iterable[Match]) -> Match:
    """Of one file's matches (one per pattern that matched it), the one it is read as: the
    lowest (pattern index, name, size)."""
    return min(matches, key=lambda m: m[:3])
