"""Issue 43's two silent failures, with the official client against a standalone: a message at the
size limit is stored (it wedged its topic: the bookie refused the entry, the add was retried forever),
and KeyBased batches all arrive on the default namespace (de-duplication, now off by default as in
Pulsar, dropped 20 of 30 as duplicates while confirming them)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pulsar
import pytest

from impl.broker.web.admin_client import AdminClient, topic_path
from tests.broker.pulsar_standalone import Standalone, running_standalone


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory)


@pytest.fixture
def client(standalone: Standalone) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.url, operation_timeout_seconds=20)
    yield c
    c.close()


def topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def receive_numbers(consumer: pulsar.Consumer, count: int) -> list[int]:
    """`count` messages, each acknowledged, as the numbers their payloads hold (20 s for each at most)."""
    got = []
    for _ in range(count):
        m = consumer.receive(20_000)
        consumer.acknowledge(m)
        got.append(int(m.data()))
    return got


def test_a_message_at_the_size_limit_is_stored_and_the_topic_keeps_serving(client: pulsar.Client) -> None:
    t = topic("big")
    consumer = client.subscribe(t, "s")
    producer = client.create_producer(t, batching_enabled=False, send_timeout_millis=20_000)
    big = b"x" * 5_242_816  # under the 5 MiB advertised; with its metadata over the bookie's old 5 MiB frame
    producer.send(big)
    producer.send(b"after")
    assert consumer.receive(20_000).data() == big
    assert consumer.receive(20_000).data() == b"after"
    with pytest.raises(pulsar.MessageTooBig):  # over the advertised limit: refused at once, nothing stored
        producer.send(b"x" * (5 * 1024 * 1024 + 1))
    producer.send(b"still serving")
    assert consumer.receive(20_000).data() == b"still serving"


def test_keybased_batches_all_arrive_on_the_default_namespace(client: pulsar.Client) -> None:
    t = topic("keybased")
    consumer = client.subscribe(t, "s")
    producer = client.create_producer(t, batching_enabled=True, batching_type=pulsar.BatchingType.KeyBased)
    for i in range(30):
        producer.send_async(b"%d" % i, None, partition_key=f"k{i % 3}")
    producer.flush()
    assert sorted(receive_numbers(consumer, 30)) == list(range(30))


def dedup_namespace(admin: AdminClient) -> str:
    """public/dedup-on, with the de-duplication policy on (off by default, as in Pulsar)."""
    namespaces = admin.call("GET", "/admin/v2/namespaces/public")
    if "public/dedup-on" not in namespaces:
        admin.call("PUT", "/admin/v2/namespaces/public/dedup-on")
    admin.call("POST", "/admin/v2/namespaces/public/dedup-on/deduplication", True)
    return "public/dedup-on"


def test_keybased_batches_all_arrive_with_deduplication_on(client: pulsar.Client, standalone: Standalone) -> None:
    t = topic("keybased").replace("public/default", dedup_namespace(standalone.admin))
    consumer = client.subscribe(t, "s")
    producer = client.create_producer(t, batching_enabled=True, batching_type=pulsar.BatchingType.KeyBased)
    for i in range(30):
        producer.send_async(b"%d" % i, None, partition_key=f"k{i % 3}")
    producer.flush()
    assert sorted(receive_numbers(consumer, 30)) == list(range(30))


def test_keybased_batches_of_skewed_keys_all_arrive_with_deduplication_on_and_after_a_restart(
    client: pulsar.Client, standalone: Standalone
) -> None:
    """A key with fewer, lower ids than another's batch (k1: 1, 5 beside k0: 0, 2..29) was confirmed and
    dropped: Pulsar's rule took it for a duplicate, its ids being under the highest pushed. Then the
    broker restarts and rebuilds its ids from the log: a true resend is still a duplicate."""
    t = topic("keybased-skew").replace("public/default", dedup_namespace(standalone.admin))
    consumer = client.subscribe(t, "s")
    producer = client.create_producer(
        t,
        producer_name="skewed",
        batching_enabled=True,
        batching_type=pulsar.BatchingType.KeyBased,
        batching_max_publish_delay_ms=500,
    )
    for i in range(30):
        producer.send_async(b"%d" % i, None, partition_key="k1" if i in (1, 5) else "k0")
    producer.flush()
    assert sorted(receive_numbers(consumer, 30)) == list(range(30))
    producer.close()

    standalone.admin.call("PUT", topic_path(t) + "/unload")  # the next owner rebuilds the ids from the log
    again = client.create_producer(t, producer_name="skewed", batching_enabled=False)
    assert again.last_sequence_id() == 29
    again.send(b"resent 5", sequence_id=5)  # a duplicate: confirmed, not stored
    again.send(b"30", sequence_id=30)
    reader = client.create_reader(t, pulsar.MessageId.earliest)
    stored = []
    while reader.has_message_available():
        stored.append(reader.read_next(10_000).data())
    assert sorted(stored) == sorted(b"%d" % i for i in range(31))
    entries = standalone.admin.call("GET", topic_path(t) + "/internalStats")["numberOfEntries"]
    assert entries == 3  # two batches and the new message


@pytest.mark.parametrize("dedup", [False, True], ids=["dedup-off", "dedup-on"])
def test_chunked_10_mb_messages_round_trip_on_every_subscription_type(
    client: pulsar.Client, standalone: Standalone, dedup: bool
) -> None:
    t = topic("chunks")
    if dedup:
        t = t.replace("public/default", dedup_namespace(standalone.admin))
    types = [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover, pulsar.ConsumerType.Shared]
    types.append(pulsar.ConsumerType.KeyShared)
    consumers = [client.subscribe(t, f"s-{kind}", consumer_type=kind) for kind in types]
    producer = client.create_producer(t, batching_enabled=False, chunking_enabled=True, send_timeout_millis=60_000)
    messages = [bytes([i]) * 10_000_000 for i in (1, 2)]
    for m in messages:
        producer.send(m)
    producer.send(b"small")
    for consumer in consumers:
        got = [consumer.receive(30_000) for _ in range(3)]
        assert [m.data() for m in got] == [*messages, b"small"]
        for m in got:
            consumer.acknowledge(m)
    # An ack of a chunked message acks all its chunks: nothing is left in any subscription's backlog.
    subscriptions = wait_for_empty_backlogs(standalone, t)
    assert {name: sub["msgBacklog"] for name, sub in subscriptions.items()} == {f"s-{k}": 0 for k in types}


def wait_for_empty_backlogs(standalone: Standalone, t: str) -> dict:
    deadline = time.monotonic() + 20
    while True:
        subscriptions = standalone.admin.call("GET", f"{topic_path(t)}/stats")["subscriptions"]
        if all(sub["msgBacklog"] == 0 for sub in subscriptions.values()) or time.monotonic() > deadline:
            return subscriptions
        time.sleep(0.2)


@pytest.mark.deep
def test_a_chunked_100_mb_message_round_trips(client: pulsar.Client) -> None:
    t = topic("chunks-100mb")
    consumer = client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(t, batching_enabled=False, chunking_enabled=True, send_timeout_millis=300_000)
    message = bytes(range(256)) * (100_000_000 // 256)
    producer.send(message)
    got = consumer.receive(300_000)
    assert got.data() == message
    consumer.acknowledge(got)
