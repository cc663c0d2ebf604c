"""Apache Pulsar's official client (pulsar-client, C++ 4.2.0 inside), unchanged, against a real
`pulsar-ref standalone` process: what a Pulsar application sees."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pulsar
import pytest

from impl.broker.web.admin_client import topic_path
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


def topic_name(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{int(time.time() * 1000)}-{next(_counter)}"


def receive_all(consumer: pulsar.Consumer, n: int, ack: bool = True) -> list[pulsar.Message]:
    out = []
    for _ in range(n):
        m = consumer.receive(10_000)
        out.append(m)
        if ack:
            consumer.acknowledge(m)
    return out


def assert_nothing_more(consumer: pulsar.Consumer, wait_ms: int = 500) -> None:
    with pytest.raises(pulsar.Timeout):
        consumer.receive(wait_ms)


def test_produce_and_consume_with_properties_keys_and_event_time(client: pulsar.Client) -> None:
    topic = topic_name("basic")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    sent = [
        producer.send(f"m{i}".encode(), properties={"i": str(i)}, partition_key=f"k{i}", event_timestamp=1000 + i)
        for i in range(10)
    ]
    got = receive_all(consumer, 10)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(10)]
    assert [m.properties() for m in got] == [{"i": str(i)} for i in range(10)]
    assert [m.partition_key() for m in got] == [f"k{i}" for i in range(10)]
    assert [m.event_timestamp() for m in got] == [1000 + i for i in range(10)]
    assert [str(m.message_id()) for m in got] == [str(s) for s in sent]
    assert len({(s.ledger_id(), s.entry_id()) for s in sent}) == 10  # unbatched: one entry each


def test_a_thousand_async_sends_are_batched_and_consumed_in_order(client: pulsar.Client) -> None:
    topic = topic_name("batch")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=20)
    ids: dict[int, pulsar.MessageId] = {}

    def sent(i: int):  # noqa: ANN202
        def callback(result: pulsar.Result, mid: pulsar.MessageId) -> None:
            assert result == pulsar.Result.Ok
            ids[i] = mid

        return callback

    for i in range(1000):
        producer.send_async(b"%d" % i, sent(i))
    producer.flush()
    assert len(ids) == 1000
    entries = {(m.ledger_id(), m.entry_id()) for m in ids.values()}
    assert len(entries) < 1000  # batches: several messages share an entry
    by_entry: dict[tuple[int, int], list[int]] = {}
    for m in ids.values():
        by_entry.setdefault((m.ledger_id(), m.entry_id()), []).append(m.batch_index())
    assert all(sorted(b) == list(range(len(b))) for b in by_entry.values())
    got = receive_all(consumer, 1000)
    assert [int(m.data()) for m in got] == list(range(1000))


def test_exclusive_refuses_a_second_consumer(client: pulsar.Client) -> None:
    topic = topic_name("excl")
    client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)


def test_shared_delivers_each_message_to_one_consumer(client: pulsar.Client) -> None:
    topic = topic_name("shared")
    a = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10)
    b = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10)
    producer = client.create_producer(topic)
    for i in range(40):
        producer.send(b"%d" % i)
    seen: list[int] = []
    for consumer in (a, b):
        while True:
            try:
                m = consumer.receive(1000)
            except pulsar.Timeout:
                break
            seen.append(int(m.data()))
            consumer.acknowledge(m)
    assert sorted(seen) == list(range(40))  # each exactly once, split between the two


def test_failover_delivers_to_the_active_consumer_and_switches_on_close(client: pulsar.Client) -> None:
    topic = topic_name("failover")
    first = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a")
    second = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(b"%d" % i)
    assert [int(m.data()) for m in receive_all(first, 5)] == list(range(5))
    assert_nothing_more(second)
    first.close()
    for i in range(5, 10):
        producer.send(b"%d" % i)
    assert [int(m.data()) for m in receive_all(second, 5)] == list(range(5, 10))


def key_shared_consumers(client: pulsar.Client, topic: str) -> list[pulsar.Consumer]:
    return [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=n) for n in "ab"]


def drain_by_key(consumers: list[pulsar.Consumer]) -> tuple[dict[str, int], dict[str, list[int]], int]:
    """Each consumer in turn, until it gets nothing for a second, acknowledging all: the consumer of each
    key (asserted to be one), each key's payloads in arrival order, and how many came in a batch."""
    owner: dict[str, int] = {}
    per_key: dict[str, list[int]] = {}
    batched = 0
    for n, consumer in enumerate(consumers):
        while True:
            try:
                m = consumer.receive(1000)
            except pulsar.Timeout:
                break
            consumer.acknowledge(m)
            batched += m.message_id().batch_index() > 0
            assert owner.setdefault(m.partition_key(), n) == n
            per_key.setdefault(m.partition_key(), []).append(int(m.data()))
    return owner, per_key, batched


