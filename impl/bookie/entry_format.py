"""The entry wire format and digests (docs/protocol-rules.md, "Adding entries").

    header  : ledger id, entry id, LAC, total length; four big-endian int64 (32 bytes)
    digest  : over header + payload; CRC32C 4 bytes, CRC32 8 bytes, HMAC-SHA1 20 bytes, none 0
    payload : the application's bytes

`length` is the ledger's total payload length up to and including this entry, as in
BookKeeper, so a recovered ledger knows its length from its last entry. Pure functions.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib
from dataclasses import dataclass

import crc32c as _crc32c

from impl.metadata.ledger import DigestType

HEADER = struct.Struct(">qqqq")
HEADER_SIZE = HEADER.size  # 32

DIGEST_SIZES = {DigestType.CRC32C: 4, DigestType.CRC32: 8, DigestType.HMAC: 20, DigestType.DUMMY: 0}


class BadEntry(Exception):
    """An entry failed verification: wrong digest, ledger id or entry id, or truncated."""


def _sha1(*parts: bytes) -> bytes:
    digest = hashlib.sha1()
    for part in parts:
        digest.update(part)
    return digest.digest()


def master_key(password: bytes) -> bytes:
    """The key material a bookie checks on every add and fence: SHA-1 of "ledger" + password."""
    return _sha1(b"ledger", password)


def _mac_key(password: bytes) -> bytes:
    return _sha1(b"mac", password)


def _digest(digest_type: DigestType, password: bytes, data: bytes) -> bytes:
    if digest_type is DigestType.CRC32C:
        return struct.pack(">I", _crc32c.crc32c(data))
    if digest_type is DigestType.CRC32:
        return struct.pack(">q", zlib.crc32(data))
    if digest_type is DigestType.HMAC:
        return hmac.new(_mac_key(password), data, hashlib.sha1).digest()
    return b""


@dataclass(frozen=True)
class DecodedEntry:
    ledger_id: int
    entry_id: int
    lac: int  # the writer's LAC when it sent this entry (piggybacked)
    length: int  # total ledger payload length up to and including this entry
    payload: bytes


def encode_entry(
    ledger_id: int,
    entry_id: int,
    lac: int,
    length: int,
    payload: bytes,
    digest_type: DigestType = DigestType.CRC32C,
    password: bytes = b"",
) -> bytes:
    header = HEADER.pack(ledger_id, entry_id, lac, length)
    return header + _digest(digest_type, password, header + payload) + payload


def read_header(body: bytes) -> tuple[int, int, int, int]:
    """(ledger id, entry id, LAC, length) without verifying: what a bookie needs."""
    if len(body) < HEADER_SIZE:
        raise BadEntry(f"entry is {len(body)} bytes, shorter than the {HEADER_SIZE}-byte header")
    ledger_id, entry_id, lac, length = HEADER.unpack_from(body)
    return ledger_id, entry_id, lac, length


def decode_entry(
    body: bytes,
    digest_type: DigestType,
    password: bytes,
    expected_ledger_id: int,
    expected_entry_id: int,
) -> DecodedEntry:
    """Verify digest, ledger id and entry id (the reader's checks); raise BadEntry otherwise."""
    ledger_id, entry_id, lac, length = read_header(body)
    size = DIGEST_SIZES[digest_type]
    if len(body) < HEADER_SIZE + size:
        raise BadEntry(f"entry {expected_ledger_id}:{expected_entry_id} is truncated inside its digest")
    digest = body[HEADER_SIZE : HEADER_SIZE + size]
    payload = body[HEADER_SIZE + size :]
    expected = _digest(digest_type, password, body[:HEADER_SIZE] + payload)
    if not hmac.compare_digest(digest, expected):
        raise BadEntry(f"digest mismatch on entry {expected_ledger_id}:{expected_entry_id} ({digest_type.value})")
    if ledger_id != expected_ledger_id or entry_id != expected_entry_id:
        raise BadEntry(
            f"asked for entry {expected_ledger_id}:{expected_entry_id}, the bookie returned {ledger_id}:{entry_id}"
        )
    return DecodedEntry(ledger_id, entry_id, lac, length, payload)
