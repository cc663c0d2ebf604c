"""The audit's screen: cheap fixed-width aggregates over the whole history that find the topics that may be wrong.

Every anomaly of docs/history.md belongs to one topic, so the exact job (spark/audit.py `run_checks`, which computes
the minimal witnesses) only needs the topics the screen flags; for a valid history it does not run at all. The
screen decides "may this topic hold an anomaly?" with long integers only, so that Spark aggregates in hash
tables and shuffles narrow rows:

- a position (ledger_id, entry_id, batch_index) becomes one long, the three packed with as many bits as the
  history's largest values need (so the packed order is the lexicographic order); a history whose positions do not
  fit in 63 bits is not screened (the exact job audits all of it);
- a topic becomes xxhash64(topic), its `topic_id`; two topic names with one hash in a history also mean "not
  screened".

Three shuffles of narrow rows:
1. events by process: invokes paired with their completions (lead), as in the exact job;
2. appends and read entries by value: per value the number of appends, their outcome, the lowest and highest
   position it was observed at, the highest position that follows it in a read, its topics and a bit per final
   read of its topic that shows it. Flags: phantom-read (read, no append), failed-write-visible (read, append
   failed), duplicate-value and divergent-read (a) (two positions), lost-write (a final read's bit missing);
   a value in two topics flags the whole history (the exact job's joins by value cross topics);
3. one row per value by (topic, position bucket): two values at one position flag duplicate-position and
   divergent-read (b); with the positions sorted, a read that goes from a to b with the successor of a below b
   flags gap. Once no value has two positions, the values' positions are exactly the topic's known positions.
Plus, over the operations by (topic, index bucket), the two-level running maxima of the exact job on longs
(spark/scan.py; realtime-reorder, stale-read, nonmonotonic-read), and over each process's acks nonmonotonic-append.

Columns are named as in spark/audit.py (`history`, `invoke_index`, `completion_index`, `value`, `position`,
`highest_position`, `cut_by_limit`, and in the running maxima `ack`, `read_reach`, `query_position`, `start`,
`query_reach`), but every position here is a packed long.

Each flag is implied by its anomaly's definition in spark/reference.py, so the screen never misses a topic the
exact job would report (the Spark tests compare the two paths with the reference checker on every corpus
history); a flagged topic without an anomaly only costs the exact job's time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spark.scan import read_entries, running_maxima

# Buckets of the two-level scans, as in spark/audit.py: 2**POS_BUCKET_BITS entries of a ledger per position
# bucket, 2**INDEX_BUCKET_BITS events per index bucket.
POS_BUCKET_BITS = 12
INDEX_BUCKET_BITS = 14
# Final reads per topic that get a bit of their own in the lost-write mask (a long); a topic with more final
# reads is flagged and checked exactly.
MAX_FINALS = 62


# The exact job's families of checks (spark/audit.py), each flagged by its own part of the screen:
# nonmonotonic-append by the acks of each process, duplicate-position, divergent-read (b) and gap by the positions,
# realtime-reorder, stale-read and nonmonotonic-read by the running maxima, and the anomalies of one value
# (duplicate-value, phantom-read, failed-write-visible, divergent-read (a), lost-write) by the values. The positions'
# flags assume each value has one position, which only the values' flags check: a topic flagged by its values
# gets every family.
FAMILIES = ("process", "position", "scan", "value")


@dataclass
class Screened:
    """The screen's answer: topic summaries, and the (history, topic) pairs the exact job must audit with the families
    of checks each needs."""

    summary: list[dict[str, Any]]
    suspects: dict[tuple[int, str], frozenset[str]] = field(default_factory=dict)


def _bits(n: int | None) -> int:
    return 0 if not n else int(n).bit_length()


def screen(events: Any) -> Screened | None:
    """Screen `events` (spark/audit.py `load`); None if the history cannot be screened (audit it exactly)."""
    from pyspark.sql import functions as F

    f, kind = F.col("f"), F.col("type")
    read_ok = (f == "read") & (kind == "ok")
    base = (
        events.filter(F.col("process") != "nemesis")
        .select(
            "history",
            F.col("process").cast("long").alias("process"),
            "index",
            "type",
            "f",
            "topic",
            F.xxhash64("topic").alias("topic_id"),
            F.when((f == "append") & (kind == "invoke"), F.col("value")).alias("value"),
            F.when((f == "append") & (kind == "ok"), F.col("position")).alias("position"),
            F.col("from").alias("start"),
            "limit",
            F.coalesce("final", F.lit(False)).alias("final"),
            F.when(read_ok, read_entries(F.col("value"))).alias("entries"),
        )
        .cache()
    )
    try:
        return _screen(base)
    finally:
        base.unpersist()


def _screen(base: Any) -> Screened | None:
    from pyspark.sql import functions as F

    f, kind = F.col("f"), F.col("type")

    def count(cond: Any) -> Any:
        return F.sum(cond.cast("long"))

    def widest(i: int) -> Any:  # read entries are not scanned here: one beyond these widths flags its topic
        return F.max(F.greatest(F.col("position")[i], F.col("start")[i]))

    rows = (
        base.groupBy("history", "topic", "topic_id")
        .agg(
            count(kind == "invoke").alias("ops"),
            count((f == "append") & (kind == "ok")).alias("appends_ok"),
            count((f == "append") & (kind == "fail")).alias("appends_fail"),
            count((f == "append") & (kind == "invoke")).alias("appends"),
            count((f == "read") & (kind == "invoke")).alias("reads"),
            widest(0).alias("widest_ledger_id"),
            widest(1).alias("widest_entry_id"),
            widest(2).alias("widest_batch_index"),
        )
        .collect()
    )
    summary = [
        {
            "history": r["history"],
            "topic": r["topic"],
            "ops": r["ops"],
            "appends_ok": r["appends_ok"],
            "appends_fail": r["appends_fail"],
            "appends_info": r["appends"] - r["appends_ok"] - r["appends_fail"],
            "reads": r["reads"],
        }
        for r in rows
    ]
    names = {(r["history"], r["topic_id"]): r["topic"] for r in rows}
    ledger_bits, entry_bits, batch_bits = (
        _bits(max((r[f"widest_{k}"] or 0 for r in rows), default=0)) for k in ("ledger_id", "entry_id", "batch_index")
    )
    if len(names) < len(rows) or ledger_bits + entry_bits + batch_bits > 63:
        return None  # two topics share a hash, or positions do not pack into a long

    def pack(p: Any) -> Any:
        return F.shiftleft(p[0], entry_bits + batch_bits).bitwiseOR(F.shiftleft(p[1], batch_bits)).bitwiseOR(p[2])

    def wider(p: Any) -> Any:
        """Whether position p does not fit the packing (only a read entry can: the widths come from the rest)."""
        return (
            (F.shiftright(p[0], ledger_bits) != 0)
            | (F.shiftright(p[1], entry_bits) != 0)
            | (F.shiftright(p[2], batch_bits) != 0)
        )

    # The operations and the per-value table are read by several checks: cached, each is computed once (column
    # pruning would otherwise make every branch its own, unshared shuffle).
    ops = _ops(base, pack).cache()
    try:
        flags, per_value = _flags(base, ops, pack, wider, pos_bucket_shift=batch_bits + POS_BUCKET_BITS)
        try:
            found = flags.collect()
        finally:
            per_value.unpersist()
    finally:
        ops.unpersist()
    flagged: dict[tuple[int, str], set[str]] = {}
    for r in found:
        if r["all"]:  # a value in two topics: the exact job's joins by value cross topics
            for (h, _), topic in names.items():
                if h == r["history"]:
                    flagged.setdefault((h, topic), set()).add("value")
        else:
            flagged.setdefault((r["history"], names[(r["history"], r["topic_id"])]), set()).add(r["family"])
    every = frozenset(FAMILIES)
    suspects = {k: every if "value" in f else frozenset(f) for k, f in flagged.items()}
    return Screened(summary, suspects)


def _ops(base: Any, pack: Any) -> Any:
    """Each invoke with its completion (the next event of its process); positions packed into longs."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    events = base.select(
        "history",
        "process",
        "index",
        "type",
        "f",
        "topic_id",
        "value",
        pack(F.col("position")).alias("position"),
        pack(F.col("start")).alias("start"),
        "limit",
        "final",
        F.when(F.col("entries").isNotNull(), F.size("entries")).alias("entry_count"),
        F.array_max(F.transform("entries", lambda x: pack(x["position"]))).alias("highest_position"),
    )
    by_process = Window.partitionBy("history", "process").orderBy("index")
    completion = F.lead(F.struct("index", "type", "position", "entry_count", "highest_position"), 1).over(by_process)
    entry_count = F.col("completion.entry_count")
    return (
        events.withColumn("completion", completion)
        .filter(F.col("type") == "invoke")
        .select(
            "history",
            "process",
            "topic_id",
            "f",
            F.col("index").alias("invoke_index"),
            "value",
            F.coalesce("start", F.lit(0).cast("long")).alias("start"),
            F.coalesce(F.col("completion.type"), F.lit("info")).alias("outcome"),
            F.col("completion.index").alias("completion_index"),
            F.col("completion.position").alias("position"),
            F.col("completion.highest_position").alias("highest_position"),
            "final",
            F.coalesce(F.col("limit").isNotNull() & (entry_count >= F.col("limit")), F.lit(False)).alias(
                "cut_by_limit"
            ),
            (F.coalesce(entry_count, F.lit(0)) > 0).alias("shows_entries"),
        )
    )


