"""Schemas as Pulsar's registry holds them (pure): type, definition, properties; versions; hashes.

A schema version is a long, sent on the wire as 8 big-endian bytes (Pulsar's LongSchemaVersion).
The hash that identifies "the same schema" covers the type and the definition, not the properties,
as Pulsar's SchemaHash does.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass, field
from typing import Any

import avro.errors
import avro.schema

# Largest definition accepted (bytes): one BookKeeper entry, far below a frame; bigger is refused.
MAX_SCHEMA_BYTES = 1024 * 1024

# The protocol's Schema.Type numbers -> Pulsar's SchemaType names (the REST API's "type").
TYPE_NAMES: dict[int, str] = {
    0: "NONE",
    1: "STRING",
    2: "JSON",
    3: "PROTOBUF",
    4: "AVRO",
    5: "BOOLEAN",
    6: "INT8",
    7: "INT16",
    8: "INT32",
    9: "INT64",
    10: "FLOAT",
    11: "DOUBLE",
    12: "DATE",
    13: "TIME",
    14: "TIMESTAMP",
    15: "KEY_VALUE",
    16: "INSTANT",
    17: "LOCAL_DATE",
    18: "LOCAL_TIME",
    19: "LOCAL_DATE_TIME",
    20: "PROTOBUF_NATIVE",
    21: "AUTO_CONSUME",
}
TYPE_NUMBERS: dict[str, int] = {v: k for k, v in TYPE_NAMES.items()}
TYPE_NUMBERS["BYTES"] = 0  # Pulsar's BYTES travels as NONE on the wire
# Types whose definition is an Avro schema (Pulsar's JSON and PROTOBUF schemas are Avro records too).
AVRO_DEFINED = frozenset({"AVRO", "JSON", "PROTOBUF"})
# Types the registry never stores: a consumer's AUTO_CONSUME asks for whatever the topic has.
NOT_STORED = frozenset({"AUTO_CONSUME", "AUTO_PUBLISH"})


class SchemaError(Exception):
    """Base of the registry's refusals; `code` is Pulsar's ServerError name."""

    code = "UnknownError"


class InvalidSchema(SchemaError):
    """The definition is not a schema of its type (Pulsar's InvalidSchemaDataException)."""

    code = "IncompatibleSchema"


class IncompatibleSchema(SchemaError):
    code = "IncompatibleSchema"


class SchemaNotFound(SchemaError):
    code = "TopicNotFound"  # Pulsar answers GET_SCHEMA of a missing schema so


@dataclass(frozen=True)
class SchemaData:
    type: str  # Pulsar's SchemaType name: "AVRO", "STRING", ...
    data: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)
    timestamp: int = 0  # ms; when it was registered (0 until then)

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.type.encode() + b"\0" + self.data).hexdigest()

    def to_json(self) -> bytes:
        return json.dumps(
            {"type": self.type, "data": self.data.hex(), "properties": self.properties, "timestamp": self.timestamp},
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> SchemaData:
        doc = json.loads(raw)
        return cls(doc["type"], bytes.fromhex(doc["data"]), dict(doc["properties"]), int(doc["timestamp"]))


def version_bytes(version: int) -> bytes:
    return struct.pack(">q", version)


def version_from_bytes(raw: bytes) -> int:
    """A wire schema version; InvalidSchema-like SchemaNotFound for anything but 8 bytes."""
    if len(raw) != 8:
        raise SchemaNotFound(f"schema version must be 8 bytes (a long), got {len(raw)}")
    return int(struct.unpack(">q", raw)[0])


def type_name(number: int) -> str:
    name = TYPE_NAMES.get(number)
    if name is None:
        raise InvalidSchema(f"unknown schema type {number}")
    return name


def parse_avro(schema: SchemaData) -> avro.schema.Schema:
    try:
        text = schema.data.decode()
        return avro.schema.parse(text)
    except (UnicodeDecodeError, json.JSONDecodeError, avro.errors.AvroException, TypeError, ValueError) as e:
        raise InvalidSchema(f"Invalid schema definition data for {schema.type} schema: {e}") from None


def split_key_value(schema: SchemaData) -> tuple[SchemaData, SchemaData]:
    """A KEY_VALUE schema's two components: `i32 len | key schema | i32 len | value schema`, their
    types in the properties key.schema.type / value.schema.type (Pulsar's KeyValueSchemaInfo)."""
    data = schema.data
    try:
        (klen,) = struct.unpack_from(">i", data, 0)
        key = data[4 : 4 + klen]
        (vlen,) = struct.unpack_from(">i", data, 4 + klen)
        value = data[8 + klen : 8 + klen + vlen]
        if klen < 0 or vlen < 0 or len(key) != klen or len(value) != vlen or 8 + klen + vlen != len(data):
            raise struct.error("lengths do not match the data")
    except struct.error as e:
        raise InvalidSchema(f"Invalid schema definition data for KEY_VALUE schema: {e}") from None
    props = schema.properties
    ktype = props.get("key.schema.type", "BYTES")
    vtype = props.get("value.schema.type", "BYTES")
    if ktype not in TYPE_NUMBERS or vtype not in TYPE_NUMBERS:
        raise InvalidSchema(f"KEY_VALUE schema with unknown component types {ktype!r}, {vtype!r}")
    return SchemaData(ktype, key), SchemaData(vtype, value)


def validate(schema: SchemaData) -> None:
    """Refuse what cannot be a schema of its type (InvalidSchema), before anything is stored."""
    if schema.type not in TYPE_NUMBERS:
        raise InvalidSchema(f"unknown schema type {schema.type!r}")
    if len(schema.data) > MAX_SCHEMA_BYTES:
        raise InvalidSchema(f"schema definition of {len(schema.data)} bytes exceeds the {MAX_SCHEMA_BYTES}-byte limit")
    if schema.type in AVRO_DEFINED:
        parse_avro(schema)
    elif schema.type == "KEY_VALUE":
        for part in split_key_value(schema):
            validate(part)
    elif schema.type == "PROTOBUF_NATIVE":
        try:
            doc: Any = json.loads(schema.data)
            if not isinstance(doc, dict) or "rootMessageTypeName" not in doc:
                raise ValueError("no rootMessageTypeName")
        except (UnicodeDecodeError, ValueError) as e:
            raise InvalidSchema(f"Invalid schema definition data for PROTOBUF_NATIVE schema: {e}") from None
