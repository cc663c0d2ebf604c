"""Reading and validating run logs (histories) in the format of docs/history.md.

A history is JSON Lines (or Parquet with the same columns; there, a read's `value` is JSON text). The reader
checks the format in one streaming pass and rejects a broken history with the 1-based line number and the
reason (`HistoryError`), before anything is audited:

- every line is an object with `index` (its 0-based line position), integer `time`, `process`, `type`, `f`;
- a completion (`ok`/`fail`/`info`) answers the pending invoke of its process, with the same `f` and `topic`;
- a process does not invoke twice before completing, and never invokes again after an `info`;
- an append's `value` is a string unique in the whole history; an `ok` append carries a position
  `[ledger_id, entry_id, batch_index]` of non-negative integers; a read's `from` is null or a position, its
  optional `limit` a positive integer, and an `ok` read's value a list of `[position, value]` pairs; no read is
  of a non-persistent topic (it keeps nothing to read);
- a consumer's operations (subscribe, receive, ack, nack, close, drain) carry a `subscription` and (but drain) a
  `consumer`; a subscribe names a known subscription type, an `ok` receive carries the delivery (value,
  position, redelivery count, optional key and partition), an ack or nack names the delivery it answers; an
  ack or nack ending `info` does not retire its process; a drain's optional `message_ttl` (the topic's message
  TTL in seconds) is a non-negative integer;
- a typed run's `schemas` operation (the registry's versions of a topic) ends `ok` with `versions`, a list of
  non-negative integers, and an `ok` receive's optional `schema_version` is one;
- a `read-compacted` (a `--lifecycle` run's) ends `ok` with a read's value and `horizon`, null or
  `[ledger_id, entry_id]`; an append's optional `tombstone` is true or false.

Events of process `"nemesis"` (fault injection) are allowed and ignored by the checks. An invoke still pending
at the end of the history counts as `info`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

Position = tuple[int, int, int]
NEMESIS = "nemesis"
COMPLETIONS = ("ok", "fail", "info")
LOG_OPS = ("append", "read")
CONSUMER_OPS = ("subscribe", "receive", "ack", "nack", "close", "drain")
SCHEMA_OPS = ("schemas",)  # the registry's versions of a topic (docs/history.md, Schemas)
COMPACTED_OPS = ("read-compacted",)  # a read_compacted reader from the earliest (docs/history.md, Compacted reads)
SUBSCRIPTION_TYPES = ("Exclusive", "Failover", "Shared", "Key_Shared")
# The final drain's consumers are named drain-<process> (docs/history.md): what they receive is the drain's, never
# the latest fault's.
DRAIN_CONSUMER_PREFIX = "drain-"
NOT_RETIRING = ("ack", "nack")  # an unconfirmed acknowledgement does not retire its process


class HistoryError(Exception):
    """The history breaks the format of docs/history.md: nothing is audited (exit status 2)."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


@dataclass
class Op:
    """One operation: an invoke paired with its completion (`type` is `info` if it never completed)."""

    process: int
    f: str
    topic: str
    inv_index: int
    inv_time: int
    value: str | None = None  # append: the appended value
    start: Position | None = None  # read: `from` (None = the beginning of the topic)
    limit: int | None = None
    final: bool = False
    type: str = "info"
    cmp_index: int | None = None
    cmp_time: int | None = None
    position: Position | None = None  # ok append; ok receive, ack, nack: the delivery's
    entries: list[tuple[Position, str]] = field(default_factory=list)  # ok read
    # A consumer's operations (value: the delivered value, or the one acknowledged).
    subscription: str | None = None
    consumer: str | None = None
    sub_type: str | None = None  # subscribe
    key: str | None = None  # append (optional), ok receive
    partition: str | None = None  # receive, ack, nack on a partitioned topic
    redelivery_count: int = 0  # ok receive
    cumulative: bool = False  # ack
    cluster: str | None = None  # the cluster it went to, in a history of several (spark/geo.py)
    schema_version: int | None = None  # ok receive of a typed run: the delivered message's schema version
    versions: tuple[int, ...] = ()  # ok schemas: the versions the registry returned for the topic
    message_ttl: int | None = None  # drain: the message TTL (seconds) in force on its topic, None or 0: none
    tombstone: bool = False  # append: an empty payload with a key, which deletes the key from the compacted view
    horizon: tuple[int, int] | None = None  # ok read-compacted: the compaction horizon (None: no compaction yet)

    @property
    def log(self) -> str:
        """The log a delivery or acknowledgement belongs to: its partition, else its topic."""
        return self.partition or self.topic

    @property
    def cut_by_limit(self) -> bool:
        return self.limit is not None and len(self.entries) >= self.limit


