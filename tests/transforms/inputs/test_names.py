"""`transforms.inputs.names`: a matched file's id prefix and how a path is shown
(docs/format.md#documents)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from transforms.inputs.names import (
    common_base,
    disambiguated_name,
    pattern_base,
    relative_name,
    shown_name,
)


def test_pattern_base_and_relative_names():
    assert pattern_base("gs://b/corpus/*/part-*.jsonl.gz") == "gs://b/corpus/"
    assert pattern_base("/data/one.jsonl") == "/data/"
    assert pattern_base("/data/[ab].jsonl") == "/data/"
    assert pattern_base("rel.jsonl") == ""
    assert relative_name("gs://b/corpus/x/part-1.jsonl.gz", "gs://b/corpus/") == (
        "x/part-1.jsonl.gz"
    )
    assert relative_name("/other/place/f.jsonl", "/data/") == "f.jsonl"


def test_names_that_are_not_utf8_are_shown_escaped():
    raw = b"caf\xe9.jsonl".decode("utf-8", "surrogateescape")
    assert shown_name(raw) == "caf\\xe9.jsonl"
    assert relative_name("/data/" + raw, "/data/") == "caf\\xe9.jsonl"
    assert shown_name("道.txt") == "道.txt"


def test_files_of_the_same_relative_name_stay_apart():
    bases = ["c/en/", "c/zh/"]
    assert common_base(bases) == "c/"
    assert disambiguated_name("c/en/part-0.jsonl", bases) == "en/part-0.jsonl"
    assert disambiguated_name("c/zh/part-0.jsonl", bases) == "zh/part-0.jsonl"
    assert common_base(["a/", "b/"]) == "" and disambiguated_name("a/x", ["a/", "b/"]) == "a/x"


_PART = st.text(st.characters(blacklist_characters="/*?[\0", blacklist_categories=("Cs",)),
                min_size=1, max_size=8)


@given(dirs=st.lists(_PART, max_size=3), rest=st.lists(_PART, min_size=1, max_size=3))
def test_a_file_under_its_pattern_s_base_is_named_by_its_path_below_it(dirs, rest):
    base = "".join(f"{d}/" for d in ["gs:", "", "bucket", *dirs])
    assert pattern_base(base + "*/" + rest[-1]) == base
    assert relative_name(base + "/".join(rest), base) == "/".join(rest)


def test_files_sharing_a_name_are_told_apart_and_a_file_is_read_as_its_first_pattern():
    from transforms.inputs.names import chosen_match, distinct_names

    bases = ["c/en/", "c/zh/"]
    # Two files, one name: both renamed from the common base; one file twice: kept.
    assert distinct_names([("c/en/a", (0, "a", 1, None)), ("c/zh/a", (1, "a", 2, None))],
                          bases) == [("c/en/a", (0, "en/a", 1, None)),
                                     ("c/zh/a", (1, "zh/a", 2, None))]
    assert distinct_names([("c/en/a", (0, "a", 1, None)), ("c/en/a", (1, "a", 1, None))],
                          bases) == [("c/en/a", (0, "a", 1, None)), ("c/en/a", (1, "a", 1, None))]
    assert chosen_match([(1, "a", 1, 5.0), (0, "b", 1, None), (0, "a", 1, 7.0)]) == (
        0, "a", 1, 7.0)
