"""The Spark job of subscriptions: the cases and figures of spark/queue_reference.py (its docstring defines them),
computed as a few aggregates and windows over the consumers' operations.

1. Consumers' events by process: each invoke with its completion (lead), as for the logs.
2. Deliveries by (subscription, value): the earliest delivery of each value, which decides whether a delivery is
   first, the duplicates and the lag; the same rows join the appends by value for unexpected-delivery.
3. Drained subscriptions against the acknowledged appends of their topic, less the values they delivered
   (an anti-join): lost-message.
4. First deliveries by (subscription, consumer, log) and by (subscription, log, key): lag over each gives the
   consecutive pairs of subscription-reorder and key-order; the few key-order candidates whose consumers differ
   are then joined with acks, nacks, closes, fault boundaries and redeliveries, which may excuse them.
5. Figures per (subscription, fault kind): the fault kind of a delivery is a CASE over the few injections
   (collected to the driver); cumulative acks cover positions through a running maximum per (subscription, log).
Only cases and figure rows reach the driver.
"""

from __future__ import annotations

import json
from typing import Any

from spark.history import CONSUMER_OPS, format_position, format_time
from spark.report import SubscriptionFigures

ORDERED_TYPES = ("Exclusive", "Failover")
NEEDED = [
    "history",
    "index",
    "time",
    "process",
    "type",
    "f",
    "topic",
    "value",
    "position",
    "subscription",
    "consumer",
    "subscription_type",
    "key",
    "partition",
    "redelivery_count",
    "cumulative",
    "error",
]


def _pos(col: Any) -> Any:
    from pyspark.sql import functions as F

    return F.struct(col[0].alias("l"), col[1].alias("e"), col[2].alias("b"))


def has_consumers(events: Any) -> bool:
    """Whether the history holds consumers' operations (a scan of `f` alone: JSON parsing prunes the rest)."""
    from pyspark.sql import functions as F

    return bool(events.select("f").filter(F.col("f").isin(*CONSUMER_OPS)).limit(1).count())


