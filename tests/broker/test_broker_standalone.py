"""The broker end to end on the embedded default: a Standalone (embedded store, three real
in-process bookies behind gRPC, one broker) with the project's Pulsar client (impl/client/)
on its pulsar:// listener and the admin REST API on its web service, as a user runs them."""

from __future__ import annotations

import contextlib
import signal
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pulsar
import pytest

from impl.broker.standalone import Standalone, StandaloneAlreadyRunning
from impl.broker.web.admin_client import AdminClient, topic_path
from impl.client import (
    Client,
    ClientError,
    Consumer,
    ConsumerMessage,
    MessageId,
    PartitionedConsumer,
    SendRejected,
)
from impl.metadata.ledger_store import LedgerMetadataStore, NoSuchLedger
from impl.protocol import pulsar_api_pb2 as api
from impl.web.http import HttpError
from tests.broker import pulsar_standalone
from tests.waiting import wait_for


def topic() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:8]}"


def admin_of(standalone: Standalone) -> AdminClient:
    """The admin REST API on the standalone's web service (what `pulsar-ref admin` calls)."""
    return AdminClient(standalone.web_service_url, timeout_s=20)


def http_status(call: Any) -> int:
    try:
        call()
    except HttpError as e:
        return e.status
    return 200


def receive_all(consumer: Consumer | PartitionedConsumer, n: int, ack: bool = True) -> list[ConsumerMessage]:
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
    assert err.value.code == api.ConsumerBusy
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

    def receive_some() -> bool:
        nonlocal received
        for index, consumer in enumerate(consumers):
            try:
                msg = consumer.receive(timeout_s=0.05)
            except TimeoutError:
                continue
            received += 1
            assert owner.setdefault(msg.key, index) == index  # a key seen on two consumers fails here
            consumer.acknowledge(msg)
        return received >= 20

    wait_for(receive_some, "the 20 messages")
    assert received == 20 and set(owner) == {f"k{i}" for i in range(5)}
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
    never_delivered = ConsumerMessage(MessageId(first.ledger_id + 100, 0, 0), b"")
    consumer.acknowledge(never_delivered)  # ignored, as Pulsar does: the connection and consumer live on
    consumer.acknowledge(again)
    producer.send(b"second")
    assert consumer.receive(timeout_s=10).data == b"second"
    consumer.close()


def test_deduplication_of_a_resent_sequence_id_and_across_producer_reconnect(
    client: Client, standalone: Standalone
) -> None:
    admin = admin_of(standalone)  # de-duplication is off by default (as in Pulsar): on for this namespace
    admin.call("PUT", "/admin/v2/namespaces/public/dedup-on")
    admin.call("POST", "/admin/v2/namespaces/public/dedup-on/deduplication", True)
    t = f"persistent://public/dedup-on/t-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(t, name="dedup-producer")
    producer.send(b"a")
    producer.send(b"b")
    producer.close()
    # The official client lets a test choose the sequence id: resend the second message as id 1.
    official = pulsar.Client(standalone.pulsar_service_url, operation_timeout_seconds=20)
    try:
        resender = official.create_producer(t, producer_name="dedup-producer", batching_enabled=False)
        assert resender.last_sequence_id() == 1  # what the broker persisted for this producer name
        resender.send(b"b", sequence_id=1)  # acknowledged as a duplicate, not written
        resender.close()
    finally:
        official.close()
    again = client.create_producer(t, name="dedup-producer")  # a reconnect continues after the last sequence id
    again.send(b"c")
    assert [m for _, m in client.read_topic(t)] == [b"a", b"b", b"c"]


def test_bad_input_gets_clear_errors_and_disturbs_nothing(client: Client, standalone: Standalone) -> None:
    t = topic()
    producer = client.create_producer(t)
    with pytest.raises(ClientError) as err:
        client.create_producer("persistent://public/default/")
    assert err.value.code == api.InvalidTopicName
    with pytest.raises(ClientError) as err:
        client.create_producer("persistent://no-such-tenant/ns/t")
    assert err.value.code == api.TopicNotFound
    with pytest.raises(SendRejected) as rejected:
        producer.send(b"x" * (6 * 1024 * 1024))  # over the maximum size the broker advertised in CONNECTED
    assert rejected.value.code == api.NotAllowedError
    admin = admin_of(standalone)
    assert http_status(lambda: admin.call("GET", "/admin/v2/no-such-resource")) == 404
    assert http_status(lambda: admin.call("PUT", "/admin/v2/namespaces/public/bad", {"bundles": "many"})) == 400
    assert producer.send(b"still fine").entry_id >= 0
    assert [m for _, m in client.read_topic(t)] == [b"still fine"]


def test_admin_tenants_namespaces_partitioned_topics_and_stats(client: Client, standalone: Standalone) -> None:
    admin = admin_of(standalone)
    admin.call("PUT", "/admin/v2/tenants/acme", {"allowedClusters": ["standalone"]})
    admin.call("PUT", "/admin/v2/namespaces/acme/orders", {"bundles": {"numBundles": 8}})
    assert "acme/orders" in admin.call("GET", "/admin/v2/namespaces/acme")
    admin.create_partitioned_topic("persistent://acme/orders/p", 3)
    assert client.partitions("persistent://acme/orders/p") == 3
    for i in range(3):
        client.create_producer(f"persistent://acme/orders/p-partition-{i}").send(b"x")
    listed = admin.call("GET", "/admin/v2/persistent/acme/orders")
    assert {f"persistent://acme/orders/p-partition-{i}" for i in range(3)} <= set(listed)
    stats = admin.call("GET", topic_path("persistent://acme/orders/p-partition-0") + "/internalStats")
    assert stats["numberOfEntries"] == 1
    assert http_status(lambda: admin.call("DELETE", "/admin/v2/tenants/acme")) == 409  # it has a namespace


