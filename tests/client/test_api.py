"""The client API shell over in-process bookies, the real ledger store and the real registry (in-memory store)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from conformance.sim_bookie import SimNetwork
from impl.bookie.client.api import BookKeeperClient
from impl.bookie.client.errors import LedgerFencedError, NoSuchEntryError, PlacementError, UnauthorizedError
from impl.bookie.client.reader import LedgerEntry
from impl.bookie.client.transport import ThreadedTransport
from impl.bookie.protocol import Request, Response
from impl.metadata.ledger import LedgerState
from impl.metadata.ledger_store import LedgerMetadataStore, NoSuchLedger
from impl.metadata.memory import MemoryServer
from impl.metadata.registry import BookieRegistry

from .simulation import RecordingNetwork

BOOKIES = ["b0:3181", "b1:3181", "b2:3181", "b3:3181"]


@pytest.fixture
def cluster() -> Iterator[tuple[BookKeeperClient, RecordingNetwork, BookieRegistry]]:
    server = MemoryServer()
    registry = BookieRegistry(server.connect())
    for bookie in BOOKIES:
        registry.register(bookie)
    transport = RecordingNetwork(BOOKIES)
    yield BookKeeperClient(LedgerMetadataStore(server.connect()), registry, transport, seed=1), transport, registry


def test_write_close_open_read(cluster: tuple[BookKeeperClient, RecordingNetwork, BookieRegistry]) -> None:
    client, _, _ = cluster
    writer = client.create_ledger(3, 3, 2, password=b"pw", custom_metadata={"app": b"test"})
    assert [writer.add(b"entry-%d" % i) for i in range(5)] == [0, 1, 2, 3, 4]
    futures = [writer.add_async(b"async-%d" % i) for i in range(3)]
    assert [f.result(timeout=5) for f in futures] == [5, 6, 7]
    assert writer.read(6, 7) == [
        LedgerEntry(writer.ledger_id, 6, b"async-1"),
        LedgerEntry(writer.ledger_id, 7, b"async-2"),
    ]
    closed = writer.close()
    assert closed is not None and (closed.state, closed.last_entry_id) == (LedgerState.CLOSED, 7)
    reader = client.open_ledger(writer.ledger_id, b"pw", recovery=True)
    assert reader.read_last_confirmed() == 7
    assert [e.payload for e in reader.read(0, 1)] == [b"entry-0", b"entry-1"]
    with pytest.raises(NoSuchEntryError, match="beyond the last confirmed entry 7"):
        reader.read(7, 8)
    client.delete_ledger(writer.ledger_id)
    with pytest.raises(NoSuchLedger):
        client.open_ledger(writer.ledger_id, b"pw")


def test_recovering_open_fences_the_writer(
    cluster: tuple[BookKeeperClient, RecordingNetwork, BookieRegistry],
) -> None:
    client, _, _ = cluster
    writer = client.create_ledger(3, 2, 2, password=b"pw")
    for i in range(4):
        writer.add(b"x%d" % i)
    lac = writer.last_add_confirmed
    reader = client.open_ledger(writer.ledger_id, b"pw", recovery=True)
    assert reader.metadata.state is LedgerState.CLOSED and reader.last_add_confirmed >= lac
    with pytest.raises(LedgerFencedError, match=f"ledger {writer.ledger_id}"):
        writer.add(b"late")
    with pytest.raises(LedgerFencedError):
        writer.add(b"later")  # the handle stays stopped


def test_open_without_recovery_or_with_a_wrong_password_fences_nothing(
    cluster: tuple[BookKeeperClient, RecordingNetwork, BookieRegistry],
) -> None:
    client, transport, _ = cluster
    writer = client.create_ledger(3, 3, 2, password=b"pw")
    writer.add(b"a")
    writer.add(b"b")
    with pytest.raises(UnauthorizedError, match="wrong password"):
        client.open_ledger(writer.ledger_id, b"nope", recovery=True)
    reader = client.open_ledger(writer.ledger_id, b"pw", recovery=False)
    assert reader.metadata.state is LedgerState.OPEN
    assert reader.read_last_confirmed() == 0  # the piggybacked LAC of entry 1
    assert writer.add(b"c") == 2
    assert not any(getattr(r, "fence", False) for _, r in transport.sent)


def test_ensemble_change_when_a_bookie_goes_silent(
    cluster: tuple[BookKeeperClient, RecordingNetwork, BookieRegistry],
) -> None:
    client, transport, _ = cluster
    writer = client.create_ledger(3, 3, 3)
    writer.add(b"before")
    silent = writer.metadata.last_ensemble[1]
    transport.silent.add(silent)
    assert writer.add(b"after") == 1
    assert silent not in writer.metadata.last_ensemble
    stored = client.ledgers.read(writer.ledger_id)[0]
    assert [f.first_entry_id for f in stored.fragments] == [0, 1]
    assert writer.read(0, 1)[1].payload == b"after"


def test_not_enough_bookies(cluster: tuple[BookKeeperClient, RecordingNetwork, BookieRegistry]) -> None:
    client, _, registry = cluster
    registry.set_readonly(BOOKIES[0], True)
    registry.set_readonly(BOOKIES[1], True)
    with pytest.raises(PlacementError, match="need 3 writable bookies, have 2"):
        client.create_ledger(3, 3, 2)
    with pytest.raises(ValueError, match="unknown digest"):
        client.create_ledger(2, 2, 2, digest="md5")


def test_placement_uses_the_registry_racks() -> None:
    server = MemoryServer()
    registry = BookieRegistry(server.connect())
    racks = {"r0a:1": "r0", "r0b:1": "r0", "r1a:1": "r1", "r1b:1": "r1", "r2a:1": "r2", "ro:1": "r3"}
    for bookie, rack in racks.items():
        registry.register(bookie, readonly=bookie == "ro:1", rack=rack)
    transport = SimNetwork(racks)
    for seed in range(5):
        client = BookKeeperClient(LedgerMetadataStore(server.connect()), registry, transport, seed=seed)
        ensemble = client.create_ledger(3, 3, 2).metadata.last_ensemble
        assert "ro:1" not in ensemble
        assert sorted(racks[b] for b in ensemble) == ["r0", "r1", "r2"]


def test_threaded_transport_with_concurrent_adds_and_a_hung_bookie() -> None:
    server = MemoryServer()
    registry = BookieRegistry(server.connect())
    for bookie in BOOKIES:
        registry.register(bookie)
    network = SimNetwork(BOOKIES)  # serialises the requests of the transport's threads, as a bookie's core does
    hung: set[str] = set()
    release = threading.Event()

    def call(bookie: str, request: Request, timeout_s: float) -> Response:
        if bookie in hung:
            release.wait(timeout_s)  # like a SIGSTOPped process: the deadline expires
            raise TimeoutError(f"{bookie} did not answer within {timeout_s}s")
        response = network.answer(bookie, request)
        if response is None:
            raise ConnectionError(f"{bookie} is not reachable")
        return response

    with ThreadedTransport(call, timeout_s=0.2, max_workers=8) as transport:
        client = BookKeeperClient(LedgerMetadataStore(server.connect()), registry, transport, seed=2)
        writer = client.create_ledger(3, 3, 2, password=b"pw")
        futures = [writer.add_async(b"first-%d" % i) for i in range(20)]
        assert [f.result(timeout=30) for f in futures] == list(range(20))
        hung.add(writer.metadata.last_ensemble[0])
        futures = [writer.add_async(b"second-%d" % i) for i in range(20)]
        assert [f.result(timeout=30) for f in futures] == list(range(20, 40))
        reader = client.open_ledger(writer.ledger_id, b"pw", recovery=True)
        assert reader.last_add_confirmed == 39
        assert [e.payload for e in reader.read(38, 39)] == [b"second-18", b"second-19"]
        with pytest.raises(LedgerFencedError):
            writer.add(b"after recovery")
        release.set()
