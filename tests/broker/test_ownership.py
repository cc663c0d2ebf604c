"""Bundles, ownership, session expiry and lookup, on the memory store and on a real ZooKeeper."""

from __future__ import annotations

import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl.broker import namespaces
from impl.broker.bundles import NamespaceBundle, bundle_boundaries, bundle_for, namespace_bundles, topic_hash
from impl.broker.load_manager import LoadManager
from impl.broker.lookup import LookupDecision, NoBrokerAvailable, decide_lookup, least_loaded
from impl.broker.ownership import OwnershipCache
from impl.metadata.brokers import BrokerAlreadyRegistered, BrokerLoad, BrokerRegistry
from impl.metadata.layout import InvalidName
from impl.metadata.memory import MemoryServer, MemoryStore
from impl.metadata.naming import NamespaceName, TopicName
from impl.metadata.store import (
    ConnectionLoss,
    InvalidArgument,
    MetadataStore,
    SessionExpired,
    SessionState,
    Stat,
    Watcher,
)
from impl.metadata.url import connect as connect_url

Connect = Callable[[], MetadataStore]
DEFAULT = NamespaceName("public", "default")
FULL = 2**32


@pytest.fixture(params=["memory", "embedded", pytest.param("zk", marks=pytest.mark.zookeeper)])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connect]:
    """Sessions on one fresh store per test: the in-memory model, the embedded (SQLite) store, or a real
    ZooKeeper (fresh chroot)."""
    name = f"ownership-{uuid.uuid4().hex}"
    if request.param == "memory":
        url = f"memory://{name}"
    elif request.param == "embedded":
        url = f"embedded://{tmp_path}"
    else:
        zookeeper = request.getfixturevalue("zookeeper")
        url = f"zk://{zookeeper.connect_string}/{name}"
    opened: list[MetadataStore] = []

    def open_session() -> MetadataStore:
        store = connect_url(url)
        opened.append(store)
        return store

    try:
        yield open_session
    finally:
        for store in opened:
            store.close()
        if request.param == "memory":
            from impl.metadata.memory import forget_server

            forget_server(name)


