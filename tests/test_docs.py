"""The documents stay documents (issue 48, item 7): every page a newcomer reads is under 400 lines, and the
path README -> docs/architecture.md -> each part's page holds (the parts' links: tests/test_architecture.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "spec").glob("*.md")])
LIMIT = 400


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_doc_page_is_under_400_lines(page: Path) -> None:
    lines = len(page.read_text().splitlines())
    assert lines < LIMIT, f"{page.relative_to(ROOT)} has {lines} lines: split it or move its history out"


def test_the_pages_are_found() -> None:
    names = {str(p.relative_to(ROOT)) for p in PAGES}
    assert {"README.md", "docs/architecture.md", "spec/README.md"} <= names and len(names) > 10


def test_readme_leads_to_the_architecture_page_and_it_to_every_docs_page() -> None:
    assert "(docs/architecture.md)" in (ROOT / "README.md").read_text()
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", architecture))
    # every page of docs/ is reached from architecture.md, directly or through the broker's page
    reached = linked | set(re.findall(r"\]\(([\w.-]+\.md)\)", (ROOT / "docs" / "broker.md").read_text()))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"architecture.md"}
    assert pages <= reached, f"pages no newcomer reaches from docs/architecture.md: {sorted(pages - reached)}"
