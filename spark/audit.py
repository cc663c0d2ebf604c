"""The Spark audit job: the checks of spark/reference.py as a few shuffles, aggregations and two-level scans.

`audit` first runs the screen of spark/screen.py over the whole history (long integers and hash aggregates
only); the exact checks below, which compute the minimal witnesses, then run on the topics it flags: none for
a valid history.

Run through `pulsar-ref audit` or `spark-submit spark/submit.py HISTORY... [--json OUT] [--html OUT]` (spark/cli.py
calls this job; the job never calls the command line).
Definitions of every anomaly are in spark/reference.py's docstring; this job computes the same cases (the same
witness events) so the two can be compared on every test history.

Several histories are audited in one job: every key carries the history's number (`history`). Positions are
structs (ledger_id, entry_id, batch_index), which Spark orders lexicographically like docs/history.md. The job
reads the JSON once with an explicit schema, uses no Python UDFs, and shuffles the big data four times:
1. events by process: invokes paired with their completions (lead), cached as `ops` (one row per operation:
   `invoke_index`, `completion_index`, `outcome`, an append's `value` and acknowledged `position`, a read's
   `start`, `entries`, `highest_position` and `cut_by_limit`); read entries are parsed there once;
   nonmonotonic-append (lag over each process's acks per topic) needs no further shuffle;
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
spark/queue_audit.py, which decides the anomalies of subscriptions and measures their figures; one that read the
schema registry (a typed run's) goes through spark/schema_audit.py, one with compacted reads through
spark/compacted_audit.py. Non-persistent topics are judged apart, by
spark/np_audit.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark.history import format_position, format_time
from spark.report import Case, Report, TopicSummary
from spark.scan import read_entries, running_maxima

SCHEMA = (
    "index long, time long, process string, type string, f string, topic string, value string, "
    "position array<long>, `from` array<long>, limit long, final boolean, "
    # consumers (spark/queue_audit.py) and the nemesis's errors
    "subscription string, consumer string, subscription_type string, key string, partition string, "
    "redelivery_count long, cumulative boolean, error string, "
    # the cluster an operation went to, in a history of several (spark/geo.py)
    "cluster string, "
    # a typed run's deliveries and schema registry (spark/schema_audit.py)
    "schema_version long, versions array<long>, "
    # the message TTL a drain records (spark/queue_audit.py)
    "message_ttl long, "
    # compacted reads (spark/compacted_audit.py): an append's tombstone flag, a read-compacted's horizon
    "tombstone boolean, horizon array<long>"
)
# Bucket widths of the two-level windows: entries per (ledger, entry // POS_BUCKET) and events per
# index // INDEX_BUCKET. Large enough that the table of bucket boundaries stays small, small enough that a
# one-topic history of a million events makes dozens of buckets for the tasks to share.
POS_BUCKET = 4096
INDEX_BUCKET = 16384
POS_TYPE = "struct<ledger_id:long,entry_id:long,batch_index:long>"


@dataclass
class Audited:
    path: str
    report: Report


def _pos(col: Any) -> Any:
    """A history's position, [ledger_id, entry_id, batch_index], as a struct that orders like it."""
    from pyspark.sql import functions as F

    return F.struct(col[0].alias("ledger_id"), col[1].alias("entry_id"), col[2].alias("batch_index"))


