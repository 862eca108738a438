"""`transforms.params`: every bad parameter is refused at construction, naming it
(docs/architecture.md#invariants)."""

from __future__ import annotations

import pytest

from transforms.params import ReadSpec, WindowSpec, check_positive_int, default_of


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window": 0, "stride": 1}, "`window` must be a positive integer, but got 0"),
        ({"window": 4, "stride": 0}, "`stride` must be a positive integer, but got 0"),
        ({"window": 4, "stride": True}, "`stride` must be a positive integer, but got True"),
        ({"window": 4.0, "stride": 4}, "`window` must be a positive integer, but got 4.0"),
        ({"window": True, "stride": 4}, "`window` must be a positive integer, but got True"),
        ({"window": 4, "stride": 4, "min_tail": 5},
         r"`min_tail` must be at most `window` \(4\), but got 5"),
        ({"window": 4, "stride": 4, "tail": "pad"},
         "`tail` must be one of keep, drop, trace_back, but got 'pad'"),
        ({"window": 4, "stride": 4, "score": "some"}, "`score` must be one of all, new"),
        ({"window": 4, "stride": 4, "offset": "left"}, "`offset` must be one of zero, random"),
        ({"window": 4, "stride": 4, "offset": "half"}, "`offset` must be one of zero, random"),
        ({"window": 4, "stride": 4, "seed": -1}, r"`seed` must be in \[0, 2\*\*64\), but got -1"),
        ({"window": 4, "stride": 4, "seed": 1 << 64}, r"`seed` must be in \[0, 2\*\*64\)"),
        ({"window": 4, "stride": 4, "seed": "7"}, "`seed` must be an integer, but got '7'"),
        # Origins and strides are int64 where windows are planned and stored.
        ({"window": 1 << 63, "stride": 4},
         r"`window` must be a positive integer below 2\*\*63, but got 9223372036854775808"),
        ({"window": 4, "stride": 1 << 63},
         r"`stride` must be a positive integer below 2\*\*63, but got 9223372036854775808"),
        ({"window": 4, "stride": 10**30},
         r"`stride` must be a positive integer below 2\*\*63, but got 10{30}"),
    ],
)
def test_window_spec_refuses(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WindowSpec(**kwargs)


def test_the_largest_storable_window_and_stride_are_accepted():
    top = (1 << 63) - 1
    assert WindowSpec(window=top, stride=top, min_tail=top).stride == top


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"format": "csv"}, "`format` must be one of text, lines, jsonl, parquet, but got 'csv'"),
        ({"invalid_utf8": "drop"}, "`invalid_utf8` must be one of replace, reject"),
        ({"text_field": ""}, "`text_field` must be a non-empty string, but got ''"),
        ({"id_field": ""}, "`id_field` must be a non-empty string or unset, but got ''"),
        ({"max_doc_bytes": 0}, "`max_doc_bytes` must be a positive integer, but got 0"),
    ],
)
def test_read_spec_refuses(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ReadSpec(**kwargs)


def test_specs_are_frozen_keyword_only_and_serialise_every_field():
    spec = WindowSpec(window=8, stride=4, seed=3)
    with pytest.raises(TypeError):
        WindowSpec(8, 4)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        spec.window = 9  # type: ignore[misc]
    assert spec.to_json() == {"window": 8, "stride": 4, "tail": "keep", "min_tail": 1,
                              "score": "all", "offset": "zero", "seed": 3}
    assert ReadSpec().to_json() == {"format": None, "text_field": "text", "id_field": None,
                                    "keep_empty": False, "invalid_utf8": "replace",
                                    "max_doc_bytes": 64 << 20}


def test_one_positive_integer_check_and_one_place_for_defaults():
    check_positive_int("n", 1)
    for bad in (0, -3, True, 1.5, "2", None):
        with pytest.raises(ValueError, match=f"`n` must be a positive integer, but got {bad!r}"):
            check_positive_int("n", bad)
    assert default_of(WindowSpec, "tail") == "keep"
    assert default_of(ReadSpec, "max_doc_bytes") == 64 << 20
    with pytest.raises(KeyError, match="WindowSpec.window has no default"):
        default_of(WindowSpec, "window")
    with pytest.raises(KeyError, match="no field 'nope'"):
        default_of(ReadSpec, "nope")
