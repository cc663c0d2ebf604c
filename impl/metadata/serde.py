"""Ledger metadata <-> bytes, as stored in a ledger's node.

Like BookKeeper's `LedgerMetadataSerDe`, a blob is a one-line text header naming
the format version, then the protobuf message (impl/metadata/ledger_metadata.proto):

    b"LedgerMetadataFormatVersion\\t1\\n" + LedgerMetadataFormat bytes

The header lets a reader refuse a version it does not know before parsing anything.
Every failure to read a blob raises a `LedgerMetadataFormatError` subclass.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from impl.metadata import ledger_metadata_pb2 as pb
from impl.metadata.ledger import DigestType, Fragment, LedgerMetadata, LedgerState

FORMAT_VERSION = 1
SUPPORTED_VERSIONS = frozenset({FORMAT_VERSION})
HEADER_PREFIX = b"LedgerMetadataFormatVersion\t"

_STATE_TO_PB = {
    LedgerState.OPEN: pb.OPEN,
    LedgerState.IN_RECOVERY: pb.IN_RECOVERY,
    LedgerState.CLOSED: pb.CLOSED,
}
_STATE_FROM_PB = {v: k for k, v in _STATE_TO_PB.items()}
_DIGEST_TO_PB = {
    DigestType.CRC32C: pb.CRC32C,
    DigestType.CRC32: pb.CRC32,
    DigestType.HMAC: pb.HMAC,
    DigestType.DUMMY: pb.DUMMY,
}
_DIGEST_FROM_PB = {v: k for k, v in _DIGEST_TO_PB.items()}


class LedgerMetadataFormatError(Exception):
    """A stored blob cannot be read as ledger metadata."""

    code = "MetadataSerializationException"  # BookKeeper's BKException for unreadable metadata


class CorruptLedgerMetadata(LedgerMetadataFormatError):
    """The blob is damaged or describes metadata that cannot exist."""


class UnknownFormatVersion(LedgerMetadataFormatError):
    """The blob was written in a format version this code does not read."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


def serialize(metadata: LedgerMetadata) -> bytes:
    message = pb.LedgerMetadataFormat(
        format_version=FORMAT_VERSION,
        ensemble_size=metadata.ensemble_size,
        write_quorum=metadata.write_quorum,
        ack_quorum=metadata.ack_quorum,
        state=_STATE_TO_PB[metadata.state],
        last_entry_id=metadata.last_entry_id,
        length=metadata.length,
        fragments=[
            pb.FragmentFormat(first_entry_id=f.first_entry_id, ensemble=list(f.ensemble)) for f in metadata.fragments
        ],
        digest_type=_DIGEST_TO_PB[metadata.digest_type],
        password=metadata.password,
        ctime=metadata.ctime,
        custom_metadata=dict(metadata.custom_metadata),
    )
    # deterministic=True: equal metadata always gives equal bytes (map order fixed).
    return HEADER_PREFIX + str(FORMAT_VERSION).encode() + b"\n" + message.SerializeToString(deterministic=True)


def deserialize(blob: bytes) -> LedgerMetadata:
    """Parse a blob written by `serialize`; raises CorruptLedgerMetadata or UnknownFormatVersion."""
    if not isinstance(blob, bytes | bytearray):
        raise CorruptLedgerMetadata(f"ledger metadata must be bytes, not {type(blob).__name__}")
    blob = bytes(blob)
    if not blob.startswith(HEADER_PREFIX) or b"\n" not in blob:
        raise CorruptLedgerMetadata(
            f"ledger metadata does not start with the {HEADER_PREFIX!r}<version> header "
            f"(first bytes: {blob[:32]!r}); the node was not written by this project or is damaged"
        )
    header, body = blob.split(b"\n", 1)
    version_text = header[len(HEADER_PREFIX) :]
    if not version_text.isdigit():
        raise CorruptLedgerMetadata(f"ledger metadata header has no version number: {header!r}")
    version = int(version_text)
    if version not in SUPPORTED_VERSIONS:
        raise UnknownFormatVersion(
            f"ledger metadata format version {version} is not readable by this code "
            f"(it reads {sorted(SUPPORTED_VERSIONS)}); upgrade pulsar-ref to read it",
            version,
        )
    message = pb.LedgerMetadataFormat()
    try:
        message.ParseFromString(body)
    except DecodeError as e:
        raise CorruptLedgerMetadata(f"ledger metadata body is not a valid protobuf message: {e}") from e
    if message.format_version != version:
        raise CorruptLedgerMetadata(
            f"ledger metadata header says version {version} but the body says {message.format_version}"
        )
    if message.state not in _STATE_FROM_PB:
        raise CorruptLedgerMetadata(f"ledger metadata has no valid state (got {message.state})")
    if message.digest_type not in _DIGEST_FROM_PB:
        raise CorruptLedgerMetadata(f"ledger metadata has no valid digest type (got {message.digest_type})")
    try:
        return LedgerMetadata(
            ensemble_size=message.ensemble_size,
            write_quorum=message.write_quorum,
            ack_quorum=message.ack_quorum,
            fragments=tuple(Fragment(f.first_entry_id, tuple(f.ensemble)) for f in message.fragments),
            state=_STATE_FROM_PB[message.state],
            last_entry_id=message.last_entry_id,
            length=message.length,
            digest_type=_DIGEST_FROM_PB[message.digest_type],
            password=message.password,
            ctime=message.ctime,
            custom_metadata=dict(message.custom_metadata),
        )
    except ValueError as e:
        raise CorruptLedgerMetadata(f"ledger metadata decodes to an impossible ledger: {e}") from e
