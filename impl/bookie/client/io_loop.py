"""The client's I/O loop: an asyncio event loop on one thread, which serves every bookie connection of a
transport (impl/bookie/client/framed_channel.py) and runs their callbacks.

Callbacks must not block: a callback that waits for another bookie answer would stall every
bookie connection of the transport (`on_io_loop_thread` lets blocking API calls refuse).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_LOOP_THREADS: set[int] = set()  # thread idents of running IoLoops
CLOSE_GRACE_S = 1.0  # how long a closing IoLoop waits for its tasks (channel closes) before cancelling them


def on_io_loop_thread() -> bool:
    """True on the thread of any running IoLoop (where blocking on a bookie answer would deadlock), or of
    any other thread that answers bookie requests (`answering_thread`)."""
    return threading.get_ident() in _LOOP_THREADS


@contextlib.contextmanager
def answering_thread() -> Iterator[None]:
    """Count the current thread, while inside, as one that answers bookie requests (as an IoLoop's does):
    the client's blocking calls refuse to wait there."""
    _LOOP_THREADS.add(threading.get_ident())
    try:
        yield
    finally:
        _LOOP_THREADS.discard(threading.get_ident())


class IoLoop:
    """An asyncio event loop on a daemon thread, shared by the channels of one transport."""

    def __init__(self, name: str = "bookie-io") -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        _LOOP_THREADS.add(threading.get_ident())
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            _LOOP_THREADS.discard(threading.get_ident())
            pending = asyncio.all_tasks(self.loop)
            if pending:
                # Let closing work finish first (a connection's close, a connect still under way).
                self.loop.run_until_complete(asyncio.wait(pending, timeout=CLOSE_GRACE_S))
                for task in pending:
                    task.cancel()
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    @property
    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def call(self, callback: Any, *args: Any) -> None:
        """Run `callback(*args)` on the loop: at once when already there, else at its next turn."""
        if self.is_current:
            callback(*args)
        else:
            self.loop.call_soon_threadsafe(callback, *args)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the loop (its tasks are cancelled) and wait for its thread, unless called on it."""
        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            return  # closed meanwhile
        if not self.is_current:
            self._thread.join(timeout_s)
