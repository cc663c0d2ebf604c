"""Admin of the message features with Pulsar's paths (issue 43, item 8), against a real `pulsar-ref
standalone` process, with the official client (pulsar-client 3.13.0): skip, skip_all, examinemessage,
terminate, subscriptions made with PUT, publisher and consumer stats with Pulsar's fields, and the
`pulsar-ref admin` commands for them."""

from __future__ import annotations

import datetime
import socket
import threading
import time
from collections.abc import Iterator

import pulsar
import pytest

from impl.broker.web.admin_client import topic_path
from impl.protocol.frames import FrameDecoder
from impl.web.http import HttpError
from pulsar_ref.commands import admin as admin_cli
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


def _publish(client: pulsar.Client, topic: str, count: int) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(b"m%d" % i, properties={"i": str(i)}) for i in range(count)]
    producer.close()
    return ids


def _refused(standalone: Standalone, method: str, path: str, body: object = None) -> int:
    with pytest.raises(HttpError) as refused:
        standalone.admin.call(method, path, body)
    return refused.value.status


def _backlog(standalone: Standalone, topic: str, sub: str) -> int:
    backlog = standalone.admin.call("GET", topic_path(topic) + "/stats")["subscriptions"][sub]["msgBacklog"]
    assert isinstance(backlog, int)
    return backlog


# ---- subscriptions made with PUT, skip, skip_all -------------------------------------------------------


def test_put_subscription_starts_where_asked_and_skip_moves_it(standalone: Standalone, client: pulsar.Client) -> None:
    topic = topic_name("adm-skip")
    ids = _publish(client, topic, 10)
    path = topic_path(topic)
    standalone.admin.call("PUT", f"{path}/subscription/from-start", {"ledgerId": -1, "entryId": -1})
    standalone.admin.call("PUT", f"{path}/subscription/at-end")  # no body: Pulsar's latest
    third = ids[3]
    standalone.admin.call(
        "PUT", f"{path}/subscription/at-3", {"ledgerId": third.ledger_id(), "entryId": third.entry_id()}
    )
    assert _refused(standalone, "PUT", f"{path}/subscription/from-start") == 409
    assert _backlog(standalone, topic, "from-start") == 10
    assert _backlog(standalone, topic, "at-end") == 0
    assert _backlog(standalone, topic, "at-3") == 7  # the message id is where reading starts

    standalone.admin.call("POST", f"{path}/subscription/from-start/skip/3")
    assert _backlog(standalone, topic, "from-start") == 7
    consumer = client.subscribe(topic, "from-start")
    first = consumer.receive(5000)
    assert first.data() == b"m3" and first.message_id() == ids[3]
    consumer.close()

    standalone.admin.call("POST", f"{path}/subscription/from-start/skip_all")
    assert _backlog(standalone, topic, "from-start") == 0
    consumer = client.subscribe(topic, "from-start")
    with pytest.raises(pulsar.Timeout):
        consumer.receive(500)
    consumer.close()


def test_skip_refuses_bad_input_with_pulsars_codes(standalone: Standalone, client: pulsar.Client) -> None:
    topic = topic_name("adm-skip-bad")
    _publish(client, topic, 2)
    path = topic_path(topic)
    standalone.admin.call("PUT", f"{path}/subscription/s", {"ledgerId": -1, "entryId": -1})
    assert _refused(standalone, "POST", f"{path}/subscription/nobody/skip/1") == 404
    assert _refused(standalone, "POST", f"{path}/subscription/nobody/skip_all") == 404
    assert _refused(standalone, "POST", f"{path}/subscription/s/skip/-1") == 400
    assert _refused(standalone, "POST", f"{path}/subscription/s/skip/many") == 400
    assert _refused(standalone, "PUT", f"{path}/subscription/s2", {"ledgerId": "x", "entryId": 0}) == 400
    missing = topic_path(topic_name("adm-none"))
    assert _refused(standalone, "POST", f"{missing}/subscription/s/skip/1") == 404
    assert _refused(standalone, "PUT", f"{missing}/subscription/s") == 404
    partitioned = topic_name("adm-skip-part")
    standalone.admin.create_partitioned_topic(partitioned, 2)
    assert _refused(standalone, "POST", f"{topic_path(partitioned)}/subscription/s/skip/1") == 405
    assert _backlog(standalone, topic, "s") == 2  # nothing refused moved anything


