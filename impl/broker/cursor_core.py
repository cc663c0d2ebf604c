"""The durable cursor's pure core: a subscription's position on the topic (spec/fencing.tla `consumed`).

`CursorState` is the position itself: the mark-delete position (everything at or before it is
acknowledged: a cumulative ack, Pulsar's markDelete) and the individually deleted ranges after it
(Pulsar's individuallyDeletedMessages). Contiguous acks advance the mark-delete position. Positions
are checked against a `TopicView` (a snapshot of the ledger list), which also says which positions
are adjacent across ledger boundaries.

`ManagedCursorCore` is the protocol of a durable cursor, as Pulsar's ManagedCursorImpl has it. It does
no I/O, starts no timer and reads no clock: the shell (impl/broker/cursor.py) feeds it typed inputs
through one function, `step(event) -> list[Output]`, every input carrying the time `now`, and performs
the outputs, feeding back their results. One I/O of the cursor is in flight at a time (`io`), so the
cursor's writes are ordered by the core, not by the shell's locks.

  Open(initial)                 ReadCursorNode; NodeRead(data or None) -> recovery or creation
  recovery                      RecoverCursorLedger(old) (fences the previous owner's cursor ledger and
                                reads its last entry) -> CursorLedgerRecovered(last entry) or
                                CursorLedgerRecoveryFailed (no such ledger: the node's state is the
                                newest) -> a switch of cursor ledgers -> Opened
  creation                      a switch with `initial`, the node created rather than written; a node
                                created concurrently (NodeExists) -> recovery of theirs
  switching cursor ledgers      CreateCursorLedger -> CursorLedgerCreated -> AppendCursorState (the
                                state, the new ledger's first entry) -> CursorStateAppended ->
                                WriteCursorNode (the conditional write naming the new ledger) ->
                                CursorNodeWritten -> DeleteCursorLedger(old). On open, and after
                                `cursor_max_entries` states appended to one cursor ledger.
  MarkDelete, Delete, Reset     acks and seeks, checked against the view in the input. With
                                `cursor_persist_interval_s` = 0 each is written before it takes effect
                                (AppendCursorState, then CompleteRequest once CursorStateAppended);
                                else it takes effect at once (CompleteRequest) and SetFlushTimer asks
                                for a Tick when the rate limit allows the next write: one write for all
                                the acks of an interval
  Tick(now)                     the flush timer: write the newest state if it changed
  Persist                       write the current state now (an explicit durability point)
  Close                         write what is not persisted yet, then CloseCursorLedger
  DeleteCursor                  DeleteCursorNode (conditional), then DeleteCursorLedger

Fencing (the fenced flush): an append that finds the cursor ledger fenced (another broker recovered the
cursor) or a conditional node write that finds another version (BadVersion, NoNode) makes the cursor
FENCED: FenceManagedLedger, the waiting requests fail with CursorFencedError, and nothing is ever
written again. ManagedLedgerFenced (the managed ledger was fenced, e.g. its metadata session expired)
stops it the same way, and so does a switch of cursor ledgers whose node write has an unknown outcome
(NodeError.OTHER: the node may name the new ledger already; neither ledger is deleted, the next open
recovers the one the node names).

Bad input: a position that is not an entry of the topic fails the request with InvalidPositionError and
changes nothing; a mark-delete at or before the current one, or an ack of an acknowledged position, is a
documented no-op (the request completes, nothing is written); a completion that does not match the I/O
in flight (a stale one) is ignored; an event of another type raises TypeError.

The cursor's metadata node (a child of the managed-ledger node) holds its cursor ledger's id:

    {"format": 1, "cursor_ledger": 12, "state": {"mark_delete": [3, 41],
     "individually_deleted": [[3, 43, 3, 45]]}, "properties": {}}

(`state` in the node is the state when the node was last written; the ledger has newer ones.)
"""

from __future__ import annotations

import bisect
import enum
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from impl.broker.ledger_list import Position, TopicView, position_key
from impl.broker.managed_ledger_core import ManagedLedgerConfig
from impl.broker.managed_ledger_errors import (
    CursorFencedError,
    InvalidPositionError,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    NoSuchCursorError,
)

CURSOR_FORMAT = 1
Range = tuple[Position, Position]  # inclusive [first, last] of acknowledged positions


def _range_end(r: Range) -> Position:
    return r[1]


