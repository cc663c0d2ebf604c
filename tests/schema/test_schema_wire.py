"""Schema requests no well-behaved client sends, straight over a socket to a standalone process:
each gets Pulsar's error with a reason, nothing is registered, and the connection keeps serving."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator

import pytest

from impl.broker.schema.model import version_bytes
from impl.protocol import frames
from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.session import command
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import Standalone, running_standalone

pytestmark = pytest.mark.processes
T = api.BaseCommand
AVRO = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]}).encode()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory)


class Wire:
    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("pulsar://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.decoder = frames.FrameDecoder(frames.DEFAULT_MAX_MESSAGE_SIZE + frames.FRAME_PADDING)
        self.pending: list[frames.Frame] = []
        assert self.ask(command(T.CONNECT, connect=api.CommandConnect(protocol_version=20))).type == T.CONNECTED

    def ask(self, cmd: api.BaseCommand) -> api.BaseCommand:
        self.sock.sendall(frames.encode(cmd))
        while not self.pending:
            self.pending = self.decoder.feed(self.sock.recv(65536))
        return self.pending.pop(0).command

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def wire(standalone: Standalone) -> Iterator[Wire]:
    w = Wire(standalone.url)
    yield w
    w.close()


def topic() -> str:
    return f"persistent://public/default/wire-{uuid.uuid4().hex[:8]}"


def get_schema(wire: Wire, t: str, version: bytes | None = None) -> api.CommandGetSchemaResponse:
    request = api.CommandGetSchema(request_id=1, topic=t)
    if version is not None:
        request.schema_version = version
    reply = wire.ask(command(T.GET_SCHEMA, getSchema=request))
    assert reply.type == T.GET_SCHEMA_RESPONSE
    return reply.getSchemaResponse


def get_or_create(wire: Wire, t: str, schema: api.Schema) -> api.CommandGetOrCreateSchemaResponse:
    request = api.CommandGetOrCreateSchema(request_id=2, topic=t, schema=schema)
    reply = wire.ask(command(T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=request))
    assert reply.type == T.GET_OR_CREATE_SCHEMA_RESPONSE
    return reply.getOrCreateSchemaResponse


def test_get_or_create_then_get_by_version_and_latest(wire: Wire) -> None:
    t = topic()
    missing = get_schema(wire, t)
    assert missing.error_code == api.TopicNotFound and "no schema" in missing.error_message
    created = get_or_create(wire, t, api.Schema(name=t, type=api.Schema.AVRO, schema_data=AVRO))
    assert not created.HasField("error_code") and created.schema_version == version_bytes(0)
    latest = get_schema(wire, t)
    assert latest.schema.type == api.Schema.AVRO and latest.schema.schema_data == AVRO
    assert latest.schema_version == version_bytes(0)
    assert get_schema(wire, t, version_bytes(0)).schema.schema_data == AVRO
    assert get_schema(wire, t, version_bytes(5)).error_code == api.TopicNotFound
    assert get_schema(wire, t, b"\x01").error_code == api.TopicNotFound  # not 8 bytes


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (api.Schema(type=api.Schema.AVRO, schema_data=b"{broken"), "Invalid schema definition"),
        (api.Schema(type=api.Schema.JSON, schema_data=b'{"type": "nothing"}'), "Invalid schema definition"),
        (api.Schema.FromString(b"\x20\x4d"), "no known type"),  # type 77: unknown to Pulsar
        (api.Schema(type=api.Schema.AVRO, schema_data=b" " * (1024 * 1024 + 1)), "exceeds"),
    ],
)
def test_bad_schemas_are_refused_and_nothing_is_registered(
    wire: Wire, standalone: Standalone, schema: api.Schema, reason: str
) -> None:
    t = topic()
    refused = get_or_create(wire, t, schema)
    assert refused.error_code == api.IncompatibleSchema and reason in refused.error_message
    producer = api.CommandProducer(topic=t, producer_id=1, request_id=3, schema=schema)
    reply = wire.ask(command(T.PRODUCER, producer=producer))
    assert reply.type == T.ERROR and reply.error.error == api.IncompatibleSchema and reason in reply.error.message
    with pytest.raises(HttpError) as e:
        standalone.admin.call("GET", f"/admin/v2/schemas/public/default/{t.rsplit('/', 1)[1]}/schema")
    assert e.value.status == 404
    assert wire.ask(command(T.PING, ping=api.CommandPing())).type == T.PONG  # still serving


def test_a_consumer_with_an_incompatible_schema_is_refused(wire: Wire) -> None:
    t = topic()
    get_or_create(wire, t, api.Schema(type=api.Schema.AVRO, schema_data=AVRO))
    other = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}).encode()
    subscribe = api.CommandSubscribe(
        topic=t,
        subscription="s",
        consumer_id=1,
        request_id=4,
        schema=api.Schema(type=api.Schema.AVRO, schema_data=other),
    )
    reply = wire.ask(command(T.SUBSCRIBE, subscribe=subscribe))
    assert reply.type == T.ERROR and reply.error.error == api.IncompatibleSchema and "FULL" in reply.error.message
    subscribe.consumer_id, subscribe.request_id = 2, 5
    subscribe.schema.schema_data = AVRO
    assert wire.ask(command(T.SUBSCRIBE, subscribe=subscribe)).type == T.SUCCESS
