"""CrossHair targets: the transitions applied to symbolic ledger metadata.

CrossHair cannot build a symbolic `LedgerMetadata` directly: its validating
__post_init__ formats the values (realizing them) and nearly every random shape of
nested tuples is rejected, so exploration never gets past the argument. These
targets take the fields the transitions branch on (state, stored last entry and
length, entry ids, bookie names) as symbolic scalars, build the metadata inside, and
state the protocol's properties as PEP 316 postconditions. Raising a
TransitionError is allowed (`raises:`); anything else is a counterexample.
Everything else is covered by the hypothesis properties in test_transitions.py.
"""

from __future__ import annotations

from impl.metadata.ledger import Fragment, LedgerMetadata, LedgerState

# Adopt, NoWrite, Write and TransitionError are named only inside the contracts, which CrossHair
# evaluates in this module's namespace.
from impl.metadata.transitions import (  # noqa: F401
    Adopt,
    NoWrite,
    TransitionError,
    TransitionResult,
    Write,
    ensemble_change,
    recovery_close,
    start_recovery,
    writer_close,
)

ENSEMBLE = ("a:1", "b:1", "c:1")


def strictly_increasing(fragments: tuple[Fragment, ...]) -> bool:
    return all(x.first_entry_id < y.first_entry_id for x, y in zip(fragments, fragments[1:], strict=False))


def _ledger(state: LedgerState, last_fragment_start: int, stored_last: int, stored_length: int) -> LedgerMetadata:
    fragments: tuple[Fragment, ...] = (Fragment(0, ENSEMBLE),)
    if last_fragment_start > 0:
        fragments += (Fragment(last_fragment_start, ("a:1", "d:1", "c:1")),)
    return LedgerMetadata(3, 2, 2, fragments, state, stored_last, stored_length)


def writer_close_symbolic(
    state: LedgerState, stored_last: int, stored_length: int, last: int, length: int
) -> TransitionResult:
    """A writer close never changes a CLOSED ledger, and always ends CLOSED at the writer's values.

    pre: stored_last >= -1 and stored_length >= 0
    raises: TransitionError
    post: __return__.metadata.state is LedgerState.CLOSED
    post: (__return__.metadata.last_entry_id, __return__.metadata.length) == (last, length)
    post: state is not LedgerState.CLOSED or (isinstance(__return__, NoWrite) and stored_last == last)
    """
    return writer_close(_ledger(state, 0, stored_last, stored_length), last, length)


def recovery_close_symbolic(state: LedgerState, stored_last: int, last: int, length: int) -> TransitionResult:
    """Recovery close adopts a CLOSED ledger and writes only from IN_RECOVERY.

    pre: stored_last >= -1
    raises: TransitionError
    post: __return__.metadata.state is LedgerState.CLOSED
    post: (state is LedgerState.CLOSED) == isinstance(__return__, Adopt)
    post: state is not LedgerState.CLOSED or __return__.metadata.last_entry_id == stored_last
    post: state is not LedgerState.OPEN
    """
    return recovery_close(_ledger(state, 0, stored_last, 0), last, length)


def start_recovery_symbolic(state: LedgerState, stored_last: int) -> TransitionResult:
    """No transition leaves CLOSED; only OPEN is written.

    pre: stored_last >= -1
    post: isinstance(__return__, Write) == (state is LedgerState.OPEN)
    post: state is not LedgerState.CLOSED or __return__.metadata.state is LedgerState.CLOSED
    post: __return__.metadata.last_entry_id == stored_last
    """
    return start_recovery(_ledger(state, 0, stored_last, 0))


def ensemble_change_symbolic(
    state: LedgerState, last_fragment_start: int, first_entry_id: int, failed: str, replacement: str
) -> TransitionResult:
    """Only while OPEN with the failed bookie in place; fragments stay strictly increasing.

    pre: 0 <= last_fragment_start <= 3 and first_entry_id >= 0
    raises: TransitionError
    post: state is LedgerState.OPEN and isinstance(__return__, Write)
    post: failed not in __return__.metadata.last_ensemble and replacement in __return__.metadata.last_ensemble
    post: strictly_increasing(__return__.metadata.fragments)
    post: __return__.metadata.fragments[-1].first_entry_id == first_entry_id >= last_fragment_start
    """
    return ensemble_change(_ledger(state, last_fragment_start, -1, 0), first_entry_id, failed, replacement)
