"""Typed errors of tiered storage, each with a sentence to act on."""

from __future__ import annotations


class OffloadError(Exception):
    """An offload, a read or a delete of an offloaded ledger failed."""


class OffloadStoreError(OffloadError):
    """The tiered store cannot be used: a directory or bucket that is missing, read-only, full or unreachable.
    An offload that meets it records nothing: the ledger stays on the bookies."""


class OffloadedLedgerNotFound(OffloadError):
    """The offloaded object is not there (deleted behind the broker's back)."""


class OffloadedLedgerCorrupt(OffloadError):
    """The offloaded object is not what was written (a bad trailer, index or checksum)."""
