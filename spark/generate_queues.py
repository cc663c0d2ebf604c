"""Consumers for generated histories (spark/generate.py): subscriptions that deliver as Pulsar promises, so the
histories are valid, and one injector per anomaly of subscriptions.

Each topic gets one subscription of every type. Consumer processes run sessions (subscribe, receives each
followed by an ack, a nack or nothing, close) on timelines like the appenders'. Every operation takes effect at
one instant inside its interval; effects are applied in time order, together with the appends' effects, to a
model of each subscription:
- a message is available unless it is acknowledged or held (delivered and not yet acknowledged, negatively
  acknowledged or given back by its consumer's close);
- Exclusive: one consumer process; Failover: the first consumer still subscribed receives, the others time out;
  Shared: any consumer; all three deliver the lowest available message;
- Key_Shared: the lowest available message whose key no other consumer holds.
After the final reads every subscription drains: its consumers are closed, one consumer receives and
acknowledges everything left, then `drain` completes ok.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

Event = dict[str, Any]
TYPES = ("Exclusive", "Failover", "Shared", "Key_Shared")
KEYS = ("k0", "k1", "k2", "k3")


@dataclass
class Message:
    topic: str
    position: list[int]
    value: str
    key: str


@dataclass
class Subscription:
    topic: str
    name: str
    type: str
    log: list[Message] = field(default_factory=list)
    acked: set[str] = field(default_factory=set)
    held: dict[str, str] = field(default_factory=dict)  # value -> consumer
    deliveries: dict[str, int] = field(default_factory=dict)  # value -> times delivered
    consumers: list[str] = field(default_factory=list)

    def receive(self, consumer: str) -> Message | None:
        if consumer not in self.consumers:
            return None
        if self.type == "Failover" and self.consumers[0] != consumer:
            return None
        busy = {m.key for m in self.log if m.value in self.held and self.held[m.value] != consumer}
        for m in self.log:
            if m.value in self.acked or m.value in self.held:
                continue
            if self.type == "Key_Shared" and m.key in busy:
                continue
            self.held[m.value] = consumer
            return m
        return None

    def release(self, consumer: str, value: str, acked: bool) -> None:
        if self.held.get(value) == consumer:
            del self.held[value]
        if acked:
            self.acked.add(value)

    def close(self, consumer: str) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        for value in [v for v, c in self.held.items() if c == consumer]:
            del self.held[value]


@dataclass
class Planned:
    inv: int
    eff: int
    cmp: int
    seq: int
    process: int
    f: str
    sub: Subscription
    consumer: str
    outcome: str = "ok"
    target: Planned | None = None  # an ack or nack: the receive it answers
    cumulative: bool = False
    effective: bool = True  # an info ack: whether it took effect
    delivered: Message | None = None
    redelivery_count: int = 0


def plan(
    rng: random.Random, topics: list[str], first_pid: int, processes: int, span: int
) -> tuple[list[Planned], list[Subscription]]:
    """Consumer processes over the run's time span (nanoseconds / 1000, as generate() plans them), and the
    subscriptions."""
    subs = [Subscription(t, f"s-{kind.lower()}", kind) for t in topics for kind in TYPES]
    # Exclusive subscriptions get one process each; the others share the rest.
    exclusive = [s for s in subs if s.type == "Exclusive"]
    others = [s for s in subs if s.type != "Exclusive"]
    owners = [exclusive[i] if i < len(exclusive) else others[i % len(others)] for i in range(processes)]
    out: list[Planned] = []
    seq = 10**9
    for n, sub in enumerate(owners):
        pid = first_pid + n
        clock = rng.randrange(0, 1000) * 1000
        session = 0
        while clock < span:
            session += 1
            consumer = f"c{pid}-{session}"
            steps: list[tuple[str, Planned | None]] = [("subscribe", None)]
            for _ in range(rng.randrange(3, 12)):
                steps.append(("receive", None))
            steps.append(("close", None))
            last_receive: Planned | None = None
            for f, _ in steps:
                if clock >= span and f == "receive":
                    continue
                seq += 1
                op = _timed(rng, clock, (500, 2000, 2000), seq, pid, f, sub, consumer)
                clock = op.cmp // 1000
                out.append(op)
                if f != "receive":
                    continue
                last_receive = op
                r = rng.random()
                if r < 0.85:
                    seq += 1
                    f2 = "ack" if r < 0.7 else "nack"
                    ack = _timed(rng, clock, (200, 1000, 1000), seq, pid, f2, sub, consumer)
                    clock = ack.cmp // 1000
                    ack.target = last_receive
                    if f2 == "ack":
                        ack.cumulative = sub.type in ("Exclusive", "Failover") and rng.random() < 0.3
                        if rng.random() < 0.1:
                            ack.outcome, ack.effective = "info", rng.random() < 0.5
                    out.append(ack)
    return out, subs


def _timed(
    rng: random.Random,
    clock: int,
    gaps: tuple[int, int, int],
    seq: int,
    pid: int,
    f: str,
    sub: Subscription,
    consumer: str,
) -> Planned:
    """An operation invoked after `clock`, taking effect and completing after random gaps (at most `gaps`
    ms each); its times carry `seq` in their last digits, so no two events share a time."""
    inv = clock + rng.randrange(1, gaps[0]) * 1000
    eff = inv + rng.randrange(1, gaps[1]) * 1000
    cmp = eff + rng.randrange(1, gaps[2]) * 1000
    return Planned(
        inv * 1000 + seq % 1000, eff * 1000 + seq % 1000, cmp * 1000 + seq % 1000, seq, pid, f, sub, consumer
    )


def apply(
    planned: list[Planned], subscriptions: list[Subscription], appends: list[tuple[int, str, list[int], str, str]]
) -> None:
    """Apply the consumers' effects and the appends' (effect time, topic, position, value, key) in time order."""
    effects: list[tuple[int, int, Any]] = [(a[0], 0, a) for a in appends]
    effects += [(p.eff, 1, p) for p in planned]
    by_topic: dict[str, list[Subscription]] = {}
    for s in subscriptions:
        by_topic.setdefault(s.topic, []).append(s)
    for _, kind, item in sorted(effects, key=lambda e: (e[0], e[1])):
        if kind == 0:
            _, topic, position, value, key = item
            for s in by_topic.get(topic, []):
                s.log.append(Message(topic, position, value, key))
            continue
        p: Planned = item
        s = p.sub
        if p.f == "subscribe":
            s.consumers.append(p.consumer)
        elif p.f == "close":
            s.close(p.consumer)
        elif p.f == "receive":
            m = s.receive(p.consumer)
            if m is None:
                p.outcome = "fail"
            else:
                p.delivered = m
                p.redelivery_count = s.deliveries.get(m.value, 0)
                s.deliveries[m.value] = p.redelivery_count + 1
        elif p.target is not None and p.target.delivered is not None and p.effective:
            value = p.target.delivered.value
            if p.f == "nack":
                s.release(p.consumer, value, acked=False)
            elif p.cumulative:
                upto = p.target.delivered.position
                for m in s.log:
                    if m.position <= upto:
                        s.release(s.held.get(m.value, p.consumer), m.value, acked=True)
            else:
                s.release(p.consumer, value, acked=True)


def render(planned: list[Planned]) -> list[tuple[int, int, Event]]:
    """(time, tiebreak, event) for every consumer operation; acks of receives that delivered nothing are left out."""
    raw: list[tuple[int, int, Event]] = []
    for p in planned:
        base: Event = {
            "process": p.process,
            "f": p.f,
            "topic": p.sub.topic,
            "subscription": p.sub.name,
            "consumer": p.consumer,
        }
        invoke: Event = {**base, "type": "invoke"}
        done: Event = {**base, "type": p.outcome}
        if p.f == "subscribe":
            invoke["subscription_type"] = p.sub.type
        elif p.f == "receive" and p.delivered is not None:
            m = p.delivered
            done.update(value=m.value, position=list(m.position), redelivery_count=p.redelivery_count, key=m.key)
        elif p.f in ("ack", "nack"):
            if p.target is None or p.target.delivered is None:
                continue
            m = p.target.delivered
            invoke.update(value=m.value, position=list(m.position))
            if p.f == "ack":
                invoke["cumulative"] = p.cumulative
        raw.append((p.inv, p.seq * 2, invoke))
        raw.append((p.cmp, p.seq * 2 + 1, done))
    return raw


def drain(subs: list[Subscription], start: int, first_pid: int) -> list[tuple[int, int, Event]]:
    """After the final reads: each subscription's consumers are gone; one consumer takes and acknowledges the
    rest, then the drain completes."""
    raw: list[tuple[int, int, Event]] = []
    t, seq = start, 2 * 10**12
    for n, s in enumerate(sorted(subs, key=lambda s: (s.topic, s.name))):
        pid, consumer = first_pid + n, f"drain-{n}"
        base: Event = {"process": pid, "topic": s.topic, "subscription": s.name}
        steps: list[tuple[Event, Event]] = [
            (
                {"f": "subscribe", "consumer": consumer, "subscription_type": s.type},
                {"f": "subscribe", "consumer": consumer},
            )
        ]
        for consumer_left in list(s.consumers):
            s.close(consumer_left)
        for m in s.log:
            if m.value in s.acked:
                continue
            count = s.deliveries.get(m.value, 0)
            s.deliveries[m.value] = count + 1
            delivery = {"value": m.value, "position": list(m.position), "redelivery_count": count, "key": m.key}
            common = {"consumer": consumer}
            steps.append(({"f": "receive", **common}, {"f": "receive", **common, **delivery}))
            ack = {"f": "ack", **common, "value": m.value, "position": list(m.position), "cumulative": False}
            steps.append((ack, {"f": "ack", **common}))
        steps.append(({"f": "close", "consumer": consumer}, {"f": "close", "consumer": consumer}))
        steps.append(({"f": "drain"}, {"f": "drain"}))
        for invoke, done in steps:
            seq += 2
            raw.append((t, seq, {**base, **invoke, "type": "invoke"}))
            raw.append((t + 500, seq + 1, {**base, **done, "type": "ok"}))
            t += 1000
    return raw


def inject(events: list[Event], anomaly: str, rng: random.Random) -> list[Event] | None:
    """One defect of a subscription anomaly, made in place (events are a copy); returns the touched events, or
    None if this history offers no place for it. Each defect leaves every other check's verdict alone."""
    pending: dict[Any, Event] = {}
    pairs: list[tuple[Event, Event]] = []  # (invoke, completion) of consumers' operations
    appended: dict[str, Event] = {}  # value -> ok append
    drains: dict[tuple[str, str], Event] = {}
    types: dict[tuple[str, str], str] = {}
    for ev in events:
        if ev["process"] == "nemesis":
            continue
        if ev["type"] == "invoke":
            pending[ev["process"]] = ev
            if ev["f"] == "subscribe":
                types.setdefault((ev["topic"], ev["subscription"]), ev["subscription_type"])
            continue
        inv = pending.pop(ev["process"])
        if ev["f"] == "append" and ev["type"] == "ok":
            appended[ev["value"]] = ev
        elif ev["f"] == "drain" and ev["type"] == "ok":
            drains.setdefault((ev["topic"], ev["subscription"]), ev)
        elif "subscription" in ev:
            pairs.append((inv, ev))
    deliveries = [(inv, ok) for inv, ok in pairs if ok["f"] == "receive" and ok["type"] == "ok"]
    if anomaly == "lost-message":
        # Every delivery of one acknowledged value to one drained subscription disappears, with its acks.
        for (topic, sub), drained in sorted(drains.items()):
            values = sorted(v for v, a in appended.items() if a["topic"] == topic)
            if not values:
                continue
            value = rng.choice(values)
            gone = {
                id(ev)
                for inv, done in pairs
                if (inv["topic"], inv["subscription"]) == (topic, sub)
                and (done.get("value") if inv["f"] == "receive" else inv.get("value")) == value
                for ev in (inv, done)
            }
            events[:] = [ev for ev in events if id(ev) not in gone]
            return [appended[value], drained]
        return None
    if anomaly == "unexpected-delivery":
        # A consumer session of its own receives a value nobody appended.
        for inv, ok in deliveries:
            new_pid = 10**6 + 1
            invoke = {**inv, "process": new_pid, "consumer": "c-unexpected", "time": ok["time"]}
            done = {**ok, "process": new_pid, "consumer": "c-unexpected", "time": ok["time"] + 1}
            done.update(value="unexpected-value", redelivery_count=0)
            done.pop("key", None)
            at = events.index(ok) + 1
            events[at:at] = [invoke, done]
            return [done]
        return None
    if anomaly not in ("subscription-reorder", "key-order"):
        raise ValueError(f"unknown anomaly {anomaly!r}")
    ordered = ("Exclusive", "Failover") if anomaly == "subscription-reorder" else ("Key_Shared",)
    # Two consecutive first deliveries of one session (or of one key, to one consumer) swap positions.
    seen: set[tuple[str, str, str]] = set()
    last: dict[Any, Event] = {}
    for _, ok in deliveries:
        topic_sub: tuple[str, str] = (ok["topic"], ok["subscription"])
        first = ok["redelivery_count"] == 0 and (*topic_sub, ok["value"]) not in seen
        seen.add((*topic_sub, ok["value"]))
        if not first or types.get(topic_sub) not in ordered:
            continue
        group = (topic_sub, ok["consumer"] if anomaly == "subscription-reorder" else ok.get("key"))
        prev = last.get(group)
        last[group] = ok
        if prev is None or prev["position"] == ok["position"] or prev["consumer"] != ok["consumer"]:
            continue
        prev["position"], ok["position"] = ok["position"], prev["position"]
        return [prev, ok]
    return None
