"""The pure bookie core: typed inputs in, outputs to perform out, through one `step(event)`.

No I/O. The shells (the bookie server with its port, journal and ledger storage,
impl/bookie/server.py; conformance/sim_bookie.py's simulated bookie) drive it with one function,
`step(event) -> list[Output]`, as etcd's raft `Step` and h11's events have it:

  RequestReceived(request, request_id)  an add, read, read-LAC or write-LAC: the journal records to
                        append (AppendJournal), the entries to put into ledger storage (StoreEntry)
                        and the replies (Reply; ReadEntry for a stored entry, which the shell answers
                        from storage with `ReadEntry.reply(body)`). Replies that depend on durability
                        are held until JournalDurable(token) reports that the journal flushed the
                        records of that token.
  JournalDurable(token) the held replies of that append, to send
  EntryNotStored(token) ledger storage could not store the entry whose append is `token` (before
                        the append): the add fails with EIO and the bookie turns read-only
  SetReadOnly(readonly) the shell's disk check: a read-only bookie refuses adds and LAC writes
  RestoreLedger(ledger_id, state), RestoreDeleted(ledger_ids)
                        at a restart, a ledger's metadata and the garbage-collected ledgers as ledger
                        storage checkpointed them (before the journal tail)
  Replay(record)        one durable journal record after the checkpoint (restart); idempotent; an
                        entry goes back to storage (StoreEntry)
  ForgetLedger(ledger_id)  garbage collection: drop a ledger whose metadata is gone; its adds are
                        refused as fenced from then on (`deleted`)

The core keeps each ledger's metadata (master key, fenced, LACs, which entry ids it stores) and
decides every reply; entry *bodies* live in ledger storage. State is plain dataclasses, open for
inspection (`ledgers`, `readonly`, `deleted`: read-only queries). A core given a tracer
(impl/trace.py) reports ledger.tla's `BookieHandles` for every add and read it handles and
`BookieReplays` for every journal record it replays; one given none traces nothing. An event of
another type raises TypeError.

Check order follows BookKeeper: well-formedness (EBADREQ), read-only (EREADONLY, adds only),
master key (EUA), then fenced (EFENCED, plain adds only; recovery adds skip it). An add to a
garbage-collected ledger is EFENCED before any other check of the ledger, recovery adds included.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from impl.bookie.entry_format import BadEntry, read_header
from impl.bookie.protocol import (
    LAST_ENTRY,
    AddRequest,
    AddResponse,
    ErrorCode,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    WriteLacRequest,
    WriteLacResponse,
)
from impl.values import value_type

if TYPE_CHECKING:
    from impl.trace import Tracer

# The default of the largest entry body (header, digest and data) a bookie stores: the
# nettyMaxFrameSizeBytes Pulsar's bookkeeper.conf ships (5 MiB + 10 KiB), so that the entry of Pulsar's
# largest default message (a 5 MiB payload plus its metadata, which the broker bounds:
# impl/broker/service.py MAX_METADATA_SIZE) always fits. A setting: BookieCore.max_entry_size.
DEFAULT_MAX_ENTRY_SIZE = 5 * 1024 * 1024 + 10 * 1024
MAX_ID = 2**63 - 1


class RecordKind(enum.Enum):
    ENTRY = 1
    MASTER_KEY = 2
    FENCE = 3
    EXPLICIT_LAC = 4


class JournalRecord(NamedTuple):
    """One journal record. ENTRY carries the encoded entry in `body`; EXPLICIT_LAC its LAC in `lac`.

    A named tuple, not a frozen dataclass: the bookie builds one per add, and a frozen dataclass
    costs ~0.85 us to construct against ~0.3 us for a tuple (issue 4's journal benchmark)."""

    kind: RecordKind
    ledger_id: int
    entry_id: int = -1
    master_key: bytes = b""
    body: bytes = b""
    lac: int = -1


# ---- inputs -------------------------------------------------------------------------------------


@value_type  # built for every message: impl/values.py
class RequestReceived:
    """A request to answer; `request_id` names its requester in the replies (`Reply.request_id`)."""

    request: Request
    request_id: int


@value_type  # built for every message: impl/values.py
class JournalDurable:
    """The journal fdatasync'ed the records of AppendJournal `token`: release the replies held for them."""

    token: int


@dataclass(frozen=True)
class EntryNotStored:
    """Ledger storage failed to store the entry of the add whose AppendJournal is `token` (not appended):
    the add fails with EIO and the bookie takes no more adds (read-only). Replay at restart puts back
    what was journalled before."""

    token: int


@dataclass(frozen=True)
class SetReadOnly:
    """The shell's disk check: read-only (too little free space) or writable again."""

    readonly: bool


@dataclass(frozen=True)
class RestoreLedger:
    """Restart: a ledger's metadata as ledger storage checkpointed it (before the journal tail)."""

    ledger_id: int
    state: LedgerState


@dataclass(frozen=True)
class RestoreDeleted:
    """Restart: the ledgers garbage-collected here (ledger storage keeps their ids); adds to them are refused."""

    ledger_ids: frozenset[int]


@dataclass(frozen=True)
class Replay:
    """Restart: one durable journal record after the checkpoint (ledger.tla's BookieReplays)."""

    record: JournalRecord


@dataclass(frozen=True)
class ForgetLedger:
    """Garbage collection: the ledger's metadata is gone; drop it and refuse its adds from now on."""

    ledger_id: int


Event = (
    RequestReceived
    | JournalDurable
    | EntryNotStored
    | SetReadOnly
    | RestoreLedger
    | RestoreDeleted
    | Replay
    | ForgetLedger
)


# ---- outputs ------------------------------------------------------------------------------------


@value_type  # built for every message: impl/values.py
class AppendJournal:
    """Append these records; report `JournalDurable(token)` once they are fdatasync'ed."""

    token: int
    records: tuple[JournalRecord, ...]


@value_type  # built for every message: impl/values.py
class Reply:
    """Send `response` to the requester identified by `request_id`."""

    request_id: int
    response: Response


@value_type  # built for every message: impl/values.py
class StoreEntry:
    """Put this entry into ledger storage. Output before the entry's journal append, so reads
    see it at once (as BookKeeper writes ledger storage before the journal)."""

    ledger_id: int
    entry_id: int
    body: bytes


@dataclass(frozen=True)
class ReadEntry:
    """Read this entry, which the core knows is stored, from ledger storage; send `reply(body)`."""

    request_id: int
    ledger_id: int
    entry_id: int

    def reply(self, body: bytes | None) -> Reply:
        """The reply once storage answered; None: storage lost or could not read it (EIO)."""
        if body is None:
            return Reply(self.request_id, ReadResponse(self.ledger_id, self.entry_id, ErrorCode.EIO))
        return Reply(self.request_id, ReadResponse(self.ledger_id, self.entry_id, ErrorCode.EOK, body))


Output = AppendJournal | Reply | StoreEntry | ReadEntry


@dataclass
class LedgerState:
    master_key: bytes
    fenced: bool = False
    entries: set[int] = field(default_factory=set)  # ids stored; bodies are in ledger storage
    piggybacked_lac: int = -1
    explicit_lac: int = -1

    @property
    def lac(self) -> int:
        return max(self.piggybacked_lac, self.explicit_lac)


@dataclass
class BookieCore:
    """One bookie's protocol (pure core); see the module docstring."""

    ledgers: dict[int, LedgerState] = field(default_factory=dict)
    readonly: bool = False
    next_token: int = 0
    waiting: dict[int, list[Output]] = field(default_factory=dict)  # token -> replies held until durable
    tracer: Tracer | None = field(default=None, repr=False, compare=False)  # this core's recorder, if traced
    # Garbage-collected ledgers. An add to one is refused as fenced: forgetting a ledger also forgets its
    # fence, and a writer that still holds it (a broker whose session expired unnoticed) would otherwise
    # re-create it here and have its add acknowledged on a ledger nobody will read (BookKeeper issue 4462).
    # Ledger ids are never reused (a sequential metadata node allocates them).
    deleted: set[int] = field(default_factory=set)
    # The largest entry body taken (nettyMaxFrameSizeBytes): a bigger add is refused with EBADREQ.
    max_entry_size: int = DEFAULT_MAX_ENTRY_SIZE

    # --- the one entry point ------------------------------------------------------------------
    def step(self, event: Event) -> list[Output]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a bookie event: {event!r}")
        return handler(self, event)

    # --- requests ---------------------------------------------------------------------------
    def _received(self, e: RequestReceived) -> list[Output]:
        request = e.request
        outputs = self._handle(request, e.request_id)
        if self.tracer is not None and isinstance(request, AddRequest | ReadRequest):
            # What the bookie holds of the ledger after the request (ledger.tla's entries, fenced).
            ledger = self.ledgers.get(request.ledger_id)
            self.tracer(
                "BookieHandles",
                {
                    "ledger": request.ledger_id,
                    "entry": request.entry_id,
                    "kind": _kind(request),
                    "fence": isinstance(request, ReadRequest) and request.fence,  # unfenced reads are no spec step
                    "entries": sorted(ledger.entries) if ledger is not None else [],
                    "fenced": ledger is not None and ledger.fenced,
                },
            )
        return outputs

    def _handle(self, request: Request, request_id: int) -> list[Output]:
        if isinstance(request, AddRequest):
            return self._add(request, request_id)
        if isinstance(request, ReadRequest):
            return self._read(request, request_id)
        if isinstance(request, ReadLacRequest):
            return [Reply(request_id, self._read_lac(request))]
        if isinstance(request, WriteLacRequest):
            return self._write_lac(request, request_id)
        raise TypeError(f"not a bookie request: {type(request).__name__}")

    def _durable(self, e: JournalDurable) -> list[Output]:
        return self.waiting.pop(e.token, [])

    def _not_stored(self, e: EntryNotStored) -> list[Output]:
        # Stop taking adds: an acknowledged entry that storage never got would be lost at the next checkpoint.
        self.readonly = True
        failed: list[Output] = []
        for held in self.waiting.pop(e.token, []):
            assert isinstance(held, Reply) and isinstance(held.response, AddResponse)
            response = held.response
            failed.append(Reply(held.request_id, AddResponse(response.ledger_id, response.entry_id, ErrorCode.EIO)))
        return failed

    def _set_readonly(self, e: SetReadOnly) -> list[Output]:
        self.readonly = e.readonly
        return []

    def _journal(self, records: list[JournalRecord], reply: Reply | ReadEntry) -> list[Output]:
        token = self.next_token
        self.next_token += 1
        self.waiting[token] = [reply]
        return [AppendJournal(token, tuple(records))]

    def _add(self, req: AddRequest, request_id: int) -> list[Output]:
        def reply(code: ErrorCode) -> Reply:
            return Reply(request_id, AddResponse(req.ledger_id, req.entry_id, code))

        if not _valid_id(req.ledger_id) or not _valid_id(req.entry_id) or len(req.body) > self.max_entry_size:
            return [reply(ErrorCode.EBADREQ)]
        try:
            ledger_id, entry_id, lac, _length = read_header(req.body)
        except BadEntry:
            return [reply(ErrorCode.EBADREQ)]
        if (ledger_id, entry_id) != (req.ledger_id, req.entry_id):
            return [reply(ErrorCode.EBADREQ)]
        if self.readonly:
            return [reply(ErrorCode.EREADONLY)]
        if req.ledger_id in self.deleted:
            return [reply(ErrorCode.EFENCED)]
        ledger = self.ledgers.get(req.ledger_id)
        records: list[JournalRecord] = []
        if ledger is None:
            ledger = self.ledgers[req.ledger_id] = LedgerState(master_key=req.master_key)
            records.append(JournalRecord(RecordKind.MASTER_KEY, req.ledger_id, master_key=req.master_key))
        elif ledger.master_key != req.master_key:
            return [reply(ErrorCode.EUA)]
        if ledger.fenced and not req.recovery:
            return [reply(ErrorCode.EFENCED)]
        # Visible to reads at once (BookKeeper writes ledger storage before the journal);
        # the add is acknowledged only once durable.
        ledger.entries.add(req.entry_id)
        ledger.piggybacked_lac = max(ledger.piggybacked_lac, lac)
        records.append(
            JournalRecord(RecordKind.ENTRY, req.ledger_id, req.entry_id, master_key=req.master_key, body=req.body)
        )
        store = StoreEntry(req.ledger_id, req.entry_id, req.body)
        return [store, *self._journal(records, reply(ErrorCode.EOK))]

    def _read(self, req: ReadRequest, request_id: int) -> list[Output]:
        def reply(code: ErrorCode, entry_id: int = req.entry_id, body: bytes = b"") -> Reply:
            return Reply(request_id, ReadResponse(req.ledger_id, entry_id, code, body))

        if not _valid_id(req.ledger_id) or not (req.entry_id == LAST_ENTRY or _valid_id(req.entry_id)):
            return [reply(ErrorCode.EBADREQ)]
        if req.fence and req.master_key is None:
            return [reply(ErrorCode.EBADREQ)]
        ledger = self.ledgers.get(req.ledger_id)
        records: list[JournalRecord] = []
        if req.fence:
            assert req.master_key is not None
            if ledger is not None and ledger.master_key != req.master_key:
                return [reply(ErrorCode.EUA)]
            if ledger is None:
                # Fencing an unseen ledger creates it fenced: a late add must not slip in.
                ledger = self.ledgers[req.ledger_id] = LedgerState(master_key=req.master_key)
                records.append(JournalRecord(RecordKind.MASTER_KEY, req.ledger_id, master_key=req.master_key))
            if not ledger.fenced:
                ledger.fenced = True
                records.append(JournalRecord(RecordKind.FENCE, req.ledger_id, master_key=req.master_key))
        if ledger is None:
            return [reply(ErrorCode.ENOLEDGER)]
        entry_id = req.entry_id
        if entry_id == LAST_ENTRY:
            entry_id = max(ledger.entries, default=LAST_ENTRY)
        result: Reply | ReadEntry
        if entry_id in ledger.entries:
            result = ReadEntry(request_id, req.ledger_id, entry_id)
        else:
            result = reply(ErrorCode.ENOENTRY)
        if req.fence:
            # The fence reply waits for the fence record to be durable (even if already fenced,
            # an earlier fence record may still be in flight: journal an idempotent one).
            if not records:
                records.append(JournalRecord(RecordKind.FENCE, req.ledger_id, master_key=req.master_key or b""))
            return self._journal(records, result)
        return [result]

    def _read_lac(self, req: ReadLacRequest) -> ReadLacResponse:
        if not _valid_id(req.ledger_id):
            return ReadLacResponse(req.ledger_id, ErrorCode.EBADREQ)
        ledger = self.ledgers.get(req.ledger_id)
        if ledger is None:
            return ReadLacResponse(req.ledger_id, ErrorCode.ENOLEDGER)
        return ReadLacResponse(req.ledger_id, ErrorCode.EOK, ledger.lac)

    def _write_lac(self, req: WriteLacRequest, request_id: int) -> list[Output]:
        def reply(code: ErrorCode) -> Reply:
            return Reply(request_id, WriteLacResponse(req.ledger_id, code))

        if not _valid_id(req.ledger_id) or req.lac < -1 or req.lac > MAX_ID:
            return [reply(ErrorCode.EBADREQ)]
        if self.readonly:
            return [reply(ErrorCode.EREADONLY)]
        ledger = self.ledgers.get(req.ledger_id)
        records: list[JournalRecord] = []
        if ledger is None:
            ledger = self.ledgers[req.ledger_id] = LedgerState(master_key=req.master_key)
            records.append(JournalRecord(RecordKind.MASTER_KEY, req.ledger_id, master_key=req.master_key))
        elif ledger.master_key != req.master_key:
            return [reply(ErrorCode.EUA)]
        ledger.explicit_lac = max(ledger.explicit_lac, req.lac)
        records.append(JournalRecord(RecordKind.EXPLICIT_LAC, req.ledger_id, master_key=req.master_key, lac=req.lac))
        return self._journal(records, reply(ErrorCode.EOK))

    # --- restart and garbage collection ------------------------------------------------------
    def _restore_ledger(self, e: RestoreLedger) -> list[Output]:
        self.ledgers[e.ledger_id] = e.state
        return []

    def _restore_deleted(self, e: RestoreDeleted) -> list[Output]:
        self.deleted |= e.ledger_ids
        return []

    def _replay(self, e: Replay) -> list[Output]:
        """Apply one durable journal record; idempotent. An entry goes back to storage."""
        record = e.record
        if self.tracer is not None:
            self.tracer(
                "BookieReplays", {"ledger": record.ledger_id, "kind": record.kind.name, "entry": record.entry_id}
            )
        ledger = self.ledgers.get(record.ledger_id)
        if ledger is None:
            ledger = self.ledgers[record.ledger_id] = LedgerState(master_key=record.master_key)
        if record.kind is RecordKind.FENCE:
            ledger.fenced = True
        elif record.kind is RecordKind.EXPLICIT_LAC:
            ledger.explicit_lac = max(ledger.explicit_lac, record.lac)
        elif record.kind is RecordKind.ENTRY:
            ledger.entries.add(record.entry_id)
            with contextlib.suppress(BadEntry):
                ledger.piggybacked_lac = max(ledger.piggybacked_lac, read_header(record.body)[2])
            return [StoreEntry(record.ledger_id, record.entry_id, record.body)]
        return []

    def _forget_ledger(self, e: ForgetLedger) -> list[Output]:
        """Drop a ledger whose metadata is gone (unknown here or not), and refuse its adds from now on."""
        self.deleted.add(e.ledger_id)
        self.ledgers.pop(e.ledger_id, None)
        return []


# Event type -> handler. A mutant (conformance/mutants.py) replaces an entry of this table to break one handler.
_HANDLERS: dict[type, Callable[[BookieCore, Any], list[Output]]] = {
    RequestReceived: BookieCore._received,
    JournalDurable: BookieCore._durable,
    EntryNotStored: BookieCore._not_stored,
    SetReadOnly: BookieCore._set_readonly,
    RestoreLedger: BookieCore._restore_ledger,
    RestoreDeleted: BookieCore._restore_deleted,
    Replay: BookieCore._replay,
    ForgetLedger: BookieCore._forget_ledger,
}


def _kind(request: AddRequest | ReadRequest) -> str:
    """ledger.tla's name for the request (`msgs` kinds): add, recoveryAdd, readLac (entry -1), read."""
    if isinstance(request, AddRequest):
        return "recoveryAdd" if request.recovery else "add"
    return "readLac" if request.entry_id == LAST_ENTRY else "read"


def _valid_id(value: int) -> bool:
    return isinstance(value, int) and 0 <= value <= MAX_ID


__all__ = [
    "AppendJournal",
    "BookieCore",
    "EntryNotStored",
    "Event",
    "ForgetLedger",
    "JournalDurable",
    "JournalRecord",
    "LedgerState",
    "Output",
    "ReadEntry",
    "RecordKind",
    "Replay",
    "Reply",
    "RequestReceived",
    "RestoreDeleted",
    "RestoreLedger",
    "SetReadOnly",
    "StoreEntry",
]
