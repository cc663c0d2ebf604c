"""The managed ledger's list of ledgers, its stored form, and positions on the topic.

A topic is a chain of BookKeeper ledgers. The managed-ledger node
`/managed-ledgers/<tenant>/<ns>/persistent/<topic>` holds the list (`list` in
spec/fencing.tla) as JSON, format 1:

    {"format": 1,
     "ledgers": [{"ledger_id": 7, "entries": 3, "size": 120, "timestamp": 1.7e9}, ...],
     "properties": {"key": "value"}}

A ledger copied to tiered storage also has `"offload"`, Pulsar's LedgerInfo offload context:
`{"uid": ..., "complete": true, "bookkeeperDeleted": false, "timestamp": ..., "driverName": ...,
"driverMetadata": {...}}` (docs/storage-lifecycle.md). It is written by conditional write once the
object is complete; from then on readers read the object, and the bookie copy may go after the
deletion lag (`bookkeeperDeleted` then says it went).

`entries`/`size` are exact for closed ledgers; the last ledger, still being written, is
listed with 0 and 0 until it is closed (rollover) or recovered (takeover), as in Pulsar.
`timestamp` is the wall-clock time (seconds) the ledger was closed, 0 while open; retention
measures age from it. JSON rather than protobuf because the node is small and people read
it with `zkCli get`.

A `Position` is (ledger id, entry id). `TopicView` answers position questions (first,
last confirmed, next, counts) for one snapshot of the list: pure functions over data.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

LIST_FORMAT = 1


class Position(NamedTuple):
    """An entry of the topic; ordering is the topic's order (ledger ids grow along the chain).

    A NamedTuple rather than a frozen dataclass: positions are dict keys, set members and sort keys on
    every delivery and ack, and a tuple's hash, equality and ordering run in C (a dict lookup ~4x
    faster than through a dataclass's generated __hash__ and __eq__)."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    def before(self) -> Position:
        """The position a cursor marks as deleted to read from this one next (entry -1 of a ledger
        stands before its first entry)."""
        return Position(self.ledger_id, self.entry_id - 1)


def position_key(p: Position) -> tuple[int, int]:
    """A sort key for positions in the topic's order, compared as a tuple (in C) rather than by the
    dataclass's generated __lt__: acks and deliveries sort thousands of positions at a time."""
    return (p.ledger_id, p.entry_id)


@dataclass(frozen=True)
class OffloadContext:
    """Pulsar's LedgerInfo.OffloadContext: where the ledger's offloaded copy is, and whether the bookie
    copy was deleted. `timestamp` (wall-clock seconds) is when the offload was recorded: the bookie copy
    may be deleted once the deletion lag has passed since."""

    uid: str
    complete: bool = True
    bookkeeper_deleted: bool = False
    timestamp: float = 0.0
    driver_name: str = ""
    driver_metadata: Mapping[str, str] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict[str, object]:
        return {
            "uid": self.uid,
            "complete": self.complete,
            "bookkeeperDeleted": self.bookkeeper_deleted,
            "timestamp": self.timestamp,
            "driverName": self.driver_name,
            "driverMetadata": dict(self.driver_metadata),
        }

    @staticmethod
    def from_json(doc: Mapping[str, object]) -> OffloadContext:
        metadata = doc.get("driverMetadata") or {}
        if not isinstance(metadata, dict):
            raise ValueError(f"driverMetadata is {metadata!r}, not an object")
        timestamp = doc.get("timestamp", 0.0)
        if not isinstance(timestamp, int | float):
            raise ValueError(f"offload timestamp is {timestamp!r}, not a number")
        return OffloadContext(
            str(doc["uid"]),
            bool(doc.get("complete", False)),
            bool(doc.get("bookkeeperDeleted", False)),
            float(timestamp),
            str(doc.get("driverName", "")),
            {str(k): str(v) for k, v in metadata.items()},
        )


@dataclass(frozen=True)
class LedgerInfo:
    ledger_id: int
    entries: int = 0
    size: int = 0
    timestamp: float = 0.0
    offload: OffloadContext | None = None  # None: never offloaded

    @property
    def offloaded(self) -> bool:
        """Readers read the offloaded copy (Pulsar: offload context complete)."""
        return self.offload is not None and self.offload.complete


