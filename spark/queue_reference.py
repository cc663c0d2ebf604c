"""Plain-Python reference checker of subscriptions (docs/history.md, Consumers): the definitions the Spark job
(spark/queue_audit.py) must agree with, case for case and figure for figure.

Terms. A subscription is (subscribed topic, subscription name); its type is the `subscription_type` of its first
subscribe. A delivery is an `ok` receive; deliveries are taken in the order of their completions (`index`). A
delivery is *first* when its redelivery count is 0 and no earlier delivery of the subscription carried its value.
The *log* of a delivery is its partition, or its topic.

- lost-message: an `ok` append on log L, a subscription of L's topic (L itself, or the partitioned topic L is a
  partition of) with an `ok` drain, and no delivery of the value to it, where the subscription's earliest `ok`
  drain records no message TTL (`message_ttl` absent or 0). One case per (subscription, value); witness: the
  append's ok and the subscription's earliest ok drain.
- expired-early: the same, where that drain records a message TTL of T seconds and the drain completed less
  than T after the append's invoke. The broker expires a message only once it is older than T (its publish
  time, set after the append's invoke); the drain's completion is the latest moment the message can have left
  the subscription (the broker then reported nothing left to deliver). Witness: the append's invoke and ok and
  the drain's ok. When the drain completed T or more after the append's invoke, the message may have expired:
  it is counted (`expired`), not flagged.
- unexpected-delivery: a delivery of a value that no append to its log carried, or whose append completed `fail`.
  One case per (subscription, value), its earliest delivery; witness: that delivery (and the failed append's
  completion).
- subscription-reorder: on an Exclusive or Failover subscription, consecutive first deliveries d1, d2 of one log
  to one consumer session, d2 at a lower position than d1. Witness: both deliveries.
- key-order: on a Key_Shared subscription, consecutive first deliveries d1, d2 of one key of one log (keyed
  messages only), where d2 is at a lower position than d1, or d2 went to another consumer although d1's
  consumer had invoked no ack, nack or close of d1 before d2 completed, no fault began or healed between them,
  and d1's value was not delivered again between them. Witness: both deliveries.

Figures (per subscription and fault kind, the kind of the latest fault injected before the delivery): see
`figures`; the messages expired by TTL per drained subscription: `expired`.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence

from spark.history import DRAIN_CONSUMER_PREFIX, NemesisEvent, Op, format_position, time_teller
from spark.report import Case, ExpiredFigures, SubscriptionFigures

Sub = tuple[str, str]  # (subscribed topic, subscription name)
ORDERED_TYPES = ("Exclusive", "Failover")
NS_PER_S = 1_000_000_000


def base_topic(log: str) -> str:
    """The topic a log belongs to: a partition's partitioned topic, else the log itself."""
    head, sep, tail = log.rpartition("-partition-")
    return head if sep and tail.isdigit() else log


def subscription_types(ops: Sequence[Op]) -> dict[Sub, str]:
    types: dict[Sub, str] = {}
    for op in ops:
        if op.f == "subscribe" and op.sub_type is not None and op.subscription is not None:
            types.setdefault((op.topic, op.subscription), op.sub_type)
    return types


def deliveries(ops: Sequence[Op]) -> list[Op]:
    return sorted((op for op in ops if op.f == "receive" and op.type == "ok"), key=lambda op: op.cmp_index or 0)


def first_deliveries(delivered: Sequence[Op]) -> list[bool]:
    """For each delivery (in completion order), whether it is first (see the module docstring)."""
    seen: set[tuple[Sub, str | None]] = set()
    out = []
    for d in delivered:
        key = ((d.topic, d.subscription or ""), d.value)
        out.append(d.redelivery_count == 0 and key not in seen)
        seen.add(key)
    return out


