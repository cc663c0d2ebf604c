"""The Spark job of spark/geo.py's definitions: histories of several clusters.

`local_events` rewrites the events into every cluster's local view before the log checks of
spark/audit.py run on them unchanged: an operation's topic becomes `<topic> @<cluster>`, and an ok
read keeps only the entries whose value originates in its cluster (or in no append), with its limit
lowered to what it still shows when it was cut by the limit. `replication_rows` finds the replication
anomalies on the remote clusters' final reads. Both are skipped for a history without clusters.

The same witnesses as the reference's: tests compare the two on generated histories.
"""

from __future__ import annotations

from typing import Any

from spark.history import format_position


def has_clusters(events: Any) -> bool:
    from pyspark.sql import functions as F

    return bool(events.filter(F.col("cluster").isNotNull()).limit(1).count())


def _origins(events: Any) -> Any:
    """(history, value, origin): the cluster of each append."""
    from pyspark.sql import functions as F

    appends = (F.col("f") == "append") & (F.col("type") == "invoke") & F.col("cluster").isNotNull()
    return events.filter(appends).select("history", "value", F.col("cluster").alias("origin"))


def local_events(events: Any) -> Any:
    """Every cluster's local view of the events (see the module docstring)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # A read's invoke is the event of its process just before its completion: both carry the limit.
    by_process = Window.partitionBy("history", "process").orderBy("index")
    ok_reads = events.withColumn("invoke_of", F.lag("index").over(by_process)).filter(
        (F.col("f") == "read") & (F.col("type") == "ok") & F.col("cluster").isNotNull()
    )
    entries = ok_reads.select(
        "history",
        "index",
        "invoke_of",
        "cluster",
        "limit",
        F.posexplode_outer(F.from_json("value", "array<array<string>>")).alias("order", "pair"),
    ).withColumn("value", F.col("pair")[1])
    entries = entries.join(_origins(events), ["history", "value"], "left")
    local = F.col("origin").isNull() | (F.col("origin") == F.col("cluster"))
    # The pair's position is JSON text already ("[l,e,b]"); the value is quoted by to_json of a one-element array.
    as_json = F.concat(
        F.lit("["),
        F.col("pair")[0],
        F.lit(","),
        F.expr("substring(to_json(array(pair[1])), 2)"),
    )
    kept = entries.groupBy("history", "index", "invoke_of").agg(
        F.count("pair").alias("shown"),
        F.first("limit").alias("limit"),
        F.array_sort(
            F.collect_list(F.when(F.col("pair").isNotNull() & local, F.struct("order", as_json.alias("json"))))
        ).alias("kept"),
    )
    was_cut = F.col("limit").isNotNull() & (F.col("shown") >= F.col("limit"))
    kept = kept.select(
        "history",
        "index",
        "invoke_of",
        F.when(was_cut, F.size("kept")).otherwise(F.col("limit")).alias("local_limit"),
        F.concat(F.lit("["), F.array_join(F.transform("kept", lambda x: x["json"]), ","), F.lit("]")).alias(
            "local_value"
        ),
    ).cache()
    limits = kept.select("history", "index", "local_limit").unionByName(
        kept.select("history", F.col("invoke_of").alias("index"), "local_limit")
    )
    out = events.join(kept.select("history", "index", "local_value"), ["history", "index"], "left")
    out = out.join(limits, ["history", "index"], "left")
    return out.select(
        *[
            F.when(F.col("cluster").isNotNull(), F.concat("topic", F.lit(" @"), "cluster"))
            .otherwise(F.col("topic"))
            .alias("topic")
            if c == "topic"
            else F.coalesce("local_value", "value").alias("value")
            if c == "value"
            else F.coalesce("local_limit", "limit").alias("limit")
            if c == "limit"
            else F.col(c)
            for c in events.columns
        ]
    )


def _operations(events: Any) -> Any:
    """Invokes with their completions (the next event of the same process), in clusters only."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    events = events.filter((F.col("process") != "nemesis") & F.col("cluster").isNotNull())
    by_process = Window.partitionBy("history", "process").orderBy("index")
    paired = events.withColumn("completion", F.lead(F.struct("index", "type", "value", "position"), 1).over(by_process))
    return paired.filter(F.col("type") == "invoke").select(
        "history",
        "process",
        "f",
        "topic",
        "cluster",
        "limit",
        F.coalesce("final", F.lit(False)).alias("final"),
        F.col("index").alias("invoke_index"),
        F.coalesce(F.col("completion.type"), F.lit("info")).alias("outcome"),
        F.col("completion.index").alias("completion_index"),
        F.when(F.col("f") == "append", F.col("value")).alias("value"),
        F.col("completion.position").alias("position"),
        F.when(F.col("f") == "read", F.col("completion.value")).alias("read_value"),
    )