def test_partitioned_topic_routes_keys_to_partitions_and_consumes_them_all(
    client: Client, standalone: Standalone
) -> None:
    t = topic()
    admin_of(standalone).create_partitioned_topic(t, 3)
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
    s = Standalone(tmp_path / "roll", port=0, web_port=0)
    s.config.managed_ledger = type(s.config.managed_ledger)(
        ensemble=2, write_quorum=2, ack_quorum=2, max_entries_per_ledger=3
    )
    s.start()
    try:
        with Client(s.pulsar_service_url) as client:
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
    s = Standalone(tmp_path / "restart", port=0, web_port=0)
    s.start()
    try:
        with Client(s.pulsar_service_url) as client:
            consumer = client.subscribe(t, "durable", initial_position="earliest")
            producer = client.create_producer(t)
            for i in range(6):
                producer.send(b"%d" % i)
            got = receive_all(consumer, 6, ack=False)
            for msg in got[:3]:
                consumer.acknowledge(msg)
            consumer.acknowledge(got[4])
            admin = admin_of(s)

            def backlog() -> int:
                return int(admin.call("GET", topic_path(t) + "/stats")["subscriptions"]["durable"]["msgBacklog"])

            # Acks are sent without waiting for an answer: wait until the broker has them all.
            wait_for(lambda: backlog() == 2, "the broker to count the four acks")
            consumer.close()
    finally:
        s.stop()
    s = Standalone(tmp_path / "restart", port=0, web_port=0)
    s.start()
    try:
        with Client(s.pulsar_service_url) as client:
            consumer = client.subscribe(t, "durable")
            redelivered = [consumer.receive(timeout_s=10).data for _ in range(2)]
            assert redelivered == [b"3", b"5"]
            with pytest.raises(TimeoutError):
                consumer.receive(timeout_s=0.5)
            consumer.close()
    finally:
        s.stop()


@pytest.mark.processes
def test_standalone_killed_with_sigkill_restarts_at_once_with_all_its_data(tmp_path: Path) -> None:
    data = tmp_path / "killed"
    survivor = "persistent://public/default/survivor"
    s = pulsar_standalone.Standalone(data)
    try:
        with Client(s.url) as client:
            producer = client.create_producer(survivor)
            acked = [producer.send(b"%d" % i) for i in range(5)]
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait()
        # At once, on the same ports (the same broker identity): its old session has not expired yet.
        ports = ["--pulsar-port", str(urlsplit(s.url).port), "--web-port", str(urlsplit(s.web_url).port)]
        s = pulsar_standalone.Standalone(data, *ports)
        with Client(s.url) as client:
            read = client.read_topic(survivor)
            assert [mid for mid, _ in read] == acked
            assert client.create_producer(survivor).send(b"after") > acked[-1]
    finally:
        s.proc.kill()
        s.proc.wait()


def test_a_second_standalone_on_the_same_data_directory_is_refused(standalone: Standalone) -> None:
    with pytest.raises(StandaloneAlreadyRunning, match="another standalone is running"):
        Standalone(standalone.data_dir)


def test_the_control_endpoint_reports_status_and_refuses_unknown_verbs_and_nodes(standalone: Standalone) -> None:
    """What `cluster kill/start/expire-session NODE` sends to a standalone: plain HTTP on loopback."""
    from impl.web.client import call
    from impl.web.http import HttpError

    base = f"http://127.0.0.1:{standalone.control_port}"
    nodes = {n["node"]: n for n in call("GET", f"{base}/status")}
    assert nodes["broker"]["up"] and nodes["broker"]["address"] == standalone.broker_address
    assert {f"bookie-{i}" for i in range(len(standalone.bookies))} <= set(nodes)
    for path, reason in (("/frobnicate/broker", "unknown verb"), ("/kill/bookie-99", "no node")):
        with pytest.raises(HttpError) as refused:
            call("POST", base + path)
        assert refused.value.status == 400 and reason in refused.value.reason
    assert all(n["up"] for n in call("GET", f"{base}/status"))  # nothing was done


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},  # a cross-site form POST or fetch from a web page
        {"Origin": "http://127.0.0.1:1"},  # loopback, but another port: another origin
        {"Sec-Fetch-Site": "cross-site"},
        {"Host": "rebound.example"},  # a DNS-rebound name pointing at 127.0.0.1
    ],
)
def test_the_control_endpoint_refuses_cross_origin_requests(standalone: Standalone, headers: dict[str, str]) -> None:
    """Issue 49: a web page could kill the broker through a cross-site POST to the control endpoint."""
    from impl.web.client import call
    from impl.web.http import HttpError

    base = f"http://127.0.0.1:{standalone.control_port}"
    with pytest.raises(HttpError) as refused:
        call("POST", f"{base}/kill/broker", headers=headers)
    assert refused.value.status == 403
    assert {n["node"]: n["up"] for n in call("GET", f"{base}/status")}["broker"]  # not killed
    own = call("GET", f"{base}/status", headers={"Origin": base})  # its own origin is served
    assert any(n["node"] == "broker" for n in own)
