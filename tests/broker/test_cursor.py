"""Cursors: the pure state (mark-delete + individually deleted ranges), durable cursors over the
managed ledger (persistence, recovery after a takeover, cursor-ledger rollover), non-durable
cursors, and trimming driven by cursors with retention."""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from impl.broker.cursor import CursorState
from impl.broker.ledger_list import TopicView
from impl.broker.managed_ledger import (
    CursorFencedError,
    InvalidPositionError,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFencedError,
    NoSuchCursorError,
    Position,
)
from impl.metadata.ledger_store import NoSuchLedger
from impl.metadata.memory import MemoryServer

from .conftest import Cluster, FakeClock, make_cluster

TOPIC = "public/default/persistent/cursors"
P = Position

# Three ledgers: 1 has 3 entries, 2 is empty, 4 has 2 entries and is being written.
VIEW = TopicView(((1, 3), (2, 0), (4, 2)), open_ledger=4)
ALL = [P(1, 0), P(1, 1), P(1, 2), P(4, 0), P(4, 1)]


def open_ml(
    cluster: Cluster,
    config: ManagedLedgerConfig | None = None,
    clock: FakeClock | None = None,
    *,
    write_through: bool = True,
) -> ManagedLedger:
    """By default with every acknowledgement persisted before it returns (cursor_persist_interval_s=0),
    so a takeover right after an ack sees it; `write_through=False` keeps the config's rate limit."""
    store, bk = cluster.broker()
    clock = clock or FakeClock()
    config = config or ManagedLedgerConfig()
    if write_through:
        config = dataclasses.replace(config, cursor_persist_interval_s=0)
    return ManagedLedger.open(TOPIC, store, bk, config, clock, wall_clock=clock, call_later=clock.call_later)


# ---- the pure state ------------------------------------------------------------------------------


def test_view_positions_and_counts() -> None:
    assert VIEW.first_position() == P(1, 0) and VIEW.last_confirmed() == P(4, 1)
    assert VIEW.next_position(P(1, 2)) == P(4, 0)  # skips the empty ledger
    assert VIEW.next_position(P(4, 1)) == P(4, 2)  # the open ledger grows
    assert list(VIEW.positions(P(1, 2))) == [P(1, 2), P(4, 0), P(4, 1)]
    assert VIEW.count_between(P(1, -1), P(4, 1)) == 5
    assert VIEW.count_between(P(1, 1), P(4, 0)) == 2
    assert VIEW.count_between(None, None) == 0


def test_individual_acks_merge_and_advance_mark_delete() -> None:
    s = CursorState(P(1, -1))
    assert s.delete([P(1, 2), P(4, 1)], VIEW)
    assert s.individually_deleted == [(P(1, 2), P(1, 2)), (P(4, 1), P(4, 1))]
    assert s.backlog(VIEW) == 3
    s.delete([P(4, 0)], VIEW)  # joins the two ranges across the empty ledger
    assert s.individually_deleted == [(P(1, 2), P(4, 1))]
    s.delete([P(1, 0)], VIEW)
    assert s.mark_delete == P(1, 0) and s.backlog(VIEW) == 1
    s.delete([P(1, 1)], VIEW)  # contiguous: mark-delete moves over the whole range
    assert s.mark_delete == P(4, 1) and s.individually_deleted == [] and s.backlog(VIEW) == 0
    assert not s.delete([P(1, 1)], VIEW)  # acknowledged already: no change


def test_mark_delete_cuts_ranges_and_ignores_older_positions() -> None:
    s = CursorState(P(1, -1))
    s.delete([P(1, 1), P(4, 0), P(4, 1)], VIEW)
    assert s.individually_deleted == [(P(1, 1), P(1, 1)), (P(4, 0), P(4, 1))]
    assert s.mark_delete_to(P(1, 0), VIEW)
    assert s.mark_delete == P(1, 1)  # advanced over the adjacent range
    assert s.mark_delete_to(P(1, 2), VIEW) and s.mark_delete == P(4, 1)
    assert not s.mark_delete_to(P(1, 0), VIEW)  # older than the mark-delete position: nothing to do


