"""History generator: simulates a correct log (so its histories are valid), plus one injector per anomaly.

`generate(...)` runs P concurrent processes against T topics. Each operation has an invoke time, an effect
instant strictly inside its invoke-to-completion interval, and a completion; effects are applied in time order
to a true log (ledger rollovers, batch indices), reads snapshot the log at their effect instant (from a start
position, optionally limited). Appends end ok, fail (no effect) or info (effect or not; the process is then
replaced by a fresh id; some info invokes are left without completion). Final reads close the run.

`inject(events, anomaly, rng)` adds exactly one defect of the named type and returns the new events and the
indices of the events it touched, or None if this history offers no place for that defect.

`generate(..., compacted=True)` gives every append a key, makes some of them tombstones (an empty payload, named by
its value as the workload names it), and after the final reads adds one `read-compacted` per topic
(docs/history.md, Compacted reads): per key its last value at or before a horizon inside the log, unless that is a
tombstone, then every message after it, tombstones included. `compacted-stale`, `compacted-missing` and
`compacted-reorder` are injected into those reads.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
from typing import Any

from spark import generate_queues as queues
from spark.report import COMPACTED_ANOMALIES, QUEUE_ANOMALIES

Event = dict[str, Any]
Pos = list[int]
TOMBSTONE_RATIO = 0.15  # of a `compacted` history's appends


def generate(
    seed: int = 0,
    ops: int = 200,
    processes: int = 5,
    topics: int = 2,
    read_ratio: float = 0.3,
    fail_ratio: float = 0.05,
    info_ratio: float = 0.03,
    rollover: float = 0.05,
    limit_ratio: float = 0.3,
    nemesis: bool = True,
    final: bool = True,
    consumers: int = 0,
    compacted: bool = False,
) -> list[Event]:
    """`consumers` > 0 adds that many consumer processes and a subscription of every type per topic
    (spark/generate_queues.py); appends then carry keys. `compacted` adds tombstones and compacted reads (above)."""
    rng = random.Random(seed)
    names = [f"persistent://public/default/t{i}" for i in range(topics)]
    # Per-process timelines: (invoke, effect, completion) triples; nanosecond times made unique by a sequence.
    planned: list[tuple[int, int, int, int, dict[str, Any]]] = []
    clock = [rng.randrange(0, 1000) * 1000 for _ in range(processes)]
    pids = list(range(processes))
    next_pid = processes
    for n in range(ops):
        seq = n + 1
        slot = n % processes
        topic = rng.choice(names)
        inv = clock[slot] + rng.randrange(1, 500) * 1000
        eff = inv + rng.randrange(1, 2000) * 1000
        cmp = eff + rng.randrange(1, 2000) * 1000
        clock[slot] = cmp
        r = rng.random()
        outcome = "fail" if r < fail_ratio else "info" if r < fail_ratio + info_ratio else "ok"
        f = "read" if rng.random() < read_ratio else "append"
        spec: dict[str, Any] = {"process": pids[slot], "f": f, "topic": topic, "outcome": outcome, "seq": seq}
        if f == "append":
            spec["value"] = f"{pids[slot]}-{n}"
            if consumers or compacted:
                spec["key"] = rng.choice(queues.KEYS)
            if compacted and rng.random() < TOMBSTONE_RATIO:
                spec["tombstone"] = True
            spec["effective"] = outcome == "ok" or (outcome == "info" and rng.random() < 0.5)
        else:
            spec["limit"] = rng.randrange(1, 8) if rng.random() < limit_ratio else None
            spec["from_choice"] = rng.random()
        planned.append((inv * 1000 + seq % 1000, eff * 1000 + seq % 1000, cmp * 1000 + seq % 1000, seq, spec))
        if outcome == "info":
            pids[slot] = next_pid
            next_pid += 1
    # Apply effects in time order to the true log.
    log: dict[str, list[tuple[Pos, str]]] = {t: [] for t in names}
    effects: list[tuple[int, str, Pos, str, str]] = []  # appends that took effect, for the consumers
    cursor = {t: [rng.randrange(1, 50), -1, 0] for t in names}
    keys: dict[str, tuple[str, bool]] = {}  # value -> its key and whether it is a tombstone
    for _, eff, _, _, spec in sorted(planned, key=lambda p: p[1]):
        entries = log[spec["topic"]]
        if spec["f"] == "append":
            if not spec["effective"]:
                continue
            c = cursor[spec["topic"]]
            if c[1] >= 0 and rng.random() < rollover:
                c[0], c[1], c[2] = c[0] + rng.randrange(1, 5), 0, 0
            elif c[1] >= 0 and rng.random() < 0.2:
                c[2] += 1  # same entry, next message of a batch
            else:
                c[1], c[2] = c[1] + 1, 0
            pos = list(c)
            entries.append((pos, spec["value"]))
            spec["position"] = pos
            effects.append((eff, spec["topic"], pos, spec["value"], spec.get("key", "")))
            if "key" in spec:
                keys[spec["value"]] = (spec["key"], spec.get("tombstone", False))
        else:
            start = None
            if entries and spec["from_choice"] < 0.5:
                start = list(entries[int(spec["from_choice"] * 2 * len(entries))][0])
            spec["from"] = start
            shown = [e for e in entries if start is None or e[0] >= start]
            if spec["limit"] is not None:
                shown = shown[: spec["limit"]]
            spec["shown"] = [[list(p), v] for p, v in shown]
    raw: list[tuple[int, int, Event]] = []
    for inv, _, cmp, seq, spec in planned:
        base = {"process": spec["process"], "f": spec["f"], "topic": spec["topic"]}
        invoke = {**base, "type": "invoke"}
        done: Event | None = {**base, "type": spec["outcome"]}
        if spec["f"] == "append":
            invoke["value"] = spec["value"]
            for field in ("key", "tombstone"):
                if field in spec:
                    invoke[field] = done[field] = spec[field]  # type: ignore[index]
            done["value"] = spec["value"]  # type: ignore[index]
            if spec["outcome"] == "ok":
                done["position"] = spec["position"]  # type: ignore[index]
        else:
            invoke["from"] = spec["from"]
            if spec["limit"] is not None:
                invoke["limit"] = spec["limit"]
            done["from"] = spec["from"]  # type: ignore[index]
            if spec["outcome"] == "ok":
                done["value"] = spec["shown"]  # type: ignore[index]
        if spec["outcome"] == "info" and rng.random() < 0.3:
            done = None  # never completed: counts as info
        raw.append((inv, seq * 2, invoke))
        if done is not None:
            raw.append((cmp, seq * 2 + 1, done))
    end = max(c for _, _, c, _, _ in planned) if planned else 0
    consumer_ops, subscriptions = (
        queues.plan(rng, names, next_pid + topics, consumers, end // 1000) if consumers else ([], [])
    )
    queues.apply(consumer_ops, subscriptions, effects)
    raw += queues.render(consumer_ops)
    if nemesis and planned:
        for k in range(3):
            t = rng.randrange(0, end + 1)
            raw.append((t, -1 - k, {"process": "nemesis", "type": "info", "f": "kill-bookie", "value": f"bookie-{k}"}))
    t = end + 1_000_000
    if final:
        for i, topic in enumerate(names):
            everything = [[list(p), v] for p, v in log[topic]]
            base = {"process": next_pid + i, "f": "read", "topic": topic, "from": None, "final": True}
            raw.append((t, 10**12 + 2 * i, {**base, "type": "invoke"}))
            raw.append((t + 1000, 10**12 + 2 * i + 1, {**base, "type": "ok", "value": everything}))
            t += 2000
    if compacted:
        for i, topic in enumerate(names):
            h = _horizon(log[topic], rng)
            shown = _compacted_view(log[topic], keys, h)
            base = {"process": next_pid + i, "f": "read-compacted", "topic": topic}
            raw.append((t, 10**12 + 2 * (topics + i), {**base, "type": "invoke"}))
            raw.append((t + 1000, 10**12 + 2 * (topics + i) + 1, {**base, "type": "ok", "horizon": h, "value": shown}))
            t += 2000
    if subscriptions:
        t = max([t, *(p.cmp for p in consumer_ops)]) + 1_000_000
        raw += queues.drain(subscriptions, t, next_pid + topics + consumers)
    raw.sort(key=lambda x: (x[0], x[1]))
    out = []
    for i, (t, _, ev) in enumerate(raw):
        out.append({"index": i, "time": t, **ev})
    return out


def _horizon(entries: list[tuple[Pos, str]], rng: random.Random) -> list[int] | None:
    """A compaction horizon, [ledger, entry], at an entry of the log (None: no compaction yet, an empty log)."""
    if not entries:
        return None
    p = entries[rng.randrange(len(entries))][0]
    return [p[0], p[1]]


def _compacted_view(entries: list[tuple[Pos, str]], keys: dict[str, tuple[str, bool]], h: list[int] | None) -> list:
    """What a read_compacted reader from the earliest shows: per key its last message at or before the horizon, left
    out if a tombstone (keyless ones are left out too), then every message after it, all in log order."""
    before = [(p, v) for p, v in entries if h is not None and [p[0], p[1]] <= h]
    last = {keys[v][0]: (p, v) for p, v in before if v in keys}
    kept = sorted((p, v) for p, v in last.values() if not keys[v][1])
    after = [(p, v) for p, v in entries if h is None or [p[0], p[1]] > h]
    return [[list(p), v] for p, v in kept + after]


def reindex(events: list[Event]) -> list[Event]:
    for i, ev in enumerate(events):
        ev["index"] = i
    return events


def _ops(events: list[Event]) -> list[tuple[Event, Event | None]]:
    """Pair invokes with completions (events are valid)."""
    pending: dict[Any, Event] = {}
    pairs: list[tuple[Event, Event | None]] = []
    where: dict[int, int] = {}
    for ev in events:
        if ev["process"] == "nemesis":
            continue
        if ev["type"] == "invoke":
            pending[ev["process"]] = ev
            where[id(ev)] = len(pairs)
            pairs.append((ev, None))
        else:
            inv = pending.pop(ev["process"])
            pairs[where[id(inv)]] = (inv, ev)
    return pairs


def _acks(pairs: list[tuple[Event, Event | None]]) -> list[tuple[Event, Event]]:
    return [(i, c) for i, c in pairs if c is not None and i["f"] == "append" and c["type"] == "ok"]


def _ok_reads(pairs: list[tuple[Event, Event | None]]) -> list[tuple[Event, Event]]:
    return [(i, c) for i, c in pairs if c is not None and i["f"] == "read" and c["type"] == "ok"]


def _not_cut(inv: Event, c: Event) -> bool:
    return inv.get("limit") is None or len(c["value"]) < inv["limit"]


def inject(events: list[Event], anomaly: str, rng: random.Random) -> tuple[list[Event], list[int]] | None:
    events = copy.deepcopy(events)
    if anomaly in QUEUE_ANOMALIES:
        changed = queues.inject(events, anomaly, rng)
        if not changed:
            return None
        reindex(events)
        return events, sorted(ev["index"] for ev in changed)
    pairs = _ops(events)
    acks = _acks(pairs)
    reads = _ok_reads(pairs)
    acked = {c["value"]: c for _, c in acks}
    touched: list[Event] = []
    if anomaly == "duplicate-position":
        for _, b in acks:
            same = [a for _, a in acks if a["topic"] == b["topic"] and a["index"] < b["index"]]
            if same:
                b["position"] = list(rng.choice(same)["position"])
                touched.append(b)
                break
    elif anomaly in ("duplicate-value", "divergent-read"):
        for _, r in reads:
            if len(r["value"]) >= 2:
                i = rng.randrange(len(r["value"]) - 1)
                a, b = r["value"][i], r["value"][i + 1]
                if a[1] in acked and b[1] in acked:
                    if anomaly == "duplicate-value":
                        b[1] = a[1]
                    else:
                        a[1], b[1] = b[1], a[1]
                    touched.append(r)
                    break
    elif anomaly == "phantom-read":
        for _, r in reads:
            if r["value"]:
                rng.choice(r["value"])[1] = "phantom-value"
                touched.append(r)
                break
    elif anomaly == "failed-write-visible":
        finals = [(i, c) for i, c in reads if i.get("final") and c["value"]]
        if finals:
            inv, r = finals[0]
            pid = 10**6
            t = inv["time"] - 1
            new_inv = {
                "index": -1,
                "time": t - 1,
                "process": pid,
                "type": "invoke",
                "f": "append",
                "topic": inv["topic"],
                "value": "failed-value",
            }
            new_fail = {**new_inv, "time": t, "type": "fail"}
            at = events.index(inv)
            events[at:at] = [new_inv, new_fail]
            end_pos = r["value"][-1][0]
            r["value"].append([[end_pos[0], end_pos[1], end_pos[2] + 1], "failed-value"])
            touched += [new_fail, r]
    elif anomaly == "gap":
        for _, r in reads:
            middle = [k for k in range(1, len(r["value"]) - 1) if r["value"][k][1] in acked]
            if middle:
                del r["value"][rng.choice(middle)]
                touched.append(r)
                break
    elif anomaly == "lost-write":
        for inv, r in reads:
            keep = [k for k, (_, v) in enumerate(r["value"]) if v in acked]
            if inv.get("final") and keep:
                del r["value"][keep[-1]]
                touched.append(r)
                break
    elif anomaly == "nonmonotonic-append":
        last: dict[tuple[Any, str], Event] = {}
        for _, c in acks:
            prev = last.get((c["process"], c["topic"]))
            if prev is not None:
                prev["position"], c["position"] = c["position"], prev["position"]
                touched += [prev, c]
                break
            last[(c["process"], c["topic"])] = c
    elif anomaly == "realtime-reorder":
        for inv, c in acks:
            if any(a["topic"] == c["topic"] and a["index"] < inv["index"] for _, a in acks):
                c["position"] = [0, 0, 7]  # ledger 0 is never used by the generator
                touched.append(c)
                break
    elif anomaly in ("stale-read", "nonmonotonic-read"):
        sources = [c for _, c in acks] if anomaly == "stale-read" else [c for _, c in reads if c["value"]]
        for inv, r in reads:
            if not _not_cut(inv, r):
                continue
            before = [s for s in sources if s["topic"] == r["topic"] and s["index"] < inv["index"]]
            reach = [s["position"] if anomaly == "stale-read" else max(p for p, _ in s["value"]) for s in before]
            if not reach:
                continue
            top = max(reach)
            if inv.get("from") is None or inv["from"] <= top:
                r["value"] = [e for e in r["value"] if e[0] < top]
                touched.append(r)
                break
    elif anomaly in COMPACTED_ANOMALIES:
        touched += _inject_compacted(pairs, anomaly, rng)
    else:
        raise ValueError(f"unknown anomaly {anomaly!r}")
    if not touched:
        return None
    reindex(events)
    return events, sorted(ev["index"] for ev in touched)


def _at_or_before(position: Pos, horizon: list[int] | None) -> bool:
    return horizon is not None and [position[0], position[1]] <= horizon


def _inject_compacted(pairs: list[tuple[Event, Event | None]], anomaly: str, rng: random.Random) -> list[Event]:
    """Into one `ok` read-compacted: for compacted-stale, a shown key's value swapped for an earlier one of its key
    (or a key a tombstone deleted shown again, with the value before the tombstone); for compacted-missing, an
    acknowledged value left out (a key's last before the horizon, or one after it, a tombstone there too); for
    compacted-reorder, two consecutive entries after the horizon swapped. Returns the events to witness it: the
    read's ok, and the ack or the read that places the value the read contradicts (none for a reorder)."""
    completed = [c for _, c in pairs if c is not None]
    appends = {c["value"]: c for c in completed if c["f"] == "append"}
    # Where each value is, from the final reads (the generator's true log), and its event
    placed = {
        (c["topic"], v): (list(p), c)
        for c in completed
        if c["f"] == "read" and c["type"] == "ok"
        for p, v in c["value"]
    }
    # Keys a tombstone of unknown outcome never seen may have deleted: the checkers excuse their absence
    hidden = {
        (i["topic"], i["key"])
        for i, c in pairs
        if i["f"] == "append" and i.get("tombstone") and (c is None or c["type"] == "info")
        and (i["topic"], i["value"]) not in placed
    }  # fmt: skip
    reads = [c for _, c in pairs if c is not None and c["f"] == "read-compacted" and c["type"] == "ok"]
    for r in rng.sample(reads, len(reads)):
        h, topic = r["horizon"], r["topic"]
        by_key: dict[str, list[tuple[Pos, str]]] = {}  # key -> its values at or before h, in log order
        for (t, v), (p, _) in sorted(placed.items(), key=lambda x: x[1][0]):
            a = appends.get(v)
            if t == topic and a is not None and "key" in a and _at_or_before(p, h):
                by_key.setdefault(a["key"], []).append((p, v))
        if anomaly == "compacted-stale":
            for _, values in rng.sample(sorted(by_key.items()), len(by_key)):
                last_v = values[-1][1]
                older = [(p, v) for p, v in values[:-1] if not appends[v].get("tombstone")]
                if not older or appends[last_v]["type"] != "ok":  # an ack witnesses the successor
                    continue
                p, v = rng.choice(older)
                shown = [e for e in r["value"] if e[1] == last_v]
                if shown:
                    shown[0][0], shown[0][1] = list(p), v  # the replaced value instead of its successor
                else:  # the key's last value is a tombstone: the key shows again
                    r["value"].append([list(p), v])
                    r["value"].sort(key=lambda e: e[0])
                return [r, appends[last_v]]
        elif anomaly == "compacted-reorder":
            tail = [k for k, e in enumerate(r["value"]) if not _at_or_before(e[0], h)]
            if len(tail) > 1:
                k = rng.choice(tail[:-1])
                r["value"][k], r["value"][k + 1] = r["value"][k + 1], r["value"][k]
                return [r]
        else:
            # before the horizon, a key's last value (a tombstone of unknown outcome may excuse its absence);
            # after it, any acknowledged entry, tombstones included
            acked = [
                (k, e) for k, e in enumerate(r["value"])
                if e[1] in appends and appends[e[1]]["type"] == "ok"
                and (not _at_or_before(e[0], h) or (topic, appends[e[1]].get("key")) not in hidden)
            ]  # fmt: skip
            if acked:
                k, (_, v) = rng.choice(acked)
                del r["value"][k]
                return [r, appends[v]]
    return []


def write_jsonl(events: list[Event], path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for ev in events:
            fh.write(json.dumps(ev, separators=(",", ":")) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write a generated (valid, or with one injected anomaly) history.")
    p.add_argument("out")
    p.add_argument("--ops", type=int, default=1000)
    p.add_argument("--processes", type=int, default=10)
    p.add_argument("--topics", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--inject", help="one anomaly name of docs/history.md")
    p.add_argument(
        "--compacted",
        action="store_true",
        help="keyed appends, some tombstones, and a compacted read per topic at the end (implied by --inject "
        + " or --inject ".join(COMPACTED_ANOMALIES)
        + ")",
    )
    a = p.parse_args(argv)
    compacted = a.compacted or a.inject in COMPACTED_ANOMALIES
    events = generate(seed=a.seed, ops=a.ops, processes=a.processes, topics=a.topics, compacted=compacted)
    if a.inject:
        res = inject(events, a.inject, random.Random(a.seed))
        if res is None:
            print(f"this history has no place for {a.inject}; try another seed", file=sys.stderr)
            return 2
        events = res[0]
    write_jsonl(events, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
