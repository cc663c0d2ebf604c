"""The storage lifecycle core beyond what storage.tla replays: refusals, tombstones, stale answers."""

from __future__ import annotations

import pytest

from impl.broker.ledger_list import LedgerInfo, Position
from impl.broker.managed_ledger_core import MB
from impl.broker.storage_lifecycle import (
    BadVersion,
    CompactedLedgerWritten,
    CompactionCursor,
    CompactionRead,
    CompactRequested,
    CursorWritten,
    DeleteCompactedLedger,
    DeleteObject,
    KeyedEntry,
    LifecycleConfig,
    LifecycleError,
    ListedLedger,
    Load,
    OffloadRequested,
    StorageLifecycle,
    TrimRequested,
    Upload,
    UploadFailed,
    WriteCompactedLedger,
    WriteCompactionCursor,
    WriteList,
    last_per_key,
)


def loaded(retention_mb: float = 0, current: int | None = None) -> StorageLifecycle:
    core = StorageLifecycle("t", LifecycleConfig(retention_size_mb=retention_mb))
    ledgers = tuple(ListedLedger(LedgerInfo(i, 1, MB, 0.0)) for i in (1, 2, 3))
    core.step(Load(ledgers, 5, CompactionCursor(1), current=current))
    return core


def test_last_per_key_keeps_the_last_value_and_drops_tombstones() -> None:
    def e(i: int, key: str, value: bytes | None) -> KeyedEntry:
        return KeyedEntry(Position(i, 0), key, value)

    assert last_per_key((e(3, "a", b"3"), e(1, "a", b"1"), e(2, "b", b"2"), e(4, "b", None))) == (e(3, "a", b"3"),)


def test_trim_keeps_retention_and_unconsumed_ledgers() -> None:
    core = loaded(retention_mb=1)
    out = core.step(TrimRequested(0.0, Position(3, 0), True))
    assert out == [WriteList(core.ledgers[2:], 5)]  # ledger 3 kept by retention
    fresh = loaded()
    assert fresh.step(TrimRequested(0.0, Position(1, 0), True)) == [WriteList(fresh.ledgers[1:], 5)]


def test_one_operation_at_a_time_and_no_offload_of_the_current_ledger() -> None:
    core = loaded(current=3)
    with pytest.raises(LifecycleError, match="still being written"):
        core.step(OffloadRequested(3, "u"))
    assert core.step(OffloadRequested(1, "u")) == [Upload(1, "u")]
    with pytest.raises(LifecycleError, match="while a offload is running"):
        core.step(CompactRequested(Position(2, 0)))
    # a failed upload keeps the bookie copy and removes the partial object
    assert core.step(UploadFailed(1, "u", "bucket is read-only")) == [DeleteObject(1, "u")]
    assert core.op is None


def test_a_failed_swap_fences_and_deletes_only_what_surely_did_not_apply() -> None:
    core = loaded()
    core.step(CompactRequested(Position(2, 0)))
    entries = (KeyedEntry(Position(1, 0), "k", b"1"), KeyedEntry(Position(2, 0), "k", b"2"))
    assert core.step(CompactionRead(entries)) == [WriteCompactedLedger(entries[1:])]
    assert core.step(CompactedLedgerWritten(9)) == [WriteCompactionCursor(Position(2, 0), 9, 1)]
    out = core.step(BadVersion())
    assert DeleteCompactedLedger(9) in out
    with pytest.raises(LifecycleError, match="fenced"):
        core.step(TrimRequested(0.0, None, False))


def test_a_swap_deletes_the_previous_compacted_ledger() -> None:
    core = loaded()
    core.step(Load(core.ledgers, 5, CompactionCursor(3, Position(1, 0), 7)))
    with pytest.raises(LifecycleError, match="compacted up to"):
        core.step(CompactRequested(Position(1, 0)))
    core.step(CompactRequested(Position(2, 0)))
    core.step(CompactionRead((KeyedEntry(Position(2, 0), "k", b"2"),)))
    core.step(CompactedLedgerWritten(8))
    assert core.step(CursorWritten(4)) == [DeleteCompactedLedger(7)]
    assert core.compaction == CompactionCursor(4, Position(2, 0), 8)


def test_stale_answers_are_ignored_and_other_events_refused() -> None:
    core = loaded()
    assert core.step(CursorWritten(2)) == []
    with pytest.raises(TypeError):
        core.step(object())  # type: ignore[arg-type]