def test_skip_reaches_a_subscription_whose_consumer_left_before_an_unload(
    standalone: Standalone, client: pulsar.Client
) -> None:
    """After an unload the subscription is only its cursor until a consumer comes back: still skippable."""
    topic = topic_name("adm-skip-reload")
    client.subscribe(topic, "s").close()
    _publish(client, topic, 4)
    path = topic_path(topic)
    standalone.admin.call("PUT", f"{path}/unload")
    standalone.admin.call("POST", f"{path}/subscription/s/skip/1")
    assert _backlog(standalone, topic, "s") == 3


def test_put_subscription_and_skip_all_on_a_partitioned_topic_reach_every_partition(
    standalone: Standalone, client: pulsar.Client
) -> None:
    topic = topic_name("adm-part")
    standalone.admin.create_partitioned_topic(topic, 2)
    standalone.admin.call("PUT", topic_path(topic) + "/subscription/s", {"ledgerId": -1, "entryId": -1})
    partitions = [f"{topic}-partition-{i}" for i in range(2)]
    for partition in partitions:
        _publish(client, partition, 3)
        assert _backlog(standalone, partition, "s") == 3
    assert _refused(standalone, "PUT", topic_path(topic) + "/subscription/s") == 409
    standalone.admin.call("POST", topic_path(topic) + "/subscription/s/skip_all")
    assert [_backlog(standalone, p, "s") for p in partitions] == [0, 0]


# ---- examinemessage ---------------------------------------------------------------------------------


def test_examine_message_answers_the_nth_message_with_pulsars_headers(
    standalone: Standalone, client: pulsar.Client
) -> None:
    topic = topic_name("adm-examine")
    path = topic_path(topic)
    client.create_producer(topic).close()
    assert _refused(standalone, "GET", f"{path}/examinemessage?initialPosition=earliest&messagePosition=1") == 412
    ids = _publish(client, topic, 5)

    def examine(initial: str, nth: int) -> tuple[dict[str, str], bytes]:
        return standalone.admin.message(f"{path}/examinemessage?initialPosition={initial}&messagePosition={nth}")

    headers, body = examine("earliest", 2)
    assert body == b"m1"
    assert headers["x-pulsar-message-id"] == f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    assert headers["x-pulsar-property-i"] == "1"
    assert headers["x-pulsar-sequence-id"] == "1"
    assert headers["x-pulsar-publish-time"].startswith(time.strftime("%Y-", time.gmtime()))
    assert examine("latest", 1)[1] == b"m4"
    assert examine("latest", 5)[1] == b"m0"
    assert examine("earliest", 0)[1] == b"m0"  # as Pulsar: below 1 is the first
    assert _refused(standalone, "GET", f"{path}/examinemessage?initialPosition=middle") == 400
    assert _refused(standalone, "GET", f"{path}/examinemessage?messagePosition=6") == 404

    batched = topic_name("adm-examine-batch")
    producer = client.create_producer(batched, batching_enabled=True, batching_max_publish_delay_ms=50)
    for i in range(3):
        producer.send_async(b"b%d" % i, None)
    producer.flush()
    producer.close()
    headers, _ = standalone.admin.message(topic_path(batched) + "/examinemessage?initialPosition=earliest")
    assert headers["x-pulsar-num-batch-message"] == "3"

    partitioned = topic_name("adm-examine-part")
    standalone.admin.create_partitioned_topic(partitioned, 2)
    assert _refused(standalone, "GET", topic_path(partitioned) + "/examinemessage") == 405


# ---- terminate ------------------------------------------------------------------------------------------


