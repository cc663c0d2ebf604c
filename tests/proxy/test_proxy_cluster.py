"""Pulsar proxies in front of a real cluster (ZooKeeper, 3 bookies, 2 brokers, 2 proxies, each its own
process), judged by Apache Pulsar's official client: it reaches every topic through a proxy alone, keeps
going through unloads, a broker's SIGKILL and a proxy's SIGKILL, and loses nothing acknowledged."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pulsar
import pytest

from impl.broker.connection import command
from impl.broker.web.admin_client import AdminClient, topic_path
from impl.cluster.deployment import Cluster
from impl.protocol import frames
from impl.protocol import pulsar_api_pb2 as api
from spark.history import read_history
from spark.reference import check
from tests.cluster.conftest import REPO, processes_of, pulsar_ref, state
from tests.producing import Producing
from tests.raw_socket import exchange

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]
T = api.BaseCommand


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = (tmp_path_factory.mktemp("proxied") / "cluster").resolve()
    try:
        up = pulsar_ref("cluster", "up", "--dir", str(directory), "--bookies", "3", "--brokers", "2", "--proxies", "2")
        assert up.returncode == 0, up.stderr
        assert "(through the proxies)" in up.stderr
        yield directory
    finally:
        if (directory / "cluster.json").exists():
            pulsar_ref("cluster", "down", "--dir", str(directory), timeout=120)
        for p in processes_of(directory):
            p.kill()


def nodes(cluster: Path, role: str) -> list[dict]:
    return [n for n in state(cluster)["nodes"] if n["role"] == role]


def ensure_up(cluster: Path) -> None:
    """Start whatever an earlier test killed (a supervisor's job; the nemesis heals the same way)."""
    deployed = Cluster.load(cluster)
    for node in deployed.nodes():
        if node.pid() is None:
            deployed.start(node.name)
        elif node.paused():
            deployed.resume(node.name)


def broker_ports(cluster: Path) -> set[int]:
    return {n["pulsar_port"] for n in nodes(cluster, "broker")}


def owner_web(cluster: Path, topic: str) -> str:
    broker = nodes(cluster, "broker")[0]
    found = AdminClient(f"http://127.0.0.1:{broker['web_port']}").call(
        "GET", "/lookup/v2/topic/" + topic_path(topic).removeprefix("/admin/v2/")
    )
    return str(found["httpUrl"])


def test_every_topic_and_subscription_type_through_one_proxy_alone(cluster: Path) -> None:
    proxy = nodes(cluster, "proxy")[0]
    client = pulsar.Client(f"pulsar://127.0.0.1:{proxy['port']}", operation_timeout_seconds=30)
    try:
        topics = [f"persistent://public/default/proxied-{i}" for i in range(6)]
        kinds = [
            pulsar.ConsumerType.Exclusive,
            pulsar.ConsumerType.Shared,
            pulsar.ConsumerType.Failover,
            pulsar.ConsumerType.KeyShared,
        ]
        for topic in topics:
            consumers = [
                client.subscribe(
                    topic, f"sub-{kind.name}", consumer_type=kind, initial_position=pulsar.InitialPosition.Earliest
                )
                for kind in kinds
            ]
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(10):
                producer.send(b"%d" % i, partition_key=f"k{i % 3}")
            for consumer in consumers:
                got = [consumer.receive(10_000) for _ in range(10)]
                assert sorted(int(m.data()) for m in got) == list(range(10))
                for m in got:
                    consumer.acknowledge(m)
        # Non-persistent topics too (docs/non-persistent.md): served by their owners, reached through the proxy.
        for topic in [f"non-persistent://public/default/proxied-np-{i}" for i in range(4)]:
            consumers = [client.subscribe(topic, f"sub-{kind.name}", consumer_type=kind) for kind in kinds]
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(10):
                producer.send(b"%d" % i, partition_key=f"k{i % 3}")
            for consumer in consumers:
                assert sorted(int(consumer.receive(10_000).data()) for _ in range(10)) == list(range(10))
        # Not one connection of this process (the official client runs in it) went to a broker directly.
        ports = {c.raddr.port for c in psutil.Process().net_connections("tcp") if c.raddr}
        assert not ports & broker_ports(cluster), ports
        assert proxy["port"] in ports
    finally:
        client.close()
    owners = {owner_web(cluster, t) for t in topics}
    assert len(owners) == 2, owners  # the topics live on both brokers, and the proxy reached them all


def test_unload_and_a_broker_sigkill_through_the_proxies_lose_nothing_acknowledged(cluster: Path) -> None:
    ensure_up(cluster)
    proxies = nodes(cluster, "proxy")
    service = "pulsar://" + ",".join(f"127.0.0.1:{p['port']}" for p in proxies)
    admin = AdminClient(f"http://127.0.0.1:{proxies[0]['web_port']}")  # admin calls through the proxy too
    client = pulsar.Client(service, operation_timeout_seconds=60)
    topic = "persistent://public/default/proxied-faults"
    producing: Producing | None = None
    try:
        producer = client.create_producer(topic, send_timeout_millis=60_000, batching_enabled=False)
        producing = Producing(producer)
        producing.progress(50, 30)
        admin.call("PUT", topic_path(topic) + "/unload")
        producing.progress(50, 30)
        owner = next(b for b in nodes(cluster, "broker") if owner_web(cluster, topic).endswith(str(b["web_port"])))
        kill = pulsar_ref("cluster", "kill", "--dir", str(cluster), owner["name"])
        assert kill.returncode == 0, kill.stderr
        producing.progress(50, 90)  # the dead broker's session expires, the other takes the topic over
        producing.stop()
        stats = admin.call("GET", topic_path(topic) + "/internalStats")
        assert len(stats["ledgers"]) >= 3  # one per owner: first load, after the unload, after the kill
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        seen = set()
        while reader.has_message_available():
            seen.add(int(reader.read_next(10_000).data()))
        assert not set(producing.acked) - seen
    finally:
        if producing is not None:
            producing.stop()
        client.close()
    ensure_up(cluster)


def test_a_proxy_killed_and_restarted_is_used_again(cluster: Path) -> None:
    ensure_up(cluster)
    proxy = nodes(cluster, "proxy")[1]
    client = pulsar.Client(f"pulsar://127.0.0.1:{proxy['port']}", operation_timeout_seconds=60)
    try:
        producer = client.create_producer("proxy-restart", send_timeout_millis=60_000)
        producer.send(b"before")
        kill = pulsar_ref("cluster", "kill", "--dir", str(cluster), proxy["name"])
        assert kill.returncode == 0, kill.stderr
        later = threading.Timer(2.0, lambda: Cluster.load(cluster).start(proxy["name"]))  # as a supervisor would
        later.start()
        producer.send(b"after")  # waits for the proxy to come back, then reconnects through it
        later.join()
        reader = client.create_reader("proxy-restart", pulsar.MessageId.earliest)
        assert [reader.read_next(10_000).data() for _ in range(2)] == [b"before", b"after"]
    finally:
        client.close()


def test_admin_calls_through_the_proxy_reach_each_topics_owner(cluster: Path) -> None:
    ensure_up(cluster)
    proxy = nodes(cluster, "proxy")[0]
    admin = AdminClient(f"http://127.0.0.1:{proxy['web_port']}")
    assert "public" in admin.call("GET", "/admin/v2/tenants")
    assert len(admin.call("GET", "/admin/v2/brokers/standalone")) == 2
    topics = [t for t in admin.call("GET", "/admin/v2/persistent/public/default") if "proxied-" in t]
    assert topics
    for topic in topics:  # owned by either broker: the proxy follows the 307 to the owner
        assert admin.call("GET", topic_path(topic) + "/internalStats")["numberOfEntries"] >= 1
    admin.call("PUT", "/admin/v2/tenants/via-proxy", {"allowedClusters": ["standalone"]})
    assert admin.call("GET", "/admin/v2/tenants/via-proxy")["allowedClusters"] == ["standalone"]
    admin.call("DELETE", "/admin/v2/tenants/via-proxy")


def _connect_frame(proxy_to: str | None = None) -> bytes:
    c = api.CommandConnect(client_version="raw", protocol_version=20)
    if proxy_to:
        c.proxy_to_broker_url = proxy_to
    return frames.encode(command(T.CONNECT, connect=c))


def test_bad_input_is_refused_before_anything_is_forwarded(cluster: Path) -> None:
    ensure_up(cluster)
    proxy = nodes(cluster, "proxy")[0]
    port = proxy["port"]
    ping = frames.encode(command(T.PING, ping=api.CommandPing()))
    assert exchange(port, ping) == b""  # anything before CONNECT: closed, nothing answered
    assert exchange(port, (10 * 1024 * 1024).to_bytes(4, "big") + b"\0" * 64) == b""  # an oversized frame
    assert exchange(port, b"\0\0\0\x08\0\0\0\x04junk") == b""  # not a protobuf command
    zookeeper = state(cluster)["zookeepers"][0]["port"]
    answer = frames.FrameDecoder().feed(exchange(port, _connect_frame(f"127.0.0.1:{zookeeper}")))
    assert [f.command.type for f in answer] == [T.ERROR]  # only registered brokers are connected to
    assert "not a registered broker" in answer[0].command.error.message
    # And the proxy still serves.
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=30)
    try:
        client.create_producer("after-bad-input").send(b"ok")
    finally:
        client.close()