def test_key_shared_keeps_each_key_on_one_consumer_in_order(client: pulsar.Client) -> None:
    topic = topic_name("keyshared")
    consumers = key_shared_consumers(client, topic)
    producer = client.create_producer(topic)
    for i in range(60):
        producer.send(b"%d" % i, partition_key=f"key{i % 6}")
    _, per_key, _ = drain_by_key(consumers)
    assert sum(len(v) for v in per_key.values()) == 60
    assert all(v == sorted(v) for v in per_key.values())


def test_key_shared_takes_key_based_batches_whole_and_keeps_each_key_on_one_consumer(
    client: pulsar.Client, standalone: Standalone
) -> None:
    """Key-based batching (one key per batch, as Pulsar advises for Key_Shared): each batch goes whole to
    its key's consumer; every key stays on one consumer, in order, and every message arrives once."""
    topic = topic_name("keysharedbatches")
    consumers = key_shared_consumers(client, topic)
    producer = client.create_producer(
        topic, batching_enabled=True, batching_type=pulsar.BatchingType.KeyBased, batching_max_publish_delay_ms=20
    )
    for i in range(600):
        producer.send_async(b"%d" % i, None, partition_key=f"key{i % 6}")
    producer.flush()
    owner, per_key, batched = drain_by_key(consumers)
    assert batched and set(owner.values()) == {0, 1}  # batches came, and both consumers got keys
    assert sorted(i for v in per_key.values() for i in v) == list(range(600))
    assert all(v == sorted(v) for v in per_key.values())
    time.sleep(0.3)  # the grouped acks go out
    stats = standalone.admin.call("GET", topic_path(topic) + "/stats")["subscriptions"]["s"]
    assert stats["msgBacklog"] == 0 and stats["unackedMessages"] == 0
    assert sum(c["msgOutCounter"] for c in stats["consumers"]) == 600


def test_acknowledged_messages_stay_acknowledged_after_reconnecting(client: pulsar.Client) -> None:
    topic = topic_name("acks")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(b"%d" % i)
    got = receive_all(consumer, 10, ack=False)
    for m in got:
        if int(m.data()) % 2 == 0:
            consumer.acknowledge(m)
    consumer.close()  # flushes the grouped acks
    again = client.subscribe(topic, "s")
    assert [int(m.data()) for m in receive_all(again, 5)] == [1, 3, 5, 7, 9]
    assert_nothing_more(again)


def test_cumulative_ack_survives_a_reconnect(client: pulsar.Client) -> None:
    topic = topic_name("cumulative")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(b"%d" % i)
    got = receive_all(consumer, 10, ack=False)
    consumer.acknowledge_cumulative(got[6])
    consumer.close()
    again = client.subscribe(topic, "s")
    assert [int(m.data()) for m in receive_all(again, 3)] == [7, 8, 9]


def test_negative_ack_redelivers_with_a_redelivery_count(client: pulsar.Client) -> None:
    topic = topic_name("nack")
    consumer = client.subscribe(
        topic,
        "s",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        negative_ack_redelivery_delay_ms=100,
    )
    producer = client.create_producer(topic)
    producer.send(b"x")
    first = consumer.receive(10_000)
    assert first.redelivery_count() == 0
    consumer.negative_acknowledge(first)
    second = consumer.receive(10_000)
    assert second.data() == b"x" and second.redelivery_count() == 1
    consumer.acknowledge(second)
    assert_nothing_more(consumer)


