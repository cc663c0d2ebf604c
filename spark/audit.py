"""The Spark audit job: the checks of spark/reference.py as a few shuffles, aggregations and two-level scans.

`audit` first runs the screen of spark/screen.py over the whole history (long integers and hash aggregates
only); the exact checks below, which compute the minimal witnesses, then run on the topics it flags: none for
a valid history.

Run as `spark-submit spark/audit.py HISTORY... [--json OUT] [--html OUT]` or through `pulsar-ref audit`.
Definitions of every anomaly are in spark/reference.py's docstring; this job computes the same cases (the same
witness events) so the two can be compared on every test history.

Several histories are audited in one job: every key carries the history number `h`. Positions are structs
(l, e, b), which Spark orders lexicographically like docs/history.md. The job reads the JSON once with an explicit
schema, uses no Python UDFs, and shuffles the big data four times:
1. events by process: invokes paired with their completions (lead), cached as `ops`; read entries are parsed
   there once; nonmonotonic-append (lag over each process's acks per topic) needs no further shuffle;
2. observations (acks and read entries) by (topic, position bucket): one aggregate per position gives
   duplicate-position, divergent-read (b) and the known positions whose successor (lead) decides gap;
3. appends and read entries by value: one aggregate per value gives duplicate-value, phantom-read,
   failed-write-visible, divergent-read (a) and lost-write (against the final reads of the topic, broadcast);
4. acks, read reaches and queries by (topic, index bucket): the running maxima for realtime-reorder,
   stale-read and nonmonotonic-read.
Windows over a topic are two-level so that one topic is spread over all tasks: rows are cut into buckets of
consecutive keys (a bucket is a monotone function of the order key), each bucket is scanned in its own window,
and the few bucket boundaries are combined in a small table (the next bucket's first row for a lead, the maximum
of all earlier buckets for a running maximum) joined back. Each anomaly comes out as a candidate row; only
candidates reach the driver (none for a valid history).

The log checks see appends and reads only; a history with consumers' operations also goes through the job of
spark/queue_audit.py, which decides the anomalies of subscriptions and measures their figures.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `spark-submit spark/audit.py`: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark.history import format_position, format_time  # noqa: E402
from spark.report import Case, Report, TopicSummary  # noqa: E402

SCHEMA = (
    "index long, time long, process string, type string, f string, topic string, value string, "
    "position array<long>, `from` array<long>, limit long, final boolean, "
    # consumers (spark/queue_audit.py) and the nemesis's errors
    "subscription string, consumer string, subscription_type string, key string, partition string, "
    "redelivery_count long, cumulative boolean, error string"
)
# Bucket widths of the two-level windows: entries per (ledger, entry // POS_BUCKET) and events per
# index // INDEX_BUCKET. Large enough that the table of bucket boundaries stays small, small enough that a
# one-topic history of a million events makes dozens of buckets for the tasks to share.
POS_BUCKET = 4096
INDEX_BUCKET = 16384
POS_TYPE = "struct<l:long,e:long,b:long>"


@dataclass
class Audited:
    path: str
    report: Report


def _pos(col: Any) -> Any:
    from pyspark.sql import functions as F

    return F.struct(col[0].alias("l"), col[1].alias("e"), col[2].alias("b"))


def load(spark: Any, paths: Sequence[str]) -> Any:
    from pyspark.sql import functions as F

    from spark.history import is_parquet

    frames = []
    jsonl = [(h, path) for h, path in enumerate(paths) if not is_parquet(path)]
    if len(jsonl) == 1:
        frames.append(spark.read.schema(SCHEMA).json(jsonl[0][1]).withColumn("h", F.lit(jsonl[0][0])))
    elif jsonl:
        # One read for all JSON Lines files (a union of many reads makes a huge plan); h from the file name.
        names = spark.createDataFrame([(Path(p).resolve().as_uri(), h) for h, p in jsonl], "fname string, h int")
        df = spark.read.schema(SCHEMA).json([p for _, p in jsonl]).withColumn("file", F.input_file_name())
        df = df.join(F.broadcast(names), F.regexp_replace("file", "^file:/+", "file:///") == names.fname)
        frames.append(df.drop("file", "fname"))
    for h, path in enumerate(paths):
        if is_parquet(path):
            df = spark.read.parquet(path)
            cols = [F.col(c.split()[0].strip("`")).cast(c.split(maxsplit=1)[1]) for c in SCHEMA.split(", ")]
            df = df.select(*[c.alias(n.split()[0].strip("`")) for c, n in zip(cols, SCHEMA.split(", "), strict=True)])
            frames.append(df.withColumn("h", F.lit(h)))
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


def read_entries(value: Any) -> Any:
    """A read's `value` (JSON text) as an array of (p: [ledger, entry, batch], v) in delivery order.

    from_json gives each position back as compact JSON text "[l,e,b]": it is split, not parsed again (a JSON
    parser per entry is slow).
    """
    from pyspark.sql import functions as F

    return F.transform(
        F.from_json(value, "array<array<string>>"),
        lambda x: F.struct(F.split(F.translate(x[0], "[]", ""), ",").cast("array<long>").alias("p"), x[1].alias("v")),
    )


def _later(a: Any, b: Any) -> Any:
    """The greater of two nullable structs (null counts as absent)."""
    from pyspark.sql import functions as F

    return F.when(a.isNull() | (b > a), b).otherwise(a)


def _candidate(name: str, topic: Any, ops: list[Any], detail: Any, gap_read: Any = None, rank: Any = None) -> Any:
    """One anomaly case as a struct; gap candidates carry their read and rank (the first skip of a read wins)."""
    from pyspark.sql import functions as F

    return F.struct(
        F.lit(name).alias("anomaly"),
        topic.alias("topic"),
        F.array(*[o.cast("long") for o in ops]).alias("ops"),
        detail.alias("detail"),
        (gap_read if gap_read is not None else F.lit(None)).cast("long").alias("gap_read"),
        (rank if rank is not None else F.lit(None)).cast("long").alias("rank"),
    )


def _cases(df: Any, *candidates: Any) -> Any:
    """Rows (h, candidate fields) for the candidates that are not null; `candidates` are structs or arrays."""
    from pyspark.sql import functions as F

    arrays = [c if is_array else F.array(c) for c, is_array in candidates]
    found = F.filter(F.concat(*arrays), lambda c: c.isNotNull())
    return df.select("h", F.explode(found).alias("c")).select("h", "c.*")


def _pairs(spark: Any, events: Any) -> Any:
    """Operations: each invoke with its completion, the next event of its process (docs/history.md)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ev = events.filter(F.col("process") != "nemesis")
    w_proc = Window.partitionBy("h", "process").orderBy("index")
    paired = ev.withColumn("nxt", F.lead(F.struct("index", "time", "type", "value", "position"), 1).over(w_proc))
    ok_read = (F.col("f") == "read") & (F.col("nxt.type") == "ok")
    ops = paired.filter(F.col("type") == "invoke").select(
        "h",
        "process",
        "f",
        "topic",
        F.col("index").alias("inv"),
        F.col("time").alias("inv_time"),
        F.when(F.col("f") == "append", F.col("value")).alias("val"),
        _pos(F.col("from")).alias("start"),
        "limit",
        F.coalesce("final", F.lit(False)).alias("final"),
        F.coalesce(F.col("nxt.type"), F.lit("info")).alias("outcome"),
        F.col("nxt.index").alias("cmp"),
        F.col("nxt.time").alias("cmp_time"),
        F.when(F.col("f") == "append", _pos(F.col("nxt.position"))).alias("pos"),
        # A read's entries parsed once: [(pos, val)] in delivery order.
        F.when(
            ok_read,
            F.transform(
                read_entries(F.col("nxt.value")), lambda x: F.struct(_pos(x["p"]).alias("pos"), x["v"].alias("val"))
            ),
        ).alias("entries"),
    )
    ops = ops.withColumn("start", F.when(F.col("start.l").isNotNull(), F.col("start")))
    n = F.size("entries")
    return ops.select(
        "*",
        (F.col("limit").isNotNull() & (n >= F.col("limit"))).alias("cut"),
        F.array_max(F.transform("entries", lambda x: x["pos"])).alias("reach"),
    )


