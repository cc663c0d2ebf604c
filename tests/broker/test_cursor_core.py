"""The durable cursor's pure core (impl/broker/cursor_core.py) alone, with an explicit clock: every input
carries `now`, every output is checked. No threads, no sleeps, no BookKeeper, no metadata store."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from impl.broker.cursor_core import (
    AppendCursorState,
    CancelFlushTimer,
    Close,
    CloseCursorLedger,
    CompleteRequest,
    CreateCursorLedger,
    CursorLedgerCreated,
    CursorLedgerCreateFailed,
    CursorLedgerRecovered,
    CursorLedgerRecoveryFailed,
    CursorNodeDeleted,
    CursorNodeDeleteFailed,
    CursorNodeWriteFailed,
    CursorNodeWritten,
    CursorState,
    CursorStateAppended,
    CursorStateAppendFailed,
    CursorStatus,
    Delete,
    DeleteCursor,
    DeleteCursorLedger,
    DeleteCursorNode,
    Event,
    FailRequest,
    FenceManagedLedger,
    Io,
    ManagedCursorCore,
    ManagedLedgerFenced,
    MarkDelete,
    NodeError,
    NodeRead,
    NodeReadFailed,
    Open,
    Opened,
    OpenFailed,
    Output,
    Persist,
    PersistFailed,
    ReadCursorNode,
    RecoverCursorLedger,
    Reset,
    SetFlushTimer,
    Tick,
    WriteCursorNode,
)
from impl.broker.ledger_list import Position, TopicView
from impl.broker.managed_ledger_core import ManagedLedgerConfig
from impl.broker.managed_ledger_errors import (
    CursorFencedError,
    InvalidPositionError,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    NoSuchCursorError,
)

P = Position
ML = "public/default/persistent/t"
VIEW = TopicView(((3, 50),), open_ledger=3)  # entries 3:0 .. 3:49
START = CursorState(P(3, -1))
T0 = 1000.0


def config(interval: float = 1.0, max_entries: int = 100) -> ManagedLedgerConfig:
    return ManagedLedgerConfig(cursor_persist_interval_s=interval, cursor_max_entries=max_entries)


def state(mark_delete: int, *ranges: tuple[int, int]) -> CursorState:
    return CursorState(P(3, mark_delete), [(P(3, a), P(3, b)) for a, b in ranges])


def node(ledger: int, s: CursorState, properties: dict[str, str] | None = None) -> bytes:
    doc = {"format": 1, "cursor_ledger": ledger, "state": s.to_json(), "properties": properties or {}}
    return json.dumps(doc).encode()


def created(cfg: ManagedLedgerConfig, initial: CursorState = START, ledger: int = 10) -> ManagedCursorCore:
    """A new cursor, every step of its creation checked: node absent -> ledger -> first entry -> node."""
    c = ManagedCursorCore(ML, "sub", cfg)
    assert c.step(Open(initial, T0)) == [ReadCursorNode()]
    assert c.step(NodeRead(None, -1, T0)) == [CreateCursorLedger()]
    assert c.step(CursorLedgerCreated(ledger, T0)) == [AppendCursorState(ledger, initial.encode())]
    assert c.step(CursorStateAppended(ledger, T0)) == [WriteCursorNode(c.node(ledger, initial), None)]
    assert c.step(CursorNodeWritten(0, T0)) == [Opened()]
    assert (c.status, c.io, c.ledger_id, c.ledger_entries, c.node_version) == (CursorStatus.OPEN, Io.IDLE, ledger, 1, 0)
    return c


def errors(outputs: list[Output]) -> list[ManagedLedgerError]:
    return [o.error for o in outputs if isinstance(o, FailRequest | OpenFailed)]


# ---- creation and recovery on open ---------------------------------------------------------------------


def test_a_new_cursor_is_created_step_by_step() -> None:
    c = created(config())
    assert c.state == START


@pytest.mark.parametrize("where", ["create", "first-entry", "node-other", "node-nonode"])
def test_a_failure_at_each_step_of_creation_fails_the_open(where: str) -> None:
    c = ManagedCursorCore(ML, "sub", config())
    c.step(Open(START, T0))
    c.step(NodeRead(None, -1, T0))
    if where == "create":
        out = c.step(CursorLedgerCreateFailed("no bookies", T0))
        assert len(out) == 1 and isinstance(out[0], OpenFailed)
        assert "cannot create a cursor ledger (no bookies)" in str(out[0].error)
    else:
        c.step(CursorLedgerCreated(10, T0))
        if where == "first-entry":
            out = c.step(CursorStateAppendFailed(10, False, "bookie gone", T0))
        else:
            c.step(CursorStateAppended(10, T0))
            error = NodeError.OTHER if where == "node-other" else NodeError.NO_NODE
            out = c.step(CursorNodeWriteFailed(error, "boom", T0))
        assert out[0] == DeleteCursorLedger(10)  # the new ledger is an orphan: deleted
        assert len(out) == 2 and isinstance(out[1], OpenFailed)
        expected = {"first-entry": "bookie gone", "node-other": "cannot update its node", "node-nonode": "gone"}
        assert expected[where] in str(out[1].error)
    assert c.status is CursorStatus.CLOSED and c.io is Io.IDLE and c.ledger_id is None


def test_a_node_created_concurrently_is_recovered_instead() -> None:
    c = ManagedCursorCore(ML, "sub", config())
    c.step(Open(START, T0))
    c.step(NodeRead(None, -1, T0))
    c.step(CursorLedgerCreated(10, T0))
    c.step(CursorStateAppended(10, T0))
    assert c.step(CursorNodeWriteFailed(NodeError.NODE_EXISTS, "exists", T0)) == [
        DeleteCursorLedger(10),
        ReadCursorNode(),
    ]
    theirs = state(7)
    assert c.step(NodeRead(node(20, theirs), 0, T0)) == [RecoverCursorLedger(20)]
    assert c.step(CursorLedgerRecovered(20, None, T0)) == [CreateCursorLedger()]
    assert c.step(CursorLedgerCreated(11, T0)) == [AppendCursorState(11, theirs.encode())]
    assert c.step(CursorStateAppended(11, T0)) == [WriteCursorNode(c.node(11, theirs), 0)]
    assert c.step(CursorNodeWritten(1, T0)) == [DeleteCursorLedger(20), Opened()]
    assert c.state == theirs


@pytest.mark.parametrize("stored", ["last-entry", "empty-ledger", "no-such-ledger", "no-ledger"])
def test_recovery_from_each_kind_of_stored_state(stored: str) -> None:
    in_node, in_ledger = state(4, (6, 7)), state(9, (12, 12))
    c = ManagedCursorCore(ML, "sub", config())
    assert c.step(Open(None, T0)) == [ReadCursorNode()]
    old = -1 if stored == "no-ledger" else 7
    out = c.step(NodeRead(node(old, in_node, {"k": "v"}), 4, T0))
    expected = in_node
    if stored == "no-ledger":
        assert out == [CreateCursorLedger()]
    else:
        assert out == [RecoverCursorLedger(7)]  # fences the previous owner's cursor ledger
        if stored == "last-entry":
            out = c.step(CursorLedgerRecovered(7, in_ledger.encode(), T0))
            expected = in_ledger  # the ledger is newer than the node
        elif stored == "empty-ledger":
            out = c.step(CursorLedgerRecovered(7, None, T0))
        else:
            out = c.step(CursorLedgerRecoveryFailed(7, True, "NoSuchLedger", T0))
        assert out == [CreateCursorLedger()]
    assert c.step(CursorLedgerCreated(11, T0)) == [AppendCursorState(11, expected.encode())]
    assert c.step(CursorStateAppended(11, T0)) == [WriteCursorNode(c.node(11, expected), 4)]
    done = c.step(CursorNodeWritten(5, T0))
    assert done == ([Opened()] if old < 0 else [DeleteCursorLedger(7), Opened()])
    assert (c.state, c.properties, c.node_version, c.ledger_id) == (expected, {"k": "v"}, 5, 11)
    assert json.loads(c.node(11, expected))["properties"] == {"k": "v"}


@pytest.mark.parametrize(
    ("first", "then", "message"),
    [
        (NodeRead(b"{not json", 1, T0), None, "unreadable"),
        (NodeRead(b'{"format": 2}', 1, T0), None, "unknown format 2"),
        (NodeRead(None, -1, T0), None, "has no cursor 'sub'"),
        (NodeReadFailed("connection lost", T0), None, "cannot read its node (connection lost)"),
        (NodeRead(node(7, START), 1, T0), CursorLedgerRecovered(7, b"garbage", T0), "last entry"),
        (NodeRead(node(7, START), 1, T0), CursorLedgerRecoveryFailed(7, False, "timeout", T0), "retry the open"),
    ],
)
def test_recovery_failures_are_typed(first: Event, then: Event | None, message: str) -> None:
    c = ManagedCursorCore(ML, "sub", config())
    c.step(Open(None, T0))
    out = c.step(first)
    if then is not None:
        out = c.step(then)
    assert len(out) == 1 and isinstance(out[0], OpenFailed) and message in str(out[0].error)
    assert c.status is CursorStatus.CLOSED
    if isinstance(first, NodeRead) and first.data is None:
        assert isinstance(out[0].error, NoSuchCursorError)


def test_recovery_that_finds_another_version_of_the_node_is_fenced() -> None:
    c = ManagedCursorCore(ML, "sub", config())
    c.step(Open(None, T0))
    c.step(NodeRead(node(7, START), 3, T0))
    c.step(CursorLedgerRecovered(7, None, T0))
    c.step(CursorLedgerCreated(11, T0))
    c.step(CursorStateAppended(11, T0))
    out = c.step(CursorNodeWriteFailed(NodeError.BAD_VERSION, "version 4", T0))
    reason = "cursor 'sub': its node changed under us (BadVersion): another broker recovered it"
    assert out[:2] == [DeleteCursorLedger(11), FenceManagedLedger(reason)]
    assert isinstance(out[2], OpenFailed) and isinstance(out[2].error, CursorFencedError)


# ---- the rate limit ---------------------------------------------------------------------------------------


@dataclass
class Run:
    """Drives a core as a shell would, answering every I/O at once, with a clock moved by hand."""

    core: ManagedCursorCore
    now: float = T0
    timer: float | None = None
    appends: list[tuple[float, int, CursorState]] = field(default_factory=list)  # (time, ledger, state)
    done: list[int] = field(default_factory=list)
    failed: list[tuple[int, ManagedLedgerError]] = field(default_factory=list)
    next_ledger: int = 100
    next_token: int = 0

    def feed(self, event: Event) -> None:
        work = list(self.core.step(event))
        while work:
            out = work.pop(0)
            match out:
                case AppendCursorState(ledger, data):
                    self.appends.append((self.now, ledger, CursorState.decode(data)))
                    work += self.core.step(CursorStateAppended(ledger, self.now))
                case CreateCursorLedger():
                    self.next_ledger += 1
                    work += self.core.step(CursorLedgerCreated(self.next_ledger, self.now))
                case WriteCursorNode():
                    work += self.core.step(CursorNodeWritten(self.core.node_version + 1, self.now))
                case SetFlushTimer(at):
                    self.timer = at
                case CancelFlushTimer():
                    self.timer = None
                case CompleteRequest(token):
                    self.done.append(token)
                case FailRequest(token, error):
                    self.failed.append((token, error))

    def advance_to(self, when: float) -> None:
        """Move the clock, firing the flush timer when it comes due (as the shell's timer does)."""
        while self.timer is not None and self.timer <= when:
            self.now, self.timer = self.timer, None
            self.feed(Tick(self.now))
        self.now = when

    def ack(self, entry: int) -> int:
        self.next_token += 1
        self.feed(Delete(self.next_token, (P(3, entry),), VIEW, self.now))
        return self.next_token


def test_rate_limit_persists_at_most_once_per_interval_at_exact_instants() -> None:
    run = Run(created(config(interval=1.0)))
    # An ack every 0.25 s for 3 s: the first is flushed at once (nothing was written by the rate limit yet),
    # then one write per interval, each holding every ack since the last (the timer fires before the ack of
    # the same instant, so the ack at 3.0 is written at 4.0).
    for i in range(13):
        run.advance_to(T0 + 0.25 * i)
        assert run.ack(i) in run.done  # an ack returns at once
    run.advance_to(T0 + 10)
    assert [t - T0 for t, _, _ in run.appends] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [s.mark_delete.entry_id for _, _, s in run.appends] == [0, 3, 7, 11, 12]
    # Quiet for longer than an interval: the next ack is flushed at its own instant.
    run.ack(13)
    run.advance_to(run.now)
    assert run.appends[-1][0] == T0 + 10 and run.appends[-1][2].mark_delete == P(3, 13)
    # Nothing new: no write, however long.
    run.advance_to(T0 + 100)
    assert len(run.appends) == 6


def test_rate_limit_ticks_before_their_time_write_nothing() -> None:
    c = created(config(interval=1.0))
    c.step(Tick(T0))  # nothing dirty, no timer: nothing
    assert c.step(Delete(1, (P(3, 0),), VIEW, T0)) == [SetFlushTimer(T0), CompleteRequest(1)]
    assert c.step(Tick(T0))[0] == AppendCursorState(10, state(0).encode())
    c.step(CursorStateAppended(10, T0))
    assert c.step(Delete(2, (P(3, 1),), VIEW, T0 + 0.1)) == [SetFlushTimer(T0 + 1.0), CompleteRequest(2)]
    assert c.step(Delete(3, (P(3, 2),), VIEW, T0 + 0.2)) == [CompleteRequest(3)]  # the timer is set already
    assert c.step(Tick(T0 + 0.5)) == [SetFlushTimer(T0 + 1.0)]  # early (a timer thread's jitter): asks again
    assert c.step(Tick(T0 + 1.0)) == [AppendCursorState(10, state(2).encode())]
    assert c.state == state(2)  # in effect since the acks, before the write


def test_write_through_persists_before_the_ack_takes_effect() -> None:
    c = created(config(interval=0))
    assert c.step(MarkDelete(1, P(3, 5), VIEW, T0)) == [AppendCursorState(10, state(5).encode())]
    assert c.state == START  # not yet in effect
    assert c.step(Delete(2, (P(3, 7),), VIEW, T0)) == []  # queued behind the write in flight
    # Nothing new for the newest state: it completes with the write of that state.
    assert c.step(MarkDelete(3, P(3, 2), VIEW, T0)) == []
    assert c.step(CursorStateAppended(10, T0)) == [
        CompleteRequest(1),
        AppendCursorState(10, state(5, (7, 7)).encode()),  # one write for what queued up
    ]
    assert c.state == state(5)
    assert c.step(CursorStateAppended(10, T0)) == [CompleteRequest(2), CompleteRequest(3)]
    assert c.state == state(5, (7, 7))
    assert c.step(MarkDelete(4, P(3, 1), VIEW, T0)) == [CompleteRequest(4)]  # nothing in flight: a no-op


def test_a_failed_write_through_changes_nothing_and_fails_what_built_on_it() -> None:
    c = created(config(interval=0))
    c.step(MarkDelete(1, P(3, 5), VIEW, T0))
    c.step(Delete(2, (P(3, 7),), VIEW, T0))
    out = c.step(CursorStateAppendFailed(10, False, "not enough bookies", T0))
    assert [o.token for o in out if isinstance(o, FailRequest)] == [1, 2]
    assert all("not persisted (not enough bookies); retry it" in str(e) for e in errors(out))
    assert c.state == START and c.status is CursorStatus.OPEN
    assert c.step(MarkDelete(3, P(3, 5), VIEW, T0)) == [AppendCursorState(10, state(5).encode())]  # a retry works


def test_a_failed_flush_is_retried_an_interval_later() -> None:
    c = created(config(interval=1.0))
    c.step(Delete(1, (P(3, 0),), VIEW, T0))
    c.step(Tick(T0))
    out = c.step(CursorStateAppendFailed(10, False, "timeout", T0 + 0.2))
    assert out == [PersistFailed("persisting its state failed (timeout); retrying"), SetFlushTimer(T0 + 1.2)]
    assert c.step(Tick(T0 + 1.2)) == [AppendCursorState(10, state(0).encode())]


def test_persist_writes_now_whatever_the_rate_limit() -> None:
    c = created(config(interval=60))
    assert c.step(Persist(1, T0)) == [AppendCursorState(10, START.encode())]  # the same state once more
    assert c.step(CursorStateAppended(10, T0)) == [CompleteRequest(1)]
    assert c.ledger_entries == 2


# ---- switching cursor ledgers ---------------------------------------------------------------------------


def full(cfg: ManagedLedgerConfig) -> tuple[ManagedCursorCore, CursorState]:
    """A cursor whose ledger 10 takes its third and last state: the switch starts."""
    c = created(cfg)
    c.step(Persist(1, T0))
    c.step(CursorStateAppended(10, T0))
    c.step(MarkDelete(2, P(3, 4), VIEW, T0))
    assert c.step(CursorStateAppended(10, T0)) == [CompleteRequest(2), CreateCursorLedger()]
    assert c.ledger_entries == 3 and c.state == state(4)
    return c, state(4)


def test_switching_cursor_ledgers_step_by_step() -> None:
    c, s = full(config(interval=0, max_entries=3))
    assert c.step(CursorLedgerCreated(11, T0)) == [AppendCursorState(11, s.encode())]
    assert c.step(CursorStateAppended(11, T0)) == [WriteCursorNode(c.node(11, s), 0)]  # conditional on version 0
    assert c.step(CursorNodeWritten(1, T0)) == [DeleteCursorLedger(10)]  # then the old ledger goes
    assert (c.ledger_id, c.ledger_entries, c.node_version, c.io) == (11, 1, 1, Io.IDLE)
    assert c.step(MarkDelete(3, P(3, 5), VIEW, T0)) == [AppendCursorState(11, state(5).encode())]


def test_acks_during_a_switch_wait_for_the_new_ledger() -> None:
    c, s = full(config(interval=0, max_entries=3))
    assert c.step(MarkDelete(3, P(3, 6), VIEW, T0)) == []
    c.step(CursorLedgerCreated(11, T0))
    c.step(CursorStateAppended(11, T0))
    assert c.step(CursorNodeWritten(1, T0)) == [DeleteCursorLedger(10), AppendCursorState(11, state(6).encode())]


@pytest.mark.parametrize("where", ["create", "first-entry"])
def test_a_switch_that_fails_keeps_the_current_ledger(where: str) -> None:
    c, _ = full(config(interval=0, max_entries=3))
    if where == "create":
        out = c.step(CursorLedgerCreateFailed("no bookies", T0))
        assert len(out) == 1
    else:
        c.step(CursorLedgerCreated(11, T0))
        out = c.step(CursorStateAppendFailed(11, False, "bookie gone", T0))
        assert out[0] == DeleteCursorLedger(11)
    assert isinstance(out[-1], PersistFailed) and "keeps cursor ledger 10" in out[-1].reason
    assert (c.ledger_id, c.status, c.io) == (10, CursorStatus.OPEN, Io.IDLE)
    # The next write goes to the old ledger, and tries the switch again.
    assert c.step(MarkDelete(3, P(3, 6), VIEW, T0)) == [AppendCursorState(10, state(6).encode())]
    assert c.step(CursorStateAppended(10, T0)) == [CompleteRequest(3), CreateCursorLedger()]


def test_a_switch_whose_node_write_has_an_unknown_outcome_stops_and_deletes_nothing() -> None:
    # The node may name the new ledger already (spec/cursor.tla, cursor-ci-lostanswers): deleting it, or
    # writing on to the old one, would lose completed acknowledgements (cursor-mutation-deleteafterlost-ci).
    c, _ = full(config(interval=0, max_entries=3))
    c.step(CursorLedgerCreated(11, T0))
    c.step(CursorStateAppended(11, T0))
    out = c.step(CursorNodeWriteFailed(NodeError.OTHER, "connection lost", T0))
    assert not any(isinstance(o, DeleteCursorLedger) for o in out)
    assert len(out) == 1 and isinstance(out[0], FenceManagedLedger) and "outcome is unknown" in out[0].reason
    assert (c.status, c.io, c.ledger_id) == (CursorStatus.FENCED, Io.IDLE, 10)
    (refused,) = errors(c.step(MarkDelete(3, P(3, 6), VIEW, T0)))
    assert isinstance(refused, CursorFencedError)


@pytest.mark.parametrize("error", [NodeError.BAD_VERSION, NodeError.NO_NODE])
def test_a_switch_that_finds_another_version_of_the_node_fences(error: NodeError) -> None:
    c, _ = full(config(interval=0, max_entries=3))
    c.step(CursorLedgerCreated(11, T0))
    c.step(CursorStateAppended(11, T0))
    out = c.step(CursorNodeWriteFailed(error, "changed", T0))
    reason = f"cursor 'sub': its node changed under us ({error.value}): another broker recovered it"
    assert out == [DeleteCursorLedger(11), FenceManagedLedger(reason)]
    assert c.status is CursorStatus.FENCED
    (refused,) = errors(c.step(MarkDelete(3, P(3, 6), VIEW, T0)))
    assert isinstance(refused, CursorFencedError) and reason in str(refused)


# ---- fencing ----------------------------------------------------------------------------------------------


def test_a_fenced_cursor_ledger_fences_the_cursor_and_the_topic() -> None:
    c = created(config(interval=0))
    c.step(MarkDelete(1, P(3, 5), VIEW, T0))
    c.step(Delete(2, (P(3, 8),), VIEW, T0))
    out = c.step(CursorStateAppendFailed(10, True, "fenced", T0))
    reason = "cursor 'sub': its cursor ledger was fenced: another broker recovered the cursor"
    assert out[0] == FenceManagedLedger(reason)
    assert sorted(o.token for o in out if isinstance(o, FailRequest)) == [1, 2]
    assert all(isinstance(e, CursorFencedError) for e in errors(out))
    assert c.state == START
    for event in (MarkDelete(3, P(3, 9), VIEW, T0), Persist(4, T0), Reset(5, None, VIEW, T0)):
        assert all(isinstance(e, CursorFencedError) for e in errors(c.step(event)))
    assert c.step(Tick(T0 + 5)) == []
    assert c.step(Close(6, T0)) == [CloseCursorLedger(10), CompleteRequest(6)]  # no write


def test_the_fenced_flush_stops_every_later_persist() -> None:
    run = Run(created(config(interval=1.0)))
    run.ack(0)
    c = run.core
    assert c.step(Tick(T0)) == [AppendCursorState(10, state(0).encode())]
    out = c.step(CursorStateAppendFailed(10, True, "fenced", T0))
    assert out == [
        FenceManagedLedger("cursor 'sub': its cursor ledger was fenced: another broker recovered the cursor")
    ]
    run.ack(1)
    assert isinstance(run.failed[-1][1], CursorFencedError)
    run.advance_to(T0 + 10)
    assert run.appends == []


def test_a_fenced_managed_ledger_stops_the_cursor_without_fencing_again() -> None:
    c = created(config(interval=0))
    c.step(MarkDelete(1, P(3, 5), VIEW, T0))
    out = c.step(ManagedLedgerFenced("its metadata session expired", T0))
    assert len(out) == 1 and isinstance(out[0], FailRequest) and out[0].token == 1  # no FenceManagedLedger
    assert isinstance(out[0].error, ManagedLedgerFencedError) and not isinstance(out[0].error, CursorFencedError)
    assert c.step(CursorStateAppended(10, T0)) == []  # a stale answer changes nothing
    assert c.state == START


# ---- close and delete -------------------------------------------------------------------------------------


def test_close_writes_what_is_not_persisted_then_closes_the_ledger() -> None:
    c = created(config(interval=60))
    assert c.step(Delete(1, (P(3, 0),), VIEW, T0)) == [SetFlushTimer(T0), CompleteRequest(1)]
    assert c.step(Close(2, T0)) == [CancelFlushTimer(), AppendCursorState(10, state(0).encode())]
    assert c.step(CursorStateAppended(10, T0)) == [CloseCursorLedger(10), CompleteRequest(2)]
    assert c.status is CursorStatus.CLOSED and c.ledger_id is None
    (refused,) = errors(c.step(Delete(3, (P(3, 1),), VIEW, T0)))
    assert "cursor 'sub': is closed" in str(refused)
    assert c.step(Close(4, T0)) == [CompleteRequest(4)]  # idempotent


def test_close_whose_last_write_fails_still_closes() -> None:
    c = created(config(interval=60))
    c.step(Delete(1, (P(3, 0),), VIEW, T0))
    c.step(Close(2, T0))
    out = c.step(CursorStateAppendFailed(10, False, "timeout", T0))
    assert out == [
        PersistFailed("its last acks were not persisted at close (timeout)"),
        CloseCursorLedger(10),
        CompleteRequest(2),
    ]


def test_close_of_a_clean_cursor_writes_nothing() -> None:
    c = created(config(interval=60))
    assert c.step(Close(1, T0)) == [CloseCursorLedger(10), CompleteRequest(1)]


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (CursorNodeDeleted(T0), "deleted"),
        (CursorNodeDeleteFailed(NodeError.NO_NODE, "gone", T0), "deleted"),
        (CursorNodeDeleteFailed(NodeError.BAD_VERSION, "changed", T0), CursorFencedError),
        (CursorNodeDeleteFailed(NodeError.OTHER, "connection lost", T0), ManagedLedgerError),
    ],
)
def test_delete_cursor(answer: Event, outcome: object) -> None:
    c = created(config(interval=60))
    c.step(Delete(1, (P(3, 0),), VIEW, T0))  # a flush is pending: it is cancelled
    assert c.step(DeleteCursor(2, T0)) == [CancelFlushTimer(), DeleteCursorNode(0)]
    out = c.step(answer)
    if outcome == "deleted":
        assert out == [DeleteCursorLedger(10), CompleteRequest(2)]
    else:
        assert len(out) == 1 and isinstance(out[0], FailRequest) and type(out[0].error) is outcome
    assert c.status is CursorStatus.DELETED
    assert c.step(Tick(T0 + 100)) == []
    assert c.step(Close(3, T0)) == [CompleteRequest(3)]


