"""Non-persistent topics (issue 43 item 4) with the official client (pulsar-client 3.13.0) against a real
`pulsar-ref standalone` process: every subscription type, drops counted, partitions, admin stats, and
the persistent-only operations refused while the topic keeps serving."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pulsar
import pytest

from impl.web.http import HttpError
from tests import producing
from tests.broker.pulsar_standalone import Standalone, running_standalone

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory)


@pytest.fixture
def client(standalone: Standalone) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.url, operation_timeout_seconds=15)
    try:
        yield c
    finally:
        c.close()


_counter = iter(range(1_000_000))


class Point(pulsar.schema.Record):
    x = pulsar.schema.Integer()


def topic_name(prefix: str) -> str:
    return f"non-persistent://public/default/{prefix}-{int(time.time() * 1000)}-{next(_counter)}"


def admin_path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/", 1)


def drain(consumer: pulsar.Consumer, wait_ms: int = 500) -> list[pulsar.Message]:
    return producing.drain(consumer, wait_ms)


@pytest.mark.parametrize(
    "sub_type",
    [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover, pulsar.ConsumerType.Shared],
)
def test_each_subscription_type_gets_what_is_published_in_order(
    client: pulsar.Client, sub_type: pulsar.ConsumerType
) -> None:
    topic = topic_name("np-types")
    consumer = client.subscribe(topic, "s", consumer_type=sub_type)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(20)]
    # Pulsar confirms every non-persistent message as ledger 0, entry 0.
    assert {(i.ledger_id(), i.entry_id()) for i in ids} == {(0, 0)}
    got = drain(consumer)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(20)]
    assert {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got} == {(0, 0)}


def test_key_shared_keeps_each_key_on_one_consumer(client: pulsar.Client) -> None:
    topic = topic_name("np-keys")
    consumers = [client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared) for _ in range(2)]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send(f"{i}".encode(), partition_key=f"k{i % 8}")
    owners: dict[str, int] = {}
    total = 0
    for n, c in enumerate(consumers):
        for m in drain(c):
            total += 1
            assert owners.setdefault(m.partition_key(), n) == n, "a key went to two consumers"
    assert total == 40
    assert len(set(owners.values())) == 2  # both consumers took keys


def test_batches_are_delivered_whole(client: pulsar.Client) -> None:
    topic = topic_name("np-batch")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10)
    for i in range(30):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    assert [m.data() for m in drain(consumer)] == [f"b{i}".encode() for i in range(30)]


def test_without_a_connected_consumer_messages_are_dropped_and_counted(
    client: pulsar.Client, standalone: Standalone
) -> None:
    topic = topic_name("np-drop")
    consumer = client.subscribe(topic, "gone")
    consumer.close()  # the subscription stays, with nobody to deliver to
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(7):
        producer.send(f"d{i}".encode())  # confirmed all the same, as Pulsar
    stats = standalone.admin.call("GET", admin_path(topic) + "/stats")
    assert stats["msgInCounter"] == 7
    assert stats["subscriptions"]["gone"]["msgDropCount"] == 7
    assert stats["subscriptions"]["gone"]["msgDropRate"] >= 0.0  # over the last 5 s period: may be 0 still
    assert stats["msgDropRate"] == 0.0  # Pulsar's topic figure: publishes dropped (none here)
    assert stats["storageSize"] == 0
    # Nothing was kept: a consumer subscribing now gets only what comes next.
    again = client.subscribe(topic, "gone")
    producer.send(b"after")
    assert [m.data() for m in drain(again)] == [b"after"]


def test_a_consumer_without_permits_has_its_messages_dropped(client: pulsar.Client, standalone: Standalone) -> None:
    topic = topic_name("np-permits")
    # A receiver queue of 1: the client grants a permit at a time and refills only as it receives.
    consumer = client.subscribe(topic, "slow", receiver_queue_size=1)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"p{i}".encode())
    got = drain(consumer)
    stats = standalone.admin.call("GET", admin_path(topic) + "/stats")
    dropped = stats["subscriptions"]["slow"]["msgDropCount"]
    assert dropped > 0 and len(got) + dropped == 20
    received = [int(m.data()[1:]) for m in got]
    assert received == sorted(received)  # what arrives keeps its order


def test_stats_name_each_publisher_and_consumer_as_on_a_persistent_topic(
    client: pulsar.Client, standalone: Standalone
) -> None:
    """The connection's client version, address and since-when, the names, properties and permits."""
    topic = topic_name("np-clients")
    consumer = client.subscribe(topic, "s", consumer_name="np-reader", properties={"team": "green"})
    producer = client.create_producer(topic, producer_name="np-writer", properties={"app": "metrics"})
    producer.send(b"x")
    consumer.receive(5000)
    stats = standalone.admin.call("GET", admin_path(topic) + "/stats")
    (publisher,) = stats["publishers"]
    (reader,) = stats["subscriptions"]["s"]["consumers"]
    assert publisher["producerName"] == "np-writer" and publisher["metadata"] == {"app": "metrics"}
    assert reader["consumerName"] == "np-reader" and reader["metadata"] == {"team": "green"}
    for who in (publisher, reader):
        assert who["clientVersion"].startswith("Pulsar"), who
        assert who["address"].startswith("/127.0.0.1:") and who["connectedSince"], who
    assert reader["availablePermits"] > 0


