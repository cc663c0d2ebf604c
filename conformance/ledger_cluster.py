"""One ledger's cluster, in one process: the real pure cores over a simulated network and disk.

The cores are the production ones: `BookieCore` per bookie, one `LedgerWriter`, one
`RecoveryOp` per recovery attempt of each recovery client (its read-LAC op and its
write-back writer inside), and the metadata transitions through `LedgerMetadataStore` over
the in-memory store. Nothing here decides protocol behaviour; the harness only decides, as
the spec's environment, what the network and the disks do:

- network: requests in flight (who sent them, to which bookie). Delivering one runs the
  bookie core on it and feeds the reply to the sender in the same step (as ledger.tla does).
  A lost request, a lost reply, a request dropped by a down bookie: the sender is *not* told
  at once; it gets `None` (no answer) only when the spec decides its timeout fires
  (`timeout_writer`, `timeout_recovery_adds`, `abort_recovery`).
- disk: each bookie is a `SimBookie` (conformance/sim_bookie.py): its journal, made durable at
  once (ledger.tla's journal write, fsync and reply are one step), and its ledger storage. A
  crash rebuilds the bookie core from its journal with `BookieCore.replay`, so only journalled
  state survives (ledger storage too is what the journal puts back).
- metadata: every `UpdateMetadata` is applied at once through the conditional-write loop,
  except a recovery close, held until the spec's `RecoveryCloses` step.

A `LedgerCluster` pickles (the metadata store is re-created from the stored metadata), so
the exhaustive replay can branch from any state. Given a `tracer` (impl/trace.py), every core it
runs reports its steps to it: each bookie core (also one rebuilt after a crash), the writer and
every recovery attempt (with its write-back writer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from conformance.sim_bookie import BookieAnswerError, SimBookie
from impl.bookie.client.ledger_update import MetadataResult, RecoveryClose, UpdateMetadata
from impl.bookie.client.metadata_writes import apply_change
from impl.bookie.client.recovery import RecoveryFailed, RecoveryOp, RecoveryPhase
from impl.bookie.client.writer import (
    Add,
    BookieAnswered,
    ChooseReplacement,
    Close,
    LedgerWriter,
    NoReplacement,
    ReplacementChosen,
    Send,
    Start,
    WriterState,
)
from impl.bookie.core import BookieCore
from impl.bookie.entry_format import read_header
from impl.bookie.protocol import AddRequest, ReadRequest, Request, Response
from impl.metadata.ledger import NO_ENTRY, BookieId, Fragment, LedgerMetadata
from impl.metadata.ledger_store import LedgerMetadataStore
from impl.metadata.memory import MemoryServer

if TYPE_CHECKING:
    from impl.trace import Tracer

LEDGER_ID = 7
PASSWORD = b"conformance"
NO_REPLACEMENT = "<none>"  # answer a ChooseReplacement with NoReplacement


class HarnessError(Exception):
    """The cores did something the current spec step has no room for (a divergence, reported as such)."""


PAYLOAD_SIZE = 10  # every entry's payload has this size: ledger.tla counts lengths in entries


def payload(entry_id: int) -> bytes:
    """Entry e's content: fixed by its id (ledger.tla's messages carry no payload), always PAYLOAD_SIZE bytes."""
    return f"entry-{entry_id:04d}".encode()


Client = LedgerWriter | RecoveryOp


@dataclass
class InFlight:
    client: str  # the spec's name of the sender (the writer, or a recovery client)
    core: Client  # the core that sent it (an old recovery attempt stays the addressee of its requests)
    bookie: BookieId
    request: Request


@dataclass(frozen=True)
class CoreTypes:
    """The core classes the cluster runs: the production ones, or (tests) deliberately broken subclasses."""

    writer: type[LedgerWriter] = LedgerWriter
    recovery: type[RecoveryOp] = RecoveryOp
    bookie: type[BookieCore] = BookieCore


class LedgerCluster:
    def __init__(
        self,
        bookies: list[BookieId],
        ensemble: tuple[BookieId, ...],
        quorums: tuple[int, int, int],
        writer: str,
        recoverers: list[str],
        cores: CoreTypes = CoreTypes(),
        tracer: Tracer | None = None,
    ) -> None:
        e, qw, qa = quorums
        metadata = LedgerMetadata(e, qw, qa, (Fragment(0, ensemble),), password=PASSWORD)
        self.cores = cores
        self.tracer = tracer  # the recorder of every core of the cluster
        self.bookies = {b: SimBookie(cores.bookie(tracer=tracer)) for b in bookies}
        self._metadata = metadata
        self._store: LedgerMetadataStore | None = _new_store(metadata)
        self.writer_name = writer
        self.writer = cores.writer(LEDGER_ID, metadata, tracer=tracer)
        self.recoveries: dict[str, RecoveryOp | None] = {c: None for c in recoverers}
        self.held_close: dict[str, UpdateMetadata] = {}
        self.inflight: list[InFlight] = []
        self.timed_out: list[InFlight] = []  # requests whose answer will never come; sender not told yet
        self.lost = 0  # the spec's fault budgets, counted by the environment
        self.crashes = 0
        self.crashed_clients: set[str] = set()  # recovery clients whose process died mid-attempt
        self.events: list[Any] = []  # completions and failures the cores reported
        self.stopped: tuple[dict[int, frozenset[BookieId]], LedgerMetadata] | None = None
        self._replacement: BookieId | None = None  # the spec step's choice for a ChooseReplacement

    # ---- the metadata store: the in-memory store holds locks and does not pickle, so a copy of
    # the cluster carries the stored metadata and makes a fresh store when it next writes ---------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None
        return state

    @property
    def metadata(self) -> LedgerMetadata:
        return self._metadata

    def _apply(self, update: UpdateMetadata) -> MetadataResult:
        if self._store is None:
            self._store = _new_store(self._metadata)
        result = apply_change(self._store, update.change)
        self._metadata = self._store.read(LEDGER_ID)[0]
        return result

    def client(self, name: str) -> Client | None:
        return self.writer if name == self.writer_name else self.recoveries[name]

    # ---- performing the cores' outputs --------------------------------------------------------
    def perform(self, name: str, core: Client, outputs: list[Any]) -> None:
        for output in outputs:
            if isinstance(output, Send):
                self.inflight.append(InFlight(name, core, output.bookie, output.request))
            elif isinstance(output, ChooseReplacement):
                choice = self._replacement
                if choice is None:
                    raise HarnessError(
                        f"{name} asked for a replacement of {output.failed}, but this step changes no ensemble"
                    )
                self._replacement = None  # one replacement per step, as in the spec
                if choice == NO_REPLACEMENT:
                    gives_up = NoReplacement(output.failed, "the spec gives up (abort)")
                    self._feed(name, core, partial(core.step, gives_up))
                else:
                    self._feed(name, core, partial(core.step, ReplacementChosen(output.failed, choice)))
            elif isinstance(output, UpdateMetadata):
                if isinstance(output.change, RecoveryClose):
                    self.held_close[name] = output  # until the spec's RecoveryCloses
                else:
                    self._feed(name, core, partial(core.step, self._apply(output)))
            else:
                self.events.append((name, output))

    def _feed(self, name: str, core: Client, call: Callable[[], list[Any]]) -> None:
        """Give a core one input and perform its outputs (every input to a core goes through here).

        The writer's view as it was when it stopped writing is kept: ledger.tla leaves wFragments
        unchanged when the writer is fenced, fails or closes (and resets wAcks and wSentLac, dead
        from then on), while the core drops its pending adds and, closing a ledger someone else
        closed at the same end, takes the stored metadata (with the recoverer's fragments).
        """
        writer = self.writer
        before = (pending_acks(writer), writer.metadata) if writer.state is WriterState.WRITING else None
        outputs = call()
        if before is not None and writer.state is not WriterState.WRITING and self.stopped is None:
            self.stopped = before
        self.perform(name, core, outputs)

    def writer_view(self) -> tuple[dict[int, frozenset[BookieId]], LedgerMetadata]:
        """(acks of pending adds, fragments' metadata) as ledger.tla's writer sees them."""
        if self.writer.state is WriterState.WRITING or self.stopped is None:
            return pending_acks(self.writer), self.writer.metadata
        return self.stopped

    def writer_sent_lacs(self) -> dict[int, int]:
        """The LAC each pending add of the writer carries (ledger.tla's wSentLac)."""
        return pending_lacs(self.writer)

    def last_entry_lac(self, bookie: BookieId) -> int:
        """The LAC in the header of the bookie's last (highest) entry, as ledger storage holds it:
        what its fencing read-LAC answer carries (ledger.tla's bookieLac); -1 without entries."""
        node = self.bookies[bookie]
        ledger = node.core.ledgers.get(LEDGER_ID)
        if ledger is None or not ledger.entries:
            return NO_ENTRY
        body = node.body(LEDGER_ID, max(ledger.entries))
        if body is None:
            raise HarnessError(
                f"bookie {bookie} lists entry {max(ledger.entries)} but its ledger storage has no body for it"
            )
        return read_header(body)[2]

    # ---- bookies --------------------------------------------------------------------------------
    def bookie_handles(self, bookie: BookieId, request: Request) -> Response:
        """The bookie core handles one request; its journal records are durable before the reply."""
        try:
            return self.bookies[bookie].answer(request)
        except BookieAnswerError as e:
            raise HarnessError(f"bookie {bookie} {e}") from e

    def crash(self, bookie: BookieId) -> None:
        self.bookies[bookie].crash()  # restart state: only what reached the journal
        self._drop_requests_to(bookie)
        self.crashes += 1

    def restart(self, bookie: BookieId) -> None:
        self.bookies[bookie].restart()

    def fail_permanently(self, bookie: BookieId) -> None:
        self.bookies[bookie].fail()
        self._drop_requests_to(bookie)

    def _drop_requests_to(self, bookie: BookieId) -> None:
        self.timed_out += [m for m in self.inflight if m.bookie == bookie]
        self.inflight = [m for m in self.inflight if m.bookie != bookie]

    # ---- the network ------------------------------------------------------------------------------
    def take(self, chosen: list[InFlight]) -> None:
        ids = {id(m) for m in chosen}
        self.inflight = [m for m in self.inflight if id(m) not in ids]

    def deliver(self, chosen: list[InFlight]) -> list[Response]:
        """Deliver requests (identical ones together: the spec's message set merges them)."""
        self.take(chosen)
        responses = []
        for m in chosen:
            if not self.bookies[m.bookie].up:
                raise HarnessError(f"cannot deliver to bookie {m.bookie}: it is down")
            response = self.bookie_handles(m.bookie, m.request)
            responses.append(response)
            if m.core is self.client(m.client):  # a reply to a crashed client's attempt reaches nobody
                self._feed(m.client, m.core, partial(m.core.step, BookieAnswered(m.bookie, m.request, response)))
        return responses

    def lose_requests(self, chosen: list[InFlight], *, counted: bool = True) -> None:
        self.take(chosen)
        self.timed_out += chosen
        self.lost += counted

    def lose_replies(self, chosen: list[InFlight]) -> None:
        self.take(chosen)
        for m in chosen:
            self.bookie_handles(m.bookie, m.request)
        self.timed_out += chosen
        self.lost += 1

    # ---- the writer ---------------------------------------------------------------------------------
    def writer_add(self) -> None:
        entry_id = self.writer.last_add_pushed + 1
        self._feed(self.writer_name, self.writer, lambda: self.writer.step(Add(payload(entry_id))))

    def writer_close(self) -> None:
        self._feed(self.writer_name, self.writer, partial(self.writer.step, Close()))

    def _time_out(self, name: str, core: Client, requests: list[InFlight], replacement: BookieId | None) -> None:
        """The sender's timeouts fire for `requests`: it gets None for each (and may change ensemble)."""
        ids = {id(m) for m in requests}
        self.timed_out = [m for m in self.timed_out if id(m) not in ids]
        self._replacement = replacement
        try:
            for m in requests:
                self._feed(name, core, partial(core.step, BookieAnswered(m.bookie, m.request, None)))
        finally:
            self._replacement = None

    def timeout_writer(self, bookie: BookieId, replacement: BookieId) -> None:
        requests = [m for m in self.timed_out if m.core is self.writer and m.bookie == bookie]
        self._time_out(self.writer_name, self.writer, requests, replacement)

    # ---- recovery clients ------------------------------------------------------------------------
    def start_recovery(self, name: str) -> None:
        # A new attempt: the previous one's unanswered requests are forgotten (its replies are stale).
        self.timed_out = [m for m in self.timed_out if m.client != name]
        self.held_close.pop(name, None)
        self.crashed_clients.discard(name)
        op = self.cores.recovery(LEDGER_ID, self.metadata, tracer=self.tracer)
        self.recoveries[name] = op
        self._feed(name, op, partial(op.step, Start()))

    def crash_recoverer(self, name: str) -> None:
        """The recovery client's process dies mid-attempt (ledger.tla's RecovererCrashes): its RecoveryOp
        goes with everything it held; what it sent still reaches the bookies, their replies nobody. Its
        restart is a new attempt (start_recovery)."""
        self._op(name)
        self.recoveries[name] = None
        self.crashed_clients.add(name)
        self.held_close.pop(name, None)
        self.timed_out = [m for m in self.timed_out if m.client != name]
        self.crashes += 1

    def _op(self, name: str) -> RecoveryOp:
        op = self.recoveries[name]
        if op is None:
            raise HarnessError(f"recovery client {name} has not started")
        return op

    def timeout_recovery_adds(self, name: str, bookie: BookieId, replacement: BookieId) -> None:
        op = self._op(name)
        requests = [
            m for m in self.timed_out if m.core is op and m.bookie == bookie and isinstance(m.request, AddRequest)
        ]
        self._time_out(name, op, requests, replacement)

    def timeout_recovery_read(self, name: str) -> None:
        """The unanswered read of the entry being decided times out: the op asks the next bookie."""
        op = self._op(name)
        requests = [
            m
            for m in self.timed_out
            if m.core is op and isinstance(m.request, ReadRequest) and m.request.entry_id == op._next
        ]
        if not requests:
            raise HarnessError(f"recovery client {name} has no read of entry {op._next} that timed out")
        self._time_out(name, op, requests, None)

    def close_recovery(self, name: str) -> None:
        update = self.held_close.pop(name, None)
        if update is None:
            raise HarnessError(f"recovery client {name} has no close to write (its write-backs are not done)")
        op = self._op(name)
        self._feed(name, op, partial(op.step, self._apply(update)))

    def abort_recovery(self, name: str) -> None:
        """The attempt's timeouts fire: its read-LACs', or its current read's once every bookie of the write
        set was asked; else (and if it has not failed by then) a write-back's, with no replacement left.
        (A read that can still move on to the next bookie is not timed out here: that is its own step.)"""
        op = self._op(name)
        mine = [m for m in self.timed_out if m.core is op]
        reads = [m for m in mine if isinstance(m.request, ReadRequest)]
        reading = op.phase is RecoveryPhase.READING and not op._end_found
        if not reading or op.reads_asked() >= op.metadata.write_quorum:
            self._time_out(name, op, reads, None)
        if op.phase is not RecoveryPhase.FAILED:
            adds = [m for m in mine if isinstance(m.request, AddRequest)]
            self._time_out(name, op, adds[:1], NO_REPLACEMENT)
        if op.phase is not RecoveryPhase.FAILED:
            raise HarnessError(f"recovery client {name} did not fail after its timeouts fired (phase {op.phase.value})")
        if not any(isinstance(e, RecoveryFailed) for n, e in self.events if n == name):
            raise HarnessError(f"recovery client {name} failed without reporting RecoveryFailed")


def pending_acks(writer: LedgerWriter) -> dict[int, frozenset[BookieId]]:
    """Bookies that acknowledged each pending add (the core keeps ensemble indices)."""
    out: dict[int, frozenset[BookieId]] = {}
    for entry_id, pending in writer._pending.items():
        ensemble = writer.metadata.ensemble_for(entry_id)
        out[entry_id] = frozenset(ensemble[i] for i in pending.acked)
    return out


def pending_lacs(writer: LedgerWriter) -> dict[int, int]:
    """The LAC in each pending add's encoded entry (fixed when first sent; re-sent verbatim)."""
    return {entry_id: read_header(pending.body)[2] for entry_id, pending in writer._pending.items()}


def _new_store(metadata: LedgerMetadata) -> LedgerMetadataStore:
    store = LedgerMetadataStore(MemoryServer().connect())
    store.create_with_id(LEDGER_ID, metadata)
    return store
