"""Topic ownership: namespace bundles, the ownership cache, the broker registry and lookup.

Bundles (pure). A namespace's 32-bit hash range [0, 2^32) is split into N bundles (4 by
default, Pulsar's defaultNumberOfNamespaceBundles) at multiples of 2^32 // N, the last one
ending at 2^32 (printed 0xffffffff). A topic belongs to the bundle containing the hash of
its full name (`persistent://tenant/ns/topic`, partitions included, so partitions spread).
The hash is CRC-32 (zlib's, the IEEE polynomial) of the name's UTF-8 bytes, an unsigned
32-bit number: what Pulsar's NamespaceService hashes bundles with (Guava's Hashing.crc32()),
so with the same bundle count a topic lands in the same bundle here as in Pulsar.

Ownership (spec/fencing.tla). A broker owns a bundle while its metadata session holds the
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

Lookup (pure decision, shell around it). Owner known: "connect" if it is the asking broker,
else "redirect" to it. Unowned: the broker named by a transfer's assignment hint if it is
live, else the least-loaded live broker (fewest bundles, then fewest topics, then the smallest
address, so every broker decides alike); if that is the asking broker it acquires the bundle
and answers "connect", else "redirect" marked authoritative, and the broker redirected to
acquires without choosing again (Pulsar's authoritative lookup: no ping-pong between brokers).
A transfer leaves a persistent hint /loadbalance/bundle-assignments/<tenant>/<ns>/<bundle>
naming the next owner and unloads the bundle; whoever acquires the bundle next deletes it.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from impl.broker import namespaces
from impl.broker.naming import NamespaceName, TopicName
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

DEFAULT_NUMBER_OF_BUNDLES = namespaces.DEFAULT_NUMBER_OF_BUNDLES
FULL_RANGE = layout.FULL_HASH_RANGE  # 2^32

# --- hashing and bundles (pure) ----------------------------------------------------------


def topic_hash(topic: TopicName) -> int:
    """The bundle hash of a topic: CRC-32 of its full name's UTF-8 bytes, in [0, 2^32)."""
    return zlib.crc32(str(topic).encode("utf-8"))


@dataclass(frozen=True, order=True)
class NamespaceBundle:
    """The hash range [lower, upper) of a namespace; upper is 2^32 for the last bundle."""

    namespace: NamespaceName
    lower: int
    upper: int

    def __post_init__(self) -> None:
        layout.bundle_name(self.lower, self.upper)  # raises InvalidName for an empty or out-of-range range

    @property
    def name(self) -> str:
        """0x<lo>_0x<hi>, Pulsar's bundle range notation."""
        return layout.bundle_name(self.lower, self.upper)

    @property
    def path(self) -> str:
        """The ephemeral ownership node."""
        return layout.bundle_ownership_path(self.namespace.tenant, self.namespace.namespace, self.lower, self.upper)

    def contains(self, hash_value: int) -> bool:
        return self.lower <= hash_value < self.upper

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> NamespaceBundle:
        """Parse `tenant/ns/0x<lo>_0x<hi>` (as str() prints it)."""
        namespace, _, name = text.rpartition("/")
        lower, upper = layout.parse_bundle_name(name)
        return cls(NamespaceName.parse(namespace), lower, upper)


def bundle_boundaries(count: int) -> tuple[int, ...]:
    """The count+1 boundaries splitting [0, 2^32) into `count` bundles (all but the last of equal size)."""
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= namespaces.MAX_NUMBER_OF_BUNDLES:
        raise namespaces.InvalidPolicies(
            f"a namespace needs between 1 and {namespaces.MAX_NUMBER_OF_BUNDLES} bundles, got {count!r}"
        )
    size = FULL_RANGE // count
    return (*(i * size for i in range(count)), FULL_RANGE)


def namespace_bundles(namespace: NamespaceName, count: int = DEFAULT_NUMBER_OF_BUNDLES) -> tuple[NamespaceBundle, ...]:
    bounds = bundle_boundaries(count)
    return tuple(NamespaceBundle(namespace, lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False))


def bundle_for(topic: TopicName, count: int = DEFAULT_NUMBER_OF_BUNDLES) -> NamespaceBundle:
    """The bundle of `topic` when its namespace has `count` bundles."""
    bounds = bundle_boundaries(count)
    i = bisect.bisect_right(bounds, topic_hash(topic)) - 1
    return NamespaceBundle(topic.namespace_name, bounds[i], bounds[i + 1])