def check(ops: Sequence[Op], nemesis: Sequence[NemesisEvent] = ()) -> list[Case]:
    cases: list[Case] = []
    add = cases.append
    t = time_teller(ops)

    types = subscription_types(ops)
    appends = {op.value: op for op in ops if op.f == "append"}
    delivered = deliveries(ops)
    first = first_deliveries(delivered)
    values_of: dict[Sub, set[str | None]] = defaultdict(set)
    for d in delivered:
        values_of[(d.topic, d.subscription or "")].add(d.value)

    # unexpected-delivery: one case per (subscription, value), at its earliest delivery.
    reported: set[tuple[Sub, str | None]] = set()
    for d in delivered:
        sub = (d.topic, d.subscription or "")
        if (sub, d.value) in reported:
            continue
        a = appends.get(d.value)
        if a is not None and a.type != "fail" and a.topic == d.log:
            continue
        reported.add((sub, d.value))
        if a is None or a.topic != d.log:
            why = "which no append to this log carried"
            witness: tuple[int | None, ...] = (d.cmp_index,)
        else:
            why = f"whose append completed fail at {t(a.cmp_index)}"
            witness = (a.cmp_index, d.cmp_index)
        add(
            Case(
                "unexpected-delivery",
                d.log,
                witness,
                f"subscription {sub[1]!r} delivered {d.value!r} at {format_position(d.position)} to consumer "
                f"{d.consumer} at {t(d.cmp_index)} (event {d.cmp_index}), {why}",
            )
        )

    # lost-message and expired-early: acknowledged appends x drained subscriptions of their topic.
    for a, sub, drain in undelivered(ops, values_of):
        ttl, drained_at = drain.message_ttl or 0, drain.cmp_index
        never = f"subscription {sub[1]!r} drained at {t(drained_at)} without ever delivering it"
        if not ttl:
            add(
                Case(
                    "lost-message",
                    a.topic,
                    (a.cmp_index, drained_at),
                    f"append {a.value!r} was acknowledged at {format_position(a.position)} at {t(a.cmp_index)}; "
                    + never,
                )
            )
        elif not may_have_expired(a, drain):
            add(
                Case(
                    "expired-early",
                    a.topic,
                    (a.inv_index, a.cmp_index, drained_at),
                    f"append {a.value!r} was invoked at {t(a.inv_index)} and acknowledged at "
                    f"{format_position(a.position)} at {t(a.cmp_index)}; {never}, less than the message TTL of "
                    f"{ttl} s after the append: it cannot have expired",
                )
            )

    # subscription-reorder and key-order: consecutive first deliveries per session / per key.
    holds = _Holds(ops, delivered, nemesis)
    last_in_session: dict[tuple[Sub, str | None, str], Op] = {}
    last_of_key: dict[tuple[Sub, str, str], Op] = {}
    for d, is_first in zip(delivered, first, strict=True):
        if not is_first:
            continue
        sub = (d.topic, d.subscription or "")
        kind = types.get(sub)
        if kind in ORDERED_TYPES:
            session = (sub, d.consumer, d.log)
            prev = last_in_session.get(session)
            if prev is not None and d.position < prev.position:  # type: ignore[operator]
                add(
                    Case(
                        "subscription-reorder",
                        d.log,
                        (prev.cmp_index, d.cmp_index),
                        f"{kind} subscription {sub[1]!r} delivered {prev.value!r} at {format_position(prev.position)} "
                        f"to consumer {d.consumer} at {t(prev.cmp_index)}, then {d.value!r} at the lower position "
                        f"{format_position(d.position)} at {t(d.cmp_index)}",
                    )
                )
            last_in_session[session] = d
        elif kind == "Key_Shared" and d.key is not None:
            k = (sub, d.log, d.key)
            prev = last_of_key.get(k)
            if prev is not None:
                why = _key_order(prev, d, holds)
                if why:
                    add(
                        Case(
                            "key-order",
                            d.log,
                            (prev.cmp_index, d.cmp_index),
                            f"Key_Shared subscription {sub[1]!r}, key {d.key!r}: {prev.value!r} at "
                            f"{format_position(prev.position)} went to consumer {prev.consumer} at "
                            f"{t(prev.cmp_index)}, then {d.value!r} at {format_position(d.position)} to consumer "
                            f"{d.consumer} at {t(d.cmp_index)}: {why}",
                        )
                    )
            last_of_key[k] = d
    return cases


