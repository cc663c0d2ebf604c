"""Metadata updates the client cores ask for, and the results the shell feeds back.

A core never checks a transition's precondition itself: it names the transition
(impl.metadata.transitions: start recovery, ensemble change, writer close, recovery
close) in an `UpdateMetadata` output; the shell runs it through the conditional-write
loop of impl.metadata.ledger_store and returns a `MetadataResult` (`apply_change`, in the
shell module impl/bookie/client/metadata_writes.py, does exactly that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from impl.metadata import transitions
from impl.metadata.ledger import BookieId, Fragment, LedgerMetadata

if TYPE_CHECKING:
    from impl.metadata.ledger_store import UpdateOutcome


@dataclass(frozen=True)
class StartRecovery:
    """OPEN -> IN_RECOVERY."""

    ledger_id: int


@dataclass(frozen=True)
class EnsembleChange:
    """A new fragment at first_entry_id (LAC+1) with `failed` replaced by `replacement`; only while OPEN."""

    ledger_id: int
    first_entry_id: int
    failed: BookieId
    replacement: BookieId


@dataclass(frozen=True)
class WriterClose:
    """Not CLOSED (also IN_RECOVERY) -> CLOSED with the writer's LAC and length."""

    ledger_id: int
    last_entry_id: int
    length: int


@dataclass(frozen=True)
class RecoveryClose:
    """IN_RECOVERY -> CLOSED with the recovered end and the fragments changed during write-back."""

    ledger_id: int
    last_entry_id: int
    length: int
    fragments: tuple[Fragment, ...]


LedgerChange = StartRecovery | EnsembleChange | WriterClose | RecoveryClose


@dataclass(frozen=True)
class UpdateMetadata:
    """Output: apply `change` by conditional write, then feed back a MetadataResult."""

    change: LedgerChange


@dataclass(frozen=True)
class MetadataResult:
    """Input: the outcome of an UpdateMetadata.

    applied: the change was written; `metadata` is what is stored now.
    Not applied: its precondition failed on the re-read `metadata` (e.g. CLOSED or
    IN_RECOVERY), or, with metadata None, the store failed (`error` says how).
    `version`: the store version of `metadata` (-1: unknown); `written`: this update wrote it.
    Trace events carry both: across clients, the store's version order is the metadata's order.
    """

    change: LedgerChange
    applied: bool
    metadata: LedgerMetadata | None
    error: str = ""
    version: int = -1
    written: bool = False


def transition_for(change: LedgerChange) -> transitions.Transition:
    """The pure transition of impl.metadata.transitions that `change` names."""
    if isinstance(change, StartRecovery):
        return transitions.start_recovery
    if isinstance(change, EnsembleChange):
        return lambda m: transitions.ensemble_change(m, change.first_entry_id, change.failed, change.replacement)
    if isinstance(change, WriterClose):
        return lambda m: transitions.writer_close(m, change.last_entry_id, change.length)
    return lambda m: transitions.recovery_close(m, change.last_entry_id, change.length, change.fragments)


def result_of(change: LedgerChange, outcome: UpdateOutcome | transitions.TransitionError) -> MetadataResult:
    """Translate ledger_store.update's outcome (or its TransitionError) into the cores' input.

    A write, or "the goal already holds" (NoWrite), is applied; adopting someone else's
    close is not (the recovery op adopts it); a failed precondition carries the metadata
    it was checked on, so the writer can tell CLOSED (closed) from IN_RECOVERY (fenced).
    """
    if isinstance(outcome, transitions.TransitionError):
        version = -1 if outcome.version is None else outcome.version
        return MetadataResult(change, False, outcome.metadata, f"{outcome.code}: {outcome}", version)
    return MetadataResult(change, not outcome.adopted, outcome.metadata, "", outcome.version, outcome.written)
