"""The schema registry on Pulsar's binary protocol (shell functions the listener calls on its pool):
PRODUCER's and SUBSCRIBE's schemas, GET_SCHEMA and GET_OR_CREATE_SCHEMA."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from impl.broker import connection as conn
from impl.broker.schema.model import (
    TYPE_NUMBERS,
    InvalidSchema,
    SchemaData,
    SchemaError,
    type_name,
    version_bytes,
    version_from_bytes,
)
from impl.metadata.naming import TopicName
from impl.protocol import pulsar_api_pb2 as api
from impl.security.authorization import Access

if TYPE_CHECKING:
    from impl.broker.schema.registry import SchemaRegistry


def from_wire(schema: api.Schema) -> SchemaData:
    if not schema.HasField("type"):  # absent, or a number this protocol does not know (an unknown field)
        raise InvalidSchema("a schema with no known type")
    name = type_name(schema.type)
    return SchemaData(name, schema.schema_data, {kv.key: kv.value for kv in schema.properties})


def to_wire(schema: SchemaData, topic: str) -> api.Schema:
    wire = api.Schema(name=topic, schema_data=schema.data, type=TYPE_NUMBERS[schema.type])  # type: ignore[arg-type]
    for key, value in sorted(schema.properties.items()):
        wire.properties.add(key=key, value=value)
    return wire


# A registration through a topic (PRODUCER, SUBSCRIBE, GET_OR_CREATE_SCHEMA) takes the session's registry
# BEFORE checking that the topic is loaded: a topic loaded now was loaded on that session or a later one
# (a renewal drops the old session's topics before the new session is adopted), so the write either runs
# on the session holding the ownership or fails SessionExpired. Taken after the check, a renewal in
# between would register on the new session for a topic dropped with the old (spec/schema.md).


def producer_version(schemas: SchemaRegistry, name: TopicName, schema: api.Schema | None) -> bytes | None:
    """The schema_version for PRODUCER_SUCCESS; SchemaError when the registry refuses the producer."""
    data = None if schema is None else from_wire(schema)
    version = schemas.for_producer(name, data)
    return None if version is None else version_bytes(version)


def check_consumer(schemas: SchemaRegistry, name: TopicName, schema: api.Schema | None) -> None:
    if schema is not None:
        schemas.for_consumer(name, from_wire(schema))


ErrorOf = Callable[[Exception], tuple[int, str]]  # the listener's: a failure -> (ServerError, reason)


def get_schema(connection: Any, out: conn.DoGetSchema, error_of: ErrorOf) -> list[Any]:
    resp = api.CommandGetSchemaResponse(request_id=out.request_id)
    try:
        connection._authorize(out.topic, Access.LOOKUP, "get schema")
        name = TopicName.parse(out.topic)
        version = None if out.version is None else version_from_bytes(out.version)
        found, schema = connection.service.schemas.get(name, version)
        resp.schema.CopyFrom(to_wire(schema, str(name.base)))
        resp.schema_version = version_bytes(found)
    except Exception as e:
        resp.error_code, resp.error_message = error_of(e)  # type: ignore[assignment]
    return [conn.Reply(conn.command(api.BaseCommand.GET_SCHEMA_RESPONSE, getSchemaResponse=resp))]


def get_or_create_schema(connection: Any, out: conn.DoGetOrCreateSchema, error_of: ErrorOf) -> list[Any]:
    resp = api.CommandGetOrCreateSchemaResponse(request_id=out.request_id)
    try:
        connection._authorize(out.topic, Access.PRODUCE, "get or create schema")
        name = TopicName.parse(out.topic)
        schemas = connection.service.schemas  # before the topic check (above)
        connection.service.topic(out.topic)  # only the owner writes the locator
        version = schemas.for_producer(name, from_wire(out.schema))
        if version is not None:
            resp.schema_version = version_bytes(version)
    except Exception as e:
        resp.error_code, resp.error_message = error_of(e)  # type: ignore[assignment]
    cmd = conn.command(api.BaseCommand.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=resp)
    return [conn.Reply(cmd)]


def refusal(e: SchemaError) -> tuple[int, str]:
    return getattr(api, e.code), str(e)
