"""The replication cores (impl/broker/replication/replicator.py): the replicator's cursor, what it
publishes, receipts, the skip rule, rewind and restart; the remote's de-duplication decision."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from impl.broker.ledger_list import Position
from impl.broker.replication.replicator import (
    CURSOR_PREFIX,
    MAX_WAITING,
    Deduplication,
    Duplicate,
    EntriesRead,
    Entry,
    MessageMetadata,
    Persist,
    PersistMarkDelete,
    ProducerDisconnected,
    PublishToRemote,
    ReadEntries,
    ReplicationError,
    Replicator,
    SendReceipt,
    Start,
    cursor_name,
    is_duplicate,
    is_replicator_cursor,
)

START = Position(3, -1)


def local(entry_id: int, seq: int | None = None, producer: str = "east-0") -> Entry:
    metadata = MessageMetadata(
        producer, entry_id if seq is None else seq, publish_time=1000 + entry_id, event_time=7, properties=(("k", "v"),)
    )
    return Entry(Position(3, entry_id), metadata, f"m{entry_id}".encode())


def replicated(entry_id: int, origin: str = "west") -> Entry:
    return Entry(Position(3, entry_id), MessageMetadata("west-0", entry_id, replicated_from=origin), b"r")


def replicator(max_waiting: int = MAX_WAITING) -> Replicator:
    core = Replicator("east", "west", START, max_waiting)
    assert core.step(Start()) == [ReadEntries(START, core.max_waiting)]
    return core


def published(outputs: Sequence[object]) -> list[Position]:
    return [o.position for o in outputs if isinstance(o, PublishToRemote)]


def mark_deletes(outputs: Sequence[object]) -> list[Position]:
    return [o.position for o in outputs if isinstance(o, PersistMarkDelete)]


def test_the_cursor_is_named_as_pulsar_names_it() -> None:
    core = Replicator("east", "west", START)
    assert core.cursor == cursor_name("west") == "pulsar.repl.west" and CURSOR_PREFIX == "pulsar.repl."
    assert is_replicator_cursor("pulsar.repl.west") and not is_replicator_cursor("my-subscription")
    with pytest.raises(ValueError, match="itself"):
        Replicator("east", "east", START)


def test_entries_are_published_with_their_origin_metadata_and_wait_for_receipts() -> None:
    core = replicator()
    out = core.step(EntriesRead((local(0), local(1))))
    sent = [o for o in out if isinstance(o, PublishToRemote)]
    assert [s.position for s in sent] == [Position(3, 0), Position(3, 1)]
    first = sent[0].metadata
    assert (first.producer_name, first.sequence_id, first.publish_time, first.event_time) == ("east-0", 0, 1000, 7)
    assert first.properties == (("k", "v"),) and first.replicated_from == "east" and sent[0].payload == b"m0"
    assert mark_deletes(out) == [] and core.mark_delete == START  # nothing acknowledged by the remote yet
    assert core.waiting == (Position(3, 0), Position(3, 1)) and core.last_read == Position(3, 1)
    assert [o for o in out if isinstance(o, ReadEntries)] == [ReadEntries(Position(3, 1), core.max_waiting - 2)]


def test_receipts_move_the_cursor_only_past_a_prefix_of_done_entries() -> None:
    core = replicator()
    core.step(EntriesRead((local(0), local(1), local(2))))
    assert mark_deletes(core.step(SendReceipt(Position(3, 1)))) == []  # entry 0 still waits
    assert core.mark_delete == START and core.waiting == (Position(3, 0), Position(3, 2))
    assert mark_deletes(core.step(SendReceipt(Position(3, 0)))) == [Position(3, 1)]
    assert core.step(SendReceipt(Position(3, 0))) == []  # not waiting any more: ignored
    assert mark_deletes(core.step(SendReceipt(Position(3, 2)))) == [Position(3, 2)]
    assert core.waiting == () and core.mark_delete == core.last_read == Position(3, 2)


def test_entries_that_arrived_by_replication_are_skipped() -> None:
    core = replicator()
    out = core.step(EntriesRead((replicated(0),)))
    assert published(out) == [] and mark_deletes(out) == [Position(3, 0)]  # done at once
    out = core.step(EntriesRead((local(1), replicated(2), replicated(3))))
    assert published(out) == [Position(3, 1)] and mark_deletes(out) == []  # behind the waiting entry 1
    assert mark_deletes(core.step(SendReceipt(Position(3, 1)))) == [Position(3, 3)]  # past the skipped ones


def test_a_lost_connection_rewinds_to_the_cursor_and_sends_again() -> None:
    core = replicator()
    core.step(EntriesRead((local(0), local(1))))
    core.step(SendReceipt(Position(3, 0)))
    out = core.step(ProducerDisconnected())
    assert out == [ReadEntries(Position(3, 0), core.max_waiting)]
    assert core.waiting == () and core.last_read == core.mark_delete == Position(3, 0)
    assert core.step(SendReceipt(Position(3, 1))) == []  # the old connection's receipt: ignored
    assert published(core.step(EntriesRead((local(1),)))) == [Position(3, 1)]


def test_a_restart_resumes_from_the_persisted_cursor() -> None:
    core = replicator()
    core.step(EntriesRead((local(0), local(1), local(2))))
    persisted = mark_deletes(core.step(SendReceipt(Position(3, 0))))[-1]
    new_owner = Replicator.restart("east", "west", persisted)
    assert new_owner.step(Start()) == [ReadEntries(Position(3, 0), new_owner.max_waiting)]
    assert published(new_owner.step(EntriesRead((local(1), local(2))))) == [Position(3, 1), Position(3, 2)]


def test_entries_out_of_order_are_refused() -> None:
    core = replicator()
    core.step(EntriesRead((local(0), local(1))))
    with pytest.raises(ReplicationError, match="out of order"):
        core.step(EntriesRead((local(1),)))
    with pytest.raises(TypeError):
        core.step("not an event")  # type: ignore[arg-type]


def test_reading_stops_while_too_many_entries_wait() -> None:
    core = replicator(max_waiting=2)
    out = core.step(EntriesRead((local(0), local(1))))
    assert [o for o in out if isinstance(o, ReadEntries)] == []
    out = core.step(SendReceipt(Position(3, 0)))
    assert [o for o in out if isinstance(o, ReadEntries)] == [ReadEntries(Position(3, 1), 1)]
    assert core.step(Start()) == []  # a read is already asked for


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_the_cursor_never_passes_an_entry_the_remote_did_not_acknowledge(data: st.DataObject) -> None:
    core = replicator()
    kinds = data.draw(st.lists(st.booleans(), min_size=1, max_size=12))  # True: published locally
    entries = [local(i) if k else replicated(i) for i, k in enumerate(kinds)]
    acknowledged: set[Position] = set()
    cursor, read = START, 0
    for _ in range(40):
        choice = data.draw(st.sampled_from(["read", "receipt", "disconnect"]))
        if choice == "read" and read < len(entries):
            n = data.draw(st.integers(1, len(entries) - read))
            out = core.step(EntriesRead(tuple(entries[read : read + n])))
            assert all(not entries[p.entry_id].metadata.replicated for p in published(out))
            read += n
        elif choice == "receipt" and core.waiting:
            pos = data.draw(st.sampled_from(core.waiting))
            acknowledged.add(pos)
            out = core.step(SendReceipt(pos))
        elif choice == "disconnect":
            out = core.step(ProducerDisconnected())
            read = core.last_read.entry_id + 1
        else:
            continue
        for moved in mark_deletes(out):
            assert moved > cursor
            cursor = moved
        for e in entries[: cursor.entry_id + 1]:
            assert e.metadata.replicated or e.position in acknowledged
    assert core.mark_delete == cursor


# ---- de-duplication ---------------------------------------------------------------------------------


def test_the_duplicate_decision_is_the_highest_sequence_id_per_producer() -> None:
    assert not is_duplicate({}, "p", 0)
    assert is_duplicate({"p": 4}, "p", 4) and is_duplicate({"p": 4}, "p", 2)
    assert not is_duplicate({"p": 4}, "p", 5) and not is_duplicate({"p": 4}, "q", 1)


def test_a_replayed_message_is_dropped_and_acknowledged() -> None:
    dedup = Deduplication(enabled=True)
    first = MessageMetadata("east-0", 1, replicated_from="east")
    assert dedup.step(first) == Persist(first)
    assert dedup.step(MessageMetadata("east-0", 2)) == Persist(MessageMetadata("east-0", 2))
    assert dedup.step(first) == Duplicate(first, 2)
    assert dedup.highest == {"east-0": 2}


def test_without_deduplication_a_replay_is_persisted_again() -> None:
    dedup = Deduplication(enabled=False)
    message = MessageMetadata("east-0", 1)
    assert dedup.step(message) == Persist(message) and dedup.step(message) == Persist(message)
    assert dedup.highest == {"east-0": 1}  # tracked all the same


def test_the_state_is_rebuilt_from_the_log_after_a_restart() -> None:
    log = [MessageMetadata("a", 1), MessageMetadata("b", 7), MessageMetadata("a", 3)]
    dedup = Deduplication.recover(True, log)
    assert dedup.highest == {"a": 3, "b": 7}
    assert isinstance(dedup.step(MessageMetadata("b", 7)), Duplicate)
