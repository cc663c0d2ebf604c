"""Cursors: a subscription's position on the topic (spec/fencing.tla `consumed`).

`CursorState` is the pure part: the mark-delete position (everything at or before it is
acknowledged: a cumulative ack) and the individually acknowledged ("deleted") ranges after
it. Contiguous acks advance the mark-delete position. Positions are checked against a
`TopicView` (a snapshot of the ledger list), which also says which positions are adjacent
across ledger boundaries.

`ManagedCursor` is a durable cursor: its state is persisted by appending it to the
cursor's own ledger, at a limited rate as Pulsar does (`cursor_persist_interval_s`:
an acknowledgement returns once applied, the newest state is written within the
interval, one cursor-ledger add for all the acks of an interval, and `close()` writes
what is left; with 0 every acknowledgement is persisted before the call returns). A
crash loses at most the last interval's acks, whose messages are then delivered again
(at-least-once, never a loss). The cursor's metadata node (a child of the
managed-ledger node) holds that ledger's id:

    {"format": 1, "cursor_ledger": 12, "state": {"mark_delete": [3, 41],
     "individually_deleted": [[3, 43, 3, 45]]}, "properties": {}}

(`state` in the node is the state when the node was last written; the ledger has newer ones.)
Recovery on takeover opens the cursor ledger with recovery (fencing the previous owner's
cursor writes), reads its last entry, then switches to a new cursor ledger by conditional
write of the node and deletes the old ledger. The same switch happens after
`cursor_max_entries` persisted states, so a cursor ledger stays short.

`NonDurableCursor` (a reader) keeps the same state in memory only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from impl.bookie.client.api import WriteHandle
from impl.bookie.client.failures import LedgerClientError, LedgerFencedError, PlacementError
from impl.broker.ledger_list import Position, TopicView
from impl.broker.managed_ledger_core import ManagedLedgerState
from impl.broker.managed_ledger_errors import (
    CursorFencedError,
    InvalidPositionError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
)
from impl.metadata.layout import cursor_name_from_child
from impl.metadata.ledger_store import NoSuchLedger
from impl.metadata.store import BadVersion, MetadataError, NodeExists, NoNode

if TYPE_CHECKING:
    from impl.broker.managed_ledger import Cancellable, ManagedLedger

log = logging.getLogger(__name__)

CURSOR_FORMAT = 1
Range = tuple[Position, Position]  # inclusive [first, last] of acknowledged positions


@dataclass
class CursorState:
    """Mark-delete position plus individually deleted ranges; pure."""

    mark_delete: Position
    individually_deleted: list[Range] = field(default_factory=list)

    # ---- queries ---------------------------------------------------------------------------

    def is_acknowledged(self, p: Position) -> bool:
        return p <= self.mark_delete or any(first <= p <= last for first, last in self.individually_deleted)

    def backlog(self, view: TopicView) -> int:
        """Confirmed entries after the mark-delete position not individually acknowledged."""
        last = view.last_confirmed()
        total = view.count_between(self.mark_delete, last)
        for first, end in self.individually_deleted:
            total -= view.count_between(self.mark_delete, end) - view.count_between(self.mark_delete, first) + 1
        return max(total, 0)

    def first_unacknowledged_from(self, p: Position | None, view: TopicView) -> Position | None:
        """The first confirmed position >= p (None = the start) that is not acknowledged."""
        start = p if p is not None and p > self.mark_delete else view.next_position(self.mark_delete)
        if start is None:
            return None
        for candidate in view.positions(start):
            if not self.is_acknowledged(candidate):
                return candidate
        return None

    # ---- acknowledgements --------------------------------------------------------------------

    def check(self, positions: Iterable[Position], view: TopicView) -> list[Position]:
        """Validate every position first, so bad input changes nothing."""
        checked = []
        for p in positions:
            if not isinstance(p, Position):
                raise TypeError(f"acknowledge a Position, not {type(p).__name__}")
            if p > self.mark_delete and not view.exists(p):
                last = view.last_confirmed()
                raise ValueError(f"position {p} is not an entry of the topic (last confirmed entry: {last})")
            checked.append(p)
        return checked

    def mark_delete_to(self, p: Position, view: TopicView) -> bool:
        """Cumulative ack of everything up to `p`. Returns whether the state changed."""
        (p,) = self.check([p], view)
        if p <= self.mark_delete:
            return False  # older than what is acknowledged already: nothing to do (as Pulsar)
        self.mark_delete = p
        kept: list[Range] = []
        for first, last in self.individually_deleted:
            if last <= p:
                continue
            if first <= p:
                after = view.next_position(p)
                assert after is not None
                first = after
            kept.append((first, last))
        self.individually_deleted = kept
        self._advance(view)
        return True

    def reset_to(self, mark_delete: Position) -> bool:
        """Seek: everything after `mark_delete` is unacknowledged again (Pulsar's resetCursor)."""
        changed = mark_delete != self.mark_delete or bool(self.individually_deleted)
        self.mark_delete = mark_delete
        self.individually_deleted = []
        return changed

    def delete(self, positions: Iterable[Position], view: TopicView) -> bool:
        """Individual acks. Returns whether the state changed."""
        changed = False
        for p in self.check(positions, view):
            if self.is_acknowledged(p):
                continue
            changed = True
            self._insert(p, view)
        self._advance(view)
        return changed

    def _adjacent(self, a: Position, b: Position, view: TopicView) -> bool:
        """b is the next confirmed entry after a (no entry lies strictly between them)."""
        return a < b and view.count_between(a, b) == 1

    def _insert(self, p: Position, view: TopicView) -> None:
        ranges = self.individually_deleted
        i = 0
        while i < len(ranges) and ranges[i][1] < p:
            i += 1
        first, last = p, p
        if i > 0 and self._adjacent(ranges[i - 1][1], p, view):
            i -= 1
            first = ranges[i][0]
            del ranges[i]
        if i < len(ranges) and self._adjacent(p, ranges[i][0], view):
            last = ranges[i][1]
            del ranges[i]
        ranges.insert(i, (first, last))

    def _advance(self, view: TopicView) -> None:
        """A range starting right after the mark-delete position moves it forward."""
        while self.individually_deleted:
            first, last = self.individually_deleted[0]
            if not (first <= self.mark_delete or self._adjacent(self.mark_delete, first, view)):
                return
            self.mark_delete = max(self.mark_delete, last)
            del self.individually_deleted[0]

    # ---- stored form ---------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "mark_delete": [self.mark_delete.ledger_id, self.mark_delete.entry_id],
            "individually_deleted": [
                [a.ledger_id, a.entry_id, b.ledger_id, b.entry_id] for a, b in self.individually_deleted
            ],
        }

    @staticmethod
    def from_json(doc: dict[str, Any]) -> CursorState:
        md = doc["mark_delete"]
        ranges = [(Position(int(r[0]), int(r[1])), Position(int(r[2]), int(r[3]))) for r in doc["individually_deleted"]]
        return CursorState(Position(int(md[0]), int(md[1])), ranges)

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @staticmethod
    def decode(data: bytes) -> CursorState:
        return CursorState.from_json(json.loads(data))

    def copy(self) -> CursorState:
        return CursorState(self.mark_delete, list(self.individually_deleted))


