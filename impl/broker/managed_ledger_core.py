"""The managed ledger's pure core: one topic's chain of ledgers, as spec/fencing.tla's `ml[b]`.

No I/O, threads or clocks: the shell (impl/broker/managed_ledger.py) feeds it typed inputs (a
request, a metadata result, a BookKeeper completion, the time) through one function,
`step(event) -> list[Output]`, and performs the outputs, feeding their answers back as events.
Names follow spec/fencing.tla:

  ReadLedgerList            Open -> ReadLedgerList -> LedgerListRead(data, version), or
                            LedgerListReadFailed
  RecoverLastLedger         RecoverLastLedger -> LastLedgerRecovered(end), or
                            LastLedgerRecoveryFailed
  CreateLedgerAndWriteList  CreateLedger -> LedgerCreated (or LedgerCreateFailed) -> WriteLedgerList
                            -> LedgerListWritten, LedgerListBadVersion or LedgerListWriteFailed
                            (bad version or unknown outcome = FENCED)
  AddEntry                  Add(token, data, now) -> SendAdd -> AddCompleted -> CompleteAdd, or
                            AddFailed (fenced = FENCED for good)
  Rollover                  CloseLedger -> LedgerClosed (or LedgerCloseFailed = FENCED), then
                            CreateLedger, WriteLedgerList when the current ledger is full (entries,
                            bytes or age: Tick(now) looks at the age of an idle one)
  TrimConsumedLedger        Trim(slowest) -> WriteLedgerList without the consumed head ledgers, then
                            DeleteLedgers and TrimDone; a bad version = FENCED
  CloseFencedManagedLedger  Close
  (storage.tla)             SetOffloadContext(ledger, context) -> WriteLedgerList with the ledger's offload
                            context -> OffloadContextWritten (the offload's record, OffloadRecord, and the
                            later `bookkeeperDeleted` mark); a bad version or an unknown outcome = FENCED
  (beyond the spec)         Fence(reason) from outside (a cursor's fencing, the session's expiry);
                            TopicDeleted; RetentionChanged

Queries (`view()`, `check_usable()`, the state's fields) change nothing. A request the managed ledger
cannot take in its state raises ManagedLedgerError (Open when not closed; Trim when not open); an
answer that does not match what is in flight (a stale one) is ignored; an event of another type
raises TypeError.

Adds are pipelined: many are in flight on the current ledger; they complete strictly in
order (the BookKeeper writer completes in entry order and a rollover waits for the in-flight
adds of the old ledger before closing it). Adds that arrive during a rollover are queued and
sent to the new ledger. Only one metadata change of the list is in flight at a time
(`phase`), so each conditional write uses the version the previous one returned.

Beyond the spec (which abstracts BookKeeper failures away): an add that fails for another
reason than fencing (no bookie to replace a failed one) stops the ledger's writer. The core
then rolls over, as Pulsar does: the shell closes the failed ledger with its writer's close
(at the entries it acknowledged, as BookKeeper's handle closes itself on such an error; a
metadata write only, no bookie needed), and the closed end decides which adds completed and
which go to the next ledger. If the next ledger fails too before storing anything, the adds
fail (retriable) rather than creating ledgers in a loop. A metadata session expiry fences
the managed ledger at once (BookKeeper issue 4462).
"""

from __future__ import annotations

import dataclasses
import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from impl.broker.ledger_list import LedgerInfo, LedgerList, OffloadContext, Position, TopicView
from impl.broker.managed_ledger_errors import (
    EntryRefusedError,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerNotReadyError,
)
from impl.values import value_type

MB = 1024 * 1024


@dataclass
class ManagedLedgerConfig:
    ensemble: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    max_entries_per_ledger: int = 50_000
    max_size_bytes: int = 100 * MB
    max_ledger_age_s: float = 4 * 3600
    retention_minutes: float = 0
    retention_size_mb: float = 0
    password: bytes = b"pulsar-ref"
    digest: str = "crc32c"
    cache_bytes: int = 16 * MB  # entry cache of recent adds
    cursor_max_entries: int = 10_000  # a cursor ledger is replaced after this many persisted states
    # Acknowledgements are persisted at most once per interval (Pulsar's mark-delete rate limit): an ack
    # returns once applied, the cursor writes its newest state to the cursor ledger within the interval,
    # and close() writes what is left. A crash loses at most the acks of the last interval (they are
    # delivered again: at-least-once). 0: every acknowledgement is persisted before it returns.
    cursor_persist_interval_s: float = 0.1

    def __post_init__(self) -> None:
        if not 1 <= self.ack_quorum <= self.write_quorum <= self.ensemble:
            raise ValueError(
                f"need 1 <= ack_quorum <= write_quorum <= ensemble, got "
                f"{self.ensemble}/{self.write_quorum}/{self.ack_quorum}"
            )
        if self.max_entries_per_ledger < 1 or self.max_size_bytes < 1 or self.max_ledger_age_s <= 0:
            raise ValueError("rollover limits (entries, bytes, age) must be positive")
        if self.retention_minutes < 0 or self.retention_size_mb < 0:
            raise ValueError("retention must be >= 0 (0 = keep nothing that every cursor consumed)")
        if self.cursor_max_entries < 1:
            raise ValueError("cursor_max_entries must be positive")
        if self.cursor_persist_interval_s < 0:
            raise ValueError("cursor_persist_interval_s must be >= 0 (0: persist every acknowledgement)")


