"""The bookie journal: append-only files of length-prefixed, checksummed records, group commit.

Record layout: u32 frame word | u32 checksum of payload | payload, where payload is
u8 kind | i64 ledger | i64 entry | i64 lac | u16 key length | key | body, and the frame word is
the payload length with its top bit set when the checksum is CRC32C (what this code writes: the
CPU's CRC instruction, half the cost of zlib's CRC32 per record). Without the bit it is CRC32,
which journals written before 2026-11-24 hold; replay reads both.
One writer thread takes everything queued (up to `max_batch_bytes`) and flushes it with one
synchronous write as soon as the previous flush ends, so records that arrive during a flush
share the next one (group commit) and no record ever waits for company: the queue being empty
is the flush signal. Each append's callback runs only after the flush that covers it is durable.
Files are opened with O_DSYNC, so one write() is write + fdatasync in one system call: the
writer gives up the GIL once per flush instead of twice, and getting it back from the busy
appending threads is what bounded the journal (bench/history/bookie.md). Where the platform
has no O_DSYNC the writer calls fdatasync after the write.
Files roll at `roll_size`.
Replay stops at the first torn or corrupt record of a file and reports it (never raises).

A checkpoint (impl/bookie/checkpoint.py) names a `JournalPosition`: every record before it is
in ledger storage, so restart replays from there and files wholly before it are deleted.

`UnsyncedJournal` is BookKeeper's `journalSyncData = false`, ledger.tla's `JournalSyncData = FALSE`:
no O_DSYNC, an append's callback runs once the write reached the operating system, before any
fsync, so a bookie acknowledges adds that a power loss takes away (a process crash does not: the
page cache survives it). Only the tests use it, to show what the default's fsync is for.
Fault point (tests): `power_loss_before=(ledger, entry)` makes the flush that would write that entry
a power loss instead: the current file is cut back to its last sync and the process SIGKILLs itself.
"""

from __future__ import annotations

import os
import signal
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from impl.bookie.core import JournalRecord, RecordKind
from impl.latency import LatencyBuckets

FRAME = struct.Struct(">II")
FIXED = struct.Struct(">BqqqH")
FILE_PREFIX = "journal-"
MAX_RECORD = 64 * 1024 * 1024
O_DSYNC = getattr(os, "O_DSYNC", 0)
IOV_MAX = 1024  # buffers per writev (Linux's limit); a flush takes at most this many appends
CRC32C_FLAG = 0x8000_0000  # in the frame word: the checksum is CRC32C, not CRC32
_KIND_CODE = {kind: kind.value for kind in RecordKind}  # a dict lookup is cheaper than Enum.value


def encode_record(record: JournalRecord) -> bytes:
    key, body = record.master_key, record.body
    fixed = FIXED.pack(_KIND_CODE[record.kind], record.ledger_id, record.entry_id, record.lac, len(key))
    # The CRC runs over the three parts in turn: no joined payload copy just to checksum it.
    crc = crc32c.crc32c(body, crc32c.crc32c(key, crc32c.crc32c(fixed)))
    return b"".join((FRAME.pack(CRC32C_FLAG | (FIXED.size + len(key) + len(body)), crc), fixed, key, body))


def decode_payload(payload: bytes) -> JournalRecord:
    kind, ledger_id, entry_id, lac, key_len = FIXED.unpack_from(payload)
    key_end = FIXED.size + key_len
    if key_end > len(payload):
        raise ValueError("master key runs past the record")
    return JournalRecord(RecordKind(kind), ledger_id, entry_id, payload[FIXED.size : key_end], payload[key_end:], lac)


@dataclass(frozen=True, order=True)
class JournalPosition:
    """A point in the journal: file number and byte offset in that file."""

    file_no: int
    offset: int


class JournalMissing(Exception):
    """A journal file the checkpoint needs is gone: replay cannot restore what it held."""


@dataclass(frozen=True)
class TornTail:
    """Where replay stopped: file, byte offset of the first bad record, why, and bytes ignored."""

    file: Path
    offset: int
    reason: str
    ignored_bytes: int


@dataclass
class ReplayReport:
    records: int = 0
    files: list[Path] = field(default_factory=list)
    torn: list[TornTail] = field(default_factory=list)


