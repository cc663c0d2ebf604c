"""The Spark audit job: the checks of spark/reference.py as sorts, joins, group-bys and one prefix-maximum scan.

Run as `spark-submit spark/audit.py HISTORY... [--json OUT] [--html OUT]` or through `pulsar-ref audit`.
Definitions of every anomaly are in spark/reference.py's docstring; this job computes the same cases (the same
witness events) so the two can be compared on every test history.

Several histories are audited in one job: every key carries the history number `h`. Positions are structs
(l, e, b), which Spark orders lexicographically like HISTORY.md. Dataflow:
- ops: invokes paired with their completions (lead over each process's events in index order);
- obs: observations (acks and exploded read entries);
- group-bys over obs for duplicate-position / duplicate-value / divergent-read (b);
- joins of read entries with appends for divergent-read (a), phantom-read, failed-write-visible;
- gap: the sorted known positions of a topic give each position's successor (lead), joined with consecutive
  read entries;
- lost-write: acks joined with the final reads of their topic, anti-joined with those reads' entries;
- nonmonotonic-append: lag over each process's acks;
- realtime-reorder, stale-read, nonmonotonic-read: one running maximum per topic over events in index order
  (acks and read reaches contribute at their completion, appends and reads query at their invoke).

Known limitation: the per-topic windows (successor, running maximum) partition by topic, so one topic's rows
are sorted in one task; the reference two-pass range-partitioned scan is not implemented yet.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `spark-submit spark/audit.py`: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark.history import format_position, format_time  # noqa: E402
from spark.report import Case, Report, TopicSummary  # noqa: E402

SCHEMA = (
    "index long, time long, process string, type string, f string, topic string, value string, "
    "position array<long>, `from` array<long>, limit long, final boolean"
)


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
    if jsonl:
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


def run_checks(spark: Any, events: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return (case rows, topic summary rows). Case rows: anomaly, h, topic, ops, detail fields."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ev = events.filter(F.col("process") != "nemesis")
    w_proc = Window.partitionBy("h", "process").orderBy("index")
    paired = ev.withColumn("nxt", F.lead(F.struct("index", "time", "type", "value", "position"), 1).over(w_proc))
    ops = paired.filter(F.col("type") == "invoke").select(
        "h",
        "process",
        "f",
        "topic",
        F.col("index").alias("inv"),
        F.col("time").alias("inv_time"),
        F.when(F.col("f") == "append", F.col("value")).alias("val"),
        F.col("from").alias("start"),
        "limit",
        F.coalesce("final", F.lit(False)).alias("final"),
        F.coalesce(F.col("nxt.type"), F.lit("info")).alias("outcome"),
        F.col("nxt.index").alias("cmp"),
        F.col("nxt.time").alias("cmp_time"),
        F.when(F.col("f") == "append", _pos(F.col("nxt.position"))).alias("pos"),
        F.when((F.col("f") == "read") & (F.col("nxt.type") == "ok"), F.col("nxt.value")).alias("raw"),
    )
    ops = ops.cache()
    appends = ops.filter(F.col("f") == "append").select("h", "topic", "process", "val", "outcome", "inv", "cmp", "pos")
    acks = appends.filter(F.col("outcome") == "ok")
    reads = ops.filter((F.col("f") == "read") & (F.col("outcome") == "ok")).withColumn(
        "entries", F.from_json("raw", "array<array<string>>")
    )
    reads = reads.withColumn("n", F.size("entries")).withColumn(
        "cut", F.col("limit").isNotNull() & (F.col("n") >= F.col("limit"))
    )
    robs = reads.select("h", "topic", F.col("cmp").alias("idx"), F.posexplode("entries").alias("ord", "entry")).select(
        "h",
        "topic",
        "idx",
        "ord",
        _pos(F.from_json(F.col("entry")[0], "array<long>")).alias("pos"),
        F.col("entry")[1].alias("val"),
    )
    robs = robs.cache()
    obs = acks.select("h", "topic", F.col("cmp").alias("idx"), "pos", "val").unionByName(
        robs.select("h", "topic", "idx", "pos", "val")
    )
    cases: list[Any] = []

    def case(df: Any, name: str, *ops_cols: Any, detail: Any = None) -> None:
        cols = [F.lit(name).alias("anomaly"), "h", "topic", F.array(*ops_cols).alias("ops")]
        cols.append((detail if detail is not None else F.lit("")).alias("detail"))
        cases.append(df.select(*cols))

    def by_position(o: Any, name: str) -> None:
        first = o.groupBy("h", "topic", "pos").agg(F.min(F.struct("idx", "val")).alias("first"))
        second = (
            o.join(first, ["h", "topic", "pos"])
            .filter(F.col("val") != F.col("first.val"))
            .groupBy("h", "topic", "pos", "first")
            .agg(F.min(F.struct("idx", "val")).alias("second"))
        )
        detail = F.to_json(F.struct("pos", F.col("first.val").alias("v1"), F.col("second.val").alias("v2")))
        case(second, name, F.col("first.idx"), F.col("second.idx"), detail=detail)

    by_position(obs, "duplicate-position")
    by_position(robs.select("h", "topic", "idx", "pos", "val"), "divergent-read")

    firstv = obs.groupBy("h", "val").agg(F.min(F.struct("idx", "pos", "topic")).alias("first"))
    secondv = (
        obs.join(firstv, ["h", "val"])
        .filter(F.col("pos") != F.col("first.pos"))
        .groupBy("h", "val", "first")
        .agg(F.min(F.struct("idx", "pos")).alias("second"))
        .withColumn("topic", F.col("first.topic"))
    )
    case(
        secondv,
        "duplicate-value",
        F.col("first.idx"),
        F.col("second.idx"),
        detail=F.to_json(F.struct("val", F.col("first.pos").alias("p1"), F.col("second.pos").alias("p2"))),
    )

    ap = appends.select(
        "h", "val", F.col("outcome").alias("a_out"), F.col("cmp").alias("a_cmp"), F.col("pos").alias("a_pos")
    )
    joined = robs.join(ap, ["h", "val"], "left")
    phantom = (
        joined.filter(F.col("a_out").isNull())
        .groupBy("h", "val")
        .agg(F.min(F.struct("idx", "pos", "topic")).alias("r"))
    )
    case(
        phantom.withColumn("topic", F.col("r.topic")),
        "phantom-read",
        F.col("r.idx"),
        detail=F.to_json(F.struct("val", F.col("r.pos").alias("p"))),
    )
    failed = (
        joined.filter(F.col("a_out") == "fail")
        .groupBy("h", "val", "a_cmp")
        .agg(F.min(F.struct("idx", "pos", "topic")).alias("r"))
    )
    case(
        failed.withColumn("topic", F.col("r.topic")),
        "failed-write-visible",
        F.col("a_cmp"),
        F.col("r.idx"),
        detail=F.to_json(F.struct("val", F.col("r.pos").alias("p"))),
    )
    div = (
        joined.filter((F.col("a_out") == "ok") & (F.col("pos") != F.col("a_pos")))
        .groupBy("h", "val", "a_cmp", "a_pos")
        .agg(F.min(F.struct("idx", "pos", "topic")).alias("r"))
    )
    case(
        div.withColumn("topic", F.col("r.topic")),
        "divergent-read",
        F.col("a_cmp"),
        F.col("r.idx"),
        detail=F.to_json(F.struct("val", F.col("a_pos").alias("p1"), F.col("r.pos").alias("p2"))),
    )

    # gap: successor of each known position, joined with consecutive read entries.
    known = obs.groupBy("h", "topic", "pos").agg(F.min("idx").alias("w"))
    w_topic_pos = Window.partitionBy("h", "topic").orderBy("pos")
    known = known.withColumn("succ", F.lead(F.struct("pos", "w"), 1).over(w_topic_pos))
    w_read = Window.partitionBy("h", "idx").orderBy("ord")
    pairs = robs.withColumn("b", F.lead("pos", 1).over(w_read)).filter(F.col("b").isNotNull())
    gaps = (
        pairs.join(known.select("h", "topic", "pos", "succ"), ["h", "topic", "pos"])
        .filter(F.col("succ.pos") < F.col("b"))
        .groupBy("h", "topic", "idx")
        .agg(F.min(F.struct("ord", "pos", "b", "succ")).alias("g"))
    )
    case(
        gaps,
        "gap",
        F.col("g.succ.w"),
        F.col("idx"),
        detail=F.to_json(F.struct(F.col("g.pos").alias("a"), F.col("g.b").alias("b"), F.col("g.succ.pos").alias("k"))),
    )

    # lost-write: acks x final reads of their topic, minus what those reads show.
    finals = reads.filter(F.col("final") & ~F.col("cut")).select("h", "topic", F.col("cmp").alias("idx"))
    lost = (
        acks.join(finals, ["h", "topic"])
        .join(robs.select("h", "idx", "val"), ["h", "idx", "val"], "left_anti")
        .groupBy("h", "topic", "val", "cmp", "pos")
        .agg(F.min("idx").alias("idx"))
    )
    case(lost, "lost-write", F.col("cmp"), F.col("idx"), detail=F.to_json(F.struct("val", "pos")))

    # nonmonotonic-append: consecutive acks of one process on one topic.
    w_pt = Window.partitionBy("h", "process", "topic").orderBy("cmp")
    nm = acks.withColumn("prev", F.lag(F.struct("cmp", "pos", "val"), 1).over(w_pt)).filter(
        F.col("prev").isNotNull() & (F.col("pos") <= F.col("prev.pos"))
    )
    case(
        nm,
        "nonmonotonic-append",
        F.col("prev.cmp"),
        F.col("cmp"),
        detail=F.to_json(
            F.struct("process", F.col("prev.val").alias("v1"), F.col("prev.pos").alias("p1"), "val", "pos")
        ),
    )

    # One running maximum per topic: contributions at completions, queries at invokes.
    reach = robs.groupBy("h", "idx").agg(F.max("pos").alias("reach"))
    reads_r = reads.join(reach.withColumnRenamed("idx", "cmp"), ["h", "cmp"], "left")
    null_pos = F.lit(None).cast("struct<l:long,e:long,b:long>")
    contrib_cols = ["h", "topic", "idx", "ack", "rd", "q", "qpos", "start", "qreach", "cut", "qcmp"]
    ack_rows = acks.select(
        "h",
        "topic",
        F.col("cmp").alias("idx"),
        F.struct(F.col("pos").alias("p"), (-F.col("cmp")).alias("ni"), F.col("val").alias("v")).alias("ack"),
        F.lit(None).cast("struct<p:struct<l:long,e:long,b:long>,ni:long>").alias("rd"),
        F.lit(None).cast("string").alias("q"),
        null_pos.alias("qpos"),
        null_pos.alias("start"),
        null_pos.alias("qreach"),
        F.lit(False).alias("cut"),
        F.lit(None).cast("long").alias("qcmp"),
    )
    read_rows = reads_r.filter(F.col("reach").isNotNull()).select(
        "h",
        "topic",
        F.col("cmp").alias("idx"),
        F.lit(None).cast("struct<p:struct<l:long,e:long,b:long>,ni:long,v:string>").alias("ack"),
        F.struct(F.col("reach").alias("p"), (-F.col("cmp")).alias("ni")).alias("rd"),
        F.lit(None).cast("string").alias("q"),
        null_pos.alias("qpos"),
        null_pos.alias("start"),
        null_pos.alias("qreach"),
        F.lit(False).alias("cut"),
        F.lit(None).cast("long").alias("qcmp"),
    )
    qa = acks.select(
        "h",
        "topic",
        F.col("inv").alias("idx"),
        F.lit(None).cast("struct<p:struct<l:long,e:long,b:long>,ni:long,v:string>").alias("ack"),
        F.lit(None).cast("struct<p:struct<l:long,e:long,b:long>,ni:long>").alias("rd"),
        F.col("val").alias("q"),
        F.col("pos").alias("qpos"),
        null_pos.alias("start"),
        null_pos.alias("qreach"),
        F.lit(False).alias("cut"),
        F.col("cmp").alias("qcmp"),
    )
    qr = reads_r.select(
        "h",
        "topic",
        F.col("inv").alias("idx"),
        F.lit(None).cast("struct<p:struct<l:long,e:long,b:long>,ni:long,v:string>").alias("ack"),
        F.lit(None).cast("struct<p:struct<l:long,e:long,b:long>,ni:long>").alias("rd"),
        F.lit(None).cast("string").alias("q"),
        null_pos.alias("qpos"),
        F.coalesce(
            _pos(F.col("start")),
            F.struct(
                F.lit(0).cast("long").alias("l"), F.lit(0).cast("long").alias("e"), F.lit(0).cast("long").alias("b")
            ),
        ).alias("start"),
        F.col("reach").alias("qreach"),
        "cut",
        F.col("cmp").alias("qcmp"),
    )
    scan_in = ack_rows.unionByName(read_rows).unionByName(qa).unionByName(qr).select(*contrib_cols)
    w_scan = Window.partitionBy("h", "topic").orderBy("idx").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    scan = scan_in.withColumn("mack", F.max("ack").over(w_scan)).withColumn("mrd", F.max("rd").over(w_scan))
    queries = scan.filter(F.col("qcmp").isNotNull()).cache()
    reorder = queries.filter(F.col("q").isNotNull() & (F.col("mack.p") > F.col("qpos")))
    case(
        reorder,
        "realtime-reorder",
        -F.col("mack.ni"),
        F.col("idx"),
        F.col("qcmp"),
        detail=F.to_json(
            F.struct(
                F.col("mack.v").alias("v1"),
                F.col("mack.p").alias("p1"),
                F.col("q").alias("v2"),
                F.col("qpos").alias("p2"),
            )
        ),
    )
    rq = queries.filter(F.col("q").isNull() & ~F.col("cut"))
    stale = rq.filter(
        (F.col("mack.p") >= F.col("start")) & (F.col("qreach").isNull() | (F.col("qreach") < F.col("mack.p")))
    )
    case(
        stale,
        "stale-read",
        -F.col("mack.ni"),
        F.col("idx"),
        F.col("qcmp"),
        detail=F.to_json(
            F.struct(F.col("mack.v").alias("v1"), F.col("mack.p").alias("p1"), F.col("qreach").alias("reach"))
        ),
    )
    nmr = rq.filter(
        (F.col("mrd.p") >= F.col("start")) & (F.col("qreach").isNull() | (F.col("qreach") < F.col("mrd.p")))
    )
    case(
        nmr,
        "nonmonotonic-read",
        -F.col("mrd.ni"),
        F.col("idx"),
        F.col("qcmp"),
        detail=F.to_json(F.struct(F.col("mrd.p").alias("p1"), F.col("qreach").alias("reach"))),
    )

    all_cases = cases[0]
    for c in cases[1:]:
        all_cases = all_cases.unionByName(c)
    case_rows = [r.asDict(recursive=True) for r in all_cases.collect()]

    summary = ops.groupBy("h", "topic").agg(
        F.count("*").alias("ops"),
        F.sum(((F.col("f") == "append") & (F.col("outcome") == "ok")).cast("int")).alias("appends_ok"),
        F.sum(((F.col("f") == "append") & (F.col("outcome") == "fail")).cast("int")).alias("appends_fail"),
        F.sum(((F.col("f") == "append") & (F.col("outcome") == "info")).cast("int")).alias("appends_info"),
        F.sum((F.col("f") == "read").cast("int")).alias("reads"),
    )
    summary_rows = [r.asDict() for r in summary.collect()]
    # Times of the witness events, for the explanations.
    wanted = sorted({(r["h"], i) for r in case_rows for i in r["ops"]})
    times: dict[tuple[int, int], int] = {}
    if wanted:
        want_df = spark.createDataFrame(wanted, "h int, index long")
        for r in events.join(F.broadcast(want_df), ["h", "index"]).select("h", "index", "time").collect():
            times[(r["h"], r["index"])] = r["time"]
    for r in case_rows:
        r["times"] = {i: times.get((r["h"], i)) for i in r["ops"]}
    ops.unpersist()
    robs.unpersist()
    queries.unpersist()
    return case_rows, summary_rows


def _p(d: Any) -> str:
    return format_position(None if d is None else (d["l"], d["e"], d["b"]))


def explain(row: dict[str, Any]) -> str:
    import json

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


def audit(paths: Sequence[str], master: str | None = None) -> list[Audited]:
    """Audit already-validated histories in one Spark job; one Report per path."""
    from spark.session import spark_session

    spark = spark_session(master)
    case_rows, summary_rows = run_checks(spark, load(spark, paths))
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
        out.append(Audited(path, Report(ops=sum(s.ops for s in topics.values()), cases=cases, topics=topics)))
    return out


if __name__ == "__main__":
    from pulsar_ref.commands.audit import main

    sys.exit(main(sys.argv[1:], prog="spark-submit spark/audit.py"))
