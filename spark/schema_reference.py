"""Plain-Python reference checker of a typed run's deliveries against the schema registry (docs/history.md,
Schemas): the definition spark/schema_audit.py must agree with, case for case.

- unknown-schema-version: an `ok` receive carrying a `schema_version` that no `ok` schemas operation on its
  topic (the subscribed topic: partitions share their partitioned topic's schema) returned. Topics whose
  registry the history never read (no `ok` schemas) are not judged. One case per (topic, version), at its
  earliest delivery; witness: that delivery and the topic's earliest `ok` schemas.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from spark.history import SCHEMA_OPS, Op
from spark.report import Case

ANOMALY = "unknown-schema-version"


def explain(version: int, registered: Iterable[int], delivery: int, schemas: int) -> str:
    known = sorted(set(registered))
    return (
        f"the delivery at event {delivery} carries schema version {version}; the registry returned "
        f"{'versions ' + ', '.join(map(str, known)) if known else 'no version'} for its topic (event {schemas})"
    )


def check(ops: Sequence[Op]) -> list[Case]:
    registered: dict[str, set[int]] = {}
    first_read: dict[str, int] = {}  # topic -> its earliest ok schemas completion
    for op in ops:
        if op.f in SCHEMA_OPS and op.type == "ok" and op.cmp_index is not None:
            registered.setdefault(op.topic, set()).update(op.versions)
            first_read[op.topic] = min(first_read.get(op.topic, op.cmp_index), op.cmp_index)
    earliest: dict[tuple[str, int], int] = {}
    for op in ops:
        if op.f != "receive" or op.type != "ok" or op.schema_version is None or op.cmp_index is None:
            continue
        if op.topic in registered and op.schema_version not in registered[op.topic]:
            k = (op.topic, op.schema_version)
            earliest[k] = min(earliest.get(k, op.cmp_index), op.cmp_index)
    return [
        Case(ANOMALY, topic, (index, first_read[topic]), explain(v, registered[topic], index, first_read[topic]))
        for (topic, v), index in sorted(earliest.items())
    ]
