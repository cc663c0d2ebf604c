"""The ledger metadata state transitions, as pure functions (docs/protocol-rules.md).

Each function takes the metadata just read and returns what to do about it:
  - `Write(metadata)`: conditionally write this new metadata with the version read;
  - `NoWrite(metadata, reason)`: the goal already holds; nothing to write;
  - `Adopt(metadata)`: someone else closed the ledger; take their CLOSED metadata.
or raises a `TransitionError` naming the protocol error. `ledger_store.update`
applies them in the read-modify-conditional-write loop: after a version conflict it
re-reads and calls the same function again, so every precondition is re-checked on
fresh metadata.

The PEP 316 contracts in the docstrings (`post:`, `raises:`) are checked by CrossHair
(tests/ledger_metadata/test_transition_contracts.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from impl.metadata.ledger import NO_ENTRY, BookieId, DigestType, Fragment, LedgerMetadata, LedgerState

# --- results ------------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """Write `metadata` with the version that was read."""

    metadata: LedgerMetadata


@dataclass(frozen=True)
class NoWrite:
    """The transition's goal already holds on `metadata`; nothing is written."""

    metadata: LedgerMetadata
    reason: str


@dataclass(frozen=True)
class Adopt:
    """Another party already CLOSED the ledger: `metadata` is the outcome to use."""

    metadata: LedgerMetadata


TransitionResult = Write | NoWrite | Adopt
Transition = Callable[[LedgerMetadata], TransitionResult]


# --- errors ---------------------------------------------------------------------------


class TransitionError(Exception):
    """A transition's precondition does not hold. `code` is the protocol (BookKeeper) error name."""

    code = "TransitionError"

    def __init__(self, message: str, metadata: LedgerMetadata | None = None) -> None:
        super().__init__(message)
        self.metadata = metadata  # the metadata the precondition was checked on, if any
        self.version: int | None = None  # its store version, when a conditional-write loop checked it


class LedgerClosed(TransitionError):
    code = "LedgerClosedException"


class LedgerFenced(TransitionError):
    """A writer found the ledger IN_RECOVERY: a recoverer has taken it over."""

    code = "LedgerFencedException"


class MetadataVersionConflict(TransitionError):
    """The stored metadata contradicts the writer's view (e.g. CLOSED at another entry)."""

    code = "MetadataVersionException"


class EnsembleChanged(TransitionError):
    """The bookie to replace is no longer in the last ensemble (someone else changed it)."""

    code = "EnsembleChangedException"


class NotInRecovery(TransitionError):
    """A recovery close found the ledger OPEN: recovery was never started (or was undone)."""

    code = "IllegalOpException"


class InvalidTransition(TransitionError):
    """The arguments would build impossible metadata (bad quorums, entry ids, ensembles)."""

    code = "IncorrectParameterException"


def _build(make: Callable[[], LedgerMetadata], what: str) -> LedgerMetadata:
    try:
        return make()
    except ValueError as e:
        raise InvalidTransition(f"{what}: {e}") from e


# --- transitions ----------------------------------------------------------------------


def create(
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    ensemble: tuple[BookieId, ...],
    digest_type: DigestType = DigestType.CRC32C,
    password: bytes = b"",
    ctime: int = 0,
    custom_metadata: Mapping[str, bytes] | None = None,
) -> LedgerMetadata:
    """A new OPEN ledger: one fragment at entry 0 on `ensemble`, no entries yet."""
    return _build(
        lambda: LedgerMetadata(
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            fragments=(Fragment(0, tuple(ensemble)),),
            state=LedgerState.OPEN,
            last_entry_id=NO_ENTRY,
            length=0,
            digest_type=digest_type,
            password=password,
            ctime=ctime,
            custom_metadata=dict(custom_metadata or {}),
        ),
        "cannot create the ledger",
    )


def _refuse_unless_open(current: LedgerMetadata, action: str) -> None:
    if current.state is LedgerState.CLOSED:
        raise LedgerClosed(
            f"cannot {action}: the ledger is CLOSED at entry {current.last_entry_id}; stop writing", current
        )
    if current.state is LedgerState.IN_RECOVERY:
        raise LedgerFenced(f"cannot {action}: the ledger is IN_RECOVERY (fenced by a recoverer); stop writing", current)


