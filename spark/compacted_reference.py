"""Plain-Python reference checker of compacted reads (docs/history.md, Compacted reads): the definition
spark/compacted_audit.py must agree with, case for case.

A `read-compacted` reads a topic from the earliest with `read_compacted`; its `ok` carries the entries and the
compaction horizon H, [ledger, entry] (null: no compaction yet, everything is after it), that of the compaction in
place throughout the read (the workload reads it before the invoke and again after the read, and records a read
during which it moved as `fail`). An entry is *at or before H* when its ledger and entry are. Appends may race
the read: one acknowledged at or before H, however late, was in the topic when that compaction read it; one after
H is in the read's tail if acknowledged before the read began, or if the read shows a later entry. A value's
*key* is its append's. Where a value is in its topic's log (its *known position*): its acknowledged position, else
its lowest position in the earliest `ok` read or read-compacted that showed it (its event: that ack or that read's
completion). A value never acknowledged nor shown is not in the log
as far as anyone knows: a write of unknown outcome counts only where a read saw it.

Per `ok` read-compacted R of topic T with horizon H, and per key k of the values R shows at or before H:

- compacted-stale: (a) R shows k twice at or before H (witness: R's invoke and ok; the first two in R's order), or
  else (b) a value of k is known at a position later than the shown value's known position and at or before H
  (the latest such one; witness: R's ok and that value's event): R shows a value compaction replaced.
- compacted-missing: (a) k's last known value at or before H (highest known position) was acknowledged and is not
  a tombstone, yet R shows no value of k at or before H, and no tombstone of k of unknown outcome and unknown
  position could have deleted it (witness: the ack and R's ok); or (b) a value acknowledged at a position after H,
  a tombstone included, before R's invoke or below the highest position R shows after H (R read past it), that R
  does not show after H (witness: the ack and R's ok).
- compacted-reorder: R shows, after H, an entry at a lower position than the entry it shows just before it (the
  first such pair in R's order; witness: R's invoke and ok).

After H, Pulsar's compacted reader reads the topic itself: CompactedTopicImpl.asyncReadEntriesOrWait (apache/pulsar,
pulsar-broker/.../compaction/CompactedTopicImpl.java) hands a read position past the horizon to the cursor's
asyncReadEntriesOrWait, the raw managed ledger in order, unfiltered, so empty-payload messages (tombstones) are
delivered there as any other.

Values no append carried and values without a key are not judged here (phantoms are the log checks' business;
compaction leaves keyless messages out).
"""

from __future__ import annotations

from collections.abc import Sequence

from spark.history import COMPACTED_OPS, Op, Position, format_position
from spark.report import Case

STALE = "compacted-stale"
MISSING = "compacted-missing"
REORDER = "compacted-reorder"
ANOMALIES = (STALE, MISSING, REORDER)


def format_horizon(horizon: Sequence[int] | None) -> str:
    return "none (no compaction yet)" if horizon is None else f"[{horizon[0]},{horizon[1]}]"


def explain_twice(key: str, first: tuple[str, Position], second: tuple[str, Position], horizon: Sequence[int]) -> str:
    return (
        f"the compacted read shows key {key!r} twice at or before the horizon {format_horizon(horizon)}: "
        f"{first[0]!r} at {format_position(first[1])} and {second[0]!r} at {format_position(second[1])}"
    )


def explain_replaced(key: str, shown: tuple[str, Position], later: tuple[str, Position], horizon: Sequence[int]) -> str:
    return (
        f"the compacted read shows {shown[0]!r} (at {format_position(shown[1])}) for key {key!r}, but {later[0]!r} "
        f"of that key is at {format_position(later[1])}, later and at or before the horizon {format_horizon(horizon)}"
    )


def explain_key_missing(key: str, last: tuple[str, Position], horizon: Sequence[int] | None) -> str:
    return (
        f"key {key!r} is absent from the compacted read, yet its last value at or before the horizon "
        f"{format_horizon(horizon)}, {last[0]!r} at {format_position(last[1])}, was acknowledged"
    )


def explain_after_missing(value: str, position: Position, horizon: Sequence[int] | None) -> str:
    return (
        f"{value!r}, acknowledged at {format_position(position)} after the horizon {format_horizon(horizon)}, "
        "is absent from the compacted read after it"
    )


def explain_reordered(first: tuple[str, Position], then: tuple[str, Position], horizon: Sequence[int] | None) -> str:
    return (
        f"after the horizon {format_horizon(horizon)} the compacted read shows {then[0]!r} at "
        f"{format_position(then[1])} next after {first[0]!r} at {format_position(first[1])}, out of the topic's order"
    )


