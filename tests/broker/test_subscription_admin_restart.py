"""Subscription admin after a restart, against a real `pulsar-ref standalone` process, with the official
client: a durable subscription whose consumer left is only its cursor once the standalone restarts (or
the topic is unloaded). As in Pulsar, the admin call loads the topic, whose subscriptions come from the
managed ledger's cursors, and acts on it: delete (204), listing, stats, skip_all, resetcursor,
expireMessages; 404 "Subscription not found" only for one that does not exist. The same on a
partitioned topic, each partition's."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from impl.broker.web.admin_client import AdminClient, topic_path
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import Standalone

pytestmark = pytest.mark.processes

TOPIC = "persistent://public/default/sub-admin-restart"
PARTITIONED = "persistent://public/default/sub-admin-restart-parts"


def _refused(call: Callable[[], object]) -> HttpError:
    with pytest.raises(HttpError) as refused:
        call()
    return refused.value


def _backlogs(admin: AdminClient, topic: str) -> dict[str, int]:
    return {n: s["msgBacklog"] for n, s in admin.call("GET", topic_path(topic) + "/stats")["subscriptions"].items()}


def _wait_for(check: Callable[[], bool], what: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _before_restart(s: Standalone) -> None:
    """Two durable subscriptions on TOPIC ("gone" consumed 2 of 5, "kept" none) and one ("ps") on each
    partition of PARTITIONED; every consumer closed."""
    s.admin.create_partitioned_topic(PARTITIONED, 2)
    client = pulsar.Client(s.url, operation_timeout_seconds=20)
    try:
        gone = client.subscribe(TOPIC, "gone", initial_position=pulsar.InitialPosition.Earliest)
        client.subscribe(TOPIC, "kept", initial_position=pulsar.InitialPosition.Earliest).close()
        client.subscribe(PARTITIONED, "ps", initial_position=pulsar.InitialPosition.Earliest).close()
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(5):
            producer.send(b"m%d" % i)
        for _ in range(2):
            gone.acknowledge(gone.receive(10_000))
        _wait_for(lambda: _backlogs(s.admin, TOPIC)["gone"] == 3, "the broker to have both acks")
        gone.close()
        producer.close()
        producer = client.create_producer(PARTITIONED, batching_enabled=False)
        for i in range(6):
            producer.send(b"p%d" % i, partition_key=f"k{i}")
        producer.close()
    finally:
        client.close()


def test_subscriptions_without_consumers_are_administered_after_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "standalone"
    s = Standalone(data)
    try:
        _before_restart(s)
    finally:
        s.stop()
    s = Standalone(data)  # the same data: the subscriptions are now only their cursors
    try:
        admin, path = s.admin, topic_path(TOPIC)
        # The first call after the restart: it loads the topic, which knows its cursors' subscriptions.
        admin.call("DELETE", path + "/subscription/gone")
        assert admin.call("GET", path + "/subscriptions") == ["kept"]
        missing = _refused(lambda: admin.call("DELETE", path + "/subscription/gone"))
        assert (missing.status, missing.reason) == (404, "Subscription not found")
        assert _refused(lambda: admin.call("DELETE", path + "/subscription/never")).status == 404

        # The same name subscribed again starts per its initial position, not where the deleted one was.
        client = pulsar.Client(s.url, operation_timeout_seconds=20)
        try:
            again = client.subscribe(TOPIC, "gone", initial_position=pulsar.InitialPosition.Earliest)
            assert [again.receive(10_000).data() for _ in range(5)] == [b"m%d" % i for i in range(5)]
            again.close()
            latest = client.subscribe(TOPIC, "latest-after")
            with pytest.raises(pulsar.Timeout):
                latest.receive(500)  # latest: nothing published since
            latest.close()
            admin.call("DELETE", path + "/subscription/latest-after")
        finally:
            client.close()

        # Each other call as the first after a reload (an unload is a restart for one topic).
        def reloaded() -> None:
            admin.call("PUT", path + "/unload")

        reloaded()
        assert admin.call("GET", path + "/subscriptions") == ["gone", "kept"]
        reloaded()
        assert _backlogs(admin, TOPIC) == {"gone": 5, "kept": 5}
        reloaded()
        admin.call("POST", path + "/subscription/kept/skip_all")
        assert _backlogs(admin, TOPIC)["kept"] == 0
        reloaded()
        admin.call("POST", path + "/subscription/kept/resetcursor/0")
        assert _backlogs(admin, TOPIC)["kept"] == 5
        reloaded()
        admin.call("POST", path + "/subscription/kept/expireMessages/0")
        assert _backlogs(admin, TOPIC)["kept"] == 0
        reloaded()
        admin.call("POST", path + "/all_subscription/expireMessages/0")
        assert _backlogs(admin, TOPIC)["gone"] == 0
        for call in ("skip_all", "resetcursor/0", "expireMessages/0"):
            missing = _refused(lambda: admin.call("POST", path + f"/subscription/never/{call}"))  # noqa: B023
            assert missing.status == 404, call

        # A partitioned topic: listed, expired, reset and deleted on every partition.
        parts = topic_path(PARTITIONED)
        assert admin.call("GET", parts + "/subscriptions") == ["ps"]

        def partition_backlogs() -> list[int]:
            return [_backlogs(admin, f"{PARTITIONED}-partition-{i}")["ps"] for i in range(2)]

        published = partition_backlogs()
        assert sum(published) == 6
        admin.call("POST", parts + "/subscription/ps/expireMessages/0")
        assert partition_backlogs() == [0, 0]
        admin.call("POST", parts + "/subscription/ps/resetcursor/0")  # back to the first message of each
        assert partition_backlogs() == published
        admin.call("POST", parts + "/all_subscription/expireMessages/0")
        assert partition_backlogs() == [0, 0]
        for call in ("resetcursor/0", "expireMessages/0"):
            assert _refused(lambda: admin.call("POST", parts + f"/subscription/never/{call}")).status == 404  # noqa: B023
        admin.call("DELETE", parts + "/subscription/ps")
        assert admin.call("GET", parts + "/subscriptions") == []
        for i in range(2):
            assert admin.call("GET", topic_path(f"{PARTITIONED}-partition-{i}") + "/subscriptions") == []
        assert _refused(lambda: admin.call("DELETE", parts + "/subscription/ps")).status == 404
    finally:
        s.stop()
