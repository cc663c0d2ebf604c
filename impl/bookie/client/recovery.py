"""The recovery op: opening a ledger for recovery (docs/protocol-rules.md, "Recovery", steps 1-6).

1. CLOSED: nothing to do.                2. StartRecovery: OPEN -> IN_RECOVERY.
3. Fencing read-LAC over the last fragment (coverage rule): the max LAC, and the ledger
   length in the same entry header (BookKeeper's RecoveryData).
4. From start = max(LAC, first entry of the last fragment - 1), fenced reads of
   start+1, start+2, ... (`read_ahead` entries in flight, decided strictly in order). Each
   entry is read sequentially, as BookKeeper does by default (enableParallelRecoveryRead =
   false): one bookie of its write set at a time, the next one after a negative answer, an
   error or a timeout. One OK = the entry exists, write it back to its whole write set as a
   recovery add; Qw-Qa+1 negatives = the end (stop once write-backs finish); all Qw asked
   with neither = fail (retryable).
   As in BookKeeper's LedgerRecoveryOp, entry `start` itself is not read: the length
   starts as the read-LAC's and each entry read brings its own (its header's).
5. Write-back runs through a recovery-mode LedgerWriter (its LAC starts at `start`): its
   ensemble changes stay local.
6. RecoveryClose IN_RECOVERY -> CLOSED with last entry, length and fragments; if someone
   else closed the ledger first, adopt their close.

Pure, and driven one way (docs/architecture.md, "One way to drive a core"): every input is a frozen
dataclass fed to `step(event) -> list[RecoveryOutput]`; an event of another type raises TypeError.

  Start()                 step 1 (RecoveryDone), 2 (UpdateMetadata(StartRecovery)) or, already
                          IN_RECOVERY, 3 (the fencing read-LAC's Sends)
  MetadataResult          the answer to UpdateMetadata: StartRecovery (-> step 3) or RecoveryClose
                          (-> RecoveryDone, or RecoveryFailed)
  BookieAnswered          the answer to a Send (None: no answer in time): a read-LAC answer goes to the
                          read-LAC op (impl/bookie/client/read_lac.py), a write-back's to the writer,
                          an entry read's decides entries (step 4)
  ReplacementChosen, NoReplacement   the answers to the write-back writer's ChooseReplacement

An op given a tracer (impl/trace.py) reports each ledger.tla step it takes (`RecoveryStarts`,
`RecoveryReceivesReadLacResponse`, `RecoveryReceivesReadResponse`, `RecoveryReadTimedOut`,
`RecoveryCloses`, `RecoveryAborts`) to it, and hands it to its write-back writer
(`RecoveryReceivesAddResponse`, `RecoveryChangesEnsemble`); one given none traces nothing and
computes nothing for it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from impl.bookie.client.distribution import Answer, entry_absent, write_set
from impl.bookie.client.errors import LedgerClientError, MetadataUpdateError, NotEnoughBookiesError
from impl.bookie.client.ledger_update import MetadataResult, RecoveryClose, StartRecovery, UpdateMetadata
from impl.bookie.client.read_lac import ReadLacDone, ReadLacFailed, ReadLacOp, ReadLacOutput
from impl.bookie.client.writer import (
    Add,
    AddFailed,
    BookieAnswered,
    ChooseReplacement,
    LedgerWriter,
    NoReplacement,
    ReplacementChosen,
    Send,
    Start,
    WriterOutput,
)
from impl.bookie.entry_format import BadEntry, DecodedEntry, decode_entry, master_key, read_header
from impl.bookie.protocol import LAST_ENTRY, AddRequest, ErrorCode, ReadRequest, ReadResponse, Response
from impl.metadata.ledger import NO_ENTRY, BookieId, LedgerMetadata, LedgerState

if TYPE_CHECKING:
    from impl.trace import Tracer


@dataclass(frozen=True)
class RecoveryDone:
    metadata: LedgerMetadata  # CLOSED
    adopted: bool  # True: another client closed it (or it was already closed)


@dataclass(frozen=True)
class RecoveryFailed:
    error: LedgerClientError  # retryable: open for recovery again


RecoveryOutput = Send | ChooseReplacement | UpdateMetadata | RecoveryDone | RecoveryFailed
RecoveryEvent = Start | MetadataResult | BookieAnswered | ReplacementChosen | NoReplacement


class RecoveryPhase(enum.Enum):
    STARTING = "starting"
    FENCING = "fencing"
    READING = "reading"
    CLOSING = "closing"
    DONE = "done"
    FAILED = "failed"


class RecoveryOp:
    def __init__(
        self, ledger_id: int, metadata: LedgerMetadata, *, read_ahead: int = 1, tracer: Tracer | None = None
    ) -> None:
        """`tracer`: this op's recorder (impl/trace.py), also its write-back writer's; None traces nothing."""
        if read_ahead < 1:
            raise ValueError(f"read_ahead must be at least 1, got {read_ahead}")
        self.read_ahead = read_ahead  # fenced reads in flight (BookKeeper's recoveryReadBatchSize, default 1)
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.tracer = tracer
        self.phase = RecoveryPhase.STARTING
        self.read_lac: ReadLacOp | None = None
        self.writer: LedgerWriter | None = None
        self._next = NO_ENTRY  # the next entry id to decide
        self._issued = NO_ENTRY  # the highest entry id read so far
        self._window: dict[int, dict[int, Answer]] = {}  # undecided entry id -> answers by ensemble index
        self._asked: dict[int, int] = {}  # undecided entry id -> write-set positions read so far
        self._found: dict[int, DecodedEntry] = {}  # undecided entries some bookie returned
        self._start = NO_ENTRY
        self._end_found = False
        self._key = master_key(metadata.password)

    # ---- the one entry point ---------------------------------------------------------------------

    def step(self, event: RecoveryEvent) -> list[RecoveryOutput]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a recovery event: {event!r}")
        return handler(self, event)

    # ---- Start ------------------------------------------------------------------------------------

    def _begin(self, _: Start) -> list[RecoveryOutput]:
        if self.metadata.state is LedgerState.CLOSED:
            outputs = self._done(self.metadata, adopted=True)
            self._trace("RecoveryStarts", outcome="CLOSED")
            return outputs
        if self.metadata.state is LedgerState.OPEN:
            return [UpdateMetadata(StartRecovery(self.ledger_id))]  # the step is the CW's result
        outputs = self._fence()  # already IN_RECOVERY (another recoverer, or a retry): go on
        self._trace("RecoveryStarts", outcome="IN_RECOVERY")
        return outputs

    # ---- MetadataResult ---------------------------------------------------------------------------

    def _metadata_result(self, result: MetadataResult) -> list[RecoveryOutput]:
        current = result.metadata
        if isinstance(result.change, StartRecovery) and self.phase is RecoveryPhase.STARTING:
            if current is None:
                return self._fail(MetadataUpdateError(self.ledger_id, f"could not start recovery: {result.error}"))
            self.metadata = current
            outcome = "OPEN" if result.applied else current.state.value  # the state the CW found
            outputs = self._done(current, adopted=True) if current.state is LedgerState.CLOSED else self._fence()
            self._trace("RecoveryStarts", outcome=outcome, version=result.version, written=result.written)
            return outputs
        if isinstance(result.change, RecoveryClose) and self.phase is RecoveryPhase.CLOSING:
            if result.applied and current is not None:
                outputs, outcome = self._done(current, adopted=False), "IN_RECOVERY"  # the state the CW found
            elif current is not None and current.state is LedgerState.CLOSED:
                outputs, outcome = self._done(current, adopted=True), "CLOSED"
            else:
                return self._fail(
                    MetadataUpdateError(self.ledger_id, f"recovery close refused: {result.error or current}")
                )
            self._trace(
                "RecoveryCloses",
                lastEntry=result.change.last_entry_id,
                outcome=outcome,
                version=result.version,
                written=result.written,
            )
            return outputs
        return []

    # ---- BookieAnswered ---------------------------------------------------------------------------

    def _answered(self, e: BookieAnswered) -> list[RecoveryOutput]:
        bookie, request, response = e.bookie, e.request, e.response
        if isinstance(request, AddRequest):
            if self.writer is None or self.phase is not RecoveryPhase.READING:
                if response is not None:  # a late write-back answer: no longer counted
                    self._trace("RecoveryReceivesAddResponse", bookie=bookie, entry=request.entry_id, counted=False)
                return []
            return self._from_writer(self.writer.step(e))
        if not isinstance(request, ReadRequest):
            return []
        if request.entry_id == LAST_ENTRY:
            if self.phase is not RecoveryPhase.FENCING or self.read_lac is None:
                if response is not None and self.tracer is not None:
                    self._trace("RecoveryReceivesReadLacResponse", bookie=bookie, stale=True, lac=_lac_in(response))
                return []
            outputs = self._from_read_lac(self.read_lac.step(e))
            if response is not None and self.tracer is not None:
                self._trace(
                    "RecoveryReceivesReadLacResponse",
                    bookie=bookie,
                    stale=False,
                    start=self._start,
                    lac=_lac_in(response),
                )
            return outputs
        if self.tracer is None:
            return self._receive_read(bookie, request.entry_id, response)
        current = self._is_current(bookie, request.entry_id)  # on the state before the answer
        outputs = self._receive_read(bookie, request.entry_id, response)
        if response is None:
            if current and any(isinstance(o, Send) for o in outputs):  # it asked the next bookie
                self._trace("RecoveryReadTimedOut", entry=request.entry_id, timed_out=bookie)
            return outputs
        self._trace(
            "RecoveryReceivesReadResponse",
            bookie=bookie,
            entry=request.entry_id,
            found=isinstance(response, ReadResponse) and response.code is ErrorCode.EOK,
            stale=not current,
        )
        return outputs

    def _receive_read(self, bookie: BookieId, entry_id: int, response: Response | None) -> list[RecoveryOutput]:
        if self.phase is not RecoveryPhase.READING:
            return []
        return self._read_answer(bookie, entry_id, response)

    def _is_current(self, bookie: BookieId, entry_id: int) -> bool:
        """A read answer that decides something: for the entry being decided, from its write set."""
        if self.phase is not RecoveryPhase.READING or self._end_found or entry_id != self._next:
            return False
        m = self.metadata
        ensemble = m.ensemble_for(entry_id)
        return any(ensemble[i] == bookie for i in write_set(entry_id, m.ensemble_size, m.write_quorum))

    def reads_asked(self) -> int:
        """How many bookies were asked for the entry being decided (ledger.tla's rTried; 0 unless reading
        before the end)."""
        if self.phase is not RecoveryPhase.READING or self._end_found:
            return 0
        return self._asked.get(self._next, 0)

    def _asked_last(self) -> BookieId | None:
        """The bookie the latest read of the entry being decided went to."""
        asked = self.reads_asked()
        if not asked:
            return None
        m = self.metadata
        return m.ensemble_for(self._next)[write_set(self._next, m.ensemble_size, m.write_quorum)[asked - 1]]

    def _trace(self, name: str, **params: object) -> None:
        """Emit a trace event with the op's state after the step (ledger.tla's rPhase, rNext, rTried, rEnd)."""
        if self.tracer is not None:
            writer = self.writer
            self.tracer(
                name,
                {
                    "ledger": self.ledger_id,
                    **params,
                    "phase": self.phase.value,
                    "end_found": self._end_found,
                    "next": self._next,
                    "tried": self.reads_asked(),
                    "asked": self._asked_last(),
                    "written_back": writer.last_add_confirmed if writer is not None else NO_ENTRY,
                },
            )

    # ---- ReplacementChosen, NoReplacement: the write-back writer's ----------------------------------

    def _to_writer(self, e: ReplacementChosen | NoReplacement) -> list[RecoveryOutput]:
        if self.writer is None or self.phase is not RecoveryPhase.READING:
            return []
        return self._from_writer(self.writer.step(e))

    # ---- steps ----------------------------------------------------------------------------------

    def _fence(self) -> list[RecoveryOutput]:
        self.phase = RecoveryPhase.FENCING
        self.read_lac = ReadLacOp(self.ledger_id, self.metadata, fence=True)
        return self._from_read_lac(self.read_lac.step(Start()))

    def _from_read_lac(self, outputs: list[ReadLacOutput]) -> list[RecoveryOutput]:
        passed: list[RecoveryOutput] = []
        for output in outputs:
            if isinstance(output, Send):
                passed.append(output)  # its fencing reads (Start)
            elif isinstance(output, ReadLacFailed):
                return self._fail(output.error)
            elif isinstance(output, ReadLacDone):
                self.phase = RecoveryPhase.READING
                # Never start inside the last fragment's predecessor (BookKeeper issue 2615).
                self._start = max(output.lac, self.metadata.fragments[-1].first_entry_id - 1)
                # LedgerRecoveryOp: lastAddConfirmed = start, length = the read-LAC's (RecoveryData).
                self.writer = LedgerWriter(
                    self.ledger_id,
                    self.metadata,
                    last_add_confirmed=self._start,
                    length=output.length,
                    recovery=True,
                    tracer=self.tracer,
                )
                return self._begin_reading(self._start + 1)
        return passed

    def _begin_reading(self, first: int) -> list[RecoveryOutput]:
        self._next = first
        self._issued = first - 1
        return self._issue()

    def _issue(self) -> list[RecoveryOutput]:
        """Keep `read_ahead` entries being read beyond the next entry to decide."""
        outputs: list[RecoveryOutput] = []
        while not self._end_found and self._issued < self._next + self.read_ahead - 1:
            self._issued += 1
            self._window[self._issued] = {}
            self._asked[self._issued] = 0
            outputs += self._ask(self._issued)
        return outputs

    def _ask(self, entry_id: int) -> list[RecoveryOutput]:
        """A fenced read of `entry_id` to the next bookie of its write set (sequential reads)."""
        m = self.metadata
        position = write_set(entry_id, m.ensemble_size, m.write_quorum)[self._asked[entry_id]]
        self._asked[entry_id] += 1
        request = ReadRequest(self.ledger_id, entry_id, fence=True, master_key=self._key)
        return [Send(m.ensemble_for(entry_id)[position], request)]

    def _read_answer(self, bookie: BookieId, entry_id: int, response: Response | None) -> list[RecoveryOutput]:
        answers = self._window.get(entry_id)
        if answers is None:
            return []  # decided already, or beyond the end
        m = self.metadata
        ensemble = m.ensemble_for(entry_id)
        asked = write_set(entry_id, m.ensemble_size, m.write_quorum)[: self._asked[entry_id]]
        positions = [i for i in asked if ensemble[i] == bookie and i not in answers]
        if not positions:
            return []  # a late or duplicate answer
        answer, entry = self._classify(entry_id, response)
        answers[positions[0]] = answer
        outputs: list[RecoveryOutput] = []
        if entry is not None:
            self._found.setdefault(entry_id, entry)
        elif self._asked[entry_id] < m.write_quorum and not entry_absent(
            answers, entry_id, m.ensemble_size, m.write_quorum, m.ack_quorum
        ):
            outputs += self._ask(entry_id)  # undecided: ask the next bookie
        # ledger.tla fails the attempt in the step of the answer that leaves no bookie to ask; a
        # timeout's failure is a step of its own (RecoveryAborts).
        return outputs + self._decide(failure_step=response is None)

    def _decide(self, *, failure_step: bool) -> list[RecoveryOutput]:
        """Decide entries strictly in order: exists (write back), absent (the end), or neither (fail;
        `failure_step`: the failure is a step of its own)."""
        outputs: list[RecoveryOutput] = []
        m = self.metadata
        while self.phase is RecoveryPhase.READING and not self._end_found and self._next in self._window:
            entry_id = self._next
            answers = self._window[entry_id]
            found = self._found.pop(entry_id, None)
            if found is not None:
                del self._window[entry_id]
                del self._asked[entry_id]
                self._next += 1
                outputs += self._entry_exists(found)
                outputs += self._issue()
            elif entry_absent(answers, entry_id, m.ensemble_size, m.write_quorum, m.ack_quorum):
                self._end_found = True
                self._window.clear()
                self._asked.clear()
                self._found.clear()
                outputs += self._maybe_close()
            elif len(answers) == m.write_quorum:
                ensemble = m.ensemble_for(entry_id)
                return self._fail(
                    NotEnoughBookiesError(
                        self.ledger_id,
                        f"recovery read of entry {entry_id} got neither a copy nor "
                        f"{m.write_quorum - m.ack_quorum + 1} negative answers "
                        f"({ {ensemble[i]: a.value for i, a in answers.items()} }); retry recovery",
                    ),
                    step_event=failure_step,
                )
            else:
                break
        return outputs

    def _classify(self, entry_id: int, response: Response | None) -> tuple[Answer, DecodedEntry | None]:
        if not isinstance(response, ReadResponse):
            return (Answer.NONE if response is None else Answer.ERROR), None
        if response.code is not ErrorCode.EOK:
            return Answer.from_code(response.code), None
        try:
            entry = decode_entry(
                response.body, self.metadata.digest_type, self.metadata.password, self.ledger_id, entry_id
            )
        except BadEntry:
            return Answer.ERROR, None
        return Answer.OK, entry

    def _entry_exists(self, entry: DecodedEntry) -> list[RecoveryOutput]:
        assert self.writer is not None and self.writer.last_add_pushed + 1 == entry.entry_id
        # Written back with its own header length (LedgerRecoveryOp sets the length from each entry read).
        return self._from_writer(self.writer.step(Add(entry.payload, entry.length)))

    def _from_writer(self, outputs: list[WriterOutput]) -> list[RecoveryOutput]:
        passed: list[RecoveryOutput] = []
        for output in outputs:
            if isinstance(output, AddFailed):
                return self._fail(
                    NotEnoughBookiesError(self.ledger_id, f"recovery write-back failed: {output.error}; retry recovery")
                )
            if isinstance(output, Send | ChooseReplacement):
                passed.append(output)
        return passed + self._maybe_close()

    def _maybe_close(self) -> list[RecoveryOutput]:
        writer = self.writer
        if not self._end_found or writer is None or writer.pending_entry_ids or self.phase is not RecoveryPhase.READING:
            return []
        self.phase = RecoveryPhase.CLOSING
        fragments = writer.metadata.fragments
        return [UpdateMetadata(RecoveryClose(self.ledger_id, writer.last_add_confirmed, writer.length, fragments))]

    def _done(self, metadata: LedgerMetadata, *, adopted: bool) -> list[RecoveryOutput]:
        self.phase = RecoveryPhase.DONE
        self.metadata = metadata
        return [RecoveryDone(metadata, adopted)]

    def _fail(self, error: LedgerClientError, *, step_event: bool = True) -> list[RecoveryOutput]:
        """Fail the attempt; `step_event`: the failure is a step of its own (ledger.tla's RecoveryAborts)."""
        before = "closing" if self._end_found else self.phase.value
        self.phase = RecoveryPhase.FAILED
        if step_event:
            self._trace("RecoveryAborts", before=before)
        return [RecoveryFailed(error)]


# Event type -> handler. Mutants (conformance/mutants.py) patch the methods the handlers call (`_ask`)
# or the functions of this module (`entry_absent`), which every handler reaches.
_HANDLERS: dict[type, Callable[[RecoveryOp, Any], list[RecoveryOutput]]] = {
    Start: RecoveryOp._begin,
    MetadataResult: RecoveryOp._metadata_result,
    BookieAnswered: RecoveryOp._answered,
    ReplacementChosen: RecoveryOp._to_writer,
    NoReplacement: RecoveryOp._to_writer,
}


def _lac_in(response: Response) -> int | None:
    """The LAC a read-LAC answer carries (in the header of the bookie's last entry); -1 without one."""
    if not isinstance(response, ReadResponse) or response.code is not ErrorCode.EOK:
        return NO_ENTRY
    try:
        return read_header(response.body)[2]
    except BadEntry:
        return None