@dataclass
class CursorState:
    """Mark-delete position plus individually deleted ranges."""

    mark_delete: Position
    individually_deleted: list[Range] = field(default_factory=list)
    # Pulsar's mark-delete properties: set with a cumulative ack, stored with the position (the
    # `__compaction` cursor keeps its compacted ledger here).
    properties: dict[str, str] = field(default_factory=dict)

    # ---- queries ---------------------------------------------------------------------------

    def is_acknowledged(self, p: Position) -> bool:
        if p <= self.mark_delete:
            return True
        ranges = self.individually_deleted  # sorted and disjoint: the first range ending at or after p
        i = bisect.bisect_left(ranges, p, key=_range_end)
        return i < len(ranges) and ranges[i][0] <= p

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

    def mark_delete_to(self, p: Position, view: TopicView, properties: Mapping[str, str] | None = None) -> bool:
        """Cumulative ack of everything up to `p` (with `properties`, they replace the stored ones).
        Returns whether the state changed."""
        (p,) = self.check([p], view)
        if p <= self.mark_delete:
            return False  # older than what is acknowledged already: nothing to do (as Pulsar)
        self.mark_delete = p
        if properties is not None:
            self.properties = dict(properties)
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
        """Individual acks. Returns whether the state changed. Applied as ranges: the positions not yet
        acknowledged, in order, are cut into runs of consecutive entries of one ledger, each inserted as
        one range (a consumer's acks of a backlog come as thousands of neighbours)."""
        fresh = sorted({p for p in self.check(positions, view) if not self.is_acknowledged(p)}, key=position_key)
        if not fresh:
            self._advance(view)
            return False
        first = last = fresh[0]
        for p in fresh[1:]:
            if p.ledger_id == last.ledger_id and p.entry_id == last.entry_id + 1:
                last = p
                continue
            self._insert(first, last, view)
            first = last = p
        self._insert(first, last, view)
        self._advance(view)
        return True

    def _adjacent(self, a: Position, b: Position, view: TopicView) -> bool:
        """b is the next confirmed entry after a (no entry lies strictly between them)."""
        return a < b and view.count_between(a, b) == 1

    def _insert(self, first: Position, last: Position, view: TopicView) -> None:
        """Insert the unacknowledged run first..last, merged with the ranges it touches."""
        ranges = self.individually_deleted
        i = bisect.bisect_left(ranges, first, key=_range_end)
        if i > 0 and self._adjacent(ranges[i - 1][1], first, view):
            i -= 1
            first = ranges[i][0]
            del ranges[i]
        if i < len(ranges) and self._adjacent(last, ranges[i][0], view):
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
        doc: dict[str, Any] = {
            "mark_delete": [self.mark_delete.ledger_id, self.mark_delete.entry_id],
            "individually_deleted": [
                [a.ledger_id, a.entry_id, b.ledger_id, b.entry_id] for a, b in self.individually_deleted
            ],
        }
        if self.properties:  # only when set: other cursors' stored form is unchanged
            doc["properties"] = dict(self.properties)
        return doc

    @staticmethod
    def from_json(doc: dict[str, Any]) -> CursorState:
        md = doc["mark_delete"]
        ranges = [(Position(int(r[0]), int(r[1])), Position(int(r[2]), int(r[3]))) for r in doc["individually_deleted"]]
        properties = {str(k): str(v) for k, v in doc.get("properties", {}).items()}
        return CursorState(Position(int(md[0]), int(md[1])), ranges, properties)

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @staticmethod
    def decode(data: bytes) -> CursorState:
        return CursorState.from_json(json.loads(data))

    def copy(self) -> CursorState:
        return CursorState(self.mark_delete, list(self.individually_deleted), dict(self.properties))


def initial_state(view: TopicView, initial: Literal["earliest", "latest"]) -> CursorState:
    """earliest: before the first entry still on the list; latest: at the last confirmed entry."""
    if initial == "latest":
        last = view.last_confirmed()
        if last is not None:
            return CursorState(last)
    for ledger_id, _ in view.counts:
        return CursorState(Position(ledger_id, -1))
    return CursorState(Position(-1, -1))


class CursorStatus(enum.Enum):
    CLOSED = "closed"  # not opened yet, or closed
    OPENING = "opening"  # reading its node, recovering or creating its cursor ledger
    OPEN = "open"
    FENCED = "fenced"  # terminal: another broker took the cursor (or the topic) over; nothing is written
    DELETED = "deleted"


class Io(enum.Enum):
    """The one I/O of the cursor in flight."""

    IDLE = "idle"
    READING_NODE = "reading-node"
    RECOVERING_LEDGER = "recovering-ledger"
    CREATING_LEDGER = "creating-ledger"
    WRITING_FIRST_ENTRY = "writing-first-entry"  # the state, as the new cursor ledger's first entry
    WRITING_NODE = "writing-node"  # the conditional write naming the new cursor ledger
    APPENDING = "appending"  # persisting the state to the current cursor ledger
    DELETING_NODE = "deleting-node"


class NodeError(enum.Enum):
    """How a write or delete of the cursor's node failed."""

    BAD_VERSION = "BadVersion"
    NO_NODE = "NoNode"
    NODE_EXISTS = "NodeExists"
    OTHER = "other"  # session lost, connection lost: the write may or may not have applied


# ---- inputs (every one carries `now`, the shell's monotonic clock) --------------------------------


@dataclass(frozen=True)
class Open:
    """Open the cursor; `initial` is the state of a new cursor (None: it must exist, it is recovered)."""

    initial: CursorState | None
    now: float


