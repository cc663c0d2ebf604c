"""What a cursor needs of its managed ledger, as an interface: cursor.py types against this and
managed_ledger.py (which creates the cursors) provides it, so neither module imports the other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from impl.bookie.client.api import BookKeeperClient
from impl.broker.ledger_list import Position, TopicView
from impl.broker.managed_ledger_core import ManagedLedgerConfig, ManagedLedgerState
from impl.metadata.store import MetadataStore


class Cancellable(Protocol):
    def cancel(self) -> None: ...


CallLater = Callable[[float, Callable[[], None]], Cancellable]


class LedgerHost(Protocol):
    """The managed ledger as its cursors see it (impl/broker/managed_ledger.py's ManagedLedger)."""

    name: str
    store: MetadataStore
    bookkeeper: BookKeeperClient
    config: ManagedLedgerConfig
    clock: Callable[[], float]
    call_later: CallLater
    timeout_s: float

    @property
    def state(self) -> ManagedLedgerState: ...

    @property
    def fence_reason(self) -> str: ...

    def view(self) -> TopicView: ...

    def next_position(self, p: Position) -> Position | None: ...

    def read(self, start: Position | None, max_entries: int) -> list[tuple[Position, bytes]]: ...

    def cursor_path(self, cursor: str) -> str: ...

    def fence(self, reason: str) -> None: ...

    def check_usable(self) -> None: ...
