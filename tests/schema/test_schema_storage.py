"""Schema storage on real bookie cores and real metadata sessions (in process): racing brokers, a
broker that cannot finish its write, partitions, deletion. Each broker is its own metadata session
and BookKeeper client, as two broker processes would be."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from impl.broker.managed_ledger import ManagedLedgerConfig
from impl.broker.schema.model import IncompatibleSchema, SchemaData, SchemaNotFound
from impl.broker.schema.registry import SchemaRegistry
from impl.broker.schema.storage import LocatorConflict, SchemaStorage, locator_path
from impl.metadata import layout
from impl.metadata.ledger_store import LedgerMetadataStore
from impl.metadata.memory import MemoryServer
from impl.metadata.naming import TopicName
from impl.metadata.store import MetadataError, MetadataStore
from tests.broker.conftest import Cluster, make_cluster


def avro(*fields: str) -> SchemaData:
    doc = {"type": "record", "name": "R", "fields": [{"name": f, "type": "string"} for f in fields]}
    return SchemaData("AVRO", json.dumps(doc).encode())


T = TopicName.parse("persistent://public/default/t")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = make_cluster(MemoryServer().connect, "memory://")
    yield c
    c.close()


def broker(cluster: Cluster) -> tuple[MetadataStore, SchemaStorage, SchemaRegistry]:
    store, bk = cluster.broker()
    storage = SchemaStorage(store, bk, ManagedLedgerConfig())
    return store, storage, SchemaRegistry(storage, lambda: store)


def schema_ledgers(store: MetadataStore) -> set[int]:
    ledgers = LedgerMetadataStore(store)
    return {i for i in ledgers.ledger_ids() if ledgers.read(i)[0].custom_metadata.get("component") == b"schema"}


def test_versions_are_stored_in_ledgers_and_located_at_pulsars_path(cluster: Cluster) -> None:
    store, storage, registry = broker(cluster)
    assert registry.add(T, avro("a")) == 0
    data, _ = store.get("/schemas/public/default/t")
    (entry,) = json.loads(data)["index"]
    assert entry["version"] == 0 and entry["ledger"] in schema_ledgers(store)
    # another broker, nothing cached, reads it from the ledger
    _, _, other = broker(cluster)
    assert other.get(T) == (0, registry.get(T)[1]) and other.get(T)[1].data == avro("a").data


def test_two_brokers_racing_cannot_both_add_a_version(cluster: Cluster) -> None:
    store_a, a, registry_a = broker(cluster)
    _, b, registry_b = broker(cluster)
    seen_by_a = a.locator(T)  # None: both believe they add version 0
    assert b.add(T, avro("x"), b.locator(T)) == 0
    before = schema_ledgers(store_a)
    with pytest.raises(LocatorConflict):
        a.add(T, avro("y"), seen_by_a)
    assert schema_ledgers(store_a) == before  # the loser's ledger is deleted
    assert registry_a.get(T)[1].data == avro("x").data
    # at version 0 -> 1 too: the write is conditional on the node's version
    loc = a.locator(T)
    assert b.add(T, avro("x", "z"), b.locator(T)) == 1
    with pytest.raises(LocatorConflict):
        a.add(T, avro("y"), loc)
    assert [v for v, _ in registry_b.versions(T)] == [0, 1]


def test_the_loser_decides_again_on_what_the_winner_wrote(cluster: Cluster) -> None:
    _, a, registry_a = broker(cluster)
    _, b, _ = broker(cluster)
    b.add(T, avro("x"), None)
    assert registry_a.add(T, avro("x")) == 0  # the same schema: the winner's version
    with pytest.raises(IncompatibleSchema):
        SchemaRegistry(a, lambda: a.store).add(T, avro("other"))  # FULL: a required field replaced


def test_a_broker_that_cannot_write_the_locator_leaves_no_version(cluster: Cluster) -> None:
    """Its ledger is written and closed, then its metadata session is gone (a crash, an expiry)
    before the locator names the ledger: no one sees the version; the ledger is an orphan, tagged."""
    store, _, registry = broker(cluster)
    registry.add(T, avro("a"))
    locator_session = cluster.store()
    _, bookkeeper = cluster.broker()
    crashing = SchemaStorage(locator_session, bookkeeper, ManagedLedgerConfig())
    read = crashing.locator(T)
    before = schema_ledgers(store)
    locator_session.expire_session()
    with pytest.raises(MetadataError):
        crashing.add(T, avro("a", "b"), read)
    (orphan,) = schema_ledgers(store) - before
    assert LedgerMetadataStore(store).read(orphan)[0].custom_metadata["pulsar/schemaId"] == str(T).encode()
    _, _, other = broker(cluster)
    assert [v for v, _ in other.versions(T)] == [0]
    assert other.add(T, avro("a")) == 0


def test_partitions_share_their_topics_schema(cluster: Cluster) -> None:
    store, _, registry = broker(cluster)
    registry.add(T.partition_name(2), avro("a"))
    assert registry.get(T.partition_name(0))[0] == 0 and registry.get(T)[0] == 0
    assert locator_path(T.partition_name(5)) == layout.schema_locator_path("public", "default", "t")


def test_delete_removes_the_locator_and_every_ledger(cluster: Cluster) -> None:
    store, _, registry = broker(cluster)
    registry.add(T, avro("a"))
    registry.add(T, SchemaData("AVRO", avro("a").data.replace(b'"string"}', b'"string", "default": ""}', 1)))
    assert len(schema_ledgers(store)) == 2
    assert registry.delete(T) == 1
    assert schema_ledgers(store) == set() and store.exists("/schemas/public/default/t") is None
    with pytest.raises(SchemaNotFound):
        registry.get(T)
    assert registry.delete(T) is None