def test_bad_positions_change_nothing() -> None:
    s = CursorState(P(1, -1))
    s.delete([P(4, 0)], VIEW)
    before = s.copy()
    for bad in ([P(4, 2)], [P(1, 3)], [P(3, 0)], [P(1, 1), P(9, 9)]):
        with pytest.raises(ValueError, match="not an entry of the topic"):
            s.delete(bad, VIEW)
        assert s == before
    with pytest.raises(ValueError):
        s.mark_delete_to(P(4, 5), VIEW)
    assert s == before


def test_first_unacknowledged_from() -> None:
    s = CursorState(P(1, 0))
    s.delete([P(1, 1), P(4, 0)], VIEW)
    assert s.first_unacknowledged_from(None, VIEW) == P(1, 2)
    assert s.first_unacknowledged_from(P(4, 0), VIEW) == P(4, 1)
    s.delete([P(1, 2), P(4, 1)], VIEW)
    assert s.first_unacknowledged_from(None, VIEW) is None


@settings(max_examples=150, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=4),
    acks=st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=30)), max_size=25),
)
def test_cursor_state_matches_a_set_model(counts: list[int], acks: list[tuple[bool, int]]) -> None:
    """Whatever the acks, the state is: a mark-delete prefix plus disjoint, non-adjacent ranges
    covering exactly the acknowledged positions; backlog counts the rest."""
    view = TopicView(tuple((10 + i, n) for i, n in enumerate(counts)), open_ledger=10 + len(counts) - 1)
    everything = list(view.positions(None))
    state = CursorState(P(10, -1))
    model: set[Position] = set()
    for cumulative, index in acks:
        if not everything:
            break
        p = everything[index % len(everything)]
        if cumulative:
            state.mark_delete_to(p, view)
            model |= {q for q in everything if q <= p}
        else:
            state.delete([p], view)
            model.add(p)
        assert {q for q in everything if state.is_acknowledged(q)} == model
        assert state.backlog(view) == len(everything) - len(model)
        prefix = [q for q in everything if q <= state.mark_delete]
        assert set(prefix) <= model
        first_gap = next((q for q in everything if q not in model), None)
        assert first_gap is None or state.mark_delete < first_gap  # the prefix is maximal
        ranges = state.individually_deleted
        for (_, b), (c, _) in zip(ranges, ranges[1:], strict=False):
            assert b < c and view.count_between(b, c) > 1  # sorted, disjoint, not adjacent
        assert all(state.mark_delete < a <= b for a, b in ranges)
        # the stored form round-trips
        assert CursorState.decode(state.encode()) == state


# ---- durable cursors ------------------------------------------------------------------------------


def test_durable_cursor_recovered_after_takeover(cluster: Cluster) -> None:
    old = open_ml(cluster, ManagedLedgerConfig(max_entries_per_ledger=3))
    positions = [old.add(b"m%d" % i) for i in range(8)]
    cursor = old.open_cursor("sub", "earliest")
    assert cursor.backlog() == 8
    cursor.mark_delete(positions[2])
    cursor.delete([positions[4], positions[6]])
    assert cursor.backlog() == 3
    node = json.loads(old.store.get(cursor.path)[0])
    assert node["cursor_ledger"] == cursor.stats()["cursor_ledger"]

    cursor.persist()  # an explicit durability point: the same state once more
    new = open_ml(cluster)  # takeover: the cursor is recovered from its cursor ledger
    recovered = new.cursors()["sub"]
    assert recovered.mark_delete_position == positions[2]
    assert recovered.individually_deleted == [(positions[4], positions[4]), (positions[6], positions[6])]
    assert recovered.backlog() == 3
    assert new.open_cursor("sub") is recovered
    # the old owner's acks are refused: its cursor ledger was fenced by the recovery
    with pytest.raises(ManagedLedgerFencedError):
        cursor.delete([positions[3]])
    assert old.state.value == "fenced"
    # the old cursor ledger is gone, the new one holds the state
    with pytest.raises(NoSuchLedger):
        new.bookkeeper.ledgers.read(node["cursor_ledger"])
    recovered.delete([positions[3]])
    assert recovered.mark_delete_position == positions[4]


