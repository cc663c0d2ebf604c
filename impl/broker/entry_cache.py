"""The entry cache: recently added entries, so tailing readers are served without a bookie read.

Pulsar keeps the entries of recent adds in memory per managed ledger and serves reads of
them from there; only readers far behind (catch-up reads) go to the bookies. This cache is
a plain data structure (no locking: the managed ledger shell guards it), bounded by the
payload bytes it holds; the oldest inserted entries go first, which for a log is the same
as least recently written.
"""

from __future__ import annotations

from collections import OrderedDict

from impl.broker.ledger_list import Position

DEFAULT_CACHE_BYTES = 16 * 1024 * 1024


class EntryCache:
    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"cache size must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Position, bytes] = OrderedDict()
        self.size = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, position: Position, data: bytes) -> None:
        if len(data) > self.max_bytes or position in self._entries:
            return
        self._entries[position] = data
        self.size += len(data)
        while self.size > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self.size -= len(old)

    def get(self, position: Position) -> bytes | None:
        data = self._entries.get(position)
        if data is None:
            self.misses += 1
        else:
            self.hits += 1
        return data

    def evict_ledgers(self, ledger_ids: set[int]) -> None:
        """Drop every entry of these ledgers (trimmed or deleted)."""
        for position in [p for p in self._entries if p.ledger_id in ledger_ids]:
            self.size -= len(self._entries.pop(position))

    def clear(self) -> None:
        self._entries.clear()
        self.size = 0
