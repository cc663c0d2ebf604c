"""Metadata updates the client cores ask for, and the results the shell feeds back.

A core never checks a transition's precondition itself: it names the transition
(impl.metadata.transitions: start recovery, ensemble change, writer close, recovery
close) in an `UpdateMetadata` output; the shell runs it through the conditional-write
loop of impl.metadata.ledger_store and returns a `MetadataResult`.
"""

from __future__ import annotations

from dataclasses import dataclass

from impl.metadata.ledger import BookieId, Fragment, LedgerMetadata


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
    """

    change: LedgerChange
    applied: bool
    metadata: LedgerMetadata | None
    error: str = ""