def test_partitioned_non_persistent_topic(client: pulsar.Client, standalone: Standalone) -> None:
    topic = topic_name("np-part")
    standalone.admin.call("PUT", admin_path(topic) + "/partitions", 3)
    assert standalone.admin.call("GET", admin_path(topic) + "/partitions") == {"partitions": 3}
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(30):
        producer.send(f"{i}".encode(), partition_key=f"k{i}")
    got = drain(consumer)
    assert sorted(int(m.data()) for m in got) == list(range(30))
    assert {m.topic_name().rsplit("-partition-", 1)[0] for m in got} == {topic}
    assert len({m.message_id().partition() for m in got}) > 1
    consumer.close()
    producer.send(b"dropped", partition_key="k0")
    stats = standalone.admin.call("GET", admin_path(topic) + "/partitioned-stats")
    assert stats["metadata"] == {"partitions": 3}
    assert stats["msgInCounter"] == 31
    assert stats["subscriptions"]["s"]["msgDropCount"] == 1
    listed = standalone.admin.call("GET", "/admin/v2/non-persistent/public/default/partitioned")
    assert topic in listed


def test_persistent_only_operations_are_refused_and_the_topic_keeps_serving(
    client: pulsar.Client, standalone: Standalone
) -> None:
    topic = topic_name("np-refused")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    with pytest.raises(pulsar.PulsarException):
        consumer.seek(0)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    with pytest.raises(pulsar.PulsarException):
        reader.has_message_available()  # needs the last message id: a persistent topic's
    reader.close()
    with pytest.raises(pulsar.PulsarException):
        client.subscribe(topic, "compacted", is_read_compacted=True)  # nothing kept, nothing compacted
    with pytest.raises(HttpError) as refused:
        standalone.admin.call("POST", admin_path(topic) + "/subscription/s/resetcursor/0")
    assert refused.value.status in (405, 409)
    producer.send(b"still")
    assert [m.data() for m in drain(consumer)] == [b"still"]


def test_unload_drops_the_in_memory_state(client: pulsar.Client, standalone: Standalone) -> None:
    topic = topic_name("np-unload")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"before")
    assert [m.data() for m in drain(consumer)] == [b"before"]
    standalone.admin.call("PUT", admin_path(topic) + "/unload")
    # The client reconnects producer and consumer; the topic is loaded again, empty. What is published
    # before the consumer is back is dropped (as Pulsar), so wait for it first.
    deadline = time.monotonic() + 15
    while True:
        try:
            stats = standalone.admin.call("GET", admin_path(topic) + "/stats")
            if stats["subscriptions"].get("s", {}).get("consumers"):
                break
        except HttpError as e:
            assert e.status == 404  # not loaded again yet
        assert time.monotonic() < deadline, "the consumer did not come back"
        time.sleep(0.1)
    assert stats["msgInCounter"] == 0  # the counters started again
    producer.send(b"after")
    assert [m.data() for m in drain(consumer, 2000)] == [b"after"]


def test_admin_lists_and_stats(client: pulsar.Client, standalone: Standalone) -> None:
    topic = topic_name("np-admin")
    client.subscribe(topic, "s")
    assert topic in standalone.admin.call("GET", "/admin/v2/non-persistent/public/default")
    stats = standalone.admin.call("GET", admin_path(topic) + "/stats")
    for field in ("msgRateIn", "msgRateOut", "msgInCounter", "msgDropRate", "publishers", "subscriptions"):
        assert field in stats
    with pytest.raises(HttpError) as missing:
        standalone.admin.call("GET", admin_path(topic_name("np-nope")) + "/stats")
    assert missing.value.status == 404


def test_readers_unsubscribe_and_metrics(client: pulsar.Client, standalone: Standalone) -> None:
    topic = topic_name("np-misc")
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"one")
    assert reader.read_next(5000).data() == b"one"
    assert [m.data() for m in drain(consumer)] == [b"one"]
    reader.close()  # a reader's subscription goes with it
    assert standalone.admin.call("GET", admin_path(topic) + "/subscriptions") == ["s"]
    consumer.unsubscribe()
    assert standalone.admin.call("GET", admin_path(topic) + "/subscriptions") == []
    client.subscribe(topic, "gone").close()
    producer.send(b"two")
    metrics = standalone.admin.call("GET", "/metrics", raw=True)
    assert (
        f'pulsar_subscription_msg_drop_rate{{cluster="standalone",namespace="public/default",subscription="gone",topic="{topic}"}}'
        in metrics
    )


