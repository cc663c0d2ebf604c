"""The broker's hot paths under pipelining, over Pulsar's protocol: many sends in flight on one
producer, acks that queue up behind each other on a connection. Each shortcut must give exactly
the outcomes the one-at-a-time path gives."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pulsar
import pytest

from impl.broker.cursor import ManagedCursor
from impl.broker.dispatcher import position_of
from impl.broker.service import Subscription
from impl.broker.standalone import Standalone
from impl.broker.web.admin_client import AdminClient
from impl.client import Client, ConsumerMessage, MessageId, SendRejected
from tests.broker.test_sizes_and_dedup import dedup_namespace
from tests.waiting import wait_for


def topic() -> str:
    return f"persistent://public/default/p-{uuid.uuid4().hex[:8]}"


def subscription(standalone: Standalone, t: str, name: str) -> Subscription:
    assert standalone.broker is not None
    return standalone.broker.service.topics[t].subscriptions[name]


def queued_requests(standalone: Standalone, sub: Subscription) -> int:
    """The requests waiting on the connection of `sub`'s consumer: a connection runs its requests one
    at a time, so while one waits for the subscription's lock the others queue behind it."""
    assert standalone.broker is not None
    connections = list(standalone.broker.pulsar.connections)
    return sum(
        c.jobs.qsize()  # type: ignore[attr-defined]
        for c in connections
        if any(a.sub is sub for a in c.consumers.values())  # type: ignore[attr-defined]
    )


def last_sequence_id(service_url: str, t: str, producer_name: str) -> int:
    """What the broker reports as the producer name's last persisted sequence id (PRODUCER_SUCCESS)."""
    official = pulsar.Client(service_url, operation_timeout_seconds=20)
    try:
        producer = official.create_producer(t, producer_name=producer_name)
        last = int(producer.last_sequence_id())
        producer.close()
        return last
    finally:
        official.close()


def test_acks_that_queue_up_are_persisted_together(standalone: Standalone, client: Client) -> None:
    t = topic()
    producer = client.create_producer(t)
    for i in range(8):
        producer.send(b"m%d" % i)
    consumer = client.subscribe(t, "together", initial_position="earliest")
    got = [consumer.receive(timeout_s=10) for _ in range(8)]
    sub = subscription(standalone, t, "together")
    cursor = sub.cursor
    assert isinstance(cursor, ManagedCursor)  # a durable subscription
    persisted = cursor.ledger_entries
    with sub.lock:  # the first ack waits on this lock in the broker: the seven after it queue up
        for msg in got:
            consumer.acknowledge(msg)
        wait_for(lambda: queued_requests(standalone, sub) >= 7, "the acks to queue up in the broker")
    wait_for(lambda: sub.cursor.backlog() == 0, "every ack to count")
    assert sub.cursor.mark_delete_position == position_of(got[-1].id)
    # The first ack was taken before the lock was let go, the other seven waited together.
    assert cursor.ledger_entries - persisted <= 2
    consumer.close()


def test_an_unknown_id_among_queued_acks_spoils_none_of_the_others(standalone: Standalone, client: Client) -> None:
    t = topic()
    producer = client.create_producer(t)
    first = producer.send(b"m0")
    for i in range(1, 6):
        producer.send(b"m%d" % i)
    consumer = client.subscribe(t, "unknown", initial_position="earliest")
    got = [consumer.receive(timeout_s=10) for _ in range(6)]
    sub = subscription(standalone, t, "unknown")
    with sub.lock:
        for msg in got[:3]:
            consumer.acknowledge(msg)
        consumer.acknowledge(ConsumerMessage(MessageId(first.ledger_id + 100, 0, 0), b""))  # never delivered
        for msg in got[3:]:
            consumer.acknowledge(msg)
        wait_for(lambda: queued_requests(standalone, sub) >= 6, "the acks to queue up in the broker")
    wait_for(lambda: sub.cursor.backlog() == 0, "the known acks to count")
    assert sub.cursor.mark_delete_position == position_of(got[-1].id)
    producer.send(b"after")  # the connection and the consumer live on
    assert consumer.receive(timeout_s=10).data == b"after"
    consumer.close()