def test_cursor_ack_fenced_by_a_takeover_that_only_recovered_the_cursor(cluster: Cluster) -> None:
    old = open_ml(cluster)
    p = old.add(b"a")
    cursor = old.open_cursor("sub", "earliest")
    # someone else recovers this cursor (fences its ledger) without touching the old writer's ledger yet
    store, bk = cluster.broker()
    node = json.loads(store.get(cursor.path)[0])
    bk.open_ledger(node["cursor_ledger"], old.config.password, recovery=True)
    with pytest.raises(CursorFencedError, match="cursor 'sub'"):
        cursor.mark_delete(p)
    with pytest.raises(ManagedLedgerFencedError):
        old.add(b"b")  # the whole managed ledger is fenced with it


def test_cursor_ledger_rollover(cluster: Cluster) -> None:
    ml = open_ml(cluster, ManagedLedgerConfig(cursor_max_entries=3))
    positions = [ml.add(b"%d" % i) for i in range(10)]
    cursor = ml.open_cursor("sub", "earliest")
    ledgers = {cursor.stats()["cursor_ledger"]}
    for p in positions:
        cursor.mark_delete(p)
        ledgers.add(cursor.stats()["cursor_ledger"])
    assert len(ledgers) >= 4
    for gone in ledgers - {cursor.stats()["cursor_ledger"]}:
        with pytest.raises(NoSuchLedger):
            ml.bookkeeper.ledgers.read(gone)
    ml.close()
    again = open_ml(cluster)
    assert again.cursors()["sub"].mark_delete_position == positions[-1]
    assert again.cursors()["sub"].backlog() == 0


def test_new_cursor_latest_and_earliest(cluster: Cluster) -> None:
    ml = open_ml(cluster)
    positions = [ml.add(b"%d" % i) for i in range(3)]
    latest = ml.open_cursor("latest")
    earliest = ml.open_cursor("earliest", "earliest")
    assert latest.backlog() == 0 and latest.mark_delete_position == positions[-1]
    assert earliest.backlog() == 3
    p = ml.add(b"3")
    assert latest.backlog() == 1 and earliest.backlog() == 4
    assert [q for q, _ in latest.read_entries(10)] == [p]
    assert [q for q, _ in earliest.read_entries(2)] == positions[:2]
    assert [q for q, _ in earliest.read_entries(10)] == [positions[2], p]
    # a batch that is all acknowledged still moves the read position on
    earliest.seek(None)
    earliest.delete(positions[:2])
    earliest.delete([positions[2]])
    assert earliest.read_entries(0) == [] and earliest.read_entries(1) == [(p, b"3")]
    skipping = ml.open_cursor("skipping", "earliest")
    skipping.delete([positions[1], positions[2]])
    reads = [[q for q, _ in skipping.read_entries(1)] for _ in range(4)]
    assert reads == [[positions[0]], [], [], [p]]  # not stuck on the acknowledged ones
    with pytest.raises(ValueError, match="'earliest' or 'latest'"):
        ml.open_cursor("x", "middle")  # type: ignore[arg-type]


def test_bad_input_gets_a_typed_error_and_disturbs_nothing(cluster: Cluster) -> None:
    ml = open_ml(cluster)
    positions = [ml.add(b"%d" % i) for i in range(3)]
    cursor = ml.open_cursor("sub", "earliest")
    cursor.delete([positions[1]])
    stored_before = ml.store.get(cursor.path)
    for bad in (Position(positions[0].ledger_id, 3), Position(positions[0].ledger_id + 100, 0)):
        with pytest.raises(InvalidPositionError, match="nothing was changed"):
            cursor.mark_delete(bad)
        with pytest.raises(InvalidPositionError, match="not an entry of the topic"):
            cursor.delete([positions[2], bad])
    assert cursor.individually_deleted == [(positions[1], positions[1])]
    assert cursor.backlog() == 2 and not cursor.is_acknowledged(positions[2])
    with pytest.raises(NoSuchCursorError, match="has no cursor 'nope'"):
        ml.delete_cursor("nope")
    assert ml.store.get(cursor.path) == stored_before
    assert ml.add(b"still fine").entry_id == 3