def _ops(events: Any) -> Any:
    """Consumers' operations and appends: invoke fields, and the completion's type, index, time and delivery."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ev = events.filter(F.col("process") != "nemesis")
    w = Window.partitionBy("history", "process").orderBy("index")
    nxt = F.lead(F.struct("index", "time", "type", "value", "position", "redelivery_count", "key", "partition"), 1)
    paired = ev.withColumn("nxt", nxt.over(w)).filter(F.col("type") == "invoke")
    receive = F.col("f") == "receive"
    return paired.select(
        "history",
        "f",
        "topic",
        F.col("subscription").alias("sub"),
        "consumer",
        F.col("subscription_type").alias("stype"),
        F.coalesce("cumulative", F.lit(False)).alias("cumulative"),
        F.col("index").alias("inv"),
        F.coalesce(F.col("nxt.type"), F.lit("info")).alias("outcome"),
        F.col("nxt.index").alias("cmp"),
        F.col("nxt.time").alias("cmp_time"),
        F.when(receive, F.col("nxt.value")).otherwise(F.col("value")).alias("val"),
        _pos(F.when(receive, F.col("nxt.position")).otherwise(F.col("position"))).alias("pos"),
        F.coalesce(F.col("nxt.redelivery_count"), F.lit(0)).alias("rc"),
        F.when(receive, F.col("nxt.key")).alias("key"),
        F.coalesce(F.when(receive, F.col("nxt.partition")).otherwise(F.col("partition")), F.col("topic")).alias("log"),
    )


def _candidate(name: str, log: Any, ops: list[Any], detail: Any) -> Any:
    from pyspark.sql import functions as F

    return F.struct(
        F.lit(name).alias("anomaly"),
        log.alias("topic"),
        F.array(*[o.cast("long") for o in ops]).alias("ops"),
        detail.alias("detail"),
    )


def _cases(df: Any, candidate: Any, extra: Any = None) -> Any:
    from pyspark.sql import functions as F

    extra = F.lit(None).cast("long") if extra is None else extra
    return df.select("history", candidate.alias("c"), extra.alias("extra")).select("history", "c.*", "extra")


def run(spark: Any, events: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[int, int]]:
    """(case rows, figure rows, consumer operations per history)."""
    from pyspark.sql import functions as F

    # What this job reads, parsed once and kept: consumers' events, appends and the nemesis's events (the rest of
    # the history, reads above all, is the log checks' alone).
    events = (
        events.filter(F.col("f").isin(*CONSUMER_OPS, "append") | (F.col("process") == "nemesis"))
        .select(*NEEDED)
        .cache()
    )
    ops = _ops(events).cache()
    consumer_ops = ops.filter(F.col("f") != "append")
    counts = {r["history"]: r["n"] for r in consumer_ops.groupBy("history").agg(F.count("*").alias("n")).collect()}
    per_value = _per_value(ops).cache()
    deliveries = _deliveries(per_value, ops).cache()
    cases = [
        _unexpected(deliveries),
        _lost(per_value, ops),
        _reordered(deliveries),
        _key_order(ops, deliveries, events),
    ]
    found = cases[0]
    for part in cases[1:]:
        found = found.unionByName(part)
    case_rows = [r.asDict(recursive=True) for r in found.collect()]
    for r in case_rows:  # a failed append's completion joins the witness of its delivery
        extra = r.pop("extra")
        if extra is not None:
            r["ops"] = [extra, *r["ops"]]
    figure_rows = _figures(ops, deliveries, events)
    wanted = sorted({(r["history"], i) for r in case_rows for i in r["ops"]})
    times: dict[tuple[int, int], int] = {}
    if wanted:
        want = F.broadcast(spark.createDataFrame(wanted, "history int, index long"))
        for r in events.select("history", "index", "time").join(want, ["history", "index"]).collect():
            times[(r["history"], r["index"])] = r["time"]
    for r in case_rows:
        r["times"] = {i: times.get((r["history"], i)) for i in r["ops"]}
    for df in (deliveries, per_value, ops, events):
        df.unpersist()
    return case_rows, figure_rows, counts


def _per_value(ops: Any) -> Any:
    """One row per value: its append (`app`), its deliveries (`dels`), its confirmed acks (`oks`) and the acks and
    nacks sent of it (`sent`)."""
    from pyspark.sql import functions as F

    delivered = (F.col("f") == "receive") & (F.col("outcome") == "ok")
    return (
        ops.filter(F.col("f").isin("append", "ack", "nack") | delivered)
        .groupBy("history", "val")
        .agg(
            F.max(
                F.when(
                    F.col("f") == "append",
                    F.struct(
                        F.col("topic").alias("atopic"),
                        F.col("outcome").alias("aout"),
                        F.col("cmp").alias("acmp"),
                        F.col("cmp_time").alias("atime"),
                    ),
                )
            ).alias("app"),
            F.collect_list(
                F.when(delivered, F.struct("cmp", "topic", "sub", "consumer", "rc", "log", "pos", "key", "cmp_time"))
            ).alias("dels"),
            F.collect_list(
                F.when((F.col("f") == "ack") & (F.col("outcome") == "ok"), F.struct("topic", "sub", "cmp"))
            ).alias("oks"),
            F.collect_list(F.when(F.col("f").isin("ack", "nack"), F.struct("consumer", "inv"))).alias("sent"),
        )
    )


def _deliveries(per_value: Any, ops: Any) -> Any:
    """Every delivery with what its value's other operations say of it: `earliest` (the subscription's first
    delivery of the value), `first`, `confirmed` (its earliest confirmed ack on the subscription), `released` (the
    earliest ack or nack of it by this consumer), `again` (the subscription's next delivery of it), and the
    append's topic, outcome, completion and time."""
    from pyspark.sql import functions as F

    d = (
        per_value.filter(F.size("dels") > 0)
        .select("history", "val", "app", "dels", "oks", "sent", F.explode("dels").alias("d"))
        .select("history", "val", "app.*", "dels", "oks", "sent", "d.*")
    )
    same_sub = lambda x: (x["topic"] == F.col("topic")) & (x["sub"] == F.col("sub"))  # noqa: E731
    d = d.select(
        "*",
        F.array_min(F.transform(F.filter("dels", same_sub), lambda x: x["cmp"])).alias("earliest"),
        F.array_min(
            F.transform(F.filter("dels", lambda x: same_sub(x) & (x["cmp"] > F.col("cmp"))), lambda x: x["cmp"])
        ).alias("again"),
        F.array_min(F.transform(F.filter("oks", same_sub), lambda x: x["cmp"])).alias("confirmed"),
        F.array_min(
            F.transform(F.filter("sent", lambda x: x["consumer"] == F.col("consumer")), lambda x: x["inv"])
        ).alias("released"),
    ).drop("dels", "oks", "sent")
    types = (
        ops.filter(F.col("f") == "subscribe")
        .groupBy("history", "topic", "sub")
        .agg(F.min_by("stype", "inv").alias("stype"))
    )
    return d.join(F.broadcast(types), ["history", "topic", "sub"], "left").withColumn(
        "first", (F.col("cmp") == F.col("earliest")) & (F.col("rc") == 0)
    )


def _unexpected(deliveries: Any) -> Any:
    from pyspark.sql import functions as F

    first_seen = deliveries.filter(F.col("cmp") == F.col("earliest"))
    bad = first_seen.filter(F.col("aout").isNull() | (F.col("aout") == "fail") | (F.col("atopic") != F.col("log")))
    failed = (F.col("aout") == "fail") & (F.col("atopic") == F.col("log"))
    detail = F.to_json(F.struct("sub", "val", "pos", "consumer", failed.alias("failed"), "acmp"))
    return _cases(
        bad, _candidate("unexpected-delivery", F.col("log"), [F.col("cmp")], detail), F.when(failed, F.col("acmp"))
    )


def _lost(per_value: Any, ops: Any) -> Any:
    """Acknowledged appends x the drained subscriptions of their topic (few: broadcast) that never delivered them."""
    from pyspark.sql import functions as F

    drained = (
        ops.filter((F.col("f") == "drain") & (F.col("outcome") == "ok"))
        .groupBy("history", "topic", "sub")
        .agg(F.min("cmp").alias("drained"))
    )
    acked = per_value.filter(F.col("app.aout") == "ok").select(
        "history", "val", "dels", F.col("app.atopic").alias("atopic"), F.col("app.acmp").alias("acmp"),
        F.regexp_replace("app.atopic", "-partition-[0-9]+$", "").alias("topic"),
    )  # fmt: skip
    lost = acked.join(F.broadcast(drained), ["history", "topic"]).filter(
        ~F.exists("dels", lambda x: (x["topic"] == F.col("topic")) & (x["sub"] == F.col("sub")))
    )
    detail = F.to_json(F.struct("sub", "val"))
    return _cases(lost, _candidate("lost-message", F.col("atopic"), [F.col("acmp"), F.col("drained")], detail))


def _reordered(deliveries: Any) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    firsts = deliveries.filter(F.col("first") & F.col("stype").isin(*ORDERED_TYPES))
    w = Window.partitionBy("history", "topic", "sub", "consumer", "log").orderBy("cmp")
    pairs = firsts.withColumn("prev", F.lag(F.struct("cmp", "pos", "val"), 1).over(w)).filter(
        F.col("prev").isNotNull() & (F.col("pos") < F.col("prev.pos"))
    )
    detail = F.to_json(
        F.struct("sub", "stype", "consumer", F.col("prev.val").alias("v1"), F.col("prev.pos").alias("p1"), "val", "pos")
    )
    return _cases(pairs, _candidate("subscription-reorder", F.col("log"), [F.col("prev.cmp"), F.col("cmp")], detail))


def _key_order(ops: Any, deliveries: Any, events: Any) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    firsts = deliveries.filter(F.col("first") & (F.col("stype") == "Key_Shared") & F.col("key").isNotNull())
    w = Window.partitionBy("history", "topic", "sub", "log", "key").orderBy("cmp")
    prev = F.lag(F.struct("cmp", "pos", "val", "consumer", "released", "again"), 1)
    pairs = firsts.withColumn("prev", prev.over(w)).filter(F.col("prev").isNotNull())
    lower = pairs.filter(F.col("pos") < F.col("prev.pos")).withColumn("why", F.lit("lower"))
    # A move to another consumer is excused by the previous consumer's ack or nack of its message, or its close,
    # invoked before this delivery completed, by a fault beginning or healing in between, or by the previous
    # message delivered again in between.
    closed = (
        ops.filter(F.col("f") == "close")
        .groupBy("history", F.col("consumer").alias("holder"))
        .agg(F.min("inv").alias("closed"))
    )
    moved = (
        pairs.filter((F.col("pos") >= F.col("prev.pos")) & (F.col("consumer") != F.col("prev.consumer")))
        .filter(F.col("prev.released").isNull() | (F.col("prev.released") >= F.col("cmp")))
        .filter(F.col("prev.again").isNull() | (F.col("prev.again") >= F.col("cmp")))
        .withColumn("holder", F.col("prev.consumer"))
        .join(F.broadcast(closed), ["history", "holder"], "left")
        .filter(F.col("closed").isNull() | (F.col("closed") >= F.col("cmp")))
    )
    boundaries = events.filter(
        (F.col("process") == "nemesis") & (F.col("f") != "stopped") & F.col("error").isNull()
    ).select(  # other names than `history` and `index`: both sides come from `events`
        F.col("history").alias("boundary_history"), F.col("index").alias("boundary")
    )
    boundary = F.col("boundary")
    moved = moved.join(
        F.broadcast(boundaries),
        (F.col("history") == F.col("boundary_history")) & (boundary > F.col("prev.cmp")) & (boundary < F.col("cmp")),
        "left_anti",
    ).withColumn("why", F.lit("held"))
    cols = ["history", "log", "sub", "key", "prev", "cmp", "pos", "val", "consumer", "why"]
    both = lower.select(*cols).unionByName(moved.select(*cols))
    prev_shown = F.struct(*[F.col("prev")[k].alias(k) for k in ("cmp", "pos", "val", "consumer")])
    detail = F.to_json(F.struct("sub", "key", prev_shown.alias("prev"), "val", "pos", "consumer", "why"))
    return _cases(both, _candidate("key-order", F.col("log"), [F.col("prev.cmp"), F.col("cmp")], detail))


def _fault_kind(events: Any) -> Any:
    """A column expression: the kind of the latest fault injected before `cmp` in its history ('none' first)."""
    from pyspark.sql import functions as F

    injections = (
        events.filter((F.col("process") == "nemesis") & ~F.col("f").isin("heal", "stopped") & F.col("error").isNull())
        .select("history", "index", "f")
        .collect()
    )
    expr = None
    for r in sorted(injections, key=lambda r: (r["history"], -r["index"])):
        cond = (F.col("history") == r["history"]) & (F.col("cmp") > r["index"])
        expr = F.when(cond, F.lit(r["f"])) if expr is None else expr.when(cond, F.lit(r["f"]))
    return F.lit("none") if expr is None else expr.otherwise(F.lit("none"))


def _figures(ops: Any, deliveries: Any, events: Any) -> list[dict[str, Any]]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    d = deliveries.withColumn("fault", _fault_kind(events))
    # Cumulative acks cover every position up to theirs: a running maximum of their positions per (subscription,
    # log) in completion order, scanned only where there are cumulative acks.
    acks_ok = ops.filter((F.col("f") == "ack") & (F.col("outcome") == "ok") & F.col("cumulative"))
    cum = acks_ok.select("history", "topic", "sub", "log", "cmp", F.col("pos").alias("cpos"))
    groups = cum.select("history", "topic", "sub", "log").distinct()
    pos_type = cum.schema["cpos"].dataType
    rows = d.join(F.broadcast(groups), ["history", "topic", "sub", "log"], "left_semi").select(
        "history", "topic", "sub", "log", "cmp", "pos", F.lit(None).cast(pos_type).alias("cpos")
    )
    w = Window.partitionBy("history", "topic", "sub", "log").orderBy("cmp").rowsBetween(Window.unboundedPreceding, -1)
    scanned = (
        rows.unionByName(cum.withColumn("pos", F.lit(None).cast(pos_type)))
        .withColumn("reach", F.max("cpos").over(w))
        .filter(F.col("cpos").isNull())
        .select(
            "history",
            "topic",
            "sub",
            "cmp",
            (F.col("reach").isNotNull() & (F.col("reach") >= F.col("pos"))).alias("cumcov"),
        )
    )
    d = d.join(scanned, ["history", "topic", "sub", "cmp"], "left")
    covered = (F.col("confirmed").isNotNull() & (F.col("confirmed") < F.col("cmp"))) | F.coalesce(
        "cumcov", F.lit(False)
    )
    lag = F.when(
        (F.col("cmp") == F.col("earliest")) & (F.col("aout") == "ok") & F.col("atime").isNotNull(),
        F.greatest(F.col("cmp_time") - F.col("atime"), F.lit(0)).cast("double") / 1e6,
    )
    d = d.withColumn("lag", lag)
    figures = d.groupBy("history", "topic", "sub", "fault").agg(
        F.first("stype", ignorenulls=True).alias("stype"),
        F.count("*").alias("deliveries"),
        F.sum(F.col("first").cast("int")).alias("first"),
        F.sum((F.col("cmp") != F.col("earliest")).cast("int")).alias("duplicates"),
        F.sum(covered.cast("int")).alias("after_ack"),
        F.max("rc").alias("max_redelivery"),
        F.expr("percentile(lag, 0.5)").alias("lag_p50_ms"),
        F.expr("percentile(lag, 0.99)").alias("lag_p99_ms"),
    )
    return [r.asDict() for r in figures.collect()]


def explain(row: dict[str, Any]) -> str:
    d = json.loads(row["detail"])
    t = {i: format_time(tt) for i, tt in row["times"].items()}
    ops = row["ops"]

    def p(x: Any) -> str:
        return format_position(None if x is None else (x["l"], x["e"], x["b"]))

    name = row["anomaly"]
    if name == "unexpected-delivery":
        why = "whose append completed fail" if d.get("failed") else "which no append to this log carried"
        return (
            f"subscription {d['sub']!r} delivered {d['val']!r} at {p(d['pos'])} to consumer {d['consumer']} at "
            f"{t[ops[-1]]}, {why}"
        )
    if name == "lost-message":
        return (
            f"append {d['val']!r} was acknowledged at {t[ops[0]]}; subscription {d['sub']!r} drained at "
            f"{t[ops[1]]} without ever delivering it"
        )
    if name == "subscription-reorder":
        return (
            f"{d['stype']} subscription {d['sub']!r} delivered {d['v1']!r} at {p(d['p1'])} to consumer {d['consumer']} "
            f"at {t[ops[0]]}, then {d['val']!r} at the lower position {p(d['pos'])} at {t[ops[1]]}"
        )
    prev = d["prev"]
    why = (
        "the later delivery is at a lower position"
        if d["why"] == "lower"
        else f"consumer {prev['consumer']} still held {prev['val']!r} unacknowledged, and no fault came between"
    )
    return (
        f"Key_Shared subscription {d['sub']!r}, key {d['key']!r}: {prev['val']!r} at {p(prev['pos'])} went to consumer "
        f"{prev['consumer']} at {t[ops[0]]}, then {d['val']!r} at {p(d['pos'])} to consumer {d['consumer']} at "
        f"{t[ops[1]]}: {why}"
    )


def figures_of(row: dict[str, Any]) -> SubscriptionFigures:
    subscription = (row["topic"], row["sub"], row["stype"] or "?", row["fault"])
    return SubscriptionFigures.of(subscription, row, (row["lag_p50_ms"], row["lag_p99_ms"]))
