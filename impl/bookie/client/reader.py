"""The read-range core: read entries first..last, each from one bookie of its write set.

For each entry, ask the first bookie of its write set; on an error, no answer, a
negative answer or an entry that fails verification (digest, ledger id, entry id, via
entry_format.decode_entry), fall back to the next bookie of the write set. Entries are
delivered together, in order, once all are read.

Pure, and driven one way (docs/architecture.md, "One way to drive a core"): `step(event)` takes
`Start()` (-> a Send for each entry) and `BookieAnswered(bookie, request, response)` (None: no answer
in time; -> the next Send, ReadCompleted or ReadFailed), and raises TypeError for an event of another
type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from impl.bookie.client.distribution import all_write_sets
from impl.bookie.client.errors import BadEntryError, LedgerClientError, NoSuchEntryError, NotEnoughBookiesError
from impl.bookie.client.writer import BookieAnswered, Send, Start
from impl.bookie.entry_format import BadEntry, decode_entry
from impl.bookie.protocol import ErrorCode, ReadRequest, ReadResponse
from impl.metadata.ledger import BookieId, LedgerMetadata


@dataclass(frozen=True)
class LedgerEntry:
    ledger_id: int
    entry_id: int
    payload: bytes


@dataclass(frozen=True)
class ReadCompleted:
    entries: tuple[LedgerEntry, ...]


@dataclass(frozen=True)
class ReadFailed:
    error: LedgerClientError


ReadOutput = Send | ReadCompleted | ReadFailed
ReadEvent = Start | BookieAnswered


@dataclass
class _EntryRead:
    candidates: tuple[BookieId, ...]  # the write set, in schedule order
    attempt: int = 0
    negatives: int = 0
    corrupt: int = 0
    entry: LedgerEntry | None = None


class ReadOp:
    def __init__(self, ledger_id: int, metadata: LedgerMetadata, first_entry_id: int, last_entry_id: int) -> None:
        if not 0 <= first_entry_id <= last_entry_id:
            raise ValueError(f"bad range {first_entry_id}..{last_entry_id}: need 0 <= first <= last")
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.first_entry_id = first_entry_id
        self.last_entry_id = last_entry_id
        self._reads: dict[int, _EntryRead] = {}
        self.finished = False
        m = metadata
        # A dispatcher reads 100 entries at a time: the E write sets of the round-robin schedule, per
        # ensemble, are worked out once, not once per entry.
        schedule = all_write_sets(m.ensemble_size, m.write_quorum)
        candidates: dict[tuple[tuple[BookieId, ...], int], tuple[BookieId, ...]] = {}
        for entry_id in range(first_entry_id, last_entry_id + 1):
            ensemble = m.ensemble_for(entry_id)
            key = (ensemble, entry_id % m.ensemble_size)
            chosen = candidates.get(key)
            if chosen is None:
                chosen = candidates[key] = tuple(ensemble[i] for i in schedule[key[1]])
            self._reads[entry_id] = _EntryRead(chosen)
        self._unread = len(self._reads)  # entries not read yet: the read completes at 0

    def step(self, event: ReadEvent) -> list[ReadOutput]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a read event: {event!r}")
        return handler(self, event)

    def _begin(self, _: Start) -> list[ReadOutput]:
        return [self._ask(entry_id) for entry_id in self._reads]

    def _answered(self, e: BookieAnswered) -> list[ReadOutput]:
        bookie, request, response = e.bookie, e.request, e.response
        if self.finished or not isinstance(request, ReadRequest):
            return []
        read = self._reads.get(request.entry_id)
        if read is None or read.entry is not None or read.candidates[read.attempt] != bookie:
            return []  # not ours, already read, or a late answer from a bookie we gave up on
        if isinstance(response, ReadResponse) and response.code is ErrorCode.EOK:
            try:
                decoded = decode_entry(
                    response.body, self.metadata.digest_type, self.metadata.password, self.ledger_id, request.entry_id
                )
            except BadEntry:
                read.corrupt += 1
            else:
                read.entry = LedgerEntry(self.ledger_id, decoded.entry_id, decoded.payload)
                self._unread -= 1
                if not self._unread:
                    self.finished = True
                    return [ReadCompleted(tuple(r.entry for r in self._reads.values() if r.entry is not None))]
                return []
        elif isinstance(response, ReadResponse) and response.code in (ErrorCode.ENOENTRY, ErrorCode.ENOLEDGER):
            read.negatives += 1
        read.attempt += 1
        if read.attempt < len(read.candidates):
            return [self._ask(request.entry_id)]
        self.finished = True
        return [ReadFailed(self._why(request.entry_id, read))]

    def _ask(self, entry_id: int) -> Send:
        read = self._reads[entry_id]
        return Send(read.candidates[read.attempt], ReadRequest(self.ledger_id, entry_id))

    def _why(self, entry_id: int, read: _EntryRead) -> LedgerClientError:
        where = f"entry {entry_id} from {read.candidates}"
        if read.negatives == len(read.candidates):
            return NoSuchEntryError(self.ledger_id, f"no bookie has {where}; read only up to the last confirmed entry")
        if read.corrupt:
            return BadEntryError(
                self.ledger_id, f"{read.corrupt} bookie(s) returned a copy of {where} that failed verification"
            )
        return NotEnoughBookiesError(self.ledger_id, f"could not read {where}; retry when bookies are back")


# Event type -> handler.
_HANDLERS: dict[type, Callable[[ReadOp, Any], list[ReadOutput]]] = {
    Start: ReadOp._begin,
    BookieAnswered: ReadOp._answered,
}
