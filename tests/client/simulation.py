"""A deterministic simulated cluster for driving the client cores in-process.

Until H7's pure bookie core (impl/bookie/core.py) lands, `SimBookie` stands in for it:
a few lines following docs/protocol-rules.md's "The bookie" section (key check, fence flag,
recovery adds, read of -1). Metadata is real: `SimLedgerStore` runs the cores' named
changes through impl.metadata.ledger_store and impl.metadata.transitions over the
in-memory metadata store.
The network delivers in-flight requests in an order drawn from a seeded random.Random,
so every run is reproducible; a "silent" bookie never answers (the driver feeds the
core a None = timeout), a "drop-adds" bookie times out every add but serves reads.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from impl.bookie.client.ledger_update import LedgerChange, MetadataResult, UpdateMetadata
from impl.bookie.client.metadata_writes import apply_change
from impl.bookie.client.writer import ChooseReplacement, Send
from impl.bookie.entry_format import read_header
from impl.bookie.protocol import (
    LAST_ENTRY,
    AddRequest,
    AddResponse,
    ErrorCode,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
)
from impl.metadata.ledger import LedgerMetadata
from impl.metadata.ledger_store import LedgerMetadataStore
from impl.metadata.memory import MemoryServer


@dataclass
class _Ledger:
    master_key: bytes
    fenced: bool = False
    entries: dict[int, bytes] = field(default_factory=dict)
    lac: int = -1


class SimBookie:
    def __init__(self) -> None:
        self.ledgers: dict[int, _Ledger] = {}

    def handle(self, request: Request) -> Response:
        if isinstance(request, AddRequest):
            ledger = self.ledgers.setdefault(request.ledger_id, _Ledger(request.master_key))
            if ledger.master_key != request.master_key:
                return AddResponse(request.ledger_id, request.entry_id, ErrorCode.EUA)
            if ledger.fenced and not request.recovery:
                return AddResponse(request.ledger_id, request.entry_id, ErrorCode.EFENCED)
            ledger.entries[request.entry_id] = request.body
            ledger.lac = max(ledger.lac, read_header(request.body)[2])
            return AddResponse(request.ledger_id, request.entry_id, ErrorCode.EOK)
        if isinstance(request, ReadRequest):
            if request.fence:
                assert request.master_key is not None
                ledger = self.ledgers.setdefault(request.ledger_id, _Ledger(request.master_key))
                if ledger.master_key != request.master_key:
                    return ReadResponse(request.ledger_id, request.entry_id, ErrorCode.EUA)
                ledger.fenced = True
            found = self.ledgers.get(request.ledger_id)
            if found is None:
                return ReadResponse(request.ledger_id, request.entry_id, ErrorCode.ENOLEDGER)
            entry_id = max(found.entries, default=-1) if request.entry_id == LAST_ENTRY else request.entry_id
            if entry_id not in found.entries:
                return ReadResponse(request.ledger_id, request.entry_id, ErrorCode.ENOENTRY)
            return ReadResponse(request.ledger_id, entry_id, ErrorCode.EOK, found.entries[entry_id])
        raise TypeError(f"SimBookie does not serve {type(request).__name__}")


class SimLedgerStore:
    """One ledger's metadata in the real LedgerMetadataStore (real transitions) over the in-memory store."""

    def __init__(self, ledger_id: int, metadata: LedgerMetadata) -> None:
        self.ledger_id = ledger_id
        self.ledgers = LedgerMetadataStore(MemoryServer().connect())
        self.ledgers.create_with_id(ledger_id, metadata)

    @property
    def metadata(self) -> LedgerMetadata:
        return self.ledgers.read(self.ledger_id)[0]

    @property
    def version(self) -> int:
        return self.ledgers.read(self.ledger_id)[1]

    def apply(self, change: LedgerChange) -> MetadataResult:
        return apply_change(self.ledgers, change)


class SimCluster:
    def __init__(
        self,
        ledger_id: int,
        bookies: list[str],
        metadata: LedgerMetadata,
        *,
        spares: tuple[str, ...] = (),
        seed: int = 0,
    ) -> None:
        self.bookies = {b: SimBookie() for b in [*bookies, *spares]}
        self.spares = list(spares)
        self.store = SimLedgerStore(ledger_id, metadata)
        self.random = random.Random(seed)
        self.inflight: list[tuple[Any, str, Request]] = []
        self.silent: set[str] = set()
        self.drop_adds: set[str] = set()
        self.events: dict[int, list[Any]] = {}

    def perform(self, client: Any, outputs: list[Any]) -> None:
        """Carry out a core's outputs; keep the others (completions, results) as its events."""
        for output in outputs:
            if isinstance(output, Send):
                self.inflight.append((client, output.bookie, output.request))
            elif isinstance(output, ChooseReplacement):
                choices = [b for b in self.spares if b not in output.exclude]
                if choices:  # spares are shared: several clients may pick the same one
                    self.perform(client, client.on_replacement(output.failed, choices[0]))
                else:
                    self.perform(client, client.on_no_replacement(output.failed, "no spare bookie left"))
            elif isinstance(output, UpdateMetadata):
                self.perform(client, client.on_metadata_result(self.store.apply(output.change)))
            else:
                self.events.setdefault(id(client), []).append(output)

    def step(self) -> bool:
        if not self.inflight:
            return False
        client, bookie, request = self.inflight.pop(self.random.randrange(len(self.inflight)))
        response: Response | None
        if bookie in self.silent or (bookie in self.drop_adds and isinstance(request, AddRequest)):
            response = None  # the shell's timeout fires
        else:
            response = self.bookies[bookie].handle(request)
        self.perform(client, client.receive(bookie, request, response))
        return True

    def run(self, max_steps: int = 100_000) -> None:
        for _ in range(max_steps):
            if not self.step():
                return
        raise AssertionError("the simulation did not quiesce")

    def events_of(self, client: Any) -> list[Any]:
        return self.events.get(id(client), [])


class InProcessTransport:
    """A BookieTransport over in-process bookies: answers inline; a silent bookie answers None (timeout)."""

    def __init__(self, bookies: dict[str, SimBookie]) -> None:
        self.bookies = bookies
        self.silent: set[str] = set()
        self.sent: list[tuple[str, Request]] = []

    def send(self, bookie: str, request: Any, on_answer: Any) -> None:
        self.sent.append((bookie, request))
        if bookie in self.silent or bookie not in self.bookies:
            on_answer(None)
        else:
            on_answer(self.bookies[bookie].handle(request))
