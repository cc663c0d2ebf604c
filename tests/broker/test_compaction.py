"""Topic compaction (issue 45, item 3) against a real `pulsar-ref standalone` process with the official
`pulsar` client: keys overwritten and deleted (empty payloads), compaction triggered over Pulsar's admin
path, readers and consumers with is_read_compacted see one message per live key then the tail, a normal
reader still sees everything, a restart keeps the compacted ledger; bad input answered 404/409/412."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from impl.broker.web.admin_client import topic_path
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import Standalone
from tests.waiting import wait_for

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    s = Standalone(tmp_path_factory.mktemp("compaction"))
    try:
        yield s
    finally:
        s.stop()


def name() -> str:
    return f"persistent://public/default/compact-{uuid.uuid4().hex[:8]}"


def read_all(client: pulsar.Client, topic: str, compacted: bool) -> list[tuple[str, bytes]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted)
    got = []
    try:
        while reader.has_message_available():
            msg = reader.read_next(5_000)
            got.append((msg.partition_key(), msg.data()))
    finally:
        reader.close()
    return got


def compact(standalone: Standalone, topic: str) -> dict[str, str]:
    standalone.admin.call("PUT", topic_path(topic) + "/compaction")
    status: dict[str, str] = {}

    def finished() -> bool:
        status.update(standalone.admin.call("GET", topic_path(topic) + "/compaction"))
        return status["status"] != "RUNNING"

    wait_for(finished, "the compaction to finish", timeout_s=20)
    return status


def publish(client: pulsar.Client, topic: str, messages: list[tuple[str, bytes]], batching: bool = False) -> None:
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_publish_delay_ms=50)
    for key, value in messages:
        producer.send_async(value, None, partition_key=key)
    producer.flush()
    producer.close()


HISTORY = [("a", b"a1"), ("b", b"b1"), ("c", b"c1"), ("a", b"a2"), ("b", b""), ("d", b"d1"), ("a", b"a3")]
COMPACTED = [("c", b"c1"), ("d", b"d1"), ("a", b"a3")]  # b deleted by its empty payload


def test_compacted_reader_sees_the_latest_per_live_key_then_the_tail(tmp_path: Path) -> None:
    topic = name()
    standalone = Standalone(tmp_path)
    client = pulsar.Client(standalone.url)
    try:
        publish(client, topic, HISTORY)
        assert standalone.admin.call("GET", topic_path(topic) + "/compaction")["status"] == "NOT_RUN"
        assert compact(standalone, topic) == {"status": "SUCCESS", "lastError": ""}
        internal = standalone.admin.call("GET", topic_path(topic) + "/internalStats")["cursors"]["__compaction"]
        assert internal["markDeletePosition"] == "0:6"  # the horizon: the last message when triggered
        assert set(internal["properties"]) == {"CompactedTopicLedger"}
        first_ledger = internal["properties"]["CompactedTopicLedger"]
        publish(client, topic, [("c", b"c2"), ("e", b"e1")])  # the tail after the horizon, read whole
        tail = [("c", b"c2"), ("e", b"e1")]
        assert read_all(client, topic, compacted=True) == COMPACTED + tail
        assert read_all(client, topic, compacted=False) == HISTORY + tail  # the topic keeps everything

        # A consumer (durable, Exclusive) from the earliest position reads the same, and acknowledges.
        consumer = client.subscribe(
            topic, "compacted-sub", initial_position=pulsar.InitialPosition.Earliest, is_read_compacted=True
        )
        got = []
        for _ in range(len(COMPACTED + tail)):
            msg = consumer.receive(5_000)
            got.append((msg.partition_key(), msg.data()))
            consumer.acknowledge(msg)
        assert got == COMPACTED + tail
        with pytest.raises(pulsar.Timeout):
            consumer.receive(300)
        consumer.close()

        # A second compaction folds the tail in: c's new value replaces the old one.
        assert compact(standalone, topic)["status"] == "SUCCESS"
        properties = compaction_properties(standalone, topic)
        assert ledger_status(standalone, properties["CompactedTopicLedger"]) == 200
        assert ledger_status(standalone, first_ledger) == 404  # the previous compacted ledger is deleted
        assert read_all(client, topic, compacted=True) == [("d", b"d1"), ("a", b"a3"), ("c", b"c2"), ("e", b"e1")]
    finally:
        client.close()
        standalone.stop()

    # A restart finds the compacted ledger again from the __compaction cursor's properties.
    again = Standalone(tmp_path)
    try:
        client = pulsar.Client(again.url)
        try:
            assert read_all(client, topic, compacted=True) == [("d", b"d1"), ("a", b"a3"), ("c", b"c2"), ("e", b"e1")]
            assert read_all(client, topic, compacted=False) == HISTORY + tail
        finally:
            client.close()
    finally:
        again.stop()


def test_batches_keep_only_their_latest_messages(standalone: Standalone) -> None:
    topic = name()
    client = pulsar.Client(standalone.url)
    try:
        publish(client, topic, [("x", b"x1"), ("y", b"y1"), ("x", b"x2"), ("z", b"z1"), ("y", b"")], batching=True)
        assert compact(standalone, topic)["status"] == "SUCCESS"
        assert read_all(client, topic, compacted=True) == [("x", b"x2"), ("z", b"z1")]
        assert len(read_all(client, topic, compacted=False)) == 5
    finally:
        client.close()


def compaction_properties(standalone: Standalone, topic: str) -> dict[str, str]:
    stats = standalone.admin.call("GET", topic_path(topic) + "/internalStats")
    return dict(stats["cursors"]["__compaction"]["properties"])


def ledger_status(standalone: Standalone, ledger_id: str) -> int:
    return status_of(lambda: standalone.admin.call("GET", f"/view/ledger/{ledger_id}", raw=True))


def status_of(call: object) -> int:
    try:
        call()  # type: ignore[operator]
    except HttpError as e:
        return e.status
    return 200


def test_bad_input(standalone: Standalone) -> None:
    admin = standalone.admin
    missing = topic_path(name()) + "/compaction"
    assert status_of(lambda: admin.call("PUT", missing)) == 404
    assert status_of(lambda: admin.call("GET", missing)) == 404

    topic = name()
    client = pulsar.Client(standalone.url)
    try:
        publish(client, topic, [(f"k{i % 100}", b"v%d" % i) for i in range(1000)])
        path = topic_path(topic) + "/compaction"
        admin.call("PUT", path)
        # At once: the run reads 1,000 entries and adds 100 to the bookies one after the other, which takes
        # far longer than one HTTP request.
        assert status_of(lambda: admin.call("PUT", path)) == 409
        wait_for(lambda: admin.call("GET", path)["status"] == "SUCCESS", "the compaction", timeout_s=20)
        assert [v for _, v in read_all(client, topic, compacted=True)] == [b"v%d" % i for i in range(900, 1000)]

        # readCompacted only on Exclusive and Failover subscriptions, as Pulsar; the name __compaction is taken.
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared, is_read_compacted=True)
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(topic, "__compaction")
        assert len(read_all(client, topic, compacted=False)) == 1000  # nothing lost

        # Deleting the topic deletes its compacted ledger.
        ledger = compaction_properties(standalone, topic)["CompactedTopicLedger"]
        assert ledger_status(standalone, ledger) == 200
        admin.call("DELETE", topic_path(topic) + "?force=true")
        assert ledger_status(standalone, ledger) == 404
    finally:
        client.close()


def test_the_compaction_threshold_compacts_on_its_own(standalone: Standalone) -> None:
    admin = standalone.admin
    ns = "/admin/v2/namespaces/public/compacted"
    admin.call("PUT", ns)
    assert admin.call("GET", ns + "/compactionThreshold") is None  # unset, as Pulsar
    assert status_of(lambda: admin.call("PUT", ns + "/compactionThreshold", -1)) == 412
    assert status_of(lambda: admin.call("PUT", ns + "/compactionThreshold", "many")) == 400
    admin.call("PUT", ns + "/compactionThreshold", 200)
    assert admin.call("GET", ns + "/compactionThreshold") == 200

    topic = f"persistent://public/compacted/auto-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(standalone.url)
    try:
        publish(client, topic, [(f"k{i % 3}", b"value-%d" % i) for i in range(30)])  # about 1.5 KB
        path = topic_path(topic) + "/compaction"
        # The topic ticker (every 10 s) finds more than 200 bytes after the horizon and compacts.
        wait_for(lambda: admin.call("GET", path)["status"] == "SUCCESS", "the automatic compaction", timeout_s=25)
        assert read_all(client, topic, compacted=True) == [
            ("k0", b"value-27"),
            ("k1", b"value-28"),
            ("k2", b"value-29"),
        ]
    finally:
        client.close()
    admin.call("DELETE", ns + "/compactionThreshold")
    assert admin.call("GET", ns + "/compactionThreshold") is None


def test_compaction_under_a_running_producer(standalone: Standalone) -> None:
    """While a producer keeps overwriting and deleting keys, the compacted view is the latest live value
    per key of the messages up to the horizon, then every message after it."""
    topic = name()
    client = pulsar.Client(standalone.url)
    producer = client.create_producer(topic, batching_enabled=False)
    sent: list[tuple[str, bytes]] = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            key, value = f"k{i % 7}", (b"" if i % 11 == 10 else b"v%d" % i)
            producer.send(value, partition_key=key)
            sent.append((key, value))
            i += 1

    worker = threading.Thread(target=produce)
    worker.start()
    try:
        wait_for(lambda: len(sent) >= 100, "100 messages", timeout_s=20)
        assert compact(standalone, topic)["status"] == "SUCCESS"
        wait_for(lambda: len(sent) >= 150, "more messages after the compaction", timeout_s=20)
    finally:
        stop.set()
        worker.join()
    try:
        horizon = tuple(
            int(x)
            for x in standalone.admin.call("GET", topic_path(topic) + "/internalStats")["cursors"]["__compaction"][
                "markDeletePosition"
            ].split(":")
        )
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        history = []
        while reader.has_message_available():
            msg = reader.read_next(5_000)
            mid = msg.message_id()
            history.append(((mid.ledger_id(), mid.entry_id()), msg.partition_key(), msg.data()))
        reader.close()
        assert [(k, v) for _, k, v in history] == sent  # the topic keeps everything, in order
        before = [h for h in history if h[0] <= horizon]
        after = [(k, v) for p, k, v in history if p > horizon]
        assert before and after
        latest = {k: (p, v) for p, k, v in before}
        expected = [(k, v) for k, (p, v) in sorted(latest.items(), key=lambda kv: kv[1][0]) if v]
        assert read_all(client, topic, compacted=True) == expected + after
    finally:
        producer.close()
        client.close()


def test_a_partitioned_topic_is_compacted_partition_by_partition(standalone: Standalone) -> None:
    topic = name()
    admin = standalone.admin
    admin.call("PUT", topic_path(topic) + "/partitions", 2)
    client = pulsar.Client(standalone.url)
    try:
        history = [(f"k{i % 6}", b"" if i == 10 else b"v%d" % i) for i in range(12)]  # k4 deleted last
        publish(client, topic, history)
        admin.call("PUT", topic_path(topic) + "/compaction")
        for i in range(2):
            path = topic_path(f"{topic}-partition-{i}") + "/compaction"
            wait_for(lambda p=path: admin.call("GET", p)["status"] == "SUCCESS", "each partition", timeout_s=20)
        consumer = client.subscribe(
            topic, "compacted", initial_position=pulsar.InitialPosition.Earliest, is_read_compacted=True
        )
        got = {}
        for _ in range(5):
            msg = consumer.receive(5_000)
            got[msg.partition_key()] = msg.data()
        with pytest.raises(pulsar.Timeout):
            consumer.receive(500)
        assert got == {"k0": b"v6", "k1": b"v7", "k2": b"v8", "k3": b"v9", "k5": b"v11"}
    finally:
        client.close()


def test_a_table_view_sees_the_latest_live_value_per_key(standalone: Standalone) -> None:
    topic = name()
    client = pulsar.Client(standalone.url)
    try:
        publish(client, topic, HISTORY)
        assert compact(standalone, topic)["status"] == "SUCCESS"
        publish(client, topic, [("c", b"c2"), ("e", b"e1")])
        view = client.create_table_view(topic)
        got: dict[str, bytes] = {}
        view.for_each(lambda k, v: got.__setitem__(k, v))
        view.close()
        assert got == {"a": b"a3", "c": b"c2", "d": b"d1", "e": b"e1"}  # b deleted by its empty payload
    finally:
        client.close()


def test_the_workloads_tombstones_delete_their_key_and_its_reads_name_them(standalone: Standalone) -> None:
    """`workload --lifecycle` sends tombstones through either client (an empty payload, the value's name in a
    property): compaction deletes their keys, and both clients' reads name them as the history does."""
    from impl.workload.official import OfficialSession
    from impl.workload.operations import ClientSession

    topic = name()
    official, project = OfficialSession(standalone.url), ClientSession(standalone.url)
    try:
        sends = [(official, "v1", "k1", False), (project, "v2", "k2", False), (official, "t1", "k1", True)]
        sends += [(project, "t2", "k2", True), (project, "v3", "k3", False)]
        assert [s.append(topic, value, key, tombstone).kind for s, value, key, tombstone in sends] == ["ok"] * 5
        assert compact(standalone, topic)["status"] == "SUCCESS"
        assert official.append(topic, "t3", "k3", tombstone=True).kind == "ok"  # after the horizon: read as such
        names = ["v1", "v2", "t1", "t2", "v3", "t3"]
        assert [v for _, v in official.read(topic, None, None).fields["value"]] == names
        assert [v for _, v in project.read(topic, None, None).fields["value"]] == names
        assert [v for _, v in official.read_compacted(topic).fields["value"]] == ["v3", "t3"]
    finally:
        official.close()
        project.close()
