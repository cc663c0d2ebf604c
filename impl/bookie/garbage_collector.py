"""Garbage collection of deleted ledgers: compare the bookie's ledgers with the metadata store.

Deleting a ledger (the BookKeeper client's `delete_ledger`, a managed ledger trimming
consumed ledgers) removes only its metadata; each bookie later notices that a ledger it
stores has no metadata any more and drops it (BookKeeper's GC thread). A ledger is
deleted only when its metadata is *certainly* gone:

- the bookie's ledgers are listed before the metadata store's: a client creates the
  metadata before its first write to any bookie, so a ledger the bookie already had is
  in the later listing unless it was deleted in between;
- each candidate is confirmed absent by reading its node (a listing walked while nodes
  move could skip one);
- any error of the metadata store aborts the round: no answer is not "deleted".
The shell then drops the ledger from its core and ledger storage; the space of an entry
log comes back once no live entry points into it (impl/bookie/ledger_storage.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from impl.metadata import layout
from impl.metadata.ledger_store import LedgerMetadataStore
from impl.metadata.store import MetadataStore


class GarbageCollector:
    """`metadata`: the store, or a function giving the current one (a bookie re-opens its
    session after an expiry)."""

    def __init__(self, metadata: MetadataStore | Callable[[], MetadataStore]) -> None:
        self._metadata = metadata

    def deleted_ledgers(self, on_bookie: Iterable[int]) -> list[int]:
        """Those of `on_bookie` (listed before this call) whose metadata is certainly gone."""
        candidates = set(on_bookie)
        if not candidates:
            return []
        store = self._metadata if isinstance(self._metadata, MetadataStore) else self._metadata()
        candidates -= set(LedgerMetadataStore(store).ledger_ids())
        return sorted(lid for lid in candidates if store.exists(layout.ledger_path(lid)) is None)