@pytest.mark.deep
def test_under_load_no_reorder_no_duplicate_and_every_message_delivered_or_dropped(
    client: pulsar.Client, standalone: Standalone
) -> None:
    """Pulsar's promise for non-persistent topics, judged on 2 producers x 3,000 messages while consumers of
    every type receive (some slowly): per consumer, each producer's messages arrive in order and at most
    once; per subscription, deliveries plus counted drops are exactly what was published."""
    topic = topic_name("np-load")
    subs = {
        "ex": [client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive, receiver_queue_size=50)],
        "fo": [client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover) for _ in range(2)],
        "sh": [
            client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=q)
            for q in (10, 1000)
        ],
        "ks": [client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared) for _ in range(2)],
    }
    producers = [
        client.create_producer(topic, batching_enabled=(p == 1), producer_name=f"p{p}", block_if_queue_full=True)
        for p in (0, 1)
    ]
    n = 3000
    for i in range(n):
        for p, producer in enumerate(producers):
            producer.send_async(f"p{p}-{i}".encode(), None, partition_key=f"k{i % 16}")
    for producer in producers:
        producer.flush()
    stats = standalone.admin.call("GET", admin_path(topic) + "/stats")
    assert stats["msgInCounter"] == 2 * n
    assert stats["subscriptions"]["ex"]["msgDropCount"] > 0  # its 50-message queue filled: drops happened
    for name, consumers in subs.items():
        delivered = 0
        for consumer in consumers:
            last = {0: -1, 1: -1}
            for m in drain(consumer, 1000):
                p, i = (int(x) for x in m.data().decode()[1:].split("-"))
                assert i > last[p], f"{name}: p{p}-{i} after p{p}-{last[p]} (reordered or duplicated)"
                last[p] = i
                delivered += 1
        dropped = stats["subscriptions"][name]["msgDropCount"]
        assert delivered + dropped == 2 * n, (name, delivered, dropped)


def test_namespace_listings_regex_subscriptions_delete_and_internal_stats(
    client: pulsar.Client, standalone: Standalone
) -> None:
    prefix = f"np-re-{int(time.time() * 1000)}"
    topics = [f"non-persistent://public/default/{prefix}-{i}" for i in range(2)]
    for t in topics:
        client.subscribe(t, "pre").close()  # loads them
    listed = standalone.admin.call("GET", "/admin/v2/namespaces/public/default/topics?mode=NON_PERSISTENT")
    assert set(topics) <= set(listed) and all(t.startswith("non-persistent://") for t in listed)
    everything = standalone.admin.call("GET", "/admin/v2/namespaces/public/default/topics?mode=ALL")
    assert set(topics) <= set(everything)
    assert not set(topics) & set(standalone.admin.call("GET", "/admin/v2/namespaces/public/default/topics"))
    consumer = client.subscribe(
        re.compile(f"non-persistent://public/default/{prefix}-.*"),
        "re",
        regex_subscription_mode=pulsar.RegexSubscriptionMode.NonPersistentOnly,
    )
    producer = client.create_producer(topics[1], batching_enabled=False)
    producer.send(b"found")
    assert [m.data() for m in drain(consumer)] == [b"found"]
    internal = standalone.admin.call("GET", admin_path(topics[1]) + "/internalStats")
    assert internal["entriesAddedCounter"] == 1 and "re" in internal["cursors"]
    with pytest.raises(HttpError) as busy:
        standalone.admin.call("DELETE", admin_path(topics[1]))
    assert busy.value.status == 412
    standalone.admin.call("DELETE", admin_path(topics[1]) + "?force=true")
    assert topics[1] not in standalone.admin.call("GET", "/admin/v2/non-persistent/public/default")


def test_schemas_and_exclusive_producers_work_as_on_persistent_topics(client: pulsar.Client) -> None:
    topic = topic_name("np-schema")
    consumer = client.subscribe(topic, "s", schema=pulsar.schema.StringSchema())
    producer = client.create_producer(
        topic, schema=pulsar.schema.StringSchema(), access_mode=pulsar.ProducerAccessMode.Exclusive
    )
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(topic, schema=pulsar.schema.StringSchema())  # the exclusive one holds it
    producer.send("typed")
    assert consumer.receive(5000).value() == "typed"
    producer.close()
    with pytest.raises(pulsar.PulsarException, match="Incompatible"):
        client.create_producer(topic, schema=pulsar.schema.JsonSchema(Point))  # the registry has a string
    client.create_producer(topic, schema=pulsar.schema.StringSchema()).send("again")
    assert consumer.receive(5000).value() == "again"