def test_terminate_refuses_producers_and_answers_the_last_id(standalone: Standalone, client: pulsar.Client) -> None:
    topic = topic_name("adm-terminate")
    path = topic_path(topic)
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(b"m%d" % i) for i in range(3)]
    last = standalone.admin.call("POST", f"{path}/terminate")
    assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
    assert standalone.admin.call("POST", f"{path}/terminate") == last  # again: the same answer
    with pytest.raises(pulsar.TopicTerminated):
        producer.send(b"late")
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)
    got = []
    for _ in range(3):
        m = consumer.receive(5000)
        consumer.acknowledge(m)
        got.append(m.data())
    assert got == [b"m0", b"m1", b"m2"]  # what was published before stays readable

    standalone.admin.call("PUT", f"{path}/unload")  # the next owner knows
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)
    assert standalone.admin.call("POST", f"{path}/terminate") == last
    # A new subscription still reads all of it, and is told the end once: the official client does not know
    # REACHED_END_OF_TOPIC and reconnects on it, so what it had not acknowledged yet may come again.
    late = client.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)
    seen = []
    while True:
        try:
            m = late.receive(1000)
        except pulsar.Timeout:
            break
        late.acknowledge(m)
        seen.append(m.data())
    assert set(seen) == {b"m0", b"m1", b"m2"} and len(seen) <= 6


def test_terminate_bad_input_and_a_deleted_topic_forgets_it(standalone: Standalone, client: pulsar.Client) -> None:
    missing = topic_path(topic_name("adm-term-none"))
    assert _refused(standalone, "POST", f"{missing}/terminate") == 404
    partitioned = topic_name("adm-term-part")
    standalone.admin.create_partitioned_topic(partitioned, 2)
    assert _refused(standalone, "POST", topic_path(partitioned) + "/terminate") == 405

    topic = topic_name("adm-term-delete")
    client.create_producer(topic).close()
    assert standalone.admin.call("POST", topic_path(topic) + "/terminate") == {
        "ledgerId": -1,
        "entryId": -1,
        "partitionIndex": -1,
    }
    standalone.admin.call("DELETE", topic_path(topic))
    client.create_producer(topic).send(b"a new topic of that name")


# ---- topic policies: de-duplication --------------------------------------------------------------------


def test_a_topics_own_deduplication_policy_overrides_its_namespaces_at_once(
    standalone: Standalone, client: pulsar.Client
) -> None:
    topic = topic_name("adm-dedup")
    path = topic_path(topic)
    producer = client.create_producer(topic, producer_name="p")
    producer.send(b"first", sequence_id=1)

    def status() -> str:
        value = standalone.admin.call("GET", path + "/stats")["deduplicationStatus"]
        assert isinstance(value, str)
        return value

    assert status() == "Disabled"  # Pulsar's default: off
    assert standalone.admin.call("GET", path + "/deduplicationEnabled") is None
    assert standalone.admin.call("GET", path + "/deduplicationEnabled?applied=true") is False
    standalone.admin.call("POST", path + "/deduplicationEnabled", True)
    assert status() == "Enabled"  # on the loaded topic at once
    assert standalone.admin.call("GET", path + "/deduplicationEnabled") is True
    producer.send(b"again", sequence_id=1)  # a duplicate now: confirmed, not stored
    producer.send(b"second", sequence_id=2)
    standalone.admin.call("PUT", path + "/unload")
    assert status() == "Enabled"  # the next load reads it back
    assert standalone.admin.call("GET", path + "/internalStats")["numberOfEntries"] == 2
    standalone.admin.call("DELETE", path + "/deduplicationEnabled")
    assert status() == "Disabled" and standalone.admin.call("GET", path + "/deduplicationEnabled") is None
    assert _refused(standalone, "POST", path + "/deduplicationEnabled", "yes") == 400
    assert _refused(standalone, "POST", topic_path(topic_name("adm-dedup-none")) + "/deduplicationEnabled", True) == 404

    partitioned = topic_name("adm-dedup-part")
    standalone.admin.create_partitioned_topic(partitioned, 2)
    standalone.admin.call("POST", topic_path(partitioned) + "/deduplicationEnabled", True)
    assert standalone.admin.call("GET", topic_path(partitioned) + "/deduplicationEnabled") is True
    for i in range(2):
        stats = standalone.admin.call("GET", topic_path(f"{partitioned}-partition-{i}") + "/stats")
        assert stats["deduplicationStatus"] == "Enabled"