def test_commands_sent_while_the_proxy_connects_to_the_broker_reach_it_in_order(cluster: Path) -> None:
    """What a client sends before the proxy has its broker connection waits in the proxy (in the CONNECT's
    segment: the proxy's frame decoder; after it: the connection's stream) and goes first, in order, when
    the relay starts; then the relay carries the rest."""
    ensure_up(cluster)
    port = nodes(cluster, "proxy")[0]["port"]
    broker = f"127.0.0.1:{nodes(cluster, 'broker')[0]['pulsar_port']}"
    ping = frames.encode(command(T.PING, ping=api.CommandPing()))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(_connect_frame(broker) + ping)
        time.sleep(0.002)  # the proxy has read the CONNECT and is connecting to the broker (milliseconds)
        s.sendall(ping * 2)
        answers: list[frames.Frame] = []
        decoder = frames.FrameDecoder()

        def receive_until(count: int) -> None:
            while len(answers) < count:
                chunk = s.recv(65536)
                assert chunk, f"the proxy closed the connection after {[f.command.type for f in answers]}"
                answers.extend(decoder.feed(chunk))

        receive_until(4)
        s.sendall(ping)  # relayed
        receive_until(5)
    assert [f.command.type for f in answers] == [T.CONNECTED] + [T.PONG] * 4


def test_a_faulted_workload_through_two_proxies_is_valid(cluster: Path, tmp_path: Path) -> None:
    ensure_up(cluster)
    history = tmp_path / "h.jsonl"
    command_line = [
        sys.executable, "-m", "pulsar_ref.cli", "workload", "--cluster-dir", str(cluster),
        "--nemesis", "kill-proxy,kill-broker,pause-proxy", "--nemesis-order", "cycle", "--nemesis-interval", "2",
        "--topics", "2", "--partitions", "2", "--ops", "800", "--rate", "40", "--seed", "3", "--out", str(history),
    ]  # fmt: skip
    result = subprocess.run(command_line, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in history.read_text().splitlines()]
    faults = [e for e in events if e["process"] == "nemesis" and e["f"] in ("kill-proxy", "kill-broker", "pause-proxy")]
    assert {e["f"] for e in faults} >= {"kill-proxy", "kill-broker"}, faults
    report = check(read_history(str(history)))
    assert report.valid, report.to_json()
