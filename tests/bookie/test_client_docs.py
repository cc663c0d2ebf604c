"""docs/bookkeeper-client.md's examples run as written (issue 26, item 2).

Three real `pulsar-ref bookie` processes on an embedded metadata store stand for the bookies the page
starts; the page's Python blocks then run one after another in one namespace, with the page's metadata
URL replaced by this test's. Each block checks its own results (asserts), so a changed API or a wrong
sentence about what a call returns fails here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.client.real_cluster import BookieCluster, bookie_cluster

pytestmark = [pytest.mark.processes, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "bookkeeper-client.md"
PAGE_URL = "embedded://var/bk/metadata"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


@pytest.fixture
def bookies(tmp_path: Path) -> Iterator[BookieCluster]:
    with bookie_cluster(tmp_path, f"embedded://{tmp_path / 'metadata'}", 3) as cluster:
        yield cluster


def test_the_pages_examples_run_against_real_bookies(
    bookies: BookieCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    text = PAGE.read_text()
    blocks = python_blocks(text)
    assert len(blocks) >= 6, "the page lost its examples"
    assert text.count(PAGE_URL) >= 4  # the shell commands and the client use the same store
    namespace: dict[str, object] = {"__name__": "bookkeeper_client_docs"}
    for number, block in enumerate(blocks, 1):
        code = compile(block.replace(PAGE_URL, bookies.url), f"{PAGE.name} block {number}", "exec")
        exec(code, namespace)  # noqa: S102 - the page's own examples, run as a reader would
    out = capsys.readouterr().out
    assert "the old writer is fenced: ledger" in out and "deleted:" in out
    client = namespace["client"]
    assert client._owned_store is None  # type: ignore[attr-defined]  # closed with the client


def test_the_page_links_nothing_outside_the_repository() -> None:
    text = PAGE.read_text()
    assert not re.search(r"https?://", text), "docs/bookkeeper-client.md is in the project's own words"
