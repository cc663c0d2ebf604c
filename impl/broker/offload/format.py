"""The stored form of one offloaded ledger (pure): one object, written once, read by byte ranges.

    data     the entries' payloads, back to back, in entry order (entry ids 0..last)
    index    per entry: its offset in the object (int64), its length (uint32), its CRC-32 (uint32)
    trailer  TRAILER.size bytes: magic, ledger id, last entry id, payload bytes, index offset, entries

One object rather than Pulsar's data and index pair: an S3 PUT or a file rename makes it appear whole,
so an object that exists is complete (the offload is recorded only after it exists). The trailer comes
last so that the writer streams entries as it reads them from the bookies; a reader fetches the trailer
(a suffix range), then the index, then the ranges it is asked for. Each entry's CRC-32 catches an
object damaged behind the broker's back (OffloadedLedgerCorrupt) instead of serving wrong bytes.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from impl.broker.offload.errors import OffloadedLedgerCorrupt

MAGIC = b"PRLEDGR1"
TRAILER = struct.Struct(">8sqqqqq")  # magic, ledger id, last entry id, payload bytes, index offset, entries
INDEX_ENTRY = struct.Struct(">qII")  # offset, length, crc32


def object_key(ledger_id: int, uid: str) -> str:
    """The object's name, as Pulsar's blob-store offloader names its data blocks."""
    return f"{uid}-ledger-{ledger_id}"


@dataclass(frozen=True)
class Trailer:
    ledger_id: int
    last_entry_id: int
    length: int  # payload bytes (the ledger's length)
    index_offset: int
    entries: int

    def encode(self) -> bytes:
        return TRAILER.pack(MAGIC, self.ledger_id, self.last_entry_id, self.length, self.index_offset, self.entries)

    @staticmethod
    def decode(raw: bytes, key: str) -> Trailer:
        if len(raw) != TRAILER.size:
            raise OffloadedLedgerCorrupt(f"offloaded object {key}: {len(raw)} bytes where its trailer should be")
        magic, ledger_id, last, length, index_offset, entries = TRAILER.unpack(raw)
        if magic != MAGIC or entries != last + 1 or index_offset < 0 or length < 0:
            raise OffloadedLedgerCorrupt(f"offloaded object {key}: not an offloaded ledger (bad trailer)")
        return Trailer(ledger_id, last, length, index_offset, entries)

    @property
    def index_length(self) -> int:
        return self.entries * INDEX_ENTRY.size


@dataclass(frozen=True)
class IndexEntry:
    offset: int
    length: int
    crc: int


def decode_index(raw: bytes, trailer: Trailer, key: str) -> tuple[IndexEntry, ...]:
    if len(raw) != trailer.index_length:
        raise OffloadedLedgerCorrupt(
            f"offloaded object {key}: index of {len(raw)} bytes, expected {trailer.index_length}"
        )
    entries = tuple(IndexEntry(*INDEX_ENTRY.unpack_from(raw, i * INDEX_ENTRY.size)) for i in range(trailer.entries))
    end = 0
    for e in entries:
        if e.offset != end:
            raise OffloadedLedgerCorrupt(f"offloaded object {key}: index offsets are not contiguous")
        end += e.length
    if end != trailer.index_offset:
        raise OffloadedLedgerCorrupt(f"offloaded object {key}: index and data lengths disagree")
    return entries


def split_entries(
    raw: bytes, index: tuple[IndexEntry, ...], first: int, last: int, key: str
) -> list[tuple[int, bytes]]:
    """Entries first..last out of the bytes `raw` read from index[first].offset on, each checked."""
    base = index[first].offset
    out = []
    for entry_id in range(first, last + 1):
        e = index[entry_id]
        payload = raw[e.offset - base : e.offset - base + e.length]
        if len(payload) != e.length or zlib.crc32(payload) != e.crc:
            raise OffloadedLedgerCorrupt(f"offloaded object {key}: entry {entry_id} fails its checksum")
        out.append((entry_id, payload))
    return out


class ObjectWriter:
    """Builds the object as entries arrive: `add` returns the bytes to append, `finish` the tail."""

    def __init__(self, ledger_id: int) -> None:
        self.ledger_id = ledger_id
        self._index = bytearray()
        self._offset = 0
        self._next = 0

    def add(self, entry_id: int, payload: bytes) -> bytes:
        if entry_id != self._next:
            raise ValueError(f"ledger {self.ledger_id}: entry {entry_id} where {self._next} was expected")
        self._index += INDEX_ENTRY.pack(self._offset, len(payload), zlib.crc32(payload))
        self._offset += len(payload)
        self._next += 1
        return payload

    def finish(self) -> bytes:
        trailer = Trailer(self.ledger_id, self._next - 1, self._offset, self._offset, self._next)
        return bytes(self._index) + trailer.encode()
