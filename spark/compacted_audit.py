"""The Spark job of compacted reads: compacted-stale, compacted-missing and compacted-reorder as
spark/compacted_reference.py defines them, with the same witnesses and explanations.

Only the topics that have an `ok` read-compacted are looked at (a few per run, broadcast). Positions stay arrays,
which Spark orders element by element as the reference orders tuples; an entry is at or before the horizon when
the first two elements of its position are. Each case comes out as a small row and is explained on the driver by
the reference's own sentences.
"""

from __future__ import annotations

from typing import Any

from spark import compacted_reference as ref
from spark.history import COMPACTED_OPS


def has_compacted(events: Any) -> bool:
    """Whether the history has a compacted read (a scan of `f` alone)."""
    from pyspark.sql import functions as F

    return bool(events.select("f").filter(F.col("f").isin(*COMPACTED_OPS)).limit(1).count())


def run(events: Any) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """(case rows: history, anomaly, topic, ops, explanation; read-compacted operations per history)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from spark.scan import read_entries

    ops = events.filter(F.col("process") != "nemesis")
    compacted = ops.filter(F.col("f").isin(*COMPACTED_OPS))
    counts = {
        r["history"]: r["n"]
        for r in compacted.filter(F.col("type") == "invoke").groupBy("history").agg(F.count("*").alias("n")).collect()
    }
    by_process = Window.partitionBy("history", "process").orderBy("index")
    reads = (
        compacted.select(
            "*", F.lag("index").over(by_process).alias("inv_index"), F.lag("type").over(by_process).alias("before")
        )
        .filter((F.col("type") == "ok") & (F.col("before") == "invoke"))
        .select("history", "topic", "inv_index", F.col("index").alias("read_index"), "horizon", "value")
        .cache()
    )
    topics = F.broadcast(reads.select("history", "topic").distinct())
    heads = reads.drop("value")
    appends = _appends(ops.filter(F.col("f") == "append").join(topics, ["history", "topic"], "left_semi"))
    # The earliest ok read (or read-compacted) showing each value there, its lowest position in that read.
    shown = (
        ops.filter(F.col("f").isin("read", *COMPACTED_OPS) & (F.col("type") == "ok"))
        .join(topics, ["history", "topic"], "left_semi")
        .select("history", "topic", "index", F.explode(read_entries("value")).alias("e"))
        .groupBy("history", "topic", F.col("e.value").alias("value"))
        .agg(F.min(F.struct("index", F.col("e.position").alias("position"))).alias("first"))
    )
    known = (
        appends.join(shown, ["history", "topic", "value"], "left")
        .withColumn("kpos", F.coalesce("ack_position", "first.position"))
        .withColumn("kevent", F.coalesce("ack_index", "first.index"))
        .drop("first")
        .cache()
    )
    by_key = known.filter(F.col("key").isNotNull() & F.col("kpos").isNotNull())
    hidden = (
        known.filter(
            F.col("key").isNotNull() & F.col("tombstone") & (F.col("outcome") == "info") & F.col("kpos").isNull()
        )
        .select("history", "topic", "key")
        .distinct()
    )

    def upto(position: str) -> Any:
        return F.col("horizon").isNotNull() & (F.slice(position, 1, 2) <= F.col("horizon"))

    # A read's entries at or before its horizon of keyed values appended to its topic, in the read's order.
    entries = reads.select(
        "history", "topic", "inv_index", "read_index", "horizon", F.posexplode(read_entries("value")).alias("ord", "e")
    ).withColumn("value", F.col("e.value"))
    keyed = known.select("history", "topic", "value", "key", "kpos").filter(F.col("key").isNotNull())
    before = entries.filter(upto("e.position")).join(keyed, ["history", "topic", "value"])
    per_key = before.groupBy("history", "topic", "inv_index", "read_index", "horizon", "key").agg(
        F.sort_array(F.collect_list(F.struct("ord", "e", "kpos"))).alias("shown")
    )
    twice = per_key.filter(F.size("shown") > 1)
    once = per_key.filter(F.size("shown") == 1).select("*", F.col("shown")[0].alias("one"))
    later = (
        once.join(
            by_key.select("history", "topic", "key", F.col("value").alias("w"), "kpos", "kevent"),
            ["history", "topic", "key"],
        )
        .filter((F.col("kpos") > F.col("one.kpos")) & upto("kpos"))
        .groupBy("history", "topic", "read_index", "horizon", "key", "one")
        .agg(F.max(F.struct("kpos", "w", "kevent")).alias("last"))
    )
    last = (
        heads.join(by_key, ["history", "topic"])
        .filter(upto("kpos"))
        .groupBy("history", "topic", "inv_index", "read_index", "horizon", "key")
        .agg(F.max(F.struct("kpos", "value", "kevent", "outcome", "tombstone")).alias("last"))
        .filter((F.col("last.outcome") == "ok") & ~F.col("last.tombstone"))
        .join(per_key.select("history", "read_index", "key"), ["history", "read_index", "key"], "left_anti")
        .join(hidden, ["history", "topic", "key"], "left_anti")
    )
    # After the horizon: every acknowledged append, tombstones included, in the topic's order (the raw topic): those
    # acknowledged before the read began, and those racing it that it read past (below the highest position shown).
    tail = entries.filter(~F.coalesce(upto("e.position"), F.lit(False)))
    reach = tail.groupBy("history", "read_index").agg(F.max("e.position").alias("reach"))
    read_past = F.coalesce(F.col("ack_position") < F.col("reach"), F.lit(False))
    passed = (F.col("ack_index") < F.col("inv_index")) | read_past
    after = (
        heads.join(reach, ["history", "read_index"], "left")
        .join(known.filter(F.col("outcome") == "ok"), ["history", "topic"])
        .filter(passed & ~F.coalesce(upto("ack_position"), F.lit(False)))
        .join(tail.select("history", "read_index", "value"), ["history", "read_index", "value"], "left_anti")
    )
    in_read = Window.partitionBy("history", "read_index").orderBy("ord")
    reordered = (
        tail.select("*", F.lag("e").over(in_read).alias("prev"))
        .filter(F.col("e.position") < F.col("prev.position"))
        .groupBy("history", "topic", "inv_index", "read_index", "horizon")
        .agg(F.min(F.struct("ord", "prev", "e")).alias("first"))
    )

    # One collect for the five kinds of case: each as its kind, the witness's two events, and the key, values and
    # positions its sentence names.
    def row(kind: str, a: str, b: str, key: str | None, v1: str, p1: str, v2: str | None, p2: str | None) -> Any:
        def col(name: str | None, kind: str) -> Any:
            return F.lit(None).cast(kind) if name is None else F.expr(name)

        return F.struct(
            F.lit(kind).alias("kind"),
            F.expr(a).alias("a"),
            F.expr(b).alias("b"),
            col(key, "string").alias("key"),
            F.expr(v1).alias("v1"),
            F.expr(p1).alias("p1"),
            col(v2, "string").alias("v2"),
            col(p2, "array<long>").alias("p2"),
        ).alias("c")

    first, second = "shown[0].e", "shown[1].e"
    found = [
        twice.select(
            "history",
            "topic",
            "horizon",
            row(
                "twice",
                "inv_index",
                "read_index",
                "key",
                f"{first}.value",
                f"{first}.position",
                f"{second}.value",
                f"{second}.position",
            ),
        ),
        later.select(
            "history",
            "topic",
            "horizon",
            row("replaced", "read_index", "last.kevent", "key", "one.e.value", "one.kpos", "last.w", "last.kpos"),
        ),
        last.select(
            "history",
            "topic",
            "horizon",
            row("key", "last.kevent", "read_index", "key", "last.value", "last.kpos", None, None),
        ),
        after.select(
            "history",
            "topic",
            "horizon",
            row("after", "ack_index", "read_index", None, "value", "ack_position", None, None),
        ),
        reordered.select(
            "history",
            "topic",
            "horizon",
            row(
                "reordered",
                "inv_index",
                "read_index",
                None,
                "first.prev.value",
                "first.prev.position",
                "first.e.value",
                "first.e.position",
            ),
        ),
    ]
    union = found[0]
    for df in found[1:]:
        union = union.unionByName(df)
    rows = [_case(r) for r in union.collect()]
    reads.unpersist()
    known.unpersist()
    return rows, counts


def _case(r: Any) -> dict[str, Any]:
    """A case row, explained by the reference's sentence for its kind."""
    c, horizon = r["c"], r["horizon"]
    kind, first, second = c["kind"], (c["v1"], c["p1"]), (c["v2"], c["p2"])
    if kind == "twice":
        anomaly, why = ref.STALE, ref.explain_twice(c["key"], first, second, horizon)
    elif kind == "replaced":
        anomaly, why = ref.STALE, ref.explain_replaced(c["key"], first, second, horizon)
    elif kind == "key":
        anomaly, why = ref.MISSING, ref.explain_key_missing(c["key"], first, horizon)
    elif kind == "reordered":
        anomaly, why = ref.REORDER, ref.explain_reordered(first, second, horizon)
    else:
        anomaly, why = ref.MISSING, ref.explain_after_missing(c["v1"], c["p1"], horizon)
    witness = sorted((int(c["a"]), int(c["b"])))
    return {"history": r["history"], "anomaly": anomaly, "topic": r["topic"], "ops": witness, "explanation": why}


def _appends(events: Any) -> Any:
    """One row per append: its topic, value, key, tombstone, outcome (an invoke never completed: info) and, if `ok`,
    its ack's index and position. A process's next append event after an invoke is its completion."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("history", "process").orderBy("index")
    nxt = events.select(
        "*",
        F.lead("type").over(w).alias("next_type"),
        F.lead("index").over(w).alias("next_index"),
        F.lead("position").over(w).alias("next_position"),
    )
    done = F.col("next_type").isin("ok", "fail", "info")
    ok = F.col("next_type") == "ok"
    return nxt.filter(F.col("type") == "invoke").select(
        "history",
        "topic",
        "value",
        "key",
        F.coalesce("tombstone", F.lit(False)).alias("tombstone"),
        F.when(done, F.col("next_type")).otherwise("info").alias("outcome"),
        F.when(ok, F.col("next_index")).alias("ack_index"),
        F.when(ok, F.col("next_position")).alias("ack_position"),
    )