def _nonmonotonic_appends(acks: Any) -> Any:
    """Consecutive acks of one process on one topic (ops are already partitioned by process: no shuffle)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w_pt = Window.partitionBy("h", "process", "topic").orderBy("cmp")
    nm = acks.withColumn("prev", F.lag(F.struct("cmp", "pos", "val"), 1).over(w_pt)).filter(
        F.col("prev").isNotNull() & (F.col("pos") <= F.col("prev.pos"))
    )
    detail = F.to_json(F.struct("process", F.col("prev.val").alias("v1"), F.col("prev.pos").alias("p1"), "val", "pos"))
    cand = _candidate("nonmonotonic-append", F.col("topic"), [F.col("prev.cmp"), F.col("cmp")], detail)
    return _cases(nm, (cand, False))


def _by_position(acks: Any, robs: Any) -> Any:
    """duplicate-position, divergent-read (b) and gap from one aggregate per (topic, position).

    Two aggregation levels over one shuffle: per (position, value) first, so that the lists compared per
    position hold one entry per distinct value (a position shown by thousands of reads stays cheap).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    obs = acks.select(
        "h",
        "topic",
        F.col("cmp").alias("idx"),
        "pos",
        "val",
        F.lit(False).alias("rd"),
        F.lit(None).cast("long").alias("ord"),
        F.lit(None).cast(POS_TYPE).alias("nxt"),
    ).unionByName(robs.select("h", "topic", "idx", "pos", "val", F.lit(True).alias("rd"), "ord", "nxt"))
    # The bucket (ledger, entry // POS_BUCKET) is monotone in the position: buckets partition a topic in order.
    obs = obs.withColumn("pb", F.struct(F.col("pos.l").alias("l"), F.floor(F.col("pos.e") / POS_BUCKET).alias("e")))
    per_value = (
        obs.repartition("h", "topic", "pb")
        .groupBy("h", "topic", "pb", "pos", "val")
        .agg(
            F.min("idx").alias("m"),
            F.min(F.when(F.col("rd"), F.col("idx"))).alias("mr"),
            # Consecutive read entries (this one, the next) for gap.
            F.collect_list(F.when(F.col("nxt").isNotNull(), F.struct("idx", "ord", "nxt"))).alias("pairs"),
        )
    )
    known = per_value.groupBy("h", "topic", "pb", "pos").agg(
        F.min("m").alias("w"),
        F.collect_list(F.struct("m", "mr", "val")).alias("vals"),
        F.flatten(F.collect_list("pairs")).alias("pairs"),
    )
    # Successor of each known position: lead within its bucket, else the first position of the next bucket.
    w_bucket = Window.partitionBy("h", "topic", "pb").orderBy("pos")
    known = known.withColumn("succ", F.lead(F.struct("pos", "w")).over(w_bucket))
    # The first position of each bucket (and its earliest observation), aggregated before any shuffle: a small
    # table. (Taking it from `known` would shuffle the observations a second time, pruned to fewer columns.)
    firsts = obs.groupBy("h", "topic", "pb").agg(F.min(F.struct("pos", F.col("idx").alias("w"))).alias("head"))
    w_topic = Window.partitionBy("h", "topic").orderBy("pb")
    nexts = firsts.select("h", "topic", "pb", F.lead("head").over(w_topic).alias("next_head"))
    known = known.join(nexts, ["h", "topic", "pb"], "left").withColumn("succ", F.coalesce("succ", "next_head"))

    def first_two(seen: Any) -> tuple[Any, Any]:
        first = F.array_min(seen)
        return first, F.array_min(F.filter(seen, lambda x: x["val"] != first["val"]))

    o1, o2 = first_two(F.transform("vals", lambda x: F.struct(x["m"].alias("idx"), x["val"].alias("val"))))
    r1, r2 = first_two(
        F.transform(
            F.filter("vals", lambda x: x["mr"].isNotNull()),
            lambda x: F.struct(x["mr"].alias("idx"), x["val"].alias("val")),
        )
    )
    topic = F.col("topic")

    def dup(name: str, a: Any, b: Any) -> Any:
        detail = F.to_json(F.struct("pos", a["val"].alias("v1"), b["val"].alias("v2")))
        return F.when(b.isNotNull(), _candidate(name, topic, [a["idx"], b["idx"]], detail))

    succ = F.col("succ")
    gaps = F.transform(
        F.filter("pairs", lambda x: succ.isNotNull() & (succ["pos"] < x["nxt"])),
        lambda x: _candidate(
            "gap",
            topic,
            [succ["w"], x["idx"]],
            F.to_json(F.struct(F.col("pos").alias("a"), x["nxt"].alias("b"), succ["pos"].alias("k"))),
            gap_read=x["idx"],
            rank=x["ord"],
        ),
    )
    return _cases(
        known, (dup("duplicate-position", o1, o2), False), (dup("divergent-read", r1, r2), False), (gaps, True)
    )


