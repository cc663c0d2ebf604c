"""What a managed-ledger entry holds: Pulsar's entry format, as the producer sent it.

    [0x0e02 | u32 size | BrokerEntryMetadata]            optional, added by a broker
    0x0e01 | CRC32C | u32 metadataSize | MessageMetadata | payload

The checksum covers metadataSize, metadata and payload. One entry is one message, or a batch
of `num_messages_in_batch` messages: the payload (compressed as a whole when the producer chose
compression) is then each message in turn as `u32 size | SingleMessageMetadata | bytes`.

The broker stores the bytes of a SEND as they came and dispatches them as they are: it never
decompresses. It reads only the metadata (producer name and sequence ids for de-duplication,
the number of messages for permits) and, when the batch is not compressed, each message's key
for Key_Shared. Message i of an entry has batch index i.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import crc32c
from google.protobuf.message import DecodeError

from impl.protocol import pulsar_api_pb2 as api
from impl.values import value_type

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_MAGIC_AND_CRC = struct.Struct(">HI")


class CorruptEntry(ValueError):
    """Bytes that are not a Pulsar entry (or a SEND's payload that is not one)."""


class ChecksumMismatch(CorruptEntry):
    """The CRC32C does not match: the bytes were damaged on the way."""


class UnsupportedCompression(CorruptEntry):
    """A batch compressed with a codec this process cannot decompress (the broker never needs to)."""


class _Described:
    """What the metadata of an entry says (shared by `Entry` and `Header`)."""

    metadata: api.MessageMetadata

    @property
    def num_messages(self) -> int:
        return max(1, self.metadata.num_messages_in_batch)

    @property
    def is_batch(self) -> bool:
        return self.metadata.HasField("num_messages_in_batch")

    @property
    def highest_sequence_id(self) -> int:
        """The sequence id of the entry's last message (a batch's messages number consecutively)."""
        return max(self.metadata.sequence_id + self.num_messages - 1, self.metadata.highest_sequence_id)


@dataclass(frozen=True)
class Entry(_Described):
    metadata: api.MessageMetadata
    payload: bytes  # as stored: compressed when the metadata says so
    broker_metadata: api.BrokerEntryMetadata | None = None

    @property
    def payload_size(self) -> int:
        return len(self.payload)


@value_type  # built for every message: impl/values.py
class Header(_Described):
    """An entry's checked headers without its payload copied out: what the broker needs of a SEND."""

    metadata: api.MessageMetadata
    payload_size: int
    broker_metadata: api.BrokerEntryMetadata | None = None


@value_type  # built for every message: impl/values.py
class DispatchMetadata:
    """What a dispatcher needs of an entry, read once from its metadata when it is published (Pulsar's
    broker keeps the parsed MessageMetadata beside a cached entry for the same reason): a delivery then
    builds its messages without parsing the entry again. `keys` is None where the keys are inside an
    uncompressed batch's payload (only Key_Shared needs them: it parses the entry)."""

    num_messages: int
    deliver_at: int  # the metadata's deliver_at_time (ms since the epoch); 0: at once
    keys: tuple[str, ...] | None


def dispatch_metadata(header: Entry | Header) -> DispatchMetadata:
    meta = header.metadata
    n = header.num_messages
    at = meta.deliver_at_time if meta.HasField("deliver_at_time") else 0
    if header.is_batch and meta.compression == api.NONE:
        return DispatchMetadata(n, at, None)
    whole = meta.ordering_key.decode("utf-8", "replace") if meta.ordering_key else meta.partition_key
    return DispatchMetadata(n, at, (whole,) * n)  # as `keys`: a compressed batch takes the batch's key


@dataclass(frozen=True)
class SingleMessage:
    """One message of an entry: what the application sent."""

    payload: bytes
    key: str = ""
    properties: tuple[tuple[str, str], ...] = ()
    event_time: int = 0
    ordering_key: bytes = b""
    sequence_id: int | None = None


def build(metadata: api.MessageMetadata, payload: bytes) -> bytes:
    """An entry (and a SEND's headers and payload): magic, checksum, metadata, payload."""
    meta = metadata.SerializeToString()
    checked = b"".join((_U32.pack(len(meta)), meta, payload))
    return _MAGIC_AND_CRC.pack(MAGIC_CRC32C, crc32c.crc32c(checked)) + checked


def strip_broker_metadata(data: bytes) -> bytes:
    """The entry without its broker-entry-metadata prefix (for a client that does not read it)."""
    if len(data) >= 6 and _U16.unpack_from(data, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
        (size,) = _U32.unpack_from(data, 2)
        return data[6 + size :]
    return data


def parse(data: bytes, verify_checksum: bool = True) -> Entry:
    """The metadata and payload of an entry; CorruptEntry (or ChecksumMismatch) when it is not one."""
    metadata, broker_metadata, view, start = _headers(data, verify_checksum)
    return Entry(metadata, bytes(view[start:]), broker_metadata)


def parse_header(data: bytes, verify_checksum: bool = True) -> Header:
    """`parse` without copying the payload out (the broker stores the bytes as they came, and needs
    only the metadata and the payload's size); the same errors."""
    metadata, broker_metadata, view, start = _headers(data, verify_checksum)
    return Header(metadata, len(view) - start, broker_metadata)


def _headers(
    data: bytes, verify_checksum: bool
) -> tuple[api.MessageMetadata, api.BrokerEntryMetadata | None, memoryview, int]:
    """The metadata, the broker metadata, and where the payload starts in the returned view."""
    view = memoryview(data)
    broker_metadata = None
    try:
        if len(view) >= 2 and _U16.unpack_from(view, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
            (size,) = _U32.unpack_from(view, 2)
            broker_metadata = api.BrokerEntryMetadata.FromString(view[6 : 6 + size])
            view = view[6 + size :]
        if len(view) >= 6 and _U16.unpack_from(view, 0)[0] == MAGIC_CRC32C:
            (checksum,) = _U32.unpack_from(view, 2)
            view = view[6:]
            if verify_checksum and crc32c.crc32c(view) != checksum:
                raise ChecksumMismatch("the message's CRC32C does not match its metadata and payload")
        (size,) = _U32.unpack_from(view, 0)
        if size > len(view) - 4:
            raise CorruptEntry(f"metadata size {size} is beyond the {len(view) - 4} bytes that follow it")
        metadata = api.MessageMetadata.FromString(view[4 : 4 + size])
    except (struct.error, DecodeError) as e:
        raise CorruptEntry(f"not a Pulsar message: {e}") from e
    if not metadata.HasField("producer_name") or not metadata.HasField("sequence_id"):
        raise CorruptEntry("the message metadata lacks the producer name or sequence id")
    return metadata, broker_metadata, view, 4 + size


# ---- batches -------------------------------------------------------------------------------


def batch_payload(messages: list[SingleMessage], first_sequence_id: int) -> bytes:
    """The uncompressed payload of a batch: each message with its SingleMessageMetadata."""
    parts = []
    for i, m in enumerate(messages):
        single = api.SingleMessageMetadata(payload_size=len(m.payload), sequence_id=first_sequence_id + i)
        _fill(single, m)
        meta = single.SerializeToString()
        parts += [_U32.pack(len(meta)), meta, m.payload]
    return b"".join(parts)


def metadata_for(
    producer_name: str, sequence_id: int, publish_time_ms: int, messages: list[SingleMessage], batch: bool
) -> api.MessageMetadata:
    """The MessageMetadata of an entry holding `messages` (one, unless `batch`)."""
    meta = api.MessageMetadata(producer_name=producer_name, sequence_id=sequence_id, publish_time=publish_time_ms)
    if batch:
        meta.num_messages_in_batch = len(messages)
        meta.highest_sequence_id = sequence_id + len(messages) - 1
        meta.uncompressed_size = 0  # set by the caller once the payload is built
    else:
        (only,) = messages
        _fill(meta, only)
    return meta


def build_messages(producer_name: str, sequence_id: int, publish_time_ms: int, messages: list[SingleMessage]) -> bytes:
    """An uncompressed entry of one message, or a batch of several, as a producer builds it."""
    if len(messages) == 1:
        return build(
            metadata_for(producer_name, sequence_id, publish_time_ms, messages, batch=False), messages[0].payload
        )
    payload = batch_payload(messages, sequence_id)
    meta = metadata_for(producer_name, sequence_id, publish_time_ms, messages, batch=True)
    meta.uncompressed_size = len(payload)
    return build(meta, payload)


def _fill(meta: api.MessageMetadata | api.SingleMessageMetadata, m: SingleMessage) -> None:
    if m.key:
        meta.partition_key = m.key
    if m.ordering_key:
        meta.ordering_key = m.ordering_key
    if m.event_time:
        meta.event_time = m.event_time
    for k, v in m.properties:
        meta.properties.add(key=k, value=v)


def decompress(entry: Entry) -> bytes:
    """The entry's payload uncompressed (NONE and ZLIB; others raise UnsupportedCompression)."""
    kind = entry.metadata.compression
    if kind == api.NONE:
        return entry.payload
    if kind == api.ZLIB:
        try:
            return zlib.decompress(entry.payload)
        except zlib.error as e:
            raise CorruptEntry(f"the ZLIB payload does not decompress: {e}") from e
    raise UnsupportedCompression(f"{api.CompressionType.Name(kind)} payloads are not decompressed here")


def singles(entry: Entry) -> list[SingleMessage]:
    """The messages of an entry (decompressing a batch's payload when it is compressed)."""
    meta = entry.metadata
    props = tuple((kv.key, kv.value) for kv in meta.properties)
    if not entry.is_batch:
        return [
            SingleMessage(
                decompress(entry), meta.partition_key, props, meta.event_time, meta.ordering_key, meta.sequence_id
            )
        ]
    payload = memoryview(decompress(entry))
    out: list[SingleMessage] = []
    offset = 0
    try:
        for _ in range(entry.num_messages):
            (size,) = _U32.unpack_from(payload, offset)
            single = api.SingleMessageMetadata.FromString(payload[offset + 4 : offset + 4 + size])
            offset += 4 + size
            body = bytes(payload[offset : offset + single.payload_size])
            if len(body) != single.payload_size:
                raise CorruptEntry("a batched message is cut short")
            offset += single.payload_size
            out.append(
                SingleMessage(
                    body,
                    single.partition_key,
                    tuple((kv.key, kv.value) for kv in single.properties),
                    single.event_time,
                    single.ordering_key,
                    single.sequence_id if single.HasField("sequence_id") else None,
                )
            )
    except (struct.error, DecodeError) as e:
        raise CorruptEntry(f"the batch does not hold {entry.num_messages} messages: {e}") from e
    return out


def batch_sequence_ids(entry: Entry) -> list[int | None]:
    """Each batched message's own sequence id (None where its SingleMessageMetadata has none), read
    without copying the payloads out: what de-duplication needs of a batch."""
    payload = memoryview(decompress(entry))
    out: list[int | None] = []
    offset = 0
    try:
        for _ in range(entry.num_messages):
            (size,) = _U32.unpack_from(payload, offset)
            single = api.SingleMessageMetadata.FromString(payload[offset + 4 : offset + 4 + size])
            offset += 4 + size + single.payload_size
            out.append(single.sequence_id if single.HasField("sequence_id") else None)
    except (struct.error, DecodeError) as e:
        raise CorruptEntry(f"the batch does not hold {entry.num_messages} messages: {e}") from e
    return out


def keys(entry: Entry) -> list[str]:
    """Each message's routing key (ordering key first, as Key_Shared uses it). A compressed batch is
    not opened: all its messages take the batch's key, as producers batch by key for Key_Shared."""
    meta = entry.metadata
    whole = meta.ordering_key.decode("utf-8", "replace") if meta.ordering_key else meta.partition_key
    if not entry.is_batch or meta.compression != api.NONE:
        return [whole] * entry.num_messages
    try:
        return [m.ordering_key.decode("utf-8", "replace") if m.ordering_key else m.key for m in singles(entry)]
    except CorruptEntry:
        return [whole] * entry.num_messages