class ManagedLedgerState(enum.Enum):
    """spec/fencing.tla MLStates."""

    CLOSED = "closed"  # not loaded (or closed by the broker)
    READING = "reading"  # read the list (a snapshot), about to recover its last ledger
    RECOVERED = "recovered"  # last ledger recovered, about to create a ledger and write the list
    OPEN = "open"  # writing to `current`
    FENCED = "fenced"  # terminal: every operation fails until the topic is closed
    DELETED = "deleted"  # the topic's data and node are gone


class Phase(enum.Enum):
    """The list change in progress (at most one)."""

    IDLE = "idle"
    DRAINING = "draining"  # rollover: waiting for the old ledger's in-flight adds
    CLOSING = "closing"  # rollover: writer close of the old ledger
    CREATING = "creating"  # creating the next ledger
    WRITING_LIST = "writing-list"  # conditional write of the list with the new ledger
    TRIMMING = "trimming"  # conditional write of the list without consumed head ledgers
    OFFLOAD_CONTEXT = "offload-context"  # conditional write of the list with a ledger's offload context


# ---- inputs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Open:
    """spec ReadLedgerList: the broker takes the topic over (the state must be CLOSED)."""


@value_type  # built for every message: impl/values.py
class Add:
    """spec AddEntry: append `data`; its CompleteAdd or FailAdd carries `token`."""

    token: int
    data: bytes
    now: float  # the shell's clock (the age rollover)


@dataclass(frozen=True)
class Tick:
    """Time passes: roll an idle ledger over once it is too old (Pulsar's periodic check)."""

    now: float


@dataclass(frozen=True)
class Trim:
    """spec TrimConsumedLedger: drop closed head ledgers every durable cursor has passed, keeping the
    retention. `slowest` is the smallest mark-delete position of the durable cursors (`cursors` says
    whether there are any; with none, nothing holds data back but retention, as in Pulsar)."""

    wall_now: float
    slowest: Position | None
    cursors: bool


@dataclass(frozen=True)
class SetOffloadContext:
    """storage.tla OffloadRecord: write the list with `ledger_id`'s offload context (the offload's record,
    or the mark that its bookie copy is deleted); answered by OffloadContextWritten."""

    ledger_id: int
    context: OffloadContext


@dataclass(frozen=True)
class Fence:
    """Fenced from outside (a cursor's ledger or node was taken over, the session expired)."""

    reason: str


@dataclass(frozen=True)
class Close:
    """The broker unloads the topic (spec CloseFencedManagedLedger for a fenced one)."""


@dataclass(frozen=True)
class TopicDeleted:
    """The shell deleted the topic's ledgers, cursors and node (after Close)."""


@dataclass(frozen=True)
class RetentionChanged:
    """A changed retention policy: keep this much of what every cursor consumed from the next trim on."""

    minutes: float
    size_mb: float


@dataclass(frozen=True)
class LedgerListRead:
    """ReadLedgerList's answer: the node's data and version (both None if there is no node)."""

    data: bytes | None
    version: int | None


@dataclass(frozen=True)
class LedgerListReadFailed:
    reason: str


@dataclass(frozen=True)
class LastLedgerRecovered:
    """RecoverLastLedger's answer: the ledger is fenced and closed at `last_entry_id` (`length` bytes)."""

    ledger_id: int
    last_entry_id: int
    length: int


@dataclass(frozen=True)
class LastLedgerRecoveryFailed:
    ledger_id: int
    reason: str


@dataclass(frozen=True)
class LedgerCreated:
    ledger_id: int
    now: float  # the shell's clock when it was created (the age rollover)


@dataclass(frozen=True)
class LedgerCreateFailed:
    reason: str


@dataclass(frozen=True)
class LedgerListWritten:
    """WriteLedgerList's answer: the node's new version."""

    version: int


@dataclass(frozen=True)
class LedgerListBadVersion:
    """WriteLedgerList met another broker's write (bad version, or the node created or deleted meanwhile)."""

    detail: str


@dataclass(frozen=True)
class LedgerListWriteFailed:
    """Any other metadata failure of WriteLedgerList (session expired, connection lost: it may have applied)."""

    detail: str


@value_type  # built for every message: impl/values.py
class AddCompleted:
    """SendAdd's answer: the entry is stored (acknowledged by the ledger's writer)."""

    ledger_id: int
    entry_id: int


