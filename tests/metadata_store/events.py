"""Collecting watch events and session states that arrive on a backend's own thread."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

T = TypeVar("T")
# How long to wait for an event a backend must deliver; generous for a loaded 2-core CI box.
DELIVERY_TIMEOUT_S = 20.0


class Inbox(Generic[T]):
    """A callable that records what it is called with; wait_for() blocks until enough arrived."""

    def __init__(self) -> None:
        self.items: list[T] = []
        self._cond = threading.Condition()

    def __call__(self, item: T) -> None:
        with self._cond:
            self.items.append(item)
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float = DELIVERY_TIMEOUT_S) -> list[T]:
        with self._cond:
            self._cond.wait_for(lambda: len(self.items) >= count, timeout)
            assert len(self.items) >= count, f"waited for {count} events, got {self.items}"
            return list(self.items)