# ---- publisher and consumer stats ----------------------------------------------------------------------


def test_stats_show_publishers_and_consumers_with_pulsars_fields(standalone: Standalone, client: pulsar.Client) -> None:
    topic = topic_name("adm-stats")
    consumer = client.subscribe(topic, "s", consumer_name="reader-1", receiver_queue_size=100)
    producer = client.create_producer(topic, producer_name="writer-1", batching_enabled=False)
    for _ in range(4):
        producer.send(b"x" * 10)
    consumer.acknowledge(consumer.receive(5000))
    stats = standalone.admin.call("GET", topic_path(topic) + "/stats")
    (publisher,) = stats["publishers"]
    assert publisher["producerName"] == "writer-1"
    assert publisher["producerId"] >= 0 and publisher["accessMode"] == "Shared"
    assert publisher["averageMsgSize"] == 10.0
    assert publisher["address"].startswith("/127.0.0.1:") and publisher["connectedSince"]
    for field in ("msgRateIn", "msgThroughputIn"):
        assert isinstance(publisher[field], float)
    (c,) = stats["subscriptions"]["s"]["consumers"]
    assert c["consumerName"] == "reader-1"
    assert c["msgOutCounter"] == 4 and c["availablePermits"] == 100 - 4  # its queue's permits, less what came
    assert c["unackedMessages"] in (3, 4)  # the client sends acks grouped, within 100 ms
    assert c["blockedConsumerOnUnackedMsgs"] is False
    assert c["address"] == publisher["address"] and c["connectedSince"]
    for field in ("msgRateOut", "msgThroughputOut"):
        assert isinstance(c[field], float)