@dataclass(frozen=True)
class AddFailed:
    """SendAdd failed: `fenced` by another broker's recovery, or the ledger's writer failed (`reason`)."""

    ledger_id: int
    entry_id: int
    fenced: bool
    reason: str
    refused: bool = False  # a bookie refused this entry for good (EBADREQ): fail it, do not resend it


@dataclass(frozen=True)
class LedgerClosed:
    """CloseLedger's answer: the ledger is closed at `last_entry_id` (`length` bytes), at `wall_now`."""

    ledger_id: int
    last_entry_id: int
    length: int
    wall_now: float


@dataclass(frozen=True)
class LedgerCloseFailed:
    """The rollover's writer close failed. `recovered`: another broker recovers or recovered the ledger
    (a takeover; `reason` says what the shell found); else the metadata store failed."""

    ledger_id: int
    recovered: bool
    reason: str


Event = (
    Open
    | Add
    | Tick
    | Trim
    | SetOffloadContext
    | Fence
    | Close
    | TopicDeleted
    | RetentionChanged
    | LedgerListRead
    | LedgerListReadFailed
    | LastLedgerRecovered
    | LastLedgerRecoveryFailed
    | LedgerCreated
    | LedgerCreateFailed
    | LedgerListWritten
    | LedgerListBadVersion
    | LedgerListWriteFailed
    | AddCompleted
    | AddFailed
    | LedgerClosed
    | LedgerCloseFailed
)


# ---- outputs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadLedgerList:
    """Read the managed-ledger node; answer LedgerListRead(data, version) (None, None if absent), or
    LedgerListReadFailed."""


@dataclass(frozen=True)
class RecoverLastLedger:
    """Open `ledger_id` with recovery (fences its bookies); answer LastLedgerRecovered (an orphan that is
    gone: recovered empty) or LastLedgerRecoveryFailed."""

    ledger_id: int


@dataclass(frozen=True)
class CreateLedger:
    """Create a ledger; answer LedgerCreated(id, now) or LedgerCreateFailed."""


@dataclass(frozen=True)
class WriteLedgerList:
    """Conditional write of the node (`expected_version` None = create it); answer
    LedgerListWritten(new_version), LedgerListBadVersion or LedgerListWriteFailed."""

    data: bytes
    expected_version: int | None


@value_type  # built for every message: impl/values.py
class SendAdd:
    """Add `data` to ledger `ledger_id`; it gets `entry_id`. Answer AddCompleted or AddFailed."""

    ledger_id: int
    entry_id: int
    data: bytes


@dataclass(frozen=True)
class CloseLedger:
    """Writer close of `ledger_id`; answer LedgerClosed or LedgerCloseFailed (none after Close)."""

    ledger_id: int


@dataclass(frozen=True)
class DeleteLedgers:
    """Delete these ledgers from BookKeeper (they are on no list any more)."""

    ledger_ids: tuple[int, ...]


@value_type  # built for every message: impl/values.py
class CompleteAdd:
    token: int
    position: Position
    data: bytes


@dataclass(frozen=True)
class FailAdd:
    token: int
    error: ManagedLedgerError


@value_type  # built for every message: impl/values.py
class NotifyConfirmed:
    """New entries up to `position` are confirmed: tell the listeners (tailing readers)."""

    position: Position


@dataclass(frozen=True)
class Opened:
    """The takeover is complete: recover the cursors."""


@dataclass(frozen=True)
class OpenFailed:
    error: ManagedLedgerError


@dataclass(frozen=True)
class TrimDone:
    ledger_ids: tuple[int, ...]


@dataclass(frozen=True)
class DeleteOffloaded:
    """Delete the offloaded copies of these trimmed ledgers (they are on no list any more)."""

    ledgers: tuple[LedgerInfo, ...]


@dataclass(frozen=True)
class OffloadContextWritten:
    """SetOffloadContext's answer. `outcome`: "written" (the list now has the context, at `version`);
    "busy" (another change of the list is in flight: nothing written, ask again); "refused" (not
    loaded, or the ledger is not on the list or is the current one: nothing written; `detail` says
    why); "badversion" (another broker wrote the list: not applied, FENCED); "unknown" (the answer was
    lost: it may have applied, FENCED)."""

    ledger_id: int
    outcome: str
    version: int | None = None
    detail: str = ""


Output = (
    ReadLedgerList
    | RecoverLastLedger
    | CreateLedger
    | WriteLedgerList
    | SendAdd
    | CloseLedger
    | DeleteLedgers
    | CompleteAdd
    | FailAdd
    | NotifyConfirmed
    | Opened
    | OpenFailed
    | TrimDone
    | DeleteOffloaded
    | OffloadContextWritten
)


@dataclass
class PendingAdd:
    token: int
    data: bytes
    ledger_id: int | None = None  # None: queued, not sent yet
    entry_id: int = -1
    completed: bool = False