# --- lookup decision (pure) ----------------------------------------------------------------


class NoBrokerAvailable(MetadataError):
    """No live broker is registered, so nobody can own the bundle."""

    code = "ServiceNotReady"


class LookupFailed(MetadataError):
    """Ownership of the bundle kept changing while we looked it up."""

    code = "ServiceNotReady"


@dataclass(frozen=True)
class BrokerLoad:
    """What a broker publishes in its /loadbalance/brokers/<host:port> node."""

    broker: str
    bundles: int = 0
    topics: int = 0
    service_url: str = ""  # where Pulsar clients connect: pulsar://host:port (Pulsar's pulsarServiceUrl)
    web_url: str = ""  # the admin REST API and lookups: http://host:port (Pulsar's webServiceUrl)
    service_url_tls: str = ""  # pulsar+ssl://host:port when the broker serves TLS (pulsarServiceUrlTls)
    web_url_tls: str = ""  # https://host:port when it does (webServiceUrlTls)

    def to_json(self) -> bytes:
        doc = {"broker": self.broker, "bundles": self.bundles, "topics": self.topics}
        urls = {"pulsarServiceUrl": self.service_url, "webServiceUrl": self.web_url}
        tls = {"pulsarServiceUrlTls": self.service_url_tls, "webServiceUrlTls": self.web_url_tls}
        return json.dumps(doc | urls | tls).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BrokerLoad:
        raw = json.loads(data)
        return cls(
            str(raw["broker"]),
            int(raw["bundles"]),
            int(raw["topics"]),
            str(raw.get("pulsarServiceUrl", "")),
            str(raw.get("webServiceUrl", "")),
            str(raw.get("pulsarServiceUrlTls", "")),
            str(raw.get("webServiceUrlTls", "")),
        )


@dataclass(frozen=True)
class LookupDecision:
    """`acquire`: the asking broker should create the ownership node, then answer connect."""

    action: Literal["connect", "redirect", "acquire"]
    broker: str
    authoritative: bool = False


@dataclass(frozen=True)
class LookupResult:
    kind: Literal["connect", "redirect"]
    broker_address: str
    authoritative: bool = False  # a redirect to the broker chosen to acquire the bundle
    bundle: NamespaceBundle | None = None


def least_loaded(loads: Iterable[BrokerLoad]) -> str | None:
    """Fewest bundles, then fewest topics, then the smallest address (deterministic ties)."""
    best = min(loads, key=lambda load: (load.bundles, load.topics, load.broker), default=None)
    return None if best is None else best.broker


def decide_lookup(
    owner: str | None,
    asking: str,
    live: Mapping[str, BrokerLoad],
    assigned: str | None = None,
    authoritative: bool = False,
) -> LookupDecision:
    """Where should a client asking `asking` about a bundle go? See the module docstring."""
    if owner is not None:
        return LookupDecision("connect", owner) if owner == asking else LookupDecision("redirect", owner)
    if authoritative:
        return LookupDecision("acquire", asking)  # we were chosen by whoever redirected here
    candidate = assigned if assigned in live else least_loaded(live.values())
    if candidate is None:
        raise NoBrokerAvailable(
            f"no live broker is registered under {layout.LOADBALANCE_BROKERS}; start a broker and retry the lookup"
        )
    if candidate == asking:
        return LookupDecision("acquire", asking)
    return LookupDecision("redirect", candidate, authoritative=True)


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


# --- the broker registry (shell) ---------------------------------------------------------------


class BrokerAlreadyRegistered(MetadataError):
    """Another live session holds this broker address's registration node."""

    code = "ServiceNotReady"


