"""The cluster view of a real multi-process cluster (ZooKeeper, 3 bookies, 2 brokers) in headless
Chromium: any broker shows the whole cluster, and a topic another broker owns."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from impl.broker.web.admin_client import AdminClient
from tests.browser import click_link, headless_chromium, rows, screenshot, text
from tests.cluster.conftest import pulsar_ref, state

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    yield from headless_chromium()


def test_any_broker_shows_the_whole_cluster(cluster_dir: Path, browser: WebDriver, tmp_path: Path) -> None:
    up = pulsar_ref("cluster", "up", "--dir", str(cluster_dir), "--bookies", "3", "--brokers", "2")
    assert up.returncode == 0, up.stderr
    nodes = state(cluster_dir)["nodes"]
    first, second = [n for n in nodes if n["role"] == "broker"]
    webs = [f"http://127.0.0.1:{b['web_port']}" for b in (first, second)]
    client = pulsar.Client(f"pulsar://127.0.0.1:{first['pulsar_port']}", operation_timeout_seconds=30)
    try:
        topics = [f"persistent://public/default/seen-{i}" for i in range(6)]
        for t in topics:
            client.create_producer(t).send(b"x")
    finally:
        client.close()

    browser.get(webs[0] + "/view")
    brokers = rows(browser, "brokers")
    assert len(brokers) == 2 and sum("(leader)" in b[0] for b in brokers) == 1
    assert sorted(b[2] for b in brokers) == sorted(webs)
    bookies = rows(browser, "bookies")
    assert len(bookies) == 3 and {b[1] for b in bookies} == {"read-write"}
    store = rows(browser, "metadata")[0]
    assert store[0] == "ZooKeeperStore" and "127.0.0.1:" in store[1]
    tree = text(browser, "tree")
    assert all(t in tree for t in topics)
    screenshot(browser, tmp_path / "cluster.png")

    # A topic the second broker owns, shown by the first: live figures come from its owner (a 307).
    admin = AdminClient(webs[1])
    theirs = next(
        t for t in topics if admin.call("GET", "/lookup/v2/topic/" + t.replace("://", "/"))["httpUrl"] == webs[1]
    )
    click_link(browser, theirs)
    WebDriverWait(browser, 10).until(lambda b: rows(b, "ledgers"))
    ledgers = rows(browser, "ledgers")
    assert len(ledgers) == 1 and ledgers[0][1] == "open" and ledgers[0][3] == "1", ledgers
    assert len(ledgers[0][2].split(": ", 1)[1].split(", ")) == 3  # the brokers' ensemble: E = 3
    screenshot(browser, tmp_path / "topic.png")
