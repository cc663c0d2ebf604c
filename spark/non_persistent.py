"""Plain-Python reference of what the audit decides for non-persistent topics (docs/history.md, Non-persistent
topics); spark/np_audit.py is the Spark job that must agree with it, case for case and figure for figure.

Pulsar keeps nothing of a non-persistent topic: a message goes to the consumers connected when it arrives, or is
dropped. So an acknowledged send that no subscription delivered is not an anomaly but loss, counted per
subscription. What Pulsar does promise is about one live connection: its messages come in publish order, once
(the dispatcher sends each entry once and keeps nothing to redeliver). A consumer *session* (`consumer`, from
subscribe to close) is the finest connection the history sees.

Terms as in spark/queue_reference.py (deliveries are `ok` receives in completion order; the log of a delivery is
its partition, else its topic). A delivery is *expected* when an append to its log carried its value and did not
complete `fail`; the append's process is the value's *producer* (one process appends one value at a time, so
its append invokes are its publish order).

- unexpected-delivery: as for persistent topics, a delivery of a value no append to its log carried, or whose
  append completed `fail`. One case per (subscription, value), its earliest delivery; witness: that delivery (and
  the failed append's completion).
- non-persistent-duplicate: one consumer session delivered an expected value twice, and no fault began or healed
  between the value's append invoke and the second delivery (a producer that reconnects sends again what it had
  in flight, and a non-persistent topic does not de-duplicate). One case per (session, value); witness: the first
  two deliveries.
- non-persistent-reorder: two consecutive deliveries to one consumer session of one log of values of one
  producer (the session's first delivery of each value only), where the later delivered value was appended
  before the earlier one. Witness: both deliveries.

Figures (per subscription of a non-persistent topic, `NonPersistentFigures`): acknowledged appends to its topic
(all its partitions), those it delivered, `lost` = the difference, deliveries, and duplicates (deliveries of a
value it had delivered before).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Sequence

from spark.history import NemesisEvent, Op, time_teller
from spark.queue_reference import base_topic, deliveries, subscription_types
from spark.report import Case, NonPersistentFigures

DOMAIN = "non-persistent://"


def is_non_persistent(topic: str | None) -> bool:
    return bool(topic) and topic.startswith(DOMAIN)  # type: ignore[union-attr]


def split(ops: Sequence[Op]) -> tuple[list[Op], list[Op]]:
    """(the operations on persistent topics, those on non-persistent ones): each half is judged on its own."""
    durable: list[Op] = []
    live: list[Op] = []
    for op in ops:
        (live if is_non_persistent(op.topic) else durable).append(op)
    return durable, live


def check(ops: Sequence[Op], nemesis: Sequence[NemesisEvent] = ()) -> list[Case]:
    """The anomalies of the operations on non-persistent topics (`ops`: those alone)."""
    t = time_teller(ops)
    appends = {op.value: op for op in ops if op.f == "append"}
    boundaries = sorted(e.index for e in nemesis if e.boundary)
    cases: list[Case] = []
    reported: set[tuple[str, str, str | None]] = set()
    seen_in_session: dict[tuple[str, str, str | None, str | None], Op] = {}
    duplicated: set[tuple[str, str, str | None, str | None]] = set()
    last_of_producer: dict[tuple[str, str, str | None, str, int], tuple[Op, Op]] = {}
    for d in deliveries(ops):
        sub = (d.topic, d.subscription or "")
        a = appends.get(d.value)
        if a is None or a.type == "fail" or a.topic != d.log:
            if (*sub, d.value) not in reported:
                reported.add((*sub, d.value))
                cases.append(_unexpected(d, a, t))
            continue
        session = (*sub, d.consumer, d.value)
        first = seen_in_session.get(session)
        if first is not None:
            if session not in duplicated:
                duplicated.add(session)
                if not _fault_between(boundaries, a.inv_index, d.cmp_index or 0):
                    cases.append(
                        Case(
                            "non-persistent-duplicate",
                            d.log,
                            (first.cmp_index, d.cmp_index),
                            f"consumer {d.consumer} of subscription {sub[1]!r} received {d.value!r} at "
                            f"{t(first.cmp_index)} and again at {t(d.cmp_index)}, with no fault since its append was "
                            f"invoked at {t(a.inv_index)}",
                        )
                    )
            continue
        seen_in_session[session] = d
        producer = (*sub, d.consumer, d.log, a.process)
        prev = last_of_producer.get(producer)
        if prev is not None and a.inv_index < prev[1].inv_index:
            p, pa = prev
            cases.append(
                Case(
                    "non-persistent-reorder",
                    d.log,
                    (p.cmp_index, d.cmp_index),
                    f"consumer {d.consumer} of subscription {sub[1]!r} received {p.value!r} (appended by process "
                    f"{a.process} at {t(pa.inv_index)}) at {t(p.cmp_index)}, then {d.value!r}, which the same "
                    f"process appended earlier (at {t(a.inv_index)}), at {t(d.cmp_index)}",
                )
            )
        last_of_producer[producer] = (d, a)
    return cases


def _unexpected(d: Op, a: Op | None, t: Callable[[int | None], str]) -> Case:
    witness: tuple[int | None, ...]
    if a is None or a.topic != d.log:
        why, witness = "which no append to this log carried", (d.cmp_index,)
    else:
        why, witness = f"whose append completed fail at {t(a.cmp_index)}", (a.cmp_index, d.cmp_index)
    return Case(
        "unexpected-delivery",
        d.log,
        witness,
        f"subscription {d.subscription!r} delivered {d.value!r} to consumer {d.consumer} at {t(d.cmp_index)} "
        f"(event {d.cmp_index}), {why}",
    )


def _fault_between(boundaries: list[int], lo: int, hi: int) -> bool:
    i = bisect.bisect_right(boundaries, lo)
    return i < len(boundaries) and boundaries[i] < hi


def figures(ops: Sequence[Op]) -> list[NonPersistentFigures]:
    """Loss and duplicates per subscription of a non-persistent topic (`ops`: those alone)."""
    acked: dict[str, set[str | None]] = defaultdict(set)
    for op in ops:
        if op.f == "append" and op.type == "ok":
            acked[base_topic(op.topic)].add(op.value)
    delivered: dict[tuple[str, str], list[str | None]] = defaultdict(list)
    for d in deliveries(ops):
        delivered[(d.topic, d.subscription or "")].append(d.value)
    out = []
    for (topic, name), kind in sorted(subscription_types(ops).items()):
        got = delivered.get((topic, name), [])
        sent = acked.get(topic, set())
        received = len(sent & set(got))
        out.append(
            NonPersistentFigures(
                topic=topic,
                subscription=name,
                type=kind,
                acknowledged=len(sent),
                delivered=received,
                lost=len(sent) - received,
                deliveries=len(got),
                duplicates=len(got) - len(set(got)),
            )
        )
    return out