@dataclass(frozen=True)
class LedgerList:
    """The content of the managed-ledger node."""

    ledgers: tuple[LedgerInfo, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        doc = {
            "format": LIST_FORMAT,
            "ledgers": [
                {"ledger_id": i.ledger_id, "entries": i.entries, "size": i.size, "timestamp": i.timestamp}
                | ({"offload": i.offload.to_json()} if i.offload is not None else {})
                for i in self.ledgers
            ],
            "properties": dict(self.properties),
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @staticmethod
    def decode(data: bytes) -> LedgerList:
        """Parse a stored list; an empty node (created by ensure_path) is an empty list."""
        if not data:
            return LedgerList()
        try:
            doc = json.loads(data)
            if doc.get("format") != LIST_FORMAT:
                raise ValueError(f"unknown format {doc.get('format')!r}")
            ledgers = tuple(
                LedgerInfo(
                    int(i["ledger_id"]),
                    int(i["entries"]),
                    int(i["size"]),
                    float(i["timestamp"]),
                    OffloadContext.from_json(i["offload"]) if i.get("offload") is not None else None,
                )
                for i in doc["ledgers"]
            )
            properties = {str(k): str(v) for k, v in doc.get("properties", {}).items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a managed ledger list (JSON format {LIST_FORMAT}): {e}") from e
        return LedgerList(ledgers, properties)


@dataclass(frozen=True)
class TopicView:
    """A snapshot of the topic's ledgers with their confirmed entry counts.

    `counts` maps each ledger on the list, in order, to its number of confirmed entries;
    `open_ledger` is the ledger still being written (its entries may grow), or None.
    """

    counts: tuple[tuple[int, int], ...]
    open_ledger: int | None = None

    @staticmethod
    def of(ledgers: Sequence[LedgerInfo], current: int | None, current_confirmed: int) -> TopicView:
        counts = tuple((i.ledger_id, current_confirmed if i.ledger_id == current else i.entries) for i in ledgers)
        return TopicView(counts, current)

    def entries_in(self, ledger_id: int) -> int | None:
        for lid, n in self.counts:
            if lid == ledger_id:
                return n
        return None

    def exists(self, p: Position) -> bool:
        """`p` is a confirmed entry still on the list."""
        n = self.entries_in(p.ledger_id)
        return n is not None and 0 <= p.entry_id < n

    def first_position(self) -> Position | None:
        for lid, n in self.counts:
            if n > 0:
                return Position(lid, 0)
        return None

    def last_confirmed(self) -> Position | None:
        for lid, n in reversed(self.counts):
            if n > 0:
                return Position(lid, n - 1)
        return None

    def ceiling(self, p: Position) -> Position | None:
        """The first position >= p where an entry is or will be written (the open ledger grows).

        None when nothing at or after `p` can exist (p is past a ledger no longer on the list
        and there is no later one).
        """
        for lid, n in self.counts:
            if lid < p.ledger_id:
                continue
            entry = max(p.entry_id, 0) if lid == p.ledger_id else 0
            if entry < n or lid == self.open_ledger:
                return Position(lid, entry)
        return None

    def next_position(self, p: Position) -> Position | None:
        return self.ceiling(Position(p.ledger_id, p.entry_id + 1))

    def positions(self, start: Position | None) -> Iterator[Position]:
        """Confirmed positions from `start` (None = the first) onwards, in order."""
        begin = Position(0, 0) if start is None else start
        for lid, n in self.counts:
            if lid < begin.ledger_id:
                continue
            first = max(begin.entry_id, 0) if lid == begin.ledger_id else 0
            for e in range(first, n):
                yield Position(lid, e)

    def count_between(self, after: Position | None, upto: Position | None) -> int:
        """Number of confirmed entries p with after < p <= upto (after None = from the start)."""
        if upto is None:
            return 0
        total = 0
        for lid, n in self.counts:
            lo = 0
            hi = n - 1
            if after is not None:
                if lid < after.ledger_id:
                    continue
                if lid == after.ledger_id:
                    lo = after.entry_id + 1
            if lid > upto.ledger_id:
                break
            if lid == upto.ledger_id:
                hi = min(hi, upto.entry_id)
            total += max(0, hi - lo + 1)
        return total
