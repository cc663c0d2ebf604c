"""The ledger index: per ledger, where each entry is and the ledger's durable state.

One append-only file per ledger, `index/ledger-<id>.idx` (as BookKeeper keeps one index
file per ledger), written only by checkpoints and fsynced before the checkpoint mark.
Records: u32 payload length | u32 CRC32 of payload | payload = u8 kind | fields:
    MASTER_KEY  the key bytes (always the first record)
    STATE       u8 fenced | i64 piggybacked LAC | i64 explicit LAC (the latest one wins)
    LOCATIONS   n x (i64 entry | i64 entry log | i64 offset | u32 size) (a later one wins)
Loading folds the records. A damaged record ends a file: a crash in the middle of a
checkpoint leaves a torn tail, whose content the journal still holds (the checkpoint mark
was not written). Damage is reported, the damaged file kept aside as `.damaged`, and the
index file cut back to its last whole record so that later appends stay readable.
"""

from __future__ import annotations

import os
import shutil
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from impl.bookie.entry_log import Location, fsync_directory

FRAME = struct.Struct(">II")
STATE = struct.Struct(">Bqq")
LOCATION = struct.Struct(">qqqI")
FILE_PREFIX = "ledger-"
SUFFIX = ".idx"
MASTER_KEY, STATE_KIND, LOCATIONS = 1, 2, 3


@dataclass(frozen=True)
class LedgerMeta:
    """What a bookie keeps about a ledger besides its entries."""

    master_key: bytes
    fenced: bool = False
    piggybacked_lac: int = -1
    explicit_lac: int = -1


@dataclass
class IndexedLedger:
    meta: LedgerMeta
    locations: dict[int, Location] = field(default_factory=dict)


@dataclass(frozen=True)
class IndexDamage:
    file: Path
    offset: int
    reason: str
    ignored_bytes: int


def _frame(kind: int, body: bytes) -> bytes:
    payload = bytes([kind]) + body
    return FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def master_key_record(key: bytes) -> bytes:
    return _frame(MASTER_KEY, key)


def state_record(meta: LedgerMeta) -> bytes:
    return _frame(STATE_KIND, STATE.pack(meta.fenced, meta.piggybacked_lac, meta.explicit_lac))


def locations_record(locations: list[tuple[int, Location]]) -> bytes:
    return _frame(LOCATIONS, b"".join(LOCATION.pack(eid, *location) for eid, location in locations))


def index_path(directory: Path, ledger_id: int) -> Path:
    return directory / f"{FILE_PREFIX}{ledger_id}{SUFFIX}"


class LedgerIndex:
    def __init__(self, directory: Path, readonly: bool = False) -> None:
        self.directory = Path(directory)
        self.readonly = readonly
        if not readonly:
            self.directory.mkdir(parents=True, exist_ok=True)

    def load(self, damage: list[IndexDamage]) -> dict[int, IndexedLedger]:
        ledgers: dict[int, IndexedLedger] = {}
        if not self.directory.is_dir():
            return ledgers
        for path in sorted(self.directory.glob(f"{FILE_PREFIX}*{SUFFIX}")):
            try:
                ledger_id = int(path.name[len(FILE_PREFIX) : -len(SUFFIX)])
            except ValueError:
                continue  # not ours
            ledger = self._load_file(path, damage)
            if ledger is not None:
                ledgers[ledger_id] = ledger
        return ledgers

    def _load_file(self, path: Path, damage: list[IndexDamage]) -> IndexedLedger | None:
        data = path.read_bytes()
        ledger: IndexedLedger | None = None
        offset = 0
        reason = None
        while offset < len(data):
            if len(data) - offset < FRAME.size:
                reason = "truncated frame header"
                break
            length, crc = FRAME.unpack_from(data, offset)
            payload = data[offset + FRAME.size : offset + FRAME.size + length]
            if length == 0 or len(payload) < length:
                reason = "truncated record"
                break
            if zlib.crc32(payload) != crc:
                reason = "checksum mismatch"
                break
            kind, body = payload[0], payload[1:]
            if kind == MASTER_KEY and ledger is None:
                ledger = IndexedLedger(LedgerMeta(bytes(body)))
            elif ledger is None:
                reason = "the first record is not the ledger's master key"
                break
            elif kind == STATE_KIND and len(body) == STATE.size:
                fenced, piggybacked, explicit = STATE.unpack(body)
                ledger.meta = LedgerMeta(ledger.meta.master_key, bool(fenced), piggybacked, explicit)
            elif kind == LOCATIONS and len(body) % LOCATION.size == 0:
                for eid, log_id, log_offset, size in LOCATION.iter_unpack(body):
                    ledger.locations[eid] = (log_id, log_offset, size)
            else:
                reason = f"unknown or malformed record (kind {kind}, {len(body)} bytes)"
                break
            offset += FRAME.size + length
        if reason is not None:
            damage.append(IndexDamage(path, offset, reason, len(data) - offset))
            if not self.readonly:
                # Keep the evidence, then cut the file back so later appends follow whole records.
                shutil.copyfile(path, path.with_name(f"{path.name}.damaged"))
                if ledger is None:
                    path.unlink()
                else:
                    os.truncate(path, offset)
        return ledger

    def append(self, ledger_id: int, records: bytes) -> bool:
        """Append records to the ledger's file and fsync it; True if the file is new (fsync the directory)."""
        path = index_path(self.directory, ledger_id)
        created = not path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            view = memoryview(records)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        return created

    def sync_directory(self) -> None:
        fsync_directory(self.directory)

    def delete(self, ledger_id: int) -> None:
        index_path(self.directory, ledger_id).unlink(missing_ok=True)

    def files(self) -> list[Path]:
        return sorted(self.directory.glob(f"{FILE_PREFIX}*{SUFFIX}")) if self.directory.is_dir() else []
