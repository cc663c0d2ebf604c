"""The workload's consumers (docs/history.md, Consumers): every topic has one durable subscription of each type;
consumer processes run sessions on them while the appenders run and the nemesis acts, and after healing every
subscription drains to the end of its topic.

A session: subscribe, then receives, each followed by an acknowledgement (individual, or cumulative on
Exclusive and Failover, which allow it), a negative acknowledgement or nothing, then close. Exclusive
subscriptions get one consumer process each (a second consumer would be refused); the other types share the
remaining processes, so Failover and Key_Shared see consumers come and go.

The drain: one consumer per subscription receives and acknowledges until nothing more comes, then `drain` asks
the brokers' admin REST API for the subscription's backlog on every partition: 0 ends it `ok`; otherwise it
ends `fail` and receiving goes on.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from impl.workload.history import HistoryWriter
from impl.workload.operations import Credentials, Session, describe

SUBSCRIPTION_TYPES = ("Exclusive", "Failover", "Shared", "Key_Shared")
# A durable subscription that never consumes: without one, a broker may delete ledgers every subscription has
# acknowledged (Pulsar keeps no retention by default), and the final reads would miss acknowledged appends.
RETAIN = "workload-retain"
ORDERED = ("Exclusive", "Failover")  # the types that accept cumulative acknowledgements
DRAIN_QUIET_S = 1.0  # a drain asks for the backlog after a receive waited this long for nothing


@dataclass(frozen=True)
class Subscription:
    topic: str  # the subscribed topic: plain, or a partitioned topic's base name
    name: str
    type: str
    partitions: int = 0  # of the topic, 0 when it is not partitioned


def subscriptions(plain_topics: list[str], partitioned: str | None, partitions: int) -> list[Subscription]:
    topics = [(t, 0) for t in plain_topics] + ([(partitioned, partitions)] if partitioned else [])
    return [Subscription(t, f"s-{kind.lower()}", kind, n) for t, n in topics for kind in SUBSCRIPTION_TYPES]


def assign(subs: list[Subscription], processes: int) -> list[Subscription]:
    """Which subscription each consumer process uses: one per Exclusive subscription first, then round robin."""
    exclusive = [s for s in subs if s.type == "Exclusive"]
    shared = [s for s in subs if s.type != "Exclusive"]
    return [
        exclusive[i] if i < len(exclusive) else shared[(i - len(exclusive)) % len(shared)] for i in range(processes)
    ]


class Consumers:
    """The consumer processes of one run. `new_process` gives fresh process ids, `connect` a client session."""

    def __init__(
        self,
        history: HistoryWriter,
        subs: list[Subscription],
        new_process: Callable[[], int],
        connect: Callable[[], Session],
        stop: threading.Event,
    ) -> None:
        self.history = history
        self.subs = subs
        self.new_process = new_process
        self.connect = connect
        self.stop = stop

    # --- set-up ------------------------------------------------------------------------------------

    def create_subscriptions(self, session: Session, topics: list[str]) -> None:
        """Each subscription is made once before anything is appended, from the earliest message (set-up: not in
        the history), and the retaining subscription on every topic. One that exists already is fine."""
        wanted = [(s.topic, s.name, s.type) for s in self.subs] + [(t, RETAIN, "Exclusive") for t in topics]
        for topic, name, kind in wanted:
            outcome, consumer = session.subscribe(topic, name, kind, f"setup-{name}")
            if outcome.kind != "ok":
                raise RuntimeError(f"could not create subscription {name} on {topic}: {outcome.fields.get('error')}")
            session.close_consumer(consumer)

    # --- one consumer process ----------------------------------------------------------------------

    def run(self, sub: Subscription, seed: int | None) -> None:
        rng = random.Random(seed)
        process, sessions = self.new_process(), 0
        session: Session | None = None
        while not self.stop.is_set():
            if session is None:
                try:
                    session = self.connect()
                except Exception:
                    return  # the service is gone for good (connect already retried)
            sessions += 1
            name = f"c{process}-{sessions}"
            if not self._session(session, process, sub, name, rng):
                session.close()
                session = None
                process, sessions = self.new_process(), 0
        if session is not None:
            session.close()

    def _session(self, session: Session, process: int, sub: Subscription, name: str, rng: random.Random) -> bool:
        """One consumer session; False when an operation ended `info` (the process must be retired)."""
        h = self.history
        fields = {"subscription": sub.name, "consumer": name}
        h.invoke(process, "subscribe", sub.topic, **fields, subscription_type=sub.type)
        outcome, consumer = session.subscribe(sub.topic, sub.name, sub.type, name)
        h.complete(process, outcome.kind, "subscribe", sub.topic, **fields, **outcome.fields)
        if outcome.kind != "ok":
            if outcome.kind == "fail":
                self.stop.wait(0.5)
            return outcome.kind != "info"
        for _ in range(rng.randrange(5, 40)):
            if self.stop.is_set():
                break
            self._receive_and_answer(session, process, sub, fields, consumer, rng)
        h.invoke(process, "close", sub.topic, **fields)
        outcome = session.close_consumer(consumer)
        h.complete(process, outcome.kind, "close", sub.topic, **fields, **outcome.fields)
        return outcome.kind != "info"

    def _receive_and_answer(
        self,
        session: Session,
        process: int,
        sub: Subscription,
        fields: dict[str, Any],
        consumer: Any,
        rng: random.Random,
    ) -> bool:
        h = self.history
        h.invoke(process, "receive", sub.topic, **fields)
        received = session.receive(consumer, sub.topic)
        h.complete(process, received.outcome.kind, "receive", sub.topic, **fields, **received.outcome.fields)
        if received.outcome.kind != "ok":
            return False
        r = rng.random()
        if r < 0.7:
            cumulative = sub.type in ORDERED and rng.random() < 0.3
            self._answer(session, process, sub, fields, consumer, received, "ack", cumulative=cumulative)
        elif r < 0.8:
            self._answer(session, process, sub, fields, consumer, received, "nack")
        return True

    def _answer(
        self,
        session: Session,
        process: int,
        sub: Subscription,
        fields: dict[str, Any],
        consumer: Any,
        received: Any,
        f: str,
        cumulative: bool = False,
    ) -> str:
        delivered = received.outcome.fields
        about = {k: delivered[k] for k in ("value", "position", "partition") if k in delivered}
        extra = {"cumulative": cumulative} if f == "ack" else {}
        self.history.invoke(process, f, sub.topic, **fields, **about, **extra)
        if f == "ack":
            outcome = session.ack(consumer, received.message, cumulative)
        else:
            outcome = session.nack(consumer, received.message)
        self.history.complete(process, outcome.kind, f, sub.topic, **fields, **about, **extra, **outcome.fields)
        return outcome.kind

    # --- the drain ---------------------------------------------------------------------------------

    def drain(self, backlog: Callable[[Subscription], int], deadline: float, progress: Callable[[str], None]) -> int:
        """Drain every subscription (after healing); returns how many drained."""
        drained = 0
        for sub in self.subs:
            if self._drain(sub, backlog, deadline):
                drained += 1
        progress(f"drained {drained} of {len(self.subs)} subscriptions")
        return drained

    def _drain(self, sub: Subscription, backlog: Callable[[Subscription], int], deadline: float) -> bool:
        h = self.history
        process = self.new_process()
        session = self.connect()
        name = f"drain-{process}"
        fields = {"subscription": sub.name, "consumer": name}
        consumer = None
        try:
            while consumer is None:
                h.invoke(process, "subscribe", sub.topic, **fields, subscription_type=sub.type)
                outcome, consumer = session.subscribe(sub.topic, sub.name, sub.type, name)
                h.complete(process, outcome.kind, "subscribe", sub.topic, **fields, **outcome.fields)
                if outcome.kind == "info" or (consumer is None and time.monotonic() > deadline):
                    return False
                if consumer is None:
                    time.sleep(1.0)
            while True:
                h.invoke(process, "receive", sub.topic, **fields)
                received = session.receive(consumer, sub.topic, DRAIN_QUIET_S)
                h.complete(process, received.outcome.kind, "receive", sub.topic, **fields, **received.outcome.fields)
                if received.outcome.kind == "ok":
                    self._answer(session, process, sub, fields, consumer, received, "ack")
                    continue
                h.invoke(process, "drain", sub.topic, subscription=sub.name)
                try:
                    left = backlog(sub)
                    kind, extra = ("ok", {}) if left == 0 else ("fail", {"error": f"backlog {left}"})
                except Exception as e:
                    kind, extra = "fail", {"error": describe(e)}
                h.complete(process, kind, "drain", sub.topic, subscription=sub.name, **extra)
                if kind == "ok":
                    return True
                if time.monotonic() > deadline:
                    return False
        finally:
            if consumer is not None:
                h.invoke(process, "close", sub.topic, **fields)
                outcome = session.close_consumer(consumer)
                h.complete(process, outcome.kind, "close", sub.topic, **fields, **outcome.fields)
            session.close()


def backlog_of(admin_url: str, credentials: Credentials) -> Callable[[Subscription], int]:
    """The subscription's backlog (entries not yet acknowledged) summed over its partitions, through the admin REST
    API that any Pulsar service has."""
    from impl.broker.web.admin_client import AdminClient, topic_path
    from impl.security.tls import client_context

    tls = client_context(credentials.tls_trust_certs_file) if credentials.tls_trust_certs_file else None
    admin = AdminClient(admin_url, timeout_s=10.0, token=credentials.token, tls=tls)

    def backlog(sub: Subscription) -> int:
        logs = [f"{sub.topic}-partition-{i}" for i in range(sub.partitions)] if sub.partitions else [sub.topic]
        total = 0
        for log in logs:
            stats = admin.call("GET", topic_path(log) + "/stats?getPreciseBacklog=true")
            total += int(stats["subscriptions"][sub.name]["msgBacklog"])
        return total

    return backlog
