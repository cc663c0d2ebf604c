"""The registry's pure parts: the connection core's schema requests, validation, and every strategy
decided by the avro library on reader/writer pairs."""

from __future__ import annotations

import json
import struct

import pytest

from impl.broker import connection as conn
from impl.broker.schema import compatibility
from impl.broker.schema.model import (
    MAX_SCHEMA_BYTES,
    IncompatibleSchema,
    InvalidSchema,
    SchemaData,
    SchemaNotFound,
    validate,
    version_bytes,
    version_from_bytes,
)
from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.frames import Frame
from impl.protocol.session import FrameReceived

T = api.BaseCommand


def avro(*fields: tuple[str, object, object]) -> SchemaData:
    """A record User with fields (name, type, default); default ... = none given."""
    doc = {
        "type": "record",
        "name": "User",
        "fields": [{"name": n, "type": t, **({} if d is ... else {"default": d})} for n, t, d in fields],
    }
    return SchemaData("AVRO", json.dumps(doc).encode())


V1 = avro(("a", "string", ...))
V2_OPTIONAL = avro(("a", "string", ...), ("b", ["null", "int"], None))  # added with a default
V2_REQUIRED = avro(("a", "string", ...), ("b", "int", ...))  # added without: new readers fail on v1 data
V1_DROPPED = avro(("c", ["null", "int"], None))  # a dropped, a new field with a default


def test_core_turns_get_schema_and_get_or_create_into_requests() -> None:
    core = conn.ServerConnection(max_message_size=1000)
    core.step(FrameReceived(Frame(conn.command(T.CONNECT, connect=api.CommandConnect(protocol_version=20))), 0))
    get = api.CommandGetSchema(request_id=7, topic="t", schema_version=version_bytes(3))
    (out,) = core.step(FrameReceived(Frame(conn.command(T.GET_SCHEMA, getSchema=get)), 0))
    assert out == conn.DoGetSchema(7, "t", version_bytes(3))
    latest = api.CommandGetSchema(request_id=8, topic="t")
    (out,) = core.step(FrameReceived(Frame(conn.command(T.GET_SCHEMA, getSchema=latest)), 0))
    assert out == conn.DoGetSchema(8, "t", None)
    schema = api.Schema(name="t", type=api.Schema.STRING)
    goc = api.CommandGetOrCreateSchema(request_id=9, topic="t", schema=schema)
    (out,) = core.step(FrameReceived(Frame(conn.command(T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=goc)), 0))
    assert isinstance(out, conn.DoGetOrCreateSchema) and out.schema.type == api.Schema.STRING


def test_producer_success_carries_the_schema_version() -> None:
    core = conn.ServerConnection(max_message_size=1000)
    core.step(FrameReceived(Frame(conn.command(T.CONNECT, connect=api.CommandConnect(protocol_version=20))), 0))
    p = api.CommandProducer(topic="t", producer_id=1, request_id=2, schema=api.Schema(type=api.Schema.AVRO))
    (out,) = core.step(FrameReceived(Frame(conn.command(T.PRODUCER, producer=p)), 0))
    assert isinstance(out, conn.DoCreateProducer) and out.schema is not None
    (reply,) = core.step(conn.ProducerReady(2, 1, "p", -1, version_bytes(4)))
    assert isinstance(reply, conn.Reply)
    assert reply.command.producer_success.schema_version == version_bytes(4)


@pytest.mark.parametrize(
    "schema",
    [
        SchemaData("AVRO", b"not json"),
        SchemaData("AVRO", b'{"type": "record", "name": "R"}'),  # no fields
        SchemaData("JSON", b'{"type": "nonsense"}'),
        SchemaData("WHATEVER", b""),
        SchemaData("AVRO", b" " * (MAX_SCHEMA_BYTES + 1)),
        SchemaData("KEY_VALUE", b"\x00\x00\x00\x09abc"),
        SchemaData("PROTOBUF_NATIVE", b"[]"),
    ],
)
def test_invalid_definitions_are_refused(schema: SchemaData) -> None:
    with pytest.raises(InvalidSchema):
        validate(schema)


