"""Performing a core's metadata change (ledger_update.UpdateMetadata) against the metadata store: the
shell side of the writer's and the recovery op's conditional writes."""

from __future__ import annotations

from impl.bookie.client.ledger_update import LedgerChange, MetadataResult, result_of, transition_for
from impl.metadata import transitions
from impl.metadata.ledger_store import LedgerMetadataStore


def apply_change(store: LedgerMetadataStore, change: LedgerChange) -> MetadataResult:
    """Shell side: run `change` through the conditional-write loop and return the cores' input.

    Store failures (connection loss, a deleted ledger) propagate: the shell decides to retry.
    """
    try:
        outcome = store.update(change.ledger_id, transition_for(change))
    except transitions.TransitionError as e:
        return result_of(change, e)
    return result_of(change, outcome)
