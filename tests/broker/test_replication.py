"""Geo-replication between two clusters (issue 30): two standalones, `east` and `west`, each with its own
embedded metadata store and bookies, sharing one configuration store in the test session's real
ZooKeeper. Messages are produced and consumed with the official Pulsar client.

Each test uses a namespace of its own, replicated as the test needs, so the tests stay independent."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from impl.broker import namespaces
from impl.broker.standalone import Standalone
from impl.metadata.naming import NamespaceName
from impl.metadata.store import MetadataStore
from impl.metadata.url import connect
from impl.metadata.zkserver import ZooKeeperServer, free_port
from impl.protocol import entry_codec
from tests.waiting import wait_for

pytestmark = pytest.mark.zookeeper

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


class Instance:
    def __init__(self, root: Path, configuration_store: str) -> None:
        self.config: MetadataStore = connect(configuration_store)
        self.clusters: dict[str, Standalone] = {}
        for name in ("east", "west"):
            standalone = Standalone(
                root / name,
                port=free_port(),
                web_port=free_port(),
                bookies=2,
                cluster=name,
                configuration_store=configuration_store,
            )
            standalone.start()
            self.clusters[name] = standalone

    def namespace(self, *clusters: str, deduplication: bool | None = None) -> str:
        ns = NamespaceName("public", f"r-{uuid.uuid4().hex[:8]}")
        namespaces.create_namespace(self.config, ns, namespaces.NamespacePolicies(replication_clusters=clusters))
        if deduplication is not None:
            namespaces.set_deduplication(self.config, ns, deduplication)
        return str(ns)

    def client(self, cluster: str, operation_timeout_s: int = 30) -> pulsar.Client:
        url = self.clusters[cluster].pulsar_service_url
        return pulsar.Client(url, operation_timeout_seconds=operation_timeout_s, logger=QUIET)

    def stats(self, cluster: str, topic: str) -> dict[str, Any]:
        path = topic.replace("persistent://", "persistent/")
        url = f"{self.clusters[cluster].web_service_url}/admin/v2/{path}/stats"
        with urllib.request.urlopen(url, timeout=20) as response:
            return json.load(response)

    def stop(self) -> None:
        for standalone in self.clusters.values():
            standalone.stop()


@pytest.fixture(scope="module")
def instance(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    config = f"zk://{zookeeper.connect_string}/geo-{uuid.uuid4().hex[:8]}"
    made = Instance(tmp_path_factory.mktemp("geo"), config)
    try:
        yield made
    finally:
        made.stop()


def receive_all(consumer: pulsar.Consumer, count: int, timeout_ms: int = 20_000) -> list[pulsar.Message]:
    messages = []
    for _ in range(count):
        message = consumer.receive(timeout_ms)
        consumer.acknowledge(message)
        messages.append(message)
    return messages


def nothing_more(consumer: pulsar.Consumer, wait_ms: int = 1500) -> bool:
    try:
        consumer.receive(wait_ms)
    except pulsar.Timeout:
        return True
    return False


def entries_of(instance: Instance, cluster: str, topic: str) -> list[entry_codec.Entry]:
    """Every entry of the topic in `cluster`, parsed, as its managed ledger holds them."""
    broker = instance.clusters[cluster].broker
    assert broker is not None
    ml = broker.service.topic(topic).ml
    entries: list[entry_codec.Entry] = []
    position = ml.first_position()
    while position is not None:
        batch = ml.read(position, 500)
        if not batch:
            break
        entries += [entry_codec.parse(data) for _p, data in batch]
        position = ml.next_position(batch[-1][0])
    return entries


def test_messages_reach_the_remote_with_their_origin_metadata(instance: Instance) -> None:
    ns = instance.namespace("east", "west")
    topic = f"persistent://{ns}/plain"
    east, west = instance.client("east"), instance.client("west")
    try:
        consumer = west.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = east.create_producer(topic, producer_name="origin-producer")
        sent = [producer.send(f"m{i}".encode(), properties={"i": str(i)}, event_timestamp=1000 + i) for i in range(20)]
        received = receive_all(consumer, 20)
        assert [m.data() for m in received] == [f"m{i}".encode() for i in range(20)]
        assert [m.properties() for m in received] == [{"i": str(i)} for i in range(20)]
        assert [m.event_timestamp() for m in received] == [1000 + i for i in range(20)]
        assert {m.producer_name() for m in received} == {"origin-producer"}
        origin = entries_of(instance, "east", topic)
        assert [m.publish_timestamp() for m in received] == [e.metadata.publish_time for e in origin]
        assert len(sent) == 20 and nothing_more(consumer)
    finally:
        east.close()
        west.close()
    remote = entries_of(instance, "west", topic)
    assert {e.metadata.replicated_from for e in remote} == {"east"}
    assert [e.metadata.sequence_id for e in remote] == [e.metadata.sequence_id for e in origin]
    assert not any(e.metadata.replicated_from for e in origin)

    def caught_up() -> bool:
        stats = instance.stats("east", topic)["replication"]["west"]
        return bool(stats["msgOutCounter"] == 20 and stats["replicationBacklog"] == 0 and stats["connected"])

    wait_for(caught_up, "east's stats to show the replication to west caught up")
    stats = instance.stats("east", topic)["replication"]["west"]
    assert stats["cursor"] == "pulsar.repl.west"
    assert any(p["producerName"] == "pulsar.repl.east" for p in instance.stats("west", topic)["publishers"])


def test_both_ways_without_loops(instance: Instance) -> None:
    ns = instance.namespace("east", "west")
    topic = f"persistent://{ns}/both"
    east, west = instance.client("east"), instance.client("west")
    try:
        at_east = east.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        at_west = west.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        from_east = east.create_producer(topic, producer_name="pe")
        from_west = west.create_producer(topic, producer_name="pw")
        for i in range(10):
            from_east.send(f"e{i}".encode())
            from_west.send(f"w{i}".encode())
        for consumer in (at_east, at_west):
            got = [m.data() for m in receive_all(consumer, 20)]
            # Each cluster's log holds its own and the other's messages, each once, each producer in order.
            assert sorted(got) == sorted([f"e{i}".encode() for i in range(10)] + [f"w{i}".encode() for i in range(10)])
            assert [d for d in got if d.startswith(b"e")] == [f"e{i}".encode() for i in range(10)]
            assert [d for d in got if d.startswith(b"w")] == [f"w{i}".encode() for i in range(10)]
            assert nothing_more(consumer)  # nothing came back around: no message was replicated twice
    finally:
        east.close()
        west.close()
    for cluster, other in (("east", "west"), ("west", "east")):
        entries = entries_of(instance, cluster, topic)
        assert len(entries) == 20
        assert {e.metadata.replicated_from for e in entries} == {"", other}


def test_partitioned_topic(instance: Instance) -> None:
    ns = instance.namespace("east", "west")
    topic = f"persistent://{ns}/parts"
    namespaces.create_partitioned_topic(instance.config, topic, 3)
    east, west = instance.client("east"), instance.client("west")
    try:
        consumer = west.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = east.create_producer(topic, producer_name="pp")
        for i in range(30):
            producer.send(f"m{i}".encode(), partition_key=f"k{i}")
        got = receive_all(consumer, 30)
        assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(30))
        assert len({m.topic_name() for m in got}) > 1  # several partitions carried them
        assert nothing_more(consumer)
    finally:
        east.close()
        west.close()
    wait_for(
        lambda: _partitioned_stats(instance, "east", topic)["replication"]["west"]["msgOutCounter"] == 30,
        "the partitioned stats to sum the partitions' replication",
    )


def _partitioned_stats(instance: Instance, cluster: str, topic: str) -> dict[str, Any]:
    path = topic.replace("persistent://", "persistent/")
    url = f"{instance.clusters[cluster].web_service_url}/admin/v2/{path}/partitioned-stats"
    with urllib.request.urlopen(url, timeout=20) as response:
        return json.load(response)


def test_removing_a_cluster_stops_replication_and_deletes_the_cursor(instance: Instance) -> None:
    ns = instance.namespace("east", "west")
    topic = f"persistent://{ns}/removed"
    east, west = instance.client("east"), instance.client("west")
    try:
        consumer = west.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = east.create_producer(topic, producer_name="pr")
        producer.send(b"before")
        assert [m.data() for m in receive_all(consumer, 1)] == [b"before"]
        namespaces.set_replication_clusters(instance.config, ns, ["east"])
        broker = instance.clusters["east"].broker
        assert broker is not None

        def stopped() -> bool:
            cursors = broker.service.topic(topic).ml.cursors()
            return not instance.stats("east", topic)["replication"] and "pulsar.repl.west" not in cursors

        wait_for(stopped, "east to stop replicating and delete the replicator's cursor")
        producer.send(b"after")
        assert nothing_more(consumer)
    finally:
        east.close()
        west.close()


def test_backlog_drains_after_the_remote_was_down(instance: Instance) -> None:
    ns = instance.namespace("east", "west")
    topic = f"persistent://{ns}/down"
    east = instance.client("east")
    west_cluster = instance.clusters["west"]
    try:
        producer = east.create_producer(topic, producer_name="pd")
        producer.send(b"m0")
        wait_for(lambda: instance.stats("east", topic)["replication"]["west"]["msgOutCounter"] == 1, "m0 replicated")
        west_cluster.stop_broker()
        for i in range(1, 40):
            producer.send(f"m{i}".encode())

        def backlogged() -> bool:
            stats = instance.stats("east", topic)["replication"]["west"]
            return bool(stats["replicationBacklog"] >= 39 and not stats["connected"])

        wait_for(backlogged, "the replication backlog to hold what west could not take", timeout_s=20)
        west_cluster.start_broker()
        wait_for(
            lambda: instance.stats("east", topic)["replication"]["west"]["replicationBacklog"] == 0,
            "the backlog to drain once west is back",
            timeout_s=60,
        )
    finally:
        east.close()
    west = instance.client("west")
    try:
        consumer = west.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        assert [m.data() for m in receive_all(consumer, 40)] == [f"m{i}".encode() for i in range(40)]
        assert nothing_more(consumer)
    finally:
        west.close()


def publish_burst(producer: pulsar.Producer, first: int, count: int) -> list[Any]:
    """Send asynchronously; returns the futures' outcomes list, filled as receipts come (True: acknowledged)."""
    outcomes: list[Any] = [None] * count

    def done(i: int) -> Any:
        return lambda result, _mid: outcomes.__setitem__(i, result == pulsar.Result.Ok)

    for i in range(count):
        producer.send_async(f"m{first + i}".encode(), done(i))
    return outcomes


