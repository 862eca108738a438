"""The dedup pass's band keys (`transforms.band_keys`): equal exactly when a band's values are."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.band_keys import band_key_matrix
from transforms.dedup import DedupSpec


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=6, max_size=6), min_size=1, max_size=30))
def test_band_keys_are_equal_exactly_when_the_band_values_are(rows):
    # Few distinct values, so that equal bands are common; 3 bands of 2 rows.
    spec = DedupSpec(mode="near", bands=3, rows=2)
    sigs = np.array(rows, np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    keys = band_key_matrix(sigs, spec)
    assert keys.shape == (len(rows), 3)
    for i in range(len(rows)):
        for j in range(len(rows)):
            for b in range(3):
                same = rows[i][2 * b: 2 * b + 2] == rows[j][2 * b: 2 * b + 2]
                assert (keys[i, b].tobytes() == keys[j, b].tobytes()) == same
    # A band's key never equals another band's, even for equal values.
    flat = np.zeros((1, 6), np.uint64)
    k = band_key_matrix(flat, spec)
    assert len({k[0, b].tobytes() for b in range(3)}) == 3
