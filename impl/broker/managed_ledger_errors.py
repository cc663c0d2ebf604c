"""Typed errors of the managed ledger and its cursors, each naming the topic and what to do.

`rejected` says whether the managed ledger certainly wrote nothing for the failed request
(the same meaning as in impl/broker/errors.py): an add that failed before reaching a bookie
is rejected; an add whose ledger was fenced or lost mid-flight may still be recovered by
the next owner of the topic.
"""

from __future__ import annotations


class ManagedLedgerError(Exception):
    """Base of every managed ledger failure. `topic` is the managed ledger's name."""

    rejected = True

    def __init__(self, topic: str, message: str, *, rejected: bool = True) -> None:
        super().__init__(f"managed ledger {topic}: {message}")
        self.topic = topic
        self.rejected = rejected


class ManagedLedgerFencedError(ManagedLedgerError):
    """Terminal: another broker took the topic over (or our metadata session ended).

    Every later operation fails with this error (Pulsar issue 17736); the broker must close
    the topic and, if it still owns the bundle, open the managed ledger again.
    """

    def __init__(self, topic: str, reason: str, *, rejected: bool = True) -> None:
        super().__init__(
            topic,
            f"fenced: {reason}; close the topic and reopen it on the broker that owns it",
            rejected=rejected,
        )
        self.reason = reason


class ManagedLedgerClosedError(ManagedLedgerError):
    """The managed ledger was closed (or deleted) on this broker; open it again to use it."""


class ManagedLedgerNotReadyError(ManagedLedgerError):
    """A ledger could not be created (e.g. too few writable bookies); the add may be retried."""


class EntryRefusedError(ManagedLedgerError):
    """A bookie refused the entry for good (EBADREQ: malformed or over its frame limit); not retried."""


class NoSuchCursorError(ManagedLedgerError):
    """The named cursor does not exist on this managed ledger."""


class InvalidPositionError(ManagedLedgerError):
    """A position that is not an entry of the managed ledger (beyond the end, trimmed, or malformed).

    Nothing was changed; acknowledge only positions that were read from this topic.
    """


class CursorFencedError(ManagedLedgerFencedError):
    """A durable cursor lost its cursor ledger or node to another broker (a takeover)."""
