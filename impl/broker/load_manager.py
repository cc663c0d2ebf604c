"""One broker's load manager: registers the broker, answers lookups with the pure decision of
impl/broker/lookup.py over the ownership cache and the registry, unloads and transfers bundles.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

from impl.broker import namespaces
from impl.broker.bundles import NamespaceBundle, bundle_for
from impl.broker.lookup import LookupFailed, LookupResult, NoBrokerAvailable, decide_lookup
from impl.broker.ownership import LostCallback, OwnershipCache
from impl.metadata import layout
from impl.metadata.brokers import BrokerLoad, BrokerRegistry
from impl.metadata.naming import NamespaceName, TopicName
from impl.metadata.store import (
    BadVersion,
    MetadataStore,
    NodeExists,
    NoNode,
    SessionExpired,
    WatchedEvent,
)

log = logging.getLogger(__name__)


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
        configuration_store: Callable[[], MetadataStore] | None = None,  # namespaces' policies; default `store`
    ) -> None:
        self._configuration_store = configuration_store
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

    @property
    def configuration_store(self) -> MetadataStore:
        """Where namespaces' policies are read: the instance's configuration store (docs/geo-replication.md)."""
        return self.store if self._configuration_store is None else self._configuration_store()

    def configuration_reconnected(self) -> None:
        """The configuration store's session was renewed: the bundle counts' watches died with the old one."""
        self._forget_bundle_counts()

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
            count = namespaces.get_policies(
                self.configuration_store, name.namespace_name, watch=self._policies_changed
            ).bundles
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
        namespaces.get_policies(self.configuration_store, name.namespace_name)

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
