"""The Spark job of subscriptions: the cases and figures of spark/queue_reference.py (its docstring defines them),
computed as a few aggregates and windows over the consumers' operations.

1. Consumers' events by process: each invoke with its completion (lead), as for the logs.
2. Deliveries by (subscription, value): the earliest delivery of each value, which decides whether a delivery is
   first, the duplicates and the lag; the same rows join the appends by value for unexpected-delivery.
3. Drained subscriptions against the acknowledged appends of their topic, less the values they delivered
   (an anti-join): lost-message, or with the drain's message TTL expired-early, and the count of those the TTL
   may have expired per subscription (`expired`).
4. First deliveries by (subscription, consumer, log) and by (subscription, log, key): lag over each gives the
   consecutive pairs of subscription-reorder and key-order; the few key-order candidates whose consumers differ
   are then joined with acks, nacks, closes, fault boundaries and redeliveries, which may excuse them.
5. Figures per (subscription, fault kind): the fault kind of a delivery is a CASE over the few injections
   (collected to the driver); cumulative acks cover positions through a running maximum per (subscription, log).
Only cases and figure rows reach the driver.

Columns are named as in spark/audit.py: the history's number `history`, an operation's `invoke_index` and
`completion_index` (and `completion_time`), its `value` and `position` (a struct (ledger_id, entry_id,
batch_index), which orders like docs/history.md), and for consumers the `subscription`, its `subscription_type`,
the `consumer`, a delivery's `redelivery_count`, `key` and `log` (the partition it came from, else the topic).
"""

from __future__ import annotations

import json
from typing import Any

from spark.history import CONSUMER_OPS, DRAIN_CONSUMER_PREFIX, format_position, format_time
from spark.report import ExpiredFigures, SubscriptionFigures

ORDERED_TYPES = ("Exclusive", "Failover")
NS_PER_S = 1_000_000_000
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
    "message_ttl",
]


def _pos(col: Any) -> Any:
    """A history's position, [ledger_id, entry_id, batch_index], as a struct that orders like it (as spark/audit.py)."""
    from pyspark.sql import functions as F

    return F.struct(col[0].alias("ledger_id"), col[1].alias("entry_id"), col[2].alias("batch_index"))


def has_consumers(events: Any) -> bool:
    """Whether the history holds consumers' operations (a scan of `f` alone: JSON parsing prunes the rest)."""
    from pyspark.sql import functions as F

    return bool(events.select("f").filter(F.col("f").isin(*CONSUMER_OPS)).limit(1).count())


