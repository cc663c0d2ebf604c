"""A writer's close and a recovery's close agree, in every ordering of the two (issue 26, item 1).

Driven through the pure cores only: the ledger writer (impl/bookie/client/writer.py), the recovery op
(recovery.py), one bookie core per bookie (impl/bookie/core.py, in conformance/sim_bookie.py's simulated
bookies: journal appends durable at once) and the real metadata transitions over the in-memory store.
Hypothesis chooses the interleaving: which message in flight is answered next, when the writer adds,
when the recovery starts, when the writer closes (before, while or after it is fenced, before, while or
after the recovery closes).

Whatever the order, once both are done:
- the recovery's close is what is stored, and the ledger is CLOSED;
- the writer's close either returns exactly the stored metadata, whose end is the writer's LAC and
  length, or raises MetadataVersionError carrying that stored metadata, whose end is another one;
- every entry acknowledged to the writer lies inside the closed ledger;
- every later close of the writer answers the same, and no answer contradicts the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.sim_bookie import SimNetwork
from impl.bookie.client.errors import MetadataVersionError
from impl.bookie.client.ledger_update import UpdateMetadata
from impl.bookie.client.metadata_writes import apply_change
from impl.bookie.client.recovery import RecoveryDone, RecoveryFailed, RecoveryOp
from impl.bookie.client.writer import (
    Add,
    AddCompleted,
    AddFailed,
    BookieAnswered,
    ChooseReplacement,
    Close,
    CloseFailed,
    LedgerWriter,
    ReplacementChosen,
    Send,
    Start,
    WriterClosed,
    WriterState,
)
from impl.bookie.protocol import ReadRequest, Request
from impl.metadata import transitions
from impl.metadata.ledger import LedgerMetadata, LedgerState
from impl.metadata.ledger_store import LedgerMetadataStore
from impl.metadata.memory import MemoryServer

LEDGER = 11
PASSWORD = b"pw"
BOOKIES = ("b0:3181", "b1:3181", "b2:3181", "b3:3181", "b4:3181")
QUORUMS = [(3, 3, 2), (3, 2, 2), (2, 2, 1), (3, 3, 3), (4, 3, 2)]  # (E, Qw, Qa)


@dataclass
class World:
    """The bookies, the metadata store, the messages in flight and what each client was told."""

    metadata: LedgerMetadata
    store: LedgerMetadataStore = field(default_factory=lambda: LedgerMetadataStore(MemoryServer().connect()))
    network: SimNetwork = field(default_factory=lambda: SimNetwork(BOOKIES))
    in_flight: list[tuple[Any, str, Request]] = field(default_factory=list)
    events: dict[int, list[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.store.create_with_id(LEDGER, self.metadata)

    def stored(self) -> LedgerMetadata:
        return self.store.read(LEDGER)[0]

    def perform(self, client: Any, outputs: list[Any]) -> None:
        for output in outputs:
            if isinstance(output, Send):
                self.in_flight.append((client, output.bookie, output.request))
            elif isinstance(output, UpdateMetadata):
                self.perform(client, client.step(apply_change(self.store, output.change)))
            elif isinstance(output, ChooseReplacement):
                spare = next(b for b in BOOKIES if b not in output.exclude)
                self.perform(client, client.step(ReplacementChosen(output.failed, spare)))
            else:
                self.events.setdefault(id(client), []).append(output)

    def deliver(self, index: int) -> None:
        client, bookie, request = self.in_flight.pop(index % len(self.in_flight))
        response = self.network.answer(bookie, request)
        assert response is not None, f"{bookie} is reachable"
        self.perform(client, client.step(BookieAnswered(bookie, request, response)))

    def of(self, client: Any, *kinds: type) -> list[Any]:
        return [e for e in self.events.get(id(client), []) if isinstance(e, kinds)]


def close_answer(world: World, writer: LedgerWriter) -> WriterClosed | CloseFailed:
    """Ask the writer to close and return its answer (performing the metadata write it asks for)."""
    before = len(world.of(writer, WriterClosed, CloseFailed))
    world.perform(writer, writer.step(Close()))
    answers = world.of(writer, WriterClosed, CloseFailed)
    assert len(answers) == before + 1, f"one close, one answer: {answers[before:]}"
    answer: WriterClosed | CloseFailed = answers[-1]
    return answer


ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("deliver"), st.integers(0, 1_000)),
        st.tuples(st.just("add"), st.just(0)),
        st.tuples(st.just("recover"), st.just(0)),
        st.tuples(st.just("close"), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(
    quorums=st.sampled_from(QUORUMS),
    acknowledged_first=st.integers(0, 3),
    actions=ACTIONS,
    drain_order=st.lists(st.integers(0, 1_000), max_size=200),
)
def test_a_writers_close_agrees_with_recoverys_close_in_every_ordering(
    quorums: tuple[int, int, int], acknowledged_first: int, actions: list[tuple[str, int]], drain_order: list[int]
) -> None:
    e, qw, qa = quorums
    world = World(transitions.create(e, qw, qa, BOOKIES[:e], password=PASSWORD))
    writer = LedgerWriter(LEDGER, world.stored())
    for i in range(acknowledged_first):  # entries acknowledged before anything else happens
        world.perform(writer, writer.step(Add(b"first-%d" % i)))
    while world.in_flight:
        world.deliver(0)
    recovery: RecoveryOp | None = None
    closes: list[WriterClosed | CloseFailed] = []
    adds = 0

    def start_recovery() -> RecoveryOp:
        op = RecoveryOp(LEDGER, world.stored())
        world.perform(op, op.step(Start()))
        return op

    for action, n in actions:
        if action == "deliver" and world.in_flight:
            world.deliver(n)
        elif action == "add" and adds < 8:
            adds += 1
            world.perform(writer, writer.step(Add(b"then-%d" % adds)))
        elif action == "recover" and recovery is None:
            recovery = start_recovery()
        elif action == "close" and not closes:
            closes.append(close_answer(world, writer)) if writer.state is not WriterState.CLOSING else None
    if recovery is None:
        recovery = start_recovery()
    draws = iter(drain_order)
    while world.in_flight:  # every message is answered, in an order Hypothesis chose
        world.deliver(next(draws, 0))
    if not closes:
        closes.append(close_answer(world, writer))

    stored = world.stored()
    assert stored.state is LedgerState.CLOSED
    (recovered,) = world.of(recovery, RecoveryDone, RecoveryFailed)
    assert isinstance(recovered, RecoveryDone), recovered
    assert recovered.metadata == stored, "the recovery's close is what is stored"

    first = closes[0]
    if isinstance(first, WriterClosed):
        assert first.metadata == stored, "a successful close returns exactly what is stored"
        assert (stored.last_entry_id, stored.length) == (writer.last_add_confirmed, writer.length)
    else:
        error = first.error
        assert isinstance(error, MetadataVersionError), error
        assert error.stored == stored
        assert (stored.last_entry_id, stored.length) != (writer.last_add_confirmed, writer.length)
        assert (error.last_add_confirmed, error.length) == (writer.last_add_confirmed, writer.length)
        assert writer.metadata == stored, "the failed writer's view is the store's"
    acknowledged = [a.entry_id for a in world.of(writer, AddCompleted)]
    assert acknowledged == list(range(len(acknowledged))), "completions in entry order"
    assert writer.last_add_confirmed <= stored.last_entry_id
    assert all(entry <= stored.last_entry_id for entry in acknowledged)
    failed_after_ack = {a.entry_id for a in world.of(writer, AddFailed)} & set(acknowledged)
    assert not failed_after_ack, f"entries both acknowledged and failed: {failed_after_ack}"

    for _ in range(2):  # every later close says the same
        again = close_answer(world, writer)
        assert type(again) is type(first)
        if isinstance(again, WriterClosed):
            assert again.metadata == stored
        else:
            assert isinstance(first, CloseFailed) and again.error is first.error
    assert world.stored() == stored, "a later close writes nothing"


def test_a_fenced_writer_closed_before_the_recovery_closes_wins_and_the_recovery_adopts() -> None:
    """The ordering where the fenced writer's close comes first: it writes CLOSED at its LAC over
    IN_RECOVERY (BookKeeper's handle closes itself on an unrecoverable add error), and the recovery,
    which had found one more entry, adopts that close instead of its own."""
    world = World(transitions.create(3, 3, 3, BOOKIES[:3], password=PASSWORD))
    writer = LedgerWriter(LEDGER, world.stored())
    world.perform(writer, writer.step(Add(b"e0")))
    while world.in_flight:
        world.deliver(0)
    world.perform(writer, writer.step(Add(b"e1")))  # Qa=3: reaches b0 and b1 now, b2 later
    world.deliver(0)
    world.deliver(0)
    recovery = RecoveryOp(LEDGER, world.stored())
    world.perform(recovery, recovery.step(Start()))
    held = world.in_flight.pop(0)  # e1 to b2, held back until the end
    fencing = [i for i, (_, _, r) in enumerate(world.in_flight) if isinstance(r, ReadRequest) and r.fence]
    assert len(fencing) == 3
    for _ in fencing:  # the fencing reads reach every bookie; the recovery's next steps wait
        world.deliver(next(i for i, (_, _, r) in enumerate(world.in_flight) if isinstance(r, ReadRequest) and r.fence))
    world.perform(writer, writer.step(Add(b"e2")))  # the fence reaches the writer through a new add
    while not world.of(writer, AddFailed):
        world.deliver(next(i for i, (client, _, _) in enumerate(world.in_flight) if client is writer))
    assert writer.state is WriterState.FAILED and writer.last_add_confirmed == 0
    assert world.stored().state is LedgerState.IN_RECOVERY

    first = close_answer(world, writer)

    assert isinstance(first, WriterClosed) and (first.metadata.last_entry_id, first.metadata.state) == (
        0,
        LedgerState.CLOSED,
    )
    world.in_flight.append(held)
    while world.in_flight:
        world.deliver(0)
    (done,) = world.of(recovery, RecoveryDone)
    assert done.adopted and done.metadata == world.stored() == first.metadata


def test_a_fenced_writer_closed_after_the_recovery_closed_further_gets_the_version_error() -> None:
    """The other ordering: the recovery finds entry 1 (on two bookies, never acknowledged with Qa=3)
    and closes at 1 first; the fenced writer, whose LAC is 0, is told the conflict, every time."""
    world = World(transitions.create(3, 3, 3, BOOKIES[:3], password=PASSWORD))
    writer = LedgerWriter(LEDGER, world.stored())
    world.perform(writer, writer.step(Add(b"e0")))
    while world.in_flight:
        world.deliver(0)
    world.perform(writer, writer.step(Add(b"e1")))
    world.deliver(0)
    world.deliver(0)
    world.in_flight.pop(0)  # e1 to b2 is lost
    recovery = RecoveryOp(LEDGER, world.stored())
    world.perform(recovery, recovery.step(Start()))
    while world.in_flight:
        world.deliver(0)
    (done,) = world.of(recovery, RecoveryDone)
    assert not done.adopted and done.metadata.last_entry_id == 1
    world.perform(writer, writer.step(Add(b"e2")))  # the writer learns it is fenced
    while world.in_flight:
        world.deliver(0)
    assert writer.state is WriterState.FAILED

    answers = [close_answer(world, writer) for _ in range(3)]

    assert all(isinstance(a, CloseFailed) for a in answers)
    errors = [a.error for a in answers if isinstance(a, CloseFailed)]
    assert isinstance(errors[0], MetadataVersionError) and all(e is errors[0] for e in errors)
    assert errors[0].stored == world.stored() == done.metadata
    assert "already CLOSED at entry 1" in str(errors[0]) and "close with last entry 0" in str(errors[0])
