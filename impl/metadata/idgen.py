"""Ledger ids from sequential nodes (BookKeeper's ZkLedgerIdGenerator).

To get an id: create the sequential node /ledgers/idgen/ID-, take its sequence
number as the id, delete the node again. The store's sequence counter (the parent's
cversion) never goes back, so ids are unique and increasing across every client of
one store; gaps are normal (deletes advance the counter too).
ZooKeeper's sequence counter is a signed 32-bit number; BookKeeper switches to a
second generator for longer ids, which this reference implementation does not need.
"""

from __future__ import annotations

import contextlib

from impl.metadata import layout
from impl.metadata.store import MetadataStore, NoNode


class LedgerIdGenerator:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._prepared = False

    def next_id(self) -> int:
        if not self._prepared:
            self.store.ensure_path(layout.IDGEN)
            self._prepared = True
        path = self.store.create(layout.idgen_prefix_path(), sequential=True)
        ledger_id = layout.id_from_idgen_path(path)
        # The node has served its purpose; someone cleaning up for us is fine.
        with contextlib.suppress(NoNode):
            self.store.delete(path)
        return ledger_id
