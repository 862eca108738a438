"""Every link between the docs, and every ``docs/<page>.md#anchor`` that code and tests cite,
leads to a page and a heading that exist; nothing cites a document that is not in the
repository."""

from __future__ import annotations

import pathlib
import re
from collections import Counter

import pytest

from tests.common.paths import ROOT

DOCS = ROOT / "docs"
MARKDOWN = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
SOURCES = sorted(p for d in ("transforms", "pipeline", "reader", "tests", "bench", "examples")
                 for p in (ROOT / d).rglob("*.py"))

# References to documents outside the repository, and words about where the code is built.
# (Spelled in pieces so that this file does not match itself.)
FORBIDDEN = [
    re.compile("SP" + r"EC\s*§"), re.compile(r"\b[Ss]eeds?\s+00[0-9]"),
    re.compile(r"\b[Ii]ssue\s+#?\d"), re.compile("STY" + r"LE\.md"),
    re.compile("this project's " + "machines"), re.compile(r"\bour " + "CI"),
    re.compile("unreachable " + "here"), re.compile("untested " + "here"),
]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
    """Every heading anchor of a Markdown page (repeated headings get -1, -2 …)."""
    seen: Counter[str] = Counter()
    out = set()
    fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"#{1,6} (.+)", line)
        if m:
            s = slug(m.group(1))
            out.add(s if not seen[s] else f"{s}-{seen[s]}")
            seen[s] += 1
    return out


def test_slug_is_github_s():
    assert slug("Memory on one machine: the file shuffle") == (
        "memory-on-one-machine-the-file-shuffle")
    assert slug("`collate`") == "collate"
    assert slug("Object stores: S3, S3-compatible, GCS") == "object-stores-s3-s3-compatible-gcs"
    assert slug("The [format](format.md)") == "the-format"


def test_anchors_counts_repeats_and_skips_code(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# A\n## B b\n```\n# not a heading\n```\n## B b\n", encoding="utf-8")
    assert anchors(page) == {"a", "b-b", "b-b-1"}


def _links(page: pathlib.Path) -> list[tuple[str, str]]:
    """(target, anchor) of every relative Markdown link of a page, outside code."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    out = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        out.append((path, anchor))
    return out


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: p.name)
def test_every_link_of_the_docs_leads_to_a_page_and_a_heading(page):
    bad = []
    for path, anchor in _links(page):
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            bad.append(f"{path}: no such file")
        elif anchor and target.exists() and target.suffix == ".md" and (
                anchor not in anchors(target)):
            bad.append(f"{path}#{anchor}: no such heading")
    assert bad == []


def test_every_docs_citation_in_the_code_leads_to_a_heading():
    cited = 0
    bad = []
    for source in SOURCES:
        for page, anchor in re.findall(r"docs/([\w-]+\.md)(?:#([\w-]+))?",
                                       source.read_text(encoding="utf-8")):
            cited += 1
            target = DOCS / page
            if not target.exists():
                bad.append(f"{source.relative_to(ROOT)}: docs/{page} does not exist")
            elif anchor and target.exists() and anchor not in anchors(target):
                bad.append(f"{source.relative_to(ROOT)}: docs/{page}#{anchor} is no heading")
    assert bad == []
    assert cited >= 20  # the modules that hold a contract cite the page that states it


@pytest.mark.parametrize("pattern", FORBIDDEN, ids=lambda p: p.pattern)
def test_nothing_cites_a_document_outside_the_repository(pattern):
    files = [*MARKDOWN, *SOURCES, ROOT / "setup.py"]
    hits = [f"{f.relative_to(ROOT)}:{n}" for f in files
            for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
            if pattern.search(line)]
    assert hits == []


# A dotted name of the project's in backticks: `transforms.plan.keys.doc_key`, ``reader.collate``,
# :class:`reader.data.dataset.WindowDataset`.
NAME = re.compile(r"`+(?::\w+:`)?((?:transforms|pipeline|reader)(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")


def _resolves(name: str) -> bool:
    """Whether a dotted name is a module of the project, or a name defined in one."""
    import importlib

    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attribute in parts[i:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@pytest.mark.slow  # imports every module the docs name, Beam's and torch's included
def test_every_module_and_name_the_docs_and_docstrings_name_exists():
    stale = sorted({f"{path.relative_to(ROOT)}: {name}"
                    for path in [*MARKDOWN, *SOURCES]
                    for name in NAME.findall(path.read_text(encoding="utf-8"))
                    if not _resolves(name)})
    assert not stale, "\n".join(stale)
