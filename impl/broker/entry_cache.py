"""The entry cache: recently added entries, so tailing readers are served without a bookie read.

Pulsar keeps the entries of recent adds in memory per managed ledger and serves reads of them from
there; only readers far behind (catch-up reads) go to the bookies. All the managed ledgers of a broker
share one bound, Pulsar's `managedLedgerCacheSizeMB` (`EntryCacheManager`); each managed ledger has
its own `EntryCache` in it. Entries leave the cache
  - once every active reader of the topic has read past them (`evict_through`: Pulsar evicts the
    entries before the slowest active cursor's read position), so a topic whose readers keep up holds
    only what they have not read yet;
  - by size: an insertion that takes the total over the bound evicts the oldest entries of the largest
    caches first until the total is back under the watermark (Pulsar's default eviction policy, and its
    `managedLedgerCacheEvictionWatermark` of 0.9), so one topic's backlog cannot starve the others;
  - with their ledgers (trimmed or deleted).
So a backlog larger than the bound is written and read back with the cache never over the bound: the
reads of what was evicted go to the bookies and are not cached again (a catch-up reader would only
push out what tailing readers are about to read).

Only payload bytes are counted: Pulsar counts the entries' buffers the same way. One lock of the
manager guards every cache of it (an insertion of one topic evicts from another's cache).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

from impl.broker.ledger_list import Position
from impl.protocol.entry_codec import DispatchMetadata

MB = 1024 * 1024
# Pulsar's default is a fifth of the broker's direct memory (a JVM's, sized for the machine). The reference
# broker has no such pool: 64 MiB is a few seconds of 1 KiB messages at the rates it reaches, enough for
# readers that keep up, and small next to the interpreter's own footprint.
DEFAULT_CACHE_SIZE_MB = 64
EVICTION_WATERMARK = 0.9  # Pulsar's managedLedgerCacheEvictionWatermark: evict down to 90% of the bound


class EntryCacheManager:
    """The broker's entry caches under one bound of `max_bytes` (0: nothing is cached)."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_SIZE_MB * MB) -> None:
        if max_bytes < 0:
            raise ValueError(f"the entry cache size must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self.lock = threading.Lock()
        self._caches: weakref.WeakSet[EntryCache] = weakref.WeakSet()
        self.size = 0  # payload bytes held by all the caches
        self.hits = 0
        self.misses = 0
        self.evicted = 0  # entries evicted (by size or by the readers' positions), not counting deletions
        self.inserted = 0

    def new_cache(self) -> EntryCache:
        cache = EntryCache(self)
        with self.lock:
            self._caches.add(cache)
        return cache

    @property
    def entries(self) -> int:
        with self.lock:
            return sum(len(c) for c in self._caches)

    def _evict_by_size(self, incoming: int = 0) -> None:
        """Under the lock, for an insertion that takes the total over the bound: largest caches first.
        `incoming`: the inserted entry's size, held by its cache but added to the total only after
        this, so that the total is never seen over the bound (readers of `size` take no lock)."""
        target = int(self.max_bytes * EVICTION_WATERMARK)
        while self.size + incoming > target:
            largest = max(self._caches, key=lambda c: c.size, default=None)
            if largest is None or largest.size == 0:
                return
            # From the largest down to the next one's size (or until the target): few rounds of max().
            others = [c.size for c in self._caches if c is not largest]
            floor = max(max(others, default=0), largest.size - (self.size + incoming - target))
            largest._pop_oldest()  # at least one: two caches of the same size would otherwise stall
            while largest.size > floor and largest._entries:
                largest._pop_oldest()

    def stats(self) -> dict[str, int]:
        with self.lock:
            return {
                "max_bytes": self.max_bytes,
                "bytes": self.size,
                "entries": sum(len(c) for c in self._caches),
                "hits": self.hits,
                "misses": self.misses,
                "evicted": self.evicted,
                "inserted": self.inserted,
            }


class EntryCache:
    """One managed ledger's entries in its manager's bound. Entries are inserted in position order (the
    adds' order), so the oldest inserted is also the lowest position."""

    def __init__(self, manager: EntryCacheManager | None = None) -> None:
        self.manager = manager if manager is not None else EntryCacheManager()
        self._entries: OrderedDict[Position, bytes] = OrderedDict()
        # Beside an entry: what its publish read of its metadata, so a delivery does not parse it again.
        self._metadata: dict[Position, DispatchMetadata] = {}
        self.size = 0
        self.hits = 0
        self.misses = 0
        self.closed = False

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, position: Position, data: bytes) -> None:
        m = self.manager
        with m.lock:
            if self.closed or len(data) > m.max_bytes or position in self._entries:
                return
            self._entries[position] = data
            self.size += len(data)
            m.inserted += 1
            if m.size + len(data) > m.max_bytes:
                m._evict_by_size(len(data))
            m.size += len(data)

    def get(self, position: Position) -> bytes | None:
        data = self._entries.get(position)  # one dict lookup (atomic): no lock on the hot path
        if data is None:
            self.misses += 1
            self.manager.misses += 1
        else:
            self.hits += 1
            self.manager.hits += 1
        return data

    def annotate(self, position: Position, metadata: DispatchMetadata) -> None:
        """Keep `metadata` beside the cached entry at `position` (nothing if it is not cached)."""
        with self.manager.lock:
            if position in self._entries:
                self._metadata[position] = metadata

    def metadata(self, position: Position) -> DispatchMetadata | None:
        return self._metadata.get(position)  # one dict lookup (atomic), as `get`

    def _pop_oldest(self) -> None:
        """Under the manager's lock."""
        position, old = self._entries.popitem(last=False)
        self._metadata.pop(position, None)
        self.size -= len(old)
        self.manager.size -= len(old)
        self.manager.evicted += 1

    def evict_through(self, position: Position) -> int:
        """Drop the entries up to `position` (every active reader has read them); how many."""
        dropped = 0
        with self.manager.lock:
            while self._entries and next(iter(self._entries)) <= position:
                self._pop_oldest()
                dropped += 1
        return dropped

    def evict_ledgers(self, ledger_ids: set[int]) -> None:
        """Drop every entry of these ledgers (trimmed or deleted)."""
        with self.manager.lock:
            for position in [p for p in self._entries if p.ledger_id in ledger_ids]:
                n = len(self._entries.pop(position))
                self._metadata.pop(position, None)
                self.size -= n
                self.manager.size -= n

    def clear(self) -> None:
        with self.manager.lock:
            self.manager.size -= self.size
            self._entries.clear()
            self._metadata.clear()
            self.size = 0

    def close(self) -> None:
        """The managed ledger is closed (unloaded): its entries leave the bound."""
        with self.manager.lock:
            self.closed = True  # an add completing after the close is not cached (nothing would evict it)
            self.manager._caches.discard(self)
        self.clear()
