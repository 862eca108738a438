"""The job-failure policy for skipped records: a job whose records were (almost) all skipped
failed because of a wrong flag, not dirty data, and says which flag.

`check_skipped_share` is called by the job's last step (`pipeline.steps.finalize`) before any
manifest is written; `FIXES` maps each reject reason (`transforms.dataset.schema.REJECT_REASONS`) to
the advice printed with it.

Example: 3 records read, all skipped as ``missing_text`` → ``RuntimeError("all 3 records
skipped as missing_text; the first record (in.jsonl:1) has keys body: pass --text-field
naming the field that holds the text; no manifest was written")``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from transforms.dataset.schema import REJECTS_DIR
from transforms.inputs.documents import Reject

__all__ = ["FIXES", "check_skipped_share"]

FIXES = {
    "missing_text": "pass --text-field naming the field that holds the text",
    "text_not_string": "pass --text-field naming a field that holds a string",
    "not_an_object": "the input must hold one JSON object per line (JSONL), not a "
                     "pretty-printed array or other values",
    "malformed_json": "is the input JSONL? pass --format text or lines for plain text",
    "missing_id": "pass --id-field naming a field every record has, or drop --id-field",
    "invalid_id": "pass --id-field naming a string or integer field, or drop --id-field",
    "duplicate_id": "pass --id-field naming a field whose values are unique, or drop it",
    "empty": "pass --text-field naming the field with the text, or --keep-empty",
    "blank_line": "the input holds no records",
    "invalid_utf8": "the input is not UTF-8; convert it, or pass --invalid-utf8 replace",
    "too_large": "raise --max-doc-bytes",
    "tokenizer_error": "the tokenizer fails on these texts (its message is in each reject); "
                       "fix or replace the tokenizer, or leave the records out",
    "contaminated": "check the --decontaminate files (or raise --decontaminate-ngram)",
    "exact_duplicate": "the input holds copies of one document only",
    "near_duplicate": "the input holds near copies of one document only",
}


def _keys_of(record: str) -> str | None:
    try:
        value = json.loads(record)
    except (ValueError, RecursionError):
        return None
    return ", ".join(map(str, value)) if isinstance(value, dict) else None


def check_skipped_share(*, records: int, skipped: dict[str, int], first: Mapping[str, Reject],
                        max_share: float) -> None:
    """Fail a job whose records were (almost) all skipped: a wrong flag, not dirty data.

    Args:
        records: the records read; skipped: {reason: count}.
        first: {reason: the first `transforms.inputs.documents.Reject` of that reason}.
        max_share: the largest share of skipped records tolerated; every record skipped
            always fails (an empty dataset is never what was asked for).

    Raises:
        RuntimeError: naming the reasons, the first record (where it is, its keys) and the
            fix.
    """
    total = sum(skipped.values())
    if records == 0 or (total < records and total <= max_share * records):
        return
    reasons = {k: v for k, v in sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0])) if v}
    top = next(iter(reasons))
    if len(reasons) == 1:
        why = f"as {top}"
    else:
        why = "(" + ", ".join(f"{k} {v}" for k, v in reasons.items()) + ")"
    if total == records:
        head = f"all {records} records skipped {why}"
    else:
        head = (f"{total} of {records} records ({100 * total / records:.1f} %) skipped {why}, "
                f"more than --max-skipped-share {max_share}")
    reject = first.get(top)
    where = ""
    if reject is not None:
        keys = _keys_of(reject.record)
        where = f"; the first record ({reject.source})"
        where += f" has keys {keys}" if keys is not None else f": {reject.detail}"
    raise RuntimeError(f"{head}{where}: {_fix(top, everything=total == records)}; "
                       "no manifest was written")


def _fix(reason: str, *, everything: bool) -> str:
    """The advice for ``reason``; for one no flag fixes, where its records can be seen. A job
    that fails removes what it wrote, its reject files too (`pipeline.files.output.release`)."""
    if reason in FIXES:
        return FIXES[reason]
    if everything:
        return ("a failed job keeps no reject files, and a job that skips every record fails "
                "whatever --max-skipped-share says")
    return (f"a failed job keeps no reject files: with --max-skipped-share 1 the job finishes "
            f"and writes every such record to {REJECTS_DIR}/{reason}.jsonl in --output")
