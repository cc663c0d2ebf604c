"""Reading and validating run logs (histories) in the format of docs/history.md.

A history is JSON Lines (or Parquet with the same columns; there, a read's `value` is JSON text). The reader
checks the format in one streaming pass and rejects a broken history with the 1-based line number and the
reason (`HistoryError`), before anything is audited:

- every line is an object with `index` (its 0-based line position), integer `time`, `process`, `type`, `f`;
- a completion (`ok`/`fail`/`info`) answers the pending invoke of its process, with the same `f` and `topic`;
- a process does not invoke twice before completing, and never invokes again after an `info`;
- an append's `value` is a string unique in the whole history; an `ok` append carries a position
  `[ledger_id, entry_id, batch_index]` of non-negative integers; a read's `from` is null or a position, its
  optional `limit` a positive integer, and an `ok` read's value a list of `[position, value]` pairs.

Events of process `"nemesis"` (fault injection) are allowed and ignored by the checks. An invoke still pending
at the end of the history counts as `info`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

Position = tuple[int, int, int]
NEMESIS = "nemesis"
COMPLETIONS = ("ok", "fail", "info")


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
    position: Position | None = None  # ok append
    entries: list[tuple[Position, str]] = field(default_factory=list)  # ok read

    @property
    def cut_by_limit(self) -> bool:
        return self.limit is not None and len(self.entries) >= self.limit


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
        if event.get("f") == "read" and event.get("type") == "ok" and isinstance(event.get("value"), str):
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


def validate(path: str, events: Iterable[tuple[int, dict[str, Any]]], keep_ops: bool = True) -> list[Op]:
    """Check the format; return the operations (in invoke order) if `keep_ops`, else just validate.

    This pass reads every event in Python before Spark starts, so it is written for speed: a pending invoke is
    a plain tuple (f, topic, invoke index, value, Op or None), and an Op is built only if `keep_ops`.
    """
    ops: list[Op] = []
    pending: dict[int, tuple[str, str, int, str | None, Op | None]] = {}
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
            continue
        if type(process) is not int:
            raise fail(line, f'process must be an integer or "nemesis", got {process!r}')
        kind, f, topic = get("type"), get("f"), get("topic")
        if f != "append" and f != "read":
            raise fail(line, f'f must be "append" or "read", got {f!r}')
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
            op = Op(process, f, topic, index, time) if keep_ops else None
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
            else:
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
            pending[process] = (f, topic, index, value, op)
            if op is not None:
                ops.append(op)
        elif kind == "ok" or kind == "fail" or kind == "info":
            waiting = pending.pop(process, None)
            if waiting is None:
                raise fail(line, f"a {kind} completion of process {process} with no pending invoke")
            inv_f, inv_topic, inv_index, inv_value, op = waiting
            if inv_f != f or inv_topic != topic:
                raise fail(
                    line,
                    f"the completion ({f} on {topic}) does not match its invoke at line "
                    f"{inv_index + 1} ({inv_f} on {inv_topic})",
                )
            if op is not None:
                op.type, op.cmp_index, op.cmp_time = kind, index, time
            if kind == "info":
                crashed.add(process)
            if f == "append":
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


def read_history(path: str, keep_ops: bool = True) -> list[Op]:
    return validate(path, iter_events(path), keep_ops)


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
