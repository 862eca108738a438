"""transforms/inputs/skipped.py: the failure policy for skipped records (--max-skipped-share)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transforms.dataset.schema import REJECT_REASONS
from transforms.inputs.documents import Reject
from transforms.inputs.skipped import FIXES, check_skipped_share


def reject(reason: str, record: str, detail: str = "why") -> Reject:
    return Reject(reason=reason, source="in.jsonl:1", detail=detail, record=record)


def test_every_reason_but_an_unreadable_record_has_a_fix() -> None:
    assert set(FIXES) == set(REJECT_REASONS) - {"unreadable_record"}


@pytest.mark.parametrize(("records", "skipped", "share"), [
    (0, {}, 0.0),                        # nothing read: nothing to judge
    (10, {}, 0.0),
    (10, {"empty": 5}, 0.5),             # exactly the share tolerated
    (10, {"empty": 3, "missing_id": 2}, 0.5),
    (10, {"empty": 9}, 0.99),
])
def test_a_share_within_the_limit_passes(records: int, skipped: dict[str, int],
                                         share: float) -> None:
    check_skipped_share(records=records, skipped=skipped, first={}, max_share=share)


def test_all_skipped_names_the_first_records_keys_and_the_fix() -> None:
    with pytest.raises(RuntimeError) as info:
        check_skipped_share(records=3, skipped={"missing_text": 3},
                            first={"missing_text": reject("missing_text", '{"body": "x"}')},
                            max_share=1.0)
    assert str(info.value) == (
        "all 3 records skipped as missing_text; the first record (in.jsonl:1) has keys body: "
        "pass --text-field naming the field that holds the text; no manifest was written")


def test_over_the_share_lists_the_reasons_most_first_and_the_detail_of_a_non_object() -> None:
    with pytest.raises(RuntimeError) as info:
        check_skipped_share(records=10, skipped={"empty": 2, "malformed_json": 4, "too_large": 0},
                            first={"malformed_json": reject("malformed_json", "not json",
                                                            detail="Expecting value")},
                            max_share=0.5)
    assert str(info.value) == (
        "6 of 10 records (60.0 %) skipped (malformed_json 4, empty 2), more than "
        "--max-skipped-share 0.5; the first record (in.jsonl:1): Expecting value: is the input "
        "JSONL? pass --format text or lines for plain text; no manifest was written")


def test_every_record_skipped_fails_even_when_the_share_allows_it() -> None:
    # A reason no flag fixes: the failed job keeps no reject file to point at.
    with pytest.raises(RuntimeError) as info:
        check_skipped_share(records=2, skipped={"unreadable_record": 2}, first={},
                            max_share=1.0)
    assert str(info.value) == (
        "all 2 records skipped as unreadable_record: a failed job keeps no reject files, and a "
        "job that skips every record fails whatever --max-skipped-share says; no manifest was "
        "written")


def test_a_reason_no_flag_fixes_says_how_to_keep_its_records() -> None:
    with pytest.raises(RuntimeError) as info:
        check_skipped_share(records=4, skipped={"unreadable_record": 3},
                            first={"unreadable_record": reject("unreadable_record", "x",
                                                               detail="TypeError: bad")},
                            max_share=0.5)
    assert str(info.value) == (
        "3 of 4 records (75.0 %) skipped as unreadable_record, more than --max-skipped-share "
        "0.5; the first record (in.jsonl:1): TypeError: bad: a failed job keeps no reject "
        "files: with --max-skipped-share 1 the job finishes and writes every such record to "
        "_rejects/unreadable_record.jsonl in --output; no manifest was written")


def test_a_tie_names_the_reason_first_in_alphabetical_order() -> None:
    with pytest.raises(RuntimeError, match=r"^all 4 records skipped \(empty 2, missing_id 2\): "
                                           r"pass --text-field naming the field with the text"):
        check_skipped_share(records=4, skipped={"missing_id": 2, "empty": 2}, first={},
                            max_share=0.0)


@given(records=st.integers(1, 1000), data=st.data(),
       share=st.floats(0, 1, allow_nan=False))
def test_it_fails_exactly_when_all_or_more_than_the_share_are_skipped(
        records: int, data: st.DataObject, share: float) -> None:
    total = data.draw(st.integers(0, records))
    fails = total == records or total > share * records
    try:
        check_skipped_share(records=records, skipped={"empty": total}, first={},
                            max_share=share)
    except RuntimeError:
        assert fails
    else:
        assert not fails
