"""Pulsar's official client against a real cluster: ZooKeeper, three bookies, two broker processes."""

from __future__ import annotations

import contextlib
import http.client
from pathlib import Path

import pulsar
import pytest

from impl.broker.dispatcher import key_slot
from impl.broker.web.admin_client import AdminClient, topic_path
from tests.cluster.conftest import pulsar_ref, state
from tests.cluster.moving_topic import MovingTopic
from tests.producing import Producing, receive_all

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]


def brokers(cluster_dir: Path) -> list[dict]:
    return [n for n in state(cluster_dir)["nodes"] if n["role"] == "broker"]


def topics_of(broker: dict, topics: list[str]) -> list[str]:
    """Those of the topics the broker serves: its admin API answers their stats itself, not with a 307."""
    served = []
    for topic in topics:
        connection = http.client.HTTPConnection("127.0.0.1", broker["web_port"], timeout=10)
        connection.request("GET", topic_path(topic) + "/stats")
        status = connection.getresponse().status
        connection.close()
        assert status in (200, 307), status
        if status == 200:
            served.append(topic)
    return served


def message_features_across_brokers(client: pulsar.Client, admin: AdminClient, first: dict, second: dict) -> None:
    """Issue 43's features on topics the second broker owns, reached by a client and an admin that know only
    the first: partition ids, KeyBased batches with de-duplication on, Key_Shared's Murmur3 slots, and the
    message admin calls (PUT subscription, skip, examinemessage, terminate) through the first's 307s."""
    partitioned = "persistent://public/default/features-partitioned"
    admin.create_partitioned_topic(partitioned, 4)
    consumer = client.subscribe(partitioned, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        partitioned, batching_enabled=False, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
    )
    sent = {producer.send(b"%d" % i).partition() for i in range(8)}
    got = receive_all(consumer, 8)
    assert len(got) == 8 and {m.message_id().partition() for m in got} == sent == {0, 1, 2, 3}
    consumer.close()

    candidates = [f"persistent://public/default/features-{i}" for i in range(16)]
    for candidate in candidates:
        admin.call("PUT", topic_path(candidate))
    theirs = iter(topics_of(second, candidates))

    deduplicated = next(theirs)  # a confirmed KeyBased batch is never dropped as a duplicate
    admin.call("POST", topic_path(deduplicated) + "/deduplicationEnabled", True)
    consumer = client.subscribe(deduplicated, "s")
    producer = client.create_producer(deduplicated, batching_type=pulsar.BatchingType.KeyBased)
    for i in range(30):
        producer.send_async(b"%d" % i, None, partition_key=f"k{i % 3}")
    producer.flush()
    assert sorted(int(m.data()) for m in receive_all(consumer, 30)) == list(range(30))
    assert admin.call("GET", topic_path(deduplicated) + "/stats")["deduplicationStatus"] == "Enabled"

    key_shared = next(theirs)  # the second consumer takes slots 0..32,768 of Murmur3 % 65,536
    first_c, second_c = (
        client.subscribe(key_shared, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=n) for n in "ab"
    )
    keys = [f"key-{i}" for i in range(24)]
    producer = client.create_producer(key_shared)
    for i, key in enumerate(keys):
        producer.send(b"%d" % i, partition_key=key)
    theirs_keys = {k for k in keys if key_slot(k) <= 32768}
    to_second = [m.partition_key() for m in receive_all(second_c, len(theirs_keys))]
    assert sorted(to_second) == sorted(theirs_keys)
    assert sorted(m.partition_key() for m in receive_all(first_c, len(keys) - len(theirs_keys))) == sorted(
        set(keys) - theirs_keys
    )

    administered = next(theirs)
    path = topic_path(administered)
    # A client of its own: the official client answers a send to a terminated topic by closing its
    # connection, re-creating the producer, being refused (TopicTerminated) and marking it closed, so
    # closing that client may report AlreadyClosed, depending on which of its closes finishes first.
    terminated_client = pulsar.Client(f"pulsar://127.0.0.1:{first['pulsar_port']}", operation_timeout_seconds=30)
    producer = terminated_client.create_producer(administered, batching_enabled=False)
    ids = [producer.send(b"m%d" % i) for i in range(5)]
    admin.call("PUT", f"{path}/subscription/from-start", {"ledgerId": -1, "entryId": -1})
    admin.call("POST", f"{path}/subscription/from-start/skip/2")
    assert admin.call("GET", path + "/stats")["subscriptions"]["from-start"]["msgBacklog"] == 3
    headers, body = admin.message(f"{path}/examinemessage?initialPosition=earliest&messagePosition=2")
    assert body == b"m1" and headers["x-pulsar-message-id"] == f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    last = admin.call("POST", f"{path}/terminate")
    assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
    with pytest.raises(pulsar.TopicTerminated):
        producer.send(b"late")
    with contextlib.suppress(pulsar.AlreadyClosed):
        terminated_client.close()


