"""The project's own client (impl/client/) over Pulsar's protocol, against a real standalone
process: what the workload, `produce` and `consume` rely on, outcomes reported honestly."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pulsar
import pytest

from impl.broker.web.admin_client import topic_path
from impl.client import Client, ClientError, MessageId, SendRejected, SendUnknown
from impl.client import connection as core
from impl.protocol import frames
from impl.protocol import pulsar_api_pb2 as api
from tests.broker.pulsar_standalone import ROOT, Standalone, running_standalone

pytestmark = pytest.mark.processes
_n = iter(range(10**6))


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory)


@pytest.fixture
def client(standalone: Standalone) -> Iterator[Client]:
    with Client(standalone.url, timeout_s=10) as c:
        yield c


def topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{int(time.time() * 1000)}-{next(_n)}"


def received(c: core.ClientConnection, type_: int, field_name: str, message: object) -> list[core.Output]:
    return c.step(core.FrameReceived(frames.Frame(core.build(type_, field_name, message))))


def test_the_core_refuses_anything_before_connected_and_matches_answers_by_request_id() -> None:
    c = core.ClientConnection()
    with pytest.raises(core.ProtocolViolation):
        received(c, api.BaseCommand.PONG, "pong", api.CommandPong())
    c = core.ClientConnection()
    connected = api.CommandConnected(server_version="x", protocol_version=20, max_message_size=100)
    (event,) = received(c, api.BaseCommand.CONNECTED, "connected", connected)
    assert event == core.Connected("x", 20, 100)
    lookup = api.CommandLookupTopic(topic="t")
    (sent,) = c.step(core.Request(api.BaseCommand.LOOKUP, lookup))
    assert isinstance(sent, core.WriteRequest)
    request_id = sent.request_id
    assert frames.FrameDecoder().feed(sent.data)[0].command.lookupTopic.request_id == request_id
    assert received(c, api.BaseCommand.SUCCESS, "success", api.CommandSuccess(request_id=request_id + 5)) == []
    error = api.CommandError(request_id=request_id, error=api.TopicNotFound, message="no")
    (refused,) = received(c, api.BaseCommand.ERROR, "error", error)
    assert refused == core.Refused(request_id, api.TopicNotFound, "no")


def test_the_core_connects_with_a_token_drops_late_answers_and_reports_the_unanswered_at_close() -> None:
    c = core.ClientConnection()
    (connect,) = c.step(core.Connect("secret"))
    assert isinstance(connect, core.Write)
    assert frames.FrameDecoder().feed(connect.data)[0].command.connect.auth_data == b"secret"
    received(c, api.BaseCommand.CONNECTED, "connected", api.CommandConnected(protocol_version=20))
    sent = [c.step(core.Request(api.BaseCommand.LOOKUP, api.CommandLookupTopic(topic="t")))[0] for _ in range(3)]
    ids = [s.request_id for s in sent if isinstance(s, core.WriteRequest)]
    assert c.step(core.RequestTimedOut(ids[0])) == []
    assert received(c, api.BaseCommand.SUCCESS, "success", api.CommandSuccess(request_id=ids[0])) == []
    assert c.step(core.ConnectionClosed()) == [core.Unanswered(ids[1]), core.Unanswered(ids[2])]
    assert not c.connected


def test_the_core_refuses_what_is_not_one_of_its_events() -> None:
    with pytest.raises(TypeError):
        core.ClientConnection().step(core.Write(b"x"))  # type: ignore[arg-type]


def test_produce_and_consume_with_batches_keys_and_properties(client: Client) -> None:
    t = topic("own")
    consumer = client.subscribe(t, "s", initial_position="earliest")
    producer = client.create_producer(t, batching=True, batch_max_messages=10, batch_delay_s=0.01)
    futures = [producer.send_async(b"%d" % i, key=f"k{i % 3}", properties={"i": str(i)}) for i in range(25)]
    producer.flush()
    ids = [f.result(10) for f in futures]
    assert ids == sorted(ids) and len({(m.ledger_id, m.entry_id) for m in ids}) < 25
    got = [consumer.receive(10) for _ in range(25)]
    assert [int(m.data) for m in got] == list(range(25))
    assert [m.key for m in got] == [f"k{i % 3}" for i in range(25)]
    assert [m.properties for m in got] == [{"i": str(i)} for i in range(25)]
    assert [m.id for m in got] == ids
    for m in got[:24]:
        consumer.acknowledge(m)
    consumer.close()
    again = client.subscribe(t, "s")
    last = again.receive(10)
    assert int(last.data) == 24  # only the unacknowledged message comes back, out of its batch
    again.acknowledge(last)
    with pytest.raises(TimeoutError):
        again.receive(0.5)


def test_the_official_client_reads_what_the_project_client_wrote_and_back(
    client: Client, standalone: Standalone
) -> None:
    t = topic("both")
    mine = client.create_producer(t).send(b"from pulsar-ref", properties={"a": "b"})
    official = pulsar.Client(standalone.url)
    try:
        reader = official.create_reader(t, pulsar.MessageId.earliest)
        msg = reader.read_next(10_000)
        assert (msg.data(), msg.properties()) == (b"from pulsar-ref", {"a": "b"})
        assert (msg.message_id().ledger_id(), msg.message_id().entry_id()) == (mine.ledger_id, mine.entry_id)
        official.create_producer(t).send(b"from the official client", partition_key="k")
    finally:
        official.close()
    read = client.read_topic(t)
    assert [data for _, data in read] == [b"from pulsar-ref", b"from the official client"]


def test_read_topic_from_a_position_with_a_limit_and_last_message_id(client: Client) -> None:
    t = topic("read")
    producer = client.create_producer(t)
    ids = [producer.send(b"%d" % i) for i in range(6)]
    assert [d for _, d in client.read_topic(t)] == [b"%d" % i for i in range(6)]
    assert [d for _, d in client.read_topic(t, ids[3])] == [b"3", b"4", b"5"]
    assert [d for _, d in client.read_topic(t, ids[1], limit=2)] == [b"1", b"2"]
    assert client.last_message_id(t) == ids[-1]
    assert client.read_topic(topic("empty")) == []


def test_shared_consumers_negative_acks_and_partitions(client: Client, standalone: Standalone) -> None:
    t = topic("shared")
    a = client.subscribe(t, "s", subscription_type="Shared", receiver_queue_size=5)
    b = client.subscribe(t, "s", subscription_type="Shared", receiver_queue_size=5)
    producer = client.create_producer(t)
    for i in range(10):
        producer.send(b"%d" % i)
    seen, idle_rounds = [], 0
    while idle_rounds < 3:  # until neither consumer gets anything for a while
        idle_rounds += 1
        for consumer in (a, b):
            try:
                m = consumer.receive(0.2)
            except TimeoutError:
                continue
            idle_rounds = 0
            if m.redelivery_count == 0 and int(m.data) == 3:
                consumer.negative_acknowledge(m)  # comes back with its count raised
                continue
            seen.append((int(m.data), m.redelivery_count))
            consumer.acknowledge(m)
    assert sorted(d for d, _ in seen) == list(range(10)) and (3, 1) in seen
    base = topic("parts")
    standalone.admin.create_partitioned_topic(base, 2)
    partitioned = client.create_producer(base)
    for i in range(10):
        partitioned.send(b"%d" % i, key=f"k{i}")
    consumer = client.subscribe(base, "s", initial_position="earliest")
    got = [consumer.receive(10) for _ in range(10)]
    assert sorted(int(m.data) for m in got) == list(range(10)) and len({m.topic for m in got}) == 2


def test_refusals_before_anything_is_sent_are_send_rejected(client: Client) -> None:
    t = topic("busy")
    client.create_producer(t, "only-one")
    with pytest.raises(ClientError) as refused:
        client.create_producer(t, "only-one")
    assert refused.value.code == api.ProducerBusy
    producer = client.create_producer(t)
    with pytest.raises(SendRejected):
        producer.send(b"x" * (6 * 1024 * 1024))  # over the broker's advertised maximum
    with pytest.raises(ClientError):
        client.create_producer("persistent://no-such-tenant/ns/t")


def test_an_unload_mid_send_ends_unknown_and_the_next_send_reattaches(client: Client, standalone: Standalone) -> None:
    t = topic("unload")
    producer = client.create_producer(t)
    first = producer.send(b"before")
    pending = [producer.send_async(b"%d" % i) for i in range(200)]
    standalone.admin.call("PUT", topic_path(t) + "/unload")
    outcomes = []
    for f in pending:
        try:
            outcomes.append(f.result(10))
        except SendUnknown:
            outcomes.append(None)
    after = producer.send(b"after")  # attaches again (a new lookup), same producer name
    assert after > first
    written = {data for _, data in client.read_topic(t)}
    for i, outcome in enumerate(outcomes):
        if outcome is not None:
            assert b"%d" % i in written  # every acknowledged send is on the topic
    assert isinstance(after, MessageId)


def test_produce_and_consume_commands_use_the_pulsar_listener(standalone: Standalone) -> None:
    t = topic("cli")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pulsar_ref.cli", *args, "--service-url", standalone.url],
            capture_output=True, text=True, timeout=60, cwd=ROOT,
        )  # fmt: skip

    produced = run("produce", t, "-m", "one", "-m", "two")
    assert produced.returncode == 0, produced.stderr
    consumed = run("consume", t, "-s", "sub", "-n", "2", "-p", "earliest")
    assert consumed.returncode == 0, consumed.stderr
    assert [line.split()[1] for line in consumed.stdout.splitlines()] == ["one", "two"]


def test_a_broker_that_accepts_but_never_answers_does_not_stall_lookups(standalone: Standalone) -> None:
    """A paused broker still accepts TCP connections (the kernel does) and answers nothing; the
    lookup gives it a share of the timeout and asks the next broker of the service URL."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        dead = f"127.0.0.1:{silent.getsockname()[1]}"
        live = standalone.url.removeprefix("pulsar://")
        with Client(f"pulsar://{dead},{live}", timeout_s=4) as c:
            t = topic("silent-first")
            for _ in range(2):  # the rotation starts at the silent one, then alternates
                assert c.partitions(t) == 0
                assert c.lookup(t) == standalone.url
    finally:
        silent.close()
