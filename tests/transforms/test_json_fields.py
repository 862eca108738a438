"""`transforms.json_fields`: a JSON object read value by value, each checked, every failure
naming the file, the key and the value (docs/format.md#the-manifest)."""

from __future__ import annotations

import pytest

from transforms.json_fields import Fields


def test_values_are_taken_checked():
    f = Fields({"n": 3, "s": "x", "h": "ab" * 32, "c": {"empty": 2}, "f": 0.5}, "obj", "m.json")
    assert (f.count("n"), f.text("s"), f.sha256("h"), f.counts("c"), f.fraction("f")) == (
        3, "x", "ab" * 32, {"empty": 2}, 0.5)
    assert f.count("absent", 0, None) is None


@pytest.mark.parametrize(("value", "take", "message"), [
    ({"n": True}, lambda f: f.count("n"), "m.json: obj.n must be a non-negative integer, but "
                                         "got True; the dataset is damaged"),
    ({"n": 0}, lambda f: f.count("n", 1), "obj.n must be a positive integer, but got 0"),
    ({}, lambda f: f.count("n"), "m.json lacks the key obj.n"),
    ({"s": None}, lambda f: f.text("s"), "obj.s must be a string, but got None"),
    ({"s": "z"}, lambda f: f.text("s", choices=("a",)), r"obj.s must be one of \('a',\)"),
    ({"h": "AB" * 32}, lambda f: f.sha256("h"), "obj.h must be 64 lowercase hex digits"),
    ({"c": {"x": -1}}, lambda f: f.counts("c"), "obj.c.x must be a non-negative integer"),
    ({"f": 0}, lambda f: f.fraction("f"), r"obj.f must be a number in \(0, 1\], but got 0"),
])
def test_a_wrong_value_is_named_with_the_file_and_the_key(value, take, message):
    with pytest.raises(ValueError, match=message):
        take(Fields(value, "obj", "m.json"))


def test_only_an_object_has_fields():
    with pytest.raises(ValueError, match=r"m.json: obj must be an object, but got \[1\]"):
        Fields([1], "obj", "m.json")
