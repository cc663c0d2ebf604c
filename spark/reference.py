"""Plain-Python reference checker (no Spark): the same verdicts as the Spark job, for small histories.

Definitions (per topic; "before" means an earlier `index` in the history, which is the real-time order of
events on the run's single monotonic clock). An *observation* of value v at position p is an `ok` append of v
with position p (event: the `ok`), or an `ok` read listing the pair [p, v] (event: the read's `ok`).

- duplicate-position: two different values observed at one position. One case per position; witness: the
  earliest observation there, and the earliest observation of a different value there.
- duplicate-value: one value observed at two positions. One case per value; witness: its earliest observation
  and the earliest one at a different position.
- divergent-read: (a) a read shows an acknowledged value at a position other than its acknowledged one (one case
  per value: the ack and the earliest such read), or (b) two reads show different values at one position (one
  case per position: the earliest read there and the earliest read of a different value there).
- phantom-read: a read shows a value no append carried (one case per value, the earliest read).
- failed-write-visible: a read shows a value whose append completed `fail` (the fail and the earliest read).
- gap: a read lists consecutive entries a then b, and some position k with a < k < b was observed (acknowledged
  or read) in the topic. Known positions are sorted, so k is the successor of a: no search. One case per read
  (its first skip); witness: the read and the earliest observation at k.
- lost-write: an acknowledged value is missing from an `ok` final read of its topic that was not cut by its
  limit (one case per value: the ack and the earliest such final read).
- nonmonotonic-append: consecutive acknowledged appends of one process to a topic whose positions do not increase
  (witness: both acks).
- realtime-reorder: for append B acknowledged at position q, let A be the acknowledged append with the highest
  position among those acknowledged before B was invoked (one prefix-maximum scan; ties: earliest ack). If A's
  position is greater than q: witness A's ack, B's invoke and B's ack.
- stale-read: for an `ok` read R not cut by its limit (limit absent, or fewer entries than the limit), A as above
  for R's invoke. If A's position is at or after R's `from` and R shows nothing at or beyond it (R's highest
  position is lower): witness A's ack, R's invoke, R's ok. A read that reaches past A but skips it is a `gap`.
- nonmonotonic-read: the same with R1 = the completed read whose highest shown position is the highest among
  reads completed before R2 was invoked (a second prefix maximum in the same scan); witness R1's ok, R2's invoke
  and R2's ok.

`info` appends may appear at most once (duplicate-value catches a second appearance) and are never required to
appear; `fail` appends must never appear.

The anomalies of subscriptions and their figures are defined in spark/queue_reference.py; those of non-persistent
topics, which none of the above apply to, in spark/non_persistent.py.
The anomaly of a typed run's schema versions is defined in spark/schema_reference.py; those of compacted reads in
spark/compacted_reference.py.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from spark import compacted_reference, geo, non_persistent, queue_reference, schema_reference
from spark.history import LOG_OPS, NemesisEvent, Op, Position, format_position, time_teller
from spark.report import Case, Report, TopicSummary

Obs = tuple[Any, ...]  # (event index, position, value, topic)


def _summaries(ops: list[Op]) -> dict[str, TopicSummary]:
    topics: dict[str, TopicSummary] = defaultdict(TopicSummary)
    for op in ops:
        s = topics[op.topic]
        s.ops += 1
        if op.f == "append":
            if op.type == "ok":
                s.appends_ok += 1
            elif op.type == "fail":
                s.appends_fail += 1
            else:
                s.appends_info += 1
        else:
            s.reads += 1
    return dict(topics)


@dataclass(frozen=True)
class Observed:
    """What every check of the log reads: the log operations, and every observation of a value at a
    position, sorted by event index. `t` tells an event's time for the messages."""

    ops: list[Op]
    appends: dict[str | None, Op]  # value -> its append
    acks: list[Op]
    reads: list[Op]
    ack_obs: list[Obs]
    read_obs: list[Obs]
    all_obs: list[Obs]
    t: Callable[[int | None], str]

    @classmethod
    def of(cls, all_ops: list[Op]) -> Observed:
        ops = [op for op in all_ops if op.f in LOG_OPS]
        acks = [op for op in ops if op.f == "append" and op.type == "ok"]
        reads = [op for op in ops if op.f == "read" and op.type == "ok"]
        ack_obs: list[Obs] = [(a.cmp_index, a.position, a.value, a.topic) for a in acks]
        read_obs: list[Obs] = sorted((r.cmp_index, p, v, r.topic) for r in reads for p, v in r.entries)
        appends = {op.value: op for op in ops if op.f == "append"}
        return cls(ops, appends, acks, reads, ack_obs, read_obs, sorted(ack_obs + read_obs), time_teller(ops))


