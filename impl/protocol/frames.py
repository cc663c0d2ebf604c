"""Frames of Pulsar's binary protocol (pure: bytes in, commands out, and back).

Every frame starts with two unsigned 32-bit big-endian sizes:

    simple:   totalSize | commandSize | BaseCommand
    payload:  totalSize | commandSize | BaseCommand | headers and payload

totalSize counts everything after itself. The "headers and payload" of SEND and MESSAGE are what
a Pulsar ledger entry holds (impl/broker/entry_format.py): an optional broker-entry-metadata part
(0x0e02 | u32 size | BrokerEntryMetadata), then 0x0e01 | CRC32C | u32 metadataSize |
MessageMetadata | payload, the checksum covering everything after itself.

`FrameDecoder` is incremental: feed it whatever the socket gave, take the whole frames. It refuses
a frame whose announced size is over its limit before reading (or allocating for) its body.
"""

from __future__ import annotations

import struct

from google.protobuf.message import DecodeError

from impl.protocol import pulsar_api_pb2 as api
from impl.values import value_type
from impl.varint import varint

# Pulsar's default maxMessageSize (5 MiB) plus the padding its brokers allow for the command and
# the metadata around a message of that size.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
FRAME_PADDING = 10 * 1024
DEFAULT_MAX_FRAME_SIZE = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING

_U32 = struct.Struct(">I")
_TWO_U32 = struct.Struct(">II")

Type = api.BaseCommand.Type


class FrameError(ValueError):
    """The bytes are not a frame of the protocol: the connection cannot go on (close it)."""


class FrameTooLarge(FrameError):
    pass


@value_type  # built for every message: impl/values.py
class Frame:
    command: api.BaseCommand
    payload: bytes | None = None  # headers and payload, for SEND and MESSAGE


def command_name(type_number: int) -> str:
    """The protocol's name of a command type, or its number when this broker does not know it."""
    try:
        return str(Type.Name(type_number))
    except ValueError:
        return f"command type {type_number}"


def encode(command: api.BaseCommand, payload: bytes | None = None) -> bytes:
    """One frame: the command, followed by headers and payload for SEND and MESSAGE."""
    body = command.SerializeToString()
    extra = len(payload) if payload is not None else 0
    head = _TWO_U32.pack(4 + len(body) + extra, len(body))
    if payload is None:
        return head + body
    return b"".join((head, body, payload))


# Before CONNECT succeeds a client is unknown: broker and proxy accept only frames this small from it (a
# CONNECT with a token is a few KiB), so a silent or hostile connection cannot hold a full-size buffer.
MAX_FRAME_BEFORE_CONNECTED = 64 * 1024


