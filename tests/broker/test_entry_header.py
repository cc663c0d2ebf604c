"""entry_codec.parse_header, the broker's check of a SEND: the same verdicts as parse, without the payload."""

from __future__ import annotations

import pytest

from impl.protocol import entry_codec
from impl.protocol.entry_codec import SingleMessage, build_messages


@pytest.mark.parametrize(
    "messages", [[SingleMessage(b"x" * 1000, key="k")], [SingleMessage(b"a"), SingleMessage(b"bc")]]
)
def test_the_header_says_what_parse_says(messages: list[SingleMessage]) -> None:
    data = build_messages("p", 7, 123, messages)
    entry, header = entry_codec.parse(data), entry_codec.parse_header(data)
    assert header.metadata == entry.metadata and header.payload_size == len(entry.payload) == entry.payload_size
    assert header.num_messages == entry.num_messages and header.highest_sequence_id == entry.highest_sequence_id
    assert header.is_batch == entry.is_batch


def test_a_damaged_or_truncated_send_is_refused_as_parse_refuses_it() -> None:
    data = bytearray(build_messages("p", 0, 0, [SingleMessage(b"payload")]))
    data[-1] ^= 1
    with pytest.raises(entry_codec.ChecksumMismatch):
        entry_codec.parse_header(bytes(data))
    assert entry_codec.parse_header(bytes(data), verify_checksum=False).payload_size == len(b"payload")
    with pytest.raises(entry_codec.CorruptEntry):
        entry_codec.parse_header(b"\x0e\x01\x00\x00")


def _entry(messages: list[SingleMessage], deliver_at: int = 0, compressed: bool = False) -> bytes:
    """An entry as a producer sends it; `compressed`: a ZLIB batch."""
    import zlib

    if len(messages) == 1 and not compressed:
        meta = entry_codec.metadata_for("p", 1, 5, messages, batch=False)
        payload = messages[0].payload
    else:
        payload = entry_codec.batch_payload(messages, 1)
        meta = entry_codec.metadata_for("p", 1, 5, messages, batch=True)
        meta.uncompressed_size = len(payload)
        meta.partition_key = "batch-key"
        if compressed:
            meta.compression = entry_codec.api.ZLIB
            payload = zlib.compress(payload)
    if deliver_at:
        meta.deliver_at_time = deliver_at
    return entry_codec.build(meta, payload)


@pytest.mark.parametrize("keys_needed", [False, True])
@pytest.mark.parametrize(
    "data",
    [
        _entry([SingleMessage(b"x" * 1024)]),
        _entry([SingleMessage(b"x", key="k")], deliver_at=1_700_000_000_000),
        _entry([SingleMessage(b"a", key="k1"), SingleMessage(b"b", ordering_key=b"o2"), SingleMessage(b"c")]),
        _entry([SingleMessage(b"a", key="k1"), SingleMessage(b"b", key="k2")], compressed=True),
        b"\x0e\x02" + (2).to_bytes(4, "big") + b"\x08\x01" + _entry([SingleMessage(b"v", key="k")]),
    ],
)
def test_messages_from_the_publish_time_metadata_are_those_of_a_parse(data: bytes, keys_needed: bool) -> None:
    """The messages a delivery builds from what the publish read of an entry (kept beside the cached
    entry) are the messages it builds by parsing the entry: ids, keys, batch size, delivery time."""
    from impl.broker.dispatcher import messages_of
    from impl.broker.ledger_list import Position

    metadata = entry_codec.dispatch_metadata(entry_codec.parse_header(data))
    parsed = messages_of(Position(3, 9), data, payloads=False, keys_needed=keys_needed)
    kept = messages_of(Position(3, 9), data, payloads=False, keys_needed=keys_needed, metadata=metadata)
    fields = [(m.id, m.key, m.batch_size, m.deliver_at, m.entry) for m in parsed]
    assert fields == [(m.id, m.key, m.batch_size, m.deliver_at, m.entry) for m in kept]
    # Key_Shared takes a batch of several keys message by message; any other batch is one Message.
    entry = entry_codec.parse(data)
    assert sum(m.message_count for m in parsed) == entry.num_messages
    several_keys = len(set(entry_codec.keys(entry))) > 1
    assert len(parsed) == (entry.num_messages if keys_needed and several_keys else 1)
