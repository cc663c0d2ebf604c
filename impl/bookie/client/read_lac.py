"""The read-LAC op (docs/protocol-rules.md, "Recovery" step 3).

Read entry -1 ("the last entry you store") from every bookie of the last fragment;
in the recovery variant with the fence flag, so that each answering bookie refuses the
old writer from then on. Each answer is the bookie's last (highest) entry; its header
carries the LAC piggybacked on it and the ledger length up to it. As BookKeeper's
ReadLastConfirmedOp, the result is the header of the answer with the largest LAC (the first
one seen; `(-1, 0)` when no answer carries a LAC above -1). Done by the per-write-set
coverage rule: once every write set has fewer than Qa bookies still unknown, the old writer
can reach Qa on no write set.

Pure, and driven one way (docs/architecture.md, "One way to drive a core"): `step(event)` takes
`Start()` (-> a Send to every bookie of the last fragment) and `BookieAnswered(bookie, request,
response)` (None: no answer in time; -> ReadLacDone or ReadLacFailed once decided), and raises
TypeError for an event of another type. The recovery op feeds its own events on to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from impl.bookie.client.distribution import Answer, lac_coverage_reached
from impl.bookie.client.errors import LedgerClientError, NotEnoughBookiesError
from impl.bookie.client.writer import BookieAnswered, Send, Start
from impl.bookie.entry_format import BadEntry, decode_entry, master_key
from impl.bookie.protocol import LAST_ENTRY, ErrorCode, ReadRequest, ReadResponse, Response
from impl.metadata.ledger import NO_ENTRY, LedgerMetadata


@dataclass(frozen=True)
class ReadLacDone:
    lac: int
    length: int = 0  # the ledger length in the same header (BookKeeper's RecoveryData): recovery's start length


@dataclass(frozen=True)
class ReadLacFailed:
    error: LedgerClientError


ReadLacOutput = Send | ReadLacDone | ReadLacFailed
ReadLacEvent = Start | BookieAnswered


class ReadLacOp:
    def __init__(self, ledger_id: int, metadata: LedgerMetadata, *, fence: bool = True) -> None:
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.fence = fence
        self.ensemble = metadata.last_ensemble
        self.answers: dict[int, Answer] = {}
        self.lac = NO_ENTRY
        self.length = 0  # the length in the header that carried `lac`
        self.finished = False

    def step(self, event: ReadLacEvent) -> list[ReadLacOutput]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a read-LAC event: {event!r}")
        return handler(self, event)

    def _begin(self, _: Start) -> list[ReadLacOutput]:
        key = master_key(self.metadata.password) if self.fence else None
        request = ReadRequest(self.ledger_id, LAST_ENTRY, fence=self.fence, master_key=key)
        return [Send(bookie, request) for bookie in self.ensemble]

    def _answered(self, e: BookieAnswered) -> list[ReadLacOutput]:
        bookie, request, response = e.bookie, e.request, e.response
        if self.finished or not isinstance(request, ReadRequest) or request.entry_id != LAST_ENTRY:
            return []
        if bookie not in self.ensemble:
            return []
        index = self.ensemble.index(bookie)
        if index in self.answers:
            return []
        self.answers[index] = self._classify(response)
        m = self.metadata
        if lac_coverage_reached(self.answers, m.ensemble_size, m.write_quorum, m.ack_quorum):
            self.finished = True
            return [ReadLacDone(self.lac, self.length)]
        if len(self.answers) == len(self.ensemble):
            self.finished = True
            unknown = sorted(self.ensemble[i] for i, a in self.answers.items() if not a.is_known)
            return [
                ReadLacFailed(
                    NotEnoughBookiesError(
                        self.ledger_id,
                        f"read-LAC could not cover every write set: no usable answer from {unknown}; "
                        "retry when they are back",
                    )
                )
            ]
        return []

    def _classify(self, response: Response | None) -> Answer:
        if not isinstance(response, ReadResponse):
            return Answer.NONE if response is None else Answer.ERROR
        answer = Answer.from_code(response.code)
        if response.code is not ErrorCode.EOK:
            return answer
        try:
            entry = decode_entry(
                response.body, self.metadata.digest_type, self.metadata.password, self.ledger_id, response.entry_id
            )
        except BadEntry:
            return Answer.ERROR
        if entry.lac > self.lac:  # strictly larger: the first answer with the largest LAC is kept
            self.lac, self.length = entry.lac, entry.length
        return Answer.OK


# Event type -> handler. Mutants (conformance/mutants.py) patch the functions this module calls
# (`lac_coverage_reached`).
_HANDLERS: dict[type, Callable[[ReadLacOp, Any], list[ReadLacOutput]]] = {
    Start: ReadLacOp._begin,
    BookieAnswered: ReadLacOp._answered,
}
