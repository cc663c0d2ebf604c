"""The simulated bookie and network (conformance/sim_bookie.py): durability at once or held, crashes that
keep only the journal, and the transport's answers."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.replay import clone
from conformance.sim_bookie import BookieAnswerError, SimBookie, SimNetwork
from impl.bookie.core import BookieCore, RecordKind
from impl.bookie.entry_format import encode_entry
from impl.bookie.protocol import LAST_ENTRY, AddRequest, ErrorCode, ReadLacRequest, ReadRequest, Response

KEY = b"k" * 20


def add(ledger: int, eid: int, lac: int = -1, *, recovery: bool = False, body: bytes = b"") -> AddRequest:
    entry = encode_entry(ledger, eid, lac, eid + 1, body or b"payload-%d" % eid)
    return AddRequest(ledger, eid, KEY, entry, recovery=recovery)


def fence(ledger: int) -> ReadRequest:
    return ReadRequest(ledger, LAST_ENTRY, fence=True, master_key=KEY)


def test_durable_at_once_answers_journals_and_stores() -> None:
    bookie = SimBookie()
    assert bookie.answer(add(1, 0)).code is ErrorCode.EOK
    assert [r.kind for r in bookie.journal] == [RecordKind.MASTER_KEY, RecordKind.ENTRY]
    assert bookie.body(1, 0) == add(1, 0).body and bookie.unsynced == []
    read = bookie.answer(ReadRequest(1, 0))
    assert (read.code, read.body) == (ErrorCode.EOK, add(1, 0).body)
    (reply,) = bookie.handle(ReadLacRequest(1), request_id=42)
    assert reply.request_id == 42 and reply.response.code is ErrorCode.EOK


def test_held_durability_keeps_the_reply_until_the_sync() -> None:
    bookie = SimBookie(hold=True)
    assert bookie.handle(add(1, 0)) == []  # the ack waits for the journal
    assert bookie.journal == [] and len(bookie.unsynced) == 1
    assert bookie.answer(ReadRequest(1, 0)).body == add(1, 0).body  # ledger storage before the journal
    assert bookie.handle(add(1, 1, 0)) == []
    (first,) = bookie.sync(1)  # only the first append becomes durable
    assert (first.request_id, first.response.code, first.response.entry_id) == (0, ErrorCode.EOK, 0)
    assert len(bookie.unsynced) == 1 and [r.entry_id for r in bookie.journal] == [-1, 0]
    (second,) = bookie.sync()
    assert second.response.entry_id == 1 and bookie.unsynced == [] and bookie.sync() == []


def test_answer_refuses_a_request_whose_reply_is_held() -> None:
    with pytest.raises(BookieAnswerError, match="answered"):
        SimBookie(hold=True).answer(add(1, 0))


def test_a_crash_keeps_only_what_was_durable() -> None:
    bookie = SimBookie(hold=True)
    bookie.handle(add(1, 0))
    bookie.handle(fence(1))
    bookie.sync()  # entry 0 and the fence are durable
    bookie.handle(add(1, 1, recovery=True))  # not durable
    assert bookie.core.ledgers[1].entries == {0, 1}
    bookie.crash()
    assert not bookie.up and bookie.unsynced == []
    assert bookie.core.ledgers[1].entries == {0} and bookie.core.ledgers[1].fenced
    assert bookie.storage == {(1, 0): add(1, 0).body}  # put back by the journal's replay
    bookie.restart()
    assert bookie.up
    bookie.hold = False
    assert bookie.answer(add(1, 2)).code is ErrorCode.EFENCED  # the fence survived
    assert bookie.answer(ReadRequest(1, 1)).code is ErrorCode.ENOENTRY


def test_a_crash_keeps_the_body_journalled_last() -> None:
    bookie = SimBookie()
    bookie.answer(add(1, 0, body=b"first"))
    bookie.answer(add(1, 0, recovery=True, body=b"again"))
    before = bookie.body(1, 0)
    bookie.crash()
    assert bookie.body(1, 0) == before == add(1, 0, body=b"again").body


class TracedCore(BookieCore):
    pass


def test_the_restarted_core_is_of_the_same_class_with_the_same_tracer() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    bookie = SimBookie(TracedCore(tracer=lambda name, params: events.append((name, params))))
    bookie.answer(add(1, 0))
    bookie.crash()
    assert type(bookie.core) is TracedCore
    assert [name for name, _ in events] == ["BookieHandles", "BookieReplays", "BookieReplays"]


def test_fail_is_for_good_and_a_clone_is_independent() -> None:
    bookie = SimBookie()
    bookie.answer(add(1, 0))
    copy = clone(bookie)
    bookie.fail()
    assert not bookie.up and bookie.failed and bookie.core.ledgers[1].entries == {0}
    assert copy.up and not copy.failed
    copy.answer(add(1, 1))
    assert bookie.body(1, 1) is None and copy.body(1, 1) is not None


def test_the_network_answers_inline_and_none_when_unreachable() -> None:
    net = SimNetwork(["a", "b"])
    answers: list[Response | None] = []
    net.send("a", add(1, 0), answers.append)
    net.silent.add("b")
    net.send("b", add(1, 0), answers.append)
    net.send("nowhere", add(1, 0), answers.append)
    assert [a.code if a else None for a in answers] == [ErrorCode.EOK, None, None]
    assert net.requests == 1 and net.storage == {("a", 1, 0): add(1, 0).body}
    assert net.answer("b", ReadRequest(1, 0)) is None
    net.silent.clear()
    assert net.answer("b", ReadRequest(1, 0)).code is ErrorCode.ENOLEDGER
    net.bookies["a"].crash()
    assert net.answer("a", ReadRequest(1, 0)) is None  # down
    assert net.requests == 2


def test_the_network_delivers_held_replies_at_the_sync_and_none_at_a_crash() -> None:
    net = SimNetwork(["a", "b"], hold=True)
    answers: dict[str, list[Response | None]] = {"a": [], "b": []}
    for bookie in answers:
        net.send(bookie, add(1, 0), answers[bookie].append)
        net.send(bookie, ReadRequest(1, 0), answers[bookie].append)  # a plain read needs no durability
    assert [r.code for r in answers["a"] if r] == [ErrorCode.EOK] and len(answers["a"]) == 1
    net.sync("a")
    net.crash("b")
    assert [(r.entry_id, r.code) for r in answers["a"] if r] == [(0, ErrorCode.EOK), (0, ErrorCode.EOK)]
    assert len(answers["b"]) == 2 and answers["b"][1] is None  # the held add is never answered: None
    net.sync("a")  # nothing more to release
    assert len(answers["a"]) == 2
