"""Ownership transfer under load with real processes: a real ZooKeeper, three bookie processes and
broker processes (`pulsar-ref broker`). The claim of the project, end to end: after a takeover
the old owner cannot get a single write acknowledged, and nothing acknowledged is lost."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from impl.broker.web.admin_client import AdminClient, topic_path
from impl.client import Client, ClientError, MessageId, Producer, SendRejected, SendUnknown
from impl.metadata import layout
from impl.metadata.url import connect
from impl.metadata.zkserver import ZooKeeperServer
from impl.web.http import HttpError
from tests.bookie.bookie_process import BookieProcess
from tests.processes import start_listening
from tests.waiting import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]

ROOT = Path(__file__).resolve().parents[2]
SESSION_TIMEOUT_S = 4.0


class BrokerProcess:
    def __init__(self, metadata: str, log: Path) -> None:
        self.log = log.open("w")  # a file, not a pipe: a pipe nobody reads would block the broker
        args = ["broker", "--metadata", metadata, "--session-timeout", str(SESSION_TIMEOUT_S)]
        self.proc, self.address, banner = start_listening(args, stderr=self.log)
        pulsar_url = re.search(r"Pulsar clients: (pulsar://[^\s;]+)", banner)
        web_url = re.search(r"web service: (http://[^\s;]+)", banner)
        assert pulsar_url and web_url, banner
        self.pulsar_url = pulsar_url.group(1)  # its pulsar:// listener, as it advertises it in lookups
        self.web_url = web_url.group(1)

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def ensure_stopped(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()
        self.log.close()


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    metadata = f"zk://{zookeeper.connect_string}/takeover-{uuid.uuid4().hex[:8]}"
    bookies: list[BookieProcess] = []
    try:
        for i in range(3):
            bookies.append(BookieProcess(tmp_path / f"bookie-{i}", metadata))
        yield metadata, tmp_path
    finally:
        for b in bookies:
            b.ensure_stopped()


class Producing:
    """A producer sending unique values continuously, recording each outcome."""

    def __init__(self, client: Client, topic: str) -> None:
        self.client = client
        self.topic = topic
        self.acked: list[tuple[MessageId, bytes]] = []
        self.unknown: list[bytes] = []
        self.errors: list[str] = []  # what kept it from producing, for a failure's message
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        producer: Producer | None = None
        while not self._stop.is_set():
            try:
                if producer is None:
                    created = self.client.create_producer(self.topic)
                    assert isinstance(created, Producer)  # the topic is not partitioned
                    producer = created
                value = b"v%d" % n
                n += 1
                try:
                    self.acked.append((producer.send(value, timeout_s=5), value))
                except SendRejected:
                    raise
                except SendUnknown:
                    # Also when no receipt came in time (its broker paused): a new producer looks the
                    # topic up again rather than wait on that connection.
                    self.unknown.append(value)
                    producer = None
                except Exception:  # anything else is not a rejection: the outcome is unknown
                    self.unknown.append(value)
                    raise
            except SendRejected as e:  # not written (no broker to attach to): the producer attaches again
                self.errors.append(f"{time.monotonic():.1f} {e!r}")
                time.sleep(0.05)
            except Exception as e:
                self.errors.append(f"{time.monotonic():.1f} {e!r}")
                producer = None
                time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def owner_of(brokers: list[BrokerProcess], via: BrokerProcess, topic: str) -> BrokerProcess:
    """The topic's owner, as broker `via` (one that is up) answers a lookup (redirects followed)."""
    with Client(via.pulsar_url, timeout_s=10) as client:
        url = client.lookup(topic)
    return next(b for b in brokers if b.pulsar_url == url)


class PinnedClient(Client):
    """A client that takes one broker for the owner of every topic and every topic for a plain one
    (no lookup, no partition metadata): its producers go straight to that broker whatever the
    metadata says, as a client with a stale lookup would."""

    def __init__(self, broker_url: str) -> None:
        super().__init__(broker_url, timeout_s=5)
        self.broker_url = broker_url

    def lookup(self, topic: str) -> str:
        return self.broker_url

    def partitions(self, topic: str) -> int:
        return 0


