"""The ledger writer core (docs/protocol-rules.md, "Adding entries").

`entry_id = ++last_add_pushed`; each entry goes to its write set with the writer's
current LAC piggybacked; it completes once Qa bookies of its write set acknowledged
it; completions are delivered strictly in entry order and LAC is the highest id such
that it and every earlier entry completed. Each entry is encoded once, with the LAC of
the moment it was added, and re-sent verbatim (as BookKeeper's PendingAddOp re-sends its
buffer). EFENCED or EUA for a pending add short of Qa acks, from a bookie of its write
set, stops the writer for good; once an add has Qa acks, PendingAddOp ignores errors for
it (an under-replicated entry, not a failure), and an answer from a replaced bookie is
ignored. Any other failure (error code, or no answer) replaces that bookie by an
ensemble change at LAC+1 and re-sends the unacknowledged adds to the replacement.

Pure, and driven one way (docs/architecture.md, "One way to drive a core"): every input is a frozen
dataclass fed to `step(event) -> list[WriterOutput]`, which returns the outputs the shell must
perform and raises TypeError for an event of another type.

  Add(payload, length)            the next entry -> Send to its write set (held while an ensemble
                                  change is in flight), or AddFailed(None) once the writer stopped
  BookieAnswered(bookie, request, response)   the answer to a Send (None: no answer in time) ->
                                  AddCompleted in entry order, AddFailed (fenced), or ChooseReplacement
  ReplacementChosen(failed, replacement)  the shell's answer to ChooseReplacement -> UpdateMetadata
                                  (EnsembleChange), or, in recovery mode, the re-sends at once
  NoReplacement(failed, reason)   no bookie to replace `failed` -> AddFailed for every pending add
  MetadataResult                  the answer to UpdateMetadata (impl/bookie/client/ledger_update.py)
                                  -> the re-sends of an ensemble change, WriterClosed or CloseFailed
  Close()                         -> AddFailed for the pending adds and UpdateMetadata(WriterClose)

`Start`, `BookieAnswered`, `ReplacementChosen` and `NoReplacement` are the inputs every client core
shares (the recovery op, read-LAC op and reader take them too), so they live here with `Send`. In
recovery mode (used by the recovery op for write-back) adds carry the recovery flag and ensemble
changes stay local until the recovery close.

A writer given a tracer (impl/trace.py) reports each ledger.tla step it takes (`WriterSendsAdd`,
`WriterReceivesAddResponse`, `WriterChangesEnsemble`, `WriterCloses`; in recovery mode
`RecoveryReceivesAddResponse`, `RecoveryChangesEnsemble`) to it; one given none traces nothing
and computes nothing for it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from impl.bookie.client.distribution import all_write_sets, write_set
from impl.bookie.client.errors import (
    BadRequestError,
    LedgerClientError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataUpdateError,
    MetadataVersionError,
    NotEnoughBookiesError,
)
from impl.bookie.client.ledger_update import EnsembleChange, MetadataResult, UpdateMetadata, WriterClose
from impl.bookie.entry_format import encode_entry, master_key
from impl.bookie.protocol import AddRequest, AddResponse, ErrorCode, Request, Response
from impl.metadata.ledger import NO_ENTRY, BookieId, Fragment, LedgerMetadata, LedgerState
from impl.values import value_type

if TYPE_CHECKING:
    from impl.trace import Tracer


# ---- inputs shared by the client cores ----------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """Begin: the recovery op, the read-LAC op and the reader take it once, first (the writer has none)."""


@value_type  # built for every message: impl/values.py
class BookieAnswered:
    """The answer to a Send: `response` from `bookie` to `request`, or None for no answer in time
    (the shell's transport owns the timeout)."""

    bookie: BookieId
    request: Request
    response: Response | None


@dataclass(frozen=True)
class ReplacementChosen:
    """The shell's answer to ChooseReplacement: `replacement`, a writable bookie, takes `failed`'s place."""

    failed: BookieId
    replacement: BookieId


@dataclass(frozen=True)
class NoReplacement:
    """The shell's answer to ChooseReplacement when no bookie can replace `failed` (`reason` says why)."""

    failed: BookieId
    reason: str


# ---- the writer's own inputs ----------------------------------------------------------------------


@value_type  # built for every message: impl/values.py
class Add:
    """Add the next entry. `length`: the ledger length its header carries; None: the pushed length plus
    the payload. A recovery write-back passes the recovered entry's own (BookKeeper's recovery sets the
    handle's length from each entry it read)."""

    payload: bytes
    length: int | None = None


@dataclass(frozen=True)
class Close:
    """Close the ledger at the writer's LAC and length (see `LedgerWriter._close`)."""


WriterEvent = Add | BookieAnswered | ReplacementChosen | NoReplacement | MetadataResult | Close


# ---- outputs --------------------------------------------------------------------------------------


@value_type  # built for every message: impl/values.py
class Send:
    """Output: send `request` to `bookie`; feed the answer (or None for no answer) back as BookieAnswered."""

    bookie: BookieId
    request: Request


@dataclass(frozen=True)
class ChooseReplacement:
    """Output: pick a writable bookie not in `exclude`; feed back ReplacementChosen(failed, it), or
    NoReplacement(failed, why) when there is none."""

    failed: BookieId
    exclude: tuple[BookieId, ...]


@value_type  # built for every message: impl/values.py
class AddCompleted:
    entry_id: int


@dataclass(frozen=True)
class AddFailed:
    entry_id: int | None  # None: the add was refused before it got an id
    error: LedgerClientError


@dataclass(frozen=True)
class WriterClosed:
    metadata: LedgerMetadata  # the CLOSED metadata as stored: its end is the writer's LAC and length


@dataclass(frozen=True)
class CloseFailed:
    error: LedgerClientError


WriterOutput = Send | ChooseReplacement | UpdateMetadata | AddCompleted | AddFailed | WriterClosed | CloseFailed


class WriterState(enum.Enum):
    WRITING = "writing"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"  # fenced, unauthorised, no replacement bookie, the ledger closed elsewhere, or a refused close


@dataclass
class _PendingAdd:
    entry_id: int
    length: int  # ledger length up to and including this entry
    body: bytes  # encoded once, re-sent verbatim to replacements
    acked: set[int] = field(default_factory=set)  # indices (in the entry's ensemble) that acknowledged
    sent: bool = False


def replace_bookie(
    metadata: LedgerMetadata, first_entry_id: int, failed: BookieId, replacement: BookieId
) -> LedgerMetadata:
    """Local ensemble change (recovery write-back): the last ensemble with `failed` swapped, from first_entry_id on."""
    ensemble = tuple(replacement if b == failed else b for b in metadata.last_ensemble)
    kept = tuple(f for f in metadata.fragments if f.first_entry_id < first_entry_id)
    return replace(metadata, fragments=kept + (Fragment(first_entry_id, ensemble),))


class LedgerWriter:
    def __init__(
        self,
        ledger_id: int,
        metadata: LedgerMetadata,
        *,
        last_add_confirmed: int = NO_ENTRY,
        length: int = 0,
        recovery: bool = False,
        tracer: Tracer | None = None,
    ) -> None:
        """`tracer`: this writer's recorder (impl/trace.py), or None to trace nothing."""
        self.ledger_id = ledger_id
        self.tracer = tracer
        self.metadata = metadata
        self.recovery = recovery
        self.state = WriterState.WRITING
        self.last_add_pushed = last_add_confirmed
        self.last_add_confirmed = last_add_confirmed
        self.length = length  # length at LAC
        self._pushed_length = length
        self._master_key = master_key(metadata.password)
        # E and Qw never change for a ledger: the E write sets are computed once (looked up per add).
        self._write_sets = all_write_sets(metadata.ensemble_size, metadata.write_quorum)
        self._pending: dict[int, _PendingAdd] = {}
        self._failed_bookies: list[BookieId] = []  # waiting for an ensemble change, oldest first
        self._changing: tuple[BookieId, BookieId | None] | None = None  # (failed, replacement) in flight
        self._failure: LedgerClientError | None = None
        self._close_refused: MetadataVersionError | None = None  # the final answer of a conflicting close

    @property
    def pending_entry_ids(self) -> list[int]:
        return sorted(self._pending)

    @property
    def changing_ensemble(self) -> bool:
        return self._changing is not None

    # ---- the one entry point ---------------------------------------------------------------------

    def step(self, event: WriterEvent) -> list[WriterOutput]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a ledger writer event: {event!r}")
        return handler(self, event)

    # ---- Add --------------------------------------------------------------------------------------

    def _add(self, e: Add) -> list[WriterOutput]:
        if self.state is not WriterState.WRITING:
            return [AddFailed(None, self._refusal())]
        self.last_add_pushed += 1
        entry_id = self.last_add_pushed
        self._pushed_length = self._pushed_length + len(e.payload) if e.length is None else e.length
        body = encode_entry(
            self.ledger_id,
            entry_id,
            self.last_add_confirmed,
            self._pushed_length,
            e.payload,
            self.metadata.digest_type,
            self.metadata.password,
        )
        pending = _PendingAdd(entry_id, self._pushed_length, body)
        self._pending[entry_id] = pending
        if not self.recovery and self.tracer is not None:  # a write-back is part of the recovery read step
            self.tracer("WriterSendsAdd", {"ledger": self.ledger_id, "entry": entry_id, "lac": self.last_add_confirmed})
        if self._changing is not None:
            return []  # held until the ensemble change settles
        return self._send_all(pending)

    # ---- BookieAnswered ---------------------------------------------------------------------------

    def _answered(self, e: BookieAnswered) -> list[WriterOutput]:
        """A bookie's answer to one of our AddRequests; None means no answer (timeout)."""
        bookie, request, response = e.bookie, e.request, e.response
        tracer = self.tracer
        if tracer is None or response is None or not isinstance(request, AddRequest):
            return self._receive(bookie, request, response)
        counted = self._counts(bookie, request, response)  # decided on the state before the answer
        outputs = self._receive(bookie, request, response)
        tracer(
            "RecoveryReceivesAddResponse" if self.recovery else "WriterReceivesAddResponse",
            {
                "ledger": self.ledger_id,
                "bookie": bookie,
                "entry": request.entry_id,
                "ok": isinstance(response, AddResponse) and response.code is ErrorCode.EOK,
                "counted": counted,
                **self.trace_state(),
            },
        )
        return outputs

    def _counts(self, bookie: BookieId, request: AddRequest, response: Response) -> bool:
        """Whether this answer adds an ack (ledger.tla's `counts`): OK, pending, from its write set."""
        ok = isinstance(response, AddResponse) and response.code is ErrorCode.EOK
        pending = self._pending.get(request.entry_id)
        return (
            ok
            and self.state is WriterState.WRITING
            and pending is not None
            and bool(self._positions(pending.entry_id, bookie))
        )

    def trace_state(self) -> dict[str, object]:
        """The writer's state as trace events report it (ledger.tla's wState and wLac)."""
        return {
            "state": self.state.value,
            "fenced": isinstance(self._failure, LedgerFencedError),
            "lac": self.last_add_confirmed,
        }

    def _receive(self, bookie: BookieId, request: Request, response: Response | None) -> list[WriterOutput]:
        if not isinstance(request, AddRequest) or self.state is not WriterState.WRITING:
            return []
        if response is not None and not isinstance(response, AddResponse):
            return []
        pending = self._pending.get(request.entry_id)
        if pending is None:
            return []  # already delivered or failed
        positions = self._positions(pending.entry_id, bookie)
        if not positions:
            return []  # a stale answer from a bookie that has since been replaced
        code = response.code if response is not None else None
        if code is ErrorCode.EOK:
            pending.acked.update(positions)
            return self._deliver_completed()
        if code in (ErrorCode.EFENCED, ErrorCode.EUA):
            if len(pending.acked) >= self.metadata.ack_quorum:
                # PendingAddOp.writeComplete: once "completed" (Qa acks) an add ignores errors; the
                # fence shows on an earlier entry still short of Qa, or at the next ensemble change.
                return []
            why = (
                "fenced by a recovery (another client opened it)"
                if code is ErrorCode.EFENCED
                else ("a bookie refused the master key (EUA: wrong password)")
            )
            return self._fail(LedgerFencedError(self.ledger_id, f"{why}, reported by bookie {bookie}; stop writing"))
        if code is ErrorCode.EBADREQ:
            # A permanent refusal of this entry (malformed, or over the bookie's frame limit): any
            # replacement bookie would refuse it too, so an ensemble change would only loop. The
            # ledger's adds fail (entries are ordered: nothing after it can complete either).
            return self._fail(
                BadRequestError(
                    self.ledger_id,
                    request.entry_id,
                    f"bookie {bookie} refused entry {request.entry_id} ({len(request.body)} bytes) as malformed "
                    "or too large (EBADREQ); not retried",
                )
            )
        return self._bookie_failed(bookie)

    # ---- ReplacementChosen, NoReplacement --------------------------------------------------------

    def _replacement_chosen(self, e: ReplacementChosen) -> list[WriterOutput]:
        """The shell's answer to ChooseReplacement."""
        failed, replacement = e.failed, e.replacement
        if self._changing is None or self._changing[0] != failed or self.state is not WriterState.WRITING:
            return []
        if replacement in self.metadata.last_ensemble:
            raise ValueError(f"replacement {replacement} is already in the ensemble {self.metadata.last_ensemble}")
        if not self._needs_replacing(failed):
            # Delayed ensemble change (ledger.tla's WriterTimedOut): while the replacement was being
            # chosen, every add that waited on `failed` reached Qa from the others. The fragment
            # would start past everything sent, for nothing; the next failure asks again.
            self._changing = None
            return self._after_change()
        self._changing = (failed, replacement)
        first_entry_id = self.last_add_confirmed + 1
        if self.recovery:
            if self.tracer is not None:
                self.tracer(
                    "RecoveryChangesEnsemble",
                    {"ledger": self.ledger_id, "failed": failed, "replacement": replacement, "first": first_entry_id},
                )
            return self._ensemble_changed(replace_bookie(self.metadata, first_entry_id, failed, replacement))
        return [UpdateMetadata(EnsembleChange(self.ledger_id, first_entry_id, failed, replacement))]

    def _no_replacement(self, e: NoReplacement) -> list[WriterOutput]:
        """The shell found no bookie to replace `failed`: the ensemble change, and the pending adds, fail."""
        if self._changing is None or self._changing[0] != e.failed or self.state is not WriterState.WRITING:
            return []
        return self._fail(NotEnoughBookiesError(self.ledger_id, f"cannot replace failed bookie {e.failed}: {e.reason}"))

    # ---- MetadataResult ---------------------------------------------------------------------------

    def _metadata_result(self, result: MetadataResult) -> list[WriterOutput]:
        change = result.change
        tracer = self.tracer
        if tracer is None:
            return self._take_metadata_result(result)
        # Only results the writer is waiting for are steps (ledger.tla's CW is atomic with them).
        if isinstance(change, EnsembleChange) and self._changing is not None and self.state is WriterState.WRITING:
            outputs = self._take_metadata_result(result)
            current = result.metadata
            outcome = "OPEN" if result.applied or current is None else current.state.value
            tracer(
                "WriterChangesEnsemble",
                {
                    "ledger": self.ledger_id,
                    "failed": change.failed,
                    "replacement": change.replacement,
                    "first": change.first_entry_id,
                    "outcome": outcome,
                    "version": result.version,  # the metadata's store version after the CW (or that refused it)
                    "written": result.written,
                    **self.trace_state(),
                },
            )
            return outputs
        if isinstance(change, WriterClose) and self.state is WriterState.CLOSING:
            outputs = self._take_metadata_result(result)
            # lac: the LAC it closed with; version, written: as for WriterChangesEnsemble
            tracer(
                "WriterCloses",
                {"ledger": self.ledger_id, "version": result.version, "written": result.written, **self.trace_state()},
            )
            return outputs
        return self._take_metadata_result(result)

    def _take_metadata_result(self, result: MetadataResult) -> list[WriterOutput]:
        change = result.change
        if isinstance(change, EnsembleChange):
            if self._changing is None or self.state is not WriterState.WRITING:
                return []
            if result.applied and result.metadata is not None:
                return self._ensemble_changed(result.metadata)
            current = result.metadata
            if current is None:
                return self._fail(
                    MetadataUpdateError(self.ledger_id, f"ensemble change failed in the metadata store: {result.error}")
                )
            if current.state is LedgerState.CLOSED:
                return self._fail(
                    LedgerClosedError(self.ledger_id, "closed by another client during an ensemble change")
                )
            if current.state is LedgerState.IN_RECOVERY:
                return self._fail(
                    LedgerFencedError(
                        self.ledger_id, "fenced: another client started recovery during an ensemble change"
                    )
                )
            # Still OPEN: the failed bookie was no longer in place; take the stored ensemble and go on.
            return self._ensemble_changed(current)
        if isinstance(change, WriterClose) and self.state is WriterState.CLOSING:
            self.state = WriterState.FAILED  # unless the close is stored (below)
            stored = result.metadata
            if result.applied and stored is not None:
                # Written now, or found CLOSED at this very end (another client's close that agrees).
                self.state = WriterState.CLOSED
                self.metadata = stored
                return [WriterClosed(stored)]
            if stored is not None and stored.state is LedgerState.CLOSED:
                # CLOSED at another end: BookKeeper's metadata version error. Final, as the close is.
                refused = MetadataVersionError(self.ledger_id, stored, change.last_entry_id, change.length)
                self.metadata = stored  # nothing the writer reports contradicts the store
                self._failure = self._close_refused = refused
                return [CloseFailed(refused)]
            # The store failed (the write may or may not have applied): a later close tries again.
            error = MetadataUpdateError(
                self.ledger_id,
                f"close with last entry {change.last_entry_id} failed in the metadata store "
                f"({result.error or 'no answer'}); close again once the store is reachable",
            )
            self._failure = error
            return [CloseFailed(error)]
        return []

    # ---- Close ------------------------------------------------------------------------------------

    def _close(self, _: Close) -> list[WriterOutput]:
        """Fail still-pending adds as closed and write CLOSED with LAC and length.

        Also after the writer failed (fenced by a recovery, no bookie to replace a failed one):
        BookKeeper's handle closes itself on such an error, with the LAC it acknowledged. The
        conditional write finds the ledger OPEN or IN_RECOVERY (the close is written; a recovery
        still running adopts it), CLOSED at this end (success, nothing written) or CLOSED at
        another end (CloseFailed with MetadataVersionError). Once answered, every later close
        answers the same: WriterClosed with the stored metadata, or the same refusal.
        """
        if self.state is WriterState.CLOSED:
            return [WriterClosed(self.metadata)]
        if self._close_refused is not None:
            return [CloseFailed(self._close_refused)]
        if self.state is WriterState.CLOSING:
            return []  # the close in flight answers
        self.state = WriterState.CLOSING
        outputs: list[WriterOutput] = self._fail_pending(
            LedgerClosedError(self.ledger_id, "closed while the add was pending")
        )
        self._changing = None
        self._failed_bookies.clear()
        outputs.append(UpdateMetadata(WriterClose(self.ledger_id, self.last_add_confirmed, self.length)))
        return outputs

    # ---- internals ------------------------------------------------------------------------------

    def _refusal(self) -> LedgerClientError:
        if self._failure is not None:
            return self._failure
        return LedgerClosedError(self.ledger_id, f"the writer is {self.state.value}; open a new ledger to write")

    def _positions(self, entry_id: int, bookie: BookieId) -> list[int]:
        ensemble = self.metadata.ensemble_for(entry_id)
        return [i for i in self._write_sets[entry_id % len(self._write_sets)] if ensemble[i] == bookie]

    def _request(self, pending: _PendingAdd) -> AddRequest:
        return AddRequest(self.ledger_id, pending.entry_id, self._master_key, pending.body, recovery=self.recovery)

    def _send_all(self, pending: _PendingAdd) -> list[WriterOutput]:
        pending.sent = True
        ensemble = self.metadata.ensemble_for(pending.entry_id)
        request = self._request(pending)
        return [Send(ensemble[i], request) for i in self._write_sets[pending.entry_id % len(self._write_sets)]]

    def _deliver_completed(self) -> list[WriterOutput]:
        outputs: list[WriterOutput] = []
        while (nxt := self._pending.get(self.last_add_confirmed + 1)) is not None and len(
            nxt.acked
        ) >= self.metadata.ack_quorum:
            del self._pending[nxt.entry_id]
            self.last_add_confirmed = nxt.entry_id
            self.length = nxt.length
            outputs.append(AddCompleted(nxt.entry_id))
        return outputs

    def _bookie_failed(self, bookie: BookieId) -> list[WriterOutput]:
        if bookie not in self.metadata.last_ensemble or bookie in self._failed_bookies:
            return []
        if self._changing is not None and self._changing[0] == bookie:
            return []
        self._failed_bookies.append(bookie)
        if self._changing is not None:
            return []
        return self._next_change()

    def _next_change(self) -> list[WriterOutput]:
        while self._failed_bookies:
            failed = self._failed_bookies.pop(0)
            if failed in self.metadata.last_ensemble:
                self._changing = (failed, None)
                return [ChooseReplacement(failed, self.metadata.last_ensemble)]
        return []

    def _ensemble_changed(self, new: LedgerMetadata) -> list[WriterOutput]:
        old = self.metadata
        self.metadata = new
        self._changing = None
        outputs: list[WriterOutput] = []
        for entry_id in sorted(self._pending):
            pending = self._pending[entry_id]
            if not pending.sent:
                continue
            before, after = old.ensemble_for(entry_id), new.ensemble_for(entry_id)
            for i in write_set(entry_id, new.ensemble_size, new.write_quorum):
                if before[i] != after[i]:
                    pending.acked.discard(i)  # the old bookie's copy is outside the new fragment
                    outputs.append(Send(after[i], self._request(pending)))
        outputs += self._deliver_completed()
        return outputs + self._after_change()

    def _after_change(self) -> list[WriterOutput]:
        """The next queued ensemble change, or else the adds held while changing go out."""
        change = self._next_change()
        if change:
            return change
        outputs: list[WriterOutput] = []
        for entry_id in sorted(self._pending):
            if not self._pending[entry_id].sent:
                outputs += self._send_all(self._pending[entry_id])
        return outputs

    def _needs_replacing(self, failed: BookieId) -> bool:
        """Whether a sent add still waits on `failed` and is short of Qa (ledger.tla's WriterTimedOut)."""
        return any(
            p.sent and len(p.acked) < self.metadata.ack_quorum and set(self._positions(p.entry_id, failed)) - p.acked
            for p in self._pending.values()
        )

    def _fail_pending(self, error: LedgerClientError) -> list[WriterOutput]:
        outputs: list[WriterOutput] = [AddFailed(entry_id, error) for entry_id in sorted(self._pending)]
        self._pending.clear()
        return outputs

    def _fail(self, error: LedgerClientError) -> list[WriterOutput]:
        self.state = WriterState.FAILED
        self._failure = error
        self._changing = None
        self._failed_bookies.clear()
        return self._fail_pending(error)


# Event type -> handler. Mutants (conformance/mutants.py) patch the methods the handlers call
# (`_receive`, `_deliver_completed`), which every handler reaches through `self`.
_HANDLERS: dict[type, Callable[[LedgerWriter, Any], list[WriterOutput]]] = {
    Add: LedgerWriter._add,
    BookieAnswered: LedgerWriter._answered,
    ReplacementChosen: LedgerWriter._replacement_chosen,
    NoReplacement: LedgerWriter._no_replacement,
    MetadataResult: LedgerWriter._metadata_result,
    Close: LedgerWriter._close,
}