def replicated_exactly_once(instance: Instance, topic: str, acknowledged: list[bytes]) -> None:
    """Once east's replicator caught up, west's log holds every acknowledged message once, in order."""
    wait_for(
        lambda: instance.stats("east", topic)["replication"]["west"]["replicationBacklog"] == 0,
        "east's replication to catch up",
        timeout_s=60,
    )
    at_west = [m.payload for e in entries_of(instance, "west", topic) for m in entry_codec.singles(e)]
    assert len(at_west) == len(set(at_west)), "a message was replicated twice"
    assert [m for m in at_west if m in set(acknowledged)] == acknowledged


def test_a_cluster_does_not_serve_a_namespace_not_replicated_to_it(instance: Instance) -> None:
    ns = instance.namespace("east")
    topic = f"persistent://{ns}/east-only"
    west = instance.client("west", operation_timeout_s=3)  # the client retries the refusal until then
    try:
        with pytest.raises(pulsar.PulsarException):
            west.create_producer(topic, send_timeout_millis=5000)
    finally:
        west.close()
    path = topic.replace("persistent://", "persistent/")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{instance.clusters['west'].web_service_url}/lookup/v2/topic/{path}", timeout=20)
    assert refused.value.code == 412
    assert "not to this broker's cluster west" in refused.value.read().decode()
    east = instance.client("east")  # its own cluster serves it
    try:
        east.create_producer(topic).send(b"here")
    finally:
        east.close()


