"""Retention enforced by the trimmer (issue 45, item 4) against a real `pulsar-ref standalone` process with
small ledgers: consumed ledgers beyond the namespace's retention size are deleted, unlimited retention keeps
them, and a topic nobody subscribes to keeps only what retention asks. Official `pulsar` client and HTTP."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pulsar
import pytest

from impl.broker.web.admin_client import topic_path
from tests.broker.pulsar_standalone import Standalone

pytestmark = pytest.mark.processes

PAYLOAD = b"x" * (200 * 1024)  # 5 entries = one ledger of ~1 MB


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    s = Standalone(tmp_path_factory.mktemp("retention"), "--max-entries-per-ledger", "5")
    try:
        for ns, policy in (
            ("kept", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}),
            ("onemb", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 1}),
        ):
            s.admin.call("PUT", f"/admin/v2/namespaces/public/{ns}")
            s.admin.call("POST", f"/admin/v2/namespaces/public/{ns}/retention", policy)
        s.admin.call("PUT", "/admin/v2/namespaces/public/unset")
        yield s
    finally:
        s.stop()


def ledgers(standalone: Standalone, topic: str) -> list[int]:
    stats = standalone.admin.call("GET", topic_path(topic) + "/internalStats")
    return [int(ledger["ledgerId"]) for ledger in stats["ledgers"]]


def wait_for(check: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def publish_and_consume(standalone: Standalone, topic: str, n: int, subscribe: bool = True) -> None:
    client = pulsar.Client(standalone.url, operation_timeout_seconds=20)
    try:
        consumer = client.subscribe(topic, "sub") if subscribe else None
        producer = client.create_producer(topic, batching_enabled=False)
        for _ in range(n):
            producer.send(PAYLOAD)
        if consumer is not None:
            for _ in range(n):
                consumer.acknowledge(consumer.receive(10_000))
            consumer.close()
        producer.close()
    finally:
        client.close()


def test_consumed_ledgers_beyond_the_retention_size_are_deleted(standalone: Standalone) -> None:
    kept, trimmed = "persistent://public/kept/t", "persistent://public/onemb/t"
    for topic in (kept, trimmed):
        publish_and_consume(standalone, topic, 20)  # ~4 MB in 4 closed ledgers, all consumed
    wait_for(lambda: len(ledgers(standalone, trimmed)) <= 3, "the trim down to the retention size", 40)
    stats = standalone.admin.call("GET", topic_path(trimmed) + "/internalStats")
    assert sum(int(ledger["size"]) for ledger in stats["ledgers"]) >= 1024 * 1024  # retention still holds 1 MB
    assert len(ledgers(standalone, kept)) >= 4  # unlimited retention: nothing consumed is deleted


def test_a_topic_without_subscriptions_keeps_only_its_retention(standalone: Standalone) -> None:
    topic, unset = "persistent://public/onemb/nobody", "persistent://public/unset/nobody"
    for t in (topic, unset):
        publish_and_consume(standalone, t, 20, subscribe=False)
    # no subscription: the retention alone holds data; the ticker (every 10 s) trims down to it
    wait_for(lambda: len(ledgers(standalone, topic)) <= 3, "the closed ledgers to be trimmed", 40)
    stats = standalone.admin.call("GET", topic_path(topic) + "/internalStats")
    assert sum(int(ledger["size"]) for ledger in stats["ledgers"]) >= 1024 * 1024
    # no retention policy at all: kept (a deviation from Pulsar, which deletes it; see maybe_trim)
    assert len(ledgers(standalone, unset)) >= 4
