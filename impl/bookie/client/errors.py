"""Typed client failures: each names the ledger, the cause and what to do."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from impl.metadata.ledger import LedgerMetadata


class LedgerClientError(Exception):
    """Base of every BookKeeper client failure."""

    def __init__(self, ledger_id: int, message: str) -> None:
        super().__init__(f"ledger {ledger_id}: {message}")
        self.ledger_id = ledger_id


class BadRequestError(LedgerClientError):
    """A bookie refused an add for good (EBADREQ: malformed, or over its frame limit). Every pending
    add of the ledger fails with it; `entry_id` is the one refused (the others may be sent again)."""

    def __init__(self, ledger_id: int, entry_id: int, message: str) -> None:
        super().__init__(ledger_id, message)
        self.entry_id = entry_id


class LedgerFencedError(LedgerClientError):
    """The ledger was fenced (recovered by someone else) or a bookie refused our key: the writer stops."""


class LedgerClosedError(LedgerClientError):
    """The ledger is closed: no more adds."""


class NotEnoughBookiesError(LedgerClientError):
    """Too few bookies answered to decide (read-LAC coverage, recovery read, or a read range)."""


class MetadataUpdateError(LedgerClientError):
    """A conditional metadata write was refused or failed (the store answered an error or not at all)."""


class MetadataVersionError(MetadataUpdateError):
    """BookKeeper's BKMetadataVersionException at a close: the ledger is stored CLOSED at another end than
    the one this handle acknowledged (another client recovered it and closed it). `stored` is the closed
    metadata as stored; `last_add_confirmed` and `length` are the handle's. Final: the stored close never
    changes, so every later close of the handle raises this again."""

    def __init__(self, ledger_id: int, stored: LedgerMetadata, last_add_confirmed: int, length: int) -> None:
        super().__init__(
            ledger_id,
            f"close with last entry {last_add_confirmed} (length {length}) refused (metadata version error): "
            f"the ledger is already CLOSED at entry {stored.last_entry_id} (length {stored.length}), closed by "
            "another client's recovery; read it through a handle opened now to see its entries",
        )
        self.stored = stored
        self.last_add_confirmed = last_add_confirmed
        self.length = length


class BadEntryError(LedgerClientError):
    """No bookie returned a verifiable copy of an entry (digest, ledger id or entry id mismatch)."""


class NoSuchEntryError(LedgerClientError):
    """Every bookie of the entry's write set says it does not have it (ENOENTRY/ENOLEDGER)."""


class PlacementError(Exception):
    """Not enough writable bookies to place an ensemble; start more bookies or lower the ensemble size."""


class UnauthorizedError(LedgerClientError):
    """The password does not match the ledger's: nothing was fenced or read."""
