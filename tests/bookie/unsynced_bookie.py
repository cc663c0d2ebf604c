"""`python -m tests.bookie.unsynced_bookie ARGS`: `pulsar-ref bookie ARGS` with BookKeeper's
`journalSyncData = false` (impl/bookie/journal.py's UnsyncedJournal: adds acknowledged once written,
before any fsync), the configuration ledger.tla's `JournalSyncData = FALSE` models.

pulsar-ref offers no option for it: it is run only by tests/bookie/test_journal_sync.py, to show on a
real process what the default's fsync before the acknowledgement is for.
"""

from __future__ import annotations

import sys
from typing import Any

from impl.bookie import server
from pulsar_ref.commands import bookie


class UnsyncedBookie(server.Bookie):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, journal_sync_data=False, **kwargs)


if __name__ == "__main__":
    server.Bookie = UnsyncedBookie  # type: ignore[misc]  # what `pulsar-ref bookie` constructs
    sys.exit(bookie.main(sys.argv[1:], "unsynced_bookie"))