def test_delete_cursor(cluster: Cluster) -> None:
    ml = open_ml(cluster)
    cursor = ml.open_cursor("sub")
    ledger_id = cursor.stats()["cursor_ledger"]
    ml.delete_cursor("sub")
    assert "sub" not in ml.cursors() and ml.store.exists(cursor.path) is None
    with pytest.raises(NoSuchLedger):
        ml.bookkeeper.ledgers.read(ledger_id)
    assert "sub" not in open_ml(cluster).cursors()


def test_non_durable_cursor_from_any_position(cluster: Cluster) -> None:
    ml = open_ml(cluster, ManagedLedgerConfig(max_entries_per_ledger=2))
    positions = [ml.add(b"%d" % i) for i in range(5)]
    reader = ml.new_non_durable_cursor(positions[3])
    assert [d for _, d in reader.read_entries(10)] == [b"3", b"4"]
    assert reader.backlog() == 2
    reader.mark_delete(positions[3])
    assert reader.backlog() == 1
    from_start = ml.new_non_durable_cursor(None)
    assert [d for _, d in from_start.read_entries(3)] == [b"0", b"1", b"2"]
    assert ml.cursors() == {}  # readers are not durable cursors
    assert ml.store.children(ml.path) == []


# ---- trimming ---------------------------------------------------------------------------------------


def test_trim_deletes_ledgers_every_cursor_passed(cluster: Cluster) -> None:
    ml = open_ml(cluster, ManagedLedgerConfig(max_entries_per_ledger=2))
    a = ml.open_cursor("a", "earliest")
    b = ml.open_cursor("b", "earliest")
    positions = [ml.add(b"%d" % i) for i in range(7)]  # ledgers: [0,1] [2,3] [4,5] [6]
    ledgers = [i.ledger_id for i in ml.stored_list().ledgers]
    assert ml.trim() == []  # nobody consumed anything
    a.mark_delete(positions[4])  # a is in the middle of the third ledger
    b.mark_delete(positions[2])  # b is in the middle of the second ledger
    assert ml.trim() == [ledgers[0]]
    assert [i.ledger_id for i in ml.stored_list().ledgers] == ledgers[1:]
    with pytest.raises(NoSuchLedger):
        ml.bookkeeper.ledgers.read(ledgers[0])
    assert ml.first_position() == positions[2]
    assert ml.read(None, 1) == [(positions[2], b"2")]
    b.mark_delete(positions[6])  # passes everything: the current ledger stays
    assert ml.trim() == [ledgers[1]]  # a holds the third ledger
    a.mark_delete(positions[6])
    assert ml.trim() == [ledgers[2]]
    assert [i.ledger_id for i in ml.stored_list().ledgers] == ledgers[3:]
    assert a.backlog() == 0 and b.backlog() == 0
    # after a takeover the trimmed list and the cursors agree
    new = open_ml(cluster)
    assert new.first_position() == positions[6]
    assert new.cursors()["a"].backlog() == 0


def test_trim_respects_retention_time_and_size(cluster: Cluster) -> None:
    clock = FakeClock()
    config = ManagedLedgerConfig(max_entries_per_ledger=1, retention_minutes=10)
    ml = open_ml(cluster, config, clock)
    cursor = ml.open_cursor("sub", "earliest")
    first = ml.add(b"x" * 100)
    clock.advance(5 * 60)
    second = ml.add(b"y" * 100)  # closes the first ledger: its timestamp is now
    clock.advance(5 * 60)
    ml.add(b"z")  # closes the second ledger, 5 minutes later
    cursor.mark_delete(second)
    assert ml.trim() == []  # both consumed ledgers are younger than 10 minutes
    clock.advance(6 * 60)
    assert ml.trim() == [first.ledger_id]  # closed 11 minutes ago; the second 6 minutes ago
    clock.advance(5 * 60)
    assert ml.trim() == [second.ledger_id]

    sized = ManagedLedgerConfig(max_entries_per_ledger=1, retention_size_mb=1e-4)  # keep >= ~105 bytes
    other = ManagedLedger.open("public/default/persistent/sized", *cluster.broker(), sized, clock, wall_clock=clock)
    positions = [other.add(b"s" * 60) for _ in range(4)]
    other.open_cursor("sub", "latest").mark_delete(positions[-1])
    deleted = other.trim()
    assert deleted == [positions[0].ledger_id, positions[1].ledger_id]  # 120 bytes stay


