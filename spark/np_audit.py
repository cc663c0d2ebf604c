"""The Spark job for non-persistent topics: the cases and figures of spark/non_persistent.py (the definitions),
computed from the events of those topics alone. Their histories are small next to the logs' (appends and live
deliveries, no reads), so the job is plain: one pairing of invokes with completions by process, one join of
deliveries with their appends by value, and windows per consumer session.
"""

from __future__ import annotations

from typing import Any

from spark.history import format_time
from spark.non_persistent import DOMAIN
from spark.report import Case, NonPersistentFigures, TopicSummary


def of_non_persistent(events: Any) -> Any:
    """A column: whether the event is on a non-persistent topic."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col("topic").startswith(DOMAIN), F.lit(False))


def has_non_persistent(events: Any) -> bool:
    return bool(events.select("topic").filter(of_non_persistent(events)).limit(1).count())


def _ops(events: Any) -> Any:
    """Appends, subscribes and receives of non-persistent topics, each invoke with its completion."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ops = events.filter(of_non_persistent(events) & F.col("f").isin("append", "subscribe", "receive"))
    by_process = Window.partitionBy("history", "process").orderBy("index")
    completion = F.lead(F.struct("index", "type", "value", "partition"), 1).over(by_process)
    # Every event of a process is needed to pair it (its acks, nacks and closes too), so pair before filtering.
    all_ops = events.filter(of_non_persistent(events) & (F.col("process") != "nemesis"))
    paired = all_ops.withColumn("completion", completion).filter(F.col("type") == "invoke")
    paired = paired.join(ops.select("history", "index"), ["history", "index"], "left_semi")
    receive = F.col("f") == "receive"
    return paired.select(
        "history",
        "process",
        "f",
        "topic",
        "subscription",
        "consumer",
        "subscription_type",
        F.col("index").alias("invoke_index"),
        F.coalesce(F.col("completion.type"), F.lit("info")).alias("outcome"),
        F.col("completion.index").alias("completion_index"),
        F.when(receive, F.col("completion.value")).otherwise(F.col("value")).alias("value"),
        F.coalesce(F.when(receive, F.col("completion.partition")), F.col("topic")).alias("log"),
    )


