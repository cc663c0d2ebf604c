"""The audit's screen: cheap fixed-width aggregates over the whole history that find the topics that may be wrong.

Every anomaly of docs/history.md belongs to one topic, so the exact job (spark/audit.py `run_checks`, which computes
the minimal witnesses) only needs the topics the screen flags; for a valid history it does not run at all. The
screen decides "may this topic hold an anomaly?" with long integers only, so that Spark aggregates in hash
tables and shuffles narrow rows:

- a position (l, e, b) becomes one long, l, e and b packed with as many bits as the history's largest values
  need (so the packed order is the lexicographic order); a history whose positions do not fit in 63 bits is not
  screened (the exact job audits all of it);
- a topic becomes xxhash64(topic); two topic names with one hash in a history also mean "not screened".

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
(realtime-reorder, stale-read, nonmonotonic-read), and over each process's acks nonmonotonic-append.

Each flag is implied by its anomaly's definition in spark/reference.py, so the screen never misses a topic the
exact job would report (the Spark tests compare the two paths with the reference checker on every corpus
history); a flagged topic without an anomaly only costs the exact job's time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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

    from spark.audit import read_entries

    f, kind = F.col("f"), F.col("type")
    read_ok = (f == "read") & (kind == "ok")
    base = (
        events.filter(F.col("process") != "nemesis")
        .select(
            "history",
            F.col("process").cast("long").alias("proc"),
            F.col("index").alias("idx"),
            "type",
            "f",
            "topic",
            F.xxhash64("topic").alias("tid"),
            F.when((f == "append") & (kind == "invoke"), F.col("value")).alias("val"),
            F.when((f == "append") & (kind == "ok"), F.col("position")).alias("pos"),
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
        return F.max(F.greatest(F.col("pos")[i], F.col("start")[i]))

    rows = (
        base.groupBy("history", "topic", "tid")
        .agg(
            count(kind == "invoke").alias("ops"),
            count((f == "append") & (kind == "ok")).alias("appends_ok"),
            count((f == "append") & (kind == "fail")).alias("appends_fail"),
            count((f == "append") & (kind == "invoke")).alias("appends"),
            count((f == "read") & (kind == "invoke")).alias("reads"),
            widest(0).alias("l"),
            widest(1).alias("e"),
            widest(2).alias("b"),
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
    names = {(r["history"], r["tid"]): r["topic"] for r in rows}
    bl, be, bb = (_bits(max((r[k] or 0 for r in rows), default=0)) for k in "leb")
    if len(names) < len(rows) or bl + be + bb > 63:
        return None  # two topics share a hash, or positions do not pack into a long

    def pack(p: Any) -> Any:
        return F.shiftleft(p[0], be + bb).bitwiseOR(F.shiftleft(p[1], bb)).bitwiseOR(p[2])

    def wider(p: Any) -> Any:
        """Whether position p does not fit the packing (only a read entry can: the widths come from the rest)."""
        return (F.shiftright(p[0], bl) != 0) | (F.shiftright(p[1], be) != 0) | (F.shiftright(p[2], bb) != 0)

    # The operations and the per-value table are read by several checks: cached, each is computed once (column
    # pruning would otherwise make every branch its own, unshared shuffle).
    ops = _ops(base, pack).cache()
    try:
        flags, per_value = _flags(base, ops, pack, wider, pos_bucket_shift=bb + POS_BUCKET_BITS)
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
            flagged.setdefault((r["history"], names[(r["history"], r["tid"])]), set()).add(r["family"])
    every = frozenset(FAMILIES)
    suspects = {k: every if "value" in f else frozenset(f) for k, f in flagged.items()}
    return Screened(summary, suspects)


def _ops(base: Any, pack: Any) -> Any:
    """Each invoke with its completion (the next event of its process); positions packed into longs."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    n = F.size("entries")
    ev = base.select(
        "history",
        "proc",
        "idx",
        "type",
        "f",
        "tid",
        "val",
        pack(F.col("pos")).alias("p"),
        pack(F.col("start")).alias("start"),
        "limit",
        "final",
        F.when(F.col("entries").isNotNull(), n).alias("n"),
        F.array_max(F.transform("entries", lambda x: pack(x["position"]))).alias("reach"),
    )
    w = Window.partitionBy("history", "proc").orderBy("idx")
    nxt = F.lead(F.struct("idx", "type", "p", "n", "reach"), 1).over(w)
    return (
        ev.withColumn("nxt", nxt)
        .filter(F.col("type") == "invoke")
        .select(
            "history",
            "proc",
            "tid",
            "f",
            F.col("idx").alias("inv"),
            "val",
            F.coalesce("start", F.lit(0).cast("long")).alias("start"),
            F.coalesce(F.col("nxt.type"), F.lit("info")).alias("outcome"),
            F.col("nxt.idx").alias("cmp"),
            F.col("nxt.p").alias("p"),
            F.col("nxt.reach").alias("reach"),
            "final",
            F.coalesce(F.col("limit").isNotNull() & (F.col("nxt.n") >= F.col("limit")), F.lit(False)).alias("cut"),
            (F.coalesce(F.col("nxt.n"), F.lit(0)) > 0).alias("shows"),
        )
    )