class BrokerRegistry:
    """Live brokers: ephemeral /loadbalance/brokers/<host:port> nodes holding BrokerLoad JSON."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    def register(self, load: BrokerLoad) -> None:
        path = layout.broker_path(load.broker)
        self.store.ensure_path(layout.LOADBALANCE_BROKERS)
        try:
            self.store.create(path, load.to_json(), ephemeral=True)
        except NodeExists:
            stat = self.store.exists(path)
            if stat is not None and stat.ephemeral_owner == self.store.session_id:
                self.store.set(path, load.to_json())
                return
            raise BrokerAlreadyRegistered(
                f"broker {load.broker} is already registered at {path}; if a previous run crashed, wait for its "
                "session to expire, otherwise give this broker another address",
                path,
            ) from None

    def update(self, load: BrokerLoad) -> None:
        self.store.set(layout.broker_path(load.broker), load.to_json())

    def unregister(self, broker_address: str) -> None:
        with contextlib.suppress(NoNode):  # already gone (its session ended): unregistered either way
            self.store.delete(layout.broker_path(broker_address))

    def live_brokers(self) -> dict[str, BrokerLoad]:
        """Every registered broker's last published load (a broker vanishing meanwhile is skipped)."""
        try:
            names = self.store.children(layout.LOADBALANCE_BROKERS)
        except NoNode:
            return {}
        loads: dict[str, BrokerLoad] = {}
        for name in names:
            try:
                data, _ = self.store.get(layout.broker_path(name))
            except NoNode:
                continue
            try:
                loads[name] = BrokerLoad.from_json(data)
            except (ValueError, KeyError, TypeError):
                loads[name] = BrokerLoad(name)  # unreadable load data: live, with nothing known about its load
        return loads


# --- the load manager (shell over cache, registry and the pure decision) ------------------------


