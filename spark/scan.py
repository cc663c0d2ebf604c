"""What the exact job (spark/audit.py) and its screen (spark/screen.py) share: the two-level running maximum,
and the parse of a read's entries.

Both scan a topic's events in index order for the highest ack and the highest read reach before each query
(realtime-reorder, stale-read, nonmonotonic-read); the screen on packed longs, the exact job on structs, with the
same column names. One window over a whole topic would make one task sort all of it. Cut into buckets of
consecutive indices instead, each bucket is scanned in its own window (the buckets spread over the tasks), and the
maximum of all earlier buckets comes from a small table of bucket maxima joined back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# The contributions scanned, and the column of each one's running maximum.
MAXIMA = {"ack": "highest_ack", "read_reach": "highest_reach"}


def running_maxima(rows: Any, topic: Sequence[str], keep: Any) -> Any:
    """The rows of `rows` where `keep` holds (the queries), each with `highest_ack` and `highest_reach`: the maximum
    of `ack` and of `read_reach` over the rows of its topic up to and including this one in `index` order (nulls
    are absent, so a row that contributes nothing has nulls there).

    `topic`: the columns that name one scan (a topic of a history). `rows` has an `index_bucket` column, a monotone
    function of `index` that cuts a topic into buckets (each caller has its own bucket width).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    upto = (
        Window.partitionBy(*topic, "index_bucket")
        .orderBy("index")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    local = rows.select("*", *[F.max(column).over(upto).alias(f"bucket_{name}") for column, name in MAXIMA.items()])
    # Bucket maxima aggregated before any shuffle (a small table), then the maximum of all earlier buckets.
    ends = rows.groupBy(*topic, "index_bucket").agg(
        *[F.max(column).alias(f"bucket_end_{name}") for column, name in MAXIMA.items()]
    )
    before = Window.partitionBy(*topic).orderBy("index_bucket").rowsBetween(Window.unboundedPreceding, -1)
    carry = ends.select(
        *topic,
        "index_bucket",
        *[F.max(f"bucket_end_{name}").over(before).alias(f"earlier_{name}") for name in MAXIMA.values()],
    )
    # Only the queries need the earlier buckets: the other rows only contribute.
    out = local.filter(keep).join(carry, [*topic, "index_bucket"], "left")
    for name in MAXIMA.values():
        # greatest skips nulls: the first bucket has no earlier maximum, a bucket may have none of its own yet.
        out = out.withColumn(name, F.greatest(f"bucket_{name}", f"earlier_{name}"))
    return out.drop(*[f"{level}_{name}" for name in MAXIMA.values() for level in ("bucket", "earlier")])


def read_entries(value: Any) -> Any:
    """A read's `value` (JSON text) as an array of (position: [ledger_id, entry_id, batch_index], value) in
    delivery order.

    from_json gives each position back as compact JSON text "[l,e,b]": it is split, not parsed again (a JSON
    parser per entry is slow).
    """
    from pyspark.sql import functions as F

    return F.transform(
        F.from_json(value, "array<array<string>>"),
        lambda x: F.struct(
            F.split(F.translate(x[0], "[]", ""), ",").cast("array<long>").alias("position"), x[1].alias("value")
        ),
    )
