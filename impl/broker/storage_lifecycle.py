"""A topic's storage over its life on one broker (pure core): trim, offload and compaction, as spec/storage.tla.

No I/O, threads or clocks: the shell feeds typed events through `step(event) -> list[Output]` and
performs the outputs, feeding their answers back. The core holds the broker's view of two metadata
nodes, each written by conditional write: the ledger list (with each ledger's offload uid: Pulsar's
LedgerInfo offload context) and the compaction cursor (its horizon and compacted ledger, one write,
as Pulsar's `__compaction` cursor with its `CompactedTopicLedger` property). It runs one operation at a
time. Names follow storage.tla:

  Trim              TrimRequested(slowest, cursors, wall_now) -> WriteList without the head ledgers
                    every cursor consumed and retention no longer keeps (`trimmable`, shared with the
                    managed ledger) -> ListWritten -> DeleteBookieLedgers + DeleteObject
  OffloadStart      OffloadRequested(ledger, uid) -> Upload(ledger, uid)
  OffloadUploaded / Uploaded(ledger, uid) -> WriteList with the uid recorded -> ListWritten ->
  OffloadRecord     ScheduleBookieDeletion(ledger, lag)
  DeleteBookieCopy  DeletionLagPassed(ledger) -> DeleteBookieCopy(ledger)
  CompactStart      CompactRequested(horizon) -> ReadForCompaction -> CompactionRead(entries) ->
                    WriteCompactedLedger(last value per key) -> CompactedLedgerWritten(id)
                    (or CompactedLedgerWriteFailed: nothing swapped, the previous view stays)
  CompactSwap       -> WriteCompactionCursor(horizon, id) -> CursorWritten -> DeleteCompactedLedger(prev)

Every write failure fences the core (it stops: the topic is reloaded by its next owner): on a bad
version it deletes what it wrote (it knows the write did not apply); on an unknown outcome (the answer
was lost) it keeps it: the write may have applied, and a leak is safe where a loss is not.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from impl.broker.ledger_list import LedgerInfo, Position
from impl.broker.managed_ledger_core import trimmable


class LifecycleError(Exception):
    """A request the core cannot take in its state (fenced, not loaded, another operation running)."""


@dataclass(frozen=True)
class ListedLedger:
    """One ledger of the list: its info and, once recorded, the uid of its complete offloaded copy."""

    info: LedgerInfo
    offload_uid: str | None = None

    @property
    def ledger_id(self) -> int:
        return self.info.ledger_id


@dataclass(frozen=True)
class CompactionCursor:
    """The compaction cursor's node: horizon (None: never compacted) and the compacted ledger."""

    version: int
    horizon: Position | None = None
    ledger_id: int | None = None


@dataclass(frozen=True)
class KeyedEntry:
    position: Position
    key: str
    value: bytes | None  # None: a tombstone, which deletes the key from the compacted view


def last_per_key(entries: tuple[KeyedEntry, ...]) -> tuple[KeyedEntry, ...]:
    """Phase one and two of compaction: the last entry of each key, in position order; a key whose last
    entry is a tombstone is left out."""
    last: dict[str, KeyedEntry] = {}
    for e in sorted(entries, key=lambda e: e.position):
        last[e.key] = e
    return tuple(sorted((e for e in last.values() if e.value is not None), key=lambda e: e.position))


@dataclass(frozen=True)
class LifecycleConfig:
    retention_minutes: float = 0
    retention_size_mb: float = 0
    deletion_lag_s: float = 4 * 3600  # Pulsar's managedLedgerOffloadDeletionLagMs default

    def __post_init__(self) -> None:
        if self.retention_minutes < 0 or self.retention_size_mb < 0:
            raise ValueError("retention must be >= 0")
        if self.deletion_lag_s < 0:
            raise ValueError("the offload deletion lag must be >= 0")


class LifecycleState(enum.Enum):
    NOT_LOADED = "not-loaded"
    LOADED = "loaded"
    FENCED = "fenced"  # a write failed: stop until the topic is loaded again


class Stage(enum.Enum):
    UPLOADING = "uploading"
    RECORDING = "recording"  # uploaded; the list write with the uid is out
    RECORDED = "recorded"  # waiting for the deletion lag
    READING = "reading"  # compaction: reading the previous compacted ledger and the entries
    WRITING = "writing"  # compaction: writing the compacted ledger
    SWAPPING = "swapping"  # compaction: the compaction cursor write is out
    TRIMMING = "trimming"  # the list write without the trimmed ledgers is out


@dataclass(frozen=True)
class Operation:
    kind: str  # "trim" | "offload" | "compact"
    stage: Stage
    ledger_id: int | None = None  # offload: the ledger; compact: the new compacted ledger
    uid: str = ""
    horizon: Position | None = None
    previous: int | None = None  # compact: the compacted ledger it replaces
    trimmed: tuple[ListedLedger, ...] = ()