def initial_state(view: TopicView, initial: Literal["earliest", "latest"]) -> CursorState:
    """earliest: before the first entry still on the list; latest: at the last confirmed entry."""
    if initial == "latest":
        last = view.last_confirmed()
        if last is not None:
            return CursorState(last)
    for ledger_id, _ in view.counts:
        return CursorState(Position(ledger_id, -1))
    return CursorState(Position(-1, -1))


class _CursorBase:
    """What durable and non-durable cursors share: the state and the read position."""

    def __init__(self, ml: ManagedLedger, name: str, state: CursorState) -> None:
        self.ml = ml
        self.name = name
        self._state = state
        self._lock = threading.RLock()
        self.read_position: Position | None = None  # None: right after the mark-delete position

    @property
    def mark_delete_position(self) -> Position | None:
        return self._state.mark_delete

    @property
    def individually_deleted(self) -> list[Range]:
        with self._lock:
            return list(self._state.individually_deleted)

    def is_acknowledged(self, position: Position) -> bool:
        with self._lock:
            return self._state.is_acknowledged(position)

    def backlog(self) -> int:
        view = self.ml.view()
        with self._lock:
            return self._state.backlog(view)

    def first_unacknowledged_from(self, position: Position | None = None) -> Position | None:
        view = self.ml.view()
        with self._lock:
            return self._state.first_unacknowledged_from(position, view)

    def read_entries(self, max_entries: int) -> list[tuple[Position, bytes]]:
        """Read from the read position on, skipping acknowledged entries; advances the read position."""
        with self._lock:
            start = self.read_position
            if start is None or start <= self._state.mark_delete:
                start = self.ml.next_position(self._state.mark_delete)
        if start is None:
            return []
        batch = self.ml.read(start, max_entries)
        with self._lock:
            if batch:  # past the whole batch, even if every entry in it was acknowledged already
                self.read_position = self.ml.next_position(batch[-1][0])
            return [(p, d) for p, d in batch if not self._state.is_acknowledged(p)]

    def seek(self, position: Position | None) -> None:
        """Move the read position (None: back to right after the mark-delete position)."""
        with self._lock:
            self.read_position = position

    def _apply(self, change: Any) -> bool:
        """Run a state change against a fresh view; bad input raises InvalidPositionError."""
        self.ml.check_usable()
        view = self.ml.view()
        with self._lock:
            candidate = self._state.copy()
            try:
                changed = bool(change(candidate, view))
            except ValueError as e:
                raise InvalidPositionError(self.ml.name, f"cursor {self.name!r}: {e}; nothing was changed") from e
            if changed:
                self._persist(candidate)
                self._state = candidate
            return changed

    def _persist(self, state: CursorState) -> None:
        """Durable cursors write the state before it takes effect."""

    def mark_delete(self, position: Position) -> None:
        """Cumulative ack: everything up to `position` is consumed."""
        self._apply(lambda s, v: s.mark_delete_to(position, v))

    def reset(self, start: Position | None) -> None:
        """Seek: read again from `start` (None: the topic's first entry), as if nothing after it was acknowledged."""
        view = self.ml.view()
        before = initial_state(view, "earliest").mark_delete if start is None else start.before()
        self._apply(lambda s, v: s.reset_to(before))
        with self._lock:
            self.read_position = None

    def delete(self, positions: Iterable[Position]) -> None:
        """Individual acks; contiguous acks advance the mark-delete position."""
        wanted = list(positions)
        self._apply(lambda s, v: s.delete(wanted, v))

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "mark_delete": str(self._state.mark_delete),
                "individually_deleted": [f"[{a},{b}]" for a, b in self._state.individually_deleted],
                "backlog": self.backlog(),
                "read_position": str(self.read_position) if self.read_position else None,
            }


