"""Keep a component on a live metadata session, however many sessions expire in a row.

A session that expires takes its ephemeral nodes (a bookie's or broker's registration, a broker's
bundle ownerships) with it, and the contract forbids carrying on with it (BookKeeper issue 4462).
The component must open a new session and do its registration again. Two races make that fragile
when it is done from a one-off thread started by the EXPIRED notification:
  - the new session can expire too (the process was stopped past the timeout, or the store was
    unreachable) before its listener is added: a listener added to a dead session is never told,
    and the component stays unregistered for good;
  - the renewal itself can fail (SessionExpired, ConnectionLoss): a thread that dies with it leaves
    nobody to retry.
`SessionRenewer` closes both: one long-lived thread renews whenever told, the listener is added
*before* the component's `adopt` runs on the new session and a read on the session then proves it
was still alive (so an expiry after that is reported, and one before it fails the attempt), and a
failed attempt is abandoned (closed) and retried after `retry_s` until it succeeds or `stop()`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

from impl.metadata.store import MetadataStore, SessionState

log = logging.getLogger(__name__)

RETRY_S = 0.5


class SessionRenewer:
    """Renews `current()`'s session on EXPIRED: `connect()` a new one, then `adopt(new)`.

    `adopt` must do everything the component does on a new session (register, re-point its clients)
    and raise if any of it fails; `abandon(new)` (optional) undoes a partial adopt before the
    attempt's session is closed. Call `watch(store)` on every session the component starts with.
    """

    def __init__(
        self,
        name: str,
        connect: Callable[[], MetadataStore],
        adopt: Callable[[MetadataStore], None],
        abandon: Callable[[MetadataStore], None] | None = None,
        retry_s: float = RETRY_S,
    ) -> None:
        self.name = name
        self._connect = connect
        self._adopt = adopt
        self._abandon = abandon
        self.retry_s = retry_s
        self._due = threading.Event()
        self._stopped = threading.Event()
        self._current: MetadataStore | None = None
        self.renewals = 0  # sessions adopted after an expiry (tests and status read it)
        self.failures = 0  # attempts that failed and were retried
        self._thread = threading.Thread(target=self._loop, name=f"renew-{name}", daemon=True)
        self._thread.start()

    @property
    def renewing(self) -> bool:
        """An expiry was reported and no new session is adopted yet."""
        return self._due.is_set()

    def watch(self, store: MetadataStore) -> None:
        """Follow `store`, the component's current session: its expiry starts a renewal."""
        self._current = store
        store.add_session_listener(lambda state: self._on_state(store, state))

    def _on_state(self, store: MetadataStore, state: SessionState) -> None:
        if state is SessionState.EXPIRED and store is self._current and not self._stopped.is_set():
            self._due.set()

    def stop(self) -> None:
        self._stopped.set()
        self._due.set()

    def _loop(self) -> None:
        while True:
            self._due.wait()
            if self._stopped.is_set():
                return
            self._due.clear()
            try:
                self._attempt()
            except Exception as e:  # whatever failed, the next attempt starts from scratch
                self.failures += 1
                log.warning("%s: renewing the metadata session failed (%s); retrying", self.name, e)
                self._due.set()
                self._stopped.wait(self.retry_s)

    def _attempt(self) -> None:
        store = self._connect()
        try:
            if self._stopped.is_set():
                raise RuntimeError("stopped")
            self.watch(store)  # before adopt: an expiry from now on is reported
            # One from before is not: a round trip on the session proves it was alive when the listener was
            # added (an adopt that writes nothing, like the configuration store's, would not find out).
            store.exists("/")
            self._adopt(store)
        except BaseException:
            if self._abandon is not None:
                with contextlib.suppress(Exception):
                    self._abandon(store)
            with contextlib.suppress(Exception):
                store.close()
            raise
        self.renewals += 1
        log.warning("%s continues on a new metadata session 0x%x", self.name, store.session_id)