def disrupted_burst(instance: Instance, name: str, disrupt: Callable[[str], None], before: int, after: int = 0) -> None:
    """Publish `before` messages to east, disrupt the topic (`disrupt(topic)`) once replication is under way,
    publish `after` more; every message must be acknowledged (the client resends, the topic de-duplicates)
    and reach west exactly once, in order."""
    ns = instance.namespace("east", "west", deduplication=True)
    topic = f"persistent://{ns}/{name}"
    east = instance.client("east")
    try:
        producer = east.create_producer(topic, producer_name=name, send_timeout_millis=60_000)
        bursts = [publish_burst(producer, 0, before)]
        wait_for(
            lambda: instance.stats("east", topic)["replication"]["west"]["msgOutCounter"] >= 50,
            "replication to be under way",
        )
        disrupt(topic)
        bursts.append(publish_burst(producer, before, after))
        producer.flush()
        wait_for(lambda: None not in bursts[0] + bursts[1], "every send to be answered", timeout_s=60)
    finally:
        east.close()
    acknowledged = [f"m{i}".encode() for i, ok in enumerate(bursts[0] + bursts[1]) if ok]
    assert len(acknowledged) == before + after
    replicated_exactly_once(instance, topic, acknowledged)


def test_a_crash_of_the_replicating_broker_loses_and_duplicates_nothing(instance: Instance) -> None:
    east = instance.clusters["east"]

    def crash(_topic: str) -> None:
        east.stop_broker(graceful=False)  # mid-stream: the cursor persisted lags what west has
        east.start_broker()

    disrupted_burst(instance, "crash", crash, before=300, after=100)


def unload(standalone: Standalone, topic: str) -> None:
    broker = standalone.broker
    assert broker is not None
    assert broker.service.unload_topics(lambda name: str(name) == topic, graceful=True) == [topic]


def test_the_remote_closing_the_replicator_mid_stream_duplicates_nothing(instance: Instance) -> None:
    # The remote's producer is closed: the replicator rewinds and sends again from its cursor.
    disrupted_burst(instance, "remote-unload", lambda topic: unload(instance.clusters["west"], topic), before=400)


def test_replication_follows_the_topic_through_an_unload_at_the_origin(instance: Instance) -> None:
    # The client looks the topic up again; the reloaded topic's replicator resumes from its cursor.
    disrupted_burst(instance, "origin-unload", lambda topic: unload(instance.clusters["east"], topic), before=300)


def test_a_replicator_cursor_name_is_not_a_subscription(instance: Instance) -> None:
    ns = instance.namespace("east", "west")
    topic = f"persistent://{ns}/reserved"
    east, west = instance.client("east"), instance.client("west")
    try:
        producer = east.create_producer(topic)
        with pytest.raises(pulsar.PulsarException):
            east.subscribe(topic, "pulsar.repl.west")  # acknowledging on it would skip what west never got
        consumer = west.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer.send(b"still replicated")
        assert [m.data() for m in receive_all(consumer, 1)] == [b"still replicated"]
    finally:
        east.close()
        west.close()