def undelivered(ops: Sequence[Op], values_of: dict[Sub, set[str | None]]) -> list[tuple[Op, Sub, Op]]:
    """(append, subscription, drain): each `ok` append and drained subscription of its topic that never delivered
    it, with the subscription's earliest `ok` drain, in the order of the appends' completions."""
    drained: dict[Sub, Op] = {}
    for op in sorted((o for o in ops if o.f == "drain" and o.type == "ok"), key=lambda o: o.cmp_index or 0):
        drained.setdefault((op.topic, op.subscription or ""), op)
    subs_of: dict[str, list[Sub]] = defaultdict(list)
    for sub in sorted(drained):
        subs_of[sub[0]].append(sub)
    return [
        (a, sub, drained[sub])
        for a in sorted((o for o in ops if o.f == "append" and o.type == "ok"), key=lambda o: o.cmp_index or 0)
        for sub in subs_of.get(base_topic(a.topic), [])
        if a.value not in values_of[sub]
    ]


def may_have_expired(append: Op, drain: Op) -> bool:
    """Whether the drain's message TTL may have expired the append's message before the drain completed: T
    seconds or more passed from the append's invoke (before its publish time) to the drain's completion."""
    ttl = drain.message_ttl or 0
    return ttl > 0 and drain.cmp_time is not None and append.inv_time + ttl * NS_PER_S <= drain.cmp_time


def expired(ops: Sequence[Op]) -> list[ExpiredFigures]:
    """Per drained subscription whose earliest `ok` drain records a message TTL: how many acknowledged appends to
    its topic it never delivered although the TTL may have expired them (excused from lost-message)."""
    values_of: dict[Sub, set[str | None]] = defaultdict(set)
    for d in deliveries(ops):
        values_of[(d.topic, d.subscription or "")].add(d.value)
    counts: dict[Sub, int] = {}
    ttl_of: dict[Sub, int] = {}
    for op in sorted((o for o in ops if o.f == "drain" and o.type == "ok"), key=lambda o: o.cmp_index or 0):
        sub = (op.topic, op.subscription or "")
        if sub not in ttl_of:
            ttl_of[sub] = op.message_ttl or 0
            if op.message_ttl:
                counts[sub] = 0
    for a, sub, drain in undelivered(ops, values_of):
        if may_have_expired(a, drain):
            counts[sub] += 1
    return sorted((ExpiredFigures(sub[0], sub[1], ttl_of[sub], n) for sub, n in counts.items()), key=lambda f: f.key)


class _Holds:
    """What ends a consumer's hold on a delivery (its acks, nacks and close), fault boundaries, and the deliveries
    of each value."""

    def __init__(self, ops: Sequence[Op], delivered: Sequence[Op], nemesis: Sequence[NemesisEvent]) -> None:
        self.released: dict[tuple[str | None, str | None], int] = {}  # (consumer, value) -> earliest ack/nack invoke
        self.closed: dict[str | None, int] = {}  # consumer -> its earliest close invoke
        for op in ops:
            if op.f in ("ack", "nack"):
                key = (op.consumer, op.value)
                self.released[key] = min(self.released.get(key, op.inv_index), op.inv_index)
            elif op.f == "close":
                self.closed[op.consumer] = min(self.closed.get(op.consumer, op.inv_index), op.inv_index)
        self.boundaries = sorted(e.index for e in nemesis if e.boundary)
        self.delivered_at: dict[tuple[Sub, str | None], list[int]] = defaultdict(list)
        for d in delivered:
            self.delivered_at[((d.topic, d.subscription or ""), d.value)].append(d.cmp_index or 0)


def _between(sorted_indices: list[int], lo: int, hi: int) -> bool:
    i = bisect.bisect_right(sorted_indices, lo)
    return i < len(sorted_indices) and sorted_indices[i] < hi


def _key_order(d1: Op, d2: Op, holds: _Holds) -> str:
    """Why consecutive first deliveries d1, d2 of one key break Key_Shared's promise ('' if they do not)."""
    if d2.position < d1.position:  # type: ignore[operator]
        return "the later delivery is at a lower position"
    if d2.consumer == d1.consumer:
        return ""
    c1, c2 = d1.cmp_index or 0, d2.cmp_index or 0
    released = holds.released.get((d1.consumer, d1.value))
    closed = holds.closed.get(d1.consumer)
    if (released is not None and released < c2) or (closed is not None and closed < c2):
        return ""
    if _between(holds.boundaries, c1, c2):
        return ""
    if _between(holds.delivered_at[((d1.topic, d1.subscription or ""), d1.value)], c1, c2):
        return ""
    return f"consumer {d1.consumer} still held {d1.value!r} unacknowledged, and no fault came between"


