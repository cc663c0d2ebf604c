"""A deterministic simulated cluster for driving the client cores in-process.

The bookies are conformance/sim_bookie.py's: the production `BookieCore` over a disk in memory,
journal appends durable at once, held in a `SimNetwork` (the same bookies and network the
conformance replays and the broker tests use). Metadata is real: `SimLedgerStore` runs the cores'
named changes through impl.metadata.ledger_store and impl.metadata.transitions over the in-memory
metadata store.

`SimCluster` drives the client cores (writer, reader, recovery) itself: it delivers in-flight
requests in an order drawn from a seeded random.Random, so every run is reproducible; a "silent"
bookie never answers (the driver feeds the core a None = timeout), a "drop-adds" bookie times out
every add but serves reads. `RecordingNetwork` is the network as the client API's transport, keeping
every request sent.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from conformance.sim_bookie import SimBookie, SimNetwork
from impl.bookie.client.ledger_update import LedgerChange, MetadataResult, UpdateMetadata
from impl.bookie.client.metadata_writes import apply_change
from impl.bookie.client.writer import BookieAnswered, ChooseReplacement, NoReplacement, ReplacementChosen, Send
from impl.bookie.protocol import AddRequest, Request, Response
from impl.metadata.ledger import LedgerMetadata
from impl.metadata.ledger_store import LedgerMetadataStore
from impl.metadata.memory import MemoryServer


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
        self.network = SimNetwork([*bookies, *spares])
        self.bookies: dict[str, SimBookie] = self.network.bookies
        self.silent: set[str] = self.network.silent
        self.spares = list(spares)
        self.store = SimLedgerStore(ledger_id, metadata)
        self.random = random.Random(seed)
        self.inflight: list[tuple[Any, str, Request]] = []
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
                    self.perform(client, client.step(ReplacementChosen(output.failed, choices[0])))
                else:
                    self.perform(client, client.step(NoReplacement(output.failed, "no spare bookie left")))
            elif isinstance(output, UpdateMetadata):
                self.perform(client, client.step(self.store.apply(output.change)))
            else:
                self.events.setdefault(id(client), []).append(output)

    def step(self) -> bool:
        if not self.inflight:
            return False
        client, bookie, request = self.inflight.pop(self.random.randrange(len(self.inflight)))
        response: Response | None
        if bookie in self.drop_adds and isinstance(request, AddRequest):
            response = None  # the shell's timeout fires
        else:
            response = self.network.answer(bookie, request)  # None from a silent bookie
        self.perform(client, client.step(BookieAnswered(bookie, request, response)))
        return True

    def run(self, max_steps: int = 100_000) -> None:
        for _ in range(max_steps):
            if not self.step():
                return
        raise AssertionError("the simulation did not quiesce")

    def events_of(self, client: Any) -> list[Any]:
        return self.events.get(id(client), [])


class RecordingNetwork(SimNetwork):
    """A SimNetwork as the client API's BookieTransport that keeps every request sent, in order."""

    def __init__(self, bookies: list[str]) -> None:
        super().__init__(bookies)
        self.sent: list[tuple[str, Request]] = []

    def send(self, bookie: str, request: Request, on_answer: Callable[[Response | None], None]) -> None:
        self.sent.append((bookie, request))
        super().send(bookie, request, on_answer)
