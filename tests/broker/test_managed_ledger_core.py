"""The pure managed-ledger core, driven over a simulated BookKeeper and metadata store.

The simulation abstracts BookKeeper as spec/fencing.tla does: a ledger is its stored entries,
a fenced flag and a closed end; recovery is one fence-and-close step. Each broker's core
gets its outputs performed one at a time (metadata and ledger operations) and its adds
completed one at a time, so hypothesis explores interleavings of a takeover with the old
owner's adds and rollovers; every input is an event given to the core's one entry point,
`ManagedLedgerCore.step`. Checked: completions in order with strictly increasing positions;
a reader of the list sees exactly the acknowledged entries in acknowledgement order
(AckedMessagesOnList); at most one broker can still get an add acknowledged (SingleWriter),
and an old owner that meets the fence is FENCED for good.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from impl.broker.ledger_list import LedgerInfo, LedgerList, Position
from impl.broker.managed_ledger_core import (
    Add,
    AddCompleted,
    AddFailed,
    Close,
    CloseLedger,
    CompleteAdd,
    CreateLedger,
    DeleteLedgers,
    FailAdd,
    Fence,
    LastLedgerRecovered,
    LastLedgerRecoveryFailed,
    LedgerClosed,
    LedgerCloseFailed,
    LedgerCreated,
    LedgerCreateFailed,
    LedgerListBadVersion,
    LedgerListRead,
    LedgerListReadFailed,
    LedgerListWriteFailed,
    LedgerListWritten,
    ManagedLedgerConfig,
    ManagedLedgerCore,
    ManagedLedgerState,
    NotifyConfirmed,
    Open,
    Opened,
    OpenFailed,
    Output,
    ReadLedgerList,
    RecoverLastLedger,
    RetentionChanged,
    SendAdd,
    Tick,
    TopicDeleted,
    Trim,
    TrimDone,
    WriteLedgerList,
)
from impl.broker.managed_ledger_errors import (
    EntryRefusedError,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerNotReadyError,
)

TOPIC = "public/default/persistent/sim"
SLOW = (ReadLedgerList, RecoverLastLedger, CreateLedger, WriteLedgerList, CloseLedger)


@dataclass
class SimLedger:
    entries: list[bytes] = field(default_factory=list)
    fenced: bool = False
    closed: int | None = None  # last entry id once closed
    deleted: bool = False


@dataclass
class World:
    ledgers: dict[int, SimLedger] = field(default_factory=dict)
    node: tuple[bytes, int] | None = None
    next_id: int = 1
    acked: list[bytes] = field(default_factory=list)  # every acknowledged add, in order
    acked_at: list[Position] = field(default_factory=list)  # ... and where it was stored
    consumed: int = 0  # the subscription's mark-delete position, as a count of acked entries

    def untrimmed(self) -> list[bytes]:
        """The acknowledged entries whose ledgers were not trimmed."""
        return [d for d, p in zip(self.acked, self.acked_at, strict=True) if not self.ledgers[p.ledger_id].deleted]

    def mark_delete(self) -> Position | None:
        return self.acked_at[self.consumed - 1] if self.consumed else None

    def topic_log(self) -> list[bytes]:
        """What a reader of the list sees: each ledger up to its closed end (all while open)."""
        if self.node is None:
            return []
        out: list[bytes] = []
        for info in LedgerList.decode(self.node[0]).ledgers:
            ledger = self.ledgers[info.ledger_id]
            assert not ledger.deleted, "a ledger on the list was deleted"
            out += ledger.entries if ledger.closed is None else ledger.entries[: ledger.closed + 1]
        return out

    def check_at_most_one_open_ledger(self) -> None:
        if self.node is None:
            return
        ids = [i.ledger_id for i in LedgerList.decode(self.node[0]).ledgers]
        assert all(self.ledgers[i].closed is not None for i in ids[:-1])


class Broker:
    def __init__(self, world: World, config: ManagedLedgerConfig) -> None:
        self.world = world
        self.core = ManagedLedgerCore(TOPIC, config)
        self.todo: deque[Output] = deque()
        self.inflight: deque[SendAdd] = deque()
        self.completed: list[tuple[int, Position]] = []
        self.failed: list[tuple[int, Exception]] = []
        self.tokens = 0
        self.now = 0.0

    def feed(self, outputs: list[Output]) -> None:
        for out in outputs:
            if isinstance(out, SLOW):
                self.todo.append(out)
            elif isinstance(out, SendAdd):
                self.inflight.append(out)
            elif isinstance(out, CompleteAdd):
                self.completed.append((out.token, out.position))
                self.world.acked.append(out.data)
                self.world.acked_at.append(out.position)
            elif isinstance(out, FailAdd):
                self.failed.append((out.token, out.error))
            elif isinstance(out, DeleteLedgers):
                for i in out.ledger_ids:
                    self.world.ledgers[i].deleted = True
            else:
                assert isinstance(out, NotifyConfirmed | Opened | OpenFailed | TrimDone)

    def add(self) -> int:
        token = self.tokens
        self.tokens += 1
        self.feed(self.core.step(Add(token, b"%d-%d" % (id(self) % 1000, token), self.now)))
        return token

    def complete_one(self) -> bool:
        if not self.inflight:
            return False
        send = self.inflight.popleft()
        ledger = self.world.ledgers[send.ledger_id]
        if ledger.fenced or ledger.deleted:
            self.feed(self.core.step(AddFailed(send.ledger_id, send.entry_id, True, "fenced")))
        else:
            assert send.entry_id == len(ledger.entries)
            ledger.entries.append(send.data)
            self.feed(self.core.step(AddCompleted(send.ledger_id, send.entry_id)))
        return True

    def step(self) -> bool:
        if not self.todo:
            return False
        out = self.todo.popleft()
        w, core = self.world, self.core
        if isinstance(out, ReadLedgerList):
            self.feed(core.step(LedgerListRead(*(w.node if w.node else (None, None)))))
        elif isinstance(out, RecoverLastLedger):
            ledger = w.ledgers[out.ledger_id]
            ledger.fenced = True
            if ledger.closed is None:
                ledger.closed = len(ledger.entries) - 1
            size = sum(len(e) for e in ledger.entries[: ledger.closed + 1])
            self.feed(core.step(LastLedgerRecovered(out.ledger_id, ledger.closed, size)))
        elif isinstance(out, CreateLedger):
            ledger_id, w.next_id = w.next_id, w.next_id + 1
            w.ledgers[ledger_id] = SimLedger()
            self.feed(core.step(LedgerCreated(ledger_id, self.now)))
        elif isinstance(out, WriteLedgerList):
            current = w.node[1] if w.node else None
            if current != out.expected_version:
                self.feed(core.step(LedgerListBadVersion(f"expected {out.expected_version}, is {current}")))
            else:
                version = 0 if current is None else current + 1
                w.node = (out.data, version)
                self.feed(core.step(LedgerListWritten(version)))
        elif isinstance(out, CloseLedger):
            ledger = w.ledgers[out.ledger_id]
            written = len(ledger.entries) - 1
            if ledger.closed is None or ledger.closed == written:  # spec Rollover closeOk
                ledger.closed = written
                size = sum(len(e) for e in ledger.entries)
                self.feed(core.step(LedgerClosed(out.ledger_id, written, size, self.now)))
            else:
                self.feed(core.step(LedgerCloseFailed(out.ledger_id, False, "closed elsewhere")))
        w.check_at_most_one_open_ledger()
        return True

    def settle(self) -> None:
        while self.step() or self.complete_one():
            pass

    def open(self) -> None:
        self.feed(self.core.step(Open()))


def opened(world: World, config: ManagedLedgerConfig) -> Broker:
    b = Broker(world, config)
    b.open()
    b.settle()
    assert b.core.state is ManagedLedgerState.OPEN
    return b


CONFIG = ManagedLedgerConfig(max_entries_per_ledger=2)


def test_pipelined_adds_complete_in_order_across_rollovers() -> None:
    world = World()
    b = opened(world, CONFIG)
    tokens = [b.add() for _ in range(7)]
    assert len(b.inflight) == 2  # the rest wait for the rollover
    b.settle()
    assert [t for t, _ in b.completed] == tokens
    positions = [p for _, p in b.completed]
    assert positions == sorted(positions) and [p.entry_id for p in positions] == [0, 1, 0, 1, 0, 1, 0]
    assert world.topic_log() == world.acked


def test_adds_queue_during_rollover_and_go_to_the_new_ledger() -> None:
    world = World()
    b = opened(world, CONFIG)
    b.add()
    b.add()
    b.add()  # the ledger is full: this one waits
    assert b.core.phase.value == "draining" and len(b.inflight) == 2
    b.complete_one()
    b.complete_one()  # the last in-flight add completed: the core closes the ledger
    assert isinstance(b.todo[0], CloseLedger)
    b.settle()
    assert [p for _, p in b.completed][-1].entry_id == 0


def test_takeover_then_old_owner_add_fails_fenced_for_good() -> None:
    world = World()
    old = opened(world, CONFIG)
    old.add()
    old.settle()
    new = opened(world, CONFIG)
    token = old.add()
    old.settle()
    assert old.failed and old.failed[0][0] == token
    error = old.failed[0][1]
    assert isinstance(error, ManagedLedgerFencedError) and TOPIC in str(error) and not error.rejected
    assert old.core.state is ManagedLedgerState.FENCED
    later = old.add()  # refused at once, nothing sent
    assert old.failed[-1][0] == later and old.failed[-1][1].rejected and not old.inflight
    assert new.core.state is ManagedLedgerState.OPEN
    assert world.topic_log() == world.acked


def test_bad_version_on_rollover_is_terminal_and_deletes_the_orphan() -> None:
    world = World()
    old = opened(world, ManagedLedgerConfig(max_entries_per_ledger=1))
    old.add()
    old.settle()
    opened(world, CONFIG)  # takeover: recovers old's ledger with the same end
    old.add()  # full ledger: close succeeds (same end), create, then the list write fails
    old.settle()
    assert old.core.state is ManagedLedgerState.FENCED
    assert "ledger list changed under us" in old.core.fence_reason
    orphan = max(i for i, ledger in world.ledgers.items() if ledger.deleted)
    assert world.node is not None
    assert orphan not in [i.ledger_id for i in LedgerList.decode(world.node[0]).ledgers]
    assert orphan > max(i.ledger_id for i in LedgerList.decode(world.node[0]).ledgers)  # created by old
    assert isinstance(old.failed[-1][1], ManagedLedgerFencedError)


def test_adds_queued_during_a_rollover_wait_for_its_list_write() -> None:
    """spec/fencing.tla's multi-step rollover (QueuedAddsAwaitListWrite): adds that arrive while a rollover
    closes the ledger, creates the next and writes the list are sent only once the list names the new
    ledger, in order; if the list write meets a takeover they all fail, none of them sent."""
    world = World()
    b = opened(world, CONFIG)
    b.add()
    b.add()
    b.settle()
    queued = [b.add(), b.add()]  # the ledger is full: a rollover starts, both adds wait
    while not isinstance(b.todo[0], WriteLedgerList):
        assert not b.inflight
        b.step()
    new = b.core.next_ledger
    assert new is not None and not b.inflight and [p.token for p in b.core.queued] == queued
    b.step()  # the list is written: now the queued adds go to the new ledger
    assert [(s.ledger_id, s.entry_id) for s in b.inflight] == [(new, 0), (new, 1)]
    b.settle()
    assert [t for t, _ in b.completed][-2:] == queued and world.topic_log() == world.acked

    world = World()
    old = opened(world, ManagedLedgerConfig(max_entries_per_ledger=1))
    old.add()
    old.settle()
    opened(world, CONFIG)  # a takeover: the old owner's rollover will meet its list
    queued = [old.add(), old.add()]
    while not isinstance(old.todo[0], WriteLedgerList):
        old.step()
    orphan = old.core.next_ledger
    assert orphan is not None
    old.step()  # bad version: FENCED, the queued adds fail, rejected (never sent)
    assert old.core.state is ManagedLedgerState.FENCED and not old.inflight
    assert [t for t, _ in old.failed] == queued
    assert all(isinstance(e, ManagedLedgerFencedError) and e.rejected for _, e in old.failed)
    assert world.ledgers[orphan].entries == [] and world.ledgers[orphan].deleted


def test_a_failed_writers_ledger_ends_where_its_close_says() -> None:
    world = World()
    b = opened(world, ManagedLedgerConfig())
    tokens = [b.add() for _ in range(3)]
    b.complete_one()
    stored = b.inflight.popleft()  # reached the bookies, but the writer failed before the ack
    world.ledgers[stored.ledger_id].entries.append(stored.data)
    b.feed(b.core.step(AddFailed(stored.ledger_id, stored.entry_id, False, "no bookie to replace")))
    lost = b.inflight.popleft()
    b.feed(b.core.step(AddFailed(lost.ledger_id, lost.entry_id, False, "no bookie to replace")))
    b.settle()  # the close keeps entry 1; entry 2 goes to the next ledger
    assert [t for t, _ in b.completed] == tokens
    positions = [p for _, p in b.completed]
    assert positions[1] == Position(stored.ledger_id, 1) and positions[2].ledger_id > stored.ledger_id
    assert world.topic_log() == world.acked
    assert b.core.state is ManagedLedgerState.OPEN


def test_a_bookies_permanent_refusal_fails_that_add_alone_and_only_once() -> None:
    """EBADREQ (an entry over the bookie's frame): the refused add fails, the adds after it are
    stored on the next ledger, nothing is retried in a loop (a 5 MiB message once spun forever)."""
    world = World()
    b = opened(world, ManagedLedgerConfig())
    tokens = [b.add() for _ in range(3)]
    b.complete_one()
    refused = b.inflight.popleft()
    b.feed(b.core.step(AddFailed(refused.ledger_id, refused.entry_id, False, "EBADREQ", refused=True)))
    after = b.inflight.popleft()  # the writer stopped: the add after it fails with it, not refused
    b.feed(b.core.step(AddFailed(after.ledger_id, after.entry_id, False, "EBADREQ")))
    b.settle()
    assert [t for t, _ in b.completed] == [tokens[0], tokens[2]]
    assert [(t, type(e)) for t, e in b.failed] == [(tokens[1], EntryRefusedError)]
    assert b.core.refused_adds == 1 and not b.core.retrying
    assert world.topic_log() == world.acked
    b.add()
    b.settle()
    assert len(b.completed) == 3 and b.core.state is ManagedLedgerState.OPEN


def test_a_writer_failure_during_trimming_closes_the_ledger_afterwards() -> None:
    world = World()
    b = opened(world, ManagedLedgerConfig(max_entries_per_ledger=2))
    for _ in range(3):
        b.add()
    b.settle()  # a closed ledger with two entries, the current one with one
    token = b.add()
    send = b.inflight.popleft()
    b.feed(b.core.step(Trim(0, None, cursors=False)))  # a list write is in flight
    b.feed(b.core.step(AddFailed(send.ledger_id, send.entry_id, False, "no bookie")))
    b.settle()  # the trim finishes, then the failed ledger is closed and the add resent
    assert b.completed[-1][0] == token and b.completed[-1][1].ledger_id > send.ledger_id
    assert b.core.state is ManagedLedgerState.OPEN and not b.core.pending and not b.core.queued
    assert world.topic_log() == world.acked[2:]  # the two trimmed entries are gone


def test_open_with_bad_version_fails_fenced() -> None:
    world = World()
    a = opened(world, CONFIG)
    b = Broker(world, CONFIG)
    b.open()
    b.step()  # read the list
    b.step()  # recover a's ledger
    c = opened(world, CONFIG)  # a third broker completes its takeover first
    b.settle()
    assert b.core.state is ManagedLedgerState.FENCED
    assert c.core.state is ManagedLedgerState.OPEN and a.core.state is ManagedLedgerState.OPEN
    a.add()
    a.settle()
    assert a.core.state is ManagedLedgerState.FENCED


def test_close_fails_pending_adds_and_refuses_new_ones() -> None:
    world = World()
    b = opened(world, CONFIG)
    b.add()
    b.feed(b.core.step(Close()))
    assert isinstance(b.failed[0][1], ManagedLedgerClosedError) and not b.failed[0][1].rejected
    b.add()
    assert isinstance(b.failed[-1][1], ManagedLedgerClosedError) and b.failed[-1][1].rejected


def test_rollover_by_age_and_tick() -> None:
    world = World()
    b = opened(world, ManagedLedgerConfig(max_ledger_age_s=10))
    b.add()
    b.settle()
    first = b.core.current
    assert first is not None
    b.now = 9
    assert b.core.step(Tick(b.now)) == []  # young enough
    b.now = 11
    b.feed(b.core.step(Tick(b.now)))
    assert list(b.todo) == [CloseLedger(first)]
    b.settle()
    assert b.core.current not in (None, first)
    b.now = 30
    assert b.core.step(Tick(b.now)) == []  # an empty ledger is not rolled over, however old


def test_trim_needs_every_cursor_past_a_closed_ledger() -> None:
    world = World()
    b = opened(world, ManagedLedgerConfig(max_entries_per_ledger=1))
    for _ in range(3):
        b.add()
    b.settle()
    ledgers = [p.ledger_id for _, p in b.completed]
    assert b.core.step(Trim(0, Position(ledgers[0], -1), cursors=True)) == [TrimDone(())]
    b.feed(b.core.step(Trim(0, Position(ledgers[1], 0), cursors=True)))
    b.settle()
    assert world.ledgers[ledgers[0]].deleted and world.ledgers[ledgers[1]].deleted
    assert not world.ledgers[ledgers[2]].deleted  # the current ledger is never trimmed
    assert world.node is not None
    assert [i.ledger_id for i in LedgerList.decode(world.node[0]).ledgers] == [ledgers[2]]


def test_failures_to_open_leave_it_closed_and_say_what_to_do() -> None:
    core = ManagedLedgerCore(TOPIC, CONFIG)
    assert core.step(Open()) == [ReadLedgerList()]
    with pytest.raises(ManagedLedgerError, match="cannot open: state is reading"):
        core.step(Open())
    (failed,) = core.step(LedgerListReadFailed("ConnectionLoss"))
    assert isinstance(failed, OpenFailed) and "cannot read its ledger list (ConnectionLoss); retry" in str(failed.error)
    assert core.state is ManagedLedgerState.CLOSED
    core.step(Open())
    (failed,) = core.step(LedgerListRead(b"not a ledger list", 3))
    assert isinstance(failed, OpenFailed) and "unreadable" in str(failed.error)
    core.step(Open())
    listed = LedgerList((LedgerInfo(7),), {}).encode()
    assert core.step(LedgerListRead(listed, 0)) == [RecoverLastLedger(7)]
    (failed,) = core.step(LastLedgerRecoveryFailed(7, "no bookie answered"))
    assert isinstance(failed, OpenFailed) and "recovery of its last ledger 7 failed (no bookie answered)" in str(
        failed.error
    )
    core.step(Open())
    assert core.step(LedgerListRead(None, None)) == [CreateLedger()]
    (failed,) = core.step(LedgerCreateFailed("not enough bookies"))
    assert isinstance(failed, OpenFailed) and "start bookies and retry" in str(failed.error)
    assert core.state is ManagedLedgerState.CLOSED


def test_a_failed_ledger_creation_on_rollover_fails_the_waiting_adds() -> None:
    world = World()
    b = opened(world, CONFIG)
    b.add()
    b.add()
    b.settle()
    token = b.add()  # the ledger is full: close it, then create the next one
    b.step()  # the close
    assert isinstance(b.todo[0], CreateLedger)
    b.todo.popleft()
    b.feed(b.core.step(LedgerCreateFailed("not enough bookies")))
    assert b.failed[-1][0] == token and isinstance(b.failed[-1][1], ManagedLedgerNotReadyError)
    assert b.core.state is ManagedLedgerState.OPEN and b.core.current is None
    b.add()  # the next add tries to create a ledger again
    b.settle()
    assert len(b.completed) == 3


def test_a_list_write_of_unknown_outcome_fences_like_a_bad_version() -> None:
    world = World()
    b = opened(world, ManagedLedgerConfig(max_entries_per_ledger=1))
    b.add()
    b.settle()
    b.add()  # full: close, create, write the list
    while not isinstance(b.todo[0], WriteLedgerList):
        b.step()
    b.todo.popleft()
    b.feed(b.core.step(LedgerListWriteFailed("SessionExpired: the session expired")))
    assert b.core.state is ManagedLedgerState.FENCED and "SessionExpired" in b.core.fence_reason
    assert isinstance(b.failed[-1][1], ManagedLedgerFencedError)


def test_fence_from_outside_retention_and_deletion() -> None:
    world = World()
    b = opened(world, CONFIG)
    assert b.core.step(RetentionChanged(5, 1)) == []
    assert (b.core.config.retention_minutes, b.core.config.retention_size_mb) == (5, 1)
    token = b.add()
    b.feed(b.core.step(Fence("the cursor's ledger was taken over")))
    assert b.failed[-1][0] == token and b.core.state is ManagedLedgerState.FENCED
    assert b.core.step(Fence("again")) == [] and b.core.fence_reason == "the cursor's ledger was taken over"
    with pytest.raises(ManagedLedgerFencedError):
        b.core.step(Trim(0, None, cursors=False))
    b.feed(b.core.step(Close()))
    assert b.core.step(TopicDeleted()) == [] and b.core.state is ManagedLedgerState.DELETED


def test_an_event_of_another_core_is_refused() -> None:
    with pytest.raises(TypeError, match="not a managed-ledger event"):
        ManagedLedgerCore(TOPIC, CONFIG).step(ReadLedgerList())  # type: ignore[arg-type]


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="ack_quorum <= write_quorum <= ensemble"):
        ManagedLedgerConfig(ensemble=2, write_quorum=3)
    with pytest.raises(ValueError, match="rollover limits"):
        ManagedLedgerConfig(max_entries_per_ledger=0)
    with pytest.raises(ValueError, match="retention"):
        ManagedLedgerConfig(retention_minutes=-1)


# Adds and single steps interleave the brokers finely; "settle" runs one broker until it is
# quiet, so that rollovers and trims complete often enough to race the other broker.
OPS = st.sampled_from(
    ["a_add", "a_add", "a_complete", "a_step", "a_settle", "a_trim"]
    + ["b_add", "b_add", "b_complete", "b_step", "b_settle", "b_trim", "b_open"]
    + ["x_consume", "x_consume"]
)


@settings(max_examples=1000, deadline=None)
@given(ops=st.lists(OPS, max_size=80), max_entries=st.integers(min_value=1, max_value=3))
def test_takeover_interleavings(ops: list[str], max_entries: int) -> None:
    world = World()
    config = ManagedLedgerConfig(max_entries_per_ledger=max_entries)
    a = opened(world, config)
    b = Broker(world, config)
    brokers = {"a": a, "b": b}
    for op in ops:
        who, what = op.split("_")
        broker = brokers.get(who, a)
        if what == "open":
            if b.core.state is ManagedLedgerState.CLOSED:
                b.open()
        elif what == "consume":
            world.consumed = min(world.consumed + 1, len(world.acked))
        elif what == "trim":
            if broker.core.state is ManagedLedgerState.OPEN:
                broker.feed(broker.core.step(Trim(0, world.mark_delete(), cursors=True)))
        elif what == "add":
            if broker.core.state is not ManagedLedgerState.CLOSED:
                broker.add()
        elif what == "complete":
            broker.complete_one()
        elif what == "settle":
            broker.settle()
        else:
            broker.step()
        # AckedMessagesOnList at every step: the list shows exactly the acknowledged entries
        # not trimmed; trimming removed a prefix of them, and only consumed ones
        trimmed = len(world.acked) - len(world.untrimmed())
        assert world.topic_log() == world.untrimmed() == world.acked[trimmed:]
        assert trimmed <= world.consumed
    for broker in brokers.values():
        broker.settle()
        positions = [p for _, p in broker.completed]
        assert positions == sorted(set(positions))  # strictly increasing
        tokens = [t for t, _ in broker.completed]
        assert tokens == sorted(tokens)  # completions in add order
    assert world.topic_log() == world.untrimmed()
    # SingleWriter: a fresh add is acknowledged for at most one broker
    acked_by = []
    for name, broker in brokers.items():
        if broker.core.state is ManagedLedgerState.OPEN:
            before = len(broker.completed)
            broker.add()
            broker.settle()
            if len(broker.completed) > before:
                acked_by.append(name)
    assert len(acked_by) <= 1
    if b.core.state is ManagedLedgerState.OPEN:
        assert a.core.state is ManagedLedgerState.FENCED  # the old owner met the fence
        a.add()
        assert isinstance(a.failed[-1][1], ManagedLedgerFencedError)
    assert world.topic_log() == world.untrimmed()
