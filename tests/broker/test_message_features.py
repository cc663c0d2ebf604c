"""Pulsar's message features (issue 43) with the official client (pulsar-client 3.13.0) against a real
`pulsar-ref standalone` process: Key_Shared as Pulsar hashes, partition ids, delayed delivery,
producer access modes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pulsar
import pytest

from impl.broker.dispatcher import key_slot
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import Standalone, running_standalone
from tests.producing import drain

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


# ---- Key_Shared ------------------------------------------------------------------------------------

KEYS = [f"key-{i}" for i in range(40)]


def _send_keys(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    for i, key in enumerate(KEYS):
        producer.send(b"%d" % i, partition_key=key)
    producer.close()


def test_key_shared_auto_split_puts_each_key_where_pulsar_would(client: pulsar.Client) -> None:
    """The first consumer holds every slot; the second takes the lower half, 0..32,768 (Murmur3 % 65,536)."""
    topic = topic_name("ks-auto")
    first, second = (
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=n) for n in "ab"
    )
    _send_keys(client, topic)
    got_first = {m.partition_key() for m in drain(first)}
    got_second = {m.partition_key() for m in drain(second)}
    assert got_second == {k for k in KEYS if key_slot(k) <= 32768}
    assert got_first == set(KEYS) - got_second


def test_key_shared_sticky_ranges_route_by_slot_and_overlaps_are_refused(client: pulsar.Client) -> None:
    topic = topic_name("ks-sticky")

    def sticky(*ranges: tuple[int, int]) -> pulsar.ConsumerKeySharedPolicy:
        return pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=list(ranges))

    def subscribe(policy: pulsar.ConsumerKeySharedPolicy) -> pulsar.Consumer:
        return client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=policy)

    low = subscribe(sticky((0, 20000)))
    high = subscribe(sticky((20001, 65535)))
    with pytest.raises(pulsar.ConsumerAssignError):
        subscribe(sticky((100, 200)))
    # Ranges outside 0..65,535 the client refuses itself; the broker's refusal is in test_dispatcher.py.
    _send_keys(client, topic)
    assert {m.partition_key() for m in drain(low)} == {k for k in KEYS if key_slot(k) <= 20000}
    assert {m.partition_key() for m in drain(high)} == {k for k in KEYS if key_slot(k) > 20000}


def test_key_shared_keeps_each_keys_order_while_consumers_join_and_leave(client: pulsar.Client) -> None:
    topic = topic_name("ks-order")

    def join(name: str) -> pulsar.Consumer:
        return client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=name)

    consumers = [join("a")]
    producer = client.create_producer(topic)
    per_key: dict[str, list[int]] = {}
    for i in range(120):
        producer.send(b"%d" % i, partition_key=f"k{i % 12}")
        if i == 40:
            consumers.append(join("b"))
        if i == 80:
            consumers.append(join("c"))
            consumers.pop(0).close()  # a leaves holding unacknowledged messages: they go to the others
    for consumer in consumers:
        for m in drain(consumer):
            per_key.setdefault(m.partition_key(), []).append(int(m.data()))
    assert sum(len(v) for v in per_key.values()) >= 120
    # Each consumer's messages of a key in the order received, consumers in the order they took the key over:
    # redelivered messages may repeat, but no key's first deliveries come out of order.
    for values in per_key.values():
        firsts = list(dict.fromkeys(values))
        assert firsts == sorted(firsts)


# ---- partition ids ---------------------------------------------------------------------------------


def test_delivered_ids_of_a_partitioned_topic_carry_their_partition(
    client: pulsar.Client, standalone: Standalone
) -> None:
    topic = topic_name("pids")
    standalone.admin.create_partitioned_topic(topic, 3)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    sent = {producer.send(b"%d" % i).partition() for i in range(9)}
    got = drain(consumer)
    assert len(got) == 9
    assert {m.message_id().partition() for m in got} == sent == {0, 1, 2}
    consumer.close()  # acks of ids with their partition stay acknowledged
    again = client.subscribe(topic, "s")
    assert drain(again, 500) == []


def test_a_reader_on_a_partitions_own_name_reads_seeks_and_stops_at_the_end(
    client: pulsar.Client, standalone: Standalone
) -> None:
    topic = topic_name("pids-reader")
    standalone.admin.create_partitioned_topic(topic, 2)
    producer = client.create_producer(f"{topic}-partition-1")
    ids = [producer.send(b"%d" % i) for i in range(5)]
    reader = client.create_reader(f"{topic}-partition-1", pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(5000))
    assert [int(m.data()) for m in got] == list(range(5))
    assert {m.message_id().partition() for m in got} == {1}
    reader.seek(ids[2])
    assert int(reader.read_next(5000).data()) in (2, 3)  # the client skips the seek id unless inclusive
    consumer = client.subscribe(f"{topic}-partition-1", "s", initial_position=pulsar.InitialPosition.Earliest)
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (ids[-1].ledger_id(), ids[-1].entry_id())


# ---- delayed delivery ------------------------------------------------------------------------------

TICK_MS = 1000  # Pulsar's default delayedDeliveryTickTimeMillis: a message may go out this much early


def _receive_after(consumer: pulsar.Consumer, deliver_at_ms: int) -> pulsar.Message:
    m = consumer.receive(20_000)
    assert time.time() * 1000 >= deliver_at_ms - TICK_MS, "delivered earlier than its time less the tick"
    consumer.acknowledge(m)
    return m


def test_delayed_messages_wait_on_shared_and_not_on_exclusive(client: pulsar.Client, standalone: Standalone) -> None:
    from datetime import timedelta

    from impl.broker.web.admin_client import topic_path

    topic = topic_name("delayed")
    shared = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
    exclusive = client.subscribe(topic, "exclusive", consumer_type=pulsar.ConsumerType.Exclusive)
    key_shared = client.subscribe(topic, "key-shared", consumer_type=pulsar.ConsumerType.KeyShared)
    producer = client.create_producer(topic)
    at = int(time.time() * 1000) + 3000
    producer.send(b"later", deliver_after=timedelta(seconds=3))
    producer.send(b"now")
    assert [exclusive.receive(10_000).data() for _ in range(2)] == [b"later", b"now"]  # Exclusive ignores it
    assert shared.receive(10_000).data() == b"now"
    assert key_shared.receive(10_000).data() == b"now"
    stats = standalone.admin.call("GET", topic_path(topic) + "/stats")
    assert stats["subscriptions"]["shared"]["msgDelayed"] == 1
    assert stats["subscriptions"]["key-shared"]["msgDelayed"] == 1
    assert _receive_after(shared, at).data() == b"later"
    assert _receive_after(key_shared, at).data() == b"later"


def test_a_delayed_message_survives_an_unload_and_a_crash(tmp_path_factory: pytest.TempPathFactory) -> None:
    import signal
    from urllib.parse import urlsplit

    from impl.broker.web.admin_client import topic_path

    data = tmp_path_factory.mktemp("delayed-crash")
    s = Standalone(data)
    topic = topic_name("delayed-crash")
    try:
        c = pulsar.Client(s.url, operation_timeout_seconds=15)
        c.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared).close()
        at = int(time.time() * 1000) + 6000
        c.create_producer(topic).send(b"later", deliver_at=at)
        s.admin.call("PUT", topic_path(topic) + "/unload")
        c.close()
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait()
        ports = ["--pulsar-port", str(urlsplit(s.url).port), "--web-port", str(urlsplit(s.web_url).port)]
        s = Standalone(data, *ports)
        c = pulsar.Client(s.url, operation_timeout_seconds=15)
        consumer = c.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        assert _receive_after(consumer, at).data() == b"later"
        c.close()
    finally:
        s.stop()


def test_the_delayed_delivery_policy_turns_it_off_for_a_namespace(
    client: pulsar.Client, standalone: Standalone
) -> None:
    from datetime import timedelta

    ns = f"public/nodelay{next(_counter)}"
    standalone.admin.call("PUT", f"/admin/v2/namespaces/{ns}", {})
    path = f"/admin/v2/namespaces/{ns}/delayedDelivery"
    assert standalone.admin.call("GET", path) is None
    standalone.admin.call("POST", path, {"active": False, "tickTime": 500})
    assert standalone.admin.call("GET", path)["active"] is False
    for bad in ({"active": "no"}, {"active": True, "tickTime": 0}, [1]):
        with pytest.raises(HttpError) as refused:
            standalone.admin.call("POST", path, bad)
        assert refused.value.status == 400
    topic = f"persistent://{ns}/t"
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    client.create_producer(topic).send(b"later", deliver_after=timedelta(seconds=60))
    assert consumer.receive(10_000).data() == b"later"  # not held: the namespace turned it off


# ---- producer access modes -------------------------------------------------------------------------


def test_producer_access_modes_as_pulsar(client: pulsar.Client) -> None:
    import threading

    mode = pulsar.ProducerAccessMode
    topic = topic_name("access")
    shared = client.create_producer(topic, access_mode=mode.Shared)
    with pytest.raises(pulsar.ProducerFenced):  # "Topic has existing shared producers"
        client.create_producer(topic, access_mode=mode.Exclusive)
    shared.close()
    exclusive = client.create_producer(topic, producer_name="first", access_mode=mode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, access_mode=mode.Shared)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=mode.Exclusive)

    # WaitForExclusive: queued, granted in order when the holder leaves.
    granted: list[str] = []
    waiters: dict[str, pulsar.Producer] = {}

    def wait(name: str) -> None:
        waiters[name] = client.create_producer(topic, producer_name=name, access_mode=mode.WaitForExclusive)
        granted.append(name)

    threads = []
    for name in ("w1", "w2"):
        t = threading.Thread(target=wait, args=(name,))
        t.start()
        threads.append(t)
        time.sleep(0.5)  # w1 queues before w2
    assert granted == []
    exclusive.send(b"from first")
    exclusive.close()
    threads[0].join(10)
    assert granted == ["w1"]
    waiters["w1"].send(b"from w1")
    waiters["w1"].close()
    threads[1].join(10)
    assert granted == ["w1", "w2"]

    # ExclusiveWithFencing: the holder (w2) is fenced; its sends fail from now on.
    fencer = client.create_producer(topic, producer_name="fencer", access_mode=mode.ExclusiveWithFencing)
    fencer.send(b"from fencer")
    with pytest.raises(pulsar.PulsarException):
        waiters["w2"].send(b"from w2, fenced")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = [m.data() for m in drain(consumer)]
    assert got == [b"from first", b"from w1", b"from fencer"]


def test_the_topic_epoch_goes_on_after_a_broker_crash(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each exclusive grant moves the epoch on; the next owner of the topic (here the same standalone
    SIGKILLed and started again) continues from the stored one instead of starting again at 0."""
    import signal
    from urllib.parse import urlsplit

    from impl.broker.web.admin_client import topic_path

    data = tmp_path_factory.mktemp("epoch-crash")
    s = Standalone(data)
    topic = topic_name("epoch")
    stats = topic_path(topic) + "/stats"
    try:
        c = pulsar.Client(s.url, operation_timeout_seconds=15)
        for expected in (0, 1):
            p = c.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
            assert s.admin.call("GET", stats)["topicEpoch"] == expected
            p.close()
        c.close()
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait()
        ports = ["--pulsar-port", str(urlsplit(s.url).port), "--web-port", str(urlsplit(s.web_url).port)]
        s = Standalone(data, *ports)
        c = pulsar.Client(s.url, operation_timeout_seconds=15)
        c.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
        assert s.admin.call("GET", stats)["topicEpoch"] == 2
        c.close()
    finally:
        s.stop()