def check(all_ops: list[Op], nemesis: Sequence[NemesisEvent] = (), replication_dedup: bool = True) -> Report:
    """Every anomaly of the history. A history of several clusters is checked per cluster, on each one's
    local view, and across them for replication (spark/geo.py). Non-persistent topics are judged apart."""
    durable, live = non_persistent.split(all_ops)
    observed = Observed.of(geo.local_view(durable))
    cases: list[Case] = queue_reference.check(durable, nemesis) + schema_reference.check(all_ops)
    cases += non_persistent.check(live, nemesis) + compacted_reference.check(durable)
    for family in LOG_CHECKS:
        cases += family(observed)
    cases += geo.replication_cases(durable, replication_dedup)
    summaries = _summaries(observed.ops + [op for op in live if op.f == "append"])
    for c in cases:
        summaries.setdefault(c.topic, TopicSummary()).anomalies += 1
    return Report(
        ops=len(all_ops),
        cases=cases,
        topics=summaries,
        subscriptions=queue_reference.figures(durable, nemesis),
        non_persistent=non_persistent.figures(live),
        expired=queue_reference.expired(durable),
    )


def _by_position(observations: list[Obs], name: str, what: str, t: Callable[[int | None], str]) -> list[Case]:
    """Two different values observed at one (topic, position): the earliest, and the earliest other."""
    first: dict[tuple[str, Position], Obs] = {}
    second: dict[tuple[str, Position], Obs] = {}
    for o in observations:
        key = (o[3], o[1])
        if key not in first:
            first[key] = o
        elif key not in second and o[2] != first[key][2]:
            second[key] = o
    return [
        Case(
            name,
            key[0],
            (first[key][0], o2[0]),
            f"{what} {first[key][2]!r} at {format_position(key[1])} (event {first[key][0]}, {t(first[key][0])}) and "
            f"{o2[2]!r} at the same position (event {o2[0]}, {t(o2[0])})",
        )
        for key, o2 in second.items()
    ]


def duplicate_position(o: Observed) -> list[Case]:
    return _by_position(o.all_obs, "duplicate-position", "observed", o.t)


def divergent_positions(o: Observed) -> list[Case]:
    """divergent-read (b): two reads show different values at one position."""
    return _by_position(o.read_obs, "divergent-read", "a read showed", o.t)


def duplicate_value(o: Observed) -> list[Case]:
    t = o.t
    firstv: dict[str, Obs] = {}
    secondv: dict[str, Obs] = {}
    for ob in o.all_obs:
        if ob[2] not in firstv:
            firstv[ob[2]] = ob
        elif ob[2] not in secondv and ob[1] != firstv[ob[2]][1]:
            secondv[ob[2]] = ob
    cases = []
    for v, o2 in secondv.items():
        o1 = firstv[v]
        cases.append(
            Case(
                "duplicate-value",
                o1[3],
                (o1[0], o2[0]),
                f"value {v!r} was observed at {format_position(o1[1])} (event {o1[0]}, {t(o1[0])}) and at "
                f"{format_position(o2[1])} (event {o2[0]}, {t(o2[0])})",
            )
        )
    return cases


