"""What the proxy knows of the cluster: the live brokers, from their registrations in the metadata
store (each with its pulsar:// and http:// URLs), and the answers to lookups, partition counts and
namespace listings, asked of the brokers' web services (impl/broker/web/), any broker that answers.
The proxy keeps nothing else: a restarted proxy knows as much as before."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from urllib.parse import quote

from impl.metadata.brokers import BrokerLoad, BrokerRegistry
from impl.metadata.naming import TopicName
from impl.metadata.store import ConnectionLoss, MetadataStore, SessionExpired
from impl.web import client
from impl.web.http import HttpError

TIMEOUT_S = 10.0


class NoBroker(Exception):
    """No live broker answered."""


class BrokerDirectory:
    """`connect` opens a metadata session; an expired one is replaced at the next read."""

    def __init__(self, connect: Callable[[], MetadataStore]) -> None:
        self.connect = connect
        self.store = connect()
        self._lock = threading.Lock()

    def brokers(self) -> list[BrokerLoad]:
        try:
            loads = BrokerRegistry(self.store).live_brokers()
        except (SessionExpired, ConnectionLoss):
            with self._lock:
                stale, self.store = self.store, self.connect()
            with contextlib.suppress(Exception):  # the old session is gone either way
                stale.close()
            loads = BrokerRegistry(self.store).live_brokers()
        return [load for _, load in sorted(loads.items())]

    def close(self) -> None:
        self.store.close()

    def broker_addresses(self) -> dict[str, str]:
        """Every address a lookup may give a client (host:port of a live broker's pulsar:// or
        pulsar+ssl:// listener) -> the pulsar:// host:port the proxy connects to: the only places it does."""
        addresses: dict[str, str] = {}
        for b in self.brokers():
            if b.service_url:
                plain = _host_port(b.service_url)
                addresses[plain] = plain
                if b.service_url_tls:
                    addresses[_host_port(b.service_url_tls)] = plain
        return addresses

    def web_urls(self) -> list[str]:
        return [b.web_url for b in self.brokers() if b.web_url]

    def call(self, path: str, headers: dict[str, str] | None = None) -> object:
        """GET `path` from the first live broker that answers (a 307 to the owner is followed);
        `headers`: the client's credentials, so the brokers authorize the client's role."""
        urls = self.web_urls()
        if not urls:
            raise NoBroker("no live broker is registered in the metadata store")
        failure: HttpError | None = None
        for url in urls:
            try:
                return client.call("GET", url + path, timeout_s=TIMEOUT_S, headers=headers)
            except client.Unreachable as e:
                failure = e
            except HttpError as e:
                if e.status < 500:
                    raise  # the brokers' answer (404, 412, ...): another broker would say the same
                failure = e
        raise NoBroker(f"no broker answered {path}: {failure}")

    def lookup(self, topic: str, headers: dict[str, str] | None = None) -> tuple[str, str]:
        """The pulsar:// and pulsar+ssl:// URLs of the broker that owns (or now takes) the topic; a
        broker without TLS gets its pulsar:// address under the TLS scheme (the proxy reaches it in
        plain text either way)."""
        name = TopicName.parse(topic)
        found = self.call(f"/lookup/v2/topic/{_path(name)}", headers)
        if not isinstance(found, dict) or not found.get("brokerUrl"):
            raise NoBroker(f"the lookup of {name} gave no broker URL: {found!r}")
        url = str(found["brokerUrl"])
        return url, str(found.get("brokerUrlTls") or "") or f"pulsar+ssl://{_host_port(url)}"

    def partitions(self, topic: str, headers: dict[str, str] | None = None) -> int:
        name = TopicName.parse(topic)
        found = self.call(f"/admin/v2/{_path(name)}/partitions?checkAllowAutoCreation=true", headers)
        return int(found["partitions"]) if isinstance(found, dict) else 0

    def topics(self, namespace: str, headers: dict[str, str] | None = None, mode: str = "PERSISTENT") -> list[str]:
        """The namespace's topics of the mode (PERSISTENT, NON_PERSISTENT, ALL), as a broker lists them."""
        tenant, _, ns = namespace.partition("/")
        path = f"/admin/v2/namespaces/{quote(tenant, safe='')}/{quote(ns, safe='')}/topics?mode={quote(mode)}"
        found = self.call(path, headers)
        return [str(t) for t in found] if isinstance(found, list) else []


def _host_port(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


def _path(name: TopicName) -> str:
    return f"{name.domain}/{name.tenant}/{name.namespace_portion}/{quote(name.local_name, safe='')}"
