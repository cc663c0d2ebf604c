"""Entry logs: the append-only files that hold entry bodies (BookKeeper's EntryLogger).

Entries of all ledgers are interleaved in one current log, in arrival order; the ledger
index (impl/bookie/ledger_index.py) says where each entry is. A log is rolled when it
reaches `roll_size` and is deleted as a whole once it holds no live entry (garbage
collection); entries are never rewritten in place.

File `entrylog-<n>.log`, a sequence of records:
    u32 payload length | u32 CRC32 of payload | payload = i64 ledger | i64 entry | body
A `Location` is (log, offset of the record, record size). Appends go to an in-memory
buffer first (written out at `buffer_size`, by `flush()`, or at a roll), so the request
path does no system call per entry; `flush()` + `sync()` make them durable. Reads check
the frame, the checksum and the ids, and raise `CorruptEntryLog` on any mismatch.
Not thread-safe: ledger storage serialises calls (only `sync` may run concurrently).
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

FRAME = struct.Struct(">II")
IDS = struct.Struct(">qq")
FILE_PREFIX = "entrylog-"


class StorageError(Exception):
    """Ledger storage cannot serve or keep an entry (base of the typed storage errors)."""


class CorruptEntryLog(StorageError):
    """An entry log record does not match what the index says is there."""


# A location is (entry log id, offset of the record, record size with its frame). A plain tuple of
# ints, not a class: the bookie keeps one per stored entry, and CPython's cycle collector stops
# tracking tuples of ints, where a million tracked objects made every full collection stall the
# bookie for ~0.2 s (bench/history/bookie.md).
Location = tuple[int, int, int]


def log_path(directory: Path, log_id: int) -> Path:
    return directory / f"{FILE_PREFIX}{log_id}.log"


def log_ids(directory: Path) -> list[int]:
    return sorted(int(p.stem[len(FILE_PREFIX) :]) for p in directory.glob(f"{FILE_PREFIX}*.log"))


def record_head(ledger_id: int, entry_id: int, body: bytes) -> bytes:
    """What precedes `body` in its record (frame, then ids): the log appends both, with no joined copy."""
    ids = IDS.pack(ledger_id, entry_id)
    return FRAME.pack(len(ids) + len(body), zlib.crc32(body, zlib.crc32(ids))) + ids


def decode(record: bytes, ledger_id: int, entry_id: int) -> bytes:
    """The body of a record; raises CorruptEntryLog (saying what is wrong, not where) unless it is
    entry ledger:entry."""
    if len(record) < FRAME.size + IDS.size:
        raise CorruptEntryLog(f"record truncated to {len(record)} bytes (file shorter than its index says)")
    length, crc = FRAME.unpack_from(record)
    payload = record[FRAME.size :]
    if length != len(payload):
        raise CorruptEntryLog(f"record length {length} does not match the index ({len(payload)})")
    if zlib.crc32(payload) != crc:
        raise CorruptEntryLog("checksum mismatch (the entry log is damaged)")
    found = IDS.unpack_from(payload)
    if found != (ledger_id, entry_id):
        raise CorruptEntryLog(f"holds entry {found[0]}:{found[1]}, the index says {ledger_id}:{entry_id}")
    return payload[IDS.size :]


class EntryLogger:
    def __init__(self, directory: Path, roll_size: int = 64 * 1024 * 1024, buffer_size: int = 1024 * 1024) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.roll_size = roll_size
        self.buffer_size = buffer_size
        self._fds: dict[int, int] = {}
        for log_id in log_ids(self.directory):
            self._fds[log_id] = os.open(log_path(self.directory, log_id), os.O_RDONLY)
        # Always start a new log: a torn tail left by a crash stays behind, unreferenced.
        self.current = max(self._fds, default=-1) + 1
        self._unsynced: set[int] = set()  # logs written since the last sync
        self._unsynced_bytes = 0  # bytes written to the logs since the last take_unsynced
        self._new_files = False  # a log was created since the last sync: its name needs a directory fsync
        self._open_current()

    def _open_current(self) -> None:
        path = log_path(self.directory, self.current)
        self._fds[self.current] = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._file_size = 0  # bytes of the current log already written to the file
        self._buffer = bytearray()  # bytes of the current log not yet written
        self._new_files = True

    def add(self, ledger_id: int, entry_id: int, body: bytes) -> Location:
        head = record_head(ledger_id, entry_id, body)
        if self._file_size + len(self._buffer) >= self.roll_size:
            self._roll()
        location = (self.current, self._file_size + len(self._buffer), len(head) + len(body))
        self._buffer += head
        self._buffer += body
        if len(self._buffer) >= self.buffer_size:
            self.flush()
        return location

    def read(self, location: Location, ledger_id: int, entry_id: int) -> bytes:
        log_id, offset, size = location
        if log_id == self.current and offset >= self._file_size:
            start = offset - self._file_size
            record = bytes(self._buffer[start : start + size])
        else:
            fd = self._fds.get(log_id)
            if fd is None:
                raise CorruptEntryLog(
                    f"{log_path(self.directory, log_id)} offset {offset}: the entry log is missing (deleted or lost)"
                )
            record = os.pread(fd, size, offset)
        try:
            return decode(record, ledger_id, entry_id)
        except CorruptEntryLog as e:  # the path only for a bad record: built per read, it cost ~10% of a read
            raise CorruptEntryLog(f"{log_path(self.directory, log_id)} offset {offset}: {e}") from None

    def flush(self) -> None:
        """Write the buffer to the current log's file (not yet durable: see `sync`)."""
        if not self._buffer:
            return
        fd = self._fds[self.current]
        view = memoryview(self._buffer)
        while view:
            view = view[os.write(fd, view) :]
        view.release()
        self._file_size += len(self._buffer)
        self._unsynced_bytes += len(self._buffer)
        self._buffer = bytearray()
        self._unsynced.add(self.current)

    def _roll(self) -> None:
        self.flush()
        self.current += 1
        self._open_current()

    @property
    def unsynced_bytes(self) -> int:
        """Bytes taken since the last `take_unsynced`, buffered or written (read without the lock: a hint)."""
        return self._unsynced_bytes + len(self._buffer)

    def take_unsynced(self) -> tuple[list[int], bool]:
        """Logs written since the last call (flush first), and whether new files were created."""
        logs, new = sorted(self._unsynced), self._new_files
        self._unsynced, self._new_files, self._unsynced_bytes = set(), False, 0
        return logs, new

    def still_unsynced(self, logs: list[int], new_files: bool) -> None:
        """A sync of what `take_unsynced` returned failed: the next one must cover it again."""
        self._unsynced.update(log for log in logs if log in self._fds)
        self._new_files |= new_files

    def sync(self, logs: list[int], new_files: bool) -> None:
        """fsync these logs (and the directory when logs were created): may run outside the lock."""
        for log_id in logs:
            fd = self._fds.get(log_id)
            if fd is not None:
                os.fsync(fd)
        if new_files:
            fsync_directory(self.directory)

    def logs(self) -> list[int]:
        return sorted(self._fds)

    def delete(self, log_id: int) -> None:
        """Remove a log that holds no live entry (never the current one)."""
        if log_id == self.current:
            raise ValueError("the current entry log is still being written; roll it before deleting it")
        fd = self._fds.pop(log_id, None)
        if fd is not None:
            os.close(fd)
        log_path(self.directory, log_id).unlink(missing_ok=True)
        self._unsynced.discard(log_id)

    def close(self) -> None:
        self.flush()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
