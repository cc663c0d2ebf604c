"""Merging a real run's logs into one sequence of ledger.tla steps (conformance/linearization.py).

Logs written by hand: contradictory orders are reported as a cycle, and an answer the client ignored
on a cycle is taken as a lost reply (`relaxed`), while one it counted is not. The merge of real runs'
logs is tested with the runs, in test_process_traces.py and test_cluster_traces.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance.linearization import CycleError, linearize


def _record(seq: int, name: str, **params: Any) -> dict[str, Any]:
    return {"seq": seq, "name": name, "params": params}


def _handles(seq: int, kind: str, entry: int, entries: list[int], fenced: bool = False) -> dict[str, Any]:
    return _record(seq, "BookieHandles", ledger=7, kind=kind, entry=entry, entries=entries, fenced=fenced)


def _add_answer(seq: int, bookie: str, entry: int, lac: int) -> dict[str, Any]:
    return _record(
        seq, "WriterReceivesAddResponse", bookie=bookie, entry=entry, ok=True, counted=True,
        state="writing", fenced=False, lac=lac,
    )  # fmt: skip


def test_contradictory_logs_are_reported_as_a_cycle() -> None:
    # The writer saw b1's answer for entry 0 before the one for entry 1; b1 says it handled 1 first.
    writer = [
        _record(0, "WriterSendsAdd", entry=0, lac=-1),
        _record(1, "WriterSendsAdd", entry=1, lac=-1),
        _add_answer(2, "b1", 0, -1),
        _add_answer(3, "b1", 1, -1),
    ]
    b1 = [_handles(0, "add", 1, [1]), _handles(1, "add", 0, [0, 1])]
    with pytest.raises(CycleError, match="cycle") as info:
        linearize({"b1": b1}, {"w": writer}, 7)
    assert "bookie b1 handles add of entry 1 (its line 0)" in str(info.value)
    # both answers counted: neither can be taken as a lost reply
    with pytest.raises(CycleError):
        linearize({"b1": b1}, {"w": writer}, 7, relaxed=True)
    # in the right order the same logs merge into one delivery step per answer
    events = linearize({"b1": list(reversed(b1))}, {"w": writer}, 7).events
    assert [e.name for e in events] == [
        "WriterSendsAdd", "WriterSendsAdd", "BookieHandles", "WriterReceivesAddResponse",
        "BookieHandles", "WriterReceivesAddResponse",
    ]  # fmt: skip


def test_an_ignored_late_answer_on_a_cycle_is_taken_as_a_lost_reply() -> None:
    # As seen in real runs: b1 stores add 0, is fenced, refuses add 1 at once (EFENCED is not
    # journalled) while add 0's OK waits for the journal, so the writer sees EFENCED 1 first, stops,
    # and then ignores OK 0. Atomic deliveries cannot keep both orders: OK 0 becomes a lost reply.
    writer = [
        _record(0, "WriterSendsAdd", entry=0, lac=-1),
        _record(1, "WriterSendsAdd", entry=1, lac=-1),
        _record(2, "WriterReceivesAddResponse", bookie="b1", entry=1, ok=False, counted=False,
                state="failed", fenced=True, lac=-1),
        _record(3, "WriterReceivesAddResponse", bookie="b1", entry=0, ok=True, counted=False,
                state="failed", fenced=True, lac=-1),
    ]  # fmt: skip
    recovery = [
        _record(0, "RecoveryStarts", outcome="OPEN", phase="fencing", end_found=False, next=-1, written_back=-1),
        _record(1, "RecoveryReceivesReadLacResponse", bookie="b1", stale=False, start=-1, lac=-1, phase="fencing"),
    ]
    b1 = [_handles(0, "add", 0, [0]), _handles(1, "readLac", -1, [0], fenced=True), _handles(2, "add", 1, [0], True)]
    clients = {"w": writer, "r1": recovery}
    with pytest.raises(CycleError, match="client w WriterReceivesAddResponse"):
        linearize({"b1": b1}, clients, 7)
    lin = linearize({"b1": b1}, clients, 7, relaxed=True)
    assert lin.lost == [
        "bookie b1 handles add of entry 0 (its line 0) + client w WriterReceivesAddResponse (its line 3)"
    ]
    names = [(e.name, e.params.get("kind"), e.params.get("entry")) for e in lin.events]
    assert names.index(("ReplyLost", "add", 0)) < names.index(("BookieHandles", "readLac", -1))
    assert ("WriterReceivesAddResponse", None, 0) not in names  # the ignored answer's event is dropped
    assert names.index(("WriterReceivesAddResponse", None, 1)) > names.index(("BookieHandles", "add", 1))