def test_trim_without_cursors_keeps_only_retention(cluster: Cluster) -> None:
    ml = open_ml(cluster, ManagedLedgerConfig(max_entries_per_ledger=1))
    positions = [ml.add(b"%d" % i) for i in range(3)]
    assert ml.trim() == [positions[0].ledger_id, positions[1].ledger_id]
    assert ml.read(None, 5) == [(positions[2], b"2")]


@settings(max_examples=30, deadline=None)
@given(
    acks=st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=11)), max_size=15),
    cursor_max_entries=st.integers(min_value=1, max_value=4),
)
def test_durable_cursor_state_survives_a_takeover(acks: list[tuple[bool, int]], cursor_max_entries: int) -> None:
    server = MemoryServer()
    cluster = make_cluster(server.connect, "memory://")
    config = ManagedLedgerConfig(max_entries_per_ledger=3, cursor_max_entries=cursor_max_entries)
    old = open_ml(cluster, config)
    positions = [old.add(b"%d" % i) for i in range(12)]
    cursor = old.open_cursor("sub", "earliest")
    for cumulative, index in acks:
        if cumulative:
            cursor.mark_delete(positions[index])
        else:
            cursor.delete([positions[index]])
    new = open_ml(cluster, config)
    recovered = new.cursors()["sub"]
    assert recovered.mark_delete_position == cursor.mark_delete_position
    assert recovered.individually_deleted == cursor.individually_deleted
    assert recovered.backlog() == cursor.backlog() == sum(not cursor.is_acknowledged(p) for p in positions)
    cluster.close()


# ---- rate-limited persistence (the default: Pulsar's mark-delete rate limit) ----------------------------------


def cursor_ledger_entries(ml: ManagedLedger, cursor_name: str) -> int:
    """States written to the cursor's current ledger (each one cursor-ledger add)."""
    return ml.cursors()[cursor_name].ledger_entries


def test_rate_limited_acks_return_at_once_and_are_persisted_together_within_the_interval(cluster: Cluster) -> None:
    config = ManagedLedgerConfig(cursor_persist_interval_s=1.0)
    clock = FakeClock()
    ml = open_ml(cluster, config, clock, write_through=False)
    positions = [ml.add(b"%d" % i) for i in range(20)]
    cursor = ml.open_cursor("sub", "earliest")
    assert cursor_ledger_entries(ml, "sub") == 1  # the initial state
    for p in positions[:10]:
        cursor.delete([p])  # applied at once ...
    assert cursor.mark_delete_position == positions[9]
    assert cursor_ledger_entries(ml, "sub") == 1  # ... and not written by the acknowledging thread
    clock.advance(0)  # no write for longer than an interval: the flush is due at once, one write for all ten
    assert cursor_ledger_entries(ml, "sub") == 2
    cursor.delete([positions[10]])
    clock.advance(0.99)
    assert cursor_ledger_entries(ml, "sub") == 2  # within the interval of the last write: not yet
    clock.advance(0.01)
    assert cursor_ledger_entries(ml, "sub") == 3  # an interval after it
    clock.advance(5.0)
    assert cursor_ledger_entries(ml, "sub") == 3  # nothing new to write: no write
    new = open_ml(cluster, config, write_through=False)  # takeover after the flush: the acks survived
    assert new.cursors()["sub"].mark_delete_position == positions[10]


def test_rate_limited_close_writes_the_acks_not_yet_persisted(cluster: Cluster) -> None:
    config = ManagedLedgerConfig(cursor_persist_interval_s=60)  # no flush before the close
    ml = open_ml(cluster, config, write_through=False)
    positions = [ml.add(b"%d" % i) for i in range(5)]
    cursor = ml.open_cursor("sub", "earliest")
    cursor.mark_delete(positions[1])
    cursor.delete([positions[3]])
    ml.close()
    again = open_ml(cluster, config, write_through=False)
    recovered = again.cursors()["sub"]
    assert recovered.mark_delete_position == positions[1]
    assert recovered.individually_deleted == [(positions[3], positions[3])]