def reads_against_appends(o: Observed) -> list[Case]:
    """divergent-read (a), phantom-read and failed-write-visible: each read value joined with its append."""
    t = o.t
    cases: list[Case] = []
    seen_div: set[str] = set()
    seen_phantom: set[str] = set()
    seen_failed: set[str] = set()
    for idx, p, v, topic in o.read_obs:
        a = o.appends.get(v)
        if a is None:
            if v not in seen_phantom:
                seen_phantom.add(v)
                cases.append(
                    Case(
                        "phantom-read",
                        topic,
                        (idx,),
                        f"the read completing at {t(idx)} (event {idx}) shows value {v!r} at {format_position(p)}, "
                        "which no append carried",
                    )
                )
        elif a.type == "fail":
            if v not in seen_failed:
                seen_failed.add(v)
                cases.append(
                    Case(
                        "failed-write-visible",
                        topic,
                        (a.cmp_index, idx),
                        f"append {v!r} completed fail at {t(a.cmp_index)}; the read completing at {t(idx)} "
                        f"shows it at {format_position(p)}",
                    )
                )
        elif a.type == "ok" and a.position != p and v not in seen_div:
            seen_div.add(v)
            cases.append(
                Case(
                    "divergent-read",
                    topic,
                    (a.cmp_index, idx),
                    f"append {v!r} was acknowledged at {format_position(a.position)} at {t(a.cmp_index)}; "
                    f"the read completing at {t(idx)} shows it at {format_position(p)}",
                )
            )
    return cases


def gap(o: Observed) -> list[Case]:
    """The successor of a read's entry among the topic's sorted known positions lies before its next entry."""
    t = o.t
    known: dict[str, list[Position]] = defaultdict(list)
    first_at: dict[tuple[str, Position], int] = {}
    for idx, p, _v, topic in o.all_obs:
        if (topic, p) not in first_at:
            first_at[(topic, p)] = idx
            known[topic].append(p)
    for positions in known.values():
        positions.sort()
    cases = []
    for r in o.reads:
        ks = known[r.topic]
        for (lo, _), (hi, _) in zip(r.entries, r.entries[1:], strict=False):
            i = bisect.bisect_right(ks, lo)
            if i < len(ks) and ks[i] < hi:
                k = ks[i]
                w = first_at[(r.topic, k)]
                cases.append(
                    Case(
                        "gap",
                        r.topic,
                        tuple(sorted((w, r.cmp_index))),
                        f"the read completing at {t(r.cmp_index)} (event {r.cmp_index}) goes from "
                        f"{format_position(lo)} to {format_position(hi)}, skipping {format_position(k)} "
                        f"observed at {t(w)} (event {w})",
                    )
                )
                break
    return cases


def lost_write(o: Observed) -> list[Case]:
    """Acknowledged appends against the final reads of their topic."""
    t = o.t
    finals: dict[str, list[Op]] = defaultdict(list)
    for r in o.reads:
        if r.final and not r.cut_by_limit:
            finals[r.topic].append(r)
    final_values = {r.cmp_index: {v for _, v in r.entries} for rs in finals.values() for r in rs}
    cases = []
    for a in o.acks:
        for r in sorted(finals[a.topic], key=lambda r: r.cmp_index or 0):
            if a.value not in final_values[r.cmp_index]:
                cases.append(
                    Case(
                        "lost-write",
                        a.topic,
                        (a.cmp_index, r.cmp_index),
                        f"append {a.value!r} was acknowledged at {format_position(a.position)} at "
                        f"{t(a.cmp_index)}; the final read at {t(r.cmp_index)} does not contain it",
                    )
                )
                break
    return cases


