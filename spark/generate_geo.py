"""Histories of several clusters for the audit's tests: a simulated correct run, and one injector per
replication anomaly (spark/geo.py).

Every cluster keeps one true log per topic. An append's effect puts its value in its cluster's log, and
its cluster's replicator puts it in every other cluster's log later, in the order of the origin's log
(one replicator per origin, remote and topic). Values that arrived by replication are not replicated
again. Reads snapshot their cluster's log at their effect instant; appends end ok, fail (no effect) or
info (effect or not). After the last operation every replicator catches up and one final read per topic
and cluster reads everything.

`inject(events, anomaly, rng)` adds one defect to a remote's final read and returns the new events and the
index of the read it changed, or None when the history offers no place for it.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import random
from typing import Any

from spark.generate import reindex

Event = dict[str, Any]
CLUSTERS = ("east", "west")


def generate(
    seed: int = 0,
    ops: int = 150,
    processes: int = 4,
    topics: int = 2,
    clusters: tuple[str, ...] = CLUSTERS,
    read_ratio: float = 0.3,
    fail_ratio: float = 0.05,
    info_ratio: float = 0.05,
    limit_ratio: float = 0.3,
) -> list[Event]:
    rng = random.Random(seed)
    names = [f"persistent://public/geo/t{i}" for i in range(topics)]
    logs: dict[tuple[str, str], list[tuple[list[int], str]]] = {(c, t): [] for c in clusters for t in names}
    ledger = {key: i for i, key in enumerate(logs)}  # each cluster's log of a topic is one ledger
    moments: list[tuple[int, int, str, Any]] = []  # (time, tie-break, kind, payload): a heap
    ties = itertools.count()
    events: list[tuple[int, int, Event]] = []
    replicated_until: dict[tuple[str, str, str], int] = {}  # (origin, remote, topic) -> last replication time

    def at(time: int, kind: str, payload: Any) -> None:
        heapq.heappush(moments, (time, next(ties), kind, payload))

    def record(time: int, event: Event) -> None:
        events.append((time, next(ties), event))

    def put(cluster: str, topic: str, value: str) -> list[int]:
        log = logs[(cluster, topic)]
        position = [ledger[(cluster, topic)], len(log), 0]
        log.append((position, value))
        return position

    # Each process runs its operations one after another; a process whose append ends info is retired.
    pid = itertools.count()
    plans: list[list[dict[str, Any]]] = [[] for _ in range(processes)]
    for n in range(ops):
        plans[n % processes].append({"read": rng.random() < read_ratio})
    for slot, plan in enumerate(plans):
        process, clock, count = next(pid), rng.randrange(1000) * 1000, 0
        for op in plan:
            cluster, topic = rng.choice(clusters), rng.choice(names)
            invoke = clock + rng.randrange(1, 50) * 1000
            effect = invoke + rng.randrange(1, 50) * 1000
            complete = effect + rng.randrange(1, 50) * 1000
            clock = complete
            if op["read"]:
                limit = rng.randint(1, 6) if rng.random() < limit_ratio else None
                fields = {"from": None, "cluster": cluster} | ({"limit": limit} if limit else {})
                record(invoke, {"process": process, "type": "invoke", "f": "read", "topic": topic, **fields})
                at(effect, "read", (process, topic, cluster, fields, complete))
                continue
            count += 1
            value = f"{process}-{count}"
            outcome = "fail" if rng.random() < fail_ratio else "info" if rng.random() < info_ratio else "ok"
            base = {"process": process, "f": "append", "topic": topic, "value": value, "cluster": cluster}
            record(invoke, base | {"type": "invoke"})
            takes_effect = outcome == "ok" or (outcome == "info" and rng.random() < 0.5)
            at(effect, "append", (base, outcome, takes_effect, complete))
            if outcome == "info":
                process, count = next(pid), 0
        del slot

    while moments:
        time, _, kind, payload = heapq.heappop(moments)
        if kind == "read":
            process, topic, cluster, fields, complete = payload
            entries = [[p, v] for p, v in logs[(cluster, topic)]][: fields.get("limit")]
            done = {"process": process, "type": "ok", "f": "read", "topic": topic, **fields, "value": entries}
            record(complete, done)
        elif kind == "append":
            base, outcome, takes_effect, complete = payload
            position = put(base["cluster"], base["topic"], base["value"]) if takes_effect else None
            if outcome == "ok":
                record(complete, base | {"type": "ok", "position": position})
            elif outcome == "fail":
                record(complete, base | {"type": "fail", "error": "simulated"})
            elif rng.random() < 0.7:  # the rest stay open
                record(complete, base | {"type": "info", "error": "simulated"})
            if position is not None:
                for remote in clusters:
                    if remote != base["cluster"]:
                        key = (base["cluster"], remote, base["topic"])
                        when = max(time + rng.randrange(1, 200) * 1000, replicated_until.get(key, 0) + 1)
                        replicated_until[key] = when
                        at(when, "replicate", (remote, base["topic"], base["value"]))
        else:
            remote, topic, value = payload
            put(remote, topic, value)

    end = max(t for t, _, _ in events) + 1_000_000
    final = next(pid)
    for i, (cluster, topic) in enumerate(sorted(logs)):
        fields = {"from": None, "final": True, "cluster": cluster}
        record(end + 2 * i, {"process": final, "type": "invoke", "f": "read", "topic": topic, **fields})
        whole = [[p, v] for p, v in logs[(cluster, topic)]]
        record(end + 2 * i + 1, {"process": final, "type": "ok", "f": "read", "topic": topic, **fields, "value": whole})
    ordered = [dict(ev, time=t) for t, _, ev in sorted(events, key=lambda e: (e[0], e[1]))]
    return reindex([{"index": 0, **ev} for ev in ordered])


def _origins(events: list[Event]) -> dict[str, Event]:
    """value -> its append's ok completion (values acknowledged only)."""
    return {ev["value"]: ev for ev in events if ev["f"] == "append" and ev["type"] == "ok"}


def _remote_finals(events: list[Event]) -> list[Event]:
    return [ev for ev in events if ev["f"] == "read" and ev["type"] == "ok" and ev.get("final")]


def inject(events: list[Event], anomaly: str, rng: random.Random) -> tuple[list[Event], list[int]] | None:
    events = copy.deepcopy(events)
    acked = _origins(events)
    finals = _remote_finals(events)
    rng.shuffle(finals)
    for read in finals:
        entries = read["value"]
        foreign = [i for i, (_, v) in enumerate(entries) if v in acked and acked[v]["cluster"] != read["cluster"]]
        if not foreign:
            continue
        if anomaly == "replication-lost":
            del entries[rng.choice(foreign)]
        elif anomaly == "replication-duplicate":
            i = rng.choice(foreign)
            entries.insert(i + 1, list(entries[i]))
        elif anomaly == "replication-reorder":
            by_process: dict[Any, list[int]] = {}
            for i in foreign:
                by_process.setdefault(acked[entries[i][1]]["process"], []).append(i)
            pairs = [(a, b) for idx in by_process.values() for a, b in itertools.pairwise(idx)]
            if not pairs:
                continue
            a, b = rng.choice(pairs)
            entries[a][1], entries[b][1] = entries[b][1], entries[a][1]
        else:
            raise ValueError(f"not a replication anomaly: {anomaly!r}")
        return events, [read["index"]]
    return None