def test_versions_are_eight_byte_longs() -> None:
    assert version_from_bytes(version_bytes(5)) == 5 and version_bytes(1) == b"\0" * 7 + b"\1"
    with pytest.raises(SchemaNotFound):
        version_from_bytes(b"\1")


@pytest.mark.parametrize(
    ("strategy", "new", "ok"),
    [
        ("BACKWARD", V2_OPTIONAL, True),
        ("BACKWARD", V2_REQUIRED, False),  # the new reader needs b, which v1 data lacks
        ("FORWARD", V2_REQUIRED, True),  # v1 readers ignore b
        ("FORWARD", V1_DROPPED, False),  # v1 readers need a, which new data lacks
        ("FULL", V2_OPTIONAL, True),
        ("FULL", V2_REQUIRED, False),
        ("ALWAYS_COMPATIBLE", SchemaData("STRING"), True),
        ("ALWAYS_INCOMPATIBLE", V2_OPTIONAL, False),
        ("FULL", SchemaData("STRING"), False),  # a change of type
    ],
)
def test_strategies_against_the_latest(strategy: str, new: SchemaData, ok: bool) -> None:
    if ok:
        compatibility.check(new, [(0, V1)], strategy)
    else:
        with pytest.raises(IncompatibleSchema, match=strategy if strategy != "FULL" or new.type == "AVRO" else "type"):
            compatibility.check(new, [(0, V1)], strategy)


def test_transitive_strategies_check_every_version() -> None:
    # v0 has a; v1 drops a for c (with a default); v2 drops c for b: each step is BACKWARD
    v0 = V1
    v1 = avro(("c", ["null", "int"], None))
    v2 = avro(("b", ["null", "int"], None), ("a", "string", ...))  # needs a: v1 data lacks it
    compatibility.check(v1, [(0, v0)], "BACKWARD")
    with pytest.raises(IncompatibleSchema):
        compatibility.check(v2, [(0, v0), (1, v1)], "BACKWARD")
    compatibility.check(v2, [(0, v0)], "BACKWARD")
    v2b = avro(("b", ["null", "int"], None))
    compatibility.check(v2b, [(0, v0), (1, v1)], "BACKWARD")
    compatibility.check(v2b, [(0, v0), (1, v1)], "BACKWARD_TRANSITIVE")
    v3 = avro(("c", ["null", "int"], ...))  # no default: reads v1 (c there), not v0 data
    compatibility.check(v3, [(0, v0), (1, v1)], "BACKWARD")
    with pytest.raises(IncompatibleSchema, match="version 0"):
        compatibility.check(v3, [(0, v0), (1, v1)], "BACKWARD_TRANSITIVE")
    with pytest.raises(IncompatibleSchema):
        compatibility.check(v3, [(0, v0), (1, v1)], "FULL_TRANSITIVE")


def test_key_value_components_are_checked_apart() -> None:
    def kv(key: SchemaData, value: SchemaData) -> SchemaData:
        data = struct.pack(">i", len(key.data)) + key.data + struct.pack(">i", len(value.data)) + value.data
        return SchemaData("KEY_VALUE", data, {"key.schema.type": key.type, "value.schema.type": value.type})

    old = kv(SchemaData("STRING"), V1)
    validate(old)
    compatibility.check(kv(SchemaData("STRING"), V2_OPTIONAL), [(0, old)], "FULL")
    with pytest.raises(IncompatibleSchema):
        compatibility.check(kv(SchemaData("STRING"), V2_REQUIRED), [(0, old)], "FULL")
    with pytest.raises(IncompatibleSchema):
        compatibility.check(kv(SchemaData("INT32"), V1), [(0, old)], "FULL")