def replication_rows(spark: Any, events: Any, replication_dedup: bool = True) -> list[dict[str, Any]]:
    """The replication anomalies: rows of history, anomaly, topic, ops, explanation."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ops = _operations(events).cache()
    appends = ops.filter(F.col("f") == "append").select(
        "history",
        F.col("topic").alias("append_topic"),
        F.col("cluster").alias("origin"),
        "process",
        "value",
        "outcome",
        "invoke_index",
        F.col("completion_index").alias("ack_index"),
        "position",
    )
    whole_final = (F.col("f") == "read") & (F.col("outcome") == "ok") & F.col("final")
    finals = ops.filter(whole_final).select(
        "history",
        "topic",
        "cluster",
        "limit",
        F.col("completion_index").alias("read_index"),
        F.posexplode_outer(F.from_json("read_value", "array<array<string>>")).alias("order", "pair"),
    )
    sizes = finals.groupBy("history", "read_index").agg(F.count("pair").alias("n"), F.first("limit").alias("limit"))
    whole = sizes.filter(F.col("limit").isNull() | (F.col("n") < F.col("limit"))).select("history", "read_index")
    finals = finals.join(whole, ["history", "read_index"]).withColumn("value", F.col("pair")[1]).cache()
    reads = finals.select("history", "topic", "cluster", "read_index").distinct()

    rows: list[dict[str, Any]] = []
    # replication-lost: an acknowledged value against every remote's final reads of its topic; the earliest missing.
    acked = appends.filter(F.col("outcome") == "ok")
    remote_reads = reads.select("history", F.col("topic").alias("append_topic"), "cluster", "read_index")
    pairs = (
        acked.join(remote_reads, ["history", "append_topic"])
        .filter(F.col("origin") != F.col("cluster"))
        .select(
            "history",
            F.col("append_topic").alias("topic"),
            *("cluster", "read_index", "value", "ack_index", "origin", "position"),
        )
    )
    present = finals.filter(F.col("pair").isNotNull()).select("history", "read_index", "value").distinct()
    missing = pairs.join(present, ["history", "read_index", "value"], "left_anti")
    first = Window.partitionBy("history", "value", "cluster").orderBy("read_index")
    for r in missing.withColumn("n", F.row_number().over(first)).filter(F.col("n") == 1).collect():
        rows.append(
            {
                "history": r["history"],
                "anomaly": "replication-lost",
                "topic": f"{r['topic']} @{r['cluster']}",
                "ops": [r["ack_index"], r["read_index"]],
                "explanation": f"append {r['value']!r} was acknowledged in {r['origin']} at "
                f"{format_position(tuple(r['position']))}; the final read in {r['cluster']} (event {r['read_index']}) "
                "does not contain it",
            }
        )
    shown = (
        finals.filter(F.col("pair").isNotNull())
        .join(
            appends.select("history", "value", "origin", "process", "outcome", "invoke_index", "ack_index", "position"),
            ["history", "value"],
        )
        .filter(F.col("origin") != F.col("cluster"))
    )
    if replication_dedup:
        counted = shown.groupBy("history", "topic", "cluster", "read_index", "value", "origin").agg(
            F.count("*").alias("times"),
            F.first(F.when(F.col("outcome") == "ok", F.col("ack_index")).otherwise(F.col("invoke_index"))).alias(
                "witness"
            ),
        )
        for r in counted.filter(F.col("times") > 1).collect():
            rows.append(
                {
                    "history": r["history"],
                    "anomaly": "replication-duplicate",
                    "topic": f"{r['topic']} @{r['cluster']}",
                    "ops": [r["witness"], r["read_index"]],
                    "explanation": f"{r['value']!r}, appended in {r['origin']}, is {r['times']} times in the final "
                    f"read in {r['cluster']} (event {r['read_index']}), though the namespace de-duplicates",
                }
            )
    # replication-reorder: consecutive values of one origin process in a remote's final read, by their origin positions.
    acked_shown = shown.filter((F.col("outcome") == "ok") & F.col("position").isNotNull())
    by_process = Window.partitionBy("history", "read_index", "process").orderBy("order")
    steps = acked_shown.select(
        "history",
        "topic",
        "cluster",
        "read_index",
        "process",
        "order",
        "origin",
        "value",
        "ack_index",
        "position",
        F.lag(F.struct("value", "ack_index", "position"), 1).over(by_process).alias("before"),
    )
    backwards = steps.filter(F.col("before").isNotNull() & (F.col("position") < F.col("before.position")))
    first_back = Window.partitionBy("history", "read_index", "process").orderBy("order")
    for r in backwards.withColumn("n", F.row_number().over(first_back)).filter(F.col("n") == 1).collect():
        before = r["before"]
        rows.append(
            {
                "history": r["history"],
                "anomaly": "replication-reorder",
                "topic": f"{r['topic']} @{r['cluster']}",
                "ops": [before["ack_index"], r["ack_index"], r["read_index"]],
                "explanation": f"process {r['process']} appended {before['value']!r} at "
                f"{format_position(tuple(before['position']))} and {r['value']!r} at "
                f"{format_position(tuple(r['position']))} in {r['origin']}; the final read in {r['cluster']} "
                f"(event {r['read_index']}) shows them in the other order",
            }
        )
    ops.unpersist()
    finals.unpersist()
    return rows
