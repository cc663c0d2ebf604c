"""The audit report of docs/history.md: anomaly names, witnesses (cases) and the JSON form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ANOMALIES = (
    "duplicate-position",
    "duplicate-value",
    "divergent-read",
    "phantom-read",
    "failed-write-visible",
    "gap",
    "lost-write",
    "nonmonotonic-append",
    "realtime-reorder",
    "stale-read",
    "nonmonotonic-read",
    "lost-message",
    "unexpected-delivery",
    "subscription-reorder",
    "key-order",
    # a typed run's deliveries against the schema registry (spark/schema_reference.py)
    "unknown-schema-version",
    # across the clusters of an instance (spark/geo.py)
    "replication-lost",
    "replication-duplicate",
    "replication-reorder",
)
# The anomalies of subscriptions (docs/history.md, Consumers); the others are the anomalies of the logs.
QUEUE_ANOMALIES = ("lost-message", "unexpected-delivery", "subscription-reorder", "key-order")
# Across clusters (docs/history.md, Clusters): only a history of several clusters can show them.
REPLICATION_ANOMALIES = ("replication-lost", "replication-duplicate", "replication-reorder")
# Only a typed run's history (`workload --schema`) can show them; the generator of spark/generate.py makes none.
SCHEMA_ANOMALIES = ("unknown-schema-version",)
ONE_CLUSTER_ANOMALIES = tuple(a for a in ANOMALIES if a not in REPLICATION_ANOMALIES + SCHEMA_ANOMALIES)


@dataclass(frozen=True)
class Case:
    """One anomaly: the smallest set of events (by `index`) that shows it, and why."""

    anomaly: str
    topic: str
    ops: tuple[Any, ...]  # event indices (ints); Optional-typed inputs are normalized here
    explanation: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(sorted({int(i) for i in self.ops})))

    @property
    def key(self) -> tuple[str, str, tuple[int, ...]]:
        return (self.anomaly, self.topic, self.ops)


@dataclass
class TopicSummary:
    ops: int = 0
    appends_ok: int = 0
    appends_fail: int = 0
    appends_info: int = 0
    reads: int = 0
    anomalies: int = 0


@dataclass(frozen=True)
class SubscriptionFigures:
    """What a subscription delivered while the faults of one kind were the latest (docs/history.md): measured,
    not flagged, as Pulsar promises none of it."""

    topic: str
    subscription: str
    type: str
    fault: str  # the kind of the latest fault injected before the delivery, "none" before the first
    deliveries: int
    first: int
    redeliveries: int
    duplicates: int
    after_ack: int
    max_redelivery: int
    lag_p50_ms: float | None
    lag_p99_ms: float | None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.topic, self.subscription, self.fault)

    @classmethod
    def of(
        cls,
        subscription: tuple[str, str, str, str],  # topic, subscription, type, fault
        counts: Mapping[str, Any],  # deliveries, first, duplicates, after_ack, max_redelivery
        lag_ms: tuple[float | None, float | None],  # p50, p99
    ) -> SubscriptionFigures:
        """The figures from the counts both checkers compute (redeliveries are what was not first)."""
        topic, name, kind, fault = subscription
        return cls(
            topic=topic,
            subscription=name,
            type=kind,
            fault=fault,
            deliveries=counts["deliveries"],
            first=counts["first"],
            redeliveries=counts["deliveries"] - counts["first"],
            duplicates=counts["duplicates"],
            after_ack=counts["after_ack"],
            max_redelivery=counts["max_redelivery"],
            lag_p50_ms=lag_ms[0],
            lag_p99_ms=lag_ms[1],
        )


@dataclass
class Report:
    ops: int
    cases: list[Case]
    topics: dict[str, TopicSummary] = field(default_factory=dict)
    subscriptions: list[SubscriptionFigures] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.cases

    @property
    def waited_for_drain(self) -> int:
        """Messages first delivered by the final drain to subscriptions that delivered nothing before it (no
        consumer during the run): their lag is the run's length, not a fault's doing."""
        during_run = {(f.topic, f.subscription) for f in self.subscriptions if f.fault != "drain"}
        return sum(
            f.first for f in self.subscriptions if f.fault == "drain" and (f.topic, f.subscription) not in during_run
        )

    def to_json(self) -> dict[str, Any]:
        by_name: dict[str, list[dict[str, Any]]] = {}
        for c in sorted(self.cases, key=lambda c: (ANOMALIES.index(c.anomaly), c.topic, c.ops)):
            by_name.setdefault(c.anomaly, []).append(
                {"topic": c.topic, "ops": list(c.ops), "explanation": c.explanation}
            )
        return {
            "valid": self.valid,
            "ops": self.ops,
            "topics": len(self.topics),
            "anomaly_types": [a for a in ANOMALIES if a in by_name],
            "anomalies": by_name,
            "subscriptions": [vars(f) for f in sorted(self.subscriptions, key=lambda f: f.key)],
            "waited_for_drain": self.waited_for_drain,
        }