def eventually(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """ZooKeeper delivers watches asynchronously; the memory store synchronously (first check passes)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


class Lost:
    """An on_lost recorder."""

    def __init__(self) -> None:
        self.calls: list[list[NamespaceBundle]] = []

    def __call__(self, bundles: list[NamespaceBundle]) -> None:
        self.calls.append(list(bundles))


# --- hashing and bundles (pure) -------------------------------------------------------------


def test_topic_hash_is_the_crc32_of_the_full_name() -> None:
    topic = TopicName.parse("my-topic")
    assert topic_hash(topic) == zlib.crc32(b"persistent://public/default/my-topic") == 0x2BAD45F7
    assert zlib.crc32(b"123456789") == 0xCBF43926  # the CRC-32 check value: the IEEE polynomial, as Guava's
    # Partitions of one topic hash separately, so they spread over the bundles.
    assert len({bundle_for(topic.partition_name(i)) for i in range(32)}) > 1


def test_default_bundles_are_pulsars_quarters() -> None:
    names = [b.name for b in namespace_bundles(DEFAULT)]
    assert names == [
        "0x00000000_0x40000000",
        "0x40000000_0x80000000",
        "0x80000000_0xc0000000",
        "0xc0000000_0xffffffff",
    ]
    assert namespace_bundles(DEFAULT)[0].path == "/namespace/public/default/0x00000000_0x40000000"


@given(st.integers(min_value=1, max_value=namespaces.MAX_NUMBER_OF_BUNDLES), st.integers(0, FULL - 1))
def test_bundles_cover_the_range_without_overlap(count: int, hash_value: int) -> None:
    bundles = namespace_bundles(DEFAULT, count)
    assert len(bundles) == count
    assert bundles[0].lower == 0 and bundles[-1].upper == FULL
    for left, right in zip(bundles, bundles[1:], strict=False):
        assert left.upper == right.lower  # contiguous: no gap, no overlap
    assert sum(b.contains(hash_value) for b in bundles) == 1
    assert [b.lower for b in bundles] + [FULL] == list(bundle_boundaries(count))


@given(st.text(min_size=1, max_size=30).filter(lambda s: "/" not in s), st.integers(1, 64))
def test_every_topic_maps_to_exactly_one_bundle(local: str, count: int) -> None:
    try:
        topic = TopicName("public", "default", local)
    except ValueError:
        return  # not a valid name (tested in test_naming)
    bundle = bundle_for(topic, count)
    assert bundle.contains(topic_hash(topic))
    assert [b for b in namespace_bundles(DEFAULT, count) if b.contains(topic_hash(topic))] == [bundle]
    assert NamespaceBundle.parse(str(bundle)) == bundle


def test_bad_bundle_counts() -> None:
    for count in (0, -1, namespaces.MAX_NUMBER_OF_BUNDLES + 1, True):
        with pytest.raises(namespaces.InvalidPolicies, match="between 1 and"):
            bundle_boundaries(count)


# --- lookup decision (pure) -----------------------------------------------------------------


def loads(**bundles: int) -> dict[str, BrokerLoad]:
    return {f"{name}:1": BrokerLoad(f"{name}:1", count) for name, count in bundles.items()}


def test_decide_owner_known() -> None:
    live = loads(a=0, b=5)
    assert decide_lookup("b:1", "b:1", live) == LookupDecision("connect", "b:1")
    assert decide_lookup("b:1", "a:1", live) == LookupDecision("redirect", "b:1")
    # The owner is the answer even when it is not (or no longer) registered: its node proves its session lives.
    assert decide_lookup("z:1", "a:1", {}) == LookupDecision("redirect", "z:1")


def test_decide_unowned_goes_to_the_least_loaded() -> None:
    assert decide_lookup(None, "a:1", loads(a=3, b=1, c=2)) == LookupDecision("redirect", "b:1", authoritative=True)
    assert decide_lookup(None, "b:1", loads(a=3, b=1, c=2)) == LookupDecision("acquire", "b:1")
    # Ties: fewer topics first, then the smallest address.
    tied = {"b:1": BrokerLoad("b:1", 1, 0), "a:1": BrokerLoad("a:1", 1, 0), "c:1": BrokerLoad("c:1", 1, 9)}
    assert least_loaded(tied.values()) == "a:1"
    assert least_loaded([BrokerLoad("a:1", 1, 9), BrokerLoad("b:1", 1, 2)]) == "b:1"
    assert least_loaded([]) is None


def test_decide_assignment_and_authoritative() -> None:
    live = loads(a=0, b=9)
    assert decide_lookup(None, "a:1", live, assigned="b:1") == LookupDecision("redirect", "b:1", authoritative=True)
    assert decide_lookup(None, "a:1", live, assigned="gone:1") == LookupDecision("acquire", "a:1")  # hint ignored
    assert decide_lookup(None, "b:1", live, authoritative=True) == LookupDecision("acquire", "b:1")
    with pytest.raises(NoBrokerAvailable, match="start a broker"):
        decide_lookup(None, "a:1", {})


# --- ownership over a real store ------------------------------------------------------------


def test_exactly_one_of_racing_brokers_acquires(connect: Connect) -> None:
    caches = [OwnershipCache(connect(), f"10.0.0.{i}:6650") for i in range(4)]
    bundle = namespace_bundles(DEFAULT)[2]
    barrier = threading.Barrier(len(caches))
    results: dict[str, bool] = {}

    def race(cache: OwnershipCache) -> None:
        barrier.wait()
        results[cache.broker_address] = cache.try_acquire(bundle)

    threads = [threading.Thread(target=race, args=(c,)) for c in caches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    winners = [address for address, won in results.items() if won]
    assert len(results) == len(caches) and len(winners) == 1
    for cache in caches:
        assert cache.owner_of(bundle) == winners[0]
        assert cache.is_owned(bundle) == (cache.broker_address == winners[0])
    data, stat = caches[0].store.get(bundle.path)
    assert data == winners[0].encode() and stat.ephemeral_owner != 0
    assert [c.owned_bundles() for c in caches].count([bundle]) == 1


def test_session_expiry_drops_every_bundle_and_the_other_broker_takes_over(connect: Connect) -> None:
    lost = Lost()
    a = OwnershipCache(connect(), "a:6650", on_lost=lost)
    b = OwnershipCache(connect(), "b:6650")
    bundles = namespace_bundles(DEFAULT)
    assert a.try_acquire(bundles[0]) and a.try_acquire(bundles[3])
    assert not b.try_acquire(bundles[0])
    assert b.owner_of(bundles[0]) == "a:6650"

    a.store.expire_session()
    eventually(lambda: bool(lost.calls))
    assert lost.calls == [[bundles[0], bundles[3]]]  # all at once, in one call
    assert a.expired and a.owned_bundles() == [] and not a.is_owned(bundles[0])
    # Never write on the expired session again (BookKeeper issue 4462): a typed error, not a store call.
    with pytest.raises(SessionExpired, match="4462"):
        a.try_acquire(bundles[1])

    eventually(lambda: b.owner_of(bundles[0]) is None)
    assert b.try_acquire(bundles[0])
    a.release(bundles[0])  # a stale release must not touch the successor's node
    a.unload(bundles[3])
    assert b.owner_of(bundles[0]) == "b:6650" and b.store.get(bundles[0].path)[0] == b"b:6650"
    assert len(lost.calls) == 1


def test_reconnect_gives_a_fresh_session(connect: Connect) -> None:
    a = OwnershipCache(connect(), "a:6650")
    bundle = namespace_bundles(DEFAULT)[1]
    with pytest.raises(InvalidArgument, match="still alive"):
        a.reconnect(connect())
    assert a.try_acquire(bundle)
    a.store.expire_session()
    eventually(lambda: a.expired)
    a.reconnect(connect())
    assert not a.expired and not a.is_owned(bundle)  # beliefs are not carried across sessions
    assert a.try_acquire(bundle) and a.owner_of(bundle) == "a:6650"


def test_release_frees_the_bundle_and_owner_cache_follows(connect: Connect) -> None:
    lost = Lost()
    a = OwnershipCache(connect(), "a:6650", on_lost=lost)
    b = OwnershipCache(connect(), "b:6650")
    bundle = namespace_bundles(DEFAULT)[0]
    assert b.owner_of(bundle) is None  # unowned (read each time: "unowned" is never cached)
    assert a.try_acquire(bundle) and a.try_acquire(bundle)  # idempotent
    eventually(lambda: b.owner_of(bundle) == "a:6650")  # the watch invalidated the cached None
    a.release(bundle)
    assert not a.is_owned(bundle) and lost.calls == []  # release is the broker's own doing: no on_lost
    eventually(lambda: b.owner_of(bundle) is None)
    assert b.try_acquire(bundle)


def test_a_forced_unload_from_another_broker_is_noticed(connect: Connect) -> None:
    store_a, store_b = connect(), connect()
    namespaces.ensure_default(store_a)
    lost_a = Lost()
    a = LoadManager(store_a, "a:6650", on_lost=lost_a)
    b = LoadManager(store_b, "b:6650")
    a.start()
    assert a.lookup("t").kind == "connect"  # a is the only live broker: it acquires
    b.start()
    bundle = a.bundle_of("t")
    assert b.lookup("t").kind == "redirect" and b.lookup("t").broker_address == "a:6650"

    assert b.unload(bundle)  # b deletes a's node by version; a's watch sees it
    eventually(lambda: lost_a.calls == [[bundle]])
    assert not a.ownership.is_owned(bundle)
    eventually(lambda: b.ownership.owner_of(bundle) is None)
    assert not b.unload(bundle)  # nothing left to unload


def test_lookup_connects_redirects_and_balances(connect: Connect) -> None:
    stores = [connect() for _ in range(3)]
    namespaces.ensure_default(stores[0])
    namespaces.create_tenant(stores[0], "acme")
    namespaces.create_namespace(stores[0], "acme/wide", namespaces.NamespacePolicies(bundles=16))
    managers = {addr: LoadManager(s, addr) for addr, s in zip(("a:1", "b:1", "c:1"), stores, strict=True)}
    for m in managers.values():
        m.start()
    # Each broker looks up topics until every broker owns something: each lookup either acquires for the
    # asking broker (when it is the least loaded) or redirects authoritatively to the least loaded one.
    topics = [TopicName.parse(f"acme/wide/t{i}") for i in range(40)]
    by_bundle = {managers["a:1"].bundle_of(t): t for t in topics}
    assert len(by_bundle) >= 6
    for bundle, topic in by_bundle.items():
        first = managers["a:1"].lookup(topic)
        if first.kind == "redirect":
            assert first.authoritative and first.bundle == bundle
            chosen = managers[first.broker_address].lookup(topic, authoritative=True)
            assert chosen.kind == "connect" and chosen.broker_address == first.broker_address
        owner = managers["a:1"].lookup(topic)
        for address, manager in managers.items():
            answer = manager.lookup(topic)
            assert answer.broker_address == owner.broker_address
            assert answer.kind == ("connect" if address == owner.broker_address else "redirect")
    counts = sorted(len(m.ownership.owned_bundles()) for m in managers.values())
    assert counts[-1] - counts[0] <= 1, counts  # least-loaded choice spreads the bundles evenly
    published = managers["a:1"].registry.live_brokers()
    assert {a: p.bundles for a, p in published.items()} == {
        a: len(m.ownership.owned_bundles()) for a, m in managers.items()
    }


def test_transfer_hands_the_bundle_to_the_named_broker(connect: Connect) -> None:
    stores = [connect() for _ in range(3)]
    namespaces.ensure_default(stores[0])
    lost_a = Lost()
    a = LoadManager(stores[0], "a:1", on_lost=lost_a)
    b, c = LoadManager(stores[1], "b:1"), LoadManager(stores[2], "c:1")
    a.start()
    assert a.lookup("t").kind == "connect"
    b.start()
    c.start()
    c.report_topics(100)  # c is the most loaded: only the transfer's hint sends the bundle there
    bundle = a.bundle_of("t")
    with pytest.raises(NoBrokerAvailable, match="not a live broker"):
        a.transfer(bundle, "nobody:1")
    a.transfer(bundle, "c:1")
    assert lost_a.calls == [[bundle]] and not a.ownership.is_owned(bundle)
    eventually(lambda: b.ownership.owner_of(bundle) is None)
    answer = b.lookup("t")
    assert (answer.kind, answer.broker_address, answer.authoritative) == ("redirect", "c:1", True)
    assert c.lookup("t", authoritative=True).kind == "connect"
    assert c.ownership.is_owned(bundle)
    assert stores[2].exists(f"/loadbalance/bundle-assignments/public/default/{bundle.name}") is None


def test_lookup_in_a_missing_namespace_is_a_typed_error(connect: Connect) -> None:
    manager = LoadManager(connect(), "a:1")
    manager.start()
    with pytest.raises(namespaces.NamespaceNotFound, match="create it first"):
        manager.lookup("persistent://nobody/here/t")
    with pytest.raises(namespaces.NamespaceNotFound):
        manager.check_namespace("nobody/here/t")


def test_registry(connect: Connect) -> None:
    first, second = connect(), connect()
    registry = BrokerRegistry(first)
    registry.register(BrokerLoad("a:6650", 2, 10))
    registry.register(BrokerLoad("a:6650", 3, 10))  # our own node: updated, not an error
    with pytest.raises(BrokerAlreadyRegistered, match="already registered"):
        BrokerRegistry(second).register(BrokerLoad("a:6650"))
    assert BrokerRegistry(second).live_brokers() == {"a:6650": BrokerLoad("a:6650", 3, 10)}
    first.close()  # the ephemeral registration goes with the session
    eventually(lambda: BrokerRegistry(second).live_brokers() == {})
    with pytest.raises(InvalidName, match="host:port"):
        OwnershipCache(second, "no-port")


def test_a_late_watch_never_lets_a_release_delete_the_successors_node(
    connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = OwnershipCache(connect(), "a:6650")
    b = OwnershipCache(connect(), "b:6650")
    bundle = namespace_bundles(DEFAULT)[0]
    assert a.try_acquire(bundle)
    # a's watch is slow (network delay): it still believes it owns the bundle when b has taken it.
    monkeypatch.setattr(a, "_recheck_owned", lambda path: None)
    b.store.delete(bundle.path)
    assert b.try_acquire(bundle) and a.is_owned(bundle)
    a.release(bundle)
    assert b.store.get(bundle.path)[0] == b"b:6650"


class RacingStore(MemoryStore):
    """A memory session whose next get() is followed, before it returns, by another client's write."""

    def __init__(self, server: MemoryServer) -> None:
        super().__init__(server, server.connect()._session)
        self.after_next_get: Callable[[], None] | None = None

    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        result = super().get(path, watch)
        hook, self.after_next_get = self.after_next_get, None
        if hook is not None:
            hook()
        return result


def test_owner_cache_does_not_keep_a_value_invalidated_during_its_read() -> None:
    server = MemoryServer()
    a = OwnershipCache(server.connect(), "a:6650")
    racing = RacingStore(server)
    b = OwnershipCache(racing, "b:6650")
    bundle = namespace_bundles(DEFAULT)[0]
    assert a.try_acquire(bundle)
    racing.after_next_get = lambda: a.release(bundle)  # the owner leaves while b's read is in flight
    assert b.owner_of(bundle) == "a:6650"  # what b read
    assert b.owner_of(bundle) is None  # but it was not cached: the watch fired during the read


def test_lookup_on_behalf_of_another_broker(connect: Connect) -> None:
    first, second = connect(), connect()
    namespaces.ensure_default(first)
    a, b = LoadManager(first, "a:1"), LoadManager(second, "b:1")
    a.start()
    b.start()
    a.report_topics(5)  # b is the least loaded
    # Asked at b but computed by a: a cannot hold b's node, so the client goes to b, authoritatively.
    answer = a.lookup("t", asking_broker="b:1")
    assert (answer.kind, answer.broker_address, answer.authoritative) == ("redirect", "b:1", True)
    assert answer.bundle is not None and a.ownership.owner_of(answer.bundle) is None  # nothing acquired
    assert b.lookup("t", True).kind == "connect"
    assert a.lookup("t", asking_broker="b:1") == b.lookup("t")  # owner known: connect for b, from anywhere
    with pytest.raises(TypeError, match="keyword"):
        a.lookup("t", "b:1")  # type: ignore[arg-type]


def test_a_node_created_by_an_unanswered_create_is_adopted(connect: Connect) -> None:
    store = connect()
    a = OwnershipCache(store, "a:6650")
    bundle = namespace_bundles(DEFAULT)[0]
    store.ensure_path("/namespace/public/default")
    store.create(bundle.path, b"a:6650", ephemeral=True)  # as if a's create applied but its answer was lost
    assert a.try_acquire(bundle) and a.is_owned(bundle)
    assert not OwnershipCache(connect(), "b:6650").try_acquire(bundle)


class FlakyExistsStore(MemoryStore):
    """A memory session whose next exists() of one path gets no answer (ConnectionLoss): a dropped connection."""

    def __init__(self, server: MemoryServer) -> None:
        super().__init__(server, server.connect()._session)
        self.fail_next_exists_of: str | None = None

    def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        if path == self.fail_next_exists_of:
            self.fail_next_exists_of = None
            raise ConnectionLoss(f"no answer for exists {path}", path)
        return super().exists(path, watch)

    def reconnected(self) -> None:
        for listener in list(self._session.listeners):
            listener(SessionState.CONNECTED)


def test_an_ownership_node_whose_watch_could_not_be_armed_is_checked_on_reconnection() -> None:
    server = MemoryServer()
    flaky = FlakyExistsStore(server)
    lost = Lost()
    a = OwnershipCache(flaky, "a:6650", on_lost=lost)
    bundle = namespace_bundles(DEFAULT)[0]
    flaky.fail_next_exists_of = bundle.path  # the watch-arming exists() after the create gets no answer
    assert a.try_acquire(bundle)
    server.connect().delete(bundle.path)  # a forced unload a could not be told about
    assert a.is_owned(bundle) and lost.calls == []
    flaky.reconnected()
    assert lost.calls == [[bundle]] and not a.is_owned(bundle)


def test_a_re_created_namespace_is_split_by_its_new_bundle_count(connect: Connect) -> None:
    admin = connect()
    manager = LoadManager(connect(), "a:1")
    namespaces.create_tenant(admin, "acme")
    namespaces.create_namespace(admin, "acme/x", namespaces.NamespacePolicies(bundles=1))
    topic = TopicName.parse("acme/x/t")
    assert manager.bundle_of(topic) == NamespaceBundle(topic.namespace_name, 0, FULL)
    namespaces.delete_namespace(admin, "acme/x")
    namespaces.create_namespace(admin, "acme/x", namespaces.NamespacePolicies(bundles=16))
    eventually(lambda: manager.bundle_of(topic) == bundle_for(topic, 16))
    namespaces.delete_namespace(admin, "acme/x")

    def forgotten() -> bool:
        try:
            manager.bundle_of(topic)
        except namespaces.NamespaceNotFound:
            return True
        return False

    eventually(forgotten)
