"""Clusters in the configuration store and namespaces' replication clusters (impl/broker/namespaces.py):
ClusterData, create/get/update/delete, what keeps a cluster from being deleted, the replication
clusters' checks, and nodes written before replication clusters existed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from impl.broker import namespaces as ns
from impl.metadata import layout
from impl.metadata.naming import InvalidNamespaceName
from impl.metadata.store import MetadataStore
from impl.metadata.url import connect as connect_url

EU = ns.ClusterData("http://127.0.0.1:8080", "", "pulsar://127.0.0.1:6650", "")
US = ns.ClusterData("http://127.0.0.1:8081", "https://127.0.0.1:8443", "pulsar://127.0.0.1:6651", "")


@pytest.fixture(params=["memory", pytest.param("zk", marks=pytest.mark.zookeeper)])
def store(request: pytest.FixtureRequest) -> Iterator[MetadataStore]:
    name = f"clusters-{uuid.uuid4().hex}"
    if request.param == "memory":
        url = f"memory://{name}"
    else:
        url = f"zk://{request.getfixturevalue('zookeeper').connect_string}/{name}"
    store = connect_url(url)
    try:
        yield store
    finally:
        store.close()
        if request.param == "memory":
            from impl.metadata.memory import forget_server

            forget_server(name)


def test_cluster_data_is_pulsars_json() -> None:
    raw = json.loads(US.to_json())
    assert raw == {
        "serviceUrl": "http://127.0.0.1:8081",
        "serviceUrlTls": "https://127.0.0.1:8443",
        "brokerServiceUrl": "pulsar://127.0.0.1:6651",
        "brokerServiceUrlTls": "",
    }
    assert ns.ClusterData.from_json(US.to_json()) == US
    # Pulsar's ClusterData has more fields; they are ignored, absent ones are "".
    assert ns.ClusterData.from_dict({"serviceUrl": "http://h:1", "proxyServiceUrl": "x"}) == ns.ClusterData(
        "http://h:1"
    )


@pytest.mark.parametrize(
    "raw",
    [
        [],
        "http://h:1",
        {},
        {"serviceUrl": 8080},
        {"serviceUrl": "pulsar://h:6650"},
        {"brokerServiceUrl": "http://h:8080"},
        {"serviceUrl": "http://"},
        {"serviceUrl": "http://h 1:8080"},
        {"serviceUrl": "http://h:1", "serviceUrlTls": "http://h:2"},
    ],
)
def test_malformed_cluster_data_is_refused(raw: object) -> None:
    with pytest.raises(ns.InvalidClusterData):
        ns.ClusterData.from_dict(raw)


def test_cluster_lifecycle(store: MetadataStore) -> None:
    assert ns.list_clusters(store) == []
    with pytest.raises(ns.ClusterNotFound):
        ns.get_cluster(store, "eu")
    ns.create_cluster(store, "eu", EU)
    ns.create_cluster(store, "us", US)
    assert ns.list_clusters(store) == ["eu", "us"]
    assert ns.get_cluster(store, "us") == US
    assert json.loads(store.get(layout.cluster_path("eu"))[0]) == EU.to_dict()  # the node Pulsar reads
    with pytest.raises(ns.AlreadyExists):
        ns.create_cluster(store, "eu", US)
    assert ns.get_cluster(store, "eu") == EU
    ns.update_cluster(store, "eu", US)
    assert ns.get_cluster(store, "eu") == US
    with pytest.raises(ns.ClusterNotFound):
        ns.update_cluster(store, "asia", US)
    assert not ns.register_cluster(store, "eu", EU)  # a broker never overwrites an operator's data
    assert ns.get_cluster(store, "eu") == US
    ns.delete_cluster(store, "eu")
    assert ns.list_clusters(store) == ["us"]
    with pytest.raises(ns.ClusterNotFound):
        ns.delete_cluster(store, "eu")
    for bad in ("", "a/b", ".."):
        with pytest.raises(InvalidNamespaceName):
            ns.create_cluster(store, bad, EU)


def test_a_cluster_in_use_is_not_deleted(store: MetadataStore) -> None:
    ns.create_cluster(store, "eu", EU)
    ns.create_cluster(store, "us", US)
    ns.create_tenant(store, "acme", ns.TenantInfo(allowed_clusters=("eu", "us")))
    ns.create_namespace(store, "acme/orders", ns.NamespacePolicies(replication_clusters=("eu",)))
    ns.set_replication_clusters(store, "acme/orders", ["eu", "us"])
    with pytest.raises(ns.ClusterInUse, match="namespace acme/orders"):
        ns.delete_cluster(store, "us")
    # Neither the tenant nor a namespace may drop a cluster that is still replicated to.
    with pytest.raises(ns.ClusterInUse, match="acme/orders"):
        ns.update_tenant(store, "acme", ns.TenantInfo(allowed_clusters=("eu",)))
    assert ns.get_tenant(store, "acme").allowed_clusters == ("eu", "us")
    ns.set_replication_clusters(store, "acme/orders", ["eu"])
    with pytest.raises(ns.ClusterInUse, match="tenant acme"):
        ns.delete_cluster(store, "us")
    ns.update_tenant(store, "acme", ns.TenantInfo(allowed_clusters=("eu",)))
    ns.delete_cluster(store, "us")
    assert ns.list_clusters(store) == ["eu"]


def test_replication_clusters_are_checked(store: MetadataStore) -> None:
    ns.create_cluster(store, "eu", EU)
    ns.create_cluster(store, "us", US)
    ns.create_tenant(store, "acme", ns.TenantInfo(allowed_clusters=("eu",)))
    ns.create_namespace(store, "acme/orders", ns.NamespacePolicies(replication_clusters=("eu",)))
    before = store.get(layout.namespace_policies_path("acme", "orders"))
    with pytest.raises(ns.ClusterNotFound):
        ns.set_replication_clusters(store, "acme/orders", ["eu", "asia"])
    with pytest.raises(ns.ClusterNotAllowed):
        ns.set_replication_clusters(store, "acme/orders", ["eu", "us"])
    with pytest.raises(ns.InvalidPolicies):
        ns.set_replication_clusters(store, "acme/orders", [])
    with pytest.raises(ns.NamespaceNotFound):
        ns.set_replication_clusters(store, "acme/none", ["eu"])
    assert store.get(layout.namespace_policies_path("acme", "orders")) == before  # nothing changed
    ns.set_replication_clusters(store, "acme/orders", ["eu", "eu"])
    assert ns.get_policies(store, "acme/orders").replication_clusters == ("eu",)
    raw = json.loads(store.get(layout.namespace_policies_path("acme", "orders"))[0])
    assert raw["replication_clusters"] == ["eu"]  # Pulsar's field name


def test_a_namespace_written_before_replication_clusters_reads_as_local(store: MetadataStore) -> None:
    ns.create_tenant(store, "acme")
    path = layout.namespace_policies_path("acme", "old")
    store.create(path, json.dumps({"bundles": 4, "retention": {"time_minutes": 0, "size_mb": 0}}).encode())
    assert ns.get_policies(store, "acme/old").replication_clusters == ()
    assert ns.get_policies(store, "acme/old", local_cluster="eu").replication_clusters == ("eu",)
    store.set(path, json.dumps({"bundles": 4, "retention": {}, "replication_clusters": "eu"}).encode())
    with pytest.raises(ns.InvalidPolicies):
        ns.get_policies(store, "acme/old")


def test_ensure_default_adds_each_cluster_to_the_public_tenant(store: MetadataStore) -> None:
    ns.ensure_default(store, "cluster-1")
    ns.ensure_default(store, "cluster-2")
    ns.ensure_default(store, "cluster-2")
    assert ns.get_tenant(store, "public").allowed_clusters == ("cluster-1", "cluster-2")
    # public/default stays served by the cluster that created it: joining does not start replication.
    assert ns.get_policies(store, "public/default").replication_clusters == ("cluster-1",)