@dataclass(frozen=True)
class NodeRead:
    """The cursor's node: its data and version, or None if there is no node."""

    data: bytes | None
    version: int
    now: float


@dataclass(frozen=True)
class NodeReadFailed:
    reason: str
    now: float


@dataclass(frozen=True)
class CursorLedgerRecovered:
    """The cursor ledger is recovered (fenced and closed); `last_entry` is its last entry (None: empty)."""

    ledger_id: int
    last_entry: bytes | None
    now: float


@dataclass(frozen=True)
class CursorLedgerRecoveryFailed:
    """`no_such_ledger`: the ledger is gone (deleted by a switch that wrote the node); else BookKeeper failed."""

    ledger_id: int
    no_such_ledger: bool
    reason: str
    now: float


@dataclass(frozen=True)
class CursorLedgerCreated:
    ledger_id: int
    now: float


@dataclass(frozen=True)
class CursorLedgerCreateFailed:
    reason: str
    now: float


@dataclass(frozen=True)
class CursorStateAppended:
    """The AppendCursorState to `ledger_id` is stored."""

    ledger_id: int
    now: float


@dataclass(frozen=True)
class CursorStateAppendFailed:
    """`fenced`: the cursor ledger was fenced (another broker recovered the cursor)."""

    ledger_id: int
    fenced: bool
    reason: str
    now: float


@dataclass(frozen=True)
class CursorNodeWritten:
    version: int
    now: float


@dataclass(frozen=True)
class CursorNodeWriteFailed:
    error: NodeError
    reason: str
    now: float


@dataclass(frozen=True)
class CursorNodeDeleted:
    now: float


@dataclass(frozen=True)
class CursorNodeDeleteFailed:
    error: NodeError
    reason: str
    now: float


@dataclass(frozen=True)
class MarkDelete:
    """Cumulative ack of everything up to `position` (Pulsar's markDelete)."""

    token: int
    position: Position
    view: TopicView
    now: float
    properties: Mapping[str, str] | None = None  # stored with the position (None: keep the current ones)


@dataclass(frozen=True)
class Delete:
    """Individual acks (Pulsar's delete); contiguous ones advance the mark-delete position."""

    token: int
    positions: tuple[Position, ...]
    view: TopicView
    now: float


@dataclass(frozen=True)
class Reset:
    """Seek: read again from `start` (None: the topic's first entry); nothing after it is acknowledged."""

    token: int
    start: Position | None
    view: TopicView
    now: float


@dataclass(frozen=True)
class Persist:
    """Write the current state now, whatever the rate limit."""

    token: int
    now: float


@dataclass(frozen=True)
class Tick:
    """The flush timer fired (or any time passes)."""

    now: float


@dataclass(frozen=True)
class ManagedLedgerFenced:
    """The managed ledger is fenced (e.g. its metadata session expired): never write again."""

    reason: str
    now: float


@dataclass(frozen=True)
class Close:
    token: int
    now: float


@dataclass(frozen=True)
class DeleteCursor:
    token: int
    now: float


Event = (
    Open
    | NodeRead
    | NodeReadFailed
    | CursorLedgerRecovered
    | CursorLedgerRecoveryFailed
    | CursorLedgerCreated
    | CursorLedgerCreateFailed
    | CursorStateAppended
    | CursorStateAppendFailed
    | CursorNodeWritten
    | CursorNodeWriteFailed
    | CursorNodeDeleted
    | CursorNodeDeleteFailed
    | MarkDelete
    | Delete
    | Reset
    | Persist
    | Tick
    | ManagedLedgerFenced
    | Close
    | DeleteCursor
)

# ---- outputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadCursorNode:
    """Read the cursor's node; answer NodeRead (None if absent) or NodeReadFailed."""


@dataclass(frozen=True)
class RecoverCursorLedger:
    """Open `ledger_id` with recovery (fences it) and read its last entry; answer CursorLedgerRecovered
    or CursorLedgerRecoveryFailed."""

    ledger_id: int


@dataclass(frozen=True)
class CreateCursorLedger:
    """Create a cursor ledger; answer CursorLedgerCreated or CursorLedgerCreateFailed."""


@dataclass(frozen=True)
class AppendCursorState:
    """Add `data` (an encoded CursorState) to cursor ledger `ledger_id`; answer CursorStateAppended or
    CursorStateAppendFailed."""

    ledger_id: int
    data: bytes


@dataclass(frozen=True)
class WriteCursorNode:
    """Conditional write of the node (`expected_version` None: create it); answer CursorNodeWritten or
    CursorNodeWriteFailed."""

    data: bytes
    expected_version: int | None


@dataclass(frozen=True)
class DeleteCursorNode:
    """Conditional delete of the node; answer CursorNodeDeleted or CursorNodeDeleteFailed."""

    expected_version: int


@dataclass(frozen=True)
class DeleteCursorLedger:
    """Delete this cursor ledger from BookKeeper (nothing names it any more); no answer."""

    ledger_id: int


@dataclass(frozen=True)
class CloseCursorLedger:
    """Writer close of the cursor ledger (a failure only means the next owner recovers it); no answer."""

    ledger_id: int