def wait_for_acks(producing: Producing, more_than: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while len(producing.acked) <= more_than:
        assert time.monotonic() < deadline, (
            f"no acknowledged send past {more_than} within {timeout_s}s; last errors {producing.errors[-5:]}"
        )
        time.sleep(0.05)


def test_takeover_after_sigkill_and_a_paused_owner_never_gets_a_write_acknowledged(
    cluster: tuple[str, Path],
) -> None:
    metadata, logs = cluster
    brokers = [BrokerProcess(metadata, logs / "broker-0.log"), BrokerProcess(metadata, logs / "broker-1.log")]
    topic = f"persistent://public/default/takeover-{uuid.uuid4().hex[:6]}"
    try:
        client = Client("pulsar://" + ",".join(b.pulsar_url.removeprefix("pulsar://") for b in brokers), timeout_s=10)
        consumer = client.subscribe(topic, "audit", initial_position="earliest")
        consumer.close()  # the durable subscription exists from the start
        producing = Producing(client, topic)
        wait_for_acks(producing, 20)

        # 1. The owner dies (SIGKILL): the other broker takes the topic over.
        first = owner_of(brokers, brokers[0], topic)
        first.signal(signal.SIGKILL)
        first.ensure_stopped()
        before = len(producing.acked)
        wait_for_acks(producing, before + 20)
        survivor = owner_of(brokers, next(b for b in brokers if b is not first), topic)
        assert survivor is not first

        # 2. A third broker joins; the owner is paused (SIGSTOP) until its session expires and the
        #    topic moves; resumed, it must not get a single write acknowledged.
        brokers.append(BrokerProcess(metadata, logs / "broker-2.log"))
        client.service.append(brokers[-1].pulsar_url)
        # The project's client gives a lookup request as long as the whole lookup, so a broker that takes
        # connections and never answers (a paused one) fails every lookup that reaches it: the producer
        # looks topics up through the brokers that are up, as an operator would point it.
        client.service.remove(survivor.pulsar_url)
        survivor.signal(signal.SIGSTOP)
        try:
            store = connect(metadata)
            try:  # its registration is ephemeral: it goes when the paused owner's session expires
                registered = layout.broker_path(survivor.address)
                wait_for(lambda: store.exists(registered) is None, "the paused owner's session to expire", 60)
            finally:
                store.close()
            before = len(producing.acked)
            wait_for_acks(producing, before + 20)
            assert owner_of(brokers, brokers[-1], topic) is brokers[-1]
        finally:
            survivor.signal(signal.SIGCONT)
        outcomes: list[object] = []
        deadline = time.monotonic() + 3
        with PinnedClient(survivor.pulsar_url) as stale:
            stale_producer = None
            while time.monotonic() < deadline:
                try:
                    stale_producer = stale_producer or stale.create_producer(topic, "stale")
                    outcomes.append(stale_producer.send(b"stale", timeout_s=5))
                except ClientError as e:  # refused, or the stale broker is busy noticing: not an ack
                    outcomes.append(repr(e))
        acknowledged = [o for o in outcomes if isinstance(o, MessageId)]
        assert outcomes and not acknowledged, f"the stale owner acknowledged a write: {outcomes}"
        producing.stop()

        # 3. What the topic stores, read before the audit subscription acknowledges anything (its
        #    acks let the broker trim fully consumed ledgers): every acknowledged message, in order.
        acked_values = [v for _, v in producing.acked]
        stored = client.read_topic(topic, timeout_s=30)
        stored_values = [v for _, v in stored]
        logs_text = "\n".join(f"{p.name}: {p.read_text()[-3000:]}" for p in sorted(logs.glob("broker-*.log")))
        lost = [(mid, v) for mid, v in producing.acked if v not in set(stored_values)]

        def internal_stats() -> dict[str, Any]:
            """The topic's internal stats from its owner (the third broker), for a failure's message."""
            try:
                return dict(AdminClient(brokers[-1].web_url).call("GET", topic_path(topic) + "/internalStats"))
            except HttpError as e:
                return {"ledgers": f"unknown ({e})", "cursors": f"unknown ({e})"}

        assert not lost, (
            f"{len(lost)} acknowledged messages are not on the topic, first {lost[:5]}; "
            f"ledgers {internal_stats()['ledgers']}; broker logs:\n{logs_text}"
        )
        assert [v for v in stored_values if v in set(acked_values)] == acked_values, "acknowledged messages reordered"
        assert b"stale" not in stored_values, f"a write to the stale owner is on the topic; it was told {outcomes[:5]}"

        # 4. The durable subscription (it existed before the first send) delivers each acknowledged
        #    message exactly once, in order; messages with an unknown outcome at most once.
        consumer = client.subscribe(topic, "audit")
        seen: list[tuple[MessageId, bytes]] = []
        wanted = set(acked_values)
        last_progress = time.monotonic()
        while True:
            try:
                msg = consumer.receive(timeout_s=3)
            except TimeoutError:
                # Drained once every acknowledged message came; a loaded machine may pause longer.
                if wanted <= {v for _, v in seen} or time.monotonic() - last_progress > 60:
                    break
                continue
            last_progress = time.monotonic()
            seen.append((msg.id, msg.data))
            consumer.acknowledge(msg)
        consumer.close()
        values = [v for _, v in seen]
        assert len(values) == len(set(values)), "a message was consumed twice"
        delivered = [v for v in values if v in wanted]
        assert delivered == acked_values, (
            f"the subscription delivered {len(delivered)} of {len(acked_values)} acknowledged messages "
            f"(first undelivered: {[v for v in acked_values if v not in set(values)][:5]}) or out of order; "
            f"cursors {internal_stats()['cursors']}"
        )
        assert set(values) <= set(acked_values) | set(producing.unknown), set(values) - set(acked_values)
        assert [mid for mid, _ in seen] == sorted(mid for mid, _ in seen)
        client.close()
    finally:
        for b in brokers:
            b.ensure_stopped()
