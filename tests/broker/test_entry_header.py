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
