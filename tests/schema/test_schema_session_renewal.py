"""The schema registry after a broker renews its metadata session (issue 49 item 1: every component
recovers from a session expiry by itself). A broker against a real ZooKeeper registers a schema, ZooKeeper
expires its session, the broker renews it; then the official client's producer with the schema, a new
version and the admin REST reads must work on the new session, without a restart. Before the fix the
schema storage kept the expired session's store: "SessionExpired ... this store was closed"."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String

from impl.bookie.server import Bookie, BookieServer
from impl.broker.broker import Broker
from impl.broker.managed_ledger import ManagedLedgerConfig
from impl.broker.schema.model import SchemaData
from impl.broker.schema.storage import SessionChanged
from impl.broker.service import BrokerConfig
from impl.broker.web.admin_client import AdminClient
from impl.metadata.naming import TopicName
from impl.metadata.registry import BookieRegistry
from impl.metadata.store import SessionExpired
from impl.metadata.url import connect
from impl.metadata.zkserver import ZooKeeperServer
from tests.waiting import wait_for

pytestmark = pytest.mark.zookeeper

TOPIC = "persistent://public/default/renewed"
SCHEMA = "/admin/v2/schemas/public/default/renewed/schema"


class Order(Record):
    id = Integer()


def avro(*fields: str) -> SchemaData:
    doc = {
        "type": "record",
        "name": "R",
        "fields": [{"name": f, "type": ["null", "string"], "default": None} for f in fields],
    }
    return SchemaData("AVRO", json.dumps(doc).encode())


def order_v2() -> type[Record]:
    class Order(Record):
        id = Integer()
        note = String(required_default=True)  # a default: FULL accepts it

    return Order


@pytest.fixture
def broker(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Broker]:
    """One in-process broker and one bookie (its own ZooKeeper session) under a chroot of their own."""
    url = f"zk://{zookeeper.connect_string}/schema-renewal-{uuid.uuid4().hex[:8]}"
    bookie_store = connect(url, session_timeout_s=10)
    server = BookieServer(Bookie(tmp_path / "bookie", metadata=bookie_store), port=0)
    server.start()
    try:
        BookieRegistry(bookie_store).register(f"127.0.0.1:{server.port}")
        config = BrokerConfig(managed_ledger=ManagedLedgerConfig(ensemble=1, write_quorum=1, ack_quorum=1))
        b = Broker(lambda: connect(url, session_timeout_s=4), config, cluster="solo")
        try:
            b.start()
            yield b
        finally:
            b.stop()
    finally:
        server.stop(grace_s=0)
        bookie_store.close()


def test_schema_calls_work_after_the_broker_renews_its_session(broker: Broker) -> None:
    admin = AdminClient(broker.web_url)
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=20)
    try:
        client.create_producer(TOPIC, schema=AvroSchema(Order)).send(Order(id=1))
        assert admin.call("GET", SCHEMA)["version"] == 0
    finally:
        client.close()

    old = broker.store
    broker.expire_session()  # a twin connection on the session closes it: the server expires it
    wait_for(lambda: broker.store is not old and not broker.renewing_session, "a new metadata session", 30)
    wait_for(lambda: broker.address in broker.live_brokers(), "the broker registered again", 20)

    # The same broker, no restart: reads and registrations go through the new session.
    assert admin.call("GET", SCHEMA)["version"] == 0
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=20)
    try:
        producer = client.create_producer(TOPIC, schema=AvroSchema(Order))  # the existing version
        producer.send(Order(id=2))
        v2 = order_v2()
        client.create_producer(TOPIC, schema=AvroSchema(v2)).send(v2(id=3, note="n"))  # a new version
        assert "note" in client._client.get_schema_info(TOPIC, 1).schema()  # GET_SCHEMA
        assert "note" not in client._client.get_schema_info(TOPIC, 0).schema()
    finally:
        client.close()
    versions = admin.call("GET", "/admin/v2/schemas/public/default/renewed/schemas")["getSchemaResponses"]
    assert [v["version"] for v in versions] == [0, 1]


def test_a_registration_that_straddles_the_renewal_fails_retriably(broker: Broker) -> None:
    """A registration keeps the registry it started with (one session for its read and its write): one
    whose session expired and was renewed meanwhile fails SessionExpired (ServiceNotReady / 503, retried)
    and writes nothing, instead of finishing on the new session for a topic dropped with the old one."""
    name = TopicName.parse(TOPIC)
    broker.service.schemas.add(name, avro("x"))
    started = broker.service.schemas  # what an operation in flight holds
    read = started.storage.locator(name)
    old = broker.store
    broker.expire_session()
    wait_for(lambda: broker.store is not old and not broker.renewing_session, "a new metadata session", 30)
    with pytest.raises(SessionExpired):
        started.add(name, avro("x", "y"))
    renewed = broker.service.schemas.storage
    with pytest.raises(SessionChanged):  # the cached read, written through the new session: refused
        renewed.add(name, avro("x", "z"), read)
    current = renewed.locator(name)
    assert read is not None and current is not None and current.stat_version == read.stat_version
    assert [v for v, _ in broker.service.schemas.versions(name)] == [0]
    assert broker.service.schemas.add(name, avro("x", "y")) == 1  # a fresh read on the new session
