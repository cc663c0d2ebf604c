"""Typed client failures: each names the ledger, the cause and what to do."""

from __future__ import annotations


class LedgerClientError(Exception):
    """Base of every BookKeeper client failure."""

    def __init__(self, ledger_id: int, message: str) -> None:
        super().__init__(f"ledger {ledger_id}: {message}")
        self.ledger_id = ledger_id


class LedgerFencedError(LedgerClientError):
    """The ledger was fenced (recovered by someone else) or a bookie refused our key: the writer stops."""


class LedgerClosedError(LedgerClientError):
    """The ledger is closed: no more adds."""


class NotEnoughBookiesError(LedgerClientError):
    """Too few bookies answered to decide (read-LAC coverage, recovery read, or a read range)."""


class MetadataUpdateError(LedgerClientError):
    """A conditional metadata write was refused (e.g. a conflicting close: metadata version error)."""


class BadEntryError(LedgerClientError):
    """No bookie returned a verifiable copy of an entry (digest, ledger id or entry id mismatch)."""


class NoSuchEntryError(LedgerClientError):
    """Every bookie of the entry's write set says it does not have it (ENOENTRY/ENOLEDGER)."""


class PlacementError(Exception):
    """Not enough writable bookies to place an ensemble; start more bookies or lower the ensemble size."""


class UnauthorizedError(LedgerClientError):
    """The password does not match the ledger's: nothing was fenced or read."""
