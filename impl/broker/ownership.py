"""Topic ownership: this broker's bundles, held by ephemeral nodes of its metadata session.

As spec/fencing.tla models it. A broker owns a bundle while its metadata session holds the
ephemeral node /namespace/<tenant>/<ns>/0x<lo>_0x<hi> with the broker's address as data.
    AcquireOwnership(b)     `OwnershipCache.try_acquire`: create the node; NodeExists = someone else owns it
    believesOwner[b]        `OwnershipCache.is_owned` / `owned_bundles` (the cache's beliefs)
    ownerNode               `OwnershipCache.owner_of` (a known owner is cached until a watch fires)
    ExpireSession(b)        the store expires the session (`MetadataStore.expire_session` in tests)
    Reconnect(b)            `OwnershipCache.reconnect(new_store)`: a new session for the same broker
    RevalidateOwnership(b)  done at once when the store reports EXPIRED, and always by its "lost"
                            branch: the cache drops every bundle and calls `on_lost`, and never
                            writes on the old session again (BookKeeper issue 4462). It does not
                            re-create nodes from stale beliefs after a reconnect: the broker
                            acquires bundles afresh through lookup, which reopens (and fences)
                            the managed ledgers. Unloading is always safe; keeping topics loaded
                            across the gap is the optimisation the spec's re-create branch allows.
Being told late is harmless for the data: a stale owner's writes fail fenced once the new
owner recovered the ledger (fencing.tla `SingleWriter`). Someone else deleting our node (a
forced unload) is noticed by a data watch and handled like a loss; if the watch could not be
armed (no answer), the node is checked again when the session reconnects.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from impl.broker.bundles import NamespaceBundle
from impl.metadata import layout
from impl.metadata.store import (
    BadVersion,
    InvalidArgument,
    MetadataError,
    MetadataStore,
    NodeExists,
    NoNode,
    SessionExpired,
    SessionState,
    WatchedEvent,
)

log = logging.getLogger(__name__)


# --- the ownership cache (shell) -----------------------------------------------------------

LostCallback = Callable[[list[NamespaceBundle]], None]


class OwnershipCache:
    """This broker's owned bundles (its beliefs) and a watch-invalidated cache of other owners.

    `on_lost(bundles)` is called when bundles leave this broker other than by `release`: the
    session expired (all of them at once), someone deleted our node (a forced unload), or
    `unload`. It runs on the store's notification thread: it must stop writes at once (mark the
    topics closed) and hand slow work elsewhere.
    """

    def __init__(self, store: MetadataStore, broker_address: str, on_lost: LostCallback | None = None) -> None:
        layout.broker_path(broker_address)  # host:port, or InvalidName
        self.broker_address = broker_address
        self.on_lost = on_lost
        self._lock = threading.RLock()
        self._store = store
        self._expired = False
        self._owned: dict[str, NamespaceBundle] = {}  # path -> bundle: believesOwner
        self._owners: dict[str, str] = {}  # path -> another broker's address, until a watch fires
        self._epochs: dict[str, int] = {}  # bumped by every invalidation of _owners[path]
        self._unverified: set[str] = set()  # own nodes whose watch could not be armed (no answer)
        self._listen(store)

    @property
    def store(self) -> MetadataStore:
        return self._store

    @property
    def expired(self) -> bool:
        """The session this cache writes with has expired; nothing is written until `reconnect`."""
        return self._expired

    def _listen(self, store: MetadataStore) -> None:
        store.add_session_listener(lambda state: self._on_session_state(store, state))

    # -- fencing.tla actions ------------------------------------------------------------------

    def try_acquire(self, bundle: NamespaceBundle) -> bool:
        """AcquireOwnership: True if this broker owns `bundle` now (already, or by creating its node)."""
        path = bundle.path
        with self._lock:
            store = self._writable_store(f"acquire {bundle}")
            if path in self._owned:
                return True
        try:
            self._create_node(store, bundle)
        except NodeExists:
            self._invalidate(path)
            stat = store.exists(path)
            if stat is None or stat.ephemeral_owner != store.session_id:
                return False
            # Ours already: an earlier create applied although its answer was lost (ConnectionLoss).
        with self._lock:
            if self._store is not store or self._expired:
                # The session died right after the create: the node went with it.
                raise SessionExpired(f"lost the session while acquiring {bundle}; reconnect and look up again", path)
            self._owned[path] = bundle
            self._invalidate(path)
        self._recheck_owned(path)  # arms the watch that notices a forced unload
        return self.is_owned(bundle)

    def _create_node(self, store: MetadataStore, bundle: NamespaceBundle) -> None:
        try:
            store.create(bundle.path, self.broker_address.encode(), ephemeral=True)
        except NoNode:  # the first bundle of this namespace ever owned: create the parents, then retry once
            store.ensure_path(layout.namespace_path(bundle.namespace.tenant, bundle.namespace.namespace))
            store.create(bundle.path, self.broker_address.encode(), ephemeral=True)

    def reconnect(self, store: MetadataStore) -> None:
        """Reconnect: continue on a new session of the same broker (after the old one expired)."""
        with self._lock:
            if not self._expired:
                raise InvalidArgument(
                    "reconnect() is for after the session expired; this cache's session is still alive"
                )
            self._store, self._expired = store, False
            self._owners.clear()
        self._listen(store)

    def _on_session_state(self, store: MetadataStore, state: SessionState) -> None:
        """The store's notification: on EXPIRED, drop every belief at once (RevalidateOwnership, lost)."""
        if state is SessionState.CONNECTED:
            with self._lock:
                unverified, self._unverified = self._unverified, set()
            for path in sorted(unverified):
                self._recheck_owned(path)
            return
        if state is not SessionState.EXPIRED:
            return  # SUSPENDED: the session may live on; keep believing, as the spec's broker does
        with self._lock:
            if store is not self._store or self._expired:
                return
            self._expired = True
            lost = list(self._owned.values())
            self._owned.clear()
            self._owners.clear()
            self._unverified.clear()
        log.warning("metadata session of broker %s expired; lost bundles %s", self.broker_address, lost)
        self._fire_lost(lost)

    # -- beliefs and answers --------------------------------------------------------------------

    def is_owned(self, bundle: NamespaceBundle) -> bool:
        with self._lock:
            return bundle.path in self._owned

    def owned_bundles(self) -> list[NamespaceBundle]:
        with self._lock:
            return sorted(self._owned.values())

    def owner_of(self, bundle: NamespaceBundle) -> str | None:
        """The address of the bundle's owner, or None if nobody owns it.

        A known owner is cached until a watch reports a change (a stale answer costs the client
        one more redirect). "Unowned" is never cached: it lasts only until some broker acquires
        the bundle, and a stale "unowned" would make lookups choose and redirect needlessly.
        """
        path = bundle.path
        with self._lock:
            if path in self._owned:
                return self.broker_address
            if path in self._owners:
                return self._owners[path]
            epoch, store = self._epochs.get(path, 0), self._store
        try:
            data, _ = store.get(path, watch=self._on_owner_event)
        except NoNode:
            return None
        owner = data.decode("utf-8", errors="replace")
        with self._lock:
            # Keep it only if no watch fired since the read armed it, on a session that still delivers watches.
            if self._epochs.get(path, 0) == epoch and self._store is store and not self._expired:
                self._owners[path] = owner
        return owner

    # -- giving bundles up ------------------------------------------------------------------------

    def release(self, bundle: NamespaceBundle) -> None:
        """Give the bundle up (the caller has unloaded its topics): delete our node. No on_lost."""
        with self._lock:
            if self._owned.pop(bundle.path, None) is None or self._expired:
                return  # not ours, or the node went with the expired session: write nothing
            store = self._store
        self._delete_own_node(store, bundle.path)

    def unload(self, bundle: NamespaceBundle) -> bool:
        """Unload gracefully: stop believing, tell on_lost (topics close), then free the node."""
        with self._lock:
            if self._owned.pop(bundle.path, None) is None:
                return False
            store, expired = self._store, self._expired
        self._fire_lost([bundle])
        if not expired:
            self._delete_own_node(store, bundle.path)
        return True

    def close(self) -> None:
        """Release every bundle (broker shutdown, after its topics were closed)."""
        for bundle in self.owned_bundles():
            self.release(bundle)

    def _delete_own_node(self, store: MetadataStore, path: str) -> None:
        try:
            _, stat = store.get(path)
            if stat.ephemeral_owner == store.session_id:  # never delete a successor's node
                store.delete(path, stat.version)
        except (NoNode, BadVersion):
            pass  # already gone, or changed under us: it is not our node any more
        except SessionExpired:
            pass  # the node went with the session; the listener drops the beliefs
        self._invalidate(path)

    # -- watches ----------------------------------------------------------------------------------

    def _writable_store(self, what: str) -> MetadataStore:
        if self._expired:
            raise SessionExpired(
                f"cannot {what}: the metadata session of broker {self.broker_address} expired and is never "
                "written again (BookKeeper issue 4462); reconnect() with a new session first"
            )
        return self._store

    def _invalidate(self, path: str) -> None:
        with self._lock:
            self._owners.pop(path, None)
            self._epochs[path] = self._epochs.get(path, 0) + 1

    def _on_owner_event(self, event: WatchedEvent) -> None:
        self._invalidate(event.path)

    def _on_own_node_event(self, event: WatchedEvent) -> None:
        self._recheck_owned(event.path)

    def _recheck_owned(self, path: str) -> None:
        """Is our node still ours? Re-arms the watch; a node deleted or taken by others is a loss."""
        with self._lock:
            if path not in self._owned or self._expired:
                return
            store = self._store
        try:
            stat = store.exists(path, watch=self._on_own_node_event)
        except MetadataError as error:
            # No answer, so no watch either: look again once the session reconnects (or expires: all lost).
            log.info("could not re-check ownership node %s (%s); will on reconnection", path, error)
            with self._lock:
                self._unverified.add(path)
            return
        if stat is not None and stat.ephemeral_owner == store.session_id:
            return
        with self._lock:
            bundle = self._owned.pop(path, None) if store is self._store else None
        if bundle is not None:
            log.warning("broker %s lost bundle %s: its ownership node was removed", self.broker_address, bundle)
            self._fire_lost([bundle])

    def _fire_lost(self, bundles: list[NamespaceBundle]) -> None:
        callback = self.on_lost
        if not bundles or callback is None:
            return
        try:
            callback(bundles)
        except Exception:  # the beliefs are already dropped; a failing callback must not undo that
            log.exception("on_lost callback of broker %s failed for %s", self.broker_address, bundles)