def _by_value(appends: Any, robs: Any, finals: Any) -> Any:
    """duplicate-value, phantom-read, failed-write-visible, divergent-read (a), lost-write: one aggregate per value.

    As for positions, two levels: per (value, position), then per value over one entry per distinct position.
    """
    from pyspark.sql import functions as F

    rows = appends.select(
        "h",
        "val",
        "pos",
        F.lit(True).alias("app"),
        "outcome",
        F.col("cmp").alias("idx"),
        "topic",
        F.lit(False).alias("fin"),
    ).unionByName(
        robs.select(
            "h",
            "val",
            "pos",
            F.lit(False).alias("app"),
            F.lit(None).cast("string").alias("outcome"),
            "idx",
            "topic",
            "fin",
        )
    )
    app, seen = F.col("app"), ~F.col("app") | (F.col("outcome") == "ok")
    per_pos = (
        rows.repartition("h", "val")
        .groupBy("h", "val", "pos")
        .agg(
            F.max(F.when(app, F.struct("outcome", "idx", "topic"))).alias("a"),  # at most one append per value
            F.min(F.when(seen, F.struct("idx", "topic"))).alias("m"),  # earliest observation here
            F.min(F.when(~app, F.struct("idx", "topic"))).alias("r"),  # earliest read showing it here
            F.collect_list(F.when(F.col("fin"), F.col("idx"))).alias("fins"),  # final reads showing it
        )
    )
    a_pos = F.struct(F.col("a.outcome").alias("outcome"), F.col("a.idx").alias("idx"), F.col("a.topic").alias("topic"))
    per_value = per_pos.groupBy("h", "val").agg(
        F.max(F.when(F.col("a").isNotNull(), F.struct(a_pos.alias("x"), F.col("pos").alias("pos")))).alias("ap"),
        F.collect_list(F.struct("m", "r", "pos")).alias("at"),
        F.flatten(F.collect_list("fins")).alias("fins"),
    )
    # The final reads of the append's topic (few: broadcast), for lost-write.
    per_value = per_value.withColumn(
        "a",
        F.struct(
            F.col("ap.x.outcome").alias("outcome"),
            F.col("ap.x.idx").alias("idx"),
            F.col("ap.x.topic").alias("topic"),
            F.col("ap.pos").alias("pos"),
        ),
    ).withColumn("a", F.when(F.col("ap").isNotNull(), F.col("a")))
    per_value = per_value.withColumn("ftopic", F.col("a.topic")).join(F.broadcast(finals), ["h", "ftopic"], "left")
    a = F.col("a")

    def idx_pos_topic(o: str) -> Any:
        return lambda x: F.struct(x[o]["idx"].alias("idx"), x["pos"].alias("pos"), x[o]["topic"].alias("topic"))

    obs = F.transform(F.filter("at", lambda x: x["m"].isNotNull()), idx_pos_topic("m"))
    v1 = F.array_min(obs)
    v2 = F.array_min(F.filter(obs, lambda x: x["pos"] != v1["pos"]))
    reads = F.transform(F.filter("at", lambda x: x["r"].isNotNull()), idx_pos_topic("r"))
    r = F.array_min(reads)
    rdiv = F.array_min(F.filter(reads, lambda x: x["pos"] != a["pos"]))
    missing = F.array_min(F.array_except(F.coalesce("finals", F.array().cast("array<long>")), F.col("fins")))
    val = F.col("val")
    ok = a["outcome"] == "ok"
    return _cases(
        per_value,
        (
            F.when(
                v2.isNotNull(),
                _candidate(
                    "duplicate-value",
                    v1["topic"],
                    [v1["idx"], v2["idx"]],
                    F.to_json(F.struct(val.alias("val"), v1["pos"].alias("p1"), v2["pos"].alias("p2"))),
                ),
            ),
            False,
        ),
        (
            F.when(
                a.isNull() & r.isNotNull(),
                _candidate(
                    "phantom-read", r["topic"], [r["idx"]], F.to_json(F.struct(val.alias("val"), r["pos"].alias("p")))
                ),
            ),
            False,
        ),
        (
            F.when(
                (a["outcome"] == "fail") & r.isNotNull(),
                _candidate(
                    "failed-write-visible",
                    r["topic"],
                    [a["idx"], r["idx"]],
                    F.to_json(F.struct(val.alias("val"), r["pos"].alias("p"))),
                ),
            ),
            False,
        ),
        (
            F.when(
                ok & rdiv.isNotNull(),
                _candidate(
                    "divergent-read",
                    rdiv["topic"],
                    [a["idx"], rdiv["idx"]],
                    F.to_json(F.struct(val.alias("val"), a["pos"].alias("p1"), rdiv["pos"].alias("p2"))),
                ),
            ),
            False,
        ),
        (
            F.when(
                ok & missing.isNotNull(),
                _candidate(
                    "lost-write",
                    a["topic"],
                    [a["idx"], missing],
                    F.to_json(F.struct(val.alias("val"), a["pos"].alias("pos"))),
                ),
            ),
            False,
        ),
    )


