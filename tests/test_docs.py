"""Every ```python block of README.md and docs/*.md runs, as written.

The blocks of one file run in order in one namespace (a later block uses what an earlier one
defined), in a scratch directory holding ``out/sample`` (the README's sample job, run once per
session) and ``samples/`` (the repository's samples). A block that cannot run here as written
(it names a bucket, or the datasets of jobs over a corpus that is not shipped) is preceded by
an HTML comment that says why, on the line just above its fence::

    <!-- not run: it needs an S3 endpoint and credentials -->

Such blocks are listed in the test's output; every other block runs. Files are found when the
test runs, so a new page under docs/ is covered without a change here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<why>\S.*?)\s*-->\s*$")
SAMPLE_JOB = ["--input", "samples/corpus/*.jsonl", "--tokenizer", "samples/spm.model",
              "--id-field", "id", "--window", "512", "--output", "out/sample"]


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language, first line number (1-based) and source."""

    language: str
    line: int
    source: str
    not_run: str | None  # the reason given just above the fence, if any


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, in order (nested fences are not followed)."""
    out: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m["fence"], m["info"].strip()
        why = NOT_RUN.match(lines[i - 1]) if i else None
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence[0] * len(fence))
                                      and lines[j].strip().strip(fence[0]) == ""):
            body.append(lines[j][len(m["indent"]):] if lines[j].startswith(m["indent"])
                        else lines[j])
            j += 1
        language = info.split()[0].lower() if info else ""
        out.append(Block(language, i + 2, "\n".join(body) + "\n",
                         why["why"] if why else None))
        i = j + 1
    return out


def pages() -> list[Path]:
    return [p for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))] if p.exists()]


def python_blocks(page: Path) -> list[Block]:
    return [b for b in blocks(page.read_text(encoding="utf-8")) if b.language in ("python", "py")]


@pytest.fixture(scope="session")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with ``samples`` (a link to the repository's) and ``out/sample`` (the sample
    job's dataset, written once)."""
    root = tmp_path_factory.mktemp("docs")
    (root / "samples").symlink_to(REPO / "samples")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "pipeline", *SAMPLE_JOB], cwd=root, env=env,
                   check=True, capture_output=True, timeout=900)
    return root


def test_the_block_finder() -> None:
    text = ("intro\n```python\nx = 1\n```\n<!-- not run: needs a bucket -->\n```python\n"
            "open('s3://b')\n```\n  ```bash\n  ls\n  ```\n````markdown\n```python\n"
            "not a block\n```\n````\n")
    found = blocks(text)
    assert [(b.language, b.line, b.source, b.not_run) for b in found] == [
        ("python", 3, "x = 1\n", None),
        ("python", 7, "open('s3://b')\n", "needs a bucket"),
        ("bash", 10, "ls\n", None),
        ("markdown", 13, "```python\nnot a block\n```\n", None),
    ]


@pytest.mark.slow  # `scratch` runs the sample job as a subprocess; blocks run jobs and train
@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_python_block_runs(page: Path, scratch: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    found = python_blocks(page)
    if not found:
        pytest.skip(f"{page.name} has no python block")
    monkeypatch.chdir(scratch)
    monkeypatch.syspath_prepend(str(REPO))
    namespace: dict = {"__name__": "__docs__"}
    skipped = []
    for block in found:
        where = f"{page.relative_to(REPO)}:{block.line}"
        if block.not_run is not None:
            skipped.append(f"{where} ({block.not_run})")
            continue
        try:
            code = compile(block.source, where, "exec")
            exec(code, namespace)
        except BaseException as e:  # noqa: BLE001 - any failure of a block fails the page
            pytest.fail(f"the python block at {where} fails:\n{block.source}\n"
                        + "".join(traceback.format_exception(e)), pytrace=False)
    for line in skipped:
        print(f"not run: {line}")
