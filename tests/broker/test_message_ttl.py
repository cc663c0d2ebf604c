"""Message TTL and expireMessages (issue 45, item 4) against a real `pulsar-ref standalone` process: the
namespace policy over Pulsar's admin path, old messages expired from a subscription's backlog by the
broker's periodic check and on demand, with the official `pulsar` client; bad input answered 4xx."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from impl.broker.web.admin_client import topic_path
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import ROOT, Standalone, running_standalone

pytestmark = pytest.mark.processes

NS = "/admin/v2/namespaces/public/ttl"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    for s in running_standalone(tmp_path_factory):
        s.admin.call("PUT", NS)
        yield s


def status_of(call: Callable[[], Any]) -> int:
    try:
        call()
    except HttpError as e:
        return e.status
    return 200


def backlog(standalone: Standalone, topic: str, sub: str) -> int:
    stats = standalone.admin.call("GET", topic_path(topic) + "/stats")
    return int(stats["subscriptions"][sub]["msgBacklog"])


def wait_for(check: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def publish_old(client: pulsar.Client, topic: str, n: int) -> None:
    """Subscribe (the backlog is kept for it), publish n messages, leave nothing connected."""
    client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(b"old-%d" % i)
    producer.close()


def only_new(client: pulsar.Client, topic: str) -> list[bytes]:
    """Publish one new message and take everything the subscription delivers."""
    client.create_producer(topic, batching_enabled=False).send(b"new")
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


def test_the_ttl_policy_over_the_admin_path(standalone: Standalone) -> None:
    admin = standalone.admin
    assert admin.call("GET", NS + "/messageTTL") is None
    admin.call("POST", NS + "/messageTTL", 120)
    assert admin.call("GET", NS + "/messageTTL") == 120
    assert status_of(lambda: admin.call("POST", NS + "/messageTTL", -1)) == 412  # Pulsar: invalid TTL
    assert status_of(lambda: admin.call("POST", NS + "/messageTTL", "soon")) == 400
    assert status_of(lambda: admin.call("GET", "/admin/v2/namespaces/public/nope/messageTTL")) == 404
    assert admin.call("GET", NS + "/messageTTL") == 120  # nothing changed by the bad input
    admin.call("DELETE", NS + "/messageTTL")
    assert admin.call("GET", NS + "/messageTTL") is None


def test_messages_past_their_ttl_are_not_delivered(standalone: Standalone) -> None:
    topic = "persistent://public/ttl/expiring"
    client = pulsar.Client(standalone.url, operation_timeout_seconds=20)
    try:
        publish_old(client, topic, 3)
        assert backlog(standalone, topic, "sub") == 3
        standalone.admin.call("POST", NS + "/messageTTL", 1)
        # the broker's periodic check (every 10 s) expires them from the backlog
        wait_for(lambda: backlog(standalone, topic, "sub") == 0, "the TTL to expire the backlog", 40)
        assert only_new(client, topic) == [b"new"]
    finally:
        standalone.admin.call("DELETE", NS + "/messageTTL")
        client.close()


def test_expire_messages_on_demand(standalone: Standalone) -> None:
    topic = "persistent://public/ttl/on-demand"
    path = topic_path(topic)
    client = pulsar.Client(standalone.url, operation_timeout_seconds=20)
    try:
        publish_old(client, topic, 3)
        # messages younger than an hour stay
        standalone.admin.call("POST", path + "/subscription/sub/expireMessages/3600")
        assert backlog(standalone, topic, "sub") == 3
        time.sleep(1.1)
        standalone.admin.call("POST", path + "/all_subscription/expireMessages/1")
        assert backlog(standalone, topic, "sub") == 0
        assert only_new(client, topic) == [b"new"]
        assert status_of(lambda: standalone.admin.call("POST", path + "/subscription/nobody/expireMessages/1")) == 404
        assert status_of(lambda: standalone.admin.call("POST", path + "/subscription/sub/expireMessages/-1")) == 400
    finally:
        client.close()


def test_pulsar_ref_admin_sets_the_lifecycle_policies(standalone: Standalone) -> None:
    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "pulsar_ref.cli", "admin", "--admin-url", standalone.web_url, *args]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)

    ns = "public/ttl"
    assert admin("namespaces", "set-message-ttl", ns, "--ttl", "30").returncode == 0
    assert json.loads(admin("namespaces", "get-message-ttl", ns).stdout) == 30
    assert admin("namespaces", "remove-message-ttl", ns).returncode == 0
    assert (
        admin("namespaces", "set-auto-topic-creation", ns, "--type", "partitioned", "--num-partitions", "2").returncode
        == 0
    )
    assert json.loads(admin("namespaces", "get-auto-topic-creation", ns).stdout) == {
        "allowAutoTopicCreation": True,
        "topicType": "partitioned",
        "defaultNumPartitions": 2,
    }
    assert admin("namespaces", "remove-auto-topic-creation", ns).returncode == 0
    quota = ("--limit-size", "1000000", "--policy", "producer_exception")
    assert admin("namespaces", "set-backlog-quota", ns, *quota).returncode == 0
    assert (
        json.loads(admin("namespaces", "get-backlog-quotas", ns).stdout)["destination_storage"]["limitSize"] == 1000000
    )
    refused = admin("namespaces", "set-backlog-quota", ns, "--limit-size", "1", "--policy", "drop")
    assert refused.returncode == 2 and "(400)" in refused.stderr
    assert admin("namespaces", "remove-backlog-quota", ns).returncode == 0
    topic = "persistent://public/ttl/cli"
    client = pulsar.Client(standalone.url, operation_timeout_seconds=20)
    try:
        publish_old(client, topic, 2)
    finally:
        client.close()
    assert admin("topics", "expire-messages", topic, "--subscription", "sub", "--expire-time", "5").returncode == 0
    assert backlog(standalone, topic, "sub") == 2  # younger than 5 s
    assert admin("topics", "expire-messages-all-subscriptions", topic, "--expire-time", "0").returncode == 0
    assert backlog(standalone, topic, "sub") == 0
