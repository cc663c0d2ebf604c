"""The BookKeeper client's cores report to the tracer their client hands them (impl/trace.py), never to
another client's, and a client given none traces nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance.sim_bookie import SimNetwork
from impl.bookie.client.api import BookKeeperClient
from impl.bookie.client.connect import connect_bookkeeper
from impl.metadata.ledger_store import LedgerMetadataStore
from impl.metadata.memory import MemoryServer
from impl.metadata.registry import BookieRegistry
from impl.trace import TraceFile

BOOKIES = ["b0:3181", "b1:3181", "b2:3181"]
Events = list[tuple[str, dict[str, Any]]]


def _client(server: MemoryServer, events: Events | None) -> BookKeeperClient:
    tracer = None if events is None else lambda name, params: events.append((name, params))
    registry = BookieRegistry(server.connect())
    return BookKeeperClient(LedgerMetadataStore(server.connect()), registry, SimNetwork(BOOKIES), seed=1, tracer=tracer)


def _server() -> MemoryServer:
    server = MemoryServer()
    registry = BookieRegistry(server.connect())
    for bookie in BOOKIES:
        registry.register(bookie)
    return server


def test_a_clients_writers_and_recovery_ops_report_to_its_tracer() -> None:
    server = _server()
    events: Events = []
    client = _client(server, events)
    handle = client.create_ledger(3, 3, 2, password=b"pw")
    handle.add(b"a")
    names = [name for name, _ in events]
    assert names[0] == "LedgerCreated" and events[0][1]["ledger"] == handle.ledger_id
    assert events[0][1]["quorums"] == [3, 3, 2]
    assert "WriterSendsAdd" in names and names.count("WriterReceivesAddResponse") >= 2
    recovered = client.open_ledger(handle.ledger_id, b"pw", recovery=True)
    assert recovered.last_add_confirmed == 0
    recovery = [name for name, _ in events if name.startswith("Recovery")]
    assert recovery[0] == "RecoveryStarts" and recovery[-1] == "RecoveryCloses", recovery
    assert {params["ledger"] for _, params in events} == {handle.ledger_id}


def test_two_clients_in_one_process_keep_separate_traces_and_an_untraced_one_records_nothing() -> None:
    server = _server()
    first: Events = []
    second: Events = []
    one, two, untraced = _client(server, first), _client(server, second), _client(server, None)
    a = one.create_ledger(3, 3, 2)
    b = two.create_ledger(3, 3, 2)
    c = untraced.create_ledger(3, 3, 2)
    for handle in (a, b, c):
        handle.add(b"x")
    untraced.open_ledger(a.ledger_id, recovery=True)  # recovered by the untraced client: not in `first`
    assert {p["ledger"] for _, p in first} == {a.ledger_id}
    assert {p["ledger"] for _, p in second} == {b.ledger_id}
    assert not [name for name, _ in first if name.startswith("Recovery")]
    assert untraced.tracer is None and c.writer.tracer is None


def test_connect_bookkeeper_hands_its_tracer_to_the_client(tmp_path: Path) -> None:
    recorder = TraceFile(tmp_path / "client.trace.jsonl", role="test")
    client = connect_bookkeeper("memory://", tracer=recorder)
    try:
        assert client.tracer is recorder
    finally:
        client.close()
        recorder.close()
    assert connect_bookkeeper("memory://").tracer is None


def test_a_closed_trace_file_records_nothing_more(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    recorder = TraceFile(path, role="test")
    recorder("WriterSendsAdd", {"ledger": 1, "entry": 0, "lac": -1})
    recorder.close()
    recorder("WriterSendsAdd", {"ledger": 1, "entry": 1, "lac": -1})  # a core stepping after the run: dropped
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["seq"], r["name"]) for r in lines] == [(0, "TraceFileOpened"), (1, "WriterSendsAdd")]
    assert lines[1]["params"] == {"ledger": 1, "entry": 0, "lac": -1}