# ---- bad input ----------------------------------------------------------------------------------------


def test_positions_that_are_not_entries_fail_and_change_nothing() -> None:
    for interval in (0.0, 1.0):
        c = created(config(interval=interval))
        for event in (MarkDelete(1, P(3, 50), VIEW, T0), Delete(2, (P(3, 1), P(9, 0)), VIEW, T0)):
            out = c.step(event)
            (error,) = errors(out)
            assert len(out) == 1 and isinstance(error, InvalidPositionError)
            assert "not an entry of the topic" in str(error) and "nothing was changed" in str(error)
        assert c.state == START and c.io is Io.IDLE and c.flush_at is None
        # A mark-delete before the current one (even of a ledger no longer listed) is a no-op, as in Pulsar.
        assert c.step(MarkDelete(3, P(2, 0), VIEW, T0)) == [CompleteRequest(3)]


def test_acks_of_acknowledged_positions_are_no_ops() -> None:
    c = created(config(interval=1.0), initial=state(5, (8, 9)))
    assert c.step(MarkDelete(1, P(3, 2), VIEW, T0)) == [CompleteRequest(1)]
    assert c.step(Delete(2, (P(3, 4), P(3, 8)), VIEW, T0)) == [CompleteRequest(2)]
    assert c.flush_at is None and not c.dirty


