"""`transforms.inputs.receipts`: every input read exactly once, as matched
(docs/running.md#bad-input)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transforms.inputs.receipts import Receipt, account_inputs


def test_account_inputs_checks_every_file_is_read_exactly_once():
    pieces = [Receipt(path="a", size=10, extent=10, start=0, end=4, records=3),
              Receipt(path="a", size=10, extent=10, start=4, end=10, records=2),
              Receipt(path="p", size=99, extent=3, start=0, end=3, records=7)]
    assert account_inputs(pieces, {"a": 10, "p": 99}) == 12
    assert account_inputs(list(reversed(pieces)), None) == 12
    with pytest.raises(RuntimeError, match=r"a: the range \[4, 10\) was never read"):
        account_inputs(pieces[:1], None)
    with pytest.raises(RuntimeError, match=r"the range \[0, 4\) was read twice"):
        account_inputs([*pieces, pieces[0]], None)
    with pytest.raises(RuntimeError, match=r"a: the range \[0, 4\) was never read"):
        account_inputs(pieces[1:], None)
    with pytest.raises(RuntimeError, match=r"1 input files were never read \(e.g. b\)"):
        account_inputs(pieces, {"a": 10, "p": 99, "b": 5})
    with pytest.raises(RuntimeError, match="inputs changed while the job ran"):
        account_inputs(pieces, {"a": 10})
    with pytest.raises(RuntimeError, match="input file a changed while the job ran"):
        account_inputs(pieces, {"a": 11, "p": 99})
    with pytest.raises(RuntimeError, match="input file a changed while the job ran"):
        account_inputs([pieces[0], dataclasses.replace(pieces[1], size=11, extent=11)], None)
    # Same size, another modification time than at launch: changed too.
    stamped = Receipt(path="c", size=5, extent=5, start=0, end=5, records=7, mtime=2.0)
    assert account_inputs([stamped], {"c": (5, 2.0)}) == 7
    with pytest.raises(RuntimeError, match="input file c changed while the job ran"):
        account_inputs([stamped], {"c": (5, 1.0)})


@st.composite
def _tiling(draw):
    """A file of ``extent`` cut into consecutive receipts, with records per receipt."""
    extent = draw(st.integers(1, 200))
    cuts = sorted(draw(st.sets(st.integers(1, extent - 1), max_size=8))) if extent > 1 else []
    bounds = [0, *cuts, extent]
    records = draw(st.lists(st.integers(0, 50), min_size=len(bounds) - 1,
                            max_size=len(bounds) - 1))
    return extent, [Receipt(path="f", size=extent, extent=extent, start=a, end=b, records=r)
                    for a, b, r in zip(bounds[:-1], bounds[1:], records, strict=True)]


@given(tiling=_tiling(), order=st.randoms(use_true_random=False), data=st.data())
def test_a_tiling_in_any_order_counts_its_records_and_a_lost_or_repeated_piece_fails(
        tiling, order, data):
    extent, pieces = tiling
    shuffled = list(pieces)
    order.shuffle(shuffled)
    assert account_inputs(shuffled, {"f": extent}) == sum(r.records for r in pieces)
    k = data.draw(st.integers(0, len(pieces) - 1))
    if len(pieces) > 1:
        with pytest.raises(RuntimeError, match="was never read"):
            account_inputs(shuffled[:k] + shuffled[k + 1:], None)
    with pytest.raises(RuntimeError, match="was read twice"):
        account_inputs([*shuffled, pieces[k]], None)
