"""The broker registry: live brokers' ephemeral /loadbalance/brokers/<host:port> nodes, each holding
the broker's load and URLs (a `BrokerLoad`). Part of the metadata layout, so that the brokers that write it
and the proxy that reads it share it without the proxy importing the broker.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

from impl.metadata import layout
from impl.metadata.store import (
    MetadataError,
    MetadataStore,
    NodeExists,
    NoNode,
)


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
