"""Unit tests of the pure bookie core: check order, fencing durability, LAC, read semantics.

The core is driven through its one entry point, `BookieCore.step(event)`, directly or by a simulated
bookie (conformance/sim_bookie.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.sim_bookie import SimBookie
from impl.bookie.core import (
    AppendJournal,
    BookieCore,
    EntryNotStored,
    ForgetLedger,
    JournalDurable,
    ReadEntry,
    RecordKind,
    Replay,
    Reply,
    RequestReceived,
    RestoreDeleted,
    RestoreLedger,
    SetReadOnly,
    StoreEntry,
)
from impl.bookie.entry_format import encode_entry
from impl.bookie.protocol import (
    LAST_ENTRY,
    AddRequest,
    AddResponse,
    ErrorCode,
    ReadLacRequest,
    ReadRequest,
    WriteLacRequest,
)

KEY = b"k" * 20
OTHER = b"x" * 20


def entry(ledger: int, eid: int, lac: int = -1) -> bytes:
    return encode_entry(ledger, eid, lac, eid + 1, b"payload-%d" % eid)


def code(bookie: SimBookie, request) -> ErrorCode:
    """The code the core answers, driven by a simulated bookie (journal durable at once, storage in memory)."""
    return bookie.answer(request).code


def test_add_waits_for_durability_then_reads_back():
    core = BookieCore()
    store, append = core.step(RequestReceived(AddRequest(1, 0, KEY, entry(1, 0)), 7))
    # the body goes to ledger storage before the journal (reads see it), the ack waits for the journal
    assert store == StoreEntry(1, 0, entry(1, 0))
    assert isinstance(append, AppendJournal)
    kinds = [r.kind for r in append.records]
    assert kinds == [RecordKind.MASTER_KEY, RecordKind.ENTRY]
    assert core.step(RequestReceived(ReadRequest(1, 0), 8)) == [ReadEntry(8, 1, 0)]
    (reply,) = core.step(JournalDurable(append.token))
    assert reply.request_id == 7 and reply.response.code is ErrorCode.EOK
    assert core.step(JournalDurable(append.token)) == []  # released once
    assert core.step(RequestReceived(ReadRequest(1, 0), 9)) == [ReadEntry(9, 1, 0)]
    assert ReadEntry(9, 1, 0).reply(None).response.code is ErrorCode.EIO  # storage lost it: an I/O error


def test_master_key_checked_before_fence():
    bookie = SimBookie()
    assert code(bookie, AddRequest(1, 0, KEY, entry(1, 0))) is ErrorCode.EOK
    assert code(bookie, ReadRequest(1, 0, fence=True, master_key=KEY)) is ErrorCode.EOK
    assert code(bookie, AddRequest(1, 1, OTHER, entry(1, 1))) is ErrorCode.EUA
    assert code(bookie, AddRequest(1, 1, OTHER, entry(1, 1), recovery=True)) is ErrorCode.EUA
    assert code(bookie, AddRequest(1, 1, KEY, entry(1, 1))) is ErrorCode.EFENCED
    assert code(bookie, AddRequest(1, 1, KEY, entry(1, 1), recovery=True)) is ErrorCode.EOK
    assert code(bookie, ReadRequest(1, 1)) is ErrorCode.EOK


def test_fence_reply_only_after_fence_record_durable():
    bookie = SimBookie()
    bookie.answer(AddRequest(1, 0, KEY, entry(1, 0)))
    core = bookie.core
    outs = core.step(RequestReceived(ReadRequest(1, 0, fence=True, master_key=KEY), 3))
    assert [type(o) for o in outs] == [AppendJournal]
    assert [r.kind for r in outs[0].records] == [RecordKind.FENCE]
    assert core.ledgers[1].fenced
    (read,) = core.step(JournalDurable(outs[0].token))  # the read of entry 0, from storage, once the fence is durable
    assert read == ReadEntry(3, 1, 0)


def test_fence_wrong_key_fences_nothing():
    bookie = SimBookie()
    code(bookie, AddRequest(1, 0, KEY, entry(1, 0)))
    assert code(bookie, ReadRequest(1, 0, fence=True, master_key=OTHER)) is ErrorCode.EUA
    assert not bookie.core.ledgers[1].fenced
    assert code(bookie, AddRequest(1, 1, KEY, entry(1, 1))) is ErrorCode.EOK


def test_fencing_unseen_ledger_creates_it_fenced():
    bookie = SimBookie()
    assert code(bookie, ReadRequest(9, LAST_ENTRY, fence=True, master_key=KEY)) is ErrorCode.ENOENTRY
    assert bookie.core.ledgers[9].fenced
    assert code(bookie, AddRequest(9, 0, KEY, entry(9, 0))) is ErrorCode.EFENCED


def test_noledger_noentry_and_last_entry():
    bookie = SimBookie()
    assert code(bookie, ReadRequest(1, 0)) is ErrorCode.ENOLEDGER
    assert code(bookie, ReadLacRequest(1)) is ErrorCode.ENOLEDGER
    code(bookie, AddRequest(1, 0, KEY, entry(1, 0)))
    code(bookie, AddRequest(1, 2, KEY, entry(1, 2, lac=0)))
    assert code(bookie, ReadRequest(1, 1)) is ErrorCode.ENOENTRY
    last = bookie.answer(ReadRequest(1, LAST_ENTRY))
    assert last.entry_id == 2 and last.body == entry(1, 2, lac=0)


def test_lac_piggybacked_and_explicit():
    bookie = SimBookie()
    code(bookie, AddRequest(1, 0, KEY, entry(1, 0)))
    code(bookie, AddRequest(1, 5, KEY, entry(1, 5, lac=3)))
    code(bookie, AddRequest(1, 4, KEY, entry(1, 4, lac=2)))
    assert bookie.answer(ReadLacRequest(1)).lac == 3
    assert code(bookie, WriteLacRequest(1, KEY, 4)) is ErrorCode.EOK
    assert bookie.answer(ReadLacRequest(1)).lac == 4
    assert code(bookie, WriteLacRequest(1, OTHER, 9)) is ErrorCode.EUA


def test_readonly_refuses_adds_serves_reads():
    bookie = SimBookie()
    code(bookie, AddRequest(1, 0, KEY, entry(1, 0)))
    assert bookie.core.step(SetReadOnly(True)) == []
    assert code(bookie, AddRequest(1, 1, KEY, entry(1, 1))) is ErrorCode.EREADONLY
    assert code(bookie, WriteLacRequest(1, KEY, 0)) is ErrorCode.EREADONLY
    assert code(bookie, ReadRequest(1, 0)) is ErrorCode.EOK
    bookie.core.step(SetReadOnly(False))
    assert code(bookie, AddRequest(1, 1, KEY, entry(1, 1))) is ErrorCode.EOK


def test_an_entry_storage_could_not_store_fails_its_add_and_the_bookie_turns_readonly():
    core = BookieCore()
    store, append = core.step(RequestReceived(AddRequest(1, 0, KEY, entry(1, 0)), 7))
    assert isinstance(store, StoreEntry) and isinstance(append, AppendJournal)
    (failed,) = core.step(EntryNotStored(append.token))  # the shell does not append the records
    assert failed == Reply(7, AddResponse(1, 0, ErrorCode.EIO))
    assert core.readonly and core.step(JournalDurable(append.token)) == []
    (refused,) = core.step(RequestReceived(AddRequest(1, 1, KEY, entry(1, 1)), 8))
    assert refused == Reply(8, AddResponse(1, 1, ErrorCode.EREADONLY))


def test_replay_rebuilds_state():
    bookie = SimBookie()
    for req in [
        AddRequest(1, 0, KEY, entry(1, 0)),
        AddRequest(1, 1, KEY, entry(1, 1, lac=0)),
        ReadRequest(1, 0, fence=True, master_key=KEY),
        WriteLacRequest(1, KEY, 1),
    ]:
        bookie.handle(req)
    restarted = BookieCore()
    stored = []
    for record in bookie.journal:
        stored += restarted.step(Replay(record))
    assert restarted.ledgers == bookie.core.ledgers
    assert stored == [StoreEntry(1, 0, entry(1, 0)), StoreEntry(1, 1, entry(1, 1, lac=0))]


def test_forget_and_restore_ledger():
    bookie = SimBookie()
    code(bookie, AddRequest(1, 0, KEY, entry(1, 0)))
    core = bookie.core
    state = core.ledgers[1]
    assert core.step(ForgetLedger(1)) == [] and 1 not in core.ledgers and core.deleted == {1}
    assert core.step(ForgetLedger(1)) == [] and core.deleted == {1}  # again: nothing more to drop
    assert code(bookie, ReadRequest(1, 0)) is ErrorCode.ENOLEDGER
    core.step(RestoreLedger(1, state))
    assert code(bookie, ReadRequest(1, 0)) is ErrorCode.EOK


def test_a_restarted_core_refuses_adds_to_the_ledgers_storage_lists_as_deleted():
    bookie = SimBookie()
    assert bookie.core.step(RestoreDeleted(frozenset({3, 4}))) == []
    assert code(bookie, AddRequest(3, 0, KEY, entry(3, 0))) is ErrorCode.EFENCED
    assert code(bookie, AddRequest(5, 0, KEY, entry(5, 0))) is ErrorCode.EOK


def test_an_event_of_another_core_is_refused():
    with pytest.raises(TypeError, match="not a bookie event"):
        BookieCore().step(AddRequest(1, 0, KEY, entry(1, 0)))  # type: ignore[arg-type]


@given(
    ledger=st.integers(min_value=-(2**70), max_value=2**70),
    eid=st.integers(min_value=-(2**70), max_value=2**70),
    body=st.binary(max_size=64),
)
def test_malformed_adds_get_ebadreq_never_crash(ledger, eid, body):
    bookie = SimBookie()
    reply = bookie.answer(AddRequest(ledger, eid, KEY, body))
    assert reply.code in (ErrorCode.EBADREQ, ErrorCode.EOK)
    if reply.code is ErrorCode.EOK:
        assert body[:16] and eid in bookie.core.ledgers[ledger].entries
        assert bookie.body(ledger, eid) == body