def _ops(events: Any) -> Any:
    """Consumers' operations and appends: invoke fields, and the completion's type, index, time and delivery."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    events = events.filter(F.col("process") != "nemesis")
    by_process = Window.partitionBy("history", "process").orderBy("index")
    completion = F.lead(
        F.struct("index", "time", "type", "value", "position", "redelivery_count", "key", "partition"), 1
    ).over(by_process)
    paired = events.withColumn("completion", completion).filter(F.col("type") == "invoke")
    receive = F.col("f") == "receive"

    def delivered(field: str) -> Any:
        """A receive's field from its completion (the delivery), any other operation's from its invoke."""
        return F.when(receive, F.col(f"completion.{field}")).otherwise(F.col(field))

    return paired.select(
        "history",
        "f",
        "topic",
        "subscription",
        "consumer",
        "subscription_type",
        F.coalesce("cumulative", F.lit(False)).alias("cumulative"),
        F.coalesce("message_ttl", F.lit(0)).cast("long").alias("message_ttl"),
        F.col("index").alias("invoke_index"),
        F.col("time").alias("invoke_time"),
        F.coalesce(F.col("completion.type"), F.lit("info")).alias("outcome"),
        F.col("completion.index").alias("completion_index"),
        F.col("completion.time").alias("completion_time"),
        delivered("value").alias("value"),
        # an append's position is its acknowledgement's
        _pos(F.when(F.col("f") == "append", F.col("completion.position")).otherwise(delivered("position"))).alias(
            "position"
        ),
        F.coalesce(F.col("completion.redelivery_count"), F.lit(0)).alias("redelivery_count"),
        F.when(receive, F.col("completion.key")).alias("key"),
        F.coalesce(delivered("partition"), F.col("topic")).alias("log"),
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
    return df.select("history", candidate.alias("case"), extra.alias("extra")).select("history", "case.*", "extra")


def run(
    spark: Any, events: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[int, int], list[dict[str, Any]]]:
    """(case rows, figure rows, consumer operations per history, expired rows: per drained subscription with a
    message TTL, how many messages it may have expired)."""
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
    per_history = consumer_ops.groupBy("history").agg(F.count("*").alias("operations"))
    counts = {r["history"]: r["operations"] for r in per_history.collect()}
    per_value = _per_value(ops).cache()
    deliveries = _deliveries(per_value, ops).cache()
    undelivered = _undelivered(per_value, ops).cache()
    cases = [
        _unexpected(deliveries),
        _lost(undelivered),
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
    expired_rows = _expired(undelivered, ops)
    wanted = sorted({(r["history"], i) for r in case_rows for i in r["ops"]})
    times: dict[tuple[int, int], int] = {}
    if wanted:
        want = F.broadcast(spark.createDataFrame(wanted, "history int, index long"))
        for r in events.select("history", "index", "time").join(want, ["history", "index"]).collect():
            times[(r["history"], r["index"])] = r["time"]
    for r in case_rows:
        r["times"] = {i: times.get((r["history"], i)) for i in r["ops"]}
    for df in (undelivered, deliveries, per_value, ops, events):
        df.unpersist()
    return case_rows, figure_rows, counts, expired_rows


def _per_value(ops: Any) -> Any:
    """One row per value: its `append` (its topic, outcome, completion and time), its `deliveries`, its
    `confirmed_acks` and the acks and nacks sent of it (`releases`)."""
    from pyspark.sql import functions as F

    delivered = (F.col("f") == "receive") & (F.col("outcome") == "ok")
    return (
        ops.filter(F.col("f").isin("append", "ack", "nack") | delivered)
        .groupBy("history", "value")
        .agg(
            F.max(
                F.when(
                    F.col("f") == "append",
                    F.struct(
                        F.col("topic").alias("append_topic"),
                        F.col("outcome").alias("append_outcome"),
                        F.col("completion_index").alias("append_completion"),
                        F.col("completion_time").alias("append_time"),
                        F.col("invoke_index").alias("append_invoke"),
                        F.col("invoke_time").alias("append_invoke_time"),
                        F.col("position").alias("append_position"),
                    ),
                )
            ).alias("append"),
            F.collect_list(
                F.when(
                    delivered,
                    F.struct(
                        "completion_index",
                        "topic",
                        "subscription",
                        "consumer",
                        "redelivery_count",
                        "log",
                        "position",
                        "key",
                        "completion_time",
                    ),
                )
            ).alias("deliveries"),
            F.collect_list(
                F.when(
                    (F.col("f") == "ack") & (F.col("outcome") == "ok"),
                    F.struct("topic", "subscription", "completion_index"),
                )
            ).alias("confirmed_acks"),
            F.collect_list(F.when(F.col("f").isin("ack", "nack"), F.struct("consumer", "invoke_index"))).alias(
                "releases"
            ),
        )
    )


def _same_subscription(x: Any) -> Any:
    """Whether `x` (a delivery or an ack in a value's lists) is of the row's subscription."""
    from pyspark.sql import functions as F

    return (x["topic"] == F.col("topic")) & (x["subscription"] == F.col("subscription"))


def _deliveries(per_value: Any, ops: Any) -> Any:
    """Every delivery with what its value's other operations say of it: `earliest` (the subscription's first
    delivery of the value), `first` (whether this is it, not redelivered), `confirmed` (its earliest confirmed ack
    on the subscription), `released` (the earliest ack or nack of it by this consumer), `delivered_again` (the
    subscription's next delivery of it), and the append's topic, outcome, completion and time."""
    from pyspark.sql import functions as F

    deliveries = (
        per_value.filter(F.size("deliveries") > 0)
        .select(
            "history",
            "value",
            "append",
            "deliveries",
            "confirmed_acks",
            "releases",
            F.explode("deliveries").alias("delivery"),
        )
        .select("history", "value", "append.*", "deliveries", "confirmed_acks", "releases", "delivery.*")
    )
    completion = F.col("completion_index")
    later = lambda x: _same_subscription(x) & (x["completion_index"] > completion)  # noqa: E731
    deliveries = deliveries.select(
        "*",
        F.array_min(F.transform(F.filter("deliveries", _same_subscription), lambda x: x["completion_index"])).alias(
            "earliest"
        ),
        F.array_min(F.transform(F.filter("deliveries", later), lambda x: x["completion_index"])).alias(
            "delivered_again"
        ),
        F.array_min(F.transform(F.filter("confirmed_acks", _same_subscription), lambda x: x["completion_index"])).alias(
            "confirmed"
        ),
        F.array_min(
            F.transform(F.filter("releases", lambda x: x["consumer"] == F.col("consumer")), lambda x: x["invoke_index"])
        ).alias("released"),
    ).drop("deliveries", "confirmed_acks", "releases")
    types = (
        ops.filter(F.col("f") == "subscribe")
        .groupBy("history", "topic", "subscription")
        .agg(F.min_by("subscription_type", "invoke_index").alias("subscription_type"))
    )
    return deliveries.join(F.broadcast(types), ["history", "topic", "subscription"], "left").withColumn(
        "first", (completion == F.col("earliest")) & (F.col("redelivery_count") == 0)
    )


def _unexpected(deliveries: Any) -> Any:
    from pyspark.sql import functions as F

    first_seen = deliveries.filter(F.col("completion_index") == F.col("earliest"))
    outcome, topic = F.col("append_outcome"), F.col("append_topic")
    unexpected = first_seen.filter(outcome.isNull() | (outcome == "fail") | (topic != F.col("log")))
    failed = (outcome == "fail") & (topic == F.col("log"))
    detail = F.to_json(
        F.struct("subscription", "value", "position", "consumer", failed.alias("failed"), "append_completion")
    )
    candidate = _candidate("unexpected-delivery", F.col("log"), [F.col("completion_index")], detail)
    return _cases(unexpected, candidate, F.when(failed, F.col("append_completion")))


def _drained(ops: Any) -> Any:
    """Per drained subscription: its earliest `ok` drain's completion (`drained`, `drained_time`) and the message
    TTL that drain records (`ttl`, 0: none)."""
    from pyspark.sql import functions as F

    earliest = F.min_by(
        F.struct(
            F.col("completion_index").alias("drained"),
            F.col("completion_time").alias("drained_time"),
            F.col("message_ttl").alias("ttl"),
        ),
        "completion_index",
    )
    return (
        ops.filter((F.col("f") == "drain") & (F.col("outcome") == "ok"))
        .groupBy("history", "topic", "subscription")
        .agg(earliest.alias("d"))
        .select("history", "topic", "subscription", "d.*")
    )


def _undelivered(per_value: Any, ops: Any) -> Any:
    """Acknowledged appends x the drained subscriptions of their topic (few: broadcast) that never delivered them,
    with `may_have_expired`: the drain's TTL passed between the append's invoke and the drain's completion."""
    from pyspark.sql import functions as F

    acked = per_value.filter(F.col("append.append_outcome") == "ok").select(
        "history", "value", "deliveries", "append.*",
        F.regexp_replace("append.append_topic", "-partition-[0-9]+$", "").alias("topic"),
    )  # fmt: skip
    lost = acked.join(F.broadcast(_drained(ops)), ["history", "topic"]).filter(
        ~F.exists("deliveries", _same_subscription)
    )
    ttl, drained_time = F.col("ttl"), F.col("drained_time")
    may = (ttl > 0) & drained_time.isNotNull() & (F.col("append_invoke_time") + ttl * F.lit(NS_PER_S) <= drained_time)
    return lost.drop("deliveries").withColumn("may_have_expired", F.coalesce(may, F.lit(False)))


def _lost(undelivered: Any) -> Any:
    """lost-message where the drain records no TTL; expired-early where it does and the TTL cannot have passed."""
    from pyspark.sql import functions as F

    lost = undelivered.filter(F.col("ttl") == 0)
    detail = F.to_json(F.struct("subscription", "value"))
    ops_shown = [F.col("append_completion"), F.col("drained")]
    early = undelivered.filter((F.col("ttl") > 0) & ~F.col("may_have_expired"))
    early_detail = F.to_json(F.struct("subscription", "value", "ttl", F.col("append_position").alias("position")))
    early_shown = [F.col("append_invoke"), F.col("append_completion"), F.col("drained")]
    return _cases(lost, _candidate("lost-message", F.col("append_topic"), ops_shown, detail)).unionByName(
        _cases(early, _candidate("expired-early", F.col("append_topic"), early_shown, early_detail))
    )


def _expired(undelivered: Any, ops: Any) -> list[dict[str, Any]]:
    """Per drained subscription whose drain records a TTL: the undelivered acknowledged appends it may have
    expired (0 when none)."""
    from pyspark.sql import functions as F

    keys = ["history", "topic", "subscription"]
    counts = undelivered.filter(F.col("may_have_expired")).groupBy(*keys).agg(F.count("*").alias("expired"))
    with_ttl = _drained(ops).filter(F.col("ttl") > 0).select(*keys, "ttl")
    rows = with_ttl.join(counts, keys, "left").select(*keys, "ttl", F.coalesce("expired", F.lit(0)).alias("expired"))
    return [r.asDict() for r in rows.collect()]


def _reordered(deliveries: Any) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    firsts = deliveries.filter(F.col("first") & F.col("subscription_type").isin(*ORDERED_TYPES))
    in_session = Window.partitionBy("history", "topic", "subscription", "consumer", "log").orderBy("completion_index")
    previous = F.lag(F.struct("completion_index", "position", "value"), 1).over(in_session)
    pairs = firsts.withColumn("previous", previous).filter(
        F.col("previous").isNotNull() & (F.col("position") < F.col("previous.position"))
    )
    detail = F.to_json(
        F.struct(
            "subscription",
            "subscription_type",
            "consumer",
            F.col("previous.value").alias("previous_value"),
            F.col("previous.position").alias("previous_position"),
            "value",
            "position",
        )
    )
    ops_shown = [F.col("previous.completion_index"), F.col("completion_index")]
    return _cases(pairs, _candidate("subscription-reorder", F.col("log"), ops_shown, detail))


def _key_order(ops: Any, deliveries: Any, events: Any) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    firsts = deliveries.filter(F.col("first") & (F.col("subscription_type") == "Key_Shared") & F.col("key").isNotNull())
    of_key = Window.partitionBy("history", "topic", "subscription", "log", "key").orderBy("completion_index")
    previous = F.lag(
        F.struct("completion_index", "position", "value", "consumer", "released", "delivered_again"), 1
    ).over(of_key)
    pairs = firsts.withColumn("previous", previous).filter(F.col("previous").isNotNull())
    completion, position = F.col("completion_index"), F.col("position")
    lower = pairs.filter(position < F.col("previous.position")).withColumn("why", F.lit("lower"))
    # A move to another consumer is excused by the previous consumer's ack or nack of its message, or its close,
    # invoked before this delivery completed, by a fault beginning or healing in between, or by the previous
    # message delivered again in between.
    closed = (
        ops.filter(F.col("f") == "close")
        .groupBy("history", F.col("consumer").alias("holder"))
        .agg(F.min("invoke_index").alias("closed"))
    )
    released, again = F.col("previous.released"), F.col("previous.delivered_again")
    moved = (
        pairs.filter((position >= F.col("previous.position")) & (F.col("consumer") != F.col("previous.consumer")))
        .filter(released.isNull() | (released >= completion))
        .filter(again.isNull() | (again >= completion))
        .withColumn("holder", F.col("previous.consumer"))
        .join(F.broadcast(closed), ["history", "holder"], "left")
        .filter(F.col("closed").isNull() | (F.col("closed") >= completion))
    )
    boundaries = events.filter(
        (F.col("process") == "nemesis") & (F.col("f") != "stopped") & F.col("error").isNull()
    ).select(  # other names than `history` and `index`: both sides come from `events`
        F.col("history").alias("boundary_history"), F.col("index").alias("boundary")
    )
    boundary = F.col("boundary")
    moved = moved.join(
        F.broadcast(boundaries),
        (F.col("history") == F.col("boundary_history"))
        & (boundary > F.col("previous.completion_index"))
        & (boundary < completion),
        "left_anti",
    ).withColumn("why", F.lit("held"))
    columns = [
        "history", "log", "subscription", "key", "previous", "completion_index", "position", "value", "consumer", "why",
    ]  # fmt: skip
    both = lower.select(*columns).unionByName(moved.select(*columns))
    shown = ("completion_index", "position", "value", "consumer")
    previous_shown = F.struct(*[F.col("previous")[k].alias(k) for k in shown])
    detail = F.to_json(
        F.struct("subscription", "key", previous_shown.alias("previous"), "value", "position", "consumer", "why")
    )
    ops_shown = [F.col("previous.completion_index"), completion]
    return _cases(both, _candidate("key-order", F.col("log"), ops_shown, detail))


def _fault_kind(events: Any) -> Any:
    """A column expression: the kind of the latest fault injected before `completion_index` in its history ('none'
    first)."""
    from pyspark.sql import functions as F

    injections = (
        events.filter((F.col("process") == "nemesis") & ~F.col("f").isin("heal", "stopped") & F.col("error").isNull())
        .select("history", "index", "f")
        .collect()
    )
    expr = None
    for r in sorted(injections, key=lambda r: (r["history"], -r["index"])):
        cond = (F.col("history") == r["history"]) & (F.col("completion_index") > r["index"])
        expr = F.when(cond, F.lit(r["f"])) if expr is None else expr.when(cond, F.lit(r["f"]))
    return F.lit("none") if expr is None else expr.otherwise(F.lit("none"))


def _figures(ops: Any, deliveries: Any, events: Any) -> list[dict[str, Any]]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    in_drain = F.col("consumer").startswith(DRAIN_CONSUMER_PREFIX)
    deliveries = deliveries.withColumn("fault", F.when(in_drain, F.lit("drain")).otherwise(_fault_kind(events)))
    # Cumulative acks cover every position up to theirs: a running maximum of their positions per (subscription,
    # log) in completion order, scanned only where there are cumulative acks.
    session = ["history", "topic", "subscription", "log"]
    acks_ok = ops.filter((F.col("f") == "ack") & (F.col("outcome") == "ok") & F.col("cumulative"))
    cumulative_acks = acks_ok.select(*session, "completion_index", F.col("position").alias("acked_position"))
    groups = cumulative_acks.select(*session).distinct()
    position_type = cumulative_acks.schema["acked_position"].dataType
    rows = deliveries.join(F.broadcast(groups), session, "left_semi").select(
        *session, "completion_index", "position", F.lit(None).cast(position_type).alias("acked_position")
    )
    earlier = Window.partitionBy(*session).orderBy("completion_index").rowsBetween(Window.unboundedPreceding, -1)
    acked_through = F.col("acked_through")
    scanned = (
        rows.unionByName(cumulative_acks.withColumn("position", F.lit(None).cast(position_type)))
        .withColumn("acked_through", F.max("acked_position").over(earlier))
        .filter(F.col("acked_position").isNull())
        .select(
            "history",
            "topic",
            "subscription",
            "completion_index",
            (acked_through.isNotNull() & (acked_through >= F.col("position"))).alias("cumulatively_acked"),
        )
    )
    deliveries = deliveries.join(scanned, ["history", "topic", "subscription", "completion_index"], "left")
    completion = F.col("completion_index")
    covered = (F.col("confirmed").isNotNull() & (F.col("confirmed") < completion)) | F.coalesce(
        "cumulatively_acked", F.lit(False)
    )
    lag = F.when(
        (completion == F.col("earliest")) & (F.col("append_outcome") == "ok") & F.col("append_time").isNotNull(),
        F.greatest(F.col("completion_time") - F.col("append_time"), F.lit(0)).cast("double") / 1e6,
    )
    deliveries = deliveries.withColumn("lag", lag)
    figures = deliveries.groupBy("history", "topic", "subscription", "fault").agg(
        F.first("subscription_type", ignorenulls=True).alias("subscription_type"),
        F.count("*").alias("deliveries"),
        F.sum(F.col("first").cast("int")).alias("first"),
        F.sum((completion != F.col("earliest")).cast("int")).alias("duplicates"),
        F.sum(covered.cast("int")).alias("after_ack"),
        F.max("redelivery_count").alias("max_redelivery"),
        F.expr("percentile(lag, 0.5)").alias("lag_p50_ms"),
        F.expr("percentile(lag, 0.99)").alias("lag_p99_ms"),
    )
    return [r.asDict() for r in figures.collect()]


def explain(row: dict[str, Any]) -> str:
    d = json.loads(row["detail"])
    t = {i: format_time(tt) for i, tt in row["times"].items()}
    ops = row["ops"]

    def p(x: Any) -> str:
        return format_position(None if x is None else (x["ledger_id"], x["entry_id"], x["batch_index"]))

    name = row["anomaly"]
    if name == "unexpected-delivery":
        why = "whose append completed fail" if d.get("failed") else "which no append to this log carried"
        return (
            f"subscription {d['subscription']!r} delivered {d['value']!r} at {p(d['position'])} to consumer "
            f"{d['consumer']} at "
            f"{t[ops[-1]]}, {why}"
        )
    if name == "expired-early":
        return (
            f"append {d['value']!r} was invoked at {t[ops[0]]} and acknowledged at {p(d['position'])} at {t[ops[1]]}; "
            f"subscription {d['subscription']!r} drained at {t[ops[2]]} without ever delivering it, less than the "
            f"message TTL of {d['ttl']} s after the append: it cannot have expired"
        )
    if name == "lost-message":
        return (
            f"append {d['value']!r} was acknowledged at {t[ops[0]]}; subscription {d['subscription']!r} drained at "
            f"{t[ops[1]]} without ever delivering it"
        )
    if name == "subscription-reorder":
        return (
            f"{d['subscription_type']} subscription {d['subscription']!r} delivered {d['previous_value']!r} at "
            f"{p(d['previous_position'])} to consumer {d['consumer']} at {t[ops[0]]}, then {d['value']!r} at the lower "
            f"position {p(d['position'])} at {t[ops[1]]}"
        )
    previous = d["previous"]
    why = (
        "the later delivery is at a lower position"
        if d["why"] == "lower"
        else f"consumer {previous['consumer']} still held {previous['value']!r} unacknowledged, and no fault came "
        "between"
    )
    return (
        f"Key_Shared subscription {d['subscription']!r}, key {d['key']!r}: {previous['value']!r} at "
        f"{p(previous['position'])} went to consumer {previous['consumer']} at {t[ops[0]]}, then {d['value']!r} at "
        f"{p(d['position'])} to consumer {d['consumer']} at {t[ops[1]]}: {why}"
    )


def figures_of(row: dict[str, Any]) -> SubscriptionFigures:
    subscription = (row["topic"], row["subscription"], row["subscription_type"] or "?", row["fault"])
    return SubscriptionFigures.of(subscription, row, (row["lag_p50_ms"], row["lag_p99_ms"]))


def expired_of(row: dict[str, Any]) -> ExpiredFigures:
    return ExpiredFigures(row["topic"], row["subscription"], row["ttl"], row["expired"])
