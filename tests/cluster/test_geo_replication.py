"""Geo-replication with real processes (issue 30): `pulsar-ref instance up` with two clusters, the first with
two brokers. The broker replicating a topic is SIGKILLed mid-stream; the other broker of its cluster takes
the topic over and its replicator resumes from the persisted cursor. With de-duplication on, the remote
cluster's log holds every message the origin acknowledged, once, in the order they were published."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pulsar
import pytest

from impl.broker.web.admin_client import AdminClient
from tests.cluster.conftest import pulsar_ref
from tests.waiting import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
TOPIC = "persistent://geo/ns/killed"
TOPIC_PATH = "persistent/geo/ns/killed"


def replication_of(admin: AdminClient) -> dict[str, Any]:
    """The topic's replication stats at whichever broker of the cluster owns it ({} when none answers)."""
    try:
        stats = admin.call("GET", f"/admin/v2/{TOPIC_PATH}/stats")
    except Exception:  # the owner is gone and the topic not taken over yet
        return {}
    return dict(stats["replication"].get("cluster-2", {}))


def test_a_sigkilled_replicating_broker_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "instance"
    up = pulsar_ref("instance", "up", "--dir", str(directory), "--clusters", "2", "--brokers", "2")
    try:
        assert up.returncode == 0, up.stderr
        urls = {
            name: (pulsar_url, http) for name, pulsar_url, http in (line.split() for line in up.stdout.splitlines())
        }
        one = AdminClient(urls["cluster-1"][1], timeout_s=30)
        one.call("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["cluster-1", "cluster-2"]})
        one.call("PUT", "/admin/v2/namespaces/geo/ns")
        one.call("POST", "/admin/v2/namespaces/geo/ns/replication", ["cluster-1", "cluster-2"])
        one.call("POST", "/admin/v2/namespaces/geo/ns/deduplication", True)

        cluster_one = json.loads((directory / "cluster-1" / "cluster.json").read_text())
        origin = pulsar.Client(cluster_one["pulsar_service"], operation_timeout_seconds=60, logger=QUIET)
        acknowledged: list[bytes] = []
        stop = threading.Event()

        def produce() -> None:
            producer = origin.create_producer(TOPIC, producer_name="origin", send_timeout_millis=60_000)
            i = 0
            while not stop.is_set():
                data = b"m%d" % i
                try:
                    producer.send(data)
                    acknowledged.append(data)
                except pulsar.PulsarException:
                    continue  # timed out: the same message is sent again (de-duplicated if written)
                i += 1

        producing = threading.Thread(target=produce, daemon=True)
        producing.start()
        wait_for(lambda: replication_of(one).get("msgOutCounter", 0) >= 100, "replication to be under way", 60)

        owner_url = one.call("GET", f"/lookup/v2/topic/{TOPIC_PATH}")["brokerUrl"]
        owner = next(n for n in cluster_one["nodes"] if n.get("pulsar_port") == int(owner_url.rsplit(":", 1)[1]))
        killed = pulsar_ref("cluster", "kill", "--dir", str(directory / "cluster-1"), owner["name"])
        assert killed.returncode == 0, killed.stderr
        count_at_kill = len(acknowledged)
        wait_for(lambda: len(acknowledged) >= count_at_kill + 200, "the other broker to take the topic over", 120)
        stop.set()
        producing.join(90)
        assert not producing.is_alive()
        origin.close()

        survivor = next(n for n in cluster_one["nodes"] if n["role"] == "broker" and n["name"] != owner["name"])
        at_survivor = AdminClient(f"http://127.0.0.1:{survivor['web_port']}", timeout_s=30)
        wait_for(
            lambda: replication_of(at_survivor).get("replicationBacklog", 1) == 0,
            "the new owner's replicator to catch up",
            120,
        )

        remote = pulsar.Client(urls["cluster-2"][0], operation_timeout_seconds=30, logger=QUIET)
        try:
            reader = remote.create_reader(TOPIC, pulsar.MessageId.earliest)
            received = []
            while reader.has_message_available():
                message = reader.read_next(10_000)
                received.append(message.data())
                assert message.producer_name() == "origin"
        finally:
            remote.close()
        assert len(received) == len(set(received)), "a message reached the remote twice"
        assert len(acknowledged) == len(set(acknowledged))
        assert [m for m in received if m in set(acknowledged)] == acknowledged
    finally:
        down = pulsar_ref("instance", "down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