class FrameDecoder:
    """Whole frames out of a byte stream. Raises FrameError at the first frame that is not one."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def take_buffered(self) -> bytes:
        """What was received but not decoded (a proxy relays it as it is)."""
        rest, self._buffer = bytes(self._buffer), bytearray()
        return rest

    def feed(self, data: bytes, max_frames: int | None = None) -> list[Frame]:
        """The whole frames buffered so far (at most `max_frames`; the rest stays buffered)."""
        self._buffer += data
        frames: list[Frame] = []
        offset = 0
        buffer = self._buffer
        while len(buffer) - offset >= 4 and (max_frames is None or len(frames) < max_frames):
            (total,) = _U32.unpack_from(buffer, offset)
            if total > self.max_frame_size:
                raise FrameTooLarge(f"a frame of {total} bytes is over the limit of {self.max_frame_size}")
            if total < 4:
                raise FrameError(f"a frame of {total} bytes cannot hold its command size")
            if len(buffer) - offset - 4 < total:
                break
            frames.append(_parse(bytes(buffer[offset + 4 : offset + 4 + total])))
            offset += 4 + total
        if offset:
            del buffer[:offset]
        return frames


def _parse(frame: bytes) -> Frame:
    (command_size,) = _U32.unpack_from(frame, 0)
    if command_size > len(frame) - 4:
        raise FrameError(f"command size {command_size} is beyond the frame's {len(frame) - 4} bytes")
    command = api.BaseCommand()
    try:
        command.ParseFromString(frame[4 : 4 + command_size])
    except DecodeError as e:
        raise FrameError(f"the command is not a protobuf BaseCommand: {e}") from e
    if not command.HasField("type"):
        raise FrameError("the command has no type")
    rest = frame[4 + command_size :]
    return Frame(command, rest if rest else None)


# ---- frames encoded by hand: the parts they share ------------------------------------------------------


def _message_id_data(ledger_id: int, entry_id: int, more: bytes = b"") -> bytes:
    """A MessageIdData: ledgerId (1), entryId (2), then `more`, its later fields already encoded."""
    return b"".join((b"\x08", varint(ledger_id), b"\x10", varint(entry_id), more))


def _sizes(head: bytes, command: bytes, payload_size: int = 0) -> tuple[bytes, bytes]:
    """For a frame of BaseCommand `head` (its type and the tag of its one command) and that command's
    bytes: the frame's total and command sizes, and the command's length prefix."""
    prefix = varint(len(command))
    command_size = len(head) + len(prefix) + len(command)
    return _TWO_U32.pack(4 + command_size + payload_size, command_size), prefix


# ---- SEND_RECEIPT frames by hand ----------------------------------------------------------------------

# BaseCommand: type (field 1, varint) = SEND_RECEIPT, then `send_receipt` (field 7, length-delimited).
_RECEIPT_HEAD = b"\x08" + varint(Type.SEND_RECEIPT) + b"\x3a"


def send_receipt(producer_id: int, sequence_id: int, highest: int, message_id: tuple[int, int, int]) -> bytes:
    """A SEND_RECEIPT frame (`message_id`: ledger id, entry id, batch index or -1), encoded by hand: the
    bytes protobuf serializes for the same BaseCommand (fields in number order; tests/broker/test_pulsar_frames.py
    checks it). An unbatched producer gets one per message: building and serializing the three message
    objects cost several times more."""
    ledger_id, entry_id, batch_index = message_id
    batch = b"\x20" + varint(batch_index) if batch_index >= 0 else b""  # MessageIdData.batch_index (4)
    mid = _message_id_data(ledger_id, entry_id, batch)
    receipt = b"".join(
        (
            b"\x08", varint(producer_id), b"\x10", varint(sequence_id),  # producer_id (1), sequence_id (2)
            b"\x1a", varint(len(mid)), mid, b"\x20", varint(highest),  # message_id (3), highest_sequence_id (4)
        )
    )  # fmt: skip
    sizes, prefix = _sizes(_RECEIPT_HEAD, receipt)
    return b"".join((sizes, _RECEIPT_HEAD, prefix, receipt))


# ---- MESSAGE frames from a template -----------------------------------------------------------------


class MessageTemplate:
    """MESSAGE frames of one consumer, encoded by hand: what the consumer id, its partition and its epoch
    add is encoded once, and each message splices in its entry's ids, its redelivery count and its
    ack_set. The bytes are those protobuf serializes for the same BaseCommand (fields in number order;
    tests/broker/test_pulsar_frames.py checks it), at a fraction of the cost of building and serializing the
    message objects."""

    # BaseCommand: type (field 1, varint) = MESSAGE, then `message` (field 9, length-delimited).
    _HEAD = b"\x08" + varint(Type.MESSAGE) + b"\x4a"

    def __init__(self, consumer_id: int, partition: int = -1, epoch: int = 0) -> None:
        self.consumer_id, self.partition, self.epoch = consumer_id, partition, epoch
        self._consumer = b"\x08" + varint(consumer_id)  # CommandMessage.consumer_id (1)
        self._partition = b"\x18" + varint(partition) if partition >= 0 else b""  # MessageIdData.partition (3)
        self._epoch = b"\x28" + varint(epoch) if epoch else b""  # CommandMessage.consumer_epoch (5)

    def parts(
        self, ledger_id: int, entry_id: int, redelivery_count: int, ack_set: tuple[int, ...], payload: bytes
    ) -> tuple[bytes, ...]:
        """One frame, as parts to join: sizes, command, the entry's headers and payload."""
        mid = _message_id_data(ledger_id, entry_id, self._partition)
        acks = b"".join([b"\x20" + varint(word) for word in ack_set]) if ack_set else b""
        message = b"".join(
            (self._consumer, b"\x12", varint(len(mid)), mid, b"\x18", varint(redelivery_count), acks, self._epoch)
        )
        sizes, prefix = _sizes(self._HEAD, message, len(payload))
        return sizes, self._HEAD, prefix, message, payload

    def encode(
        self, ledger_id: int, entry_id: int, redelivery_count: int, ack_set: tuple[int, ...], payload: bytes
    ) -> bytes:
        return b"".join(self.parts(ledger_id, entry_id, redelivery_count, ack_set, payload))