def nonmonotonic_append(o: Observed) -> list[Case]:
    """Consecutive acknowledged appends of one process to one topic."""
    t = o.t
    last: dict[tuple[int, str], Op] = {}
    cases = []
    for a in sorted(o.acks, key=lambda a: a.cmp_index or 0):
        prev = last.get((a.process, a.topic))
        if prev is not None and a.position <= prev.position:  # type: ignore[operator]
            cases.append(
                Case(
                    "nonmonotonic-append",
                    a.topic,
                    (prev.cmp_index, a.cmp_index),
                    f"process {a.process} appended {prev.value!r} acknowledged at {format_position(prev.position)} "
                    f"({t(prev.cmp_index)}), then {a.value!r} acknowledged at the lower or equal position "
                    f"{format_position(a.position)} ({t(a.cmp_index)})",
                )
            )
        last[(a.process, a.topic)] = a
    return cases


def realtime_order(o: Observed) -> list[Case]:
    """realtime-reorder, stale-read and nonmonotonic-read: one prefix-maximum scan per topic over events in
    index order, contributions at completions, queries at invokes. Ties on position keep the earliest event
    (the max is over (position, -index))."""
    t = o.t
    cases: list[Case] = []
    by_topic: dict[str, list[tuple[Any, int, Op]]] = defaultdict(list)  # (index, kind 0=contrib 1=query, op)
    for op in o.ops:
        if op.type != "ok":
            continue
        by_topic[op.topic].append((op.inv_index, 1, op))
        if op.f == "append" or op.entries:
            by_topic[op.topic].append((op.cmp_index, 0, op))
    for topic, events in by_topic.items():
        events.sort(key=lambda e: e[0])
        max_ack: tuple[Any, int, Op] | None = None
        max_read: tuple[Any, int, Op] | None = None
        for idx, kind, op in events:
            if kind == 0:
                if op.f == "append":
                    cand = (op.position, -idx, op)
                    if max_ack is None or cand[:2] > max_ack[:2]:
                        max_ack = cand
                else:
                    cand = (max(p for p, _ in op.entries), -idx, op)
                    if max_read is None or cand[:2] > max_read[:2]:
                        max_read = cand
                continue
            if op.f == "append":
                if max_ack is not None and max_ack[0] > op.position:
                    a = max_ack[2]
                    cases.append(
                        Case(
                            "realtime-reorder",
                            topic,
                            (a.cmp_index, op.inv_index, op.cmp_index),
                            f"append {a.value!r} was acknowledged at {format_position(a.position)} at "
                            f"{t(a.cmp_index)}, before append {op.value!r} was invoked at {t(op.inv_index)}, "
                            f"yet the latter got the lower position {format_position(op.position)}",
                        )
                    )
                continue
            if op.cut_by_limit:
                continue
            reach = max((p for p, _ in op.entries), default=None)
            start = op.start or (0, 0, 0)
            if max_ack is not None and max_ack[0] >= start and (reach is None or reach < max_ack[0]):
                a = max_ack[2]
                cases.append(
                    Case(
                        "stale-read",
                        topic,
                        (a.cmp_index, op.inv_index, op.cmp_index),
                        f"append {a.value!r} was acknowledged at {format_position(a.position)} at {t(a.cmp_index)}; "
                        f"the read from {format_position(op.start)} invoked at {t(op.inv_index)} ends at "
                        f"{format_position(reach) if reach else 'nothing'} and misses it",
                    )
                )
            if max_read is not None and max_read[0] >= start and (reach is None or reach < max_read[0]):
                r1 = max_read[2]
                cases.append(
                    Case(
                        "nonmonotonic-read",
                        topic,
                        (r1.cmp_index, op.inv_index, op.cmp_index),
                        f"a read completed at {t(r1.cmp_index)} showed {format_position(max_read[0])}; the read "
                        f"from {format_position(op.start)} invoked later at {t(op.inv_index)} ends at "
                        f"{format_position(reach) if reach else 'nothing'} and misses it",
                    )
                )
    return cases


LOG_CHECKS: tuple[Callable[[Observed], list[Case]], ...] = (
    duplicate_position,
    divergent_positions,
    duplicate_value,
    reads_against_appends,
    gap,
    lost_write,
    nonmonotonic_append,
    realtime_order,
)