def run(
    spark: Any, events: Any
) -> tuple[
    list[tuple[int, Case]],
    list[tuple[int, NonPersistentFigures]],
    dict[int, int],
    list[tuple[int, str, TopicSummary]],
]:
    """(cases with their history's number, figures likewise, operations per history that are not appends, and the
    summary of each topic's appends)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    events = events.filter(of_non_persistent(events) | (F.col("process") == "nemesis")).cache()
    ops = _ops(events).cache()
    appends = ops.filter(F.col("f") == "append").select(
        "history",
        "value",
        F.col("process").alias("producer"),
        F.col("topic").alias("append_topic"),
        F.col("outcome").alias("append_outcome"),
        F.col("invoke_index").alias("append_invoke"),
        F.col("completion_index").alias("append_completion"),
    )
    delivered = ops.filter((F.col("f") == "receive") & (F.col("outcome") == "ok")).join(
        appends, ["history", "value"], "left"
    )
    sub = ["history", "topic", "subscription"]
    expected = (
        (F.col("append_outcome").isNotNull())
        & (F.col("append_outcome") != "fail")
        & (F.col("append_topic") == F.col("log"))
    )
    per_value = Window.partitionBy(*sub, "value").orderBy("completion_index")
    failed_here = (F.col("append_outcome") == "fail") & (F.col("append_topic") == F.col("log"))
    unexpected = (
        delivered.filter(~expected)
        .withColumn("nth", F.row_number().over(per_value))
        .filter(F.col("nth") == 1)
        .select(
            *sub,
            "log",
            "value",
            "consumer",
            "completion_index",
            F.when(failed_here, F.col("append_completion")).alias("failed_completion"),
        )
        .collect()
    )
    live = delivered.filter(expected)
    in_session = Window.partitionBy(*sub, "consumer", "value").orderBy("completion_index")
    live = live.withColumn("nth", F.row_number().over(in_session)).withColumn(
        "first_at", F.first("completion_index").over(in_session)
    )
    boundaries = events.filter(
        (F.col("process") == "nemesis") & (F.col("f") != "stopped") & F.col("error").isNull()
    ).select("history", F.col("index").alias("boundary"))
    seconds = live.filter(F.col("nth") == 2).alias("d")
    excused = seconds.join(
        boundaries.alias("b"),
        (F.col("d.history") == F.col("b.history"))
        & (F.col("b.boundary") > F.col("d.append_invoke"))
        & (F.col("b.boundary") < F.col("d.completion_index")),
        "left_semi",
    )
    duplicates = seconds.join(excused.select(*sub, "consumer", "value"), [*sub, "consumer", "value"], "left_anti")
    duplicates = duplicates.select(*sub, "log", "value", "consumer", "first_at", "completion_index").collect()
    per_producer = Window.partitionBy(*sub, "consumer", "log", "producer").orderBy("completion_index")
    previous = F.lag(F.struct("completion_index", "append_invoke", "value"), 1).over(per_producer)
    reordered = (
        live.filter(F.col("nth") == 1)
        .withColumn("previous", previous)
        .filter(F.col("previous").isNotNull() & (F.col("append_invoke") < F.col("previous.append_invoke")))
        .select(*sub, "log", "value", "consumer", "producer", "completion_index", "append_invoke", "previous")
        .collect()
    )
    figures = _figures(ops, delivered)
    invokes = events.filter(of_non_persistent(events) & (F.col("type") == "invoke") & (F.col("f") != "append"))
    counted = invokes.filter(F.col("process") != "nemesis").groupBy("history").count().collect()
    outcome = F.col("outcome")
    summaries = [
        (r["history"], r["topic"], TopicSummary(r["ops"], r["ok"], r["fail"], r["ops"] - r["ok"] - r["fail"], 0))
        for r in ops.filter(F.col("f") == "append")
        .groupBy("history", "topic")
        .agg(
            F.count("*").alias("ops"),
            F.sum((outcome == "ok").cast("int")).alias("ok"),
            F.sum((outcome == "fail").cast("int")).alias("fail"),
        )
        .collect()
    ]
    wanted = {(r["history"], r[i]) for r in [*unexpected, *duplicates, *reordered] for i in _indices(r)}
    times = _times(spark, events, wanted)
    events.unpersist()
    ops.unpersist()
    cases = [_case(r, times) for r in [*unexpected, *duplicates, *reordered]]
    return cases, figures, {r["history"]: r["count"] for r in counted}, summaries


def _indices(r: Any) -> list[str]:
    return [k for k in ("failed_completion", "first_at", "append_invoke", "completion_index") if k in r.asDict()]


def _times(spark: Any, events: Any, wanted: set[tuple[int, int | None]]) -> dict[tuple[int, int], int]:
    from pyspark.sql import functions as F

    pairs = sorted((h, i) for h, i in wanted if i is not None)
    if not pairs:
        return {}
    want = F.broadcast(spark.createDataFrame(pairs, "history int, index long"))
    rows = events.select("history", "index", "time").join(want, ["history", "index"]).collect()
    return {(r["history"], r["index"]): r["time"] for r in rows}


def _case(r: Any, times: dict[tuple[int, int], int]) -> tuple[int, Case]:
    d = r.asDict(recursive=True)
    h = d["history"]

    def t(i: int | None) -> str:
        return format_time(None if i is None else times.get((h, i)))

    who = f"consumer {d['consumer']} of subscription {d['subscription']!r}"
    if "failed_completion" in d:
        failed = d["failed_completion"]
        why = "which no append to this log carried"
        if failed is not None:
            why = f"whose append completed fail at {t(failed)}"
        ops = (failed, d["completion_index"]) if failed is not None else (d["completion_index"],)
        text = f"subscription {d['subscription']!r} delivered {d['value']!r} to consumer {d['consumer']} at "
        text += f"{t(d['completion_index'])} (event {d['completion_index']}), {why}"
        return h, Case("unexpected-delivery", d["log"], ops, text)
    if "first_at" in d:
        text = f"{who} received {d['value']!r} at {t(d['first_at'])} and again at {t(d['completion_index'])}, "
        text += "with no fault since its append was invoked"
        return h, Case("non-persistent-duplicate", d["log"], (d["first_at"], d["completion_index"]), text)
    p = d["previous"]
    text = f"{who} received {p['value']!r} (appended by process {d['producer']} at {t(p['append_invoke'])}) at "
    text += f"{t(p['completion_index'])}, then {d['value']!r}, which the same process appended earlier (at "
    text += f"{t(d['append_invoke'])}), at {t(d['completion_index'])}"
    return h, Case("non-persistent-reorder", d["log"], (p["completion_index"], d["completion_index"]), text)


def _figures(ops: Any, delivered: Any) -> list[tuple[int, NonPersistentFigures]]:
    from pyspark.sql import functions as F

    sub = ["history", "topic", "subscription"]
    types = (
        ops.filter(F.col("f") == "subscribe")
        .groupBy(*sub)
        .agg(F.min_by("subscription_type", "invoke_index").alias("type"))
    )
    base = F.regexp_replace("topic", "-partition-[0-9]+$", "")
    acked = ops.filter((F.col("f") == "append") & (F.col("outcome") == "ok")).select(
        "history", base.alias("topic"), "value"
    )
    sent = acked.groupBy("history", "topic").agg(F.count("*").alias("acknowledged"))
    received = (
        delivered.select(*sub, "value")
        .distinct()
        .join(acked, ["history", "topic", "value"], "left_semi")
        .groupBy(*sub)
        .agg(F.count("*").alias("delivered"))
    )
    counts = delivered.groupBy(*sub).agg(
        F.count("*").alias("deliveries"), F.countDistinct("value").alias("distinct_values")
    )
    rows = (
        types.join(sent, ["history", "topic"], "left")
        .join(received, sub, "left")
        .join(counts, sub, "left")
        .fillna(0, ["acknowledged", "delivered", "deliveries", "distinct_values"])
        .collect()
    )
    return [
        (
            r["history"],
            NonPersistentFigures(
                topic=r["topic"],
                subscription=r["subscription"],
                type=r["type"],
                acknowledged=r["acknowledged"],
                delivered=r["delivered"],
                lost=r["acknowledged"] - r["delivered"],
                deliveries=r["deliveries"],
                duplicates=r["deliveries"] - r["distinct_values"],
            ),
        )
        for r in rows
    ]