def test_rate_limited_flush_into_a_fenced_cursor_ledger_fences_and_later_acks_are_refused(cluster: Cluster) -> None:
    config = ManagedLedgerConfig(cursor_persist_interval_s=0.05)
    clock = FakeClock()
    old = open_ml(cluster, config, clock, write_through=False)
    positions = [old.add(b"%d" % i) for i in range(3)]
    cursor = old.open_cursor("sub", "earliest")
    store, bk = cluster.broker()
    node = json.loads(store.get(cursor.path)[0])
    bk.open_ledger(node["cursor_ledger"], old.config.password, recovery=True)  # another broker recovers it
    cursor.delete([positions[0]])  # applied; its flush finds the cursor ledger fenced
    clock.advance(0.05)
    assert old.state.value == "fenced"
    with pytest.raises(ManagedLedgerFencedError):
        cursor.delete([positions[1]])


def test_write_through_acks_from_many_threads_are_all_persisted(cluster: Cluster) -> None:
    """Acks that arrive while another thread's write is in flight queue in the core; the thread that
    performs the write completes them, and each ack returns only once its state is in the cursor ledger."""
    ml = open_ml(cluster)
    positions = [ml.add(b"%d" % i) for i in range(40)]
    cursor = ml.open_cursor("sub", "earliest")
    chunks = [positions[i::8] for i in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        for done in [pool.submit(lambda ps=ps: [cursor.delete([p]) for p in ps]) for ps in chunks]:
            done.result(timeout=30)
    assert cursor.backlog() == 0 and cursor.mark_delete_position == positions[-1]
    assert 2 <= cursor_ledger_entries(ml, "sub") <= 41  # one add per write, several acks per add when they queue
    recovered = open_ml(cluster).cursors()["sub"]
    assert recovered.mark_delete_position == positions[-1] and recovered.individually_deleted == []


def test_a_flush_after_the_managed_ledger_was_fenced_writes_nothing(cluster: Cluster) -> None:
    config = ManagedLedgerConfig(cursor_persist_interval_s=1.0)
    clock = FakeClock()
    ml = open_ml(cluster, config, clock, write_through=False)
    positions = [ml.add(b"%d" % i) for i in range(3)]
    cursor = ml.open_cursor("sub", "earliest")
    cursor.delete([positions[0]])  # applied; its flush is due at once
    ml.fence("its metadata session expired")  # e.g. the session listener
    clock.advance(0)
    assert cursor_ledger_entries(ml, "sub") == 1 and cursor.fenced_reason == "its metadata session expired"
    ml.close()  # the close writes nothing either
    recovered = open_ml(cluster, config, write_through=False).cursors()["sub"]
    assert recovered.mark_delete_position == positions[0].before()  # the ack was never persisted


def test_a_cursor_never_calls_its_managed_ledger_under_its_lock(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: stats() and read_entries() called the managed ledger while holding the cursor's lock. The
    ledger may run add completions on the calling thread (and with them a dispatch round, issue 46), one of
    which may wait for the topic's lock while an unsubscribe holds that and waits for this cursor's lock."""
    ml = open_ml(cluster)
    for i in range(3):
        ml.add(b"m%d" % i)
    cursor = ml.open_cursor("sub", "earliest")
    under_lock: list[str] = []

    def spying(name: str) -> Any:
        real = getattr(ml, name)

        def spy(*args: object) -> Any:
            if cursor._lock._is_owned():  # type: ignore[attr-defined]
                under_lock.append(name)
            return real(*args)

        return spy

    for name in ("view", "read", "next_position"):
        monkeypatch.setattr(ml, name, spying(name))
    assert cursor.stats()["backlog"] == 3
    assert [d for _, d in cursor.read_entries(10)] == [b"m0", b"m1", b"m2"]
    assert cursor.backlog() == 3
    assert under_lock == []
