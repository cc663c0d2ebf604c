"""The ledger writer core, driven with hand-written (recorded) bookie answers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl.bookie.client.errors import LedgerClosedError, LedgerFencedError, MetadataUpdateError
from impl.bookie.client.ledger_update import EnsembleChange, MetadataResult, StartRecovery, UpdateMetadata, WriterClose
from impl.bookie.client.writer import (
    Add,
    AddCompleted,
    AddFailed,
    BookieAnswered,
    ChooseReplacement,
    Close,
    CloseFailed,
    LedgerWriter,
    NoReplacement,
    ReplacementChosen,
    Send,
    Start,
    WriterClosed,
    WriterOutput,
)
from impl.bookie.entry_format import decode_entry, master_key
from impl.bookie.protocol import AddRequest, AddResponse, ErrorCode
from impl.metadata.ledger import DigestType, Fragment, LedgerMetadata, LedgerState

from .simulation import SimLedgerStore

LEDGER = 7
BOOKIES = ("b0:1", "b1:1", "b2:1")


def metadata(e: int = 3, qw: int = 3, qa: int = 2, digest: DigestType = DigestType.CRC32C) -> LedgerMetadata:
    return LedgerMetadata(e, qw, qa, (Fragment(0, BOOKIES[:e]),), digest_type=digest, password=b"pw")


def sends(outputs: list[WriterOutput]) -> list[Send]:
    return [o for o in outputs if isinstance(o, Send)]


def answer(writer: LedgerWriter, send: Send, code: ErrorCode = ErrorCode.EOK) -> list[WriterOutput]:
    assert isinstance(send.request, AddRequest)
    return writer.step(BookieAnswered(send.bookie, send.request, AddResponse(LEDGER, send.request.entry_id, code)))


def completed(outputs: list[WriterOutput]) -> list[int]:
    return [o.entry_id for o in outputs if isinstance(o, AddCompleted)]


def test_add_goes_to_its_write_set_with_key_and_piggybacked_lac() -> None:
    writer = LedgerWriter(LEDGER, metadata(e=3, qw=2, qa=2))
    out0 = sends(writer.step(Add(b"zero")))
    assert [s.bookie for s in out0] == ["b0:1", "b1:1"]
    for s in out0:
        answer(writer, s)
    out1 = sends(writer.step(Add(b"one")))
    assert [s.bookie for s in out1] == ["b1:1", "b2:1"]  # (1 + i) mod 3
    request = out1[0].request
    assert isinstance(request, AddRequest) and request.master_key == master_key(b"pw") and not request.recovery
    entry = decode_entry(request.body, DigestType.CRC32C, b"pw", LEDGER, 1)
    assert (entry.payload, entry.lac, entry.length) == (b"one", 0, 7)


def test_in_order_completion_with_out_of_order_acks() -> None:
    writer = LedgerWriter(LEDGER, metadata())
    per_entry = [sends(writer.step(Add(b"x" * i))) for i in range(3)]
    assert completed(answer(writer, per_entry[2][0]) + answer(writer, per_entry[2][1])) == []
    assert completed(answer(writer, per_entry[1][2]) + answer(writer, per_entry[1][0])) == []
    assert writer.last_add_confirmed == -1  # entry 0 is a hole
    assert completed(answer(writer, per_entry[0][1])) == []  # one ack of Qa=2
    assert completed(answer(writer, per_entry[0][2])) == [0, 1, 2]
    assert (writer.last_add_confirmed, writer.length) == (2, 0 + 1 + 2)


@given(st.integers(1, 8).flatmap(lambda n: st.permutations([(e, i) for e in range(n) for i in range(3)])))
def test_lac_never_passes_a_hole(acks: list[tuple[int, int]]) -> None:
    writer = LedgerWriter(LEDGER, metadata())
    n = len(acks) // 3
    per_entry = [sends(writer.step(Add(b"p"))) for _ in range(n)]
    acked: dict[int, int] = {}
    delivered: list[int] = []
    for entry_id, i in acks:
        delivered += completed(answer(writer, per_entry[entry_id][i]))
        acked[entry_id] = acked.get(entry_id, 0) + 1
        prefix = -1
        while acked.get(prefix + 1, 0) >= 2:
            prefix += 1
        assert writer.last_add_confirmed == prefix
        assert delivered == list(range(prefix + 1))
    assert delivered == list(range(n))


@pytest.mark.parametrize(("code", "why"), [(ErrorCode.EFENCED, "fenced"), (ErrorCode.EUA, "master key")])
def test_fenced_or_unauthorised_stops_the_writer(code: ErrorCode, why: str) -> None:
    writer = LedgerWriter(LEDGER, metadata())
    first = sends(writer.step(Add(b"a")))
    sends(writer.step(Add(b"b")))
    outputs = answer(writer, first[1], code)
    failed = [o for o in outputs if isinstance(o, AddFailed)]
    assert [f.entry_id for f in failed] == [0, 1]
    assert all(isinstance(f.error, LedgerFencedError) for f in failed)
    assert f"ledger {LEDGER}" in str(failed[0].error) and why in str(failed[0].error)
    later = writer.step(Add(b"c"))
    assert len(later) == 1 and isinstance(later[0], AddFailed) and isinstance(later[0].error, LedgerFencedError)
    assert answer(writer, first[0]) == []  # a late ack changes nothing


@pytest.mark.parametrize("code", [ErrorCode.EFENCED, ErrorCode.EUA])
def test_an_error_for_an_add_with_qa_acks_is_ignored(code: ErrorCode) -> None:
    """BookKeeper's PendingAddOp.writeComplete ignores errors once the add has Qa acks ("completed"):
    an under-replicated entry, not a failure (ledger.tla: `fencedNow` needs fewer than Qa acks)."""
    writer = LedgerWriter(LEDGER, metadata())  # E=Qw=3, Qa=2
    e0 = sends(writer.step(Add(b"a")))
    e1 = sends(writer.step(Add(b"b")))
    answer(writer, e1[0])
    assert answer(writer, e1[1]) == []  # entry 1 has Qa acks; entry 0 still pending: not confirmed
    assert answer(writer, e1[2], code) == []  # ignored: entry 1 completed
    assert writer.state.value == "writing"
    answer(writer, e0[0])
    assert completed(answer(writer, e0[1])) == [0, 1]
    assert answer(writer, e0[2], code) == []  # an error for a confirmed entry: ignored too
    assert writer.state.value == "writing" and writer.last_add_confirmed == 1


def test_efenced_for_an_add_short_of_qa_from_its_write_set_stops_the_writer() -> None:
    writer = LedgerWriter(LEDGER, metadata())
    e0 = sends(writer.step(Add(b"a")))
    answer(writer, e0[0])  # one ack of Qa = 2
    failed = [o for o in answer(writer, e0[1], ErrorCode.EFENCED) if isinstance(o, AddFailed)]
    assert [f.entry_id for f in failed] == [0] and isinstance(failed[0].error, LedgerFencedError)


def test_efenced_from_a_replaced_bookie_is_ignored() -> None:
    meta = metadata()
    writer = LedgerWriter(LEDGER, meta)
    e0 = sends(writer.step(Add(b"a")))
    answer(writer, e0[0], ErrorCode.EIO)  # b0 failed: ensemble change
    (update,) = writer.step(ReplacementChosen("b0:1", "b3:1"))
    assert isinstance(update, UpdateMetadata)
    writer.step(MetadataResult(update.change, True, changed_ensemble(meta, 0, "b0:1", "b3:1")))
    assert answer(writer, e0[0], ErrorCode.EFENCED) == []  # b0 is no longer in entry 0's write set
    assert writer.state.value == "writing"


def test_a_change_no_add_needs_any_more_is_dropped_when_the_replacement_comes() -> None:
    """ledger.tla changes the ensemble only for an add still short of Qa (delayed ensemble change);
    a real cluster run showed the add reaching Qa from the others while the replacement was chosen."""
    meta = metadata()
    writer = LedgerWriter(LEDGER, meta)
    e0 = sends(writer.step(Add(b"a")))
    answer(writer, e0[0])
    choose = answer(writer, e0[1], ErrorCode.EIO)  # short of Qa: a replacement is asked for
    assert [type(o) for o in choose] == [ChooseReplacement]
    assert completed(answer(writer, e0[2])) == [0]  # Qa from b0 and b2 meanwhile
    assert writer.step(Add(b"b")) == []  # held while the change is pending
    outputs = writer.step(ReplacementChosen(e0[1].bookie, "b3:1"))
    assert not [o for o in outputs if isinstance(o, UpdateMetadata)]
    assert writer.metadata == meta and writer.state.value == "writing"
    assert sorted(s.bookie for s in sends(outputs)) == list(BOOKIES)  # the held add goes to the ensemble


def test_a_change_still_needed_goes_ahead_when_the_replacement_comes() -> None:
    writer = LedgerWriter(LEDGER, metadata())
    e0 = sends(writer.step(Add(b"a")))
    answer(writer, e0[0])
    answer(writer, e0[1], ErrorCode.EIO)
    (update,) = writer.step(ReplacementChosen(e0[1].bookie, "b3:1"))  # entry 0 still has one ack of Qa = 2
    assert isinstance(update, UpdateMetadata) and isinstance(update.change, EnsembleChange)


def test_a_resent_add_carries_the_lac_it_was_first_sent_with() -> None:
    """PendingAddOp encodes an entry once (with the LAC of that moment) and re-sends that buffer to a
    replacement; ledger.tla re-sends with wSentLac[e], not the current wLac."""
    meta = metadata()
    writer = LedgerWriter(LEDGER, meta)
    e0 = sends(writer.step(Add(b"a")))
    e1 = sends(writer.step(Add(b"b")))  # sent with LAC -1
    for s in e0[:2]:
        answer(writer, s)
    assert writer.last_add_confirmed == 0
    answer(writer, e1[0])
    answer(writer, e1[1], ErrorCode.EIO)  # b2 failed
    (update,) = writer.step(ReplacementChosen(e1[1].bookie, "b3:1"))
    assert isinstance(update, UpdateMetadata)
    new_meta = changed_ensemble(meta, 1, e1[1].bookie, "b3:1")
    (resent,) = sends(writer.step(MetadataResult(update.change, True, new_meta)))
    assert resent.bookie == "b3:1" and isinstance(resent.request, AddRequest)
    assert resent.request == e1[1].request  # the same encoded entry
    assert decode_entry(resent.request.body, DigestType.CRC32C, b"pw", LEDGER, 1).lac == -1  # not the current 0


def test_a_recovery_add_carries_the_length_it_is_given() -> None:
    writer = LedgerWriter(LEDGER, metadata(), last_add_confirmed=4, length=40, recovery=True)
    (first, *_) = sends(writer.step(Add(b"abc", 77)))
    assert isinstance(first.request, AddRequest) and first.request.recovery
    entry = decode_entry(first.request.body, DigestType.CRC32C, b"pw", LEDGER, 5)
    assert (entry.lac, entry.length) == (4, 77)


def changed_ensemble(meta: LedgerMetadata, first: int, failed: str, replacement: str) -> LedgerMetadata:
    ensemble = tuple(replacement if b == failed else b for b in meta.last_ensemble)
    return LedgerMetadata(
        meta.ensemble_size,
        meta.write_quorum,
        meta.ack_quorum,
        (*[f for f in meta.fragments if f.first_entry_id < first], Fragment(first, ensemble)),
        password=meta.password,
    )


@pytest.mark.parametrize("failure", [ErrorCode.EIO, ErrorCode.EREADONLY, None])
def test_ensemble_change_resends_unacknowledged_adds_to_the_replacement(failure: ErrorCode | None) -> None:
    meta = metadata()
    writer = LedgerWriter(LEDGER, meta)
    e0 = sends(writer.step(Add(b"a")))
    answer(writer, e0[0])
    assert completed(answer(writer, e0[1])) == [0]
    e1 = sends(writer.step(Add(b"b")))
    assert [s.bookie for s in e1] == ["b1:1", "b2:1", "b0:1"]  # write set (1, 2, 0)
    answer(writer, e1[0])  # b1 acks entry 1
    assert isinstance(e1[1].request, AddRequest)
    outputs = (
        writer.step(BookieAnswered("b2:1", e1[1].request, None)) if failure is None else answer(writer, e1[1], failure)
    )  # None: the shell's timeout fired
    assert outputs == [ChooseReplacement("b2:1", BOOKIES)]
    held = writer.step(Add(b"c"))  # adds wait while the ensemble changes
    assert held == []
    (request,) = writer.step(ReplacementChosen("b2:1", "b3:1"))
    assert request == UpdateMetadata(EnsembleChange(LEDGER, 1, "b2:1", "b3:1"))
    new_meta = changed_ensemble(meta, 1, "b2:1", "b3:1")
    outputs = writer.step(MetadataResult(request.change, True, new_meta))
    resent = sends(outputs)
    # entry 1 re-sent to the replacement only; entry 2 now sent to its whole write set in the new ensemble
    assert [(s.bookie, s.request.entry_id) for s in resent] == [  # type: ignore[union-attr]
        ("b3:1", 1),
        ("b3:1", 2),
        ("b0:1", 2),
        ("b1:1", 2),
    ]
    assert answer(writer, e1[1]) == []  # the replaced bookie's late ack does not count
    assert completed(answer(writer, resent[0])) == [1]
    assert writer.metadata.fragments[-1] == Fragment(1, ("b0:1", "b1:1", "b3:1"))


@pytest.mark.parametrize(
    ("state", "error"), [(LedgerState.CLOSED, LedgerClosedError), (LedgerState.IN_RECOVERY, LedgerFencedError)]
)
def test_ensemble_change_finding_the_ledger_closed_or_in_recovery(state: LedgerState, error: type) -> None:
    meta = metadata()
    writer = LedgerWriter(LEDGER, meta)
    e0 = sends(writer.step(Add(b"a")))
    writer.step(Add(b"b"))
    answer(writer, e0[0], ErrorCode.EIO)
    (update,) = writer.step(ReplacementChosen("b0:1", "b3:1"))
    assert isinstance(update, UpdateMetadata)
    reread = LedgerMetadata(3, 3, 2, meta.fragments, state=state, password=b"pw")
    outputs = writer.step(MetadataResult(update.change, False, reread, "precondition failed"))
    assert [(o.entry_id, type(o.error)) for o in outputs if isinstance(o, AddFailed)] == [(0, error), (1, error)]
    assert isinstance(writer.step(Add(b"c"))[0], AddFailed)


def test_close_writes_lac_and_length() -> None:
    store = SimLedgerStore(LEDGER, metadata())
    writer = LedgerWriter(LEDGER, store.metadata)
    for payload in (b"abc", b"de"):
        for s in sends(writer.step(Add(payload))):
            answer(writer, s)
    pending = sends(writer.step(Add(b"never acknowledged")))
    assert pending
    outputs = writer.step(Close())
    assert isinstance(outputs[0], AddFailed) and isinstance(outputs[0].error, LedgerClosedError)
    assert outputs[1] == UpdateMetadata(WriterClose(LEDGER, 1, 5))
    assert isinstance(outputs[1], UpdateMetadata)
    closed = writer.step(store.apply(outputs[1].change))
    assert isinstance(closed[0], WriterClosed) and closed[0].metadata is not None
    assert (closed[0].metadata.state, closed[0].metadata.last_entry_id, closed[0].metadata.length) == (
        LedgerState.CLOSED,
        1,
        5,
    )


def test_writer_close_over_in_recovery_wins_and_a_conflicting_close_fails() -> None:
    store = SimLedgerStore(LEDGER, metadata())
    writer = LedgerWriter(LEDGER, store.metadata)
    for s in sends(writer.step(Add(b"abc"))):
        answer(writer, s)
    assert store.apply(StartRecovery(LEDGER)).metadata.state is LedgerState.IN_RECOVERY  # type: ignore[union-attr]
    (update,) = writer.step(Close())
    assert isinstance(update, UpdateMetadata)
    (closed,) = writer.step(store.apply(update.change))
    assert isinstance(closed, WriterClosed) and store.metadata.last_entry_id == 0

    other = LedgerWriter(LEDGER, metadata())  # a second writer with a different view: LAC -1
    (conflict,) = other.step(Close())
    assert isinstance(conflict, UpdateMetadata)
    (failed,) = other.step(store.apply(conflict.change))
    assert isinstance(failed, CloseFailed) and isinstance(failed.error, MetadataUpdateError)
    assert "metadata version error" in str(failed.error)


@pytest.mark.parametrize("event", [Start(), "add", AddCompleted(0), UpdateMetadata(WriterClose(LEDGER, -1, 0))])
def test_an_event_of_another_type_is_refused_and_changes_nothing(event: object) -> None:
    writer = LedgerWriter(LEDGER, metadata())
    (send, *_) = sends(writer.step(Add(b"a")))
    with pytest.raises(TypeError, match="not a ledger writer event"):
        writer.step(event)  # type: ignore[arg-type]
    assert writer.pending_entry_ids == [0] and writer.state.value == "writing"
    answer(writer, send)


def test_no_replacement_fails_the_pending_adds() -> None:
    writer = LedgerWriter(LEDGER, metadata())  # E=Qw=3, Qa=2
    e0 = sends(writer.step(Add(b"a")))
    assert writer.step(BookieAnswered(e0[0].bookie, e0[0].request, None)) == [ChooseReplacement(e0[0].bookie, BOOKIES)]
    (failed,) = writer.step(NoReplacement(e0[0].bookie, "no spare bookie left"))
    assert isinstance(failed, AddFailed) and failed.entry_id == 0 and "no spare bookie left" in str(failed.error)
    assert writer.state.value == "failed"
