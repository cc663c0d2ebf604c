from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl.metadata import ledger_metadata_pb2 as pb
from impl.metadata.ledger import DigestType, Fragment, LedgerMetadata, LedgerState
from impl.metadata.serde import (
    HEADER_PREFIX,
    CorruptLedgerMetadata,
    LedgerMetadataFormatError,
    UnknownFormatVersion,
    deserialize,
    serialize,
)
from tests.ledger_metadata.strategies import ledger_metadata


@given(ledger_metadata())
def test_round_trip(metadata: LedgerMetadata) -> None:
    blob = serialize(metadata)
    assert deserialize(blob) == metadata
    assert serialize(deserialize(blob)) == blob  # deterministic bytes


def test_every_field_survives() -> None:
    metadata = LedgerMetadata(
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        fragments=(Fragment(0, ("a:1", "b:1", "c:1")), Fragment(7, ("a:1", "d:1", "c:1"))),
        state=LedgerState.CLOSED,
        last_entry_id=41,
        length=4200,
        digest_type=DigestType.HMAC,
        password=b"secret",
        ctime=1_700_000_000_000,
        custom_metadata={"application": b"pulsar", "x": b"\x00\xff"},
    )
    back = deserialize(serialize(metadata))
    assert back == metadata
    assert back.fragments[1].ensemble == ("a:1", "d:1", "c:1")
    assert back.custom_metadata["x"] == b"\x00\xff"


@given(ledger_metadata(), st.integers(2, 10**6))
def test_unknown_version_is_refused(metadata: LedgerMetadata, version: int) -> None:
    body = serialize(metadata).split(b"\n", 1)[1]
    with pytest.raises(UnknownFormatVersion) as info:
        deserialize(HEADER_PREFIX + str(version).encode() + b"\n" + body)
    assert info.value.version == version
    assert "upgrade" in str(info.value)


@given(st.binary(max_size=200))
def test_random_bytes_raise_a_typed_error(blob: bytes) -> None:
    try:
        decoded = deserialize(blob)
    except LedgerMetadataFormatError:
        return
    assert isinstance(decoded, LedgerMetadata)  # anything else (ValueError, DecodeError...) fails the test


@given(ledger_metadata(), st.data())
def test_damaged_body_raises_a_typed_error_or_decodes_valid_metadata(
    metadata: LedgerMetadata, data: st.DataObject
) -> None:
    blob = bytearray(serialize(metadata))
    header_end = blob.index(b"\n") + 1
    position = data.draw(st.integers(header_end, len(blob) - 1))
    blob[position] ^= data.draw(st.integers(1, 255))
    try:
        decoded = deserialize(bytes(blob))
    except LedgerMetadataFormatError:
        return
    # A flipped byte can land in free-form data (password, bookie name); the result is still valid metadata.
    assert isinstance(decoded, LedgerMetadata)


@pytest.mark.parametrize(
    ("blob", "needle"),
    [
        (b"", "header"),
        (b"garbage", "header"),
        (HEADER_PREFIX + b"x\n", "no version"),
        (HEADER_PREFIX + b"1\n\xff\xff\xff", "protobuf"),
        (HEADER_PREFIX + b"1\n", "version 1 but the body says 0"),
    ],
)
def test_corrupt_blobs(blob: bytes, needle: str) -> None:
    with pytest.raises(CorruptLedgerMetadata, match=needle):
        deserialize(blob)


def test_impossible_metadata_is_corrupt() -> None:
    message = pb.LedgerMetadataFormat(
        format_version=1,
        ensemble_size=3,
        write_quorum=4,
        ack_quorum=1,
        state=pb.OPEN,
        digest_type=pb.CRC32C,
        fragments=[pb.FragmentFormat(first_entry_id=0, ensemble=["a", "b", "c"])],
    )
    with pytest.raises(CorruptLedgerMetadata, match="impossible ledger"):
        deserialize(HEADER_PREFIX + b"1\n" + message.SerializeToString())
    message.write_quorum = 2
    message.state = pb.LEDGER_STATE_UNSPECIFIED
    with pytest.raises(CorruptLedgerMetadata, match="no valid state"):
        deserialize(HEADER_PREFIX + b"1\n" + message.SerializeToString())
    message.state = pb.OPEN
    assert deserialize(HEADER_PREFIX + b"1\n" + message.SerializeToString()).write_quorum == 2