@dataclass
class ManagedLedgerCore:
    """One topic's managed ledger on one broker (pure core); see the module docstring."""

    name: str
    config: ManagedLedgerConfig = field(default_factory=ManagedLedgerConfig)
    state: ManagedLedgerState = ManagedLedgerState.CLOSED
    version: int | None = None  # version of the node as last read/written (None: absent)
    ledgers: list[LedgerInfo] = field(default_factory=list)  # the list as this broker sees it
    properties: dict[str, str] = field(default_factory=dict)
    current: int | None = None  # the ledger being written (spec: ml.current)
    created_at: float = 0.0  # clock time the current ledger was created (age rollover)
    pushed_entries: int = 0  # adds sent to the current ledger
    pushed_bytes: int = 0
    confirmed: int = -1  # last confirmed entry id of the current ledger
    confirmed_bytes: int = 0  # bytes of the current ledger's confirmed entries (the size stats report)
    pending: deque[PendingAdd] = field(default_factory=deque)  # sent to the current ledger, in order
    queued: deque[PendingAdd] = field(default_factory=deque)  # not sent yet (they follow `pending`)
    phase: Phase = Phase.IDLE
    next_ledger: int | None = None  # created, not yet on the list
    trimming: tuple[int, ...] = ()
    offload_write: tuple[int, OffloadContext] | None = None  # the offload context being written
    dropped_empty: tuple[int, ...] = ()
    fence_reason: str = ""
    write_failed: bool = False  # the current ledger's writer failed: close it before anything else
    retrying: bool = False  # the current ledger replaces one whose writer failed
    refused: dict[int, str] = field(default_factory=dict)  # token -> why a bookie refused its entry for good
    refused_adds: int = 0  # adds failed by a bookie's permanent refusal (a metric)

    # ---- queries -----------------------------------------------------------------------------

    def view(self) -> TopicView:
        return TopicView.of(self.ledgers, self.current, self.confirmed + 1)

    def check_usable(self) -> None:
        """Raise the terminal error of a fenced, closed or deleted managed ledger."""
        if self.state is ManagedLedgerState.FENCED:
            raise ManagedLedgerFencedError(self.name, self.fence_reason)
        if self.state in (ManagedLedgerState.CLOSED, ManagedLedgerState.DELETED):
            raise ManagedLedgerClosedError(self.name, f"is {self.state.value} on this broker; open it again")
        if self.state is not ManagedLedgerState.OPEN:
            raise ManagedLedgerClosedError(self.name, f"is still opening ({self.state.value})")

    def _encode(self, ledgers: list[LedgerInfo]) -> bytes:
        return LedgerList(tuple(ledgers), dict(self.properties)).encode()

    # ---- the one entry point -------------------------------------------------------------------

    def step(self, event: Event) -> list[Output]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a managed-ledger event: {event!r}")
        return handler(self, event)

    # ---- open (takeover) ------------------------------------------------------------------

    def _open(self, e: Open) -> list[Output]:
        """spec ReadLedgerList: start the takeover sequence."""
        if self.state is not ManagedLedgerState.CLOSED:
            raise ManagedLedgerError(self.name, f"cannot open: state is {self.state.value}")
        self.state = ManagedLedgerState.READING
        return [ReadLedgerList()]

    def _ledger_list_read(self, e: LedgerListRead) -> list[Output]:
        try:
            listed = LedgerList.decode(e.data or b"")
        except ValueError as error:
            return self._open_failed(f"its metadata node is unreadable ({error}); repair or delete it")
        self.version = e.version
        self.ledgers = list(listed.ledgers)
        self.properties = dict(listed.properties)
        if self.ledgers:
            return [RecoverLastLedger(self.ledgers[-1].ledger_id)]
        self.state = ManagedLedgerState.RECOVERED
        self.phase = Phase.CREATING
        return [CreateLedger()]

    def _ledger_list_read_failed(self, e: LedgerListReadFailed) -> list[Output]:
        return self._open_failed(f"cannot read its ledger list ({e.reason}); retry")

    def _last_ledger_recovered(self, e: LastLedgerRecovered) -> list[Output]:
        """spec RecoverLastLedger: the last ledger is fenced and closed at `last_entry_id`."""
        if self.state is not ManagedLedgerState.READING or self.ledgers[-1].ledger_id != e.ledger_id:
            return []
        self.ledgers[-1] = LedgerInfo(e.ledger_id, e.last_entry_id + 1, e.length, self.ledgers[-1].timestamp)
        # Pulsar drops empty ledgers from the list on open; they are deleted once the list is written.
        self.dropped_empty = tuple(i.ledger_id for i in self.ledgers if i.entries == 0)
        self.ledgers = [i for i in self.ledgers if i.entries > 0]
        self.state = ManagedLedgerState.RECOVERED
        self.phase = Phase.CREATING
        return [CreateLedger()]

    def _last_ledger_recovery_failed(self, e: LastLedgerRecoveryFailed) -> list[Output]:
        return self._open_failed(f"recovery of its last ledger {e.ledger_id} failed ({e.reason}); retry the open")

    def _open_failed(self, reason: str) -> list[Output]:
        self.state = ManagedLedgerState.CLOSED
        self.phase = Phase.IDLE
        return [OpenFailed(ManagedLedgerError(self.name, reason))]

    # ---- ledger creation and the list (open, rollover) -----------------------------------------

    def _ledger_created(self, e: LedgerCreated) -> list[Output]:
        """spec CreateLedgerAndWriteList / Rollover: write the list with the new ledger appended."""
        if self.phase is not Phase.CREATING:
            return [DeleteLedgers((e.ledger_id,))]  # fenced or closed meanwhile: an orphan
        self.next_ledger = e.ledger_id
        self.created_at = e.now
        self.phase = Phase.WRITING_LIST
        return [WriteLedgerList(self._encode([*self.ledgers, LedgerInfo(e.ledger_id)]), self.version)]

    def _ledger_create_failed(self, e: LedgerCreateFailed) -> list[Output]:
        reason = e.reason
        if self.state is ManagedLedgerState.RECOVERED:
            return self._open_failed(f"could not create a ledger ({reason}); start bookies and retry")
        if self.phase is not Phase.CREATING:
            return []
        # Without a current ledger the queued adds cannot go anywhere: fail them (nothing was
        # written); the next add tries to create a ledger again, as Pulsar does.
        self.phase = Phase.IDLE
        self.current = None
        error = ManagedLedgerNotReadyError(self.name, f"could not create a ledger ({reason}); retry the add")
        return self._fail_pending(error)

    def _list_written(self, e: LedgerListWritten) -> list[Output]:
        self.version = e.version
        if self.phase is Phase.TRIMMING:
            trimmed = self.trimming
            offloaded = tuple(i for i in self.ledgers if i.ledger_id in trimmed and i.offload is not None)
            self.ledgers = [i for i in self.ledgers if i.ledger_id not in trimmed]
            self.trimming = ()
            self.phase = Phase.IDLE
            gone: list[Output] = [DeleteOffloaded(offloaded)] if offloaded else []
            return [DeleteLedgers(trimmed), *gone, TrimDone(trimmed), *self._send_queued()]
        if self.phase is Phase.OFFLOAD_CONTEXT and self.offload_write is not None:
            ledger_id, context = self.offload_write
            self.ledgers = [
                dataclasses.replace(i, offload=context) if i.ledger_id == ledger_id else i for i in self.ledgers
            ]
            self.offload_write = None
            self.phase = Phase.IDLE
            return [OffloadContextWritten(ledger_id, "written", e.version), *self._send_queued()]
        if self.phase is not Phase.WRITING_LIST or self.next_ledger is None:
            return []
        self.ledgers.append(LedgerInfo(self.next_ledger))
        self.current, self.next_ledger = self.next_ledger, None
        self.pushed_entries = self.pushed_bytes = self.confirmed_bytes = 0
        self.confirmed = -1
        self.phase = Phase.IDLE
        outputs: list[Output] = []
        if self.state is ManagedLedgerState.RECOVERED:
            self.state = ManagedLedgerState.OPEN
            outputs.append(Opened())
            if self.dropped_empty:
                outputs.append(DeleteLedgers(self.dropped_empty))
                self.dropped_empty = ()
        return outputs + self._send_queued()

    def _list_bad_version(self, e: LedgerListBadVersion | LedgerListWriteFailed) -> list[Output]:
        """Someone else changed the list: another broker took over. FENCED for good (issue 17736).
        LedgerListWriteFailed too: with a write of unknown outcome (session expired, connection lost: it
        may have applied) we can no longer know the list's version, so stop writing for good."""
        detail = e.detail
        orphan = (self.next_ledger,) if self.next_ledger is not None else ()
        self.next_ledger = None
        outputs: list[Output] = [DeleteLedgers(orphan)] if orphan else []
        if self.phase is Phase.OFFLOAD_CONTEXT and self.offload_write is not None:
            outcome = "badversion" if isinstance(e, LedgerListBadVersion) else "unknown"
            outputs.append(OffloadContextWritten(self.offload_write[0], outcome, None, detail))
            self.offload_write = None
            reason = f"the ledger list changed under us while this broker recorded an offload ({detail})"
            if outcome == "unknown":
                reason = f"the answer to this broker's write of the ledger list (an offload) was lost ({detail})"
            return outputs + self._fence(reason)
        if self.state is ManagedLedgerState.RECOVERED:
            what = "while this broker was opening the topic: the previous owner wrote it (a rollover or a trim)"
        elif self.phase is Phase.TRIMMING:
            what = "while this broker trimmed it: another broker took the topic over"
        else:
            what = "while this broker rolled over: another broker took the topic over"
        reason = f"the ledger list changed under us {what} ({detail})"
        if self.state is ManagedLedgerState.RECOVERED:
            self.state = ManagedLedgerState.FENCED
            self.fence_reason = reason
            return outputs + [OpenFailed(ManagedLedgerFencedError(self.name, reason))]
        return outputs + self._fence(reason)

    # ---- adds (spec AddEntry) ------------------------------------------------------------------

    def _add(self, e: Add) -> list[Output]:
        try:
            self.check_usable()
        except ManagedLedgerError as error:
            return [FailAdd(e.token, error)]
        self.queued.append(PendingAdd(e.token, e.data))
        return self._send_queued(e.now)

    def _full(self, now: float | None) -> bool:
        c = self.config
        aged = now is not None and now - self.created_at >= c.max_ledger_age_s
        return self.pushed_entries > 0 and (
            self.pushed_entries >= c.max_entries_per_ledger or self.pushed_bytes >= c.max_size_bytes or aged
        )

    def _send_queued(self, now: float | None = None) -> list[Output]:
        """Send queued adds to the current ledger, starting a rollover when it is full."""
        if self.state is not ManagedLedgerState.OPEN or self.phase is not Phase.IDLE:
            return []
        if self.write_failed:  # the writer failed while another list change was in flight
            return self._start_rollover()
        outputs: list[Output] = []
        while self.queued:
            if self.current is None or self._full(now):
                outputs += self._start_rollover()
                break
            p = self.queued.popleft()
            self.pending.append(p)
            p.ledger_id, p.entry_id = self.current, self.pushed_entries
            self.pushed_entries += 1
            self.pushed_bytes += len(p.data)
            outputs.append(SendAdd(p.ledger_id, p.entry_id, p.data))
        return outputs

    def _add_completed(self, e: AddCompleted) -> list[Output]:
        for p in self.pending:
            if p.ledger_id == e.ledger_id and p.entry_id == e.entry_id:
                p.completed = True
                break
        else:
            return []  # a stale completion (e.g. after FENCED)
        outputs = self._complete_head()
        if self.phase is Phase.DRAINING and not self._in_flight():
            outputs += self._close_current()
        return outputs

    def _complete_head(self) -> list[Output]:
        """Complete the adds at the head of the queue that are stored, in add order."""
        outputs: list[Output] = []
        while self.pending and self.pending[0].completed:
            done = self.pending.popleft()
            assert done.ledger_id is not None
            if done.ledger_id == self.current:
                self.confirmed = max(self.confirmed, done.entry_id)
                self.confirmed_bytes += len(done.data)
                self.retrying = False
            outputs.append(CompleteAdd(done.token, Position(done.ledger_id, done.entry_id), done.data))
        if outputs:
            last = outputs[-1]
            assert isinstance(last, CompleteAdd)
            outputs.append(NotifyConfirmed(last.position))
        return outputs

    def _add_failed(self, e: AddFailed) -> list[Output]:
        if e.ledger_id != self.current or self.state is not ManagedLedgerState.OPEN:
            return []  # a stale failure of a ledger we already left
        if e.fenced:
            return self._fence(f"ledger {e.ledger_id} was fenced by another broker's recovery ({e.reason})")
        if e.refused:  # this entry can never be stored: it fails; the adds after it go to the next ledger
            for p in self.pending:
                if p.ledger_id == e.ledger_id and p.entry_id == e.entry_id:
                    self.refused[p.token] = e.reason
        # Any other failure (no bookie to replace a failed one) stops the ledger's writer: close
        # the ledger (its end decides which of the failed adds are stored after all) and send
        # the others again to the next ledger.
        self.write_failed = True
        if self.phase in (Phase.IDLE, Phase.DRAINING):
            return self._close_current()
        return []

    def _in_flight(self) -> bool:
        return bool(self.pending)

    # ---- rollover (spec Rollover) ------------------------------------------------------------

    def _start_rollover(self) -> list[Output]:
        if self.current is None:
            self.phase = Phase.CREATING
            return [CreateLedger()]
        if self._in_flight() and not self.write_failed:
            self.phase = Phase.DRAINING  # a failed writer completes nothing more: close it at once
            return []
        return self._close_current()

    def _close_current(self) -> list[Output]:
        assert self.current is not None
        self.phase = Phase.CLOSING
        return [CloseLedger(self.current)]

    def _ledger_closed(self, e: LedgerClosed) -> list[Output]:
        ledger_id, last_entry_id = e.ledger_id, e.last_entry_id
        if self.phase is not Phase.CLOSING or ledger_id != self.current:
            return []
        self.ledgers[-1] = LedgerInfo(ledger_id, last_entry_id + 1, e.length, e.wall_now)
        self.confirmed = last_entry_id
        # The closed end is the truth: adds sent to this ledger up to it are stored; the ones
        # after it are not (beyond the end no reader sees them), and go to the next ledger.
        resend: list[PendingAdd] = []
        refused: list[Output] = []
        for p in self.pending:
            if p.entry_id <= last_entry_id:
                p.completed = True
            elif p.token in self.refused:
                self.refused_adds += 1
                why = f"{self.refused.pop(p.token)}; the entry is not stored"
                refused.append(FailAdd(p.token, EntryRefusedError(self.name, why)))
            else:
                p.ledger_id, p.entry_id = None, -1
                resend.append(p)
        outputs = self._complete_head()
        assert len(self.pending) == len(resend) + len(refused)  # the stored ones were a prefix
        outputs += refused
        self.pending.clear()
        self.refused.clear()
        self.queued.extendleft(reversed(resend))
        if self.write_failed:
            self.write_failed = False
            if refused:
                pass  # the cause is known and failed: the others are no retry of a failed ledger
            elif self.retrying:
                # The ledger that replaced a failed one failed too before storing anything:
                # give up on these adds rather than create ledgers in a loop.
                self.retrying = False
                error = ManagedLedgerNotReadyError(
                    self.name, f"ledger {ledger_id} could not store the adds either; check the bookies and retry"
                )
                outputs += self._fail_pending(error)
            else:
                self.retrying = True
        self.phase = Phase.CREATING
        return outputs + [CreateLedger()]

    def _ledger_close_failed(self, e: LedgerCloseFailed) -> list[Output]:
        if self.phase is not Phase.CLOSING or e.ledger_id != self.current:
            return []
        # Closed by someone else at another end (spec closeOk), or the metadata session is gone:
        # another broker may own the topic now, so stop.
        why = e.reason if e.recovered else f"the metadata store failed ({e.reason})"
        return self._fence(f"rollover could not close ledger {e.ledger_id}: {why}")

    def _tick(self, e: Tick) -> list[Output]:
        if self.state is ManagedLedgerState.OPEN and self.phase is Phase.IDLE and self._full(e.now):
            return self._start_rollover()
        return []

    # ---- trimming (spec TrimConsumedLedger) -----------------------------------------------------

    def _trim(self, e: Trim) -> list[Output]:
        """Drop closed head ledgers every durable cursor has passed, keeping the retention (see Trim)."""
        slowest, cursors = e.slowest, e.cursors
        self.check_usable()
        if self.phase is not Phase.IDLE:
            return [TrimDone(())]  # a list change is in flight; trim again later
        c = self.config
        remaining = sum(i.size for i in self.ledgers) + self.pushed_bytes
        retention = (c.retention_minutes, c.retention_size_mb)
        chosen = trimmable(self.ledgers, self.current, slowest, cursors, *retention, e.wall_now, remaining)
        if not chosen:
            return [TrimDone(())]
        self.trimming = tuple(chosen)
        self.phase = Phase.TRIMMING
        kept = [i for i in self.ledgers if i.ledger_id not in self.trimming]
        return [WriteLedgerList(self._encode(kept), self.version)]

    # ---- offload records (storage.tla OffloadRecord) -------------------------------------------

    def _set_offload_context(self, e: SetOffloadContext) -> list[Output]:
        """Write the list with the ledger's offload context, as one more change of the list (one at a time,
        each from the version the previous one returned)."""
        if self.state is not ManagedLedgerState.OPEN:
            return [OffloadContextWritten(e.ledger_id, "refused", None, f"the managed ledger is {self.state.value}")]
        if self.phase is not Phase.IDLE:
            return [OffloadContextWritten(e.ledger_id, "busy")]
        if e.ledger_id == self.current or all(i.ledger_id != e.ledger_id for i in self.ledgers):
            why = "is still being written" if e.ledger_id == self.current else "is not on the ledger list (trimmed)"
            return [OffloadContextWritten(e.ledger_id, "refused", None, f"ledger {e.ledger_id} {why}")]
        self.phase = Phase.OFFLOAD_CONTEXT
        self.offload_write = (e.ledger_id, e.context)
        listed = [dataclasses.replace(i, offload=e.context) if i.ledger_id == e.ledger_id else i for i in self.ledgers]
        return [WriteLedgerList(self._encode(listed), self.version)]

    # ---- fencing and closing ----------------------------------------------------------------

    def _fenced_from_outside(self, e: Fence) -> list[Output]:
        return self._fence(e.reason)

    def _fence(self, reason: str) -> list[Output]:
        if self.state in (ManagedLedgerState.FENCED, ManagedLedgerState.CLOSED, ManagedLedgerState.DELETED):
            return []
        self.state = ManagedLedgerState.FENCED
        self.fence_reason = reason
        self.phase = Phase.IDLE
        outputs: list[Output] = []
        if self.trimming:
            outputs.append(TrimDone(()))
            self.trimming = ()
        if self.offload_write is not None:  # its answer never comes now: it may have applied
            outputs.append(OffloadContextWritten(self.offload_write[0], "unknown", None, reason))
            self.offload_write = None
        # Adds in flight may have reached a bookie before the fence: their outcome is unknown.
        for p in self._all_pending():
            outputs.append(FailAdd(p.token, ManagedLedgerFencedError(self.name, reason, rejected=p.ledger_id is None)))
        self._clear_pending()
        return outputs

    def _all_pending(self) -> list[PendingAdd]:
        return [*self.pending, *self.queued]

    def _clear_pending(self) -> None:
        self.pending.clear()
        self.queued.clear()

    def _fail_pending(self, error: ManagedLedgerError) -> list[Output]:
        outputs: list[Output] = [FailAdd(p.token, error) for p in self._all_pending()]
        self._clear_pending()
        return outputs

    def _topic_deleted(self, e: TopicDeleted) -> list[Output]:
        self.state = ManagedLedgerState.DELETED
        return []

    def _retention_changed(self, e: RetentionChanged) -> list[Output]:
        self.config = dataclasses.replace(self.config, retention_minutes=e.minutes, retention_size_mb=e.size_mb)
        return []

    def _close(self, e: Close) -> list[Output]:
        if self.state is ManagedLedgerState.CLOSED:
            return []
        was_open = self.state is ManagedLedgerState.OPEN
        self.state = ManagedLedgerState.CLOSED
        self.phase = Phase.IDLE
        outputs: list[Output] = []
        if self.offload_write is not None:
            outputs.append(OffloadContextWritten(self.offload_write[0], "unknown", None, "closed meanwhile"))
            self.offload_write = None
        for p in self._all_pending():
            error = ManagedLedgerClosedError(
                self.name, "was closed while the add was pending; open it again", rejected=p.ledger_id is None
            )
            outputs.append(FailAdd(p.token, error))
        self._clear_pending()
        if was_open and self.current is not None:
            # The writer close records the end; the next owner's recovery finds it closed.
            outputs.append(CloseLedger(self.current))
        return outputs