def load(spark: Any, paths: Sequence[str]) -> Any:
    from pyspark.sql import functions as F

    from spark.history import is_parquet

    frames = []
    jsonl = [(h, path) for h, path in enumerate(paths) if not is_parquet(path)]
    if len(jsonl) == 1:
        frames.append(spark.read.schema(SCHEMA).json(jsonl[0][1]).withColumn("history", F.lit(jsonl[0][0])))
    elif jsonl:
        # One read for all JSON Lines files (a union of many reads makes a huge plan); the history's number from
        # the file name.
        names = spark.createDataFrame(
            [(Path(p).resolve().as_uri(), h) for h, p in jsonl], "file_uri string, history int"
        )
        df = spark.read.schema(SCHEMA).json([p for _, p in jsonl]).withColumn("file", F.input_file_name())
        df = df.join(F.broadcast(names), F.regexp_replace("file", "^file:/+", "file:///") == names.file_uri)
        frames.append(df.drop("file", "file_uri"))
    for h, path in enumerate(paths):
        if is_parquet(path):
            df = spark.read.parquet(path)
            # A column the file lacks (one written before the column existed) reads as null.
            cols = [
                (F.col(n) if n in df.columns else F.lit(None)).cast(c.split(maxsplit=1)[1])
                for c in SCHEMA.split(", ")
                for n in [c.split()[0].strip("`")]
            ]
            df = df.select(*[c.alias(n.split()[0].strip("`")) for c, n in zip(cols, SCHEMA.split(", "), strict=True)])
            frames.append(df.withColumn("history", F.lit(h)))
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


def _candidate(name: str, topic: Any, ops: list[Any], detail: Any, gap_read: Any = None, gap_order: Any = None) -> Any:
    """One anomaly case as a struct; gap candidates carry their read and where in it the skip is (`gap_order`: the
    first skip of a read wins)."""
    from pyspark.sql import functions as F

    return F.struct(
        F.lit(name).alias("anomaly"),
        topic.alias("topic"),
        F.array(*[o.cast("long") for o in ops]).alias("ops"),
        detail.alias("detail"),
        (gap_read if gap_read is not None else F.lit(None)).cast("long").alias("gap_read"),
        (gap_order if gap_order is not None else F.lit(None)).cast("long").alias("gap_order"),
    )


def _cases(df: Any, *candidates: Any) -> Any:
    """Rows (history, candidate fields) for the candidates that are not null; `candidates` are structs or arrays."""
    from pyspark.sql import functions as F

    arrays = [c if is_array else F.array(c) for c, is_array in candidates]
    found = F.filter(F.concat(*arrays), lambda c: c.isNotNull())
    return df.select("history", F.explode(found).alias("case")).select("history", "case.*")


def _pairs(spark: Any, events: Any) -> Any:
    """Operations: each invoke with its completion, the next event of its process (docs/history.md)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    events = events.filter(F.col("process") != "nemesis")
    by_process = Window.partitionBy("history", "process").orderBy("index")
    completion = F.lead(F.struct("index", "time", "type", "value", "position"), 1).over(by_process)
    paired = events.withColumn("completion", completion)
    ok_read = (F.col("f") == "read") & (F.col("completion.type") == "ok")
    ops = paired.filter(F.col("type") == "invoke").select(
        "history",
        "process",
        "f",
        "topic",
        F.col("index").alias("invoke_index"),
        F.col("time").alias("invoke_time"),
        F.when(F.col("f") == "append", F.col("value")).alias("value"),
        _pos(F.col("from")).alias("start"),
        "limit",
        F.coalesce("final", F.lit(False)).alias("final"),
        F.coalesce(F.col("completion.type"), F.lit("info")).alias("outcome"),
        F.col("completion.index").alias("completion_index"),
        F.col("completion.time").alias("completion_time"),
        F.when(F.col("f") == "append", _pos(F.col("completion.position"))).alias("position"),
        # A read's entries parsed once: [(position, value)] in delivery order.
        F.when(
            ok_read,
            F.transform(
                read_entries(F.col("completion.value")),
                lambda x: F.struct(_pos(x["position"]).alias("position"), x["value"].alias("value")),
            ),
        ).alias("entries"),
    )
    ops = ops.withColumn("start", F.when(F.col("start.ledger_id").isNotNull(), F.col("start")))
    n = F.size("entries")
    return ops.select(
        "*",
        (F.col("limit").isNotNull() & (n >= F.col("limit"))).alias("cut_by_limit"),
        F.array_max(F.transform("entries", lambda x: x["position"])).alias("highest_position"),
    )


def _nonmonotonic_appends(acks: Any) -> Any:
    """Consecutive acks of one process on one topic (ops are already partitioned by process: no shuffle)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_process_topic = Window.partitionBy("history", "process", "topic").orderBy("completion_index")
    previous = F.lag(F.struct("completion_index", "position", "value"), 1).over(by_process_topic)
    lower = acks.withColumn("previous", previous).filter(
        F.col("previous").isNotNull() & (F.col("position") <= F.col("previous.position"))
    )
    detail = F.to_json(
        F.struct(
            "process",
            F.col("previous.value").alias("v1"),
            F.col("previous.position").alias("p1"),
            F.col("value").alias("val"),
            F.col("position").alias("pos"),
        )
    )
    ops = [F.col("previous.completion_index"), F.col("completion_index")]
    return _cases(lower, (_candidate("nonmonotonic-append", F.col("topic"), ops, detail), False))


