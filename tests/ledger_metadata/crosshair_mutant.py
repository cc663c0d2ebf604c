"""A deliberately wrong contract, to show that the CrossHair run can fail (negative control)."""

from __future__ import annotations

from impl.metadata.ledger import Fragment, LedgerMetadata, LedgerState
from impl.metadata.transitions import TransitionError, TransitionResult, writer_close  # noqa: F401 (contract)


def writer_close_claimed_to_keep_the_last_entry(state: LedgerState, stored_last: int, last: int) -> TransitionResult:
    """
    pre: stored_last >= -1
    raises: TransitionError
    post: __return__.metadata.last_entry_id == stored_last
    """
    return writer_close(LedgerMetadata(1, 1, 1, (Fragment(0, ("a:1",)),), state, stored_last), last, 0)