@dataclass(frozen=True)
class NemesisEvent:
    """A fault injected, healed or failed to inject (process "nemesis")."""

    index: int
    time: int
    f: str  # the fault kind, or "heal", or "stopped"
    failed: bool  # it carries an error: nothing changed

    @property
    def injection(self) -> bool:
        return self.f not in ("heal", "stopped") and not self.failed

    @property
    def boundary(self) -> bool:
        """A fault began or healed here."""
        return self.f != "stopped" and not self.failed


def _position(raw: Any) -> Position | None:
    # Spelled out rather than all(...): this runs for every position of every event of the validation pass.
    if type(raw) is list and len(raw) == 3:
        a, b, c = raw
        if type(a) is int and type(b) is int and type(c) is int and a >= 0 and b >= 0 and c >= 0:
            return (a, b, c)
    elif isinstance(raw, tuple) and len(raw) == 3 and all(type(x) is int and x >= 0 for x in raw):
        return (raw[0], raw[1], raw[2])
    return None


def format_position(p: Position | None) -> str:
    return "the beginning" if p is None else f"[{p[0]},{p[1]},{p[2]}]"


def format_time(ns: int | None) -> str:
    if ns is None:
        return "t=?"
    if ns < 1_000_000_000:
        return f"t={ns / 1e6:.1f} ms"
    return f"t={ns / 1e9:.3f} s"


def time_teller(ops: Iterable[Op]) -> Callable[[int | None], str]:
    """The formatted time of any invoke or completion of `ops`, by its event index (for explanations)."""
    time_of: dict[int, int | None] = {}
    for op in ops:
        time_of[op.inv_index] = op.inv_time
        if op.cmp_index is not None:
            time_of[op.cmp_index] = op.cmp_time
    return lambda idx: format_time(time_of.get(idx)) if idx is not None else "t=?"


