"""The live cluster view in a real browser (Debian's headless Chromium, driven through chromedriver):
seed 003's demo followed on the pages, produce, unload, and the topic's page, without a reload,
shows the new ledger; a screenshot of each page is written under the test's temporary directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from impl.bookie.client.placement import UNPUBLISHED_FRAME_SIZE
from impl.bookie.core import DEFAULT_MAX_ENTRY_SIZE
from impl.broker.web.admin_client import topic_path
from impl.broker.web.view import _frame_limit
from tests.broker.pulsar_standalone import Standalone, running_standalone
from tests.browser import click_link, headers, headless_chromium, rows, screenshot, text

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    yield from headless_chromium()


def produce(standalone: Standalone, topic: str, count: int) -> None:
    client = pulsar.Client(standalone.url, operation_timeout_seconds=20)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(count):
            producer.send(b"%d" % i)
        producer.close()
    finally:
        client.close()


def test_the_cluster_page_shows_brokers_bookies_and_the_metadata_store(
    standalone: Standalone, browser: WebDriver, tmp_path: Path
) -> None:
    browser.get(standalone.web_url + "/")  # redirects to /view
    assert browser.current_url.endswith("/view")
    brokers = rows(browser, "brokers")
    assert len(brokers) == 1 and "(leader)" in brokers[0][0] and brokers[0][1] == standalone.url
    bookies = rows(browser, "bookies")
    assert len(bookies) == 3 and {b[1] for b in bookies} == {"read-write"}
    assert all("GiB" in b[2] for b in bookies), bookies
    # the frame limit each bookie published (nettyMaxFrameSizeBytes), which brokers check their entries against
    assert {b[4] for b in bookies} == {f"{DEFAULT_MAX_ENTRY_SIZE:,} bytes"}, bookies
    store = rows(browser, "metadata")[0]
    assert store[0] == "EmbeddedStore" and store[1].endswith("metadata")
    assert "public/default" in text(browser, "tree")
    screenshot(browser, tmp_path / "cluster.png")


def test_seed_003_demo_produce_unload_and_the_topic_page_shows_the_new_ledger(
    standalone: Standalone, browser: WebDriver, tmp_path: Path
) -> None:
    topic = "persistent://public/default/demo-003"
    produce(standalone, topic, 5)
    browser.get(standalone.web_url + "/view")
    click_link(browser, topic)  # the tree links to the topic's page
    WebDriverWait(browser, 10).until(lambda b: rows(b, "ledgers"))
    first = rows(browser, "ledgers")
    assert len(first) == 1 and first[0][1] == "open" and first[0][3] == "5", first
    assert rows(browser, "summary")[0][3] == "5"
    screenshot(browser, tmp_path / "topic-before-unload.png")

    standalone.admin.call("PUT", topic_path(topic) + "/unload")
    produce(standalone, topic, 3)  # the topic loads again: the old ledger is closed, a new one opens
    # No reload: the page's own refresh brings the new ledger in.
    WebDriverWait(browser, 20).until(lambda b: len(rows(b, "ledgers")) == 2)
    WebDriverWait(browser, 10).until(lambda b: rows(b, "ledgers")[1][3] == "3")
    old, new = rows(browser, "ledgers")
    assert old[1] == "closed" and old[3] == "5" and new[1] == "open", (old, new)
    assert int(new[0]) > int(old[0])
    assert rows(browser, "summary")[0][3] == "8"
    screenshot(browser, tmp_path / "topic-after-unload.png")

    click_link(browser, new[0])  # the new ledger's page
    WebDriverWait(browser, 10).until(lambda b: rows(b, "facts"))
    facts = rows(browser, "facts")[0]
    assert facts[0] == "open" and facts[1] == "2 / 2 / 2"
    placement = rows(browser, "fragment-0")
    ensemble = new[2].split(": ", 1)[1].split(", ")  # the topic page's ensemble column
    assert headers(browser, "fragment-0")[1:] == ensemble
    assert placement and all(cells[1:] == ["held", "held"] for cells in placement)  # Qw = E = 2
    screenshot(browser, tmp_path / "ledger.png")


def test_unknown_pages_answer_404(standalone: Standalone, browser: WebDriver) -> None:
    browser.get(standalone.web_url + "/view/ledger/987654")
    assert "does not exist" in browser.find_element(By.TAG_NAME, "body").text
    browser.get(standalone.web_url + "/view/topic/public/default/never-made")
    assert "not found" in browser.find_element(By.TAG_NAME, "body").text


def reading(with_unit: bool) -> type[pulsar.schema.Record]:
    """One record, two versions under the same Avro name (an evolution, not another record)."""
    fields: dict[str, object] = {"sensor": pulsar.schema.String()}
    if with_unit:
        fields["unit"] = pulsar.schema.String(required_default=True)  # a default (null)
    return type("Reading", (pulsar.schema.Record,), fields)


def test_the_topic_page_shows_the_schema_versions_of_the_topic_and_of_its_partitions(
    standalone: Standalone, browser: WebDriver
) -> None:
    topic = "persistent://public/default/view-schemas"
    standalone.admin.call("PUT", topic_path(topic) + "/partitions", body=2)
    client = pulsar.Client(standalone.url, operation_timeout_seconds=20)
    try:
        for record in (reading(False), reading(True)):  # a field with a default: compatible under FULL
            producer = client.create_producer(topic, schema=pulsar.schema.AvroSchema(record))
            producer.send(record(sensor="s1"))
            producer.close()
    finally:
        client.close()
    browser.get(f"{standalone.web_url}/view/topic/public/default/view-schemas-partition-1")
    WebDriverWait(browser, 10).until(lambda b: rows(b, "schemas"))
    versions = rows(browser, "schemas")
    assert [v[:2] for v in versions] == [["0", "AVRO"], ["1", "AVRO"]], versions
    assert '"unit"' not in versions[0][3] and '"unit"' in versions[1][3]

    produce(standalone, "persistent://public/default/view-bytes", 1)
    browser.get(f"{standalone.web_url}/view/topic/public/default/view-bytes")
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "schema-none"))
    assert "no schema" in text(browser, "schema-none")


def test_a_bookie_that_published_no_frame_limit_shows_the_one_brokers_assume() -> None:
    assert _frame_limit(None) == f"not published ({UNPUBLISHED_FRAME_SIZE:,} bytes assumed)"
    assert _frame_limit(1_048_576) == "1,048,576 bytes"
