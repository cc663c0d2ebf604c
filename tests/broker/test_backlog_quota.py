"""Backlog quotas (issue 45, item 4) against a real `pulsar-ref standalone` process: Pulsar's namespace
`backlogQuota` admin paths and the three policies with the official `pulsar` client: producer_exception
(a new producer fails), producer_request_hold (refused while over, accepted once drained) and
consumer_backlog_eviction (the oldest messages are skipped); bad input answered 400."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from impl.broker.web.admin_client import topic_path
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import Standalone, running_standalone

pytestmark = pytest.mark.processes

LIMIT = 5_000  # bytes
PAYLOAD = b"q" * 1000


def ns(name: str) -> str:
    return f"/admin/v2/namespaces/public/{name}"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    for s in running_standalone(tmp_path_factory):
        for name, policy in (
            ("exception", "producer_exception"),
            ("hold", "producer_request_hold"),
            ("eviction", "consumer_backlog_eviction"),
        ):
            s.admin.call("PUT", ns(name))
            s.admin.call("POST", ns(name) + "/backlogQuota", {"limitSize": LIMIT, "limitTime": -1, "policy": policy})
        s.admin.call("PUT", ns("rest"))
        s.admin.call("PUT", ns("oldest"))
        oldest = {"limitSize": -1, "limitTime": 1, "policy": "producer_exception"}
        s.admin.call("POST", ns("oldest") + "/backlogQuota", oldest)
        yield s


@pytest.fixture
def client(standalone: Standalone) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.url, operation_timeout_seconds=5)
    yield c
    c.close()


def status_of(call: Callable[[], Any]) -> int:
    try:
        call()
    except HttpError as e:
        return e.status
    return 200


def fill(client: pulsar.Client, topic: str, n: int) -> None:
    """A subscription (nothing connected) and n messages of 1 KB: a backlog of ~n KB."""
    client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(PAYLOAD + b"%03d" % i)
    producer.close()


def drain(client: pulsar.Client, topic: str) -> list[bytes]:
    consumer = client.subscribe(topic, "sub")
    got = []
    try:
        while True:
            msg = consumer.receive(2_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
    except pulsar.Timeout:
        pass
    consumer.close()
    return got


def test_the_quota_over_the_admin_paths(standalone: Standalone) -> None:
    admin, path = standalone.admin, ns("rest")
    assert admin.call("GET", path + "/backlogQuotaMap") == {}
    quota = {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"}
    admin.call("POST", path + "/backlogQuota", quota)
    assert admin.call("GET", path + "/backlogQuotaMap") == {"destination_storage": quota}
    for bad in ({"limitSize": 1, "policy": "drop_everything"}, {"limitSize": -5}, {"limitSize": "big"}, [1]):
        assert status_of(lambda bad=bad: admin.call("POST", path + "/backlogQuota", bad)) == 400, bad
    assert status_of(lambda: admin.call("POST", path + "/backlogQuota?backlogQuotaType=message_age", quota)) == 400
    assert admin.call("GET", path + "/backlogQuotaMap") == {"destination_storage": quota}  # unchanged
    admin.call("DELETE", path + "/backlogQuota")
    assert admin.call("GET", path + "/backlogQuotaMap") == {}


def test_producer_exception(client: pulsar.Client) -> None:
    topic = "persistent://public/exception/t"
    fill(client, topic, 10)
    with pytest.raises(Exception) as refused:
        client.create_producer(topic)
    assert "QuotaExceeded" in type(refused.value).__name__ + str(refused.value)
    assert len(drain(client, topic)) == 10  # nothing lost; the backlog drained
    client.create_producer(topic).send(b"accepted again")


def test_producer_request_hold(client: pulsar.Client) -> None:
    topic = "persistent://public/hold/t"
    fill(client, topic, 10)
    with pytest.raises(Exception) as held:  # held (retried by the client) until its operation timeout
        client.create_producer(topic)
    assert "QuotaExceeded" in type(held.value).__name__ + str(held.value) or isinstance(held.value, pulsar.Timeout)
    assert len(drain(client, topic)) == 10
    client.create_producer(topic).send(b"accepted again")


def test_consumer_backlog_eviction(standalone: Standalone, client: pulsar.Client) -> None:
    topic = "persistent://public/eviction/t"
    fill(client, topic, 20)

    def backlog() -> int:
        stats = standalone.admin.call("GET", topic_path(topic) + "/stats")
        return int(stats["subscriptions"]["sub"]["msgBacklog"])

    deadline = time.monotonic() + 40  # the broker's periodic check runs every 10 s
    while backlog() > 5 and time.monotonic() < deadline:
        time.sleep(0.3)
    left = drain(client, topic)
    assert 0 < len(left) <= 5
    assert left == [PAYLOAD + b"%03d" % i for i in range(20 - len(left), 20)]  # the newest ones are kept


def test_a_time_limit_counts_from_the_oldest_unacknowledged_message(client: pulsar.Client) -> None:
    topic = "persistent://public/oldest/t"
    fill(client, topic, 2)
    time.sleep(1.5)  # the oldest unacknowledged message is now older than limitTime (1 s)
    with pytest.raises(Exception) as refused:
        client.create_producer(topic)
    assert "QuotaExceeded" in type(refused.value).__name__ + str(refused.value)
    assert len(drain(client, topic)) == 2
    client.create_producer(topic).send(b"accepted again")
