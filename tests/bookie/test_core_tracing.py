"""Each bookie core reports its spec steps to its own tracer (impl/trace.py), never to another core's."""

from __future__ import annotations

from typing import Any

from impl.bookie.core import AppendJournal, BookieCore, JournalDurable, Replay, RequestReceived
from impl.bookie.entry_format import encode_entry
from impl.bookie.protocol import AddRequest, ReadLacRequest, ReadRequest

KEY = b"k" * 20


def _add(core: BookieCore, ledger: int, entry: int, request_id: int) -> AppendJournal:
    outputs = core.step(
        RequestReceived(AddRequest(ledger, entry, KEY, encode_entry(ledger, entry, -1, 1, b"x")), request_id)
    )
    (append,) = [o for o in outputs if isinstance(o, AppendJournal)]
    core.step(JournalDurable(append.token))
    return append


def test_two_cores_in_one_process_keep_separate_traces() -> None:
    first: list[tuple[str, dict[str, Any]]] = []
    second: list[tuple[str, dict[str, Any]]] = []
    a = BookieCore(tracer=lambda name, params: first.append((name, params)))
    b = BookieCore(tracer=lambda name, params: second.append((name, params)))
    _add(a, 1, 0, 0)
    b.step(RequestReceived(ReadRequest(2, 0, fence=True, master_key=KEY), 0))
    b.step(RequestReceived(ReadLacRequest(2), 1))  # not a ledger.tla step of the bookie: not traced
    assert first == [
        ("BookieHandles", {"ledger": 1, "entry": 0, "kind": "add", "fence": False, "entries": [0], "fenced": False})
    ]
    assert second == [
        ("BookieHandles", {"ledger": 2, "entry": 0, "kind": "read", "fence": True, "entries": [], "fenced": True})
    ]


def test_a_replayed_journal_is_traced_by_the_restarted_core_only() -> None:
    before = BookieCore()
    append = _add(before, 3, 0, 0)
    replays: list[tuple[str, dict[str, Any]]] = []
    restarted = BookieCore(tracer=lambda name, params: replays.append((name, params)))
    for record in append.records:
        restarted.step(Replay(record))
    assert [(name, p["kind"], p["entry"]) for name, p in replays] == [
        ("BookieReplays", "MASTER_KEY", -1),
        ("BookieReplays", "ENTRY", 0),
    ]