def _flags(base: Any, ops: Any, pack: Any, wider: Any, pos_bucket_shift: int) -> tuple[Any, Any]:
    """Rows (history, topic_id, all, family): a topic (with `all`, every topic of the history) that may hold an anomaly
    of that family of checks.

    Also returns the cached per-value table, for the caller to release once the rows are collected.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ok = F.col("outcome") == "ok"
    is_append = F.col("f") == "append"
    appends = ops.filter(is_append)
    reads = ops.filter((F.col("f") == "read") & ok)

    # Final reads not cut by their limit: one bit each (in completion order) per topic.
    in_topic = Window.partitionBy("history", "topic_id").orderBy("completion_index")
    finals = reads.filter(F.col("final") & ~F.col("cut_by_limit")).select(
        "history", "topic_id", "completion_index", (F.row_number().over(in_topic) - 1).alias("final_bit")
    )
    final_reads = finals.groupBy("history", "topic_id").agg(F.count("*").alias("final_reads"))
    every_final = F.when(F.col("final_reads") <= MAX_FINALS, F.expr("shiftleft(1L, final_reads)") - 1)

    def flagged(family: str, df: Any, cond: Any, everything: Any = None) -> Any:
        return df.filter(cond).select(
            "history",
            "topic_id",
            (everything if everything is not None else F.lit(False)).alias("all"),
            F.lit(family).alias("family"),
        )

    # Read entries: value, packed position, the next entry's position, and the final-read bit.
    entries = base.filter((F.col("f") == "read") & (F.col("type") == "ok")).select(
        "history",
        "topic_id",
        "index",
        F.explode(
            F.transform(
                "entries",
                lambda x, i: F.struct(
                    pack(x["position"]).alias("position"),
                    x["value"].alias("value"),
                    pack(F.get("entries", i + 1)["position"]).alias("next_position"),
                    wider(x["position"]).cast("int").alias("too_wide"),
                ),
            )
        ).alias("entry"),
    )
    final_bits = finals.select("history", F.col("completion_index").alias("index"), "final_bit")
    entries = entries.join(F.broadcast(final_bits), ["history", "index"], "left").select(
        "history",
        F.col("entry.value").alias("value"),
        "topic_id",
        F.lit(0).alias("is_append"),
        F.lit(0).alias("acknowledged"),
        F.lit(0).alias("failed"),
        F.lit(1).alias("by_read"),
        F.col("entry.position").alias("position"),
        F.col("entry.next_position").alias("next_position"),
        F.coalesce(F.expr("shiftleft(1L, final_bit)"), F.lit(0).cast("long")).alias("final_reads_showing"),
        F.col("entry.too_wide").alias("too_wide"),
    )
    value_rows = appends.select(
        "history",
        "value",
        "topic_id",
        F.lit(1).alias("is_append"),
        ok.cast("int").alias("acknowledged"),
        (F.col("outcome") == "fail").cast("int").alias("failed"),
        F.lit(0).alias("by_read"),
        F.when(ok, F.col("position")).alias("position"),
        F.lit(None).cast("long").alias("next_position"),
        F.lit(0).cast("long").alias("final_reads_showing"),
        F.lit(0).alias("too_wide"),
    ).unionByName(entries)
    per_value = (
        value_rows.groupBy("history", "value")
        .agg(
            F.sum("is_append").alias("appends"),
            F.max("acknowledged").alias("acknowledged"),
            F.max("failed").alias("failed"),
            F.max("by_read").alias("by_read"),
            F.min("position").alias("lowest_position"),
            F.max("position").alias("highest_position"),
            F.max("next_position").alias("highest_next_position"),
            F.min("topic_id").alias("topic_id"),
            F.max("topic_id").alias("highest_topic_id"),
            F.bit_or("final_reads_showing").alias("final_reads_showing"),
            F.max("too_wide").alias("too_wide"),
        )
        .join(F.broadcast(final_reads), ["history", "topic_id"], "left")
        .cache()
    )
    read, lowest = F.col("by_read") == 1, F.col("lowest_position")
    in_two_topics = F.col("topic_id") != F.col("highest_topic_id")
    lost = (
        (F.col("acknowledged") == 1)
        & (F.col("final_reads") > 0)
        & (F.col("final_reads_showing") != F.coalesce(every_final, F.lit(-1)))
    )
    by_value = flagged(
        "value",
        per_value,
        in_two_topics
        | (read & (F.col("appends") == 0))
        | (read & (F.col("failed") == 1))
        | (lowest != F.col("highest_position"))
        | lost
        | (F.col("too_wide") == 1),
        in_two_topics,
    )

    # One row per value at its position, by (topic, position bucket): two values at one position, and gaps.
    at = per_value.filter(lowest.isNotNull()).select(
        "history", "topic_id", lowest.alias("position"), "highest_next_position"
    )
    at = at.withColumn("position_bucket", F.shiftright("position", pos_bucket_shift))
    bucket = ["history", "topic_id", "position_bucket"]
    positions = (
        at.repartition(*bucket)
        .groupBy(*bucket, "position")
        .agg(F.count("*").alias("value_count"), F.max("highest_next_position").alias("highest_next_position"))
    )
    positions = positions.withColumn(
        "successor", F.lead("position").over(Window.partitionBy(*bucket).orderBy("position"))
    )
    heads = at.groupBy(*bucket).agg(F.min("position").alias("bucket_head"))
    heads = heads.select(
        *bucket,
        F.lead("bucket_head")
        .over(Window.partitionBy("history", "topic_id").orderBy("position_bucket"))
        .alias("next_bucket_head"),
    )
    positions = positions.join(heads, bucket, "left").withColumn(
        "successor", F.coalesce("successor", "next_bucket_head")
    )
    highest_next, successor = F.col("highest_next_position"), F.col("successor")
    skips = (highest_next > F.col("position")) & (successor.isNull() | (highest_next > successor))
    by_position = flagged("position", positions, (F.col("value_count") > 1) | skips)

    # Running maxima per topic in index order: acks and read reaches at completions, queries at invokes.
    done = ops.filter(ok)
    none = F.lit(None).cast("long")
    contributions = done.filter(is_append | F.col("shows_entries")).select(
        "history",
        "topic_id",
        F.col("completion_index").alias("index"),
        F.when(is_append, F.col("position")).alias("ack"),
        F.when(~is_append, F.col("highest_position")).alias("read_reach"),
        none.alias("query_position"),
        none.alias("start"),
        none.alias("query_reach"),
        F.lit(False).alias("read_query"),
    )
    queries = done.filter(is_append | ~F.col("cut_by_limit")).select(
        "history",
        "topic_id",
        F.col("invoke_index").alias("index"),
        none.alias("ack"),
        none.alias("read_reach"),
        F.when(is_append, F.col("position")).alias("query_position"),
        F.when(~is_append, F.col("start")).alias("start"),
        F.when(~is_append, F.col("highest_position")).alias("query_reach"),
        (~is_append).alias("read_query"),
    )
    scan = contributions.unionByName(queries).withColumn("index_bucket", F.shiftright("index", INDEX_BUCKET_BITS))
    query_position, read_query = F.col("query_position"), F.col("read_query")
    asked = running_maxima(scan, ["history", "topic_id"], keep=query_position.isNotNull() | read_query)
    highest_ack, highest_reach = F.col("highest_ack"), F.col("highest_reach")
    start, query_reach = F.col("start"), F.col("query_reach")

    def misses(highest: Any) -> Any:
        return read_query & (highest >= start) & (query_reach.isNull() | (query_reach < highest))

    reordered = query_position.isNotNull() & (highest_ack > query_position)
    by_scan = flagged("scan", asked, reordered | misses(highest_ack) | misses(highest_reach))

    # nonmonotonic-append: ops are partitioned by process already.
    acks = appends.filter(ok)
    by_process_topic = Window.partitionBy("history", "process", "topic_id").orderBy("completion_index")
    previous = F.lag("position").over(by_process_topic)
    lower = F.col("position") <= F.col("previous_position")
    by_process = flagged("process", acks.withColumn("previous_position", previous), lower)

    too_many_finals = flagged("value", final_reads, F.col("final_reads") > MAX_FINALS)
    flags = (
        by_value.unionByName(by_position)
        .unionByName(by_scan)
        .unionByName(by_process)
        .unionByName(too_many_finals)
        .distinct()
    )
    return flags, per_value
