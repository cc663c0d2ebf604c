"""The key step of each mutation of spec/schema.tla, refused by the production code against a real
ZooKeeper (spec/schema.md, "Mapping to the code"): the registry has no pure core to replay TLC's
behaviours against, so each rule a mutation breaks is checked here on SchemaStorage itself, with
bookie cores in process and every broker its own ZooKeeper session (each test its own chroot)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from impl.bookie.client.errors import PlacementError
from impl.broker.managed_ledger import ManagedLedgerConfig
from impl.broker.schema.model import SchemaData
from impl.broker.schema.storage import LocatorConflict, SchemaStorage, locator_path
from impl.metadata.ledger_store import LedgerMetadataStore
from impl.metadata.naming import TopicName
from impl.metadata.registry import BookieRegistry
from impl.metadata.store import BadVersion, MetadataStore, NodeExists, SessionExpired
from impl.metadata.url import connect as connect_url
from impl.metadata.zkserver import ZooKeeperServer
from tests.broker.conftest import BOOKIES, Cluster, make_cluster

pytestmark = pytest.mark.zookeeper

T = TopicName.parse("persistent://public/default/t")


def avro(*fields: str) -> SchemaData:
    doc = {"type": "record", "name": "R", "fields": [{"name": f, "type": "string"} for f in fields]}
    return SchemaData("AVRO", json.dumps(doc).encode())


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    name = f"schema-{uuid.uuid4().hex[:12]}"
    with connect_url(f"zk://{zookeeper.connect_string}") as admin:
        admin.ensure_path(f"/{name}")
    url = f"zk://{zookeeper.connect_string}/{name}"
    c = make_cluster(lambda: connect_url(url, session_timeout_s=10), url)
    yield c
    c.close()


def broker(cluster: Cluster) -> tuple[MetadataStore, SchemaStorage]:
    store, bk = cluster.broker()
    return store, SchemaStorage(store, bk, ManagedLedgerConfig())


def schema_ledgers(store: MetadataStore) -> set[int]:
    ledgers = LedgerMetadataStore(store)
    return {i for i in ledgers.ledger_ids() if ledgers.read(i)[0].custom_metadata.get("component") == b"schema"}


def versions(storage: SchemaStorage) -> list[tuple[int, bytes]]:
    loc = storage.locator(T)
    return [] if loc is None else [(e.version, storage.read(e).data) for e in loc.entries]


def test_a_stale_locator_write_fails_with_bad_version(cluster: Cluster) -> None:
    """blind_write's step: a set at the version read, once another broker moved the node on."""
    store, a = broker(cluster)
    _, b = broker(cluster)
    a.add(T, avro("x"), None)
    stale = a.locator(T)
    assert b.add(T, avro("x", "y"), b.locator(T)) == 1  # the race's winner, answered version 1
    before = schema_ledgers(store)
    with pytest.raises(LocatorConflict) as lost:
        a.add(T, avro("x", "z"), stale)
    assert isinstance(lost.value.__cause__, BadVersion)
    assert versions(a) == [(0, avro("x").data), (1, avro("x", "y").data)]  # the answered version stands
    assert schema_ledgers(store) == before  # the loser's ledger is deleted


def test_a_second_create_of_the_locator_fails_with_node_exists(cluster: Cluster) -> None:
    """create_overwrites's step: two brokers that both read no locator both believe they add version 0."""
    store, a = broker(cluster)
    _, b = broker(cluster)
    assert a.locator(T) is None and b.locator(T) is None
    assert b.add(T, avro("x"), None) == 0
    with pytest.raises(LocatorConflict) as lost:
        a.add(T, avro("y"), None)
    assert isinstance(lost.value.__cause__, NodeExists)
    assert versions(a) == [(0, avro("x").data)]
    assert len(schema_ledgers(store)) == 1


def test_an_expired_session_cannot_add_even_with_a_current_read(cluster: Cluster) -> None:
    """cached_after_loss's step: the broker's read is still current (nobody wrote since), but its
    session, and with it the topic's ownership node, is gone; only the session refuses the write."""
    store, a = broker(cluster)
    a.add(T, avro("x"), None)
    session, bookkeeper = cluster.broker()
    expired = SchemaStorage(session, bookkeeper, ManagedLedgerConfig())
    cached = expired.locator(T)
    session.expire_session()
    with pytest.raises(SessionExpired):
        expired.add(T, avro("x", "y"), cached)
    current = a.locator(T)
    assert current is not None and cached is not None and current.stat_version == cached.stat_version
    assert versions(a) == [(0, avro("x").data)]


def test_a_failed_ledger_write_leaves_the_locator_untouched(cluster: Cluster) -> None:
    """locator_before_entry's step: the entry is written and closed before the locator names it, so a
    version whose ledger cannot be written is never visible."""
    store, a = broker(cluster)
    a.add(T, avro("x"), None)
    node_before = store.get(locator_path(T))
    registry = BookieRegistry(store)
    for bookie in BOOKIES:  # no writable bookie: the ledger cannot be created
        registry.set_readonly(bookie, True)
    with pytest.raises(PlacementError):
        a.add(T, avro("x", "y"), a.locator(T))
    assert store.get(locator_path(T)) == node_before
    assert versions(a) == [(0, avro("x").data)]