def trimmable(
    ledgers: list[LedgerInfo],
    current: int | None,
    slowest: Position | None,
    cursors: bool,
    retention_minutes: float,
    retention_size_mb: float,
    wall_now: float,
    total_bytes: int,
) -> list[int]:
    """The head ledgers a trim may remove (spec TrimConsumedLedger; storage.tla Trim): closed ledgers every
    durable cursor has passed (`slowest`: the smallest mark-delete position; with no cursor, only retention
    holds data back, as in Pulsar), while what remains keeps retention_minutes of age and retention_size_mb
    of data (`total_bytes`: the topic's size now). Shared by the managed ledger and the lifecycle core."""
    candidates: list[LedgerInfo] = []
    for info in ledgers:
        if info.ledger_id == current:
            break
        consumed = not cursors or (
            slowest is not None
            and (
                info.ledger_id < slowest.ledger_id
                or (info.ledger_id == slowest.ledger_id and slowest.entry_id >= info.entries - 1)
            )
        )
        if not consumed:
            break
        candidates.append(info)
    remaining = total_bytes
    chosen: list[int] = []
    for info in candidates:
        if retention_minutes > 0 and wall_now - info.timestamp < retention_minutes * 60:
            break
        if retention_size_mb > 0 and remaining - info.size < retention_size_mb * MB:
            break
        remaining -= info.size
        chosen.append(info.ledger_id)
    return chosen