# ---- inputs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """The broker took the topic over: the list and the compaction cursor as read (after the takeover)."""

    ledgers: tuple[ListedLedger, ...]
    version: int
    compaction: CompactionCursor
    current: int | None = None  # the managed ledger's current ledger: never trimmed nor offloaded


@dataclass(frozen=True)
class TrimRequested:
    wall_now: float
    slowest: Position | None  # the smallest mark-delete of the durable cursors (the compaction cursor too)
    cursors: bool
    current_bytes: int = 0  # bytes of the current ledger (the listed ledgers' sizes are in the list)


@dataclass(frozen=True)
class OffloadRequested:
    ledger_id: int
    uid: str  # a fresh uid per attempt (its objects are named after it)


@dataclass(frozen=True)
class Uploaded:
    ledger_id: int
    uid: str


@dataclass(frozen=True)
class UploadFailed:
    ledger_id: int
    uid: str
    reason: str


@dataclass(frozen=True)
class DeletionLagPassed:
    ledger_id: int


@dataclass(frozen=True)
class CompactRequested:
    horizon: Position


@dataclass(frozen=True)
class CompactionRead:
    """The previous compacted ledger's entries and the topic's entries after its horizon up to the new one."""

    entries: tuple[KeyedEntry, ...]


@dataclass(frozen=True)
class CompactionReadFailed:
    reason: str


@dataclass(frozen=True)
class CompactedLedgerWritten:
    ledger_id: int


@dataclass(frozen=True)
class CompactedLedgerWriteFailed:
    """The compacted ledger could not be written (the shell deleted what it created)."""

    reason: str


@dataclass(frozen=True)
class ListWritten:
    version: int


@dataclass(frozen=True)
class CursorWritten:
    version: int


@dataclass(frozen=True)
class BadVersion:
    """The conditional write did not apply: someone else wrote the node."""


@dataclass(frozen=True)
class WriteUnknown:
    """The write's answer was lost (session expired, connection lost): it may have applied."""

    reason: str


Event = (
    Load
    | TrimRequested
    | OffloadRequested
    | Uploaded
    | UploadFailed
    | DeletionLagPassed
    | CompactRequested
    | CompactionRead
    | CompactionReadFailed
    | CompactedLedgerWritten
    | CompactedLedgerWriteFailed
    | ListWritten
    | CursorWritten
    | BadVersion
    | WriteUnknown
)

# ---- outputs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteList:
    """Conditional write of the ledger list; answer ListWritten, BadVersion or WriteUnknown."""

    ledgers: tuple[ListedLedger, ...]
    expected_version: int


@dataclass(frozen=True)
class Upload:
    """Copy the ledger's entries from the bookies to the tiered store under `uid`; answer Uploaded or
    UploadFailed."""

    ledger_id: int
    uid: str


@dataclass(frozen=True)
class DeleteObject:
    ledger_id: int
    uid: str


@dataclass(frozen=True)
class ScheduleBookieDeletion:
    """Answer DeletionLagPassed(ledger) after `after_s` seconds."""

    ledger_id: int
    after_s: float


@dataclass(frozen=True)
class DeleteBookieCopy:
    ledger_id: int


@dataclass(frozen=True)
class DeleteBookieLedgers:
    ledger_ids: tuple[int, ...]


@dataclass(frozen=True)
class ReadForCompaction:
    """Read the compacted ledger `previous` (None: none) and the topic's entries after `after` up to `upto`;
    answer CompactionRead or CompactionReadFailed."""

    previous: int | None
    after: Position | None
    upto: Position


@dataclass(frozen=True)
class WriteCompactedLedger:
    """Create a ledger with these entries; answer CompactedLedgerWritten(id)."""

    entries: tuple[KeyedEntry, ...]


@dataclass(frozen=True)
class WriteCompactionCursor:
    """Conditional write of the compaction cursor; answer CursorWritten, BadVersion or WriteUnknown."""

    horizon: Position
    ledger_id: int
    expected_version: int


@dataclass(frozen=True)
class DeleteCompactedLedger:
    ledger_id: int


@dataclass(frozen=True)
class Fenced:
    reason: str


Output = (
    WriteList
    | Upload
    | DeleteObject
    | ScheduleBookieDeletion
    | DeleteBookieCopy
    | DeleteBookieLedgers
    | ReadForCompaction
    | WriteCompactedLedger
    | WriteCompactionCursor
    | DeleteCompactedLedger
    | Fenced
)


