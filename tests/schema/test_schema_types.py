"""Every schema type the official Python client sends is stored and returned; the registry outlives
an unload and a SIGKILL of the standalone process (its versions are in BookKeeper and the metadata
store, nothing in memory)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pulsar
import pytest
from pulsar.schema import AvroSchema, BytesSchema, Integer, JsonSchema, ProtobufNativeSchema, Record, StringSchema

from impl.broker.web.admin_client import topic_path
from impl.protocol import pulsar_api_pb2 as api
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import Standalone

pytestmark = pytest.mark.processes


class Reading(Record):
    value = Integer()


def schema_path(topic: str) -> str:
    return topic_path(topic).replace("/persistent/", "/schemas/", 1) + "/schema"


def test_each_type_is_stored_returned_and_survives_unload_and_sigkill(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "data")
    ns = f"public/types-{uuid.uuid4().hex[:6]}"
    kinds = {
        "STRING": StringSchema(),
        "JSON": JsonSchema(Reading),
        "AVRO": AvroSchema(Reading),
        "PROTOBUF_NATIVE": ProtobufNativeSchema(api.MessageIdData),
    }
    try:
        client = pulsar.Client(s.url, operation_timeout_seconds=10)
        stored = {}
        for kind, schema in kinds.items():
            t = f"persistent://public/default/{kind.lower()}-{ns[-6:]}"
            consumer = client.subscribe(t, "s", schema=schema, initial_position=pulsar.InitialPosition.Earliest)
            producer = client.create_producer(t, schema=schema)
            value = {"STRING": "hello", "PROTOBUF_NATIVE": api.MessageIdData(ledgerId=3, entryId=4)}.get(
                kind, Reading(value=7)
            )
            producer.send(value)
            got = consumer.receive(10_000).value()
            assert got == value if kind != "JSON" and kind != "AVRO" else got.value == 7
            answer = s.admin.call("GET", schema_path(t))
            assert answer["type"] == kind and answer["version"] == 0
            stored[t] = answer
        assert json.loads(stored[next(t for t in stored if "avro" in t)]["data"])["name"] == "Reading"
        # BYTES (no schema): nothing is registered
        t = f"persistent://public/default/bytes-{ns[-6:]}"
        client.create_producer(t, schema=BytesSchema()).send(b"x")
        with pytest.raises(HttpError) as e:
            s.admin.call("GET", schema_path(t))
        assert e.value.status == 404
        # unload: the topic reloads, the schema is the same
        avro_topic = next(t for t in stored if "avro" in t)
        s.admin.call("PUT", topic_path(avro_topic) + "/unload")
        assert s.admin.call("GET", schema_path(avro_topic)) == stored[avro_topic]
        client.close()
    finally:
        s.proc.kill()  # SIGKILL: no clean close of anything
        s.proc.wait()
    s = Standalone(tmp_path / "data")
    try:
        for t, answer in stored.items():
            assert s.admin.call("GET", schema_path(t)) == answer
        client = pulsar.Client(s.url, operation_timeout_seconds=10)
        reader = client.create_reader(avro_topic, pulsar.MessageId.earliest, schema=AvroSchema(Reading))
        assert reader.read_next(10_000).value().value == 7
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(avro_topic, schema=StringSchema())
        client.create_producer(avro_topic, schema=AvroSchema(Reading))
        assert s.admin.call("GET", schema_path(avro_topic))["version"] == 0
        client.close()
    finally:
        s.stop()