def iter_jsonl(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    # orjson parses ~4x faster than json; a line it rejects is parsed again by json, which either accepts it (json
    # is more lenient, e.g. NaN or huge integers: the verdict must not depend on the parser) or names the error.
    with open(path, "rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            try:
                event = orjson.loads(raw)
            except orjson.JSONDecodeError:
                event = _json_fallback(path, line_no, raw)
            if type(event) is not dict:
                raise HistoryError(path, line_no, "not a JSON object")
            yield line_no, event


def _json_fallback(path: str, line_no: int, raw: bytes) -> Any:
    if not raw.strip():
        raise HistoryError(path, line_no, "empty line (one JSON object per line expected)")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise HistoryError(path, line_no, "not valid UTF-8") from None
    except json.JSONDecodeError as e:
        raise HistoryError(path, line_no, f"not valid JSON ({e.msg} at column {e.colno})") from None


def iter_parquet(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Parquet is read through Spark (the only Parquet reader installed); rows come back in `index` order."""
    from spark.session import spark_session

    spark = spark_session()
    rows = spark.read.parquet(path).orderBy("index").toLocalIterator()
    for line_no, row in enumerate(rows, start=1):
        event = {k: v for k, v in row.asDict(recursive=True).items() if v is not None or k in ("from", "value")}
        read = event.get("f") == "read" or event.get("f") in COMPACTED_OPS
        if read and event.get("type") == "ok" and isinstance(event.get("value"), str):
            try:
                event["value"] = json.loads(event["value"])
            except json.JSONDecodeError:
                raise HistoryError(path, line_no, "a read's value is not JSON text") from None
        yield line_no, event


def is_parquet(path: str) -> bool:
    p = Path(path)
    if p.is_dir() or p.suffix == ".parquet":
        return True
    with open(p, "rb") as fh:
        return fh.read(4) == b"PAR1"


def iter_events(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    if not Path(path).exists():
        raise HistoryError(path, 0, "no such file")
    return iter_parquet(path) if is_parquet(path) else iter_jsonl(path)


def validate(
    path: str,
    events: Iterable[tuple[int, dict[str, Any]]],
    keep_ops: bool = True,
    nemesis: list[NemesisEvent] | None = None,
) -> list[Op]:
    """Check the format; return the operations (in invoke order) if `keep_ops`, else just validate. The nemesis's
    events are appended to `nemesis` when it is given.

    This pass reads every event in Python before Spark starts, so it is written for speed: a pending invoke is
    a plain tuple (f, topic, invoke index, value, Op or None), and an Op is built only if `keep_ops`.
    """
    ops: list[Op] = []
    pending: dict[int, tuple[str, str, int, str | None, Op | None, str | None]] = {}
    crashed: set[int] = set()
    appended: set[str] = set()
    count = 0

    def fail(line: int, reason: str) -> HistoryError:
        return HistoryError(path, line, reason)

    for line, ev in events:
        count += 1
        get = ev.get
        index = get("index")
        if index != line - 1 or type(index) is not int:
            raise fail(line, f"index is {index!r}, expected {line - 1} (the 0-based line position)")
        time = get("time")
        if type(time) is not int:
            raise fail(line, f"time must be an integer (nanoseconds), got {time!r}")
        process = get("process")
        if process == NEMESIS:
            if nemesis is not None:
                nemesis.append(NemesisEvent(index, time, str(get("f")), "error" in ev))
            continue
        if type(process) is not int:
            raise fail(line, f'process must be an integer or "nemesis", got {process!r}')
        kind, f, topic = get("type"), get("f"), get("topic")
        if f != "append" and f != "read" and f not in CONSUMER_OPS and f not in SCHEMA_OPS and f not in COMPACTED_OPS:
            known = ", ".join(LOG_OPS + CONSUMER_OPS + SCHEMA_OPS + COMPACTED_OPS)
            raise fail(line, f"f must be one of {known}, got {f!r}")
        if not isinstance(topic, str):
            raise fail(line, f"topic must be a string, got {topic!r}")
        if kind == "invoke":
            if process in pending:
                raise fail(
                    line,
                    f"process {process} invokes again before completing its invoke at line {pending[process][2] + 1}",
                )
            if process in crashed:
                raise fail(line, f"process {process} invokes again after an info completion (use a fresh process)")
            cluster = get("cluster")
            if cluster is not None and (not isinstance(cluster, str) or not cluster):
                raise fail(line, f"cluster must be a cluster's name, got {cluster!r}")
            op = Op(process, f, topic, index, time, cluster=cluster) if keep_ops else None
            value = None
            if f == "append":
                value = get("value")
                if not isinstance(value, str):
                    raise fail(line, f"an append's value must be a string, got {value!r}")
                if value in appended:
                    raise fail(line, f"value {value!r} is appended twice (values must be unique)")
                appended.add(value)
                if op is not None:
                    op.value = value
                    key = get("key")
                    if key is not None and not isinstance(key, str):
                        raise fail(line, f"an append's key must be a string, got {key!r}")
                    op.key = key
                    tombstone = get("tombstone", False)
                    if not isinstance(tombstone, bool):
                        raise fail(line, f"an append's tombstone must be true or false, got {tombstone!r}")
                    op.tombstone = tombstone
            elif f != "read" and f not in SCHEMA_OPS and f not in COMPACTED_OPS:
                problem = _consumer_invoke(ev, op)
                if problem:
                    raise fail(line, problem)
            else:
                if topic.startswith("non-persistent://"):
                    raise fail(line, f"a read of {topic}: a non-persistent topic keeps nothing to read back")
                raw_from = get("from")
                start = None
                if raw_from is not None:
                    start = _position(raw_from)
                    if start is None:
                        raise fail(line, f"a read's from must be null or [ledger, entry, batch], got {raw_from!r}")
                limit = get("limit")
                if limit is not None and (type(limit) is not int or limit <= 0):
                    raise fail(line, f"limit must be a positive integer, got {limit!r}")
                final = get("final", False)
                if final is not None and not isinstance(final, bool):
                    raise fail(line, f"final must be true or false, got {final!r}")
                if op is not None:
                    op.start, op.limit, op.final = start, limit, bool(final)
            pending[process] = (f, topic, index, value, op, cluster)
            if op is not None:
                ops.append(op)
        elif kind == "ok" or kind == "fail" or kind == "info":
            waiting = pending.pop(process, None)
            if waiting is None:
                raise fail(line, f"a {kind} completion of process {process} with no pending invoke")
            inv_f, inv_topic, inv_index, inv_value, op, inv_cluster = waiting
            if inv_f != f or inv_topic != topic or get("cluster") != inv_cluster:
                raise fail(
                    line,
                    f"the completion ({f} on {topic}{_in(get('cluster'))}) does not match its invoke at line "
                    f"{inv_index + 1} ({inv_f} on {inv_topic}{_in(inv_cluster)})",
                )
            if op is not None:
                op.type, op.cmp_index, op.cmp_time = kind, index, time
            if kind == "info" and f not in NOT_RETIRING:
                crashed.add(process)
            if f != "append" and f != "read":
                problem = None
                if kind == "ok" and f == "receive":
                    problem = _delivery(ev, op)
                elif kind == "ok" and f in SCHEMA_OPS:
                    problem = _versions(ev, op)
                elif kind == "ok" and f in COMPACTED_OPS:
                    problem = _compacted(ev, op)
                if problem:
                    raise fail(line, problem)
            elif f == "append":
                if "value" in ev and ev["value"] != inv_value:
                    raise fail(line, f"the completion's value {ev['value']!r} differs from the invoke's {inv_value!r}")
                if kind == "ok":
                    position = _position(get("position"))
                    if position is None:
                        raise fail(line, f"an ok append needs position [ledger, entry, batch], got {get('position')!r}")
                    if op is not None:
                        op.position = position
            elif kind == "ok":
                value = get("value")
                if not isinstance(value, list):
                    raise fail(line, f"an ok read's value must be a list of [position, value] pairs, got {value!r}")
                entries = op.entries if op is not None else None
                for i, pair in enumerate(value):
                    pos = _position(pair[0]) if type(pair) is list and len(pair) == 2 else None
                    if pos is None or not isinstance(pair[1], str):
                        raise fail(line, f"entry {i} of the read is not a [position, string value] pair: {pair!r}")
                    if entries is not None:
                        entries.append((pos, pair[1]))
        else:
            raise fail(line, f'type must be "invoke", "ok", "fail" or "info", got {kind!r}')
    if count == 0:
        raise HistoryError(path, 0, "the history is empty")
    return ops


def _in(cluster: object) -> str:
    return f" in {cluster}" if cluster is not None else ""


def _consumer_invoke(ev: dict[str, Any], op: Op | None) -> str | None:
    """The fields of a consumer's invoke (docs/history.md, Consumers): what is wrong with them, or None."""
    f = ev["f"]
    subscription, consumer = ev.get("subscription"), ev.get("consumer")
    if not isinstance(subscription, str) or not subscription:
        return f"a {f} needs its subscription's name, got {subscription!r}"
    if f != "drain" and (not isinstance(consumer, str) or not consumer):
        return f"a {f} needs its consumer's name, got {consumer!r}"
    sub_type = ev.get("subscription_type")
    if f == "subscribe" and sub_type not in SUBSCRIPTION_TYPES:
        return f"subscription_type must be one of {', '.join(SUBSCRIPTION_TYPES)}, got {sub_type!r}"
    value = position = partition = None
    if f in ("ack", "nack"):
        value, position, partition = ev.get("value"), _position(ev.get("position")), ev.get("partition")
        if not isinstance(value, str) or position is None:
            return f"a {f} names the delivery it answers: value and position [ledger, entry, batch]"
        if partition is not None and not _partition_of(partition, ev["topic"]):
            return f"partition {partition!r} is not a partition of {ev['topic']!r}"
    cumulative = ev.get("cumulative", False)
    if not isinstance(cumulative, bool):
        return f"cumulative must be true or false, got {cumulative!r}"
    ttl = ev.get("message_ttl")
    if ttl is not None and (f != "drain" or type(ttl) is not int or ttl < 0):
        return f"message_ttl is a drain's, a non-negative integer of seconds, got {ttl!r} on a {f}"
    if op is not None:
        op.message_ttl = ttl
        op.subscription, op.consumer, op.sub_type = subscription, consumer, sub_type
        op.value, op.position, op.partition, op.cumulative = value, position, partition, cumulative
    return None


def _delivery(ev: dict[str, Any], op: Op | None) -> str | None:
    """The delivery an `ok` receive carries: what is wrong with it, or None."""
    value, position = ev.get("value"), _position(ev.get("position"))
    if not isinstance(value, str) or position is None:
        return "an ok receive carries the delivered value and its position [ledger, entry, batch]"
    count, key, partition = ev.get("redelivery_count", 0), ev.get("key"), ev.get("partition")
    if type(count) is not int or count < 0:
        return f"redelivery_count must be a non-negative integer, got {count!r}"
    if key is not None and not isinstance(key, str):
        return f"a delivery's key must be a string, got {key!r}"
    if partition is not None and not _partition_of(partition, ev["topic"]):
        return f"partition {partition!r} is not a partition of {ev['topic']!r}"
    version = ev.get("schema_version")
    if version is not None and (type(version) is not int or version < 0):
        return f"schema_version must be a non-negative integer, got {version!r}"
    if op is not None:
        op.value, op.position, op.redelivery_count, op.key, op.partition = value, position, count, key, partition
        op.schema_version = version
    return None


def _versions(ev: dict[str, Any], op: Op | None) -> str | None:
    """The registry's versions an `ok` schemas carries: what is wrong with them, or None."""
    versions = ev.get("versions")
    if type(versions) is not list or not all(type(v) is int and v >= 0 for v in versions):
        return f"an ok schemas carries versions, a list of non-negative integers, got {versions!r}"
    if op is not None:
        op.versions = tuple(versions)
    return None


def _compacted(ev: dict[str, Any], op: Op | None) -> str | None:
    """What an `ok` read-compacted carries, its entries and horizon: what is wrong with them, or None."""
    value, raw = ev.get("value"), ev.get("horizon")
    if not isinstance(value, list):
        return f"an ok read-compacted's value must be a list of [position, value] pairs, got {value!r}"
    entries = []
    for i, pair in enumerate(value):
        pos = _position(pair[0]) if type(pair) is list and len(pair) == 2 else None
        if pos is None or not isinstance(pair[1], str):
            return f"entry {i} of the read-compacted is not a [position, string value] pair: {pair!r}"
        entries.append((pos, pair[1]))
    horizon = _position([*raw, 0]) if type(raw) is list and len(raw) == 2 else None
    if raw is not None and horizon is None:
        return f"an ok read-compacted's horizon must be null or [ledger, entry], got {raw!r}"
    if op is not None:
        op.entries, op.horizon = entries, None if horizon is None else (horizon[0], horizon[1])
    return None


def _partition_of(partition: Any, topic: str) -> bool:
    return isinstance(partition, str) and partition.startswith(topic + "-partition-")


def read_history(path: str, keep_ops: bool = True, nemesis: list[NemesisEvent] | None = None) -> list[Op]:
    return validate(path, iter_events(path), keep_ops, nemesis)


def main(paths: list[str]) -> int:
    """`python -m spark.history HISTORY...`: check the format only; print the first error and exit 2, else 0."""
    for path in paths:
        try:
            read_history(path, keep_ops=False)
        except HistoryError as e:
            print(e)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