def test_ack_timeout_redelivers_what_was_not_acknowledged(client: pulsar.Client) -> None:
    topic = topic_name("acktimeout")
    consumer = client.subscribe(
        topic,
        "s",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        unacked_messages_timeout_ms=10_000,  # the client's minimum
    )
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(b"%d" % i)
    first = receive_all(consumer, 3, ack=False)
    consumer.acknowledge(first[1])
    again = consumer.receive(20_000)  # after the timeout the client asks for the other two again
    more = consumer.receive(5_000)
    assert sorted(int(m.data()) for m in (again, more)) == [0, 2]
    assert again.redelivery_count() == more.redelivery_count() == 1
    consumer.acknowledge(again)
    consumer.acknowledge(more)


def test_partly_acknowledged_batch_redelivers_only_the_rest(client: pulsar.Client) -> None:
    topic = topic_name("batchacks")
    consumer = client.subscribe(
        topic, "s", initial_position=pulsar.InitialPosition.Earliest, batch_index_ack_enabled=True
    )
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    for i in range(6):
        producer.send_async(b"%d" % i, None)
    producer.flush()
    got = receive_all(consumer, 6, ack=False)
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got}) == 1
    for m in got[:4]:
        consumer.acknowledge(m)
    consumer.close()
    again = client.subscribe(topic, "s", batch_index_ack_enabled=True)
    assert [int(m.data()) for m in receive_all(again, 2)] == [4, 5]
    assert_nothing_more(again)


def test_a_batch_goes_whole_to_one_shared_consumer_which_hands_over_only_what_it_left_unacked(
    client: pulsar.Client, standalone: Standalone
) -> None:
    """A batch entry goes to one Shared consumer whole (counted as its messages, not once per message of
    it); when that consumer leaves, another gets only the messages it had not acknowledged."""
    topic = topic_name("wholebatch")
    first = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    for i in range(6):
        producer.send_async(b"%d" % i, None)
    producer.flush()
    got = receive_all(first, 6, ack=False)
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got}) == 1
    for m in got[:4]:
        first.acknowledge(m)
    second = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True)
    deadline = time.monotonic() + 5
    while True:  # the client sends its acks grouped, within 100 ms
        (c,) = [
            c
            for c in standalone.admin.call("GET", topic_path(topic) + "/stats")["subscriptions"]["s"]["consumers"]
            if c["msgOutCounter"]
        ]
        if c["unackedMessages"] == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert c["msgOutCounter"] == 6 and c["unackedMessages"] == 2
    first.close()
    assert [int(m.data()) for m in receive_all(second, 2)] == [4, 5]
    assert_nothing_more(second)


def test_readers_from_earliest_latest_and_a_message_id(client: pulsar.Client) -> None:
    topic = topic_name("reader")
    producer = client.create_producer(topic)
    ids = [producer.send(b"%d" % i) for i in range(5)]
    earliest = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [int(earliest.read_next(10_000).data()) for _ in range(5)] == list(range(5))
    assert not earliest.has_message_available()
    latest = client.create_reader(topic, pulsar.MessageId.latest)
    assert not latest.has_message_available()
    from_id = client.create_reader(topic, ids[2])  # exclusive of the id, as Pulsar's default
    assert int(from_id.read_next(10_000).data()) == 3
    inclusive = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    assert int(inclusive.read_next(10_000).data()) == 2
    producer.send(b"5")
    assert latest.has_message_available()
    assert latest.read_next(10_000).data() == b"5"


def test_seek_by_message_id_and_by_publish_time(client: pulsar.Client) -> None:
    topic = topic_name("seek")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    ids = []
    for i in range(6):
        ids.append(producer.send(b"%d" % i))
        if i == 2:
            time.sleep(0.05)
            middle = int(time.time() * 1000)
            time.sleep(0.05)
    receive_all(consumer, 6)
    consumer.seek(ids[1])
    assert [int(m.data()) for m in receive_all(consumer, 4)] == [2, 3, 4, 5]  # exclusive of the id
    consumer.seek(middle)
    assert [int(m.data()) for m in receive_all(consumer, 3)] == [3, 4, 5]


