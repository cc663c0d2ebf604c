"""The offloader interface, as Pulsar's LedgerOffloader: offload, readOffloaded, deleteOffloaded.

An offloader copies a closed ledger to a tiered store under a fresh uid (one object per attempt, so a
failed or abandoned attempt never overwrites a recorded one), reads it back, and deletes it. It decides
nothing: when to offload, when the offload counts (recorded in the ledger list by conditional write)
and when the bookie copy may go are the storage lifecycle core's (impl/broker/storage_lifecycle.py) and
the managed ledger's business.

`BlobOffloader` does the object format (format.py) over four primitives that each store implements:
put an object from chunks, the object's size, a byte range of it, delete it.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from impl.broker.offload import format as fmt
from impl.broker.offload.errors import OffloadedLedgerCorrupt, OffloadError

READ_BATCH = 256  # entries read from the bookies per request while offloading


class SourceLedger(Protocol):
    """A closed ledger, as the offloader reads it (from the bookies)."""

    ledger_id: int
    last_entry_id: int

    def read(self, first: int, last: int) -> Sequence[tuple[int, bytes]]: ...


class OffloadedLedger:
    """readOffloaded's handle: the trailer and index read once, entries by byte ranges."""

    def __init__(self, offloader: BlobOffloader, key: str, trailer: fmt.Trailer, index: tuple[fmt.IndexEntry, ...]):
        self._offloader = offloader
        self.key = key
        self.ledger_id = trailer.ledger_id
        self.last_entry_id = trailer.last_entry_id
        self.length = trailer.length
        self._index = index

    def read(self, first: int, last: int) -> list[tuple[int, bytes]]:
        """Entries first..last as (entry id, payload)."""
        if not 0 <= first <= last <= self.last_entry_id:
            raise OffloadError(
                f"offloaded ledger {self.ledger_id}: entries {first}..{last} asked, it has 0..{self.last_entry_id}"
            )
        start = self._index[first].offset
        end = self._index[last].offset + self._index[last].length
        raw = self._offloader._get_range(self.key, start, end) if end > start else b""
        return fmt.split_entries(raw, self._index, first, last, self.key)


class LedgerOffloader(abc.ABC):
    """Pulsar's LedgerOffloader. `driver_name` and `driver_metadata()` go into the ledger list's offload
    context, so that any broker can read the ledger back (create_offloader in registry.py)."""

    driver_name: str

    @abc.abstractmethod
    def driver_metadata(self) -> dict[str, str]: ...

    @abc.abstractmethod
    def offload(self, ledger: SourceLedger, uid: str, extra_metadata: Mapping[str, str]) -> None:
        """Copy every entry of the closed `ledger` to the store under `uid`; OffloadError (nothing usable
        written: a partial attempt leaves no object, or one nobody records) if it cannot."""

    @abc.abstractmethod
    def read_offloaded(self, ledger_id: int, uid: str) -> OffloadedLedger: ...

    @abc.abstractmethod
    def delete_offloaded(self, ledger_id: int, uid: str) -> None:
        """Delete the object (absent already: done)."""

    def describe(self) -> str:
        return f"{self.driver_name} {self.driver_metadata()}"

    def close(self) -> None:  # noqa: B027 - optional: most offloaders hold nothing to release
        """Release clients (nothing to do by default)."""


class BlobOffloader(LedgerOffloader):
    """The object format over a store's primitives."""

    @abc.abstractmethod
    def _put(self, key: str, chunks: Iterator[bytes]) -> None:
        """Store the object from `chunks`; it appears whole or not at all."""

    @abc.abstractmethod
    def _size(self, key: str) -> int:
        """The object's size (OffloadedLedgerNotFound if absent)."""

    @abc.abstractmethod
    def _get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes start..end-1 of the object."""

    @abc.abstractmethod
    def _delete(self, key: str) -> None: ...

    def offload(self, ledger: SourceLedger, uid: str, extra_metadata: Mapping[str, str]) -> None:
        if ledger.last_entry_id < 0:
            raise OffloadError(f"ledger {ledger.ledger_id} is empty: nothing to offload")
        self._put(fmt.object_key(ledger.ledger_id, uid), self._chunks(ledger))

    @staticmethod
    def _chunks(ledger: SourceLedger) -> Iterator[bytes]:
        writer = fmt.ObjectWriter(ledger.ledger_id)
        first = 0
        while first <= ledger.last_entry_id:
            last = min(first + READ_BATCH - 1, ledger.last_entry_id)
            entries = ledger.read(first, last)
            if len(entries) != last - first + 1:
                raise OffloadError(f"ledger {ledger.ledger_id}: read {len(entries)} entries of {first}..{last}")
            for entry_id, payload in entries:
                yield writer.add(entry_id, payload)
            first = last + 1
        yield writer.finish()

    def read_offloaded(self, ledger_id: int, uid: str) -> OffloadedLedger:
        key = fmt.object_key(ledger_id, uid)
        size = self._size(key)
        if size < fmt.TRAILER.size:
            raise OffloadedLedgerCorrupt(f"offloaded object {key}: {size} bytes, too short for an offloaded ledger")
        trailer = fmt.Trailer.decode(self._get_range(key, size - fmt.TRAILER.size, size), key)
        if trailer.ledger_id != ledger_id or trailer.index_offset + trailer.index_length + fmt.TRAILER.size != size:
            raise OffloadedLedgerCorrupt(f"offloaded object {key}: its trailer does not describe ledger {ledger_id}")
        raw = self._get_range(key, trailer.index_offset, trailer.index_offset + trailer.index_length)
        return OffloadedLedger(self, key, trailer, fmt.decode_index(raw, trailer, key))

    def delete_offloaded(self, ledger_id: int, uid: str) -> None:
        self._delete(fmt.object_key(ledger_id, uid))
