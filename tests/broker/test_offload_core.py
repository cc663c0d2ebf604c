"""The pure parts of tiered storage: the managed-ledger core's offload records (SetOffloadContext, storage.tla's
OffloadRecord as one more conditional write of the list), the trim of offloaded ledgers, and which ledgers
an offloadThreshold offloads."""

from __future__ import annotations

from impl.broker.ledger_list import LedgerInfo, LedgerList, OffloadContext
from impl.broker.managed_ledger_core import (
    CreateLedger,
    DeleteLedgers,
    DeleteOffloaded,
    LastLedgerRecovered,
    LedgerCreated,
    LedgerListBadVersion,
    LedgerListRead,
    LedgerListWritten,
    ManagedLedgerCore,
    ManagedLedgerState,
    OffloadContextWritten,
    Open,
    Opened,
    RecoverLastLedger,
    SetOffloadContext,
    Trim,
    TrimDone,
    WriteLedgerList,
)
from impl.broker.offload.topic import threshold_candidates

CONTEXT = OffloadContext("uid-1", True, False, 100.0, "filesystem", {"directory": "/d"})


def opened() -> ManagedLedgerCore:
    """A core that took over a list of two closed ledgers (1 and 2) and writes ledger 3, list version 4."""
    core = ManagedLedgerCore("t/ns/persistent/x")
    listed = LedgerList((LedgerInfo(1, 10, 100, 1.0), LedgerInfo(2, 0, 0, 0.0)))
    core.step(Open())
    assert core.step(LedgerListRead(listed.encode(), 2)) == [RecoverLastLedger(2)]
    assert core.step(LastLedgerRecovered(2, 4, 50)) == [CreateLedger()]
    assert isinstance(core.step(LedgerCreated(3, 0.0))[0], WriteLedgerList)
    assert Opened() in core.step(LedgerListWritten(3))
    return core


def test_an_offload_record_is_a_conditional_write_of_the_list() -> None:
    core = opened()
    [write] = core.step(SetOffloadContext(1, CONTEXT))
    assert isinstance(write, WriteLedgerList) and write.expected_version == 3
    assert LedgerList.decode(write.data).ledgers[0].offload == CONTEXT
    assert core.step(SetOffloadContext(2, CONTEXT)) == [OffloadContextWritten(2, "busy")]  # one change at a time
    assert core.step(LedgerListWritten(4)) == [OffloadContextWritten(1, "written", 4)]
    assert core.ledgers[0].offloaded and not core.ledgers[1].offloaded
    [refused] = core.step(SetOffloadContext(3, CONTEXT))
    assert refused.outcome == "refused" and "still being written" in refused.detail
    [refused] = core.step(SetOffloadContext(9, CONTEXT))
    assert refused.outcome == "refused" and "not on the ledger list" in refused.detail


def test_a_failed_record_fences() -> None:
    core = opened()
    core.step(SetOffloadContext(1, CONTEXT))
    out = core.step(LedgerListBadVersion("version 5 found"))
    assert out[0] == OffloadContextWritten(1, "badversion", None, "version 5 found")
    assert core.state is ManagedLedgerState.FENCED and core.ledgers[0].offload is None


def test_a_trimmed_offloaded_ledger_takes_its_copy_along() -> None:
    core = opened()
    core.step(SetOffloadContext(1, CONTEXT))
    core.step(LedgerListWritten(4))
    [write] = core.step(Trim(1_000.0, None, cursors=False))
    assert isinstance(write, WriteLedgerList)
    out = core.step(LedgerListWritten(5))
    assert out[:3] == [DeleteLedgers((1, 2)), DeleteOffloaded((core_info(1),)), TrimDone((1, 2))]


def core_info(ledger_id: int) -> LedgerInfo:
    return LedgerInfo(ledger_id, 10, 100, 1.0, CONTEXT)


def test_threshold_candidates() -> None:
    ledgers = [LedgerInfo(i, 10, 100, 1.0) for i in range(1, 5)] + [LedgerInfo(5)]  # 5: the current ledger
    assert threshold_candidates(ledgers, 5, -1) == []
    assert threshold_candidates(ledgers, 5, 0) == [1, 2, 3, 4]
    assert threshold_candidates(ledgers, 5, 250) == [1, 2]  # the newest 300 bytes exceed it from ledger 2 on
    assert threshold_candidates(ledgers, 5, 400) == []
    done = [LedgerInfo(1, 10, 100, 1.0, CONTEXT), *ledgers[1:]]
    assert threshold_candidates(done, 5, 150) == [2, 3]  # offloaded ledgers count, and are not offloaded again