def ensemble_change(
    current: LedgerMetadata, first_entry_id: int, failed: BookieId, replacement: BookieId
) -> TransitionResult:
    """Replace `failed` by `replacement` from `first_entry_id` (the writer's LAC+1) on.

    Only while OPEN and while `failed` is still in the last ensemble. A change at the
    first entry of the last fragment replaces that fragment (nothing was acknowledged
    on it yet); otherwise a new fragment is appended.

    raises: TransitionError
    post: current.state is LedgerState.OPEN
    post: isinstance(__return__, Write)
    post: __return__.metadata.state is LedgerState.OPEN
    post: replacement in __return__.metadata.last_ensemble and failed not in __return__.metadata.last_ensemble
    post: __return__.metadata.fragments[-1].first_entry_id == first_entry_id
    post: __return__.metadata.fragments[:-1] == tuple(f for f in current.fragments if f.first_entry_id < first_entry_id)
    """
    _refuse_unless_open(current, f"replace bookie {failed}")
    last = current.fragments[-1]
    if failed not in last.ensemble:
        raise EnsembleChanged(
            f"bookie {failed} is no longer in the last ensemble {list(last.ensemble)}; "
            "re-read the metadata and retry the failed adds on the current ensemble",
            current,
        )
    if replacement in last.ensemble:
        raise InvalidTransition(
            f"replacement bookie {replacement} is already in the ensemble {list(last.ensemble)}; choose another",
            current,
        )
    if first_entry_id < last.first_entry_id:
        raise InvalidTransition(
            f"ensemble change at entry {first_entry_id} would precede the last fragment "
            f"(starting at {last.first_entry_id}); ensemble changes start at the writer's LAC+1",
            current,
        )
    new_ensemble = tuple(replacement if bookie == failed else bookie for bookie in last.ensemble)
    kept = current.fragments[:-1] if first_entry_id == last.first_entry_id else current.fragments
    fragments = (*kept, Fragment(first_entry_id, new_ensemble))
    return Write(_build(lambda: dataclasses.replace(current, fragments=fragments), "invalid ensemble change"))


def start_recovery(current: LedgerMetadata) -> TransitionResult:
    """OPEN -> IN_RECOVERY (this is what fences the writer at the metadata level).

    Already IN_RECOVERY: proceed without a write (another recoverer may be running;
    the bookie fencing and the final conditional close decide). CLOSED: nothing to
    recover, the last entry is known.

    post: __return__.metadata.state is not LedgerState.OPEN
    post: (current.state is LedgerState.OPEN) == isinstance(__return__, Write)
    post: __return__.metadata.last_entry_id == current.last_entry_id
    post: __return__.metadata.fragments == current.fragments
    """
    if current.state is LedgerState.CLOSED:
        return NoWrite(current, f"the ledger is already CLOSED at entry {current.last_entry_id}")
    if current.state is LedgerState.IN_RECOVERY:
        return NoWrite(current, "the ledger is already IN_RECOVERY")
    return Write(dataclasses.replace(current, state=LedgerState.IN_RECOVERY))


def writer_close(current: LedgerMetadata, last_entry_id: int, length: int) -> TransitionResult:
    """The writer closes with its LAC and length.

    Not CLOSED (OPEN, and also IN_RECOVERY): write CLOSED. Already CLOSED with the same
    last entry and length: success without a write. CLOSED with other values: the
    writer's view is stale (a recoverer closed it elsewhere): MetadataVersionConflict.

    raises: TransitionError
    post: __return__.metadata.state is LedgerState.CLOSED
    post: __return__.metadata.last_entry_id == last_entry_id and __return__.metadata.length == length
    post: current.state is not LedgerState.CLOSED or __return__.metadata == current
    post: isinstance(__return__, Write) == (current.state is not LedgerState.CLOSED)
    """
    if last_entry_id < NO_ENTRY or length < 0:
        raise InvalidTransition(
            f"cannot close at last entry {last_entry_id} with length {length}; need last entry >= -1, length >= 0",
            current,
        )
    if current.state is LedgerState.CLOSED:
        if current.last_entry_id == last_entry_id and current.length == length:
            return NoWrite(current, "already CLOSED with the same last entry and length")
        raise MetadataVersionConflict(
            f"the ledger is already CLOSED at entry {current.last_entry_id} (length {current.length}), "
            f"not at {last_entry_id} (length {length}); it was recovered by someone else",
            current,
        )
    return Write(dataclasses.replace(current, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length))


def recovery_close(
    current: LedgerMetadata,
    last_entry_id: int,
    length: int,
    fragments: tuple[Fragment, ...] | None = None,
) -> TransitionResult:
    """IN_RECOVERY -> CLOSED with the recovered last entry and length.

    `fragments`: the fragments after the ensemble changes made during write-back
    (they stay local until this close); None keeps the stored ones. If the ledger is
    already CLOSED, someone else finished first: adopt their metadata.

    raises: TransitionError
    post: __return__.metadata.state is LedgerState.CLOSED
    post: current.state is not LedgerState.CLOSED or (isinstance(__return__, Adopt) and __return__.metadata == current)
    post: current.state is not LedgerState.IN_RECOVERY or __return__.metadata.last_entry_id == last_entry_id
    """
    if current.state is LedgerState.CLOSED:
        return Adopt(current)
    if current.state is LedgerState.OPEN:
        raise NotInRecovery(
            "cannot close the ledger from recovery: it is OPEN, recovery was not started; "
            "start recovery (OPEN -> IN_RECOVERY) first",
            current,
        )
    if last_entry_id < NO_ENTRY or length < 0:
        raise InvalidTransition(
            f"cannot close at last entry {last_entry_id} with length {length}; need last entry >= -1, length >= 0",
            current,
        )
    new_fragments = current.fragments if fragments is None else tuple(fragments)
    return Write(
        _build(
            lambda: dataclasses.replace(
                current,
                state=LedgerState.CLOSED,
                last_entry_id=last_entry_id,
                length=length,
                fragments=new_fragments,
            ),
            "invalid recovery close",
        )
    )
