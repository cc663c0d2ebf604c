"""One broker: the service, its listeners, its registration and ownership, its session.

The broker's identity is its web service's address (host:port), as in Pulsar, where a broker
is known by its advertised address and web service port. Its metadata session holds its ownership
nodes; when the session expires the broker stops writing at once (every topic is dropped
without a single metadata or bookie write: BookKeeper issue 4462), then continues on a new
session, acquiring bundles afresh through lookups (which fence the old ledgers).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from impl import heap
from impl.bookie.client.api import BookKeeperClient
from impl.bookie.client.connect import connect_bookkeeper
from impl.bookie.client.local_channel import LocalBookiesRegistry
from impl.bookie.client.placement import frame_limit
from impl.broker import namespaces, non_persistent
from impl.broker.bundles import NamespaceBundle
from impl.broker.errors import BookieFrameTooSmall, NamespaceNotInCluster, NotOwner, ServiceNotReady, TopicNotFound
from impl.broker.listener import PulsarListener, PulsarLookup
from impl.broker.load_manager import LoadManager
from impl.broker.service import ENTRY_ALLOWANCE, BrokerConfig, BrokerService, bookie_frame_for
from impl.broker.web import routes
from impl.metadata import layout
from impl.metadata.brokers import BrokerLoad
from impl.metadata.naming import TopicName
from impl.metadata.registry import BookieRegistry
from impl.metadata.renewal import SessionRenewer
from impl.metadata.store import ConnectionLoss, MetadataStore, NodeExists, NoNode, SessionExpired
from impl.trace import Tracer
from impl.web.server import WebServer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lookup:
    kind: str
    broker_address: str
    authoritative: bool


class Ownership:
    """What the service needs of ownership: lookups that acquire, namespace checks, live brokers."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def lookup(self, name: TopicName, authoritative: bool = False) -> Lookup:
        self._check_cluster(name)
        try:
            result = self.broker.load_manager.lookup(name, authoritative=authoritative)
        except namespaces.AdminError as e:
            raise TopicNotFound(f"{name}: {e}") from e
        return Lookup(result.kind, result.broker_address, result.authoritative)

    def _check_cluster(self, name: TopicName) -> None:
        """A namespace is served only by the clusters it is replicated to (Pulsar has no peer clusters
        here: a namespace elsewhere is an error, not a redirect)."""
        local = self.broker.cluster
        try:
            policies = namespaces.get_policies(
                self.broker.configuration_store, name.namespace_name, local_cluster=local
            )
        except namespaces.AdminError as e:
            raise TopicNotFound(f"{name}: {e}") from e
        if local not in policies.replication_clusters:
            raise NamespaceNotInCluster(
                f"namespace {name.namespace_name} is replicated to {', '.join(policies.replication_clusters)}, not to "
                f"this broker's cluster {local}; use a broker of one of those, or add {local} with "
                f"`admin namespaces set-clusters`"
            )

    def check_namespace(self, name: TopicName) -> None:
        self._check_cluster(name)
        bundle = self.broker.load_manager.bundle_of(name)
        if not self.broker.load_manager.ownership.is_owned(bundle):
            raise NotOwner(f"{name} is not owned by {self.broker.address} any more; look it up again")

    def live_brokers(self) -> list[str]:
        return sorted(self.broker.load_manager.registry.live_brokers())


