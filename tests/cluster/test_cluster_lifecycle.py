"""Compaction, message expiry and a backlog quota on a 2-broker cluster (issue 45), as a user meets them: each
asked of the broker that does not own the topic (its 307 followed), used with the official client; then the
owner of the compacted topic is killed and the other broker serves the same compacted view."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pulsar
import pytest

from impl.broker.web.admin_client import AdminClient, topic_path
from tests.cluster.conftest import pulsar_ref, state
from tests.cluster.test_cluster_offload import read_all, until_done
from tests.cluster.test_cluster_pulsar_client import brokers, topics_of

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]

COMPACTED_TOPIC = "persistent://public/default/lifecycle-compacted"
HISTORY = [("a", b"a1"), ("b", b"b1"), ("c", b"c1"), ("a", b"a2"), ("b", b"")]  # b deleted by its empty payload
TAIL = [("a", b"a3")]  # after the horizon: read as it is
COMPACTED = [("c", b"c1"), ("a", b"a2"), *TAIL]
EXPIRING_TOPIC = "persistent://public/default/lifecycle-expiring"
QUOTA_NAMESPACE = "/admin/v2/namespaces/public/lifecycle-quota"
QUOTA_TOPIC = "persistent://public/lifecycle-quota/t"


def not_owning(cluster_dir: Path, topic: str) -> tuple[dict[str, Any], AdminClient]:
    """The broker that does not serve `topic`, and an admin client of it (its answers for the topic are 307s)."""
    first, second = brokers(cluster_dir)
    other = second if topics_of(first, [topic]) else first
    assert topics_of(other, [topic]) == []
    return other, AdminClient(f"http://127.0.0.1:{other['web_port']}")


def read_compacted(service_url: str, deadline_s: float) -> list[tuple[str, bytes]]:
    return [(m.partition_key(), m.data()) for m in read_all(service_url, deadline_s, COMPACTED_TOPIC, compacted=True)]


def test_compaction_expiry_and_quota_across_two_brokers(cluster_dir: Path) -> None:
    up = pulsar_ref("cluster", "up", "--dir", str(cluster_dir), "--bookies", "3", "--brokers", "2")
    assert up.returncode == 0, up.stderr
    service = state(cluster_dir)["pulsar_service"]
    client = pulsar.Client(service, operation_timeout_seconds=30)
    try:
        # Compaction on demand, asked of the non-owner.
        producer = client.create_producer(COMPACTED_TOPIC, batching_enabled=False)
        for key, value in HISTORY:
            producer.send(value, partition_key=key)
        _, admin = not_owning(cluster_dir, COMPACTED_TOPIC)
        admin.call("PUT", topic_path(COMPACTED_TOPIC) + "/compaction")
        status = until_done(admin, topic_path(COMPACTED_TOPIC) + "/compaction", "the compaction to finish")
        assert status["status"] == "SUCCESS", status
        for key, value in TAIL:
            producer.send(value, partition_key=key)
        producer.close()
        assert read_compacted(service, deadline_s=30) == COMPACTED

        # Messages expired on demand through the non-owner: the subscription delivers only what came after.
        client.subscribe(EXPIRING_TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
        producer = client.create_producer(EXPIRING_TOPIC, batching_enabled=False)
        for i in range(3):
            producer.send(b"old-%d" % i)
        time.sleep(1.1)  # older than the 1 s asked for below
        _, admin = not_owning(cluster_dir, EXPIRING_TOPIC)
        admin.call("POST", topic_path(EXPIRING_TOPIC) + "/subscription/sub/expireMessages/1")
        producer.send(b"new")
        producer.close()
        consumer = client.subscribe(EXPIRING_TOPIC, "sub")
        assert consumer.receive(10_000).data() == b"new"
        with pytest.raises(pulsar.Timeout):
            consumer.receive(500)
        consumer.close()

        # A backlog quota set through the first broker holds on whichever owns the topic: a producer is refused.
        first = AdminClient(f"http://127.0.0.1:{brokers(cluster_dir)[0]['web_port']}")
        first.call("PUT", QUOTA_NAMESPACE)
        quota = {"limitSize": 5_000, "limitTime": -1, "policy": "producer_exception"}
        first.call("POST", QUOTA_NAMESPACE + "/backlogQuota", quota)
        client.subscribe(QUOTA_TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
        producer = client.create_producer(QUOTA_TOPIC, batching_enabled=False)
        for _ in range(10):
            producer.send(b"q" * 1_000)
        producer.close()
        with pytest.raises(Exception) as refused:
            client.create_producer(QUOTA_TOPIC)
        assert "QuotaExceeded" in type(refused.value).__name__ + str(refused.value)
    finally:
        client.close()

    # The compacted topic's owner killed: the other broker serves the same compacted view.
    survivor, _ = not_owning(cluster_dir, COMPACTED_TOPIC)
    owner = next(b for b in brokers(cluster_dir) if b["name"] != survivor["name"])
    assert pulsar_ref("cluster", "kill", "--dir", str(cluster_dir), owner["name"]).returncode == 0
    assert read_compacted(f"pulsar://127.0.0.1:{survivor['pulsar_port']}", deadline_s=60) == COMPACTED