def fault_kind_at(injections: list[tuple[int, str]], index: int) -> str:
    """The kind of the latest fault injected before event `index` ('none' before the first)."""
    i = bisect.bisect_left(injections, (index, "")) - 1
    return injections[i][1] if i >= 0 else "none"


def quantile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (Spark's `percentile`)."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def figures(ops: Sequence[Op], nemesis: Sequence[NemesisEvent] = ()) -> list[SubscriptionFigures]:
    """Per subscription and fault kind: deliveries, first deliveries, redeliveries (the others), duplicates
    (deliveries of a value delivered to the subscription before), deliveries after an ack covering the value was
    confirmed (an `ok` ack of the value, or an `ok` cumulative ack of the same log at or beyond its position,
    completed before the delivery), the highest redelivery count, and the lag from an append's `ok` to the first
    delivery of its value (milliseconds, at least 0; median and 99th percentile)."""
    types = subscription_types(ops)
    delivered = deliveries(ops)
    first = first_deliveries(delivered)
    injections = sorted((e.index, e.f) for e in nemesis if e.injection)
    acked = {op.value: op.cmp_time for op in ops if op.f == "append" and op.type == "ok"}
    confirmed: dict[tuple[Sub, str | None], int] = {}
    cumulative: dict[tuple[Sub, str], list[tuple[int, tuple[int, int, int]]]] = defaultdict(list)
    for op in ops:
        if op.f == "ack" and op.type == "ok" and op.cmp_index is not None:
            sub = (op.topic, op.subscription or "")
            key = (sub, op.value)
            confirmed[key] = min(confirmed.get(key, op.cmp_index), op.cmp_index)
            if op.cumulative and op.position is not None:
                cumulative[(sub, op.log)].append((op.cmp_index, op.position))
    # Per (subscription, log): the completions of cumulative acks in order, with the highest position so far.
    reach: dict[tuple[Sub, str], tuple[list[int], list[tuple[int, int, int]]]] = {}
    for key, acks in cumulative.items():
        acks.sort()
        highest: list[tuple[int, int, int]] = []
        for _, p in acks:
            highest.append(max(p, highest[-1]) if highest else p)
        reach[key] = ([at for at, _ in acks], highest)
    rows: dict[tuple[Sub, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    lags: dict[tuple[Sub, str], list[float]] = defaultdict(list)
    seen: set[tuple[Sub, str | None]] = set()
    for d, is_first in zip(delivered, first, strict=True):
        sub = (d.topic, d.subscription or "")
        idx = d.cmp_index or 0
        in_drain = (d.consumer or "").startswith(DRAIN_CONSUMER_PREFIX)
        group = (sub, "drain" if in_drain else fault_kind_at(injections, idx))
        row = rows[group]
        row["deliveries"] += 1
        row["first"] += is_first
        row["duplicates"] += (sub, d.value) in seen
        row["max_redelivery"] = max(row["max_redelivery"], d.redelivery_count)
        ack_at = confirmed.get((sub, d.value))
        covered = ack_at is not None and ack_at < idx
        if not covered and (sub, d.log) in reach:
            times, highest = reach[(sub, d.log)]
            i = bisect.bisect_left(times, idx) - 1
            covered = i >= 0 and highest[i] >= d.position  # type: ignore[operator]
        row["after_ack"] += covered
        if (sub, d.value) not in seen and acked.get(d.value) is not None and d.cmp_time is not None:
            lags[group].append(max(d.cmp_time - acked[d.value], 0) / 1e6)  # type: ignore[operator]
        seen.add((sub, d.value))
    out = []
    for (sub, fault), row in rows.items():
        lag = sorted(lags[(sub, fault)])
        subscription = (sub[0], sub[1], types.get(sub, "?"), fault)
        out.append(SubscriptionFigures.of(subscription, row, (quantile(lag, 0.5), quantile(lag, 0.99))))
    return sorted(out, key=lambda f: f.key)