class NonDurableCursor(_CursorBase):
    """A reader: starts at `start` (None = the earliest entry), or right after it (`after`),
    remembers nothing across brokers."""

    def __init__(self, ml: ManagedLedger, start: Position | None, after: bool = False) -> None:
        view = ml.view()
        if start is None:
            state = initial_state(view, "earliest")
        elif after:
            state = CursorState(start)  # start itself is consumed
        else:
            state = CursorState(start.before())  # everything before start is consumed
        super().__init__(ml, "", state)
        self.read_position = None if after or start is None else start


class ManagedCursor(_CursorBase):
    """A durable cursor; see the module docstring for how it is stored and recovered."""

    def __init__(self, ml: ManagedLedger, name: str, state: CursorState) -> None:
        super().__init__(ml, name, state)
        self.path = ml.cursor_path(name)
        self.node_version = -1
        self.cursor_ledger: WriteHandle | None = None
        self.ledger_entries = 0
        self.properties: dict[str, str] = {}
        self.fenced_reason = ""
        # Rate-limited persistence: whether the state changed since it was last written, the pending
        # flush timer, when the last write started; one write at a time (_write_lock, taken before _lock).
        self._dirty = False
        self._flush_timer: Cancellable | None = None
        self._last_write = 0.0
        self._write_lock = threading.Lock()

    # ---- open, create, recover ---------------------------------------------------------------

    @classmethod
    def open_or_create(cls, ml: ManagedLedger, name: str, initial: Literal["earliest", "latest"]) -> ManagedCursor:
        cursor = cls(ml, name, initial_state(ml.view(), initial))
        try:
            data, stat = ml.store.get(cursor.path)
        except NoNode:
            pass
        else:
            cursor._recover(data, stat.version)
            return cursor
        handle = cursor._new_ledger(cursor._state)
        try:
            stat_version = cls._create_node(ml, cursor.path, cursor._node(handle.ledger_id))
        except NodeExists:
            cursor._drop_ledger(handle.ledger_id)
            return cls.recover(ml, cursor.path.rsplit("/", 1)[1])  # created concurrently: use theirs
        cursor.node_version = stat_version
        cursor.cursor_ledger = handle
        return cursor

    @staticmethod
    def _create_node(ml: ManagedLedger, path: str, data: bytes) -> int:
        try:
            ml.store.create(path, data)
        except NoNode as e:
            raise ManagedLedgerError(ml.name, "its metadata node is gone; reopen the managed ledger") from e
        return 0

    @classmethod
    def recover(cls, ml: ManagedLedger, child: str) -> ManagedCursor:
        """Recover the cursor stored at child node `child` of the managed-ledger node."""
        name = cursor_name_from_child(child)
        cursor = cls(ml, name, CursorState(Position(-1, -1)))
        data, stat = ml.store.get(cursor.path)
        cursor._recover(data, stat.version)
        return cursor

    def _recover(self, data: bytes, version: int) -> None:
        ml = self.ml
        try:
            doc = json.loads(data)
            if doc.get("format") != CURSOR_FORMAT:
                raise ValueError(f"unknown format {doc.get('format')!r}")
            state = CursorState.from_json(doc["state"])
            old_ledger = int(doc["cursor_ledger"])
            self.properties = {str(k): str(v) for k, v in doc.get("properties", {}).items()}
        except (ValueError, KeyError, TypeError, IndexError) as e:
            why = f"cursor {self.name!r} node is unreadable ({e}); delete the cursor"
            raise ManagedLedgerError(ml.name, why) from e
        if old_ledger >= 0:
            try:
                # Recovery fences the previous owner's cursor ledger: its later acks fail.
                handle = ml.bookkeeper.open_ledger(old_ledger, ml.config.password, recovery=True)
                last = handle.last_add_confirmed
                if last >= 0:
                    state = CursorState.decode(handle.read(last, last)[0].payload)
            except NoSuchLedger:
                pass  # the node's state is the newest we have
            except (LedgerClientError, MetadataError, TimeoutError) as e:
                raise ManagedLedgerError(
                    ml.name, f"cursor {self.name!r}: cannot recover cursor ledger {old_ledger} ({e}); retry the open"
                ) from e
        self._state = state
        self.node_version = version
        self._switch_ledger(old_ledger)

    # ---- persistence -------------------------------------------------------------------------

    def _node(self, ledger_id: int, state: CursorState | None = None) -> bytes:
        doc = {
            "format": CURSOR_FORMAT,
            "cursor_ledger": ledger_id,
            "state": (state or self._state).to_json(),
            "properties": self.properties,
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    def _new_ledger(self, state: CursorState) -> WriteHandle:
        ml, c = self.ml, self.ml.config
        try:
            handle = ml.bookkeeper.create_ledger(
                c.ensemble,
                c.write_quorum,
                c.ack_quorum,
                digest=c.digest,
                password=c.password,
                custom_metadata={"application": b"pulsar", "pulsar/cursor": f"{ml.name}/{self.name}".encode()},
            )
            handle.add(state.encode())
        except (PlacementError, LedgerClientError, MetadataError, TimeoutError) as e:
            raise ManagedLedgerError(ml.name, f"cursor {self.name!r}: cannot create a cursor ledger ({e})") from e
        self.ledger_entries = 1
        return handle

    def _drop_ledger(self, ledger_id: int) -> None:
        with contextlib.suppress(MetadataError):  # a leftover cursor ledger wastes space, nothing else
            self.ml.bookkeeper.delete_ledger(ledger_id)

    def _switch_ledger(self, old_ledger: int, state: CursorState | None = None) -> None:
        """Start a new cursor ledger holding `state` (default: the current state); record it by conditional write."""
        state = state or self._state
        handle = self._new_ledger(state)
        try:
            self.node_version = self.ml.store.set(
                self.path, self._node(handle.ledger_id, state), self.node_version
            ).version
        except (BadVersion, NoNode) as e:
            self._drop_ledger(handle.ledger_id)
            self._fenced(f"its node changed under us ({type(e).__name__}): another broker recovered it")
        except MetadataError as e:
            self._drop_ledger(handle.ledger_id)
            raise ManagedLedgerError(self.ml.name, f"cursor {self.name!r}: cannot update its node ({e})") from e
        self.cursor_ledger = handle
        if old_ledger >= 0:
            self._drop_ledger(old_ledger)

    def persist(self) -> None:
        """Write the current state now (acks persist on their own within the persist interval; this is
        for callers that want an explicit durability point, e.g. before handing the topic over)."""
        self.ml.check_usable()
        with self._write_lock:
            with self._lock:
                self._dirty = False
                state = self._state.copy()
            self._write(state)

    def _fenced(self, why: str) -> None:
        reason = f"cursor {self.name!r}: {why}"
        self.fenced_reason = reason
        self.ml.fence(reason)
        raise CursorFencedError(self.ml.name, reason)

    def _persist(self, state: CursorState) -> None:
        """Under the cursor lock, before `state` takes effect: write it now (interval 0), or note that
        the state changed and make sure a flush comes within the interval."""
        if self.fenced_reason:
            raise CursorFencedError(self.ml.name, self.fenced_reason)
        if self.cursor_ledger is None:
            raise ManagedLedgerError(self.ml.name, f"cursor {self.name!r} is closed")
        interval = self.ml.config.cursor_persist_interval_s
        if interval <= 0:
            self._write(state)
            return
        self._dirty = True
        if self._flush_timer is None:
            self._schedule_flush(max(0.0, self._last_write + interval - self.ml.clock()))

    def _schedule_flush(self, delay_s: float) -> None:
        """Under the cursor lock, with no flush pending: run `_flush` in `delay_s`."""
        self._flush_timer = self.ml.call_later(delay_s, self._flush)

    def _flush(self) -> None:
        """The timer: write the newest state if it changed (one cursor-ledger add for every ack since
        the last write). A failure is logged and retried at the next interval; a fenced cursor ledger
        fences the managed ledger, and later acks are refused."""
        with self._write_lock:
            with self._lock:
                self._flush_timer = None
                if not self._dirty or self.cursor_ledger is None or self.fenced_reason:
                    return
                self._dirty = False
                state = self._state.copy()
            try:
                self._write(state)
            except ManagedLedgerFencedError as e:  # the cursor's or the topic's: nothing more is written
                log.warning("%s", e)
            except (ManagedLedgerError, RuntimeError) as e:
                log.warning("cursor %r of %s: persisting its state failed (%s); retrying", self.name, self.ml.name, e)
                with self._lock:
                    self._dirty = True
                    if self._flush_timer is None and self.cursor_ledger is not None:
                        self._schedule_flush(self.ml.config.cursor_persist_interval_s)

    def _write(self, state: CursorState) -> None:
        """Append `state` to the cursor ledger (blocking); switch ledgers every `cursor_max_entries`."""
        if self.fenced_reason:
            raise CursorFencedError(self.ml.name, self.fenced_reason)
        if self.ml.state is ManagedLedgerState.FENCED:  # e.g. our metadata session expired: never write again
            raise ManagedLedgerFencedError(self.ml.name, f"cursor {self.name!r}: {self.ml.fence_reason}")
        handle = self.cursor_ledger
        if handle is None:
            raise ManagedLedgerError(self.ml.name, f"cursor {self.name!r} is closed")
        self._last_write = self.ml.clock()
        try:
            handle.add(state.encode())
        except LedgerFencedError:
            self._fenced("its cursor ledger was fenced: another broker recovered the cursor")
        except (LedgerClientError, TimeoutError) as e:
            raise ManagedLedgerError(
                self.ml.name, f"cursor {self.name!r}: the acknowledgement was not persisted ({e}); retry it"
            ) from e
        self.ledger_entries += 1
        if self.ledger_entries >= self.ml.config.cursor_max_entries:
            self._switch_ledger(handle.ledger_id, state)

    # ---- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Write the state if acks are not yet persisted, then close the cursor ledger."""
        with self._write_lock:
            with self._lock:
                dirty, self._dirty = self._dirty, False
                state = self._state.copy()
                timer, self._flush_timer = self._flush_timer, None
            if timer is not None:
                timer.cancel()
            if dirty and self.cursor_ledger is not None and not self.fenced_reason:
                try:
                    self._write(state)
                except (ManagedLedgerError, RuntimeError) as e:  # fenced or unreachable: the last written state stays
                    log.warning("cursor %r of %s: last acks not persisted at close: %s", self.name, self.ml.name, e)
            with self._lock:
                handle, self.cursor_ledger = self.cursor_ledger, None
        if handle is not None:
            with contextlib.suppress(LedgerClientError, MetadataError):  # fenced or gone: recovered by the next owner
                handle.close()

    def delete_storage(self) -> None:
        """Delete the cursor's node and ledger (delete_cursor / topic deletion)."""
        with self._lock:
            handle, self.cursor_ledger = self.cursor_ledger, None
        try:
            self.ml.store.delete(self.path, self.node_version)
        except BadVersion as e:
            raise CursorFencedError(self.ml.name, f"cursor {self.name!r}: its node changed under us") from e
        except NoNode:
            pass
        if handle is not None:
            self._drop_ledger(handle.ledger_id)

    def stats(self) -> dict[str, Any]:
        result = super().stats()
        result["cursor_ledger"] = self.cursor_ledger.ledger_id if self.cursor_ledger else None
        return result
