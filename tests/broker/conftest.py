"""An in-process BookKeeper for managed-ledger tests: real bookie cores, real client, real metadata.

The transport is conformance/sim_bookie.py's `SimNetwork`: each request is answered inline by a
`SimBookie` (impl/bookie/core.py's `BookieCore`, journal appends durable at once, no files), so tests
are deterministic and fast. A bookie can be made silent (no answer: the writer changes its ensemble).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from conformance.sim_bookie import SimNetwork
from impl.bookie.client.api import BookKeeperClient
from impl.broker.standalone import Standalone
from impl.client import Client
from impl.metadata.ledger_store import LedgerMetadataStore
from impl.metadata.memory import MemoryServer
from impl.metadata.registry import BookieRegistry
from impl.metadata.store import MetadataStore

BOOKIES = ["bk0:3181", "bk1:3181", "bk2:3181", "bk3:3181"]


@dataclass
class Cluster:
    """Bookies and one metadata store; `client()` gives a broker its own sessions and client."""

    url: str
    transport: SimNetwork
    connect: Callable[[], MetadataStore]
    stores: list[MetadataStore] = field(default_factory=list)
    seed: int = 0

    def store(self) -> MetadataStore:
        s = self.connect()
        self.stores.append(s)
        return s

    def broker(self) -> tuple[MetadataStore, BookKeeperClient]:
        """One broker's metadata session and BookKeeper client."""
        self.seed += 1
        store = self.store()
        registry = BookieRegistry(store)
        client = BookKeeperClient(LedgerMetadataStore(store), registry, self.transport, seed=self.seed, timeout_s=10)
        return store, client

    def close(self) -> None:
        for s in self.stores:
            s.close()


def make_cluster(connect: Callable[[], MetadataStore], url: str, bookies: list[str] = BOOKIES) -> Cluster:
    cluster = Cluster(url, SimNetwork(bookies), connect)
    registry = BookieRegistry(cluster.store())
    for bookie in bookies:
        registry.register(bookie)
    return cluster


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    server = MemoryServer()
    c = make_cluster(server.connect, "memory://")
    yield c
    c.close()


class FakeClock:
    """An injected clock: both the monotonic clock (ledger age) and the wall clock (retention), and the
    timers that run on it (`call_later`): `advance` runs the actions that come due, in time order, on the
    caller's thread."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self._due: list[tuple[float, int, _FakeTimer]] = []
        self._count = 0

    def __call__(self) -> float:
        return self.now

    def call_later(self, delay_s: float, action: Callable[[], None]) -> _FakeTimer:
        timer = _FakeTimer(action)
        self._count += 1
        heapq.heappush(self._due, (self.now + delay_s, self._count, timer))
        return timer

    def advance(self, seconds: float) -> None:
        until = self.now + seconds
        while self._due and self._due[0][0] <= until:
            at, _, timer = heapq.heappop(self._due)
            self.now = max(self.now, at)
            if not timer.cancelled:
                timer.action()
        self.now = until


class _FakeTimer:
    def __init__(self, action: Callable[[], None]) -> None:
        self.action = action
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """One `Standalone` (embedded metadata, three bookies, a broker) per test module."""
    s = Standalone(tmp_path_factory.mktemp("standalone"), port=0, web_port=0)
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def client(standalone: Standalone) -> Iterator[Client]:
    """The project's Pulsar client (impl/client/) on the standalone's pulsar:// listener."""
    with Client(standalone.pulsar_service_url, timeout_s=10) as c:
        yield c