class LoadManager:
    """One broker's view: registers it, answers lookups, unloads and transfers bundles."""

    def __init__(
        self,
        store: MetadataStore,
        broker_address: str,
        on_lost: LostCallback | None = None,
        service_url: str = "",
        web_url: str = "",
        tls_urls: tuple[str, str] = ("", ""),  # (pulsar+ssl://, https://) when the broker serves TLS
    ) -> None:
        self.broker_address = broker_address
        self.service_url = service_url
        self.web_url = web_url
        self.tls_urls = tls_urls
        self.on_lost = on_lost
        self.ownership = OwnershipCache(store, broker_address, on_lost=self._bundles_lost)
        self.registry = BrokerRegistry(store)
        self._topics = 0
        # Bundle counts per namespace, dropped when a watch reports a change of any namespace's policies
        # (a namespace deleted and re-created with another count must not keep its old split here).
        self._bundle_counts: dict[NamespaceName, int] = {}
        self._counts_lock = threading.Lock()
        self._counts_epoch = 0

    @property
    def store(self) -> MetadataStore:
        return self.ownership.store

    def start(self) -> None:
        """Register this broker as live (ephemeral node with its load)."""
        self.registry.register(self._load())

    def close(self) -> None:
        """Release every bundle and unregister (the broker closed its topics before)."""
        self.ownership.close()
        if not self.ownership.expired:
            self.registry.unregister(self.broker_address)

    def reconnect(self, store: MetadataStore) -> None:
        """After a session expiry: continue on `store` (a new session) and register again."""
        self.ownership.reconnect(store)
        self._forget_bundle_counts()  # their watches died with the old session
        self.registry = BrokerRegistry(store)
        self.start()

    def report_topics(self, topics: int) -> None:
        """The broker's topic count, published with the load (a lookup tie-breaker)."""
        self._topics = topics
        self._publish_load()

    def bundle_of(self, topic: TopicName | str) -> NamespaceBundle:
        """The bundle of `topic`, per its namespace's bundle count (NamespaceNotFound if none)."""
        name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
        with self._counts_lock:
            count, epoch = self._bundle_counts.get(name.namespace_name), self._counts_epoch
        if count is None:
            count = namespaces.get_policies(self.store, name.namespace_name, watch=self._policies_changed).bundles
            with self._counts_lock:
                if self._counts_epoch == epoch:  # no change reported since the read armed the watch
                    self._bundle_counts[name.namespace_name] = count
        return bundle_for(name, count)

    def _policies_changed(self, _event: WatchedEvent) -> None:
        self._forget_bundle_counts()

    def _forget_bundle_counts(self) -> None:
        with self._counts_lock:
            self._counts_epoch += 1
            self._bundle_counts.clear()

    def check_namespace(self, topic: TopicName | str) -> None:
        """Raise NamespaceNotFound (namespaces.py) unless the topic's namespace exists now."""
        name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
        namespaces.get_policies(self.store, name.namespace_name)

    def live_brokers(self) -> list[str]:
        """Addresses of the registered (live) brokers, sorted."""
        return sorted(self.registry.live_brokers())

    def lookup(
        self, topic: TopicName | str, authoritative: bool = False, *, asking_broker: str | None = None
    ) -> LookupResult:
        """Which broker serves `topic`? Acquires the bundle when this broker is the one chosen.

        `authoritative`: the client was redirected here by a lookup that chose this broker.
        `asking_broker`: the broker the client asked (default: this one; keyword-only).
        """
        if not isinstance(authoritative, bool):
            raise TypeError(f"authoritative must be a bool, not {authoritative!r}; pass asking_broker= by keyword")
        asking = asking_broker or self.broker_address
        bundle = self.bundle_of(topic)
        for _attempt in range(5):
            owner = self.ownership.owner_of(bundle)
            assigned = self._assigned(bundle) if owner is None else None
            live = self.registry.live_brokers() if owner is None and not authoritative else {}
            decision = decide_lookup(owner, asking, live, assigned, authoritative)
            if decision.action != "acquire":
                return LookupResult(decision.action, decision.broker, decision.authoritative, bundle)
            if asking != self.broker_address:
                # Only a broker's own session can hold its ownership node: send the client there.
                return LookupResult("redirect", asking, True, bundle)
            if self.ownership.try_acquire(bundle):
                self._clear_assignment(bundle)
                self._publish_load()
                return LookupResult("connect", self.broker_address, False, bundle)
            authoritative = False  # another broker won the race: the next round finds it as owner
        raise LookupFailed(f"ownership of bundle {bundle} kept changing during the lookup of {topic}; retry")

    def unload(self, bundle: NamespaceBundle) -> bool:
        """Unload the bundle wherever it is owned; True if it was owned.

        Our own bundle is unloaded gracefully (on_lost, then the node is deleted). Another
        broker's node is deleted by version: that broker's watch sees it and unloads, and a
        broker that takes the bundle over in the meantime fences the old owner's ledgers.
        """
        if self.ownership.unload(bundle):
            self._publish_load()
            return True
        store = self.store
        try:
            _, stat = store.get(bundle.path)
            store.delete(bundle.path, stat.version)
        except (NoNode, BadVersion):
            return False  # unowned, or re-acquired meanwhile (then its owner keeps it)
        return True

    def transfer(self, bundle: NamespaceBundle, to_broker: str) -> None:
        """Unload the bundle and have `to_broker` (a live broker) own it next."""
        if to_broker not in self.registry.live_brokers():
            raise NoBrokerAvailable(
                f"cannot transfer {bundle} to {to_broker}: it is not a live broker; pick one registered under "
                f"{layout.LOADBALANCE_BROKERS}"
            )
        path = self._assignment_path(bundle)
        self.store.ensure_path(path.rsplit("/", 1)[0])
        try:
            self.store.create(path, to_broker.encode())
        except NodeExists:
            self.store.set(path, to_broker.encode())
        self.unload(bundle)

    # -- internals ----------------------------------------------------------------------------

    def _load(self) -> BrokerLoad:
        owned = len(self.ownership.owned_bundles())
        return BrokerLoad(self.broker_address, owned, self._topics, self.service_url, self.web_url, *self.tls_urls)

    def _publish_load(self) -> None:
        if self.ownership.expired:
            return  # never write on an expired session
        try:
            self.registry.update(self._load())
        except NoNode:
            pass  # not registered (start() not called): there is no load node to update
        except SessionExpired:
            pass  # the session listener handles the loss

    def _bundles_lost(self, bundles: list[NamespaceBundle]) -> None:
        callback = self.on_lost
        if callback is not None:
            callback(bundles)
        self._publish_load()

    @staticmethod
    def _assignment_path(bundle: NamespaceBundle) -> str:
        ns = bundle.namespace
        return layout.bundle_assignment_path(ns.tenant, ns.namespace, bundle.lower, bundle.upper)

    def _assigned(self, bundle: NamespaceBundle) -> str | None:
        try:
            data, _ = self.store.get(self._assignment_path(bundle))
        except NoNode:
            return None
        return data.decode("utf-8", errors="replace")

    def _clear_assignment(self, bundle: NamespaceBundle) -> None:
        with contextlib.suppress(NoNode):  # no transfer pending
            self.store.delete(self._assignment_path(bundle))
