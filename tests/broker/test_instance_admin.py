"""Two brokers of two clusters sharing one configuration store (real processes, real ZooKeeper): the
clusters REST API, tenants' allowed clusters, namespaces' replication clusters, and the /admin tree
seen alike from either cluster while each cluster's own metadata store holds none of it.

Both clusters and the configuration store live in the test session's ZooKeeper under roots of their own
(Pulsar allows the configuration store to be the same ZooKeeper under another root)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulsar
import pytest

from impl.broker.web.admin_client import AdminClient
from impl.metadata.store import MetadataStore
from impl.metadata.url import connect
from impl.metadata.zkserver import ZooKeeperServer
from impl.web.http import HttpError
from tests.processes import ROOT, start_listening

if TYPE_CHECKING:
    from impl.broker.broker import Broker

pytestmark = pytest.mark.zookeeper


@dataclass
class Node:
    cluster: str
    metadata: str
    proc: subprocess.Popen[str]
    service_url: str
    web_url: str

    @property
    def admin(self) -> AdminClient:
        return AdminClient(self.web_url, timeout_s=20)


@dataclass
class Instance:
    configuration_store: str
    east: Node
    west: Node


@pytest.fixture(scope="module")
def instance(zookeeper: ZooKeeperServer) -> Iterator[Instance]:
    uid = uuid.uuid4().hex[:8]
    zk = zookeeper.connect_string
    config = f"zk://{zk}/cfg30-config-{uid}"
    nodes: list[Node] = []
    try:
        for cluster in ("east", "west"):
            metadata = f"zk://{zk}/cfg30-{cluster}-{uid}"
            proc, _, banner = start_listening(
                ["broker", "--metadata", metadata, "--configuration-store", config, "--cluster", cluster]
            )
            found = re.search(r"Pulsar clients: (pulsar://\S+); web service: (http://\S+)", banner)
            assert found, banner
            nodes.append(Node(cluster, metadata, proc, found.group(1), found.group(2)))
        yield Instance(config, nodes[0], nodes[1])
    finally:
        for node in nodes:
            node.proc.terminate()
        for node in nodes:
            try:
                node.proc.wait(20)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait()


def status_of(admin: AdminClient, method: str, path: str, body: Any = None) -> int:
    try:
        admin.call(method, path, body)
    except HttpError as e:
        assert e.reason, f"{method} {path} answered {e.status} without a reason"
        return e.status
    return 204


def test_each_broker_registers_its_cluster(instance: Instance) -> None:
    for node in (instance.east, instance.west):
        assert node.admin.call("GET", "/admin/v2/clusters") == ["east", "west"]
    east = instance.west.admin.call("GET", "/admin/v2/clusters/east")  # asked in the other cluster
    assert east["serviceUrl"] == instance.east.web_url
    assert east["brokerServiceUrl"] == instance.east.service_url
    assert east["serviceUrlTls"] == east["brokerServiceUrlTls"] == ""
    # The public tenant allows every cluster that joined; public/default stays its creator's.
    assert instance.east.admin.call("GET", "/admin/v2/tenants/public")["allowedClusters"] == ["east", "west"]


def test_cluster_crud_and_refusals(instance: Instance) -> None:
    east, west = instance.east.admin, instance.west.admin
    data = {"serviceUrl": "http://127.0.0.1:1", "brokerServiceUrl": "pulsar://127.0.0.1:2"}
    east.call("PUT", "/admin/v2/clusters/north", data)
    assert west.call("GET", "/admin/v2/clusters/north") == data | {
        "serviceUrlTls": "",
        "brokerServiceUrlTls": "",
        "brokerClientTlsEnabled": False,
    }
    malformed = [
        [],
        {},
        {"serviceUrl": 8080},
        {"serviceUrl": "ftp://127.0.0.1:1"},
        {"serviceUrl": "http://127.0.0.1:1", "brokerServiceUrl": "http://127.0.0.1:2"},
    ]
    for body in malformed:
        assert status_of(east, "PUT", "/admin/v2/clusters/south", body) == 400, body
        assert status_of(east, "POST", "/admin/v2/clusters/north", body) == 400, body
    assert status_of(east, "PUT", "/admin/v2/clusters/south") == 400  # no body: no ClusterData either
    assert status_of(east, "GET", "/admin/v2/clusters/south") == 404  # nothing was made
    assert status_of(east, "PUT", "/admin/v2/clusters/north", {"serviceUrl": "http://127.0.0.1:9"}) == 409
    assert status_of(east, "PUT", "/admin/v2/clusters/bad%20name", data) == 412
    assert status_of(east, "POST", "/admin/v2/clusters/nowhere", data) == 404
    assert status_of(east, "DELETE", "/admin/v2/clusters/nowhere") == 404
    assert status_of(east, "GET", "/admin/v2/clusters/nowhere") == 404
    assert west.call("GET", "/admin/v2/clusters/north")["serviceUrl"] == "http://127.0.0.1:1"  # unchanged
    east.call("POST", "/admin/v2/clusters/north", {"serviceUrl": "http://127.0.0.1:3"})
    assert west.call("GET", "/admin/v2/clusters/north")["serviceUrl"] == "http://127.0.0.1:3"
    west.call("DELETE", "/admin/v2/clusters/north")
    assert east.call("GET", "/admin/v2/clusters") == ["east", "west"]


def test_tenants_and_namespaces_are_shared_by_the_clusters(instance: Instance) -> None:
    east, west = instance.east.admin, instance.west.admin
    assert status_of(east, "PUT", "/admin/v2/tenants/nowhere-co", {"allowedClusters": ["east", "asia"]}) == 412
    assert "nowhere-co" not in west.call("GET", "/admin/v2/tenants")
    east.call("PUT", "/admin/v2/tenants/acme", {"adminRoles": [], "allowedClusters": ["east", "west"]})
    assert west.call("GET", "/admin/v2/tenants/acme")["allowedClusters"] == ["east", "west"]
    east.call("PUT", "/admin/v2/namespaces/acme/orders")
    # Created through east: served by east alone until told otherwise, and so seen from west.
    assert west.call("GET", "/admin/v2/namespaces/acme") == ["acme/orders"]
    assert west.call("GET", "/admin/v2/namespaces/acme/orders/replication") == ["east"]
    assert west.call("GET", "/admin/v2/namespaces/acme/orders")["replication_clusters"] == ["east"]
    west.call("PUT", "/admin/v2/persistent/acme/orders/p/partitions", 3)
    assert east.call("GET", "/admin/v2/persistent/acme/orders/p/partitions") == {"partitions": 3}
    assert east.call("GET", "/admin/v2/persistent/acme/orders/partitioned") == ["persistent://acme/orders/p"]
    # Pulsar's binary protocol answers from the configuration store too (partitioned-topic metadata).
    client = pulsar.Client(instance.east.service_url, operation_timeout_seconds=10)
    try:
        assert len(client.get_topic_partitions("persistent://acme/orders/p")) == 3
    finally:
        client.close()
    # Neither cluster's own metadata store holds any of it.
    for node in (instance.east, instance.west):
        with connect(node.metadata) as own:
            assert own.exists("/admin/policies/acme") is None
            assert own.exists("/admin/clusters") is None
    with connect(instance.configuration_store) as config:
        assert json.loads(config.get("/admin/policies/acme/orders")[0])["replication_clusters"] == ["east"]


def test_replication_clusters_are_checked_and_nothing_changes_on_refusal(instance: Instance) -> None:
    east, west = instance.east.admin, instance.west.admin
    east.call("PUT", "/admin/v2/tenants/solo", {"allowedClusters": ["east"]})
    east.call("PUT", "/admin/v2/namespaces/solo/ns")
    path = "/admin/v2/namespaces/solo/ns/replication"
    assert status_of(west, "POST", path, ["east", "asia"]) == 404  # no such cluster
    assert status_of(west, "POST", path, ["east", "west"]) == 403  # not allowed by the tenant
    assert status_of(west, "POST", path, []) == 412
    assert status_of(west, "POST", path, "east") == 400
    assert status_of(west, "POST", path, [1]) == 400
    assert status_of(west, "POST", "/admin/v2/namespaces/solo/none/replication", ["east"]) == 404
    assert east.call("GET", path) == ["east"]
    # Creating a namespace checks its replication clusters the same way.
    assert status_of(west, "PUT", "/admin/v2/namespaces/solo/other", {"replication_clusters": ["west"]}) == 403
    assert "solo/other" not in east.call("GET", "/admin/v2/namespaces/solo")

    west.call("POST", "/admin/v2/tenants/solo", {"allowedClusters": ["east", "west"]})
    west.call("POST", path, ["east", "west"])
    assert east.call("GET", path) == ["east", "west"]
    # A cluster in use: not deleted, not dropped from the tenant.
    assert status_of(east, "DELETE", "/admin/v2/clusters/west") == 412
    assert status_of(east, "POST", "/admin/v2/tenants/solo", {"allowedClusters": ["east"]}) == 412
    assert east.call("GET", "/admin/v2/clusters") == ["east", "west"]
    assert east.call("GET", "/admin/v2/tenants/solo")["allowedClusters"] == ["east", "west"]
    west.call("POST", path, ["east"])
    assert east.call("GET", path) == ["east"]


def test_the_admin_cli_speaks_clusters_and_replication(instance: Instance) -> None:
    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pulsar_ref.cli", "admin", "--admin-url", instance.east.web_url, *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )

    made = admin("clusters", "create", "cli-c", "--url", "http://127.0.0.1:5", "--broker-url", "pulsar://127.0.0.1:6")
    assert made.returncode == 0, made.stderr
    assert json.loads(admin("clusters", "list").stdout) == ["cli-c", "east", "west"]
    assert json.loads(admin("clusters", "get", "cli-c").stdout)["brokerServiceUrl"] == "pulsar://127.0.0.1:6"
    bad = admin("clusters", "update", "cli-c", "--url", "pulsar://nope")
    assert bad.returncode == 2 and "error (400)" in bad.stderr
    assert admin("tenants", "create", "cli-t", "--allowed-clusters", "east,cli-c").returncode == 0
    assert admin("namespaces", "create", "cli-t/ns").returncode == 0
    assert admin("namespaces", "set-clusters", "cli-t/ns", "--clusters", "east,cli-c").returncode == 0
    assert json.loads(admin("namespaces", "get-clusters", "cli-t/ns").stdout) == ["east", "cli-c"]
    in_use = admin("clusters", "delete", "cli-c")
    assert in_use.returncode == 2 and "error (412)" in in_use.stderr and "cli-t/ns" in in_use.stderr
    assert admin("namespaces", "set-clusters", "cli-t/ns", "--clusters", "east").returncode == 0
    assert admin("tenants", "update", "cli-t", "--allowed-clusters", "east").returncode == 0
    assert admin("clusters", "delete", "cli-c").returncode == 0


def test_an_expired_configuration_session_is_renewed_and_ownership_stays(zookeeper: ZooKeeperServer) -> None:
    """The configuration store's session ends: the broker opens a new one there and serves the admin
    API again; its metadata session, which holds its registration and ownership, is not touched."""
    from impl.broker.broker import Broker
    from tests.waiting import wait_for

    uid = uuid.uuid4().hex[:8]
    zk = zookeeper.connect_string
    metadata, config = f"zk://{zk}/cfg30-own-{uid}", f"zk://{zk}/cfg30-conf-{uid}"
    broker = Broker(
        lambda: connect(metadata, session_timeout_s=4),
        cluster="solo",
        connect_configuration_store=lambda: connect(config, session_timeout_s=4),
    )
    try:
        broker.start()
        own_session, old = broker.store.session_id, broker.configuration_store
        broker.expire_configuration_session()
        wait_for(lambda: broker.configuration_store is not old, "a new configuration store session", 20)
        assert AdminClient(broker.web_url).call("GET", "/admin/v2/clusters") == ["solo"]
        assert broker.store.session_id == own_session
        assert set(broker.live_brokers()) == {broker.address}
    finally:
        broker.stop()


def test_a_broker_that_owns_nothing_renews_its_expired_metadata_session(zookeeper: ZooKeeperServer) -> None:
    """An expiry takes the broker's registration with it. A broker owning no bundle loses no bundle, so
    nothing but the expiry itself can tell it to renew: it must, or no lookup would choose it again."""
    from impl.broker.broker import Broker
    from tests.waiting import wait_for

    metadata = f"zk://{zookeeper.connect_string}/idle-{uuid.uuid4().hex[:8]}"
    broker = Broker(lambda: connect(metadata, session_timeout_s=4), cluster="solo")
    try:
        broker.start()
        assert broker.load_manager.ownership.owned_bundles() == []
        old = broker.store
        broker.expire_session()
        wait_for(lambda: broker.store is not old, "a new metadata session", 20)
        wait_for(lambda: broker.address in broker.live_brokers(), "the broker registered again", 20)
        assert not broker.load_manager.ownership.expired
        found = AdminClient(broker.web_url).call("GET", "/lookup/v2/topic/persistent/public/default/idle")
        assert found["brokerUrl"] == broker.service_url  # a lookup acquires the bundle on the new session
        assert len(broker.load_manager.ownership.owned_bundles()) == 1
    finally:
        broker.stop()


def _renewed(broker: Broker, old: MetadataStore) -> Callable[[], bool]:
    return lambda: broker.store is not old and not broker.renewing_session


def test_a_broker_renews_however_many_sessions_expire_in_a_row(zookeeper: ZooKeeperServer) -> None:
    """Issue 49: the renewal's own new session expired too and the thread that renewed died, leaving the
    broker unregistered for good. Here the next two sessions the broker opens are expired by ZooKeeper
    before the broker can use them (before any listener is on them, the race that was lost), then the
    session it finally keeps is expired once more: each time it must end up registered and serving."""
    from impl.broker.broker import Broker
    from tests.waiting import wait_for

    metadata = f"zk://{zookeeper.connect_string}/in-a-row-{uuid.uuid4().hex[:8]}"
    doomed = [0]  # how many of the next sessions opened are expired on arrival

    def connect_store() -> MetadataStore:
        store = connect(metadata, session_timeout_s=4)
        if doomed[0] > 0:
            doomed[0] -= 1
            store.expire_session()  # a real expiry, by the server, of the session just opened
        return store

    broker = Broker(connect_store, cluster="solo")
    try:
        broker.start()
        for round_, expired_on_arrival in enumerate((2, 0)):
            doomed[0] = expired_on_arrival
            old, failures = broker.store, broker._renewer.failures
            broker.expire_session()
            wait_for(_renewed(broker, old), "a new live session", 30)
            wait_for(lambda: broker.address in broker.live_brokers(), "the broker registered again", 20)
            assert doomed[0] == 0
            assert broker._renewer.failures - failures >= expired_on_arrival, round_
            assert broker.unhealthy() is None or "bookies" in (broker.unhealthy() or "")
            found = AdminClient(broker.web_url).call("GET", f"/lookup/v2/topic/persistent/public/default/row-{round_}")
            assert found["brokerUrl"] == broker.service_url
    finally:
        broker.stop()


def test_a_configuration_session_expired_on_arrival_is_renewed_again(zookeeper: ZooKeeperServer) -> None:
    """The configuration store's renewal used to be tried once: a new session that failed left the admin API
    answering 503 for good. Here the first new session is expired before the broker can use it."""
    from impl.broker.broker import Broker
    from tests.waiting import wait_for

    uid = uuid.uuid4().hex[:8]
    zk = zookeeper.connect_string
    metadata, config = f"zk://{zk}/cfg-row-own-{uid}", f"zk://{zk}/cfg-row-conf-{uid}"
    doomed = [0]

    def connect_config() -> MetadataStore:
        store = connect(config, session_timeout_s=4)
        if doomed[0] > 0:
            doomed[0] -= 1
            store.expire_session()
        return store

    broker = Broker(
        lambda: connect(metadata, session_timeout_s=4), cluster="solo", connect_configuration_store=connect_config
    )
    try:
        broker.start()
        old = broker.configuration_store
        doomed[0] = 1
        broker.expire_configuration_session()
        wait_for(lambda: doomed[0] == 0 and broker.configuration_store is not old, "a new configuration session", 30)
        wait_for(
            lambda: _answers(broker.web_url, "/admin/v2/clusters") == ["solo"], "the admin API to answer again", 30
        )
    finally:
        broker.stop()


def _answers(web_url: str, path: str) -> Any:
    try:
        return AdminClient(web_url).call("GET", path)
    except HttpError:
        return None
