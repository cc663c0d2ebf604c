"""The schema registry through the official client (pulsar-client 3.13.0) against a real standalone
process: Avro and JSON round trips, refusals with IncompatibleSchema, readers fetching by version."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

from tests.broker.pulsar_standalone import Standalone, running_standalone

pytestmark = pytest.mark.processes


class User(Record):
    name = String()
    age = Integer()


def user_v2() -> type[Record]:
    """User with an added field that has a default (null): compatible both ways, so FULL accepts it."""

    class User(Record):
        name = String()
        age = Integer()
        email = String(required_default=True)

    return User


UserV2 = user_v2()


def user_v2_no_default() -> type[Record]:
    class User(Record):
        name = String()
        age = Integer()
        email = String()  # no default: a reader with it cannot read v1 data (BACKWARD refuses)

    return User


class Other(Record):
    count = Integer(required=True)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory)


@pytest.fixture
def client(standalone: Standalone) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.url, operation_timeout_seconds=10)
    yield c
    c.close()


def topic() -> str:
    return f"persistent://public/default/schema-{uuid.uuid4().hex[:10]}"


def test_avro_round_trip_value_decodes(client: pulsar.Client) -> None:
    t = topic()
    consumer = client.subscribe(t, "s", schema=AvroSchema(User), initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(t, schema=AvroSchema(User))
    producer.send(User(name="ann", age=3))
    msg = consumer.receive(10_000)
    assert msg.value().name == "ann" and msg.value().age == 3
    assert msg.schema_version() is not None


def test_json_round_trip(client: pulsar.Client) -> None:
    t = topic()
    producer = client.create_producer(t, schema=JsonSchema(User))
    consumer = client.subscribe(t, "s", schema=JsonSchema(User), initial_position=pulsar.InitialPosition.Earliest)
    producer.send(User(name="bo", age=5))
    assert consumer.receive(10_000).value().name == "bo"


def test_incompatible_producer_refused(client: pulsar.Client) -> None:
    t = topic()
    client.create_producer(t, schema=AvroSchema(User))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(t, schema=AvroSchema(Other))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(t, schema=JsonSchema(User))  # another type
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(t, schema=StringSchema())


def test_json_producer_refused_on_string_topic(client: pulsar.Client) -> None:
    t = topic()
    client.create_producer(t, schema=StringSchema()).send("x")
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(t, schema=JsonSchema(User))


def test_evolution_and_old_versions_read(client: pulsar.Client, standalone: Standalone) -> None:
    t = topic()
    p1 = client.create_producer(t, schema=AvroSchema(User))
    p1.send(User(name="v1", age=1))
    p2 = client.create_producer(t, schema=AvroSchema(UserV2))
    p2.send(UserV2(name="v2", age=2, email="e"))
    # A reader with the old schema reads both, each message decoded with its writer's version.
    reader = client.create_reader(t, pulsar.MessageId.earliest, schema=AvroSchema(User))
    got = [reader.read_next(10_000) for _ in range(2)]
    assert [m.value().name for m in got] == ["v1", "v2"]
    versions = [m.schema_version() for m in got]
    assert versions[0] != versions[1]