def _running_maxima(acks: Any, reads: Any) -> Any:
    """realtime-reorder, stale-read, nonmonotonic-read: running maxima per topic over events in index order.

    Acks and read reaches contribute at their completion, appends and reads query at their invoke (ties on
    position: the earliest event, hence the negated index). Two-level: a running maximum within each bucket of
    INDEX_BUCKET events, plus the maximum of all earlier buckets of the topic.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    none = F.lit(None)
    ack_t, rd_t = f"struct<p:{POS_TYPE},ni:long,v:string>", f"struct<p:{POS_TYPE},ni:long>"
    cols = ["h", "topic", "idx", "ack", "rd", "q", "qpos", "start", "qreach", "cut", "qcmp"]

    def row(
        idx: Any,
        ack: Any = none,
        rd: Any = none,
        q: Any = none,
        qpos: Any = none,
        start: Any = none,
        qreach: Any = none,
        cut: Any = None,
        qcmp: Any = none,
    ) -> list[Any]:
        return [
            "h",
            "topic",
            idx.alias("idx"),
            ack.cast(ack_t).alias("ack"),
            rd.cast(rd_t).alias("rd"),
            q.cast("string").alias("q"),
            qpos.cast(POS_TYPE).alias("qpos"),
            start.cast(POS_TYPE).alias("start"),
            qreach.cast(POS_TYPE).alias("qreach"),
            (cut if cut is not None else F.lit(False)).alias("cut"),
            qcmp.cast("long").alias("qcmp"),
        ]

    cmp, inv = F.col("cmp"), F.col("inv")
    zero = F.struct(*[F.lit(0).cast("long").alias(k) for k in "leb"])
    scan_in = (
        acks.select(*row(cmp, ack=F.struct(F.col("pos").alias("p"), (-cmp).alias("ni"), F.col("val").alias("v"))))
        .unionByName(
            reads.filter(F.col("reach").isNotNull()).select(
                *row(cmp, rd=F.struct(F.col("reach").alias("p"), (-cmp).alias("ni")))
            )
        )
        .unionByName(acks.select(*row(inv, q=F.col("val"), qpos=F.col("pos"), qcmp=cmp)))
        .unionByName(
            reads.select(*row(inv, start=F.coalesce("start", zero), qreach=F.col("reach"), cut=F.col("cut"), qcmp=cmp))
        )
        .select(*cols)
        .withColumn("ib", F.floor(F.col("idx") / INDEX_BUCKET))
    )
    w_bucket = Window.partitionBy("h", "topic", "ib").orderBy("idx")
    upto = w_bucket.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    local = scan_in.select("*", F.max("ack").over(upto).alias("lack"), F.max("rd").over(upto).alias("lrd"))
    # Bucket maxima aggregated before any shuffle (a small table), then the maximum of all earlier buckets.
    ends = scan_in.groupBy("h", "topic", "ib").agg(F.max("ack").alias("back"), F.max("rd").alias("brd"))
    before = Window.partitionBy("h", "topic").orderBy("ib").rowsBetween(Window.unboundedPreceding, -1)
    carry = ends.select(
        "h", "topic", "ib", F.max("back").over(before).alias("cack"), F.max("brd").over(before).alias("crd")
    )
    queries = (
        local.filter(F.col("qcmp").isNotNull())
        .join(carry, ["h", "topic", "ib"], "left")
        .withColumn("mack", _later(F.col("lack"), F.col("cack")))
        .withColumn("mrd", _later(F.col("lrd"), F.col("crd")))
    )
    mack, mrd, qreach, topic = F.col("mack"), F.col("mrd"), F.col("qreach"), F.col("topic")
    witness = [None, F.col("idx"), F.col("qcmp")]
    misses = ~F.col("cut") & F.col("q").isNull()

    def missed(m: Any) -> Any:
        return misses & (m["p"] >= F.col("start")) & (qreach.isNull() | (qreach < m["p"]))

    reorder = _candidate(
        "realtime-reorder",
        topic,
        [-mack["ni"], *witness[1:]],
        F.to_json(
            F.struct(mack["v"].alias("v1"), mack["p"].alias("p1"), F.col("q").alias("v2"), F.col("qpos").alias("p2"))
        ),
    )
    stale = _candidate(
        "stale-read",
        topic,
        [-mack["ni"], *witness[1:]],
        F.to_json(F.struct(mack["v"].alias("v1"), mack["p"].alias("p1"), qreach.alias("reach"))),
    )
    nmr = _candidate(
        "nonmonotonic-read",
        topic,
        [-mrd["ni"], *witness[1:]],
        F.to_json(F.struct(mrd["p"].alias("p1"), qreach.alias("reach"))),
    )
    return _cases(
        queries,
        (F.when(F.col("q").isNotNull() & (mack["p"] > F.col("qpos")), reorder), False),
        (F.when(missed(mack), stale), False),
        (F.when(missed(mrd), nmr), False),
    )


def run_checks(
    spark: Any, events: Any, topics: dict[tuple[int, str], frozenset[str]] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return (case rows, topic summary rows). Case rows: anomaly, h, topic, ops, times, detail.

    With `topics` (the screen's suspects: the (h, topic) pairs `events` holds, each with the families of checks of
    spark/screen.py it needs) only those families run on each topic, and there is no summary (the screen has one).
    """
    from pyspark.sql import functions as F

    from spark.screen import FAMILIES

    ops = _pairs(spark, events).cache()
    if topics is None:
        every = frozenset(FAMILIES)
        found_topics = ops.select("h", "topic").distinct().collect()
        families = {(r["h"], r["topic"]): every for r in found_topics}
    else:
        families = topics
    # Topics become small integers for the shuffles and sorts (names are long and repeated); names come back at
    # the end.
    names = sorted(families)
    topic_ids = spark.createDataFrame([(h, t, i) for i, (h, t) in enumerate(names)], "h int, topic string, tid int")
    ops_t = ops.join(F.broadcast(topic_ids), ["h", "topic"]).drop("topic").withColumnRenamed("tid", "topic")
    appends = ops_t.filter(F.col("f") == "append")
    acks = appends.filter(F.col("outcome") == "ok")
    reads = ops_t.filter((F.col("f") == "read") & (F.col("outcome") == "ok"))
    # Read entries with their order in the read and the next entry's position (for gap).
    robs = reads.select(
        "h",
        "topic",
        F.col("cmp").alias("idx"),
        (F.col("final") & ~F.col("cut")).alias("fin"),
        F.posexplode(
            F.transform(
                "entries",
                lambda x, i: F.struct(
                    x["pos"].alias("pos"), x["val"].alias("val"), F.get("entries", i + 1)["pos"].alias("nxt")
                ),
            )
        ).alias("ord", "e"),
    ).select("h", "topic", "idx", "fin", "ord", "e.*")
    finals = (
        reads.filter(F.col("final") & ~F.col("cut"))
        .groupBy("h", F.col("topic").alias("ftopic"))
        .agg(F.collect_list("cmp").alias("finals"))
    )

    def of(family: str, *inputs: Any) -> list[Any]:
        """`inputs` restricted to the topics that need `family` (small tables joined to them are left whole); [] if
        no topic needs it."""
        ids = [i for i, key in enumerate(names) if family in families[key]]
        if len(ids) == len(names):
            return list(inputs)
        return [df.filter(F.col("topic").isin(ids)) if "topic" in df.columns else df for df in inputs] if ids else []

    checks: list[tuple[Callable[..., Any], list[Any]]] = [
        (_nonmonotonic_appends, of("process", acks)),
        (_by_position, of("position", acks, robs)),
        (_by_value, of("value", appends, robs, finals)),
        (_running_maxima, of("scan", acks, reads)),
    ]
    parts = [check(*args) for check, args in checks if args]
    candidates = parts[0]
    for part in parts[1:]:
        candidates = candidates.unionByName(part)
    found = [r.asDict(recursive=True) for r in candidates.collect()]
    for r in found:
        r["topic"] = names[r["topic"]][1]
    # A read's gap is reported once, at its first skip.
    first_gap: dict[tuple[int, int], dict[str, Any]] = {}
    case_rows = []
    for r in found:
        if r["gap_read"] is None:
            case_rows.append(r)
        elif (key := (r["h"], r["gap_read"])) not in first_gap or r["rank"] < first_gap[key]["rank"]:
            first_gap[key] = r
    case_rows.extend(first_gap.values())

    summary_rows: list[dict[str, Any]] = []
    if topics is None:
        summary = ops.groupBy("h", "topic").agg(
            F.count("*").alias("ops"),
            F.sum(((F.col("f") == "append") & (F.col("outcome") == "ok")).cast("int")).alias("appends_ok"),
            F.sum(((F.col("f") == "append") & (F.col("outcome") == "fail")).cast("int")).alias("appends_fail"),
            F.sum(((F.col("f") == "append") & (F.col("outcome") == "info")).cast("int")).alias("appends_info"),
            F.sum((F.col("f") == "read").cast("int")).alias("reads"),
        )
        summary_rows = [r.asDict() for r in summary.collect()]
    # Times of the witness events, for the explanations (witnesses are invokes and completions of ops).
    wanted = sorted({(r["h"], i) for r in case_rows for i in r["ops"]})
    times: dict[tuple[int, int], int] = {}
    if wanted:
        want_df = F.broadcast(spark.createDataFrame(wanted, "h int, index long"))
        stamps = ops.select("h", F.col("inv").alias("index"), F.col("inv_time").alias("time")).unionByName(
            ops.filter(F.col("cmp").isNotNull()).select(
                "h", F.col("cmp").alias("index"), F.col("cmp_time").alias("time")
            )
        )
        for r in stamps.join(want_df, ["h", "index"]).collect():
            times[(r["h"], r["index"])] = r["time"]
    for r in case_rows:
        r["times"] = {i: times.get((r["h"], i)) for i in r["ops"]}
    ops.unpersist()
    return case_rows, summary_rows