def _official_client_version() -> str:
    """The client_version the official client puts in its CONNECT, read off the wire by a listener
    that only takes that first frame (and answers nothing: the client gives up after its timeout)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    seen: list[str] = []

    def take_connect() -> None:
        s, _ = server.accept()
        with s:
            s.settimeout(10)
            decoder = FrameDecoder()
            while not seen:
                frames = decoder.feed(s.recv(4096))
                seen.extend(f.command.connect.client_version for f in frames[:1])

    reader = threading.Thread(target=take_connect, daemon=True)
    reader.start()
    c = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=1, connection_timeout_ms=1000)
    try:
        with pytest.raises(Exception):  # noqa: B017 (whichever error: nothing answers it)
            c.get_topic_partitions("persistent://public/default/nobody")
    finally:
        c.close()
        server.close()
    reader.join(10)
    assert seen, "the official client sent no CONNECT"
    return seen[0]


def test_stats_name_each_clients_version_address_and_properties(standalone: Standalone, client: pulsar.Client) -> None:
    """Pulsar's ServerCnx keeps CONNECT's client_version per connection; every publisher and consumer
    of that connection shows it, with the connection's address, since when, its name and properties."""
    sent = _official_client_version()
    assert sent.startswith("Pulsar")
    topic = topic_name("adm-client")
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=5)
    consumer = client.subscribe(topic, "s", consumer_name="reader-2", properties={"team": "blue", "role": "audit"})
    producer = client.create_producer(
        topic, producer_name="writer-2", properties={"app": "billing"}, batching_enabled=False
    )
    producer.send(b"x")
    consumer.acknowledge(consumer.receive(5000))

    def check_since(value: str) -> None:
        since = datetime.datetime.fromisoformat(value)
        assert since.tzinfo is not None and start <= since <= datetime.datetime.now(datetime.UTC)

    stats = standalone.admin.call("GET", topic_path(topic) + "/stats")
    (publisher,) = stats["publishers"]
    assert publisher["clientVersion"] == sent
    assert publisher["producerName"] == "writer-2" and publisher["metadata"] == {"app": "billing"}
    assert publisher["address"].startswith("/127.0.0.1:") and int(publisher["address"].rsplit(":", 1)[1]) > 0
    check_since(publisher["connectedSince"])
    (c,) = stats["subscriptions"]["s"]["consumers"]
    assert c["clientVersion"] == sent
    assert c["consumerName"] == "reader-2" and c["metadata"] == {"team": "blue", "role": "audit"}
    assert c["address"] == publisher["address"]  # one client, one connection
    check_since(c["connectedSince"])
    now_ms = time.time() * 1000
    assert 0 < c["lastConsumedTimestamp"] <= now_ms
    deadline = time.monotonic() + 5  # the client sends acks grouped, within 100 ms
    while c["lastAckedTimestamp"] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
        (c,) = standalone.admin.call("GET", topic_path(topic) + "/stats")["subscriptions"]["s"]["consumers"]
    assert 0 < c["lastAckedTimestamp"] <= time.time() * 1000

    partitioned = topic_name("adm-client-part")
    standalone.admin.create_partitioned_topic(partitioned, 2)
    part_producer = client.create_producer(partitioned, producer_name="writer-3", properties={"app": "p"})
    part_consumer = client.subscribe(partitioned, "s", consumer_name="reader-3", properties={"k": "v"})
    stats = standalone.admin.call("GET", topic_path(partitioned) + "/partitioned-stats?perPartition=true")
    assert len(stats["publishers"]) == 2  # one per partition, as Pulsar lists them
    for p in stats["publishers"]:
        assert p["clientVersion"] == sent and p["metadata"] == {"app": "p"} and p["address"].startswith("/127.0.0.1:")
    for partition in stats["partitions"].values():
        (c,) = partition["subscriptions"]["s"]["consumers"]
        assert c["clientVersion"] == sent and c["metadata"] == {"k": "v"} and c["consumerName"] == "reader-3"
    for closing in (producer, consumer, part_producer, part_consumer):
        closing.close()


# ---- the CLI ---------------------------------------------------------------------------------------------


def test_admin_cli_skips_examines_and_terminates(
    standalone: Standalone, client: pulsar.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = topic_name("adm-cli")
    _publish(client, topic, 3)
    url = ["--admin-url", standalone.web_url]

    def run(*argv: str) -> str:
        assert admin_cli.main([*url, *argv], "pulsar-ref admin") == 0
        return capsys.readouterr().out

    run("topics", "create-subscription", topic, "--subscription", "s", "--message-id", "earliest")
    run("topics", "skip", topic, "--subscription", "s", "--count", "2")
    assert _backlog(standalone, topic, "s") == 1
    run("topics", "clear-backlog", topic, "--subscription", "s")
    assert _backlog(standalone, topic, "s") == 0
    shown = run("topics", "examine-message", topic, "--initial-position", "earliest", "--message-position", "2")
    assert "X-Pulsar-Message-ID:" in shown or "x-pulsar-message-id:" in shown.lower()
    assert shown.rstrip().endswith("m1")
    assert '"entryId": 2' in run("topics", "terminate", topic)
    assert admin_cli.main([*url, "topics", "skip", topic, "--subscription", "nobody", "--count", "1"], "p") == 2
    assert "404" in capsys.readouterr().err


def test_admin_cli_help_names_the_new_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        admin_cli.main(["topics", "--help"], "pulsar-ref admin")
    out = capsys.readouterr().out
    for verb in ("create-subscription", "skip", "skip-all", "examine-message", "terminate", "set-deduplication"):
        assert verb in out
    with pytest.raises(SystemExit):
        admin_cli.main(["namespaces", "--help"], "pulsar-ref admin")
    assert "set-delayed-delivery" in capsys.readouterr().out