@dataclass
class StorageLifecycle:
    """One topic's storage lifecycle on one broker (pure core); see the module docstring."""

    name: str
    config: LifecycleConfig = field(default_factory=LifecycleConfig)
    state: LifecycleState = LifecycleState.NOT_LOADED
    ledgers: tuple[ListedLedger, ...] = ()
    version: int = 0
    current: int | None = None
    compaction: CompactionCursor = field(default_factory=lambda: CompactionCursor(0))
    op: Operation | None = None
    fence_reason: str = ""

    def step(self, event: Event) -> list[Output]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a storage lifecycle event: {event!r}")
        result: list[Output] = getattr(self, handler)(event)  # by name: a subclass's override is used
        return result

    # ---- requests ------------------------------------------------------------------------------

    def _idle(self, what: str) -> None:
        if self.state is not LifecycleState.LOADED:
            detail = f": {self.fence_reason}" if self.fence_reason else ""
            raise LifecycleError(f"{self.name}: cannot {what}, the topic's storage is {self.state.value}{detail}")
        if self.op is not None:
            raise LifecycleError(f"{self.name}: cannot {what} while a {self.op.kind} is running")

    def _load(self, e: Load) -> list[Output]:
        self.state = LifecycleState.LOADED
        self.ledgers, self.version, self.compaction, self.current = e.ledgers, e.version, e.compaction, e.current
        self.op, self.fence_reason = None, ""
        return []

    def _trim(self, e: TrimRequested) -> list[Output]:
        self._idle("trim")
        c = self.config
        chosen = set(
            trimmable(
                [x.info for x in self.ledgers],
                self.current,
                e.slowest,
                e.cursors,
                c.retention_minutes,
                c.retention_size_mb,
                e.wall_now,
                sum(x.info.size for x in self.ledgers) + e.current_bytes,
            )
        )
        if not chosen:
            return []
        trimmed = tuple(x for x in self.ledgers if x.ledger_id in chosen)
        self.op = Operation("trim", Stage.TRIMMING, trimmed=trimmed)
        return [WriteList(tuple(x for x in self.ledgers if x.ledger_id not in chosen), self.version)]

    def _offload(self, e: OffloadRequested) -> list[Output]:
        self._idle("offload")
        listed = next((x for x in self.ledgers if x.ledger_id == e.ledger_id), None)
        if listed is None:
            raise LifecycleError(f"{self.name}: ledger {e.ledger_id} is not on the ledger list")
        if e.ledger_id == self.current:
            raise LifecycleError(f"{self.name}: ledger {e.ledger_id} is still being written; offload closed ledgers")
        if listed.offload_uid is not None:
            raise LifecycleError(f"{self.name}: ledger {e.ledger_id} is offloaded already")
        self.op = Operation("offload", Stage.UPLOADING, ledger_id=e.ledger_id, uid=e.uid)
        return [Upload(e.ledger_id, e.uid)]

    def _uploaded(self, e: Uploaded) -> list[Output]:
        op = self.op
        if op is None or op.kind != "offload" or op.stage is not Stage.UPLOADING or op.uid != e.uid:
            return []  # a stale answer
        self.op = replace(op, stage=Stage.RECORDING)
        recorded = tuple(replace(x, offload_uid=e.uid) if x.ledger_id == e.ledger_id else x for x in self.ledgers)
        return [WriteList(recorded, self.version)]

    def _upload_failed(self, e: UploadFailed) -> list[Output]:
        op = self.op
        if op is None or op.kind != "offload" or op.uid != e.uid:
            return []
        self.op = None  # the bookie copy stays; the partial object goes
        return [DeleteObject(e.ledger_id, e.uid)]

    def _lag_passed(self, e: DeletionLagPassed) -> list[Output]:
        op = self.op
        if op is None or op.kind != "offload" or op.stage is not Stage.RECORDED or op.ledger_id != e.ledger_id:
            return []
        self.op = None
        return [DeleteBookieCopy(e.ledger_id)]

    def _compact(self, e: CompactRequested) -> list[Output]:
        self._idle("compact")
        after = self.compaction.horizon
        if after is not None and e.horizon <= after:
            raise LifecycleError(f"{self.name}: compacted up to {after} already (asked up to {e.horizon})")
        self.op = Operation("compact", Stage.READING, horizon=e.horizon, previous=self.compaction.ledger_id)
        return [ReadForCompaction(self.compaction.ledger_id, after, e.horizon)]

    def _compaction_read(self, e: CompactionRead) -> list[Output]:
        op = self.op
        if op is None or op.kind != "compact" or op.stage is not Stage.READING:
            return []
        self.op = replace(op, stage=Stage.WRITING)
        return [WriteCompactedLedger(last_per_key(e.entries))]

    def _compaction_read_failed(self, e: CompactionReadFailed) -> list[Output]:
        if self.op is not None and self.op.kind == "compact" and self.op.stage is Stage.READING:
            self.op = None
        return []

    def _compacted_write_failed(self, e: CompactedLedgerWriteFailed) -> list[Output]:
        if self.op is not None and self.op.kind == "compact" and self.op.stage is Stage.WRITING:
            self.op = None  # nothing was swapped in: the previous compacted ledger stays
        return []

    def _compacted_written(self, e: CompactedLedgerWritten) -> list[Output]:
        op = self.op
        if op is None or op.kind != "compact" or op.stage is not Stage.WRITING or op.horizon is None:
            return [DeleteCompactedLedger(e.ledger_id)]  # an orphan
        self.op = replace(op, stage=Stage.SWAPPING, ledger_id=e.ledger_id)
        return [WriteCompactionCursor(op.horizon, e.ledger_id, self.compaction.version)]

    # ---- write answers -------------------------------------------------------------------------

    def _list_written(self, e: ListWritten) -> list[Output]:
        op = self.op
        if op is None or op.stage not in (Stage.TRIMMING, Stage.RECORDING):
            return []
        self.version = e.version
        if op.stage is Stage.TRIMMING:
            gone = {x.ledger_id for x in op.trimmed}
            self.ledgers = tuple(x for x in self.ledgers if x.ledger_id not in gone)
            self.op = None
            # Off the list first, then deleted: nothing on the list is ever missing.
            out: list[Output] = [DeleteBookieLedgers(tuple(sorted(gone)))]
            out += [DeleteObject(x.ledger_id, x.offload_uid) for x in op.trimmed if x.offload_uid is not None]
            return out
        assert op.ledger_id is not None
        self.ledgers = tuple(replace(x, offload_uid=op.uid) if x.ledger_id == op.ledger_id else x for x in self.ledgers)
        self.op = replace(op, stage=Stage.RECORDED)
        # Recorded: readers now read the object; the bookie copy goes after the lag (readers that
        # opened it from an older list finish first).
        return [ScheduleBookieDeletion(op.ledger_id, self.config.deletion_lag_s)]

    def _cursor_written(self, e: CursorWritten) -> list[Output]:
        op = self.op
        if op is None or op.stage is not Stage.SWAPPING or op.ledger_id is None or op.horizon is None:
            return []
        self.compaction = CompactionCursor(e.version, op.horizon, op.ledger_id)
        self.op = None
        return [DeleteCompactedLedger(op.previous)] if op.previous is not None else []

    def _failed(self, e: BadVersion | WriteUnknown) -> list[Output]:
        op = self.op
        if op is None or op.stage not in (Stage.TRIMMING, Stage.RECORDING, Stage.SWAPPING):
            return []
        known_not_applied = isinstance(e, BadVersion)
        node = "compaction cursor" if op.stage is Stage.SWAPPING else "ledger list"
        why = "another broker wrote it" if known_not_applied else f"the answer was lost ({e.reason})"  # type: ignore[union-attr]
        self.state, self.op = LifecycleState.FENCED, None
        self.fence_reason = f"the {op.kind}'s conditional write of the {node} failed: {why}"
        out: list[Output] = [Fenced(self.fence_reason)]
        # Delete what was written only when the write surely did not apply (else it may be referenced).
        if known_not_applied and op.stage is Stage.RECORDING and op.ledger_id is not None:
            out.append(DeleteObject(op.ledger_id, op.uid))
        if known_not_applied and op.stage is Stage.SWAPPING and op.ledger_id is not None:
            out.append(DeleteCompactedLedger(op.ledger_id))
        return out


_HANDLERS: dict[type, str] = {
    Load: "_load",
    TrimRequested: "_trim",
    OffloadRequested: "_offload",
    Uploaded: "_uploaded",
    UploadFailed: "_upload_failed",
    DeletionLagPassed: "_lag_passed",
    CompactRequested: "_compact",
    CompactionRead: "_compaction_read",
    CompactionReadFailed: "_compaction_read_failed",
    CompactedLedgerWritten: "_compacted_written",
    CompactedLedgerWriteFailed: "_compacted_write_failed",
    ListWritten: "_list_written",
    CursorWritten: "_cursor_written",
    BadVersion: "_failed",
    WriteUnknown: "_failed",
}


def run(core: StorageLifecycle, event: Event, perform: Callable[[Output], Event | None]) -> None:
    """The shells' loop (compaction, offload): step the core with `event`, perform each output in order
    and step the core with its answer, until nothing is left to do."""
    work = deque(core.step(event))
    while work:
        answer = perform(work.popleft())
        if answer is not None:
            work.extend(core.step(answer))
