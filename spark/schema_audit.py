"""The Spark job of a typed run's schema versions: unknown-schema-version as spark/schema_reference.py defines it.

Neither side needs pairing with invokes: an `ok` receive's completion carries the delivery's topic and
`schema_version`, an `ok` schemas completion the topic's `versions`. Deliveries are reduced to the earliest per
(history, topic, version) before the join, so the registry's side (a few rows per topic) is broadcast.
"""

from __future__ import annotations

from typing import Any

from spark.history import SCHEMA_OPS
from spark.schema_reference import ANOMALY, explain


def has_schemas(events: Any) -> bool:
    """Whether the history read the schema registry (a scan of `f` alone)."""
    from pyspark.sql import functions as F

    return bool(events.select("f").filter(F.col("f").isin(*SCHEMA_OPS)).limit(1).count())


def run(events: Any) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """(case rows: history, anomaly, topic, ops, explanation; schemas operations per history)."""
    from pyspark.sql import functions as F

    schemas = events.filter(F.col("f").isin(*SCHEMA_OPS) & (F.col("process") != "nemesis"))
    counts = {
        r["history"]: r["n"]
        for r in schemas.filter(F.col("type") == "invoke").groupBy("history").agg(F.count("*").alias("n")).collect()
    }
    registry = (
        schemas.filter(F.col("type") == "ok")
        .groupBy("history", "topic")
        .agg(
            F.array_distinct(F.flatten(F.collect_list(F.coalesce("versions", F.array().cast("array<long>"))))).alias(
                "registered"
            ),
            F.min("index").alias("schemas_index"),
        )
    )
    delivered = (
        events.filter((F.col("f") == "receive") & (F.col("type") == "ok") & F.col("schema_version").isNotNull())
        .groupBy("history", "topic", "schema_version")
        .agg(F.min("index").alias("delivery_index"))
    )
    unknown = delivered.join(F.broadcast(registry), ["history", "topic"]).filter(
        ~F.array_contains("registered", F.col("schema_version"))
    )
    rows = []
    for r in unknown.collect():
        ops = sorted({int(r["delivery_index"]), int(r["schemas_index"])})
        why = explain(int(r["schema_version"]), r["registered"], int(r["delivery_index"]), int(r["schemas_index"]))
        rows.append({"history": r["history"], "anomaly": ANOMALY, "topic": r["topic"], "ops": ops, "explanation": why})
    return rows, counts