def test_deduplication_across_producer_re_creation(client: pulsar.Client, standalone: Standalone) -> None:
    # De-duplication is off by default (as in Pulsar's brokerDeduplicationEnabled): on for this namespace.
    standalone.admin.call("PUT", "/admin/v2/namespaces/public/dedup-on")
    standalone.admin.call("POST", "/admin/v2/namespaces/public/dedup-on/deduplication", True)
    topic = topic_name("dedup").replace("/public/default/", "/public/dedup-on/")
    producer = client.create_producer(topic, producer_name="writer-1")
    for i in range(5):
        producer.send(b"%d" % i, sequence_id=i)
    producer.close()
    again = client.create_producer(topic, producer_name="writer-1")
    assert again.last_sequence_id() == 4
    again.send(b"3", sequence_id=3)  # a resend: acknowledged, not written
    again.send(b"5", sequence_id=5)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [int(reader.read_next(10_000).data()) for _ in range(6)] == list(range(6))
    assert not reader.has_message_available()


def test_a_second_producer_with_a_connected_name_or_exclusive_access_is_refused(client: pulsar.Client) -> None:
    topic = topic_name("producers")
    client.create_producer(topic, producer_name="only")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="only")
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)


def test_partitioned_topic_and_regex_subscription(client: pulsar.Client, standalone: Standalone) -> None:
    base = topic_name("parts")
    standalone.admin.create_partitioned_topic(base, 3)
    consumer = client.subscribe(base, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(base)
    for i in range(30):
        producer.send(b"%d" % i, partition_key=f"k{i}")
    got = receive_all(consumer, 30)
    assert sorted(int(m.data()) for m in got) == list(range(30))
    assert len({m.topic_name() for m in got}) == 3
    # The client matches the pattern against the partitioned topic's name (it folds the partitions).
    regex = client.subscribe(re.compile(base[: -len("x")] + "."), "r", initial_position=pulsar.InitialPosition.Earliest)
    assert sorted(int(m.data()) for m in receive_all(regex, 30)) == list(range(30))


def test_unload_with_a_producer_and_consumer_attached_loses_nothing(
    client: pulsar.Client, standalone: Standalone
) -> None:
    topic = topic_name("unload")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    acked = [producer.send(b"%d" % i) for i in range(20)]
    standalone.admin.call("PUT", topic_path(topic) + "/unload")
    acked += [producer.send(b"%d" % i) for i in range(20, 40)]  # the client re-attaches by itself
    got = receive_all(consumer, 40)
    assert sorted({int(m.data()) for m in got}) == list(range(40))
    assert acked[-1].ledger_id() > acked[0].ledger_id()  # the new owner writes a new ledger


def test_a_batched_backlog_shared_by_consumers_that_leave_and_an_unload_loses_nothing(
    client: pulsar.Client, standalone: Standalone
) -> None:
    """Batches dispatched whole: two Shared consumers ack two thirds of every batch they get and leave; a
    third gets exactly the rest, acknowledges it, and after an unload nothing comes again."""
    topic = topic_name("wholeunload")
    options: dict = {"consumer_type": pulsar.ConsumerType.Shared, "batch_index_ack_enabled": True}
    first, second = (client.subscribe(topic, "s", receiver_queue_size=50, **options) for _ in range(2))
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=25)
    for i in range(1000):
        producer.send_async(b"%d" % i, None)
    producer.flush()
    acked: set[int] = set()
    for consumer in (first, second):
        for _ in range(150):
            m = consumer.receive(10_000)
            if m.message_id().batch_index() % 3:
                consumer.acknowledge(m)
                acked.add(int(m.data()))
    time.sleep(0.3)  # the grouped acks go out
    first.close()
    second.close()
    third = client.subscribe(topic, "s", **options)
    rest = [int(m.data()) for m in receive_all(third, 1000 - len(acked))]
    assert_nothing_more(third)
    assert not acked & set(rest) and len(rest) == len(set(rest))
    assert acked | set(rest) == set(range(1000))
    time.sleep(0.3)
    standalone.admin.call("PUT", topic_path(topic) + "/unload")
    assert_nothing_more(third, 1500)


def test_a_message_over_the_maximum_size_is_refused(client: pulsar.Client) -> None:
    producer = client.create_producer(topic_name("big"))
    with pytest.raises(pulsar.MessageTooBig):
        producer.send(b"x" * (6 * 1024 * 1024))
    producer.send(b"small")  # the producer still works
