"""The broker end to end on the embedded default: a Standalone (embedded store, three real
in-process bookies behind gRPC, one broker) and the client library, as a user runs them."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from impl.broker import broker_pb2 as pb
from impl.broker.grpc_client import Client, ClientError, ConsumerMessage, SendRejected
from impl.broker.standalone import Standalone, StandaloneAlreadyRunning
from impl.metadata.ledger_store import LedgerMetadataStore, NoSuchLedger
from tests.processes import start_listening


def topic() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:8]}"


def receive_all(consumer, n: int, ack: bool = True) -> list[ConsumerMessage]:  # type: ignore[no-untyped-def]
    got = []
    for _ in range(n):
        msg = consumer.receive(timeout_s=10)
        got.append(msg)
        if ack:
            consumer.acknowledge(msg)
    return got


def test_produce_then_consume_in_order_with_and_without_batching(client: Client) -> None:
    t = topic()
    consumer = client.subscribe(t, "s", initial_position="earliest")
    producer = client.create_producer(t)
    ids = [producer.send(b"plain-%d" % i) for i in range(5)]
    assert ids == sorted(ids) and len(set(ids)) == 5
    batcher = client.create_producer(t, batching=True, batch_max_messages=4, batch_delay_s=0.05)
    futures = [batcher.send_async(b"batch-%d" % i) for i in range(4)]
    batch_ids = [f.result(10) for f in futures]
    assert {(m.ledger_id, m.entry_id) for m in batch_ids} == {(batch_ids[0].ledger_id, batch_ids[0].entry_id)}
    assert [m.batch_index for m in batch_ids] == [0, 1, 2, 3]
    got = receive_all(consumer, 9)
    assert [m.data for m in got] == [b"plain-%d" % i for i in range(5)] + [b"batch-%d" % i for i in range(4)]
    assert [m.id for m in got] == ids + batch_ids
    assert [m for _, m in client.read_topic(t)] == [m.data for m in got]
    consumer.close()


def test_exclusive_refuses_a_second_consumer(client: Client) -> None:
    t = topic()
    first = client.subscribe(t, "ex", subscription_type="Exclusive")
    with pytest.raises(ClientError) as err:
        client.subscribe(t, "ex", subscription_type="Exclusive")
    assert err.value.code == pb.CONSUMER_BUSY
    first.close()


def test_shared_consumers_split_the_messages_and_redelivery_after_a_consumer_leaves(client: Client) -> None:
    t = topic()
    a = client.subscribe(t, "sh", subscription_type="Shared", receiver_queue_size=4)
    b = client.subscribe(t, "sh", subscription_type="Shared", receiver_queue_size=4)
    producer = client.create_producer(t)
    sent = {producer.send(b"%d" % i) for i in range(8)}
    got_a = receive_all(a, 4, ack=False)
    got_b = receive_all(b, 4)
    assert {m.id for m in got_a} | {m.id for m in got_b} == sent
    assert not {m.id for m in got_a} & {m.id for m in got_b}
    a.close()  # never acknowledged: its messages go to b again
    again = receive_all(b, 4)
    assert {m.id for m in again} == {m.id for m in got_a}
    assert all(m.redelivery_count >= 1 for m in again)
    b.close()


def test_failover_only_the_active_consumer_receives(client: Client) -> None:
    t = topic()
    a = client.subscribe(t, "fo", subscription_type="Failover", consumer_name="a")
    b = client.subscribe(t, "fo", subscription_type="Failover", consumer_name="b")
    producer = client.create_producer(t)
    for i in range(3):
        producer.send(b"%d" % i)
    assert [m.data for m in receive_all(a, 3)] == [b"0", b"1", b"2"]
    with pytest.raises(TimeoutError):
        b.receive(timeout_s=0.5)
    a.close()
    producer.send(b"3")
    assert b.receive(timeout_s=10).data == b"3"
    b.close()


def test_key_shared_keeps_each_key_on_one_consumer(client: Client) -> None:
    t = topic()
    consumers = [client.subscribe(t, "ks", subscription_type="Key_Shared", consumer_name=n) for n in "ab"]
    producer = client.create_producer(t)
    for i in range(20):
        producer.send(b"%d" % i, key=f"k{i % 5}")
    owner: dict[str, int] = {}
    received = 0
    for index, consumer in enumerate(consumers):
        while True:
            try:
                msg = consumer.receive(timeout_s=1.0)
            except TimeoutError:
                break
            received += 1
            assert owner.setdefault(msg.key, index) == index
            consumer.acknowledge(msg)
    assert received == 20
    for c in consumers:
        c.close()


def test_negative_ack_redelivers_and_unknown_ack_disturbs_nothing(client: Client) -> None:
    t = topic()
    consumer = client.subscribe(t, "n", initial_position="earliest")
    producer = client.create_producer(t)
    first = producer.send(b"first")
    msg = consumer.receive(timeout_s=10)
    consumer.negative_acknowledge(msg)
    again = consumer.receive(timeout_s=10)
    assert again.id == first and again.redelivery_count == 1
    consumer.acknowledge(type(first)(first.ledger_id + 100, 0, 0))  # never delivered: refused, stream lives
    consumer.acknowledge(again)
    producer.send(b"second")
    assert consumer.receive(timeout_s=10).data == b"second"
    consumer.close()


def test_deduplication_of_a_resent_sequence_id_and_across_producer_reconnect(client: Client) -> None:
    t = topic()
    producer = client.create_producer(t, name="dedup-producer")
    producer.send(b"a")
    producer.send(b"b")
    stub = client.stub(client.lookup(t))
    resend = pb.SendReq(topic=t, producer_name="dedup-producer", sequence_id=1, messages=[pb.Message(payload=b"b")])
    answer = stub.Send(resend)
    assert answer.code == pb.OK and answer.duplicate
    again = client.create_producer(t, name="dedup-producer")  # a reconnect continues after the last sequence id
    again.send(b"c")
    assert [m for _, m in client.read_topic(t)] == [b"a", b"b", b"c"]


def test_bad_input_gets_clear_errors_and_disturbs_nothing(client: Client) -> None:
    t = topic()
    producer = client.create_producer(t)
    with pytest.raises(ClientError) as err:
        client.create_producer("persistent://public/default/")
    assert err.value.code == pb.INVALID_TOPIC_NAME
    with pytest.raises(ClientError) as err:
        client.create_producer("persistent://no-such-tenant/ns/t")
    assert err.value.code == pb.TOPIC_NOT_FOUND
    with pytest.raises(SendRejected) as rejected:
        producer.send(b"x" * (6 * 1024 * 1024))
    assert rejected.value.code == pb.MESSAGE_TOO_LARGE
    with pytest.raises(ClientError):
        client.admin("topics no-such-verb")
    assert producer.send(b"still fine").entry_id >= 0
    assert [m for _, m in client.read_topic(t)] == [b"still fine"]


def test_admin_tenants_namespaces_partitioned_topics_and_stats(client: Client) -> None:
    client.admin("tenants create", {"tenant": "acme"})
    client.admin("namespaces create", {"namespace": "acme/orders", "bundles": 8})
    assert "acme/orders" in client.admin("namespaces list", {"tenant": "acme"})
    client.admin_create_partitioned_topic("persistent://acme/orders/p", 3)
    assert client.partitions("persistent://acme/orders/p") == 3
    for i in range(3):
        client.create_producer(f"persistent://acme/orders/p-partition-{i}").send(b"x")
    listed = client.admin("topics list", {"namespace": "acme/orders"})
    assert {f"persistent://acme/orders/p-partition-{i}" for i in range(3)} <= set(listed)
    stats = client.admin(
        "topics internal-stats",
        {"topic": "persistent://acme/orders/p-partition-0"},
        route_topic="persistent://acme/orders/p-partition-0",
    )
    assert stats["entries"] == 1
    with pytest.raises(ClientError) as err:
        client.admin("tenants delete", {"tenant": "acme"})
    assert err.value.code == pb.NOT_EMPTY


def test_partitioned_topic_routes_keys_to_partitions_and_consumes_them_all(client: Client) -> None:
    t = topic()
    client.admin_create_partitioned_topic(t, 3)
    consumer = client.subscribe(t, "all", initial_position="earliest")
    producer = client.create_producer(t)
    for i in range(12):
        producer.send(b"%d" % i, key=f"k{i % 4}")
    got = receive_all(consumer, 12)
    assert sorted(m.data for m in got) == sorted(b"%d" % i for i in range(12))
    partition_of: dict[str, str] = {}
    for m in got:
        assert partition_of.setdefault(m.key, m.topic) == m.topic  # one key, one partition
    assert all("-partition-" in m.topic for m in got)
    with pytest.raises(TimeoutError):
        consumer.receive(timeout_s=0.3)
    consumer.close()


def test_rollover_and_trimming_delete_consumed_ledgers(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "roll")
    s.config.managed_ledger = type(s.config.managed_ledger)(
        ensemble=2, write_quorum=2, ack_quorum=2, max_entries_per_ledger=3
    )
    s.start()
    try:
        with Client(s.service_url) as client:
            t = topic()
            consumer = client.subscribe(t, "trim", initial_position="earliest")
            producer = client.create_producer(t)
            ids = [producer.send(b"%d" % i) for i in range(10)]
            ledgers = sorted({m.ledger_id for m in ids})
            assert len(ledgers) >= 4  # 3 entries per ledger
            receive_all(consumer, 10)
            ledger_store = LedgerMetadataStore(s.store)
            deadline = 50
            while deadline and any(_exists(ledger_store, lid) for lid in ledgers[:-1]):
                deadline -= 1
                producer.send(b"nudge")  # a rollover + ack drives the next trim
                receive_all(consumer, 1)
            assert not any(_exists(ledger_store, lid) for lid in ledgers[:-1]), "consumed ledgers were not trimmed"
            consumer.close()
    finally:
        s.stop()


def _exists(ledgers: LedgerMetadataStore, ledger_id: int) -> bool:
    with contextlib.suppress(NoSuchLedger):
        ledgers.read(ledger_id)
        return True
    return False


def test_cursor_survives_a_restart_and_unacked_messages_are_redelivered(tmp_path: Path) -> None:
    t = topic()
    s = Standalone(tmp_path / "restart")
    s.start()
    try:
        with Client(s.service_url) as client:
            consumer = client.subscribe(t, "durable", initial_position="earliest")
            producer = client.create_producer(t)
            for i in range(6):
                producer.send(b"%d" % i)
            got = receive_all(consumer, 6, ack=False)
            for msg in got[:3]:
                consumer.acknowledge(msg)
            consumer.acknowledge(got[4])
            for _ in range(100):  # acks travel on the consumer's stream: wait until the broker has them
                stats = client.admin("topics stats", {"topic": t}, route_topic=t)
                if stats["subscriptions"]["durable"]["backlog"] == 2:
                    break
                time.sleep(0.05)
            assert stats["subscriptions"]["durable"]["backlog"] == 2
            consumer.close()
    finally:
        s.stop()
    s = Standalone(tmp_path / "restart")
    s.start()
    try:
        with Client(s.service_url) as client:
            consumer = client.subscribe(t, "durable")
            redelivered = [consumer.receive(timeout_s=10).data for _ in range(2)]
            assert redelivered == [b"3", b"5"]
            with pytest.raises(TimeoutError):
                consumer.receive(timeout_s=0.5)
            consumer.close()
    finally:
        s.stop()


def start_standalone_process(data: Path) -> tuple[subprocess.Popen[str], str]:
    proc, url, _ = start_listening(["standalone", "--data", str(data)])
    return proc, url


@pytest.mark.processes
def test_standalone_killed_with_sigkill_restarts_at_once_with_all_its_data(tmp_path: Path) -> None:
    data = tmp_path / "killed"
    proc, url = start_standalone_process(data)
    try:
        with Client(url) as client:
            producer = client.create_producer("persistent://public/default/survivor")
            acked = [producer.send(b"%d" % i) for i in range(5)]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc, url = start_standalone_process(data)  # at once: its old session has not expired yet
        with Client(url) as client:
            read = client.read_topic("persistent://public/default/survivor")
            assert [mid for mid, _ in read] == acked
            assert client.create_producer("persistent://public/default/survivor").send(b"after") > acked[-1]
    finally:
        proc.kill()
        proc.wait()


def test_a_second_standalone_on_the_same_data_directory_is_refused(standalone: Standalone) -> None:
    with pytest.raises(StandaloneAlreadyRunning, match="another standalone is running"):
        Standalone(standalone.data_dir)