def test_restart_keeps_what_was_acknowledged_with_many_sends_in_flight(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "sa", port=0, web_port=0)
    s.start()
    t = topic()
    try:
        with Client(s.pulsar_service_url, timeout_s=10) as c:
            producer = c.create_producer(t)
            futures = [producer.send_async(b"v%d" % i) for i in range(300)]
            producer.flush()
            ids = [f.result(30) for f in futures]
            producer.close()
    finally:
        s.stop()
    assert ids == sorted(ids) and len(set(ids)) == 300
    s = Standalone(tmp_path / "sa", port=0, web_port=0)
    s.start()
    try:
        with Client(s.pulsar_service_url, timeout_s=10) as c:
            read = c.read_topic(t)
            assert [m for _, m in read] == [b"v%d" % i for i in range(300)]
            assert [mid for mid, _ in read] == ids
    finally:
        s.stop()


def test_batches_close_by_size_and_by_delay_without_a_flush(client: Client) -> None:
    t = topic()
    producer = client.create_producer(t, batching=True, batch_max_messages=100, batch_delay_s=0.05)
    chunk = b"x" * (60 * 1024)
    by_size = [producer.send_async(chunk) for _ in range(3)]  # 180 KiB crosses the 128 KiB batch limit
    ids = [f.result(10) for f in by_size]
    assert {(i.ledger_id, i.entry_id) for i in ids} == {(ids[0].ledger_id, ids[0].entry_id)}
    assert [i.batch_index for i in ids] == [0, 1, 2]
    start = time.monotonic()
    late = [producer.send_async(b"late-%d" % i) for i in range(2)]
    late_ids = [f.result(10) for f in late]  # no flush: the delay closes the batch
    assert time.monotonic() - start >= 0.05
    assert late_ids[0].entry_id == late_ids[1].entry_id != ids[0].entry_id
    producer.close()
    assert [m for _, m in client.read_topic(t)] == [chunk] * 3 + [b"late-0", b"late-1"]


def test_a_producers_sends_are_appended_in_sequence_order_and_a_gap_is_not_waited_for(
    standalone: Standalone, client: Client
) -> None:
    # De-duplication is off by default (as in Pulsar): this topic's namespace turns it on.
    t = topic().replace("public/default", dedup_namespace(AdminClient(standalone.web_service_url)))
    # The official client lets the test choose each sequence id.
    official = pulsar.Client(standalone.pulsar_service_url, operation_timeout_seconds=20)
    try:
        producer = official.create_producer(t, producer_name="sequenced", batching_enabled=False)
        for i in range(3):
            producer.send(b"s%d" % i, sequence_id=i)
        # A gap (ids 3 to 6 never sent: the application skipped them) is appended at once; Pulsar asks
        # only that a producer's sequence ids increase.
        producer.send(b"s7", sequence_id=7)
        # An id below one already appended is never appended after it (de-duplication takes it for a
        # resend): the topic stays in sequence order.
        producer.send(b"s5", sequence_id=5)
        producer.send(b"s8", sequence_id=8)
        assert producer.last_sequence_id() == 8
    finally:
        official.close()
    assert [m for _, m in client.read_topic(t)] == [b"s0", b"s1", b"s2", b"s7", b"s8"]


def test_many_sends_in_flight_keep_every_message_in_order(client: Client) -> None:
    t = topic()
    producer = client.create_producer(t, name="pipelined-client")
    futures = [producer.send_async(b"%d" % i) for i in range(3000)]
    producer.flush()
    ids = [f.result(60) for f in futures]
    producer.close()
    assert ids == sorted(ids) and len(set(ids)) == 3000
    assert [m for _, m in client.read_topic(t)] == [b"%d" % i for i in range(3000)]


def test_a_rejected_send_leaves_no_gap_in_the_sequence_ids(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "gap", port=0, web_port=0)
    s.start()
    try:
        t = topic().replace("public/default", dedup_namespace(AdminClient(s.web_service_url)))  # de-dup on
        with Client(s.pulsar_service_url, timeout_s=2) as client:
            producer = client.create_producer(t, name="no-gap")
            first = producer.send(b"a")  # sequence id 0
            with pytest.raises(SendRejected):
                producer.send(b"x" * (6 * 1024 * 1024))  # over the broker's maximum: refused before sending
            # The broker goes: the producer cannot attach again, so the next send is not attempted.
            connection = client.connection(client.lookup(t))
            s.stop_broker()
            wait_for(lambda: not connection.open, "the client to see the broker go")
            with pytest.raises(SendRejected):
                producer.send(b"b")
            s.start_broker()
            last = producer.send(b"c")  # attaches again; takes sequence id 1, not one after the refusals
            assert last > first
            producer.close()
            assert [m for _, m in client.read_topic(t)] == [b"a", b"c"]
        assert last_sequence_id(s.pulsar_service_url, t, "no-gap") == 1
    finally:
        s.stop()