@dataclass(frozen=True)
class SetFlushTimer:
    """Feed Tick at `at` (on the clock `now` comes from); replaces the timer set before."""

    at: float


@dataclass(frozen=True)
class CancelFlushTimer:
    pass


@dataclass(frozen=True)
class FenceManagedLedger:
    """The cursor lost its cursor ledger or node to another broker: fence the whole managed ledger."""

    reason: str


@dataclass(frozen=True)
class Opened:
    pass


@dataclass(frozen=True)
class OpenFailed:
    error: ManagedLedgerError


@dataclass(frozen=True)
class CompleteRequest:
    token: int


@dataclass(frozen=True)
class FailRequest:
    token: int
    error: ManagedLedgerError


@dataclass(frozen=True)
class PersistFailed:
    """A write that no request waits for failed (a rate-limited flush: retried; at close: the last acks
    are lost, delivered again after a takeover). For the log."""

    reason: str


Output = (
    ReadCursorNode
    | RecoverCursorLedger
    | CreateCursorLedger
    | AppendCursorState
    | WriteCursorNode
    | DeleteCursorNode
    | DeleteCursorLedger
    | CloseCursorLedger
    | SetFlushTimer
    | CancelFlushTimer
    | FenceManagedLedger
    | Opened
    | OpenFailed
    | CompleteRequest
    | FailRequest
    | PersistFailed
)


class SwitchPurpose(enum.Enum):
    CREATE = "create"  # a new cursor: the node is created
    RECOVER = "recover"  # open of an existing cursor: the old ledger is the recovered one
    ROLLOVER = "rollover"  # the current ledger holds cursor_max_entries states


@dataclass
class _Switch:
    purpose: SwitchPurpose
    state: CursorState  # the new cursor ledger's first entry
    old_ledger: int  # -1: none
    new_ledger: int | None = None


@dataclass
class _Write:
    """An append of the state to the current cursor ledger, and the requests completed when it is stored."""

    state: CursorState
    tokens: list[int]
    apply: bool  # write-through: the state takes effect once stored