# Event type -> handler. A mutant (conformance/mutants.py) replaces an entry of this table to break one handler.
_HANDLERS: dict[type, Callable[[ManagedLedgerCore, Any], list[Output]]] = {
    Open: ManagedLedgerCore._open,
    Add: ManagedLedgerCore._add,
    Tick: ManagedLedgerCore._tick,
    Trim: ManagedLedgerCore._trim,
    SetOffloadContext: ManagedLedgerCore._set_offload_context,
    Fence: ManagedLedgerCore._fenced_from_outside,
    Close: ManagedLedgerCore._close,
    TopicDeleted: ManagedLedgerCore._topic_deleted,
    RetentionChanged: ManagedLedgerCore._retention_changed,
    LedgerListRead: ManagedLedgerCore._ledger_list_read,
    LedgerListReadFailed: ManagedLedgerCore._ledger_list_read_failed,
    LastLedgerRecovered: ManagedLedgerCore._last_ledger_recovered,
    LastLedgerRecoveryFailed: ManagedLedgerCore._last_ledger_recovery_failed,
    LedgerCreated: ManagedLedgerCore._ledger_created,
    LedgerCreateFailed: ManagedLedgerCore._ledger_create_failed,
    LedgerListWritten: ManagedLedgerCore._list_written,
    LedgerListBadVersion: ManagedLedgerCore._list_bad_version,
    LedgerListWriteFailed: ManagedLedgerCore._list_bad_version,
    AddCompleted: ManagedLedgerCore._add_completed,
    AddFailed: ManagedLedgerCore._add_failed,
    LedgerClosed: ManagedLedgerCore._ledger_closed,
    LedgerCloseFailed: ManagedLedgerCore._ledger_close_failed,
}
