"""A workload across the clusters of an instance (issue 30, docs/geo-replication.md).

The run's topics live in a namespace replicated to every cluster, with de-duplication on (or off, to
watch at-least-once). Every operation goes to one cluster, recorded as its `cluster`; after the
faults heal, the run waits until every replicator has caught up and reads every topic in every
cluster. The audit then checks each cluster's log as before, and what replication promises across them
(docs/history.md, "Clusters").

`InstanceNodes` lets the nemesis (impl/workload/nemesis.py) act on an instance as on one cluster: nodes
are named `<cluster>/<node>`, and each cluster has one more node, `<cluster>/brokers`, standing for
all of its brokers at once (the faults kill-brokers and pause-brokers: a whole remote side goes away).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from impl.broker.web.admin_client import AdminClient
from impl.cluster.deployment import AnyNode, Cluster, ClusterError
from impl.cluster.instance import Instance
from impl.workload.operations import Credentials

SEPARATOR = "/"
ALL_BROKERS = "brokers"  # the node name standing for every broker of a cluster


def admin(url: str, credentials: Credentials) -> AdminClient:
    from impl.security.tls import client_context

    tls = client_context(credentials.tls_trust_certs_file) if credentials.tls_trust_certs_file else None
    return AdminClient(url, timeout_s=10.0, token=credentials.token, tls=tls)


def create_replicated_namespace(
    admin_url: str, namespace: str, clusters: list[str], deduplication: bool, credentials: Credentials
) -> None:
    """The run's namespace, replicated to `clusters` (set-up, not an operation of the history). The tenant
    must allow them all: `public` allows every cluster whose broker started in the instance."""
    client = admin(admin_url, credentials)
    with contextlib.suppress(Exception):  # it exists: an earlier try reached the broker
        client.call("PUT", f"/admin/v2/namespaces/{namespace}")
    client.call("POST", f"/admin/v2/namespaces/{namespace}/replication", clusters)
    client.call("POST", f"/admin/v2/namespaces/{namespace}/deduplication", deduplication)


def replication_behind(admin_url: str, topic: str, credentials: Credentials) -> int | None:
    """Entries the topic's replicators in this cluster have not had acknowledged by their remotes (None: the
    stats cannot be read now, e.g. the topic is moving)."""
    path = topic.replace("persistent://", "persistent/", 1)
    try:
        stats = admin(admin_url, credentials).call("GET", f"/admin/v2/{path}/stats")
    except Exception:
        return None
    return sum(int(r.get("replicationBacklog", 0)) for r in stats.get("replication", {}).values())


def wait_replicated(
    admin_urls: dict[str, str],
    topics: list[str],
    credentials: Credentials,
    timeout_s: float,
    progress: Callable[[str], None],
) -> list[str]:
    """Wait until every topic's replicators in every cluster have caught up; returns "<cluster> <topic>" for
    those that had not when `timeout_s` ran out (their final reads may then miss replicated values)."""
    deadline = time.monotonic() + timeout_s
    behind = [(c, t) for c in admin_urls for t in topics]
    while True:
        behind = [(c, t) for c, t in behind if replication_behind(admin_urls[c], t, credentials) != 0]
        if not behind or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if behind:
        progress(f"replication did not catch up within {timeout_s:.0f}s on {len(behind)} topics")
    else:
        progress("replication caught up in every cluster")
    return [f"{c} {t}" for c, t in behind]


class AllBrokers:
    """Every broker of one cluster as one node: a fault on it hits them all."""

    role = ALL_BROKERS

    def __init__(self, name: str, cluster: Cluster) -> None:
        self.name = name
        self.cluster = cluster

    def _brokers(self) -> list[AnyNode]:
        return self.cluster.nodes("broker")

    def pid(self) -> int | None:
        pids = [b.pid() for b in self._brokers()]
        return None if None in pids or not pids else pids[0]

    def paused(self) -> bool:
        return any(b.paused() for b in self._brokers())


class _Renamed:
    """A node of one cluster under its instance-wide name."""

    def __init__(self, name: str, node: AnyNode) -> None:
        self.name = name
        self.node = node
        self.role = node.role

    def pid(self) -> int | None:
        return self.node.pid()

    def paused(self) -> bool:
        return self.node.paused()


class InstanceNodes:
    """What the nemesis needs of a cluster, over every cluster of an instance (see the module docstring)."""

    topology = "instance"

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.directory: Path = instance.directory
        self.parts = dict(instance.parts())
        self.metadata_url = "zk://"  # every cluster of an instance keeps its metadata in ZooKeeper

    def _split(self, name: str) -> tuple[Cluster, str]:
        cluster, _, node = name.partition(SEPARATOR)
        if cluster not in self.parts or not node:
            raise ClusterError(f"no node {name!r} in the instance; names are <cluster>/<node>")
        return self.parts[cluster], node

    def nodes(self, role: str | None = None) -> list[Any]:
        found: list[Any] = []
        for cluster_name, cluster in self.parts.items():  # the configuration store's ZooKeeper too
            found += [_Renamed(f"{cluster_name}{SEPARATOR}{n.name}", n) for n in cluster.nodes()]
            if cluster.nodes("broker"):
                found.append(AllBrokers(f"{cluster_name}{SEPARATOR}{ALL_BROKERS}", cluster))
        return [n for n in found if role is None or n.role == role]

    def node(self, name: str) -> Any:
        cluster, node = self._split(name)
        return AllBrokers(name, cluster) if node == ALL_BROKERS else _Renamed(name, cluster.node(node))

    def can_expire(self, node: Any) -> bool:
        if isinstance(node, AllBrokers):
            return False
        cluster, _ = self._split(node.name)
        return cluster.can_expire(node.node)

    def bundles_owned(self, names: list[str]) -> dict[str, list[str]]:
        owned: dict[str, list[str]] = {}
        for name in names:
            cluster, node = self._split(name)
            with contextlib.suppress(ClusterError):
                owned[name] = (cluster.bundles_owned([node]) or {}).get(node, [])
        return owned

    def registered(self, name: str) -> bool:
        cluster, node = self._split(name)
        if node == ALL_BROKERS:
            return all(cluster.registered(b.name) for b in cluster.nodes("broker"))
        return cluster.registered(node)

    def _each(self, name: str, act: Callable[[Cluster, str], int | None], wanted: Callable[[AnyNode], bool]) -> int:
        cluster, node = self._split(name)
        if node != ALL_BROKERS:
            return act(cluster, node) or 0
        last = 0
        for broker in cluster.nodes("broker"):
            if wanted(broker):
                last = act(cluster, broker.name) or last
        return last

    def kill(self, name: str) -> int:
        return self._each(name, lambda c, n: c.kill(n), lambda b: b.pid() is not None)

    def pause(self, name: str) -> int:
        return self._each(name, lambda c, n: c.pause(n), lambda b: b.pid() is not None and not b.paused())

    def resume(self, name: str) -> int:
        return self._each(name, lambda c, n: c.resume(n), lambda b: b.paused())

    def start(self, name: str, timeout_s: float = 60.0) -> None:
        def start(c: Cluster, n: str) -> None:
            c.start(n, timeout_s)

        self._each(name, start, lambda b: b.pid() is None)

    def restart(self, name: str, timeout_s: float = 60.0) -> None:
        def restart(c: Cluster, n: str) -> None:
            c.restart(n, timeout_s)

        self._each(name, restart, lambda _b: True)

    def expire_session(self, name: str) -> int:
        cluster, node = self._split(name)
        return cluster.expire_session(node)