def test_lookups_redirect_to_the_owner_and_a_killed_owner_loses_no_acknowledged_message(cluster_dir: Path) -> None:
    up = pulsar_ref("cluster", "up", "--dir", str(cluster_dir), "--bookies", "3", "--brokers", "2")
    assert up.returncode == 0, up.stderr
    first, second = brokers(cluster_dir)
    assert "Pulsar clients: pulsar://" in up.stderr

    # A client that knows only the first broker reaches topics the second one owns: lookups redirect.
    client = pulsar.Client(f"pulsar://127.0.0.1:{first['pulsar_port']}", operation_timeout_seconds=30)
    try:
        topics = [f"persistent://public/default/spread-{i}" for i in range(8)]
        for t in topics:
            client.create_producer(t).send(t.encode())
        owned = [topics_of(b, topics) for b in (first, second)]
        assert owned[0] and owned[1], owned  # both brokers own some of them

        # Sizes (issue 43): a message at the advertised limit is stored on the cluster's bookies, and a
        # chunked 10 MB message round-trips.
        sizes = "persistent://public/default/sizes"
        big = client.create_producer(sizes, batching_enabled=False, send_timeout_millis=60_000)
        reader = client.create_reader(sizes, pulsar.MessageId.earliest)
        big.send(b"b" * 5_242_816)
        chunked = client.create_producer(
            sizes, batching_enabled=False, chunking_enabled=True, send_timeout_millis=60_000
        )
        chunked.send(b"c" * 10_000_000)
        got = [len(reader.read_next(60_000).data()) for _ in range(2)]
        assert got == [5_242_816, 10_000_000]

        # The admin REST API: any broker answers for the cluster; topic calls go to the owner (307).
        webs = [f"http://127.0.0.1:{b['web_port']}" for b in (first, second)]
        admin = AdminClient(webs[0])
        assert admin.call("GET", "/admin/v2/brokers/standalone") == sorted(w.removeprefix("http://") for w in webs)
        assert admin.call("GET", "/admin/v2/brokers/leaderBroker")["serviceUrl"] in webs
        theirs = owned[1][0]
        connection = http.client.HTTPConnection("127.0.0.1", first["web_port"], timeout=10)
        connection.request("GET", topic_path(theirs) + "/internalStats")
        redirect = connection.getresponse()
        assert redirect.status == 307 and redirect.getheader("Location", "").startswith(webs[1] + "/admin/v2/")
        connection.close()
        assert admin.call("GET", topic_path(theirs) + "/internalStats")["numberOfEntries"] == 1
        found = admin.call("GET", "/lookup/v2/topic/" + topic_path(theirs).removeprefix("/admin/v2/"))
        assert found["brokerUrl"] == f"pulsar://127.0.0.1:{second['pulsar_port']}"
        status = pulsar_ref("cluster", "status", "--dir", str(cluster_dir))
        assert all(w in status.stdout for w in webs), status.stdout
        for t in topics:
            reader = client.create_reader(t, pulsar.MessageId.earliest)
            assert reader.read_next(10_000).data() == t.encode()

        # Non-persistent topics (issue 43) are served by their bundle's owner too, in its memory only.
        np_topics = [f"non-persistent://public/default/np-spread-{i}" for i in range(8)]
        np_consumers = [client.subscribe(t, "s") for t in np_topics]
        for t in np_topics:
            client.create_producer(t).send(t.encode())
        for t, c in zip(np_topics, np_consumers, strict=True):
            assert c.receive(10_000).data() == t.encode()
        np_owned = [topics_of(b, np_topics) for b in (first, second)]
        assert np_owned[0] and np_owned[1] and sorted(np_owned[0] + np_owned[1]) == sorted(np_topics), np_owned
        np_stats = admin.call("GET", topic_path(np_owned[1][0]) + "/stats")  # from the first: a 307 followed
        assert np_stats["msgInCounter"] == 1 and np_stats["storageSize"] == 0

        message_features_across_brokers(client, admin, first, second)
    finally:
        client.close()

    # Kill the owner of a topic while a producer writes to it: the client finds the new owner
    # (after the dead broker's session expires) and every acknowledged message is on the topic.
    client = pulsar.Client(state(cluster_dir)["pulsar_service"], operation_timeout_seconds=60)
    topic = "persistent://public/default/killed-owner"
    moving: MovingTopic | None = None
    try:
        producer = client.create_producer(topic, send_timeout_millis=60_000, producer_name="writer")
        owner = next(b for b in (first, second) if topics_of(b, [topic]))
        # Issue 43's features on a topic of the broker about to be killed: they must carry over to the other.
        admin = AdminClient(f"http://127.0.0.1:{first['web_port']},127.0.0.1:{second['web_port']}")
        candidates = [f"persistent://public/default/moving-{i}" for i in range(16)]
        for candidate in candidates:
            admin.call("PUT", topic_path(candidate))
        moving = MovingTopic(state(cluster_dir)["pulsar_service"], admin, topics_of(owner, candidates)[0])
        moving.before_move()
        producing = Producing(producer)
        producing.progress(50, 30)
        kill = pulsar_ref("cluster", "kill", "--dir", str(cluster_dir), owner["name"])
        assert kill.returncode == 0, kill.stderr
        producing.progress(50, 90, "the producer never got going again on the new owner")
        producing.stop()
        survivor = second if owner is first else first
        assert topics_of(survivor, [topic])
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        seen = set()
        while reader.has_message_available():
            seen.add(int(reader.read_next(10_000).data()))
        assert set(producing.acked) <= seen
        moving.after_move()
    finally:
        client.close()
        if moving is not None:
            moving.close()