class Broker:
    """Start with `start()`; `address` is where clients connect."""

    def __init__(
        self,
        connect_store: Callable[[], MetadataStore],
        config: BrokerConfig | None = None,
        host: str = "127.0.0.1",
        pulsar_port: int = 0,
        web_port: int = 0,
        bookie_request_timeout_s: float = 2.0,
        cluster: str = namespaces.DEFAULT_CLUSTER,
        tls_ports: tuple[int, int] = (0, 0),  # (pulsar+ssl://, https://) when config.tls is set; 0 = any free
        connect_configuration_store: Callable[[], MetadataStore] | None = None,  # None: the metadata store
        tracer: Tracer | None = None,  # the recorder of every BookKeeper client's writers and recovery ops
        local_bookies: LocalBookiesRegistry | None = None,  # bookies of this process, reached without gRPC
    ) -> None:
        self.connect_store = connect_store
        self.connect_configuration_store = connect_configuration_store
        self.tracer = tracer
        self.local_bookies = local_bookies
        self._session_lock = threading.Lock()
        self._stopped = threading.Event()
        self.config = config or BrokerConfig()
        self.bookie_request_timeout_s = bookie_request_timeout_s
        self.pulsar = PulsarListener(host, pulsar_port, self.config.max_message_size)
        self.cluster = cluster
        app = routes.app(self, self.config.security.authenticator)
        self.web = WebServer(app, host, web_port, name="broker")
        self.address = self.web.address  # bound above, so the identity is known before registering
        # With TLS, a second listener and web server serve the same broker encrypted (Pulsar's
        # brokerServicePortTls and webServicePortTls); the plain ones stay for internal calls.
        self.pulsar_tls: PulsarListener | None = None
        self.web_tls: WebServer | None = None
        if self.config.security.tls is not None:
            context = self.config.security.tls.server_context()
            self.pulsar_tls = PulsarListener(host, tls_ports[0], self.config.max_message_size, tls=context)
            self.web_tls = WebServer(app, host, tls_ports[1], name="broker-tls", tls=context)
        for listener in (self.pulsar, self.pulsar_tls):
            if listener is not None:
                listener.limit_connections(self.config.max_connections, self.config.max_connections_per_ip)
        self.store = connect_store()
        # The instance's configuration store (the /admin tree: clusters, tenants, namespaces), a session of
        # its own when it is another store; None when it is the metadata store itself.
        self._configuration_store: MetadataStore | None = None
        self._configuration_renewer: SessionRenewer | None = None
        if connect_configuration_store is not None:
            try:
                self._configuration_store = connect_configuration_store()
            except BaseException:
                self.store.close()  # no half-made broker keeps a session open
                raise
        # Its largest entry: new ensembles leave out bookies whose frame limit is below it.
        self.largest_entry = bookie_frame_for(self.config.max_message_size)
        self.bookkeeper: BookKeeperClient = connect_bookkeeper(
            self.store,
            request_timeout_s=bookie_request_timeout_s,
            tracer=tracer,
            largest_entry=self.largest_entry,
            local_bookies=local_bookies,
        )
        self.load_manager = LoadManager(
            self.store,
            self.address,
            on_lost=self._bundles_lost,
            service_url=self.pulsar.service_url,
            web_url=self.web.url,
            tls_urls=(self.service_url_tls, self.web_url_tls),
            configuration_store=lambda: self.configuration_store,
        )
        self.service = BrokerService(
            self.store,
            self.bookkeeper,
            Ownership(self),
            self.address,
            self.config,
            configuration_store=lambda: self.configuration_store,
            cluster=self.cluster,
        )
        self.service.load_non_persistent = functools.partial(non_persistent.load, self.service)
        self._service_urls: dict[str, tuple[str, str]] = {self.address: (self.service_url, self.service_url_tls)}
        # Every expiry is renewed, also a broker's that owned nothing: the ownership cache reports
        # losses only, and an unregistered broker would never be chosen again. Added after the load
        # manager's ownership cache listens (a store tells its listeners in order).
        self._renewer = SessionRenewer(f"broker {self.address}", connect_store, self._adopt_session)
        self._renewer.watch(self.store)
        if connect_configuration_store is not None and self._configuration_store is not None:
            self._configuration_renewer = SessionRenewer(
                f"broker {self.address} (configuration store)",
                connect_configuration_store,
                self._adopt_configuration_session,
            )
            self._configuration_renewer.watch(self._configuration_store)

    @property
    def configuration_store(self) -> MetadataStore:
        """Where the /admin tree lives: clusters, tenants, namespaces and their policies, partitioned topics."""
        return self.store if self._configuration_store is None else self._configuration_store

    def _adopt_configuration_session(self, store: MetadataStore) -> None:
        """The configuration store's new session (after the old one expired). Nothing of this broker's is
        ephemeral there (no ownership, no fencing), so nothing else is to be undone; until a new session is
        adopted (retried until it is), admin calls answer 503 (SessionExpired)."""
        with self._session_lock:
            if self._stopped.is_set():
                raise ServiceNotReady(f"broker {self.address} is stopping")
            old, self._configuration_store = self._configuration_store, store
            self.load_manager.configuration_reconnected()
        if old is not None:
            try:
                old.close()
            except Exception as e:
                log.debug("closing the expired configuration store session: %s", e)

    def cluster_data(self) -> namespaces.ClusterData:
        """This broker's cluster as it registers it when the instance does not know it yet."""
        return namespaces.ClusterData(self.web_url, self.web_url_tls, self.service_url, self.service_url_tls)

    def start(self) -> None:
        """Raises BookieFrameTooSmall (the broker stopped again) if a registered bookie cannot store
        its largest entry."""
        try:
            self.check_bookie_frames()
        except BookieFrameTooSmall:
            self.stop()
            raise
        namespaces.register_cluster(self.configuration_store, self.cluster, self.cluster_data())
        namespaces.ensure_default(self.configuration_store, self.cluster)
        self.load_manager.start()
        lookup = PulsarLookup(self.service, self.service_urls_of)
        self.pulsar.start(self.service, lookup)
        self.web.start()
        if self.pulsar_tls is not None and self.web_tls is not None:
            self.pulsar_tls.start(self.service, lookup)
            self.web_tls.start()
        self.leader()
        heap.settle_after_startup()
        log.info("broker %s started", self.address)

    def check_bookie_frames(self) -> None:
        """Refuse to serve messages that some registered bookie would refuse to store: every bookie's
        frame limit, as it published it (or the default assumed for one that did not), must take the
        broker's largest entry. Pulsar does not check this; its bookies refuse such an add late, when
        it is written. Bookies registering later are checked when an ensemble is chosen (placement)."""
        registry = BookieRegistry(self.store)
        bookies = sorted(
            registry.all_bookies(), key=lambda b: (frame_limit(b.netty_max_frame_size_bytes), str(b.bookie_id))
        )
        if not bookies or frame_limit(bookies[0].netty_max_frame_size_bytes) >= self.largest_entry:
            return
        smallest = bookies[0]
        frame = frame_limit(smallest.netty_max_frame_size_bytes)
        assumed = "" if smallest.netty_max_frame_size_bytes is not None else " (not published: the default assumed)"
        more = sum(frame_limit(b.netty_max_frame_size_bytes) < self.largest_entry for b in bookies) - 1
        lower = (
            f"lower the broker's --max-message-size to at most {frame - ENTRY_ALLOWANCE} or "
            if frame > ENTRY_ALLOWANCE
            else ""
        )
        raise BookieFrameTooSmall(
            f"bookie {smallest.bookie_id} takes entries of at most {frame} bytes (its nettyMaxFrameSizeBytes)"
            f"{assumed}{f' ({more} more bookies are too small as well)' if more else ''}, but this broker's max "
            f"message size (maxMessageSize) of {self.config.max_message_size} bytes makes entries of up to "
            f"{self.largest_entry} bytes (with {ENTRY_ALLOWANCE} bytes of entry metadata): {lower}raise the "
            f"bookies' --netty-max-frame-size-bytes to at least {self.largest_entry}"
        )

    @property
    def service_url(self) -> str:
        """Where Pulsar clients connect to this broker."""
        return self.pulsar.service_url

    @property
    def web_url(self) -> str:
        """The admin REST API, HTTP lookups, /metrics and the cluster view."""
        return self.web.url

    @property
    def service_url_tls(self) -> str:
        """pulsar+ssl://host:port when the broker serves TLS, else ""."""
        return self.pulsar_tls.service_url if self.pulsar_tls else ""

    @property
    def web_url_tls(self) -> str:
        """https://host:port when the broker serves TLS, else ""."""
        return self.web_tls.url if self.web_tls else ""

    def internal_headers(self) -> dict[str, str]:
        token = self.config.security.authenticator.internal_token() if self.config.security.authenticator else None
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _stop_listeners(self) -> None:
        for server in (self.pulsar, self.pulsar_tls, self.web, self.web_tls):
            if server is not None:
                server.stop()

    def live_brokers(self) -> dict[str, BrokerLoad]:
        return self.load_manager.registry.live_brokers()

    def leader(self) -> str | None:
        """The leader broker's address: whoever holds the ephemeral leader node; a broker that finds
        none takes it (Pulsar elects its leader the same way, through the metadata store)."""
        for _ in range(3):
            try:
                return self.store.get(layout.LOADBALANCE_LEADER)[0].decode()
            except NoNode:
                pass
            try:
                self.store.create(layout.LOADBALANCE_LEADER, self.address.encode(), ephemeral=True)
                return self.address
            except NodeExists:
                continue  # another broker won meanwhile: read it
            except (SessionExpired, ConnectionLoss):
                return None
        return None

    def service_urls_of(self, broker_address: str) -> tuple[str, str]:
        """A live broker's pulsar:// and pulsar+ssl:// URLs ("" when it serves no TLS), from its
        registration (cached: a broker's URLs never change)."""
        urls = self._service_urls.get(broker_address)
        if urls is None:
            load = self.load_manager.registry.live_brokers().get(broker_address)
            if load is None or not load.service_url:
                raise ServiceNotReady(f"broker {broker_address} has no registered Pulsar service URL; retry")
            urls = self._service_urls[broker_address] = (load.service_url, load.service_url_tls)
        return urls

    def _bundles_lost(self, bundles: list[NamespaceBundle]) -> None:
        """Called on the store's thread: drop the topics now, renew the session elsewhere."""
        paths = {b.path for b in bundles}
        dropped = self.service.unload_topics(
            lambda name: self.load_manager.bundle_of(name).path in paths, graceful=False
        )
        log.warning("broker %s lost bundles %s; dropped topics %s", self.address, bundles, dropped)

    def _adopt_session(self, store: MetadataStore) -> None:
        """The renewer's new session (its listener is already added): the ownership cache, the
        BookKeeper client and the registration move to it; nothing of the old session is reused.
        Raises if any step fails: the renewer closes `store` and tries again on another session."""
        with self._session_lock:
            if self._stopped.is_set():
                raise ServiceNotReady(f"broker {self.address} is stopping")
            # The old session is dead (or this is a retry after an abandoned one): drop every belief
            # of it now, whichever listener ran first. Idempotent.
            self.load_manager.ownership.abandon_session()
            bookkeeper = connect_bookkeeper(
                store,
                request_timeout_s=self.bookie_request_timeout_s,
                tracer=self.tracer,
                largest_entry=self.largest_entry,
                local_bookies=self.local_bookies,
            )
            try:
                self.load_manager.reconnect(store)  # the ownership cache's session, and register again
            except BaseException:
                self.load_manager.ownership.abandon_session()
                bookkeeper.close()
                raise
            old_store, old_bookkeeper = self.store, self.bookkeeper
            self.store, self.bookkeeper = store, bookkeeper
            self.service.adopt_session(store, bookkeeper)  # its topics' store, and the schema registry's
            for closing in (old_bookkeeper.close, old_store.close):
                try:
                    closing()
                except Exception as e:  # the old session is gone anyway; nothing is written with it
                    log.debug("closing the expired session's clients: %s", e)

    @property
    def renewing_session(self) -> bool:
        """The metadata session expired and no new one is in use yet (the broker is unregistered)."""
        return self._renewer.renewing or self.load_manager.ownership.expired

    def unhealthy(self) -> str | None:
        """Why writes cannot succeed now, or None: the metadata session is being renewed (the broker is
        unregistered and owns nothing), or fewer writable bookies are registered than an ensemble needs."""
        if self._stopped.is_set():
            return f"broker {self.address} is stopping"
        if self.renewing_session:
            return f"broker {self.address} lost its metadata session and is opening a new one"
        if self.address not in self.load_manager.registry.live_brokers():
            return f"broker {self.address} is not registered in the metadata store"
        need = self.config.managed_ledger.ensemble
        have = len(self.bookkeeper.registry.writable_bookies())
        if have < need:
            return f"need {need} writable bookies, have {have}"
        return None

    def expire_session(self) -> None:
        """Fault injection: have the metadata store expire this broker's session."""
        self.store.expire_session()

    def expire_configuration_session(self) -> None:
        """Fault injection: have the configuration store expire this broker's session there."""
        if self._configuration_store is None:
            raise ValueError("this broker's configuration store is its metadata store; use expire_session")
        self._configuration_store.expire_session()

    def stats(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "service_url": self.service_url,
            "web_url": self.web_url,
            "service_url_tls": self.service_url_tls,
            "web_url_tls": self.web_url_tls,
            "bundles": [str(b) for b in self.load_manager.ownership.owned_bundles()],
            "topics": sorted(self.service.topics),
        }

    def crash(self) -> None:
        """Fault injection in one process (standalone): die as a killed broker does. Nothing more is
        written; the session ends, so its ephemeral nodes go at once (a real crash waits for the timeout)."""
        self._stopped.set()
        self._renewer.stop()
        if self._configuration_renewer is not None:
            self._configuration_renewer.stop()
        self._stop_listeners()
        self.service.unload_topics(lambda _n: True, graceful=False)
        try:
            self.store.expire_session()
        except Exception as e:  # already expired or closed: the ephemerals are gone either way
            log.debug("expiring the crashed broker's session: %s", e)
        self.service.close()
        self.bookkeeper.close()
        self.store.close()
        self._close_configuration_store()

    def _close_configuration_store(self) -> None:
        if self._configuration_store is not None:
            try:
                self._configuration_store.close()
            except Exception as e:  # closing a session that expired: nothing is left to release
                log.debug("closing the configuration store session: %s", e)

    def stop(self) -> None:
        self._stopped.set()
        self._renewer.stop()
        if self._configuration_renewer is not None:
            self._configuration_renewer.stop()
        self._stop_listeners()
        self.service.close()
        try:
            self.load_manager.close()
        except Exception as e:  # an expired session cannot unregister; its ephemerals are gone already
            log.warning("unregistering broker %s: %s", self.address, e)
        self.bookkeeper.close()
        self.store.close()
        self._close_configuration_store()
