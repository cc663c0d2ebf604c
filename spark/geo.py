"""Histories of several clusters (docs/history.md, "Clusters"): the reference definitions, in plain Python.

An operation with a `cluster` went to that cluster. A value's *origin* is the cluster of its append.

**Each cluster's log** is checked as before, by every check of spark/reference.py, on the cluster's *local
view*: its operations, each topic named `<topic> @<cluster>`, with reads showing only the values that
originate in that cluster (and values no append carried, so that phantoms are still found); a read cut
by its limit stays cut (its limit becomes the number of entries it shows, possibly 0). Values
replicated from elsewhere hold positions in the cluster's log that the local view does not show; no
check needs them, as they are never acknowledged there.

**Replication** is checked on the final reads (ok, `final`, not cut by a limit) of each remote cluster
(one that is not the value's origin):

- replication-lost: a value acknowledged in its origin is missing from a final read of the topic in a
  remote cluster. One case per (value, remote): the ack and the earliest such final read.
- replication-duplicate: a value from another cluster appears more than once in a final read. One case
  per (final read, value): the value's append (its ok, else its invoke) and the read.
- replication-reorder: two values acknowledged in their origin by one process (one producer), shown by
  a remote's final read in the other order than their positions in the origin. One case per (final
  read, process): the first such consecutive pair of its values in the read (their two acks, the read).

With `replication_dedup=False` (a run whose replicated namespace has de-duplication off, where Pulsar
promises at-least-once) replication-duplicate is not an anomaly.

spark/geo_audit.py is the Spark job of the same definitions; tests check that the two agree.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable

from spark.history import Op, format_position, time_teller
from spark.report import Case


def log_name(topic: str, cluster: str) -> str:
    """The name of one cluster's log of a topic in reports."""
    return f"{topic} @{cluster}"


def is_geo(ops: list[Op]) -> bool:
    return any(op.cluster is not None for op in ops)


def origins(ops: list[Op]) -> dict[str, str]:
    """value -> the cluster its append went to."""
    return {op.value: op.cluster for op in ops if op.f == "append" and op.value is not None and op.cluster}


def local_view(ops: list[Op]) -> list[Op]:
    """Every operation as its cluster's log sees it (see the module docstring); unchanged without clusters."""
    if not is_geo(ops):
        return ops
    origin = origins(ops)
    local = []
    for op in ops:
        if op.cluster is None:
            local.append(op)
            continue
        changed = dataclasses.replace(op, topic=log_name(op.topic, op.cluster))
        if op.f == "read":
            changed.entries = [(p, v) for p, v in op.entries if origin.get(v, op.cluster) == op.cluster]
            if op.cut_by_limit:  # it stopped at its limit: so does what it shows (possibly nothing)
                changed.limit = len(changed.entries)
        local.append(changed)
    return local


def _final_reads(ops: list[Op]) -> dict[tuple[str, str], list[Op]]:
    """(topic, cluster) -> its whole final reads, earliest first."""
    finals: dict[tuple[str, str], list[Op]] = defaultdict(list)
    for op in ops:
        if op.f == "read" and op.type == "ok" and op.final and not op.cut_by_limit and op.cluster:
            finals[(op.topic, op.cluster)].append(op)
    for reads in finals.values():
        reads.sort(key=lambda r: r.cmp_index or 0)
    return finals


def replication_cases(ops: list[Op], replication_dedup: bool = True) -> list[Case]:
    if not is_geo(ops):
        return []
    t = time_teller(ops)
    appends = {op.value: op for op in ops if op.f == "append" and op.value is not None and op.cluster}
    finals = _final_reads(ops)
    cases = lost(appends, finals, t)
    if replication_dedup:
        cases += duplicated(appends, finals, t)
    return cases + reordered(appends, finals, t)


def lost(appends: dict[str, Op], finals: dict[tuple[str, str], list[Op]], t: Callable[[int | None], str]) -> list[Case]:
    remotes: dict[str, list[str]] = defaultdict(list)  # topic -> clusters with a final read
    for topic, cluster in finals:
        remotes[topic].append(cluster)
    shown = {r.cmp_index: {v for _, v in r.entries} for reads in finals.values() for r in reads}
    cases = []
    for a in sorted(appends.values(), key=lambda a: a.inv_index):
        if a.type != "ok":
            continue
        for remote in sorted(remotes[a.topic]):
            if remote == a.cluster:
                continue
            missing = next((r for r in finals[(a.topic, remote)] if a.value not in shown[r.cmp_index]), None)
            if missing is not None:
                cases.append(
                    Case(
                        "replication-lost",
                        log_name(a.topic, remote),
                        (a.cmp_index, missing.cmp_index),
                        f"append {a.value!r} was acknowledged in {a.cluster} at {format_position(a.position)} at "
                        f"{t(a.cmp_index)}; the final read in {remote} at {t(missing.cmp_index)} does not contain it",
                    )
                )
    return cases


def duplicated(
    appends: dict[str, Op], finals: dict[tuple[str, str], list[Op]], t: Callable[[int | None], str]
) -> list[Case]:
    cases = []
    for (topic, cluster), reads in sorted(finals.items()):
        for r in reads:
            count: dict[str, int] = defaultdict(int)
            for _, v in r.entries:
                count[v] += 1
            for v, n in sorted(count.items()):
                a = appends.get(v)
                if n < 2 or a is None or a.cluster == cluster:
                    continue  # a local value twice is the local duplicate-value
                witness = a.cmp_index if a.type == "ok" else a.inv_index
                cases.append(
                    Case(
                        "replication-duplicate",
                        log_name(topic, cluster),
                        (witness, r.cmp_index),
                        f"{v!r}, appended in {a.cluster}, is {n} times in the final read in {cluster} at "
                        f"{t(r.cmp_index)}, though the namespace de-duplicates",
                    )
                )
    return cases


def reordered(
    appends: dict[str, Op], finals: dict[tuple[str, str], list[Op]], t: Callable[[int | None], str]
) -> list[Case]:
    cases = []
    for (topic, cluster), reads in sorted(finals.items()):
        for r in reads:
            last: dict[int, Op] = {}  # process -> its value shown last in the read so far
            flagged: set[int] = set()
            for _, v in r.entries:
                a = appends.get(v)
                if a is None or a.cluster == cluster or a.type != "ok" or a.position is None:
                    continue
                before = last.get(a.process)
                last[a.process] = a
                if before is None or a.process in flagged or before.position is None:
                    continue
                if a.position < before.position:
                    flagged.add(a.process)
                    cases.append(
                        Case(
                            "replication-reorder",
                            log_name(topic, cluster),
                            (before.cmp_index, a.cmp_index, r.cmp_index),
                            f"process {a.process} appended {before.value!r} at {format_position(before.position)} "
                            f"and {a.value!r} at {format_position(a.position)} in {a.cluster}; the final read in "
                            f"{cluster} at {t(r.cmp_index)} shows them in the other order",
                        )
                    )
    return cases