def test_a_waiter_whose_connection_dies_leaves_the_queue_and_the_next_is_granted_at_a_new_epoch(
    client: pulsar.Client, standalone: Standalone
) -> None:
    """spec/producer_access.tla's ConnectionDies and Grant on the production broker: w1 waits first, its
    client goes away; when the holder leaves, the slot goes to w2 (not to the dead w1) and the topic
    epoch moves on by one (AtMostOneExclusivePerEpoch: a grant is a new epoch)."""
    import threading

    from impl.broker.web.admin_client import topic_path

    mode = pulsar.ProducerAccessMode
    topic = topic_name("access-queue")
    stats = topic_path(topic) + "/stats"
    holder = client.create_producer(topic, producer_name="holder", access_mode=mode.Exclusive)
    held = standalone.admin.call("GET", stats)["topicEpoch"]
    doomed = pulsar.Client(standalone.url, operation_timeout_seconds=15)
    outcome: dict[str, object] = {}

    def wait(c: pulsar.Client, name: str) -> None:
        try:
            outcome[name] = c.create_producer(topic, producer_name=name, access_mode=mode.WaitForExclusive)
        except Exception as e:  # w1: its client closed while it waited
            outcome[name] = e

    w1 = threading.Thread(target=wait, args=(doomed, "w1"))
    w1.start()
    time.sleep(0.5)  # w1 queues before w2
    w2 = threading.Thread(target=wait, args=(client, "w2"))
    w2.start()
    time.sleep(0.5)
    doomed.close()  # w1's connection dies while it waits
    w1.join(10)
    assert not isinstance(outcome.get("w1"), pulsar.Producer)
    holder.close()
    w2.join(10)
    assert isinstance(outcome.get("w2"), pulsar.Producer), outcome
    assert standalone.admin.call("GET", stats)["topicEpoch"] == held + 1
    outcome["w2"].send(b"from w2")  # type: ignore[attr-defined]
    # Granted later, it is still shown as the connection that asked (not a blank publisher).
    (publisher,) = standalone.admin.call("GET", stats)["publishers"]
    assert publisher["producerName"] == "w2" and publisher["accessMode"] == "WaitForExclusive"
    assert publisher["clientVersion"].startswith("Pulsar") and publisher["address"].startswith("/127.0.0.1:")
