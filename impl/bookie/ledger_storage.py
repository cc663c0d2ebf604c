"""Ledger storage: entry logs + ledger index + read cache (BookKeeper's interleaved ledger storage).

The write path of a bookie is the journal; this is its read path and long-term home.
`put()` appends an entry to the current entry log's buffer and remembers its location;
`read()` serves from the read cache (recently written or read entries), the entry log's
buffer, or the file. Nothing here waits for the journal, and no fsync happens under the
lock that reads take: `checkpoint()` flushes the entry logs, fsyncs them, and only then
appends the new locations and ledger states to the index files (fsynced too), so an index
never points at data that might not be on disk. The caller (the bookie shell) writes the
checkpoint mark after that. Garbage collection: `delete_ledger()` records the ledger among the
deleted ones (`deleted_ledgers()`, which the bookie refuses adds to) and drops its index,
`collect_entry_logs()` deletes every rolled entry log that no live entry points into.

Thread safety: one internal lock; `checkpoint`, `delete_ledger` and `collect_entry_logs` must
come from one maintenance thread (the shell's), `put` and `read` from any thread.
"""

from __future__ import annotations

import os
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from impl.bookie.entry_log import EntryLogger, Location, StorageError, log_path
from impl.bookie.ledger_index import (
    IndexDamage,
    IndexedLedger,
    LedgerIndex,
    LedgerMeta,
    locations_record,
    master_key_record,
    state_record,
)

DELETED_LEDGERS = "deleted-ledgers"  # one garbage-collected ledger id per line, appended and fsynced


class EntryNotStored(StorageError):
    """The core says the entry is stored, ledger storage has no location for it."""