def test_reset_rewinds_and_is_written() -> None:
    c = created(config(interval=0), initial=state(5, (8, 9)))
    assert c.step(Reset(1, P(3, 2), VIEW, T0)) == [AppendCursorState(10, state(1).encode())]
    c.step(CursorStateAppended(10, T0))
    assert c.state == state(1)
    assert c.step(Reset(2, None, VIEW, T0)) == [AppendCursorState(10, START.encode())]


def test_requests_before_the_open_completes_are_refused() -> None:
    c = ManagedCursorCore(ML, "sub", config())
    c.step(Open(START, T0))
    (error,) = errors(c.step(MarkDelete(1, P(3, 0), VIEW, T0)))
    assert isinstance(error, ManagedLedgerClosedError) and "still opening" in str(error)


def test_stale_answers_are_ignored_and_unknown_events_raise() -> None:
    c = created(config(interval=0))
    for stale in (
        CursorStateAppended(10, T0),
        CursorStateAppendFailed(10, True, "x", T0),
        CursorNodeWritten(9, T0),
        NodeRead(None, -1, T0),
        CursorLedgerRecovered(7, None, T0),
    ):
        assert c.step(stale) == []
    assert c.step(CursorLedgerCreated(55, T0)) == [DeleteCursorLedger(55)]  # created for nothing: deleted
    c.step(MarkDelete(1, P(3, 0), VIEW, T0))
    assert c.step(CursorStateAppended(99, T0)) == []  # another ledger's answer
    assert c.status is CursorStatus.OPEN and c.io is Io.APPENDING
    with pytest.raises(TypeError, match="not a cursor event"):
        c.step("tick")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="open it once"):
        c.step(Open(START, T0))


