"""What a managed-ledger entry holds: the producer's identity and one message or a batch.

The format is broker.proto's `EntryPayload`, so any reader of the bookies (the broker, the
admin, a test) decodes entries the same way. Message i of an entry has batch index i and
sequence id `sequence_id + i`.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from impl.broker import broker_pb2 as pb
from impl.broker.managed_ledger import Position
from impl.broker.subscription import Message, MessageId


class CorruptEntry(ValueError):
    """An entry that is not an EntryPayload: written by something other than a broker."""


def encode_entry(producer_name: str, sequence_id: int, publish_time_ms: int, messages: list[pb.Message]) -> bytes:
    payload = pb.EntryPayload(producer_name=producer_name, sequence_id=sequence_id, publish_time=publish_time_ms)
    payload.messages.extend(messages)
    return payload.SerializeToString()


def decode_entry(position: Position, data: bytes) -> pb.EntryPayload:
    payload = pb.EntryPayload()
    try:
        payload.ParseFromString(data)
    except DecodeError as e:
        raise CorruptEntry(f"entry {position} is not a broker entry: {e}") from e
    if not payload.messages:
        raise CorruptEntry(f"entry {position} holds no message")
    return payload


def messages_of(position: Position, data: bytes) -> list[Message]:
    """The messages of one entry, with their ids (ledger, entry, batch index)."""
    payload = decode_entry(position, data)
    size = len(payload.messages)
    return [
        Message(
            MessageId(position.ledger_id, position.entry_id, i),
            m.key,
            m.payload,
            tuple(sorted(m.properties.items())),
            size,
        )
        for i, m in enumerate(payload.messages)
    ]
