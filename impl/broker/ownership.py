"""Topic ownership: this broker's bundles, held by ephemeral nodes of its metadata session.

As spec/fencing.tla models it. A broker owns a bundle while its metadata session holds the
ephemeral node /namespace/<tenant>/<ns>/0x<lo>_0x<hi> with the broker's address as data. The
decisions are the pure core impl/broker/ownership_core.py (`OwnershipCore`, one `step(event)`);
`OwnershipCache` here is its shell: the metadata store's calls, watches, session listeners and
the lock.
    AcquireOwnership(b)     `OwnershipCache.try_acquire` (core: `Acquire`): create the node; NodeExists: another owns it
    believesOwner[b]        `OwnershipCache.is_owned` / `owned_bundles` (core: `OwnershipCore.owned`)
    ownerNode               `OwnershipCache.owner_of` (core: `OwnerOf`; a known owner is cached until a watch fires)
    ExpireSession(b)        the store expires the session (`MetadataStore.expire_session` in tests)
    Reconnect(b)            `OwnershipCache.reconnect(new_store)` (core: `Reconnect`): a new session for the same broker
    RevalidateOwnership(b)  done at once when the store reports EXPIRED (core: `SessionExpiredEvent`), and always
                            by its "lost" branch: the cache drops every bundle and calls `on_lost`, and never
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
from collections import deque
from collections.abc import Callable
from typing import cast

from impl.broker import ownership_core as core
from impl.broker.bundles import NamespaceBundle
from impl.broker.ownership_core import OwnershipCore
from impl.metadata import layout
from impl.metadata.store import MetadataError, MetadataStore, NoNode, SessionExpired, SessionState, WatchedEvent

log = logging.getLogger(__name__)


# --- the ownership cache (shell) -----------------------------------------------------------

LostCallback = Callable[[list[NamespaceBundle]], None]
Result = core.CompleteRequest | core.FailRequest


class OwnershipCache:
    """This broker's owned bundles (its beliefs) and a watch-invalidated cache of other owners.

    The shell of an `OwnershipCore`: each call, watch and session notification becomes one of the
    core's inputs; the shell performs the outputs against the metadata store (on the session each
    names) and feeds the answers back until the core asks for nothing more.

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
        self._core = OwnershipCore(broker_address, store.session_id)
        self._stores: dict[int, MetadataStore] = {self._core.session: store}  # the sessions outputs may name
        self._next_token = 0
        self._listen(store, self._core.session)

    @property
    def store(self) -> MetadataStore:
        with self._lock:
            return self._stores[self._core.session]

    @property
    def expired(self) -> bool:
        """The session this cache writes with has expired; nothing is written until `reconnect`."""
        return self._core.expired

    def _listen(self, store: MetadataStore, session: int) -> None:
        store.add_session_listener(lambda state: self._on_session_state(session, state))

    # -- fencing.tla actions ------------------------------------------------------------------

    def try_acquire(self, bundle: NamespaceBundle) -> bool:
        """AcquireOwnership: True if this broker owns `bundle` now (already, or by creating its node)."""
        return bool(self._request(lambda token: core.Acquire(token, bundle)))

    def reconnect(self, store: MetadataStore) -> None:
        """Reconnect: continue on a new session of the same broker (after the old one expired)."""
        with self._lock:
            token = self._take_token()
            for out in self._core.step(core.Reconnect(token, store.session_id)):
                if isinstance(out, core.FailRequest):
                    raise out.error
            session = self._core.session
            self._stores = {s: st for s, st in self._stores.items() if s >= session - 1}  # answers still due
            self._stores[session] = store
        self._listen(store, session)

    def abandon_session(self) -> None:
        """The current session is dead or given up (a renewal attempt that failed): drop every belief
        of it, as its EXPIRED would (the core ignores a second expiry of the same session)."""
        with self._lock:
            session = self._core.session
        self._drive(core.SessionExpiredEvent(session))

    def _on_session_state(self, session: int, state: SessionState) -> None:
        """The store's notification: EXPIRED drops every belief at once (RevalidateOwnership, lost);
        CONNECTED checks the nodes whose watch could not be armed."""
        if state is SessionState.CONNECTED:
            self._drive(core.SessionConnected(session))
        elif state is SessionState.EXPIRED:
            self._drive(core.SessionExpiredEvent(session))
        # SUSPENDED: the session may live on; keep believing, as the spec's broker does

    # -- beliefs and answers --------------------------------------------------------------------

    def is_owned(self, bundle: NamespaceBundle) -> bool:
        with self._lock:
            return self._core.is_owned(bundle.path)

    def owned_bundles(self) -> list[NamespaceBundle]:
        with self._lock:
            return sorted(cast(list[NamespaceBundle], self._core.owned_bundles()))

    def owner_of(self, bundle: NamespaceBundle) -> str | None:
        """The address of the bundle's owner, or None if nobody owns it.

        A known owner is cached until a watch reports a change (a stale answer costs the client
        one more redirect). "Unowned" is never cached: it lasts only until some broker acquires
        the bundle, and a stale "unowned" would make lookups choose and redirect needlessly.
        """
        owner = self._request(lambda token: core.OwnerOf(token, bundle))
        assert owner is None or isinstance(owner, str)
        return owner

    # -- giving bundles up ------------------------------------------------------------------------

    def release(self, bundle: NamespaceBundle) -> None:
        """Give the bundle up (the caller has unloaded its topics): delete our node. No on_lost."""
        self._request(lambda token: core.Release(token, bundle))

    def unload(self, bundle: NamespaceBundle) -> bool:
        """Unload gracefully: stop believing, tell on_lost (topics close), then free the node."""
        return bool(self._request(lambda token: core.Unload(token, bundle)))

    def close(self) -> None:
        """Release every bundle (broker shutdown, after its topics were closed)."""
        for bundle in self.owned_bundles():
            self.release(bundle)

    # -- watches ----------------------------------------------------------------------------------

    def _on_owner_event(self, event: WatchedEvent) -> None:
        self._drive(core.OwnerNodeChanged(event.path))

    def _on_own_node_event(self, event: WatchedEvent) -> None:
        self._recheck_owned(event.path)

    def _recheck_owned(self, path: str) -> None:
        """Is our node still ours? Re-arms the watch; a node deleted or taken by others is a loss."""
        self._drive(core.OwnNodeChanged(path))

    # -- the loop: step the core, perform its outputs, feed back their answers ------------------

    def _take_token(self) -> int:
        with self._lock:
            token = self._next_token
            self._next_token += 1
            return token

    def _request(self, make: Callable[[int], core.Event]) -> bool | str | None:
        token = self._take_token()
        for result in self._drive(make(token)):
            if result.token == token:
                if isinstance(result, core.FailRequest):
                    raise result.error
                return result.result
        raise MetadataError(f"broker {self.broker_address}: an ownership request got no answer; retry it")

    def _drive(self, event: core.Event) -> list[Result]:
        """Step the core with one input and perform what it asks, feeding each answer back, until it
        asks for nothing more. Returns the requests' completions."""
        results: list[Result] = []
        with self._lock:
            work = deque(self._core.step(event))
        while work:
            answer = self._perform(work.popleft(), results)
            if answer is not None:
                with self._lock:
                    work.extend(self._core.step(answer))
        return results

    def _perform(self, out: core.Output, results: list[Result]) -> core.Event | None:
        """Perform one output (outside the lock: the store may call our watches at once); returns its answer."""
        match out:
            case core.CompleteRequest() | core.FailRequest():
                results.append(out)
            case core.BundlesLost(bundles, why):
                lost = cast(list[NamespaceBundle], list(bundles))
                log.warning("broker %s lost bundles %s: %s", self.broker_address, lost, why)
                self._fire_lost(lost)
            case core.Unverified(path, reason):
                log.info("could not re-check ownership node %s (%s); will on reconnection", path, reason)
            case core.CreateOwnershipNode(token, session, bundle, data, with_parents):
                try:
                    store = self._session_store(session)
                    if with_parents:
                        ns = cast(NamespaceBundle, bundle).namespace
                        store.ensure_path(layout.namespace_path(ns.tenant, ns.namespace))
                    store.create(bundle.path, data, ephemeral=True)
                except MetadataError as error:
                    return core.NodeCreateFailed(token, session, error)
                return core.NodeCreated(token, session)
            case core.CheckOwnershipNode(token, session, path):
                try:
                    stat = self._session_store(session).exists(path)
                except MetadataError as error:
                    return core.NodeCreateFailed(token, session, error)
                return core.NodeChecked(token, session, None if stat is None else stat.ephemeral_owner)
            case core.WatchOwnNode(path, session, token):
                try:
                    stat = self._session_store(session).exists(path, watch=self._on_own_node_event)
                except MetadataError as error:
                    return core.WatchFailed(path, session, error, token)
                return core.NodeWatched(path, session, None if stat is None else stat.ephemeral_owner, token)
            case core.ReadOwnNode(token, session, path):
                try:
                    _, stat = self._session_store(session).get(path)
                except MetadataError as error:
                    return core.OwnNodeIoFailed(token, session, error)
                return core.OwnNodeRead(token, session, stat.ephemeral_owner, stat.version)
            case core.DeleteOwnNode(token, session, path, version):
                try:
                    self._session_store(session).delete(path, version)
                except MetadataError as error:
                    return core.OwnNodeIoFailed(token, session, error)
                return core.OwnNodeDeleted(token, session)
            case core.ReadOwner(token, session, path):
                try:
                    data, _ = self._session_store(session).get(path, watch=self._on_owner_event)
                except NoNode:
                    return core.OwnerRead(token, session, None)
                except MetadataError as error:
                    return core.OwnerReadFailed(token, session, error)
                return core.OwnerRead(token, session, data)
        return None

    def _session_store(self, session: int) -> MetadataStore:
        with self._lock:
            store = self._stores.get(session)
        if store is None:
            raise SessionExpired(f"broker {self.broker_address}: session {session} is long gone", None)
        return store

    def _fire_lost(self, bundles: list[NamespaceBundle]) -> None:
        callback = self.on_lost
        if not bundles or callback is None:
            return
        try:
            callback(bundles)
        except Exception:  # the beliefs are already dropped; a failing callback must not undo that
            log.exception("on_lost callback of broker %s failed for %s", self.broker_address, bundles)