def checked(spark: Any, events: Any, exact: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The screen (spark/screen.py) over everything, then the exact checks on the topics it flags only.

    `exact` skips the screen: every topic goes through the exact checks (also when the screen cannot run).
    """
    from pyspark.sql import functions as F

    from spark.screen import screen

    screened = None if exact else screen(events)
    if screened is None:
        return run_checks(spark, events)
    if not screened.suspects:
        return [], screened.summary
    suspects = spark.createDataFrame(sorted(screened.suspects), "h int, topic string")
    case_rows, _ = run_checks(spark, events.join(F.broadcast(suspects), ["h", "topic"]), screened.suspects)
    return case_rows, screened.summary


def _p(d: Any) -> str:
    return format_position(None if d is None else (d["l"], d["e"], d["b"]))


def explain(row: dict[str, Any]) -> str:

    d = json.loads(row["detail"]) if row["detail"] else {}
    ops = row["ops"]
    t = {i: format_time(tt) for i, tt in row["times"].items()}
    name = row["anomaly"]
    if name in ("duplicate-position", "divergent-read") and "v1" in d:
        return (
            f"{d['v1']!r} (event {ops[0]}, {t[ops[0]]}) and {d['v2']!r} (event {ops[1]}, {t[ops[1]]}) were "
            f"both observed at {_p(d['pos'])}"
        )
    if name == "divergent-read":
        return (
            f"append {d['val']!r} was acknowledged at {_p(d['p1'])} at {t[ops[0]]}; the read completing at "
            f"{t[ops[1]]} shows it at {_p(d['p2'])}"
        )
    if name == "duplicate-value":
        return f"value {d['val']!r} was observed at {_p(d['p1'])} ({t[ops[0]]}) and at {_p(d['p2'])} ({t[ops[1]]})"
    if name == "phantom-read":
        return f"the read completing at {t[ops[0]]} shows value {d['val']!r} at {_p(d['p'])}, which no append carried"
    if name == "failed-write-visible":
        return (
            f"append {d['val']!r} completed fail at {t[ops[0]]}; the read completing at {t[ops[1]]} "
            f"shows it at {_p(d['p'])}"
        )
    if name == "gap":
        return (
            f"a read completing at {t[row['read']]} goes from {_p(d['a'])} to {_p(d['b'])}, skipping {_p(d['k'])} "
            f"observed at {t[row['witness']]}"
        )
    if name == "lost-write":
        return (
            f"append {d['val']!r} was acknowledged at {_p(d['pos'])} at {t[ops[0]]}; the final read at "
            f"{t[ops[1]]} does not contain it"
        )
    if name == "nonmonotonic-append":
        return (
            f"process {d['process']} appended {d['v1']!r} acknowledged at {_p(d['p1'])} ({t[ops[0]]}), then "
            f"{d['val']!r} acknowledged at the lower or equal position {_p(d['pos'])} ({t[ops[1]]})"
        )
    if name == "realtime-reorder":
        return (
            f"append {d['v1']!r} was acknowledged at {_p(d['p1'])} at {t[ops[0]]}, before append {d['v2']!r} was "
            f"invoked at {t[ops[1]]}, yet the latter got the lower position {_p(d['p2'])}"
        )
    if name == "stale-read":
        return (
            f"append {d['v1']!r} was acknowledged at {_p(d['p1'])} at {t[ops[0]]}; the read invoked at {t[ops[1]]} "
            f"ends at {_p(d.get('reach')) if d.get('reach') else 'nothing'} and misses it"
        )
    return (
        f"a read completed at {t[ops[0]]} showed {_p(d['p1'])}; a read invoked later at {t[ops[1]]} ends at "
        f"{_p(d.get('reach')) if d.get('reach') else 'nothing'} and misses it"
    )


def audit(paths: Sequence[str], master: str | None = None, exact: bool = False) -> list[Audited]:
    """Audit already-validated histories in one Spark job; one Report per path (`exact`: see `checked`)."""
    from pyspark.sql import functions as F

    from spark import queue_audit
    from spark.history import LOG_OPS
    from spark.session import input_bytes, spark_session

    spark = spark_session(master, input_size=input_bytes(paths))
    events = load(spark, paths)
    case_rows, summary_rows = checked(spark, events.filter(F.col("f").isin(*LOG_OPS)), exact=exact)
    queue_rows: list[dict[str, Any]] = []
    figure_rows: list[dict[str, Any]] = []
    consumer_ops: dict[int, int] = {}
    if queue_audit.has_consumers(events):
        queue_rows, figure_rows, consumer_ops = queue_audit.run(spark, events)
    out = []
    for h, path in enumerate(paths):
        topics = {
            r["topic"]: TopicSummary(r["ops"], r["appends_ok"], r["appends_fail"], r["appends_info"], r["reads"])
            for r in summary_rows
            if r["h"] == h
        }
        cases = []
        for r in case_rows:
            if r["h"] != h:
                continue
            if r["anomaly"] == "gap":
                r["witness"], r["read"] = r["ops"][0], r["ops"][1]
            cases.append(Case(r["anomaly"], r["topic"], tuple(r["ops"]), explain(r)))
            topics.setdefault(r["topic"], TopicSummary()).anomalies += 1
        for r in queue_rows:
            if r["h"] == h:
                cases.append(Case(r["anomaly"], r["topic"], tuple(r["ops"]), queue_audit.explain(r)))
                topics.setdefault(r["topic"], TopicSummary()).anomalies += 1
        figures = [queue_audit.figures_of(r) for r in figure_rows if r["h"] == h]
        ops = sum(s.ops for s in topics.values()) + consumer_ops.get(h, 0)
        out.append(
            Audited(
                path, Report(ops=ops, cases=cases, topics=topics, subscriptions=sorted(figures, key=lambda f: f.key))
            )
        )
    return out


if __name__ == "__main__":
    from spark.cli import main

    sys.exit(main(sys.argv[1:], prog="spark-submit spark/audit.py"))
