"""The broker registry: live brokers' ephemeral /loadbalance/brokers/<host:port> nodes, each holding
the broker's load and URLs (a `BrokerLoad`).
"""

from __future__ import annotations

import contextlib

from impl.broker.lookup import BrokerLoad
from impl.metadata import layout
from impl.metadata.store import (
    MetadataError,
    MetadataStore,
    NodeExists,
    NoNode,
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
