"""Ledger ids from sequential nodes (BookKeeper's ZkLedgerIdGenerator).

To get an id: create the ephemeral sequential node /ledgers/idgen/ID-, take its
sequence number as the id, delete the node again (being ephemeral, it also vanishes
with the session if the delete never happens). The store's sequence counter (the
parent's cversion) never goes back, so ids are unique and increasing across every
client of one store; gaps are normal (deletes advance the counter too).
ZooKeeper's sequence counter is a signed 32-bit number: like BookKeeper, an id at or
above Integer.MAX_VALUE is refused (`LedgerIdOverflow`); BookKeeper's second
generator for longer ids is not needed by this reference implementation.
"""

from __future__ import annotations

import contextlib

from impl.metadata import layout
from impl.metadata.store import MetadataError, MetadataStore, NoNode


class LedgerIdOverflow(MetadataError):
    code = "LedgerIdOverflowException"


class LedgerIdGenerator:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._prepared = False

    def next_id(self) -> int:
        if not self._prepared:
            self.store.ensure_path(layout.IDGEN)
            self._prepared = True
        path = self.store.create(layout.idgen_prefix_path(), ephemeral=True, sequential=True)
        ledger_id = layout.id_from_idgen_path(path)
        # The node has served its purpose; someone cleaning up for us is fine.
        with contextlib.suppress(NoNode):
            self.store.delete(path)
        if ledger_id >= layout.LEGACY_ID_LIMIT:
            raise LedgerIdOverflow(
                f"the id generator at {layout.IDGEN} reached {ledger_id}, past 2^31-2; "
                "ledger ids from sequential nodes are exhausted on this store",
                path,
            )
        return ledger_id
