"""Backlog quotas (issue 45, item 4) against a real `pulsar-ref standalone` process: Pulsar's namespace
`backlogQuota` admin paths and the three policies with the official `pulsar` client: producer_exception
(a new producer fails; one already attached is disconnected by the periodic check and its sends fail),
producer_request_hold (refused while over, accepted once drained; an attached producer's send waits until
the backlog is cleared) and consumer_backlog_eviction (the oldest messages are skipped); bad input
answered 400. The broker checks every second (`--backlog-quota-check-interval-in-seconds 1`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from impl.broker.web.admin_client import topic_path
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import Standalone, running_standalone
from tests.producing import receive_all

pytestmark = pytest.mark.processes

LIMIT = 5_000  # bytes
PAYLOAD = b"q" * 1000


def ns(name: str) -> str:
    return f"/admin/v2/namespaces/public/{name}"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    for s in running_standalone(tmp_path_factory, "--backlog-quota-check-interval-in-seconds", "1"):
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


def send_all(producer: pulsar.Producer, n: int) -> None:
    """n messages of 1 KB, sent at once: all are with the broker before its periodic check (every second)
    can disconnect the producer for the backlog they make."""
    results: list[pulsar.Result] = []
    for i in range(n):
        producer.send_async(PAYLOAD + b"%03d" % i, lambda result, _id: results.append(result))
    producer.flush()
    assert results == [pulsar.Result.Ok] * n


def fill(client: pulsar.Client, topic: str, n: int) -> None:
    """A subscription (nothing connected) and n messages of 1 KB: a backlog of ~n KB."""
    client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = client.create_producer(topic, batching_enabled=False)
    send_all(producer, n)
    producer.close()


def drain(client: pulsar.Client, topic: str) -> list[bytes]:
    consumer = client.subscribe(topic, "sub")
    # Every drain here expects a message: a busy machine may be slow to the first (receive_all's 10 s).
    got = [m.data() for m in receive_all(consumer, 1, quiet_ms=2_000)]
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


def attached_over_quota(standalone: Standalone, client: pulsar.Client, topic: str) -> pulsar.Producer:
    """A producer attached while the backlog is empty, which then sends it over the quota (10 KB), and
    the broker's periodic check disconnecting it (the topic's stats list no publisher)."""
    client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = client.create_producer(topic, batching_enabled=False)
    send_all(producer, 10)
    deadline = time.monotonic() + 10  # the check runs every second
    while standalone.admin.call("GET", topic_path(topic) + "/stats")["publishers"]:
        assert time.monotonic() < deadline, "the producer over the quota was not disconnected"
        time.sleep(0.2)
    return producer


def test_an_attached_producer_is_disconnected_under_producer_exception(
    standalone: Standalone, client: pulsar.Client
) -> None:
    topic = "persistent://public/exception/attached"
    producer = attached_over_quota(standalone, client, topic)
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):  # its reconnection is refused
        producer.send(b"refused")
    assert len(drain(client, topic)) == 10  # what it sent before is kept; "refused" was not stored


def test_an_attached_producer_waits_under_producer_request_hold(standalone: Standalone, client: pulsar.Client) -> None:
    topic = "persistent://public/hold/attached"
    producer = attached_over_quota(standalone, client, topic)
    results: list[pulsar.Result] = []
    producer.send_async(b"held", lambda result, _id: results.append(result))
    time.sleep(1.5)
    assert results == []  # held: the client retries its PRODUCER while the broker refuses it
    standalone.admin.call("POST", topic_path(topic) + "/subscription/sub/skip_all")  # the backlog cleared
    deadline = time.monotonic() + 15  # the client's reconnection backoff
    while not results and time.monotonic() < deadline:
        time.sleep(0.1)
    assert results == [pulsar.Result.Ok]
    assert drain(client, topic) == [b"held"]


def test_consumer_backlog_eviction(standalone: Standalone, client: pulsar.Client) -> None:
    topic = "persistent://public/eviction/t"
    fill(client, topic, 20)

    def backlog() -> int:
        stats = standalone.admin.call("GET", topic_path(topic) + "/stats")
        return int(stats["subscriptions"]["sub"]["msgBacklog"])

    deadline = time.monotonic() + 10  # the broker's periodic check runs every second
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