def read_file(path: Path, report: ReplayReport, offset: int = 0) -> Iterator[JournalRecord]:
    data = path.read_bytes()
    while offset < len(data):
        reason = None
        if len(data) - offset < FRAME.size:
            reason = "truncated frame header"
        else:
            word, crc = FRAME.unpack_from(data, offset)
            length = word & ~CRC32C_FLAG
            checksum = crc32c.crc32c if word & CRC32C_FLAG else zlib.crc32
            start = offset + FRAME.size
            if length > MAX_RECORD or start + length > len(data):
                reason = "truncated record"
            else:
                payload = data[start : start + length]
                if checksum(payload) != crc:
                    reason = "checksum mismatch"
                else:
                    try:
                        record = decode_payload(payload)
                    except (ValueError, struct.error) as exc:
                        reason = f"undecodable record: {exc}"
        if reason is not None:
            report.torn.append(TornTail(path, offset, reason, len(data) - offset))
            return
        report.records += 1
        yield record
        offset = start + length


def file_no(path: Path) -> int:
    return int(path.stem[len(FILE_PREFIX) :])


def journal_files(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"{FILE_PREFIX}*.log"), key=file_no)


def replay(
    directory: Path, report: ReplayReport | None = None, start: JournalPosition | None = None
) -> Iterator[JournalRecord]:
    """Every whole record from `start` (default: the beginning) on, in order; damage is recorded in
    `report.torn`. Raises JournalMissing if the file `start` names is gone."""
    report = report if report is not None else ReplayReport()
    files = journal_files(directory)
    if start is not None and start.offset > 0 and start.file_no not in {file_no(p) for p in files}:
        raise JournalMissing(
            f"the checkpoint says replay starts in {directory / f'{FILE_PREFIX}{start.file_no}.log'} at offset "
            f"{start.offset}, but that file is gone; restore it (entries acknowledged after the checkpoint are in it)"
        )
    for path in files:
        number = file_no(path)
        if start is not None and number < start.file_no:
            continue  # wholly before the checkpoint (left behind by a crash before its deletion)
        report.files.append(path)
        yield from read_file(path, report, start.offset if start is not None and number == start.file_no else 0)


def delete_files_before(directory: Path, position: JournalPosition) -> list[Path]:
    """Delete journal files wholly before `position` (a checkpoint covers them); returns them."""
    deleted = [p for p in journal_files(directory) if file_no(p) < position.file_no]
    for path in deleted:
        path.unlink()
    return deleted


def _holds_entry(records: tuple[JournalRecord, ...] | list[JournalRecord], entry: tuple[int, int]) -> bool:
    return any(r.kind is RecordKind.ENTRY and (r.ledger_id, r.entry_id) == entry for r in records)


class JournalClosed(Exception):
    """An append after close(): nothing was written."""