@dataclass
class ManagedCursorCore:
    """One durable cursor (pure core); see the module docstring."""

    ml_name: str
    name: str
    config: ManagedLedgerConfig = field(default_factory=ManagedLedgerConfig)
    state: CursorState = field(default_factory=lambda: CursorState(Position(-1, -1)))  # in effect
    status: CursorStatus = CursorStatus.CLOSED
    io: Io = Io.IDLE
    ledger_id: int | None = None  # the current cursor ledger
    ledger_entries: int = 0  # states appended to it
    node_version: int = -1
    properties: dict[str, str] = field(default_factory=dict)
    fence_reason: str = ""
    dirty: bool = False  # rate limit: the state changed since the last write started
    last_write: float | None = None  # when the last append started
    flush_at: float | None = None  # a flush timer is set for this time
    _initial: CursorState | None = None  # Open's, until the node is read
    _switch: _Switch | None = None
    _writing: _Write | None = None
    _candidate: CursorState | None = None  # write-through: the state of the next write
    _waiting: list[int] = field(default_factory=list)  # requests completed by the next write
    _write_wanted: bool = False
    _closing: list[int] = field(default_factory=list)
    _deleting: list[int] = field(default_factory=list)
    _fenced_by_cursor: bool = False  # else the managed ledger was fenced

    @property
    def write_through(self) -> bool:
        return self.config.cursor_persist_interval_s <= 0

    def node(self, ledger_id: int, state: CursorState) -> bytes:
        """The node's data naming `ledger_id`."""
        doc = {
            "format": CURSOR_FORMAT,
            "cursor_ledger": ledger_id,
            "state": state.to_json(),
            "properties": self.properties,
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    def _error(self, message: str) -> ManagedLedgerError:
        return ManagedLedgerError(self.ml_name, f"cursor {self.name!r}: {message}")

    # ---- the one entry point ---------------------------------------------------------------------

    def step(self, event: Event) -> list[Output]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a cursor event: {event!r}")
        return handler(self, event)

    # ---- open: read the node, recover or create ---------------------------------------------------

    def _open(self, e: Open) -> list[Output]:
        if self.status is not CursorStatus.CLOSED or self.ledger_id is not None:
            raise ValueError(f"cursor {self.name!r} is {self.status.value}: open it once")
        self.status = CursorStatus.OPENING
        self._initial = e.initial
        self.io = Io.READING_NODE
        return [ReadCursorNode()]

    def _open_failed(self, error: ManagedLedgerError) -> list[Output]:
        self.status = CursorStatus.CLOSED
        self.io = Io.IDLE
        self._switch = None
        return [OpenFailed(error)]

    def _node_read(self, e: NodeRead) -> list[Output]:
        if self.io is not Io.READING_NODE:
            return []
        self.io = Io.IDLE
        if e.data is None:
            if self._initial is None:
                return self._open_failed(
                    NoSuchCursorError(self.ml_name, f"has no cursor {self.name!r} (its node is gone)")
                )
            self.state = self._initial.copy()
            return self._start_switch(_Switch(SwitchPurpose.CREATE, self._initial.copy(), -1))
        try:
            doc = json.loads(e.data)
            if doc.get("format") != CURSOR_FORMAT:
                raise ValueError(f"unknown format {doc.get('format')!r}")
            state = CursorState.from_json(doc["state"])
            old_ledger = int(doc["cursor_ledger"])
            properties = {str(k): str(v) for k, v in doc.get("properties", {}).items()}
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
            why = f"cursor {self.name!r} node is unreadable ({error}); delete the cursor"
            return self._open_failed(ManagedLedgerError(self.ml_name, why))
        self.state = state
        self.properties = properties
        self.node_version = e.version
        if old_ledger < 0:
            return self._start_switch(_Switch(SwitchPurpose.RECOVER, state.copy(), -1))
        self.io = Io.RECOVERING_LEDGER
        self._switch = _Switch(SwitchPurpose.RECOVER, state.copy(), old_ledger)
        return [RecoverCursorLedger(old_ledger)]

    def _node_read_failed(self, e: NodeReadFailed) -> list[Output]:
        if self.io is not Io.READING_NODE:
            return []
        return self._open_failed(self._error(f"cannot read its node ({e.reason}); retry the open"))

    def _ledger_recovered(self, e: CursorLedgerRecovered) -> list[Output]:
        switch = self._switch
        if self.io is not Io.RECOVERING_LEDGER or switch is None or switch.old_ledger != e.ledger_id:
            return []
        self.io = Io.IDLE
        if e.last_entry is not None:
            try:
                switch.state = CursorState.decode(e.last_entry)
            except (ValueError, KeyError, TypeError, IndexError) as error:
                why = f"the last entry of cursor ledger {e.ledger_id} is unreadable ({error}); delete the cursor"
                return self._open_failed(self._error(why))
            self.state = switch.state.copy()
        return self._start_switch(switch)

    def _ledger_recovery_failed(self, e: CursorLedgerRecoveryFailed) -> list[Output]:
        switch = self._switch
        if self.io is not Io.RECOVERING_LEDGER or switch is None or switch.old_ledger != e.ledger_id:
            return []
        self.io = Io.IDLE
        if e.no_such_ledger:
            return self._start_switch(switch)  # the node's state is the newest we have
        why = f"cannot recover cursor ledger {e.ledger_id} ({e.reason}); retry the open"
        return self._open_failed(self._error(why))

    # ---- switching cursor ledgers ----------------------------------------------------------------

    def _start_switch(self, switch: _Switch) -> list[Output]:
        self._switch = switch
        self.io = Io.CREATING_LEDGER
        return [CreateCursorLedger()]

    def _ledger_created(self, e: CursorLedgerCreated) -> list[Output]:
        switch = self._switch
        if self.io is not Io.CREATING_LEDGER or switch is None:
            return [DeleteCursorLedger(e.ledger_id)]  # fenced or closed meanwhile: an orphan
        switch.new_ledger = e.ledger_id
        self.io = Io.WRITING_FIRST_ENTRY
        return [AppendCursorState(e.ledger_id, switch.state.encode())]

    def _switch_failed(self, why: str, now: float, orphan: int | None = None) -> list[Output]:
        """Creating the new cursor ledger or writing its first entry or the node failed (not fenced)."""
        switch = self._switch
        assert switch is not None
        outputs: list[Output] = [DeleteCursorLedger(orphan)] if orphan is not None else []
        self._switch = None
        self.io = Io.IDLE
        if switch.purpose is not SwitchPurpose.ROLLOVER:
            return outputs + self._open_failed(self._error(why))
        # The states are durable in the current cursor ledger: keep writing there, switch at the next write.
        return [*outputs, PersistFailed(f"{why}; it keeps cursor ledger {self.ledger_id}"), *self._pump(now)]

    def _ledger_create_failed(self, e: CursorLedgerCreateFailed) -> list[Output]:
        if self.io is not Io.CREATING_LEDGER or self._switch is None:
            return []
        return self._switch_failed(f"cannot create a cursor ledger ({e.reason})", e.now)

    def _first_entry_appended(self, e: CursorStateAppended) -> list[Output]:
        switch = self._switch
        assert switch is not None and switch.new_ledger is not None
        self.io = Io.WRITING_NODE
        expected = None if switch.purpose is SwitchPurpose.CREATE else self.node_version
        return [WriteCursorNode(self.node(switch.new_ledger, switch.state), expected)]

    def _node_written(self, e: CursorNodeWritten) -> list[Output]:
        switch = self._switch
        if self.io is not Io.WRITING_NODE or switch is None or switch.new_ledger is None:
            return []
        self.io = Io.IDLE
        self._switch = None
        self.node_version = e.version
        self.ledger_id = switch.new_ledger
        self.ledger_entries = 1
        outputs: list[Output] = [DeleteCursorLedger(switch.old_ledger)] if switch.old_ledger >= 0 else []
        if switch.purpose is not SwitchPurpose.ROLLOVER:
            self.status = CursorStatus.OPEN
            outputs.append(Opened())
        return outputs + self._pump(e.now)

    def _node_write_failed(self, e: CursorNodeWriteFailed) -> list[Output]:
        switch = self._switch
        if self.io is not Io.WRITING_NODE or switch is None or switch.new_ledger is None:
            return []
        orphan = switch.new_ledger
        if switch.purpose is SwitchPurpose.CREATE:
            if e.error is NodeError.NODE_EXISTS:  # created concurrently: recover theirs
                self._switch = None
                self._initial = None
                self.io = Io.READING_NODE
                return [DeleteCursorLedger(orphan), ReadCursorNode()]
            if e.error is NodeError.NO_NODE:
                self._switch = None
                error = ManagedLedgerError(self.ml_name, "its metadata node is gone; reopen the managed ledger")
                return [DeleteCursorLedger(orphan), *self._open_failed(error)]
        if e.error in (NodeError.BAD_VERSION, NodeError.NO_NODE):
            self._switch = None
            self.io = Io.IDLE
            why = f"its node changed under us ({e.error.value}): another broker recovered it"
            outputs: list[Output] = [DeleteCursorLedger(orphan)]
            if switch.purpose is SwitchPurpose.RECOVER:
                outputs += self._fence(why, cursor=True)
                self.status = CursorStatus.CLOSED
                return outputs + [OpenFailed(CursorFencedError(self.ml_name, self.fence_reason))]
            return outputs + self._fence(why, cursor=True)
        if switch.purpose is SwitchPurpose.ROLLOVER:
            # The outcome is unknown (a connection loss): the node may name the new ledger already. Deleting
            # it, or writing on to the old one, would lose acknowledgements that completed (spec/cursor.tla,
            # CompletedAcksRecoverable). Both ledgers hold the newest state: keep both, write nothing more,
            # and let the next open recover whichever the node names.
            self._switch = None
            why = f"its node write's outcome is unknown ({e.reason}); reopen to recover the cursor"
            return self._fence(why, cursor=True)
        return self._switch_failed(f"cannot update its node ({e.reason})", e.now, orphan)

    # ---- acknowledgements --------------------------------------------------------------------------

    def _refusal(self) -> ManagedLedgerError | None:
        if self.status is CursorStatus.FENCED:
            if self._fenced_by_cursor:
                return CursorFencedError(self.ml_name, self.fence_reason)
            return ManagedLedgerFencedError(self.ml_name, self.fence_reason)
        if self.status is CursorStatus.OPENING:
            return ManagedLedgerClosedError(self.ml_name, f"cursor {self.name!r} is still opening")
        if self.status is not CursorStatus.OPEN or self._closing:
            return self._error("is closed")
        return None

    def _newest(self) -> CursorState:
        """The state the next write-through change builds on: written or about to be."""
        if self._candidate is not None:
            return self._candidate
        if self._writing is not None and self._writing.apply:
            return self._writing.state
        return self.state

    def _change(self, token: int, now: float, change: Callable[[CursorState], bool]) -> list[Output]:
        refusal = self._refusal()
        if refusal is not None:
            return [FailRequest(token, refusal)]
        candidate = (self._newest() if self.write_through else self.state).copy()
        try:
            changed = change(candidate)
        except ValueError as error:
            return [
                FailRequest(
                    token, InvalidPositionError(self.ml_name, f"cursor {self.name!r}: {error}; nothing was changed")
                )
            ]
        if self.write_through:
            if changed:
                self._candidate = candidate
                self._write_wanted = True
                self._waiting.append(token)
                return self._pump(now)
            if self._candidate is not None:  # the same state is about to be written: complete with it
                self._waiting.append(token)
                return []
            if self._writing is not None and self._writing.apply:
                self._writing.tokens.append(token)
                return []
            return [CompleteRequest(token)]  # a no-op: written already
        if not changed:
            return [CompleteRequest(token)]
        self.state = candidate
        self.dirty = True
        outputs: list[Output] = []
        if self.flush_at is None:
            interval = self.config.cursor_persist_interval_s
            self.flush_at = now if self.last_write is None else max(now, self.last_write + interval)
            outputs.append(SetFlushTimer(self.flush_at))
        return [*outputs, CompleteRequest(token)]

    def _mark_delete(self, e: MarkDelete) -> list[Output]:
        return self._change(e.token, e.now, lambda s: s.mark_delete_to(e.position, e.view, e.properties))

    def _delete(self, e: Delete) -> list[Output]:
        return self._change(e.token, e.now, lambda s: s.delete(e.positions, e.view))

    def _reset(self, e: Reset) -> list[Output]:
        before = initial_state(e.view, "earliest").mark_delete if e.start is None else e.start.before()
        return self._change(e.token, e.now, lambda s: s.reset_to(before))

    def _persist(self, e: Persist) -> list[Output]:
        refusal = self._refusal()
        if refusal is not None:
            return [FailRequest(e.token, refusal)]
        self._write_wanted = True
        self._waiting.append(e.token)
        return self._pump(e.now)

    def _tick(self, e: Tick) -> list[Output]:
        if self.flush_at is None:
            return []
        if e.now < self.flush_at:
            return [SetFlushTimer(self.flush_at)]  # early: ask again
        self.flush_at = None
        if self.status is not CursorStatus.OPEN or not self.dirty:
            return []
        self._write_wanted = True
        return self._pump(e.now)

    # ---- persisting to the cursor ledger ------------------------------------------------------------

    def _pump(self, now: float) -> list[Output]:
        """With no I/O in flight: start the write wanted, or finish a close or a delete."""
        if self.io is not Io.IDLE:
            return []
        if self._deleting:
            self.io = Io.DELETING_NODE
            return [DeleteCursorNode(self.node_version)]
        open_ = self.status is CursorStatus.OPEN and self.ledger_id is not None
        if open_ and (self._write_wanted or (self._closing and self.dirty)):
            return self._start_write(now)
        if self._closing:
            return self._finish_close()
        return []

    def _start_write(self, now: float) -> list[Output]:
        assert self.ledger_id is not None
        apply = self._candidate is not None
        state = self._candidate if self._candidate is not None else self.state.copy()
        self._writing = _Write(state, self._waiting, apply)
        self._waiting = []
        self._candidate = None
        self._write_wanted = False
        self.dirty = False
        self.last_write = now
        self.io = Io.APPENDING
        return [AppendCursorState(self.ledger_id, state.encode())]

    def _appended(self, e: CursorStateAppended) -> list[Output]:
        if self.io is Io.WRITING_FIRST_ENTRY and self._switch is not None and self._switch.new_ledger == e.ledger_id:
            return self._first_entry_appended(e)
        written = self._writing
        if self.io is not Io.APPENDING or written is None or e.ledger_id != self.ledger_id:
            return []
        self.io = Io.IDLE
        self._writing = None
        self.ledger_entries += 1
        if written.apply:
            self.state = written.state
        outputs: list[Output] = [CompleteRequest(t) for t in written.tokens]
        if self.ledger_entries >= self.config.cursor_max_entries and self.status is CursorStatus.OPEN:
            return outputs + self._start_switch(_Switch(SwitchPurpose.ROLLOVER, written.state.copy(), e.ledger_id))
        return outputs + self._pump(e.now)

    def _append_failed(self, e: CursorStateAppendFailed) -> list[Output]:
        switch = self._switch
        if self.io is Io.WRITING_FIRST_ENTRY and switch is not None and switch.new_ledger == e.ledger_id:
            return self._switch_failed(f"cannot create a cursor ledger ({e.reason})", e.now, e.ledger_id)
        written = self._writing
        if self.io is not Io.APPENDING or written is None or e.ledger_id != self.ledger_id:
            return []
        self.io = Io.IDLE
        if e.fenced:  # _fence fails the requests of this write too
            return self._fence("its cursor ledger was fenced: another broker recovered the cursor", cursor=True)
        self._writing = None
        error = self._error(f"the acknowledgement was not persisted ({e.reason}); retry it")
        outputs: list[Output] = [FailRequest(t, error) for t in written.tokens]
        if self.write_through and written.apply:
            # The changes queued after it were built on the state that was not stored: none took effect.
            outputs += [FailRequest(t, error) for t in self._waiting]
            self._waiting = []
            self._candidate = None
            self._write_wanted = False
        elif self._closing:
            outputs.append(PersistFailed(f"its last acks were not persisted at close ({e.reason})"))
        elif not self.write_through:
            self.dirty = True  # the rate-limited flush: try again an interval later
            outputs.append(PersistFailed(f"persisting its state failed ({e.reason}); retrying"))
            if self.flush_at is None:
                self.flush_at = e.now + self.config.cursor_persist_interval_s
                outputs.append(SetFlushTimer(self.flush_at))
        return outputs + self._pump(e.now)

    # ---- fencing ---------------------------------------------------------------------------------

    def _fence(self, why: str, cursor: bool) -> list[Output]:
        """Stop for good: fail what waits; `cursor`: the cursor itself was taken over (fence the topic)."""
        if self.status is CursorStatus.FENCED:
            return []
        self.status = CursorStatus.FENCED
        self._fenced_by_cursor = cursor
        self.fence_reason = f"cursor {self.name!r}: {why}" if cursor else why
        self.io = Io.IDLE
        error = self._refusal()
        assert error is not None
        outputs: list[Output] = [FenceManagedLedger(self.fence_reason)] if cursor else []
        waiting = self._waiting + (self._writing.tokens if self._writing is not None else [])
        outputs += [FailRequest(t, error) for t in waiting]
        self._waiting = []
        self._writing = None
        self._candidate = None
        self._write_wanted = False
        self.dirty = False
        if self.flush_at is not None:
            self.flush_at = None
            outputs.append(CancelFlushTimer())
        if self._switch is not None:
            if self._switch.new_ledger is not None and self._switch.new_ledger != self.ledger_id:
                outputs.append(DeleteCursorLedger(self._switch.new_ledger))
            self._switch = None
        if self._closing:
            outputs += self._finish_close()
        return outputs

    def _ml_fenced(self, e: ManagedLedgerFenced) -> list[Output]:
        if self.status not in (CursorStatus.OPEN, CursorStatus.OPENING):
            return []
        opening = self.status is CursorStatus.OPENING
        outputs = self._fence(e.reason, cursor=False)
        if opening:
            outputs.append(OpenFailed(ManagedLedgerFencedError(self.ml_name, e.reason)))
        return outputs

    # ---- close and delete --------------------------------------------------------------------------

    def _close(self, e: Close) -> list[Output]:
        if self.status in (CursorStatus.CLOSED, CursorStatus.DELETED):
            return [CompleteRequest(e.token)]
        self._closing.append(e.token)
        outputs: list[Output] = []
        if self.flush_at is not None:
            self.flush_at = None
            outputs.append(CancelFlushTimer())
        return outputs + self._pump(e.now)

    def _finish_close(self) -> list[Output]:
        outputs: list[Output] = [CloseCursorLedger(self.ledger_id)] if self.ledger_id is not None else []
        self.ledger_id = None
        if self.status is CursorStatus.OPEN:
            self.status = CursorStatus.CLOSED
        error = self._error("is closed")
        outputs += [FailRequest(t, error) for t in self._waiting]
        self._waiting = []
        self._candidate = None
        self._write_wanted = False
        outputs += [CompleteRequest(t) for t in self._closing]
        self._closing = []
        return outputs

    def _delete_cursor(self, e: DeleteCursor) -> list[Output]:
        if self.status is CursorStatus.DELETED and not self._deleting:
            return [CompleteRequest(e.token)]
        self.status = CursorStatus.DELETED
        self._deleting.append(e.token)
        outputs: list[Output] = []
        if self.flush_at is not None:
            self.flush_at = None
            outputs.append(CancelFlushTimer())
        error = self._error("is closed")
        outputs += [FailRequest(t, error) for t in self._waiting]
        self._waiting = []
        self._candidate = None
        self._write_wanted = False
        return outputs + self._pump(e.now)

    def _node_deleted(self, e: CursorNodeDeleted) -> list[Output]:
        if self.io is not Io.DELETING_NODE:
            return []
        return self._deleted(None)

    def _node_delete_failed(self, e: CursorNodeDeleteFailed) -> list[Output]:
        if self.io is not Io.DELETING_NODE:
            return []
        if e.error is NodeError.NO_NODE:
            return self._deleted(None)
        if e.error is NodeError.BAD_VERSION:
            return self._deleted(CursorFencedError(self.ml_name, f"cursor {self.name!r}: its node changed under us"))
        return self._deleted(self._error(f"cannot delete its node ({e.reason}); retry"))

    def _deleted(self, error: ManagedLedgerError | None) -> list[Output]:
        self.io = Io.IDLE
        tokens, self._deleting = self._deleting, []
        if error is not None:
            return [FailRequest(t, error) for t in tokens]
        outputs: list[Output] = [DeleteCursorLedger(self.ledger_id)] if self.ledger_id is not None else []
        self.ledger_id = None
        return outputs + [CompleteRequest(t) for t in tokens]


_HANDLERS: dict[type, Callable[[ManagedCursorCore, Any], list[Output]]] = {
    Open: ManagedCursorCore._open,
    NodeRead: ManagedCursorCore._node_read,
    NodeReadFailed: ManagedCursorCore._node_read_failed,
    CursorLedgerRecovered: ManagedCursorCore._ledger_recovered,
    CursorLedgerRecoveryFailed: ManagedCursorCore._ledger_recovery_failed,
    CursorLedgerCreated: ManagedCursorCore._ledger_created,
    CursorLedgerCreateFailed: ManagedCursorCore._ledger_create_failed,
    CursorStateAppended: ManagedCursorCore._appended,
    CursorStateAppendFailed: ManagedCursorCore._append_failed,
    CursorNodeWritten: ManagedCursorCore._node_written,
    CursorNodeWriteFailed: ManagedCursorCore._node_write_failed,
    CursorNodeDeleted: ManagedCursorCore._node_deleted,
    CursorNodeDeleteFailed: ManagedCursorCore._node_delete_failed,
    MarkDelete: ManagedCursorCore._mark_delete,
    Delete: ManagedCursorCore._delete,
    Reset: ManagedCursorCore._reset,
    Persist: ManagedCursorCore._persist,
    Tick: ManagedCursorCore._tick,
    ManagedLedgerFenced: ManagedCursorCore._ml_fenced,
    Close: ManagedCursorCore._close,
    DeleteCursor: ManagedCursorCore._delete_cursor,
}