def at_or_before(position: Position, horizon: Sequence[int] | None) -> bool:
    return horizon is not None and (position[0], position[1]) <= (horizon[0], horizon[1])


def known_positions(ops: Sequence[Op]) -> dict[tuple[str, str], tuple[Position, int]]:
    """(topic, value) -> its known position and the event that tells it (see the module docstring)."""
    known: dict[tuple[str, str], tuple[Position, int]] = {}
    shown: dict[tuple[str, str], tuple[int, Position]] = {}  # the earliest read's (completion, lowest position)
    for op in ops:
        if op.type != "ok" or op.cmp_index is None:
            continue
        if op.f == "append" and op.value is not None and op.position is not None:
            known[(op.topic, op.value)] = (op.position, op.cmp_index)
        elif op.f == "read" or op.f in COMPACTED_OPS:
            for p, v in op.entries:
                k = (op.topic, v)
                shown[k] = min(shown.get(k, (op.cmp_index, p)), (op.cmp_index, p))
    for k, (index, p) in shown.items():
        known.setdefault(k, (p, index))
    return known


def check(ops: Sequence[Op]) -> list[Case]:
    reads = [op for op in ops if op.f in COMPACTED_OPS and op.type == "ok" and op.cmp_index is not None]
    if not reads:
        return []
    appends = {op.value: op for op in ops if op.f == "append" and op.value is not None}
    known = known_positions(ops)
    # (topic, key) -> its values' known positions and events, and whether a tombstone of unknown outcome and
    # unknown position may lie anywhere
    by_key: dict[tuple[str, str], list[tuple[Position, str, int]]] = {}
    hidden_tombstone: set[tuple[str, str]] = set()
    for value, a in appends.items():
        if a.key is None:
            continue
        where = known.get((a.topic, value))
        if where is not None:
            by_key.setdefault((a.topic, a.key), []).append((where[0], value, where[1]))
        elif a.tombstone and a.type == "info":
            hidden_tombstone.add((a.topic, a.key))
    cases: list[Case] = []
    for r in reads:
        assert r.cmp_index is not None
        h = r.horizon
        shown_keys: dict[str, tuple[str, Position]] = {}
        twice: set[str] = set()
        for p, v in r.entries:
            shown = appends.get(v)
            if not at_or_before(p, h) or shown is None or shown.key is None or shown.topic != r.topic:
                continue
            assert h is not None
            k = shown.key
            if k in shown_keys:
                if k not in twice:
                    twice.add(k)
                    cases.append(
                        Case(STALE, r.topic, (r.inv_index, r.cmp_index), explain_twice(k, shown_keys[k], (v, p), h))
                    )
                continue
            shown_keys[k] = (v, p)
        for k, (v, _) in shown_keys.items():
            if k in twice:
                continue
            own = known[(r.topic, v)][0]
            later = [x for x in by_key.get((r.topic, k), []) if x[0] > own and at_or_before(x[0], h)]
            if later:
                q, w, event = max(later)
                assert h is not None
                cases.append(Case(STALE, r.topic, (r.cmp_index, event), explain_replaced(k, (v, own), (w, q), h)))
        for (topic, k), values in by_key.items():
            if topic != r.topic or k in shown_keys or (topic, k) in hidden_tombstone:
                continue
            before = [x for x in values if at_or_before(x[0], h)]
            if not before:
                continue
            q, w, event = max(before)
            last = appends[w]
            if last.type == "ok" and not last.tombstone:
                cases.append(Case(MISSING, topic, (event, r.cmp_index), explain_key_missing(k, (w, q), h)))
        tail = [(p, v) for p, v in r.entries if not at_or_before(p, h)]
        read = {v for _, v in tail}
        reach = max((p for p, _ in tail), default=None)
        for v, a in appends.items():
            # Tombstones included: after H the reader gets the raw topic (see the module docstring).
            if a.topic != r.topic or a.type != "ok" or a.position is None or a.cmp_index is None:
                continue
            passed = a.cmp_index < r.inv_index or (reach is not None and a.position < reach)
            if passed and not at_or_before(a.position, h) and v not in read:
                cases.append(
                    Case(MISSING, r.topic, (a.cmp_index, r.cmp_index), explain_after_missing(v, a.position, h))
                )
        for (p, v), (q, w) in zip(tail, tail[1:], strict=False):
            if q < p:
                cases.append(Case(REORDER, r.topic, (r.inv_index, r.cmp_index), explain_reordered((v, p), (w, q), h)))
                break
    return cases