def _by_position(acks: Any, shown: Any) -> Any:
    """duplicate-position, divergent-read (b) and gap from one aggregate per (topic, position).

    Two aggregation levels over one shuffle: per (position, value) first, so that the lists compared per
    position hold one entry per distinct value (a position shown by thousands of reads stays cheap).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    observations = acks.select(
        "history",
        "topic",
        F.col("completion_index").alias("index"),
        "position",
        "value",
        F.lit(False).alias("by_read"),
        F.lit(None).cast("long").alias("order_in_read"),
        F.lit(None).cast(POS_TYPE).alias("next_position"),
    ).unionByName(
        shown.select(
            "history",
            "topic",
            "index",
            "position",
            "value",
            F.lit(True).alias("by_read"),
            "order_in_read",
            "next_position",
        )
    )
    # The bucket (ledger, entry // POS_BUCKET) is monotone in the position: buckets partition a topic in order.
    bucket = F.struct(
        F.col("position.ledger_id").alias("ledger_id"), F.floor(F.col("position.entry_id") / POS_BUCKET).alias("entry")
    )
    observations = observations.withColumn("position_bucket", bucket)
    per_value = (
        observations.repartition("history", "topic", "position_bucket")
        .groupBy("history", "topic", "position_bucket", "position", "value")
        .agg(
            F.min("index").alias("first_seen"),
            F.min(F.when(F.col("by_read"), F.col("index"))).alias("first_read"),
            # Consecutive read entries (this one, the next) for gap.
            F.collect_list(
                F.when(F.col("next_position").isNotNull(), F.struct("index", "order_in_read", "next_position"))
            ).alias("read_steps"),
        )
    )
    known = per_value.groupBy("history", "topic", "position_bucket", "position").agg(
        F.min("first_seen").alias("first_seen"),
        F.collect_list(F.struct("first_seen", "first_read", "value")).alias("values"),
        F.flatten(F.collect_list("read_steps")).alias("read_steps"),
    )
    # Successor of each known position: lead within its bucket, else the first position of the next bucket.
    in_bucket = Window.partitionBy("history", "topic", "position_bucket").orderBy("position")
    known = known.withColumn("successor", F.lead(F.struct("position", "first_seen")).over(in_bucket))
    # The first position of each bucket (and its earliest observation), aggregated before any shuffle: a small
    # table. (Taking it from `known` would shuffle the observations a second time, pruned to fewer columns.)
    heads = observations.groupBy("history", "topic", "position_bucket").agg(
        F.min(F.struct("position", F.col("index").alias("first_seen"))).alias("bucket_head")
    )
    in_topic = Window.partitionBy("history", "topic").orderBy("position_bucket")
    next_heads = heads.select(
        "history", "topic", "position_bucket", F.lead("bucket_head").over(in_topic).alias("next_bucket_head")
    )
    known = known.join(next_heads, ["history", "topic", "position_bucket"], "left").withColumn(
        "successor", F.coalesce("successor", "next_bucket_head")
    )

    def first_two(seen: Any) -> tuple[Any, Any]:
        first = F.array_min(seen)
        return first, F.array_min(F.filter(seen, lambda x: x["value"] != first["value"]))

    seen1, seen2 = first_two(
        F.transform("values", lambda x: F.struct(x["first_seen"].alias("index"), x["value"].alias("value")))
    )
    read1, read2 = first_two(
        F.transform(
            F.filter("values", lambda x: x["first_read"].isNotNull()),
            lambda x: F.struct(x["first_read"].alias("index"), x["value"].alias("value")),
        )
    )
    topic = F.col("topic")

    def dup(name: str, a: Any, b: Any) -> Any:
        detail = F.to_json(F.struct(F.col("position").alias("pos"), a["value"].alias("v1"), b["value"].alias("v2")))
        return F.when(b.isNotNull(), _candidate(name, topic, [a["index"], b["index"]], detail))

    successor = F.col("successor")
    gaps = F.transform(
        F.filter("read_steps", lambda x: successor.isNotNull() & (successor["position"] < x["next_position"])),
        lambda x: _candidate(
            "gap",
            topic,
            [successor["first_seen"], x["index"]],
            F.to_json(
                F.struct(F.col("position").alias("a"), x["next_position"].alias("b"), successor["position"].alias("k"))
            ),
            gap_read=x["index"],
            gap_order=x["order_in_read"],
        ),
    )
    return _cases(
        known,
        (dup("duplicate-position", seen1, seen2), False),
        (dup("divergent-read", read1, read2), False),
        (gaps, True),
    )


def _by_value(appends: Any, shown: Any, finals: Any) -> Any:
    """duplicate-value, phantom-read, failed-write-visible, divergent-read (a), lost-write: one aggregate per value.

    As for positions, two levels: per (value, position), then per value over one entry per distinct position.
    """
    from pyspark.sql import functions as F

    rows = appends.select(
        "history",
        "value",
        "position",
        F.lit(True).alias("is_append"),
        "outcome",
        F.col("completion_index").alias("index"),
        "topic",
        F.lit(False).alias("final_read"),
    ).unionByName(
        shown.select(
            "history",
            "value",
            "position",
            F.lit(False).alias("is_append"),
            F.lit(None).cast("string").alias("outcome"),
            "index",
            "topic",
            "final_read",
        )
    )
    is_append, seen = F.col("is_append"), ~F.col("is_append") | (F.col("outcome") == "ok")
    per_position = (
        rows.repartition("history", "value")
        .groupBy("history", "value", "position")
        .agg(
            F.max(F.when(is_append, F.struct("outcome", "index", "topic"))).alias("append"),  # one per value at most
            F.min(F.when(seen, F.struct("index", "topic"))).alias("first_seen"),  # earliest observation here
            F.min(F.when(~is_append, F.struct("index", "topic"))).alias("first_read"),  # earliest read showing it
            F.collect_list(F.when(F.col("final_read"), F.col("index"))).alias("final_reads"),  # final reads showing it
        )
    )
    per_value = per_position.groupBy("history", "value").agg(
        F.max(F.when(F.col("append").isNotNull(), F.struct(F.col("append").alias("append"), F.col("position")))).alias(
            "appended"
        ),
        F.collect_list(F.struct("first_seen", "first_read", "position")).alias("seen_at"),
        F.flatten(F.collect_list("final_reads")).alias("final_reads_showing"),
    )
    # The final reads of the append's topic (few: broadcast), for lost-write.
    per_value = per_value.withColumn(
        "append",
        F.struct(
            F.col("appended.append.outcome").alias("outcome"),
            F.col("appended.append.index").alias("index"),
            F.col("appended.append.topic").alias("topic"),
            F.col("appended.position").alias("position"),
        ),
    ).withColumn("append", F.when(F.col("appended").isNotNull(), F.col("append")))
    per_value = per_value.withColumn("final_topic", F.col("append.topic")).join(
        F.broadcast(finals), ["history", "final_topic"], "left"
    )
    append = F.col("append")

    def index_position_topic(o: str) -> Any:
        return lambda x: F.struct(
            x[o]["index"].alias("index"), x["position"].alias("position"), x[o]["topic"].alias("topic")
        )

    observed = F.transform(
        F.filter("seen_at", lambda x: x["first_seen"].isNotNull()), index_position_topic("first_seen")
    )
    seen1 = F.array_min(observed)
    seen2 = F.array_min(F.filter(observed, lambda x: x["position"] != seen1["position"]))
    reads = F.transform(F.filter("seen_at", lambda x: x["first_read"].isNotNull()), index_position_topic("first_read"))
    read = F.array_min(reads)
    elsewhere = F.array_min(F.filter(reads, lambda x: x["position"] != append["position"]))
    final_reads = F.coalesce("final_reads", F.array().cast("array<long>"))
    missing = F.array_min(F.array_except(final_reads, F.col("final_reads_showing")))
    value = F.col("value")
    ok = append["outcome"] == "ok"
    return _cases(
        per_value,
        (
            F.when(
                seen2.isNotNull(),
                _candidate(
                    "duplicate-value",
                    seen1["topic"],
                    [seen1["index"], seen2["index"]],
                    F.to_json(
                        F.struct(value.alias("val"), seen1["position"].alias("p1"), seen2["position"].alias("p2"))
                    ),
                ),
            ),
            False,
        ),
        (
            F.when(
                append.isNull() & read.isNotNull(),
                _candidate(
                    "phantom-read",
                    read["topic"],
                    [read["index"]],
                    F.to_json(F.struct(value.alias("val"), read["position"].alias("p"))),
                ),
            ),
            False,
        ),
        (
            F.when(
                (append["outcome"] == "fail") & read.isNotNull(),
                _candidate(
                    "failed-write-visible",
                    read["topic"],
                    [append["index"], read["index"]],
                    F.to_json(F.struct(value.alias("val"), read["position"].alias("p"))),
                ),
            ),
            False,
        ),
        (
            F.when(
                ok & elsewhere.isNotNull(),
                _candidate(
                    "divergent-read",
                    elsewhere["topic"],
                    [append["index"], elsewhere["index"]],
                    F.to_json(
                        F.struct(value.alias("val"), append["position"].alias("p1"), elsewhere["position"].alias("p2"))
                    ),
                ),
            ),
            False,
        ),
        (
            F.when(
                ok & missing.isNotNull(),
                _candidate(
                    "lost-write",
                    append["topic"],
                    [append["index"], missing],
                    F.to_json(F.struct(value.alias("val"), append["position"].alias("pos"))),
                ),
            ),
            False,
        ),
    )


def _running_maxima(acks: Any, reads: Any) -> Any:
    """realtime-reorder, stale-read, nonmonotonic-read: running maxima per topic over events in index order.

    Acks and read reaches contribute at their completion, appends and reads query at their invoke (ties on
    position: the earliest event, hence the negated index). Two-level (spark/scan.py): a running maximum within each
    bucket of INDEX_BUCKET events, plus the maximum of all earlier buckets of the topic.
    """
    from pyspark.sql import functions as F

    none = F.lit(None)
    ack_type = f"struct<position:{POS_TYPE},negated_index:long,value:string>"
    reach_type = f"struct<position:{POS_TYPE},negated_index:long>"
    columns = [
        "history", "topic", "index", "ack", "read_reach", "query_value", "query_position", "start", "query_reach",
        "cut_by_limit", "query_completion",
    ]  # fmt: skip

    def row(
        index: Any,
        ack: Any = none,
        read_reach: Any = none,
        query_value: Any = none,
        query_position: Any = none,
        start: Any = none,
        query_reach: Any = none,
        cut_by_limit: Any = None,
        query_completion: Any = none,
    ) -> list[Any]:
        """One row of the scan: a contribution (an ack, a read's reach) or a query (an append's or a read's
        invoke, with its completion), at event `index`."""
        return [
            "history",
            "topic",
            index.alias("index"),
            ack.cast(ack_type).alias("ack"),
            read_reach.cast(reach_type).alias("read_reach"),
            query_value.cast("string").alias("query_value"),
            query_position.cast(POS_TYPE).alias("query_position"),
            start.cast(POS_TYPE).alias("start"),
            query_reach.cast(POS_TYPE).alias("query_reach"),
            (cut_by_limit if cut_by_limit is not None else F.lit(False)).alias("cut_by_limit"),
            query_completion.cast("long").alias("query_completion"),
        ]

    completed, invoked = F.col("completion_index"), F.col("invoke_index")
    zero = F.struct(*[F.lit(0).cast("long").alias(k) for k in ("ledger_id", "entry_id", "batch_index")])
    ack = F.struct(
        F.col("position").alias("position"), (-completed).alias("negated_index"), F.col("value").alias("value")
    )
    reach = F.struct(F.col("highest_position").alias("position"), (-completed).alias("negated_index"))
    scan_in = (
        acks.select(*row(completed, ack=ack))
        .unionByName(reads.filter(F.col("highest_position").isNotNull()).select(*row(completed, read_reach=reach)))
        .unionByName(
            acks.select(
                *row(invoked, query_value=F.col("value"), query_position=F.col("position"), query_completion=completed)
            )
        )
        .unionByName(
            reads.select(
                *row(
                    invoked,
                    start=F.coalesce("start", zero),
                    query_reach=F.col("highest_position"),
                    cut_by_limit=F.col("cut_by_limit"),
                    query_completion=completed,
                )
            )
        )
        .select(*columns)
        .withColumn("index_bucket", F.floor(F.col("index") / INDEX_BUCKET))
    )
    queries = running_maxima(scan_in, ["history", "topic"], keep=F.col("query_completion").isNotNull())
    highest_ack, highest_reach = F.col("highest_ack"), F.col("highest_reach")
    query_reach, topic = F.col("query_reach"), F.col("topic")
    query = [F.col("index"), F.col("query_completion")]
    misses = ~F.col("cut_by_limit") & F.col("query_value").isNull()  # a read query that could miss something

    def missed(m: Any) -> Any:
        return misses & (m["position"] >= F.col("start")) & (query_reach.isNull() | (query_reach < m["position"]))

    reorder = _candidate(
        "realtime-reorder",
        topic,
        [-highest_ack["negated_index"], *query],
        F.to_json(
            F.struct(
                highest_ack["value"].alias("v1"),
                highest_ack["position"].alias("p1"),
                F.col("query_value").alias("v2"),
                F.col("query_position").alias("p2"),
            )
        ),
    )
    stale = _candidate(
        "stale-read",
        topic,
        [-highest_ack["negated_index"], *query],
        F.to_json(
            F.struct(highest_ack["value"].alias("v1"), highest_ack["position"].alias("p1"), query_reach.alias("reach"))
        ),
    )
    nonmonotonic_read = _candidate(
        "nonmonotonic-read",
        topic,
        [-highest_reach["negated_index"], *query],
        F.to_json(F.struct(highest_reach["position"].alias("p1"), query_reach.alias("reach"))),
    )
    reordered = F.col("query_value").isNotNull() & (highest_ack["position"] > F.col("query_position"))
    return _cases(
        queries,
        (F.when(reordered, reorder), False),
        (F.when(missed(highest_ack), stale), False),
        (F.when(missed(highest_reach), nonmonotonic_read), False),
    )


def run_checks(
    spark: Any, events: Any, topics: dict[tuple[int, str], frozenset[str]] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return (case rows, topic summary rows). Case rows: anomaly, history, topic, ops, times, detail.

    With `topics` (the screen's suspects: the (history, topic) pairs `events` holds, each with the families of checks of
    spark/screen.py it needs) only those families run on each topic, and there is no summary (the screen has one).
    """
    from pyspark.sql import functions as F

    from spark.screen import FAMILIES

    ops = _pairs(spark, events).cache()
    if topics is None:
        every = frozenset(FAMILIES)
        found_topics = ops.select("history", "topic").distinct().collect()
        families = {(r["history"], r["topic"]): every for r in found_topics}
    else:
        families = topics
    # Topics become small integers for the shuffles and sorts (names are long and repeated); names come back at
    # the end.
    names = sorted(families)
    topic_ids = spark.createDataFrame(
        [(h, t, i) for i, (h, t) in enumerate(names)], "history int, topic string, topic_id int"
    )
    numbered = ops.join(F.broadcast(topic_ids), ["history", "topic"]).drop("topic")
    numbered = numbered.withColumnRenamed("topic_id", "topic")
    appends = numbered.filter(F.col("f") == "append")
    acks = appends.filter(F.col("outcome") == "ok")
    reads = numbered.filter((F.col("f") == "read") & (F.col("outcome") == "ok"))
    whole_final = F.col("final") & ~F.col("cut_by_limit")
    # Read entries (`index`: the read's completion) with their order in the read and the next entry's position
    # (for gap).
    shown = reads.select(
        "history",
        "topic",
        F.col("completion_index").alias("index"),
        whole_final.alias("final_read"),
        F.posexplode(
            F.transform(
                "entries",
                lambda x, i: F.struct(
                    x["position"].alias("position"),
                    x["value"].alias("value"),
                    F.get("entries", i + 1)["position"].alias("next_position"),
                ),
            )
        ).alias("order_in_read", "entry"),
    ).select("history", "topic", "index", "final_read", "order_in_read", "entry.*")
    finals = (
        reads.filter(whole_final)
        .groupBy("history", F.col("topic").alias("final_topic"))
        .agg(F.collect_list("completion_index").alias("final_reads"))
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
        (_by_position, of("position", acks, shown)),
        (_by_value, of("value", appends, shown, finals)),
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
        elif (key := (r["history"], r["gap_read"])) not in first_gap or r["gap_order"] < first_gap[key]["gap_order"]:
            first_gap[key] = r
    case_rows.extend(first_gap.values())

    summary_rows: list[dict[str, Any]] = []
    if topics is None:
        summary = ops.groupBy("history", "topic").agg(
            F.count("*").alias("ops"),
            F.sum(((F.col("f") == "append") & (F.col("outcome") == "ok")).cast("int")).alias("appends_ok"),
            F.sum(((F.col("f") == "append") & (F.col("outcome") == "fail")).cast("int")).alias("appends_fail"),
            F.sum(((F.col("f") == "append") & (F.col("outcome") == "info")).cast("int")).alias("appends_info"),
            F.sum((F.col("f") == "read").cast("int")).alias("reads"),
        )
        summary_rows = [r.asDict() for r in summary.collect()]
    # Times of the witness events, for the explanations (witnesses are invokes and completions of ops).
    wanted = sorted({(r["history"], i) for r in case_rows for i in r["ops"]})
    times: dict[tuple[int, int], int] = {}
    if wanted:
        want_df = F.broadcast(spark.createDataFrame(wanted, "history int, index long"))
        invokes = ops.select("history", F.col("invoke_index").alias("index"), F.col("invoke_time").alias("time"))
        completions = ops.filter(F.col("completion_index").isNotNull()).select(
            "history", F.col("completion_index").alias("index"), F.col("completion_time").alias("time")
        )
        for r in invokes.unionByName(completions).join(want_df, ["history", "index"]).collect():
            times[(r["history"], r["index"])] = r["time"]
    for r in case_rows:
        r["times"] = {i: times.get((r["history"], i)) for i in r["ops"]}
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
    suspects = spark.createDataFrame(sorted(screened.suspects), "history int, topic string")
    case_rows, _ = run_checks(spark, events.join(F.broadcast(suspects), ["history", "topic"]), screened.suspects)
    return case_rows, screened.summary


def _p(d: Any) -> str:
    return format_position(None if d is None else (d["ledger_id"], d["entry_id"], d["batch_index"]))


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


def audit(
    paths: Sequence[str], master: str | None = None, exact: bool = False, replication_dedup: bool = True
) -> list[Audited]:
    """Audit already-validated histories in one Spark job; one Report per path (`exact`: see `checked`). A history
    of several clusters is checked per cluster and for replication (spark/geo_audit.py)."""
    from pyspark.sql import functions as F

    from spark import compacted_audit, geo_audit, np_audit, queue_audit, schema_audit
    from spark.history import LOG_OPS
    from spark.session import input_bytes, spark_session

    spark = spark_session(master, input_size=input_bytes(paths))
    events = load(spark, paths)
    live: tuple[list[Any], list[Any], dict[int, int], list[Any]] = ([], [], {}, [])
    if np_audit.has_non_persistent(events):
        live = np_audit.run(spark, events)
        events = events.filter(~np_audit.of_non_persistent(events))
    log_events = events.filter(F.col("f").isin(*LOG_OPS))
    geo_rows: list[dict[str, Any]] = []
    if geo_audit.has_clusters(events):
        geo_rows = geo_audit.replication_rows(spark, log_events, replication_dedup)
        log_events = geo_audit.local_events(log_events)
    case_rows, summary_rows = checked(spark, log_events, exact=exact)
    queue_rows: list[dict[str, Any]] = []
    figure_rows: list[dict[str, Any]] = []
    consumer_ops: dict[int, int] = {}
    expired_rows: list[dict[str, Any]] = []
    if queue_audit.has_consumers(events):
        queue_rows, figure_rows, consumer_ops, expired_rows = queue_audit.run(spark, events)
    schema_rows: list[dict[str, Any]] = []
    schema_ops: dict[int, int] = {}
    if schema_audit.has_schemas(events):
        schema_rows, schema_ops = schema_audit.run(events)
    compacted_rows: list[dict[str, Any]] = []
    compacted_ops: dict[int, int] = {}
    if compacted_audit.has_compacted(events):
        compacted_rows, compacted_ops = compacted_audit.run(events)
    out = []
    for h, path in enumerate(paths):
        topics = {
            r["topic"]: TopicSummary(r["ops"], r["appends_ok"], r["appends_fail"], r["appends_info"], r["reads"])
            for r in summary_rows
            if r["history"] == h
        }
        for hh, topic, summary in live[3]:  # appends to non-persistent topics: no reads
            if hh == h:
                topics[topic] = summary
        cases = []
        for r in case_rows:
            if r["history"] != h:
                continue
            if r["anomaly"] == "gap":
                r["witness"], r["read"] = r["ops"][0], r["ops"][1]
            cases.append(Case(r["anomaly"], r["topic"], tuple(r["ops"]), explain(r)))
            topics.setdefault(r["topic"], TopicSummary()).anomalies += 1
        for r in queue_rows:
            if r["history"] == h:
                cases.append(Case(r["anomaly"], r["topic"], tuple(r["ops"]), queue_audit.explain(r)))
                topics.setdefault(r["topic"], TopicSummary()).anomalies += 1
        for r in geo_rows + schema_rows + compacted_rows:
            if r["history"] == h:
                cases.append(Case(r["anomaly"], r["topic"], tuple(r["ops"]), r["explanation"]))
                topics.setdefault(r["topic"], TopicSummary()).anomalies += 1
        for hh, c in live[0]:
            if hh == h:
                cases.append(c)
                topics.setdefault(c.topic, TopicSummary()).anomalies += 1
        figures = [queue_audit.figures_of(r) for r in figure_rows if r["history"] == h]
        ops = sum(s.ops for s in topics.values()) + consumer_ops.get(h, 0) + live[2].get(h, 0)
        ops += schema_ops.get(h, 0) + compacted_ops.get(h, 0)
        report = Report(ops=ops, cases=cases, topics=topics, subscriptions=sorted(figures, key=lambda f: f.key))
        report.non_persistent = sorted((f for hh, f in live[1] if hh == h), key=lambda f: f.key)
        expired = (queue_audit.expired_of(r) for r in expired_rows if r["history"] == h)
        report.expired = sorted(expired, key=lambda f: f.key)
        out.append(Audited(path, report))
    return out
