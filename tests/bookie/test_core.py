"""Unit tests of the pure bookie core: check order, fencing durability, LAC, read semantics."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from impl.bookie.core import AppendJournal, BookieCore, RecordKind, Reply
from impl.bookie.entry_format import encode_entry
from impl.bookie.protocol import (
    LAST_ENTRY,
    AddRequest,
    ErrorCode,
    ReadLacRequest,
    ReadRequest,
    WriteLacRequest,
)

KEY = b"k" * 20
OTHER = b"x" * 20


def entry(ledger: int, eid: int, lac: int = -1) -> bytes:
    return encode_entry(ledger, eid, lac, eid + 1, b"payload-%d" % eid)


def run(core: BookieCore, request, rid: int = 0, durable: bool = True) -> list[Reply]:
    """Drive the core like a shell: perform journal appends (instantly durable) and collect replies."""
    replies: list[Reply] = []
    pending = core.handle(request, rid)
    while pending:
        out = pending.pop(0)
        if isinstance(out, Reply):
            replies.append(out)
        elif durable:
            pending.extend(core.on_durable(out.token))
    return replies


def code(core: BookieCore, request) -> ErrorCode:
    (reply,) = run(core, request)
    return reply.response.code


def test_add_waits_for_durability_then_reads_back():
    core = BookieCore()
    outs = core.handle(AddRequest(1, 0, KEY, entry(1, 0)), 7)
    assert len(outs) == 1 and isinstance(outs[0], AppendJournal)
    kinds = [r.kind for r in outs[0].records]
    assert kinds == [RecordKind.MASTER_KEY, RecordKind.ENTRY]
    (reply,) = core.on_durable(outs[0].token)
    assert reply.request_id == 7 and reply.response.code is ErrorCode.EOK
    (read,) = run(core, ReadRequest(1, 0))
    assert read.response.body == entry(1, 0)


def test_master_key_checked_before_fence():
    core = BookieCore()
    assert code(core, AddRequest(1, 0, KEY, entry(1, 0))) is ErrorCode.EOK
    assert code(core, ReadRequest(1, 0, fence=True, master_key=KEY)) is ErrorCode.EOK
    assert code(core, AddRequest(1, 1, OTHER, entry(1, 1))) is ErrorCode.EUA
    assert code(core, AddRequest(1, 1, OTHER, entry(1, 1), recovery=True)) is ErrorCode.EUA
    assert code(core, AddRequest(1, 1, KEY, entry(1, 1))) is ErrorCode.EFENCED
    assert code(core, AddRequest(1, 1, KEY, entry(1, 1), recovery=True)) is ErrorCode.EOK
    assert code(core, ReadRequest(1, 1)) is ErrorCode.EOK


def test_fence_reply_only_after_fence_record_durable():
    core = BookieCore()
    run(core, AddRequest(1, 0, KEY, entry(1, 0)))
    outs = core.handle(ReadRequest(1, 0, fence=True, master_key=KEY), 3)
    assert [type(o) for o in outs] == [AppendJournal]
    assert [r.kind for r in outs[0].records] == [RecordKind.FENCE]
    assert core.ledgers[1].fenced
    (reply,) = core.on_durable(outs[0].token)
    assert reply.response.code is ErrorCode.EOK


def test_fence_wrong_key_fences_nothing():
    core = BookieCore()
    run(core, AddRequest(1, 0, KEY, entry(1, 0)))
    assert code(core, ReadRequest(1, 0, fence=True, master_key=OTHER)) is ErrorCode.EUA
    assert not core.ledgers[1].fenced
    assert code(core, AddRequest(1, 1, KEY, entry(1, 1))) is ErrorCode.EOK


def test_fencing_unseen_ledger_creates_it_fenced():
    core = BookieCore()
    assert code(core, ReadRequest(9, LAST_ENTRY, fence=True, master_key=KEY)) is ErrorCode.ENOENTRY
    assert core.ledgers[9].fenced
    assert code(core, AddRequest(9, 0, KEY, entry(9, 0))) is ErrorCode.EFENCED


def test_noledger_noentry_and_last_entry():
    core = BookieCore()
    assert code(core, ReadRequest(1, 0)) is ErrorCode.ENOLEDGER
    assert code(core, ReadLacRequest(1)) is ErrorCode.ENOLEDGER
    run(core, AddRequest(1, 0, KEY, entry(1, 0)))
    run(core, AddRequest(1, 2, KEY, entry(1, 2, lac=0)))
    assert code(core, ReadRequest(1, 1)) is ErrorCode.ENOENTRY
    (last,) = run(core, ReadRequest(1, LAST_ENTRY))
    assert last.response.entry_id == 2 and last.response.body == entry(1, 2, lac=0)


def test_lac_piggybacked_and_explicit():
    core = BookieCore()
    run(core, AddRequest(1, 0, KEY, entry(1, 0)))
    run(core, AddRequest(1, 5, KEY, entry(1, 5, lac=3)))
    run(core, AddRequest(1, 4, KEY, entry(1, 4, lac=2)))
    (r,) = run(core, ReadLacRequest(1))
    assert r.response.lac == 3
    assert code(core, WriteLacRequest(1, KEY, 4)) is ErrorCode.EOK
    (r,) = run(core, ReadLacRequest(1))
    assert r.response.lac == 4
    assert code(core, WriteLacRequest(1, OTHER, 9)) is ErrorCode.EUA


def test_readonly_refuses_adds_serves_reads():
    core = BookieCore()
    run(core, AddRequest(1, 0, KEY, entry(1, 0)))
    core.readonly = True
    assert code(core, AddRequest(1, 1, KEY, entry(1, 1))) is ErrorCode.EREADONLY
    assert code(core, ReadRequest(1, 0)) is ErrorCode.EOK


def test_replay_rebuilds_state():
    core = BookieCore()
    journal = []
    for req in [
        AddRequest(1, 0, KEY, entry(1, 0)),
        AddRequest(1, 1, KEY, entry(1, 1, lac=0)),
        ReadRequest(1, 0, fence=True, master_key=KEY),
        WriteLacRequest(1, KEY, 1),
    ]:
        for out in core.handle(req, 0):
            if isinstance(out, AppendJournal):
                journal.extend(out.records)
    restarted = BookieCore()
    for record in journal:
        restarted.replay(record)
    assert restarted.ledgers == core.ledgers


@given(
    ledger=st.integers(min_value=-(2**70), max_value=2**70),
    eid=st.integers(min_value=-(2**70), max_value=2**70),
    body=st.binary(max_size=64),
)
def test_malformed_adds_get_ebadreq_never_crash(ledger, eid, body):
    core = BookieCore()
    (reply,) = run(core, AddRequest(ledger, eid, KEY, body))
    assert reply.response.code in (ErrorCode.EBADREQ, ErrorCode.EOK)
    if reply.response.code is ErrorCode.EOK:
        assert body[:16] and core.ledgers[ledger].entries[eid] == body