class ReadCache:
    """Least-recently-used entry bodies, bounded in bytes."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.size = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[int, int], bytes] = OrderedDict()

    def get(self, key: tuple[int, int]) -> bytes | None:
        body = self._entries.get(key)
        if body is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(key)
        return body

    def put(self, key: tuple[int, int], body: bytes) -> None:
        if len(body) > self.capacity:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= len(old)
        self._entries[key] = body
        self.size += len(body)
        while self.size > self.capacity:
            _, evicted = self._entries.popitem(last=False)
            self.size -= len(evicted)

    def discard_ledger(self, ledger_id: int) -> None:
        for key in [k for k in self._entries if k[0] == ledger_id]:
            self.size -= len(self._entries.pop(key))


@dataclass
class StorageReport:
    """What opening the storage found: index damage, and locations into entry logs that are gone."""

    index_damage: list[IndexDamage] = field(default_factory=list)


@dataclass(frozen=True)
class CheckpointStats:
    entry_logs_synced: int
    index_files_written: int


class LedgerStorage:
    def __init__(
        self,
        directory: Path,
        entry_log_size: int = 64 * 1024 * 1024,
        read_cache_bytes: int = 16 * 1024 * 1024,
        readonly: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.report = StorageReport()
        self.index = LedgerIndex(self.directory / "index", readonly=readonly)
        loaded = self.index.load(self.report.index_damage)
        self.entry_logger: EntryLogger | None = None if readonly else EntryLogger(self.directory, entry_log_size)
        self.cache = ReadCache(read_cache_bytes)
        self._lock = threading.Lock()
        self._locations: dict[int, dict[int, Location]] = {lid: ledger.locations for lid, ledger in loaded.items()}
        self._persisted: dict[int, LedgerMeta] = {lid: ledger.meta for lid, ledger in loaded.items()}
        self._dirty: dict[int, list[tuple[int, Location]]] = {}  # locations not yet in the index files
        self._live: Counter[int] = Counter()  # entry log -> entries the index points into it
        for locations in self._locations.values():
            self._live.update(log_id for log_id, _, _ in locations.values())

    # --- what a restart loads ---------------------------------------------------------------
    def ledgers(self) -> dict[int, IndexedLedger]:
        """Every indexed ledger with its checkpointed state and entry locations."""
        with self._lock:
            return {lid: IndexedLedger(self._persisted[lid], dict(self._locations[lid])) for lid in self._persisted}

    def counts(self) -> tuple[int, int]:
        """(ledgers, entries) stored here, for /metrics."""
        with self._lock:
            return len(self._locations), sum(len(locations) for locations in self._locations.values())

    def missing_entries(self) -> list[tuple[int, int, int]]:
        """(ledger, entry, entry log) of indexed entries whose entry log file is gone."""
        with self._lock:
            present = {log for log in self._live if log_path(self.directory, log).exists()}
            return [
                (lid, eid, log_id)
                for lid, locations in sorted(self._locations.items())
                for eid, (log_id, _, _) in sorted(locations.items())
                if log_id not in present
            ]

    # --- request path ---------------------------------------------------------------------------
    def put(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        assert self.entry_logger is not None, "ledger storage opened read-only"
        with self._lock:
            location = self.entry_logger.add(ledger_id, entry_id, body)
            old = self._locations.setdefault(ledger_id, {}).get(entry_id)
            if old is not None:
                self._live[old[0]] -= 1  # a recovery add or a replay wrote it again
            self._locations[ledger_id][entry_id] = location
            self._live[location[0]] += 1
            self._dirty.setdefault(ledger_id, []).append((entry_id, location))
            self.cache.put((ledger_id, entry_id), body)  # tailing readers want what was just written

    def read(self, ledger_id: int, entry_id: int) -> bytes:
        """The entry's body; raises EntryNotStored or CorruptEntryLog."""
        assert self.entry_logger is not None, "ledger storage opened read-only"
        with self._lock:
            body = self.cache.get((ledger_id, entry_id))
            if body is not None:
                return body
            location = self._locations.get(ledger_id, {}).get(entry_id)
            if location is None:
                raise EntryNotStored(f"entry {ledger_id}:{entry_id} is not in ledger storage {self.directory}")
            body = self.entry_logger.read(location, ledger_id, entry_id)
            self.cache.put((ledger_id, entry_id), body)
            return body

    # --- maintenance thread --------------------------------------------------------------------
    @property
    def unsynced_bytes(self) -> int:
        """Bytes the entry logs took since their last fsync."""
        return self.entry_logger.unsynced_bytes if self.entry_logger is not None else 0

    def sync_entry_logs(self) -> int:
        """fsync what the entry logs hold so far, the fsync outside the lock; returns how many logs. Alone, it
        leaves the index to the next checkpoint (BookKeeper's flushEntrylogBytes). Run by the thread that
        checkpoints, never alongside a checkpoint."""
        assert self.entry_logger is not None, "ledger storage opened read-only"
        with self._lock:
            self.entry_logger.flush()
            logs, new_logs = self.entry_logger.take_unsynced()
        try:
            self.entry_logger.sync(logs, new_logs)
        except BaseException:
            with self._lock:
                self.entry_logger.still_unsynced(logs, new_logs)
            raise
        return len(logs)

    def checkpoint(self, ledgers: dict[int, LedgerMeta]) -> CheckpointStats:
        """Make every entry put so far, and `ledgers`' states, durable in entry logs and index.

        `ledgers` is the core's view of every ledger it knows. A ledger's index file starts with
        its master key, so locations of a ledger not in `ledgers` (put after the snapshot) wait
        for the next checkpoint. On failure the locations taken are put back for the next attempt.
        """
        with self._lock:
            taken = {lid: self._dirty.pop(lid) for lid in ledgers if lid in self._dirty}
        try:
            # Taken before the sync, so the sync covers every location taken: the index never points
            # at entry log bytes that are not durable.
            logs = self.sync_entry_logs()
            written: dict[int, LedgerMeta] = {}
            new_files = False
            for lid, meta in ledgers.items():
                persisted = self._persisted.get(lid)
                records = b"" if persisted is not None else master_key_record(meta.master_key)
                if meta != (persisted or LedgerMeta(meta.master_key)):
                    records += state_record(meta)
                if lid in taken:
                    records += locations_record(taken[lid])
                if records:
                    new_files |= self.index.append(lid, records)
                    written[lid] = meta
            if new_files:
                self.index.sync_directory()
        except BaseException:
            with self._lock:
                for lid, locations in taken.items():
                    if lid in self._locations:  # not garbage-collected meanwhile
                        self._dirty[lid] = locations + self._dirty.get(lid, [])
            raise  # the entry logs' part was put back by sync_entry_logs, or is durable
        with self._lock:
            self._persisted.update(written)
        return CheckpointStats(logs, len(written))

    def delete_ledger(self, ledger_id: int) -> int:
        """Forget a garbage-collected ledger and delete its index file; returns its entry count. The ledger's
        id is recorded first, durably, among the deleted ones (`deleted_ledgers`): a restarted bookie keeps
        refusing its adds (BookieCore.deleted)."""
        self._record_deleted(ledger_id)
        with self._lock:
            locations = self._locations.pop(ledger_id, {})
            for log_id, _, _ in locations.values():
                self._live[log_id] -= 1
            self._dirty.pop(ledger_id, None)
            self._persisted.pop(ledger_id, None)
            self.cache.discard_ledger(ledger_id)
            self.index.delete(ledger_id)
            return len(locations)

    def _record_deleted(self, ledger_id: int) -> None:
        with open(self.directory / DELETED_LEDGERS, "a", encoding="ascii") as f:
            f.write(f"{ledger_id}\n")
            f.flush()
            os.fsync(f.fileno())

    def deleted_ledgers(self) -> set[int]:
        """The ids of every ledger garbage-collected here (a torn last line, from a crash, is ignored:
        its ledger is still indexed, and the next collection deletes it again)."""
        try:
            text = (self.directory / DELETED_LEDGERS).read_text(encoding="ascii")
        except FileNotFoundError:
            return set()
        return {int(line) for line in text.split("\n")[:-1] if line.isdigit()}

    def collect_entry_logs(self) -> list[int]:
        """Delete rolled entry logs no indexed entry points into. Call right after a checkpoint."""
        assert self.entry_logger is not None, "ledger storage opened read-only"
        with self._lock:
            dead = [
                log for log in self.entry_logger.logs() if log != self.entry_logger.current and self._live[log] <= 0
            ]
            for log in dead:
                self.entry_logger.delete(log)
                self._live.pop(log, None)
            return dead

    # --- inspection -----------------------------------------------------------------------------
    def entry_log_usage(self) -> list[tuple[int, int, int]]:
        """(entry log, bytes, live entries) of every entry log file."""
        with self._lock:
            out = []
            for path in sorted(self.directory.glob("entrylog-*.log"), key=lambda p: int(p.stem.split("-")[1])):
                log = int(path.stem.split("-")[1])
                out.append((log, path.stat().st_size, self._live.get(log, 0)))
            return out

    def close(self) -> None:
        if self.entry_logger is not None:
            with self._lock:
                self.entry_logger.close()