# ---- acknowledgements applied as ranges ------------------------------------------------------


def _per_position(state: CursorState, positions: list[Position], view: TopicView) -> bool:
    """The reference: each position inserted on its own, merged with the ranges beside it."""
    changed = False
    for p in positions:
        if p <= state.mark_delete or any(a <= p <= b for a, b in state.individually_deleted):
            continue
        changed = True
        ranges = state.individually_deleted
        i = 0
        while i < len(ranges) and ranges[i][1] < p:
            i += 1
        first = last = p
        if i > 0 and view.count_between(ranges[i - 1][1], p) == 1:
            i -= 1
            first = ranges[i][0]
            del ranges[i]
        if i < len(ranges) and view.count_between(p, ranges[i][0]) == 1:
            last = ranges[i][1]
            del ranges[i]
        ranges.insert(i, (first, last))
    while state.individually_deleted:
        first, last = state.individually_deleted[0]
        if not (first <= state.mark_delete or view.count_between(state.mark_delete, first) == 1):
            break
        state.mark_delete = max(state.mark_delete, last)
        del state.individually_deleted[0]
    return changed


RANGE_VIEW = TopicView(((3, 6), (5, 0), (8, 7), (9, 5)), open_ledger=9)  # an empty ledger between


@given(st.lists(st.lists(st.sampled_from(list(RANGE_VIEW.positions(None))), max_size=12), max_size=5))
@settings(max_examples=300, deadline=None)
def test_acks_applied_as_ranges_move_the_cursor_as_acks_one_by_one(acks: list[list[Position]]) -> None:
    """Runs of neighbours inserted as one range each (any order, duplicates, across ledgers, across the
    empty ledger) leave the same mark-delete position and ranges as positions inserted one at a time."""
    by_range, one_by_one = CursorState(Position(3, -1)), CursorState(Position(3, -1))
    for positions in acks:
        assert by_range.delete(positions, RANGE_VIEW) == _per_position(one_by_one, positions, RANGE_VIEW)
        assert (by_range.mark_delete, by_range.individually_deleted) == (
            one_by_one.mark_delete,
            one_by_one.individually_deleted,
        )
        for p in RANGE_VIEW.positions(None):
            assert by_range.is_acknowledged(p) == (
                p <= one_by_one.mark_delete or any(a <= p <= b for a, b in one_by_one.individually_deleted)
            )
