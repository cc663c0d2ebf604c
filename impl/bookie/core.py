"""The pure bookie core: requests and journal results in, outputs to perform out.

No I/O. The shells (journal, ledger storage, gRPC server) and the conformance harness
drive it: `handle()` takes one request and returns the journal records to append and the
replies to send; replies that depend on durability are held until `on_durable(token)`
reports that the journal flushed the records of that token. `replay()` rebuilds the state
from journal records after a restart. State is plain dataclasses, open for inspection.

Check order follows BookKeeper: well-formedness (EBADREQ), read-only (EREADONLY, adds only),
master key (EUA), then fenced (EFENCED, plain adds only; recovery adds skip it).
"""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass, field

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

MAX_ENTRY_SIZE = 5 * 1024 * 1024  # BookKeeper's default nettyMaxFrameSizeBytes
MAX_ID = 2**63 - 1


class RecordKind(enum.Enum):
    ENTRY = 1
    MASTER_KEY = 2
    FENCE = 3
    EXPLICIT_LAC = 4


@dataclass(frozen=True)
class JournalRecord:
    """One journal record. ENTRY carries the encoded entry in `body`; EXPLICIT_LAC its LAC in `lac`."""

    kind: RecordKind
    ledger_id: int
    entry_id: int = -1
    master_key: bytes = b""
    body: bytes = b""
    lac: int = -1


@dataclass(frozen=True)
class AppendJournal:
    """Append these records; report `on_durable(token)` once they are fdatasync'ed."""

    token: int
    records: tuple[JournalRecord, ...]


@dataclass(frozen=True)
class Reply:
    """Send `response` to the requester identified by `request_id`."""

    request_id: int
    response: Response


Output = AppendJournal | Reply


@dataclass
class LedgerState:
    master_key: bytes
    fenced: bool = False
    entries: dict[int, bytes] = field(default_factory=dict)
    piggybacked_lac: int = -1
    explicit_lac: int = -1

    @property
    def lac(self) -> int:
        return max(self.piggybacked_lac, self.explicit_lac)


@dataclass
class BookieCore:
    ledgers: dict[int, LedgerState] = field(default_factory=dict)
    readonly: bool = False
    next_token: int = 0
    waiting: dict[int, list[Reply]] = field(default_factory=dict)  # token -> replies held until durable

    # --- requests ---------------------------------------------------------------------------
    def handle(self, request: Request, request_id: int) -> list[Output]:
        if isinstance(request, AddRequest):
            return self._add(request, request_id)
        if isinstance(request, ReadRequest):
            return self._read(request, request_id)
        if isinstance(request, ReadLacRequest):
            return [Reply(request_id, self._read_lac(request))]
        if isinstance(request, WriteLacRequest):
            return self._write_lac(request, request_id)
        raise TypeError(f"not a bookie request: {type(request).__name__}")

    def on_durable(self, token: int) -> list[Output]:
        return list(self.waiting.pop(token, []))

    def _journal(self, records: list[JournalRecord], reply: Reply) -> list[Output]:
        token = self.next_token
        self.next_token += 1
        self.waiting[token] = [reply]
        return [AppendJournal(token, tuple(records))]

    def _add(self, req: AddRequest, request_id: int) -> list[Output]:
        def reply(code: ErrorCode) -> Reply:
            return Reply(request_id, AddResponse(req.ledger_id, req.entry_id, code))

        if not _valid_id(req.ledger_id) or not _valid_id(req.entry_id) or len(req.body) > MAX_ENTRY_SIZE:
            return [reply(ErrorCode.EBADREQ)]
        try:
            ledger_id, entry_id, lac, _length = read_header(req.body)
        except BadEntry:
            return [reply(ErrorCode.EBADREQ)]
        if (ledger_id, entry_id) != (req.ledger_id, req.entry_id):
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
        if ledger.fenced and not req.recovery:
            return [reply(ErrorCode.EFENCED)]
        # Visible to reads at once (BookKeeper writes ledger storage before the journal);
        # the add is acknowledged only once durable.
        ledger.entries[req.entry_id] = req.body
        ledger.piggybacked_lac = max(ledger.piggybacked_lac, lac)
        records.append(
            JournalRecord(RecordKind.ENTRY, req.ledger_id, req.entry_id, master_key=req.master_key, body=req.body)
        )
        return self._journal(records, reply(ErrorCode.EOK))

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
        body = ledger.entries.get(entry_id)
        result = reply(ErrorCode.ENOENTRY) if body is None else reply(ErrorCode.EOK, entry_id, body)
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

    # --- restart ----------------------------------------------------------------------------
    def replay(self, record: JournalRecord) -> None:
        """Apply one durable journal record (restart); idempotent."""
        ledger = self.ledgers.get(record.ledger_id)
        if ledger is None:
            ledger = self.ledgers[record.ledger_id] = LedgerState(master_key=record.master_key)
        if record.kind is RecordKind.FENCE:
            ledger.fenced = True
        elif record.kind is RecordKind.EXPLICIT_LAC:
            ledger.explicit_lac = max(ledger.explicit_lac, record.lac)
        elif record.kind is RecordKind.ENTRY:
            ledger.entries[record.entry_id] = record.body
            with contextlib.suppress(BadEntry):
                ledger.piggybacked_lac = max(ledger.piggybacked_lac, read_header(record.body)[2])


def _valid_id(value: int) -> bool:
    return isinstance(value, int) and 0 <= value <= MAX_ID


__all__ = [
    "AppendJournal",
    "BookieCore",
    "JournalRecord",
    "LedgerState",
    "Output",
    "RecordKind",
    "Reply",
]
