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
from impl.workload.operations import RECEIVE_TIMEOUT_S, Credentials, Outcome, Received, Session, describe

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
        message_ttl: int | None = None,
    ) -> None:
        self.history = history
        self.message_ttl = message_ttl  # seconds, the TTL in force on the topics: each drain records it
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
        acting = Acting(self.history, session, process, sub, name)
        outcome = acting.subscribe()
        if outcome.kind != "ok":
            if outcome.kind == "fail":
                self.stop.wait(0.5)
            return outcome.kind != "info"
        for _ in range(rng.randrange(5, 40)):
            if self.stop.is_set():
                break
            received = acting.receive()
            if received.outcome.kind != "ok":
                continue
            r = rng.random()
            if r < 0.7:
                acting.answer(received, "ack", cumulative=sub.type in ORDERED and rng.random() < 0.3)
            elif r < 0.8:
                acting.answer(received, "nack")
        return acting.close().kind != "info"

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
        process = self.new_process()
        acting = Acting(self.history, self.connect(), process, sub, f"drain-{process}", message_ttl=self.message_ttl)
        try:
            while acting.consumer is None:
                outcome = acting.subscribe()
                if outcome.kind == "info" or (acting.consumer is None and time.monotonic() > deadline):
                    return False
                if acting.consumer is None:
                    time.sleep(1.0)
            while True:
                received = acting.receive(DRAIN_QUIET_S)
                if received.outcome.kind == "ok":
                    acting.answer(received, "ack")
                    continue
                if acting.drained(backlog).kind == "ok":
                    return True
                if time.monotonic() > deadline:
                    return False
        finally:
            if acting.consumer is not None:
                acting.close()
            acting.session.close()


@dataclass
class Acting:
    """One consumer session of one process on one subscription: each operation recorded as an invoke and its
    completion."""

    history: HistoryWriter
    session: Session
    process: int
    sub: Subscription
    name: str
    consumer: Any = None
    message_ttl: int | None = None  # recorded on each drain (docs/history.md, Storage lifecycle)

    def _record(self, f: str, call: Callable[[], Outcome], **fields: Any) -> Outcome:
        who = (
            {"subscription": self.sub.name} if f == "drain" else {"subscription": self.sub.name, "consumer": self.name}
        )
        self.history.invoke(self.process, f, self.sub.topic, **who, **fields)
        outcome = call()
        self.history.complete(self.process, outcome.kind, f, self.sub.topic, **who, **fields, **outcome.fields)
        return outcome

    def subscribe(self) -> Outcome:
        def call() -> Outcome:
            outcome, self.consumer = self.session.subscribe(self.sub.topic, self.sub.name, self.sub.type, self.name)
            return outcome

        return self._record("subscribe", call, subscription_type=self.sub.type)

    def receive(self, timeout_s: float = RECEIVE_TIMEOUT_S) -> Received:
        got: list[Received] = []

        def call() -> Outcome:
            got.append(self.session.receive(self.consumer, self.sub.topic, timeout_s))
            return got[0].outcome

        self._record("receive", call)
        return got[0]

    def answer(self, received: Received, f: str, cumulative: bool = False) -> Outcome:
        """An ack (individual or cumulative) or a nack of what `received` delivered."""
        delivered = received.outcome.fields
        about = {k: delivered[k] for k in ("value", "position", "partition") if k in delivered}
        if f == "ack":
            call = lambda: self.session.ack(self.consumer, received.message, cumulative)  # noqa: E731
            return self._record(f, call, **about, cumulative=cumulative)
        return self._record(f, lambda: self.session.nack(self.consumer, received.message), **about)

    def close(self) -> Outcome:
        return self._record("close", lambda: self.session.close_consumer(self.consumer))

    def drained(self, backlog: Callable[[Subscription], int]) -> Outcome:
        """`ok` when the brokers report a backlog of 0 for the subscription."""

        def call() -> Outcome:
            try:
                left = backlog(self.sub)
            except Exception as e:
                return Outcome("fail", {"error": describe(e)})
            return Outcome("ok") if left == 0 else Outcome("fail", {"error": f"backlog {left}"})

        ttl = {"message_ttl": self.message_ttl} if self.message_ttl else {}
        return self._record("drain", call, **ttl)


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