class Journal:
    """Group-committing journal writer. `append(records, callback)`; callback runs once durable."""

    _SYNC_FLAG = O_DSYNC  # every write is its own fdatasync

    def __init__(
        self,
        directory: Path,
        roll_size: int = 256 * 1024 * 1024,
        max_batch_bytes: int = 512 * 1024,
        *,
        power_loss_before: tuple[int, int] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.roll_size = roll_size
        self.max_batch_bytes = max_batch_bytes
        existing = journal_files(self.directory)
        # Always start a new file: a torn tail in the previous one stays behind the good records.
        self._file_no = file_no(existing[-1]) + 1 if existing else 0
        self._fd = self._open()
        self._written = 0
        self._synced = 0  # bytes of the current file known durable (a power loss keeps these)
        # Everything appended before this position is durable (a checkpoint may name it). UnsyncedJournal:
        # written, and durable once a checkpoint has flushed ledger storage, which holds the same entries.
        self.durable_position = JournalPosition(self._file_no, 0)
        # Fault point (tests): the append holding this (ledger, entry), and its callback once appended.
        self._power_loss_before = power_loss_before
        self._power_loss_at: Callable[[], None] | None = None
        # A plain list under a condition, not queue.Queue: the writer takes the whole queue with
        # one lock acquisition instead of one get() per record.
        self._cond = threading.Condition()
        self._queued: list[tuple[bytes, Callable[[], None]]] = []
        self._closing = False
        self.flushes = 0
        self.flushed_bytes = 0
        self.sync_latency = LatencyBuckets()  # one write + fdatasync, for /metrics
        self._thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)
        self._thread.start()

    def _open(self) -> int:
        path = self.directory / f"{FILE_PREFIX}{self._file_no}.log"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | self._SYNC_FLAG, 0o644)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the new file's name must survive a crash too
        finally:
            os.close(dir_fd)
        return fd

    def append(self, records: tuple[JournalRecord, ...] | list[JournalRecord], callback: Callable[[], None]) -> None:
        data = b"".join([encode_record(r) for r in records])
        with self._cond:
            if self._closing:
                raise JournalClosed(f"the journal in {self.directory} is closed; nothing was written")
            if (
                self._power_loss_before is not None
                and self._power_loss_at is None
                and _holds_entry(records, self._power_loss_before)
            ):
                self._power_loss_at = callback
            self._queued.append((data, callback))
            if len(self._queued) == 1:
                self._cond.notify()  # the writer only waits when the queue is empty

    def close(self) -> None:
        """Flush everything appended so far, then stop the writer."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
        self._seal()
        os.close(self._fd)

    def _take(self) -> list[tuple[bytes, Callable[[], None]]]:
        """Wait for records; take the queue's head up to `max_batch_bytes` (at least one record)."""
        with self._cond:
            while not self._queued and not self._closing:
                self._cond.wait()
            size, cut = 0, 0
            for data, _ in self._queued:
                if cut and (size + len(data) > self.max_batch_bytes or cut == IOV_MAX):
                    break
                size += len(data)
                cut += 1
            batch = self._queued[:cut]
            del self._queued[:cut]
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                return  # closing, and everything appended before close() is flushed
            self._flush(batch)

    def _flush(self, batch: list[tuple[bytes, Callable[[], None]]]) -> None:
        if self._power_loss_at is not None and any(callback is self._power_loss_at for _, callback in batch):
            self._lose_power()
        parts = [d for d, _ in batch]
        size = sum(map(len, parts))
        started = time.monotonic()
        # One writev of the appends as they are: no joined copy of up to max_batch_bytes under the GIL.
        written = os.writev(self._fd, parts)
        if written < size:  # a short write (rare): the rest goes out as one more write
            view = memoryview(b"".join(parts))[written:]
            while view:
                view = view[os.write(self._fd, view) :]
        self._written += size
        self._sync(batch)
        self.sync_latency.record((time.monotonic() - started) * 1000)
        self.flushes += 1
        self.flushed_bytes += size
        self.durable_position = JournalPosition(self._file_no, self._written)
        for _, callback in batch:
            callback()
        if self._written >= self.roll_size:
            self._seal()
            os.close(self._fd)
            self._file_no += 1
            self._fd = self._open()
            self._written = self._synced = 0
            self.durable_position = JournalPosition(self._file_no, 0)

    def _sync(self, batch: list[tuple[bytes, Callable[[], None]]]) -> None:
        """After a flush's write, before its callbacks: make it durable (with O_DSYNC the write was)."""
        if not O_DSYNC:
            os.fdatasync(self._fd)
        self._synced = self._written

    def _seal(self) -> None:
        """Before the current file is closed (a roll, close()): everything in it durable (already is)."""

    def _lose_power(self) -> None:
        """The fault point: a power loss now. What the file holds past its last sync is gone (what only the
        page cache held); the records of this flush never reach it; the process dies before any callback."""
        os.ftruncate(self._fd, self._synced)
        os.kill(os.getpid(), signal.SIGKILL)
        threading.Event().wait()  # SIGKILL is on its way: write nothing more


class UnsyncedJournal(Journal):
    """BookKeeper's `journalSyncData = false`: an append's callback runs once its write reached the operating
    system, before any fsync, so the bookie acknowledges an add that a power loss takes away. A file is synced
    when it rolls or the journal closes, and a flush holding a fence record is synced before its callbacks
    (a fence lost in a crash would let the old writer in again; ledger.tla's JournalSyncData = FALSE syncs
    fences too). Never pulsar-ref's configuration: the tests use it to show what the fsync is for."""

    _SYNC_FLAG = 0

    def __init__(
        self,
        directory: Path,
        roll_size: int = 256 * 1024 * 1024,
        max_batch_bytes: int = 512 * 1024,
        *,
        power_loss_before: tuple[int, int] | None = None,
    ) -> None:
        self._sync_before: set[Callable[[], None]] = set()  # callbacks of appends with a fence record
        super().__init__(directory, roll_size, max_batch_bytes, power_loss_before=power_loss_before)

    def append(self, records: tuple[JournalRecord, ...] | list[JournalRecord], callback: Callable[[], None]) -> None:
        if any(r.kind is RecordKind.FENCE for r in records):
            with self._cond:
                self._sync_before.add(callback)
        super().append(records, callback)

    def _sync(self, batch: list[tuple[bytes, Callable[[], None]]]) -> None:
        with self._cond:
            fence = [callback for _, callback in batch if callback in self._sync_before]
            self._sync_before.difference_update(fence)
        if fence:
            os.fdatasync(self._fd)  # and with it every record written before
            self._synced = self._written

    def _seal(self) -> None:
        os.fdatasync(self._fd)
        self._synced = self._written