def _flags(base: Any, ops: Any, pack: Any, wider: Any, pos_bucket_shift: int) -> tuple[Any, Any]:
    """Rows (history, tid, all, family): a topic (with `all`, every topic of the history) that may hold an anomaly
    of that family of checks.

    Also returns the cached per-value table, for the caller to release once the rows are collected.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ok = F.col("outcome") == "ok"
    is_append = F.col("f") == "append"
    appends = ops.filter(is_append)
    reads = ops.filter((F.col("f") == "read") & ok)

    # Final reads not cut by their limit: one bit each (in `cmp` order) per topic.
    finals = reads.filter(F.col("final") & ~F.col("cut")).select(
        "history",
        "tid",
        "cmp",
        (F.row_number().over(Window.partitionBy("history", "tid").orderBy("cmp")) - 1).alias("bit"),
    )
    final_masks = finals.groupBy("history", "tid").agg(F.count("*").alias("finals"))
    mask = F.when(F.col("finals") <= MAX_FINALS, F.expr("shiftleft(1L, finals)") - 1)

    def flagged(family: str, df: Any, cond: Any, everything: Any = None) -> Any:
        return df.filter(cond).select(
            "history",
            "tid",
            (everything if everything is not None else F.lit(False)).alias("all"),
            F.lit(family).alias("family"),
        )

    # Read entries: value, packed position, the next entry's position, and the final-read bit.
    entries = base.filter((F.col("f") == "read") & (F.col("type") == "ok")).select(
        "history",
        "tid",
        "idx",
        F.explode(
            F.transform(
                "entries",
                lambda x, i: F.struct(
                    pack(x["position"]).alias("p"),
                    x["value"].alias("v"),
                    pack(F.get("entries", i + 1)["position"]).alias("nxt"),
                    wider(x["position"]).cast("int").alias("wide"),
                ),
            )
        ).alias("x"),
    )
    entries = entries.join(
        F.broadcast(finals.select("history", F.col("cmp").alias("idx"), "bit")), ["history", "idx"], "left"
    ).select(
        "history",
        F.col("x.v").alias("val"),
        "tid",
        F.lit(0).alias("app"),
        F.lit(0).alias("ok"),
        F.lit(0).alias("failed"),
        F.lit(1).alias("rd"),
        F.col("x.p").alias("p"),
        F.col("x.nxt").alias("nxt"),
        F.coalesce(F.expr("shiftleft(1L, bit)"), F.lit(0).cast("long")).alias("fin"),
        F.col("x.wide").alias("wide"),
    )
    value_rows = appends.select(
        "history",
        "val",
        "tid",
        F.lit(1).alias("app"),
        ok.cast("int").alias("ok"),
        (F.col("outcome") == "fail").cast("int").alias("failed"),
        F.lit(0).alias("rd"),
        F.when(ok, F.col("p")).alias("p"),
        F.lit(None).cast("long").alias("nxt"),
        F.lit(0).cast("long").alias("fin"),
        F.lit(0).alias("wide"),
    ).unionByName(entries)
    per_value = (
        value_rows.groupBy("history", "val")
        .agg(
            F.sum("app").alias("apps"),
            F.max("ok").alias("ok"),
            F.max("failed").alias("failed"),
            F.max("rd").alias("rd"),
            F.min("p").alias("lo"),
            F.max("p").alias("hi"),
            F.max("nxt").alias("mx"),
            F.min("tid").alias("tid"),
            F.max("tid").alias("t1"),
            F.bit_or("fin").alias("fin"),
            F.max("wide").alias("wide"),
        )
        .join(F.broadcast(final_masks), ["history", "tid"], "left")
        .cache()
    )
    read, lo = F.col("rd") == 1, F.col("lo")
    lost = (F.col("ok") == 1) & (F.col("finals") > 0) & (F.col("fin") != F.coalesce(mask, F.lit(-1)))
    by_value = flagged(
        "value",
        per_value,
        (F.col("tid") != F.col("t1"))
        | (read & (F.col("apps") == 0))
        | (read & (F.col("failed") == 1))
        | (lo != F.col("hi"))
        | lost
        | (F.col("wide") == 1),
        F.col("tid") != F.col("t1"),
    )

    # One row per value at its position, by (topic, position bucket): two values at one position, and gaps.
    at = per_value.filter(lo.isNotNull()).select("history", "tid", lo.alias("p"), "mx")
    at = at.withColumn("pb", F.shiftright("p", pos_bucket_shift))
    positions = (
        at.repartition("history", "tid", "pb")
        .groupBy("history", "tid", "pb", "p")
        .agg(F.count("*").alias("c"), F.max("mx").alias("mx"))
    )
    positions = positions.withColumn("succ", F.lead("p").over(Window.partitionBy("history", "tid", "pb").orderBy("p")))
    heads = at.groupBy("history", "tid", "pb").agg(F.min("p").alias("head"))
    heads = heads.select(
        "history", "tid", "pb", F.lead("head").over(Window.partitionBy("history", "tid").orderBy("pb")).alias("nh")
    )
    positions = positions.join(heads, ["history", "tid", "pb"], "left").withColumn("succ", F.coalesce("succ", "nh"))
    mx, succ = F.col("mx"), F.col("succ")
    by_position = flagged("position", positions, (F.col("c") > 1) | ((mx > F.col("p")) & (succ.isNull() | (mx > succ))))

    # Running maxima per topic in index order: acks and read reaches at completions, queries at invokes.
    done = ops.filter(ok)
    none = F.lit(None).cast("long")
    contributions = done.filter(is_append | F.col("shows")).select(
        "history",
        "tid",
        F.col("cmp").alias("idx"),
        F.when(is_append, F.col("p")).alias("a"),
        F.when(~is_append, F.col("reach")).alias("r"),
        none.alias("qa"),
        none.alias("qs"),
        none.alias("qr"),
        F.lit(False).alias("q"),
    )
    queries = done.filter(is_append | ~F.col("cut")).select(
        "history",
        "tid",
        F.col("inv").alias("idx"),
        none.alias("a"),
        none.alias("r"),
        F.when(is_append, F.col("p")).alias("qa"),
        F.when(~is_append, F.col("start")).alias("qs"),
        F.when(~is_append, F.col("reach")).alias("qr"),
        (~is_append).alias("q"),
    )
    scan = contributions.unionByName(queries).withColumn("ib", F.shiftright("idx", INDEX_BUCKET_BITS))
    upto = (
        Window.partitionBy("history", "tid", "ib")
        .orderBy("idx")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    local = scan.select("*", F.max("a").over(upto).alias("la"), F.max("r").over(upto).alias("lr"))
    ends = scan.groupBy("history", "tid", "ib").agg(F.max("a").alias("ba"), F.max("r").alias("br"))
    before = Window.partitionBy("history", "tid").orderBy("ib").rowsBetween(Window.unboundedPreceding, -1)
    carry = ends.select(
        "history", "tid", "ib", F.max("ba").over(before).alias("ca"), F.max("br").over(before).alias("cr")
    )
    asked = local.filter(F.col("qa").isNotNull() | F.col("q")).join(carry, ["history", "tid", "ib"], "left")
    m_ack, m_read = F.greatest("la", "ca"), F.greatest("lr", "cr")
    qs, qr = F.col("qs"), F.col("qr")

    def misses(m: Any) -> Any:
        return F.col("q") & (m >= qs) & (qr.isNull() | (qr < m))

    by_scan = flagged("scan", asked, (F.col("qa").isNotNull() & (m_ack > F.col("qa"))) | misses(m_ack) | misses(m_read))

    # nonmonotonic-append: ops are partitioned by process already.
    acks = appends.filter(ok)
    prev = F.lag("p").over(Window.partitionBy("history", "proc", "tid").orderBy("cmp"))
    by_process = flagged("process", acks.withColumn("prev", prev), F.col("p") <= F.col("prev"))

    too_many_finals = flagged("value", final_masks, F.col("finals") > MAX_FINALS)
    flags = (
        by_value.unionByName(by_position)
        .unionByName(by_scan)
        .unionByName(by_process)
        .unionByName(too_many_finals)
        .distinct()
    )
    return flags, per_value
