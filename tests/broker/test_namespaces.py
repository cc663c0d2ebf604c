"""Tenants, namespaces and partitioned-topic metadata: CRUD, typed errors, races, stored layout."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest

from impl.broker import namespaces as ns
from impl.metadata.naming import InvalidNamespaceName, NamespaceName, TopicName
from impl.metadata.store import MetadataStore
from impl.metadata.url import connect as connect_url

Connect = Callable[[], MetadataStore]


@pytest.fixture(params=["memory", pytest.param("zk", marks=pytest.mark.zookeeper)])
def connect(request: pytest.FixtureRequest) -> Iterator[Connect]:
    name = f"namespaces-{uuid.uuid4().hex}"
    if request.param == "memory":
        url = f"memory://{name}"
    else:
        url = f"zk://{request.getfixturevalue('zookeeper').connect_string}/{name}"
    opened: list[MetadataStore] = []

    def open_session() -> MetadataStore:
        opened.append(connect_url(url))
        return opened[-1]

    try:
        yield open_session
    finally:
        for store in opened:
            store.close()
        if request.param == "memory":
            from impl.metadata.memory import forget_server

            forget_server(name)


@pytest.fixture
def store(connect: Connect) -> MetadataStore:
    return connect()


def test_tenants(store: MetadataStore) -> None:
    assert ns.list_tenants(store) == []
    ns.create_tenant(store, "acme", ns.TenantInfo(admin_roles=("ops",), allowed_clusters=("eu", "us")))
    ns.create_tenant(store, "zeta")
    assert ns.list_tenants(store) == ["acme", "zeta"]
    assert ns.get_tenant(store, "acme") == ns.TenantInfo(("ops",), ("eu", "us"))
    assert ns.get_tenant(store, "zeta") == ns.TenantInfo((), ("standalone",))
    assert json.loads(store.get("/admin/policies/acme")[0]) == {
        "admin_roles": ["ops"],
        "allowed_clusters": ["eu", "us"],
    }
    with pytest.raises(ns.AlreadyExists, match="'acme' already exists"):
        ns.create_tenant(store, "acme")
    ns.delete_tenant(store, "zeta")
    assert ns.list_tenants(store) == ["acme"]
    with pytest.raises(ns.TenantNotFound, match="create it first"):
        ns.get_tenant(store, "zeta")
    with pytest.raises(ns.TenantNotFound):
        ns.delete_tenant(store, "zeta")
    for bad in ("", "a/b", "a b", "..", "ü"):
        with pytest.raises(InvalidNamespaceName, match="invalid"):
            ns.create_tenant(store, bad)


def test_namespaces(store: MetadataStore) -> None:
    with pytest.raises(ns.TenantNotFound, match="tenant 'acme' does not exist"):
        ns.create_namespace(store, "acme/orders")
    ns.create_tenant(store, "acme")
    assert ns.create_namespace(store, "acme/orders") == NamespaceName("acme", "orders")
    policies = ns.NamespacePolicies(bundles=16, retention=ns.RetentionPolicy(time_minutes=60, size_mb=-1))
    ns.create_namespace(store, NamespaceName("acme", "audit"), policies)
    assert ns.list_namespaces(store, "acme") == [NamespaceName("acme", "audit"), NamespaceName("acme", "orders")]
    assert ns.get_policies(store, "acme/orders") == ns.NamespacePolicies(bundles=4)
    assert ns.get_policies(store, "acme/audit") == policies
    assert json.loads(store.get("/admin/policies/acme/audit")[0]) == {
        "bundles": 16,
        "retention": {"size_mb": -1, "time_minutes": 60},
    }
    with pytest.raises(ns.AlreadyExists, match="acme/orders already exists"):
        ns.create_namespace(store, "acme/orders")
    with pytest.raises(ns.NotEmpty, match=r"still has namespaces \(acme/audit, acme/orders\)"):
        ns.delete_tenant(store, "acme")

    ns.set_retention(store, "acme/orders", ns.RetentionPolicy(time_minutes=5, size_mb=10))
    assert ns.get_policies(store, "acme/orders") == ns.NamespacePolicies(4, ns.RetentionPolicy(5, 10))

    ns.delete_namespace(store, "acme/orders")
    ns.delete_namespace(store, "acme/audit")
    with pytest.raises(ns.NamespaceNotFound, match="acme/orders does not exist"):
        ns.get_policies(store, "acme/orders")
    with pytest.raises(ns.NamespaceNotFound):
        ns.delete_namespace(store, "acme/orders")
    with pytest.raises(ns.NamespaceNotFound):
        ns.set_retention(store, "acme/orders", ns.RetentionPolicy())
    with pytest.raises(ns.TenantNotFound):
        ns.list_namespaces(store, "nobody")
    ns.delete_tenant(store, "acme")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ns.NamespacePolicies(bundles=0), "between 1 and 1024 bundles"),
        (lambda: ns.NamespacePolicies(bundles=1025), "between 1 and 1024 bundles"),
        (lambda: ns.NamespacePolicies(bundles="4"), "between 1 and 1024 bundles"),  # type: ignore[arg-type]
        (lambda: ns.RetentionPolicy(time_minutes=-2), "retention time"),
        (lambda: ns.RetentionPolicy(size_mb=1.5), "retention size"),  # type: ignore[arg-type]
    ],
)
def test_bad_policies(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ns.InvalidPolicies, match=message):
        make()


@pytest.mark.parametrize("bad", ["acme", "acme/a/b", "acme/", "/x", "acme/a b"])
def test_bad_namespace_names(store: MetadataStore, bad: str) -> None:
    with pytest.raises(InvalidNamespaceName, match="invalid"):
        ns.create_namespace(store, bad)


def test_corrupt_policy_nodes_are_reported(store: MetadataStore) -> None:
    ns.create_tenant(store, "acme")
    ns.create_namespace(store, "acme/orders")
    store.set("/admin/policies/acme/orders", b"not json")
    with pytest.raises(ns.InvalidPolicies, match="does not hold JSON"):
        ns.get_policies(store, "acme/orders")
    store.set("/admin/policies/acme/orders", b'{"bundles": 4}')
    with pytest.raises(ns.InvalidPolicies, match="lacks 'retention'"):
        ns.get_policies(store, "acme/orders")
    store.set("/admin/policies/acme", b"[]")
    with pytest.raises(ns.InvalidPolicies, match="not a JSON object"):
        ns.get_tenant(store, "acme")


def test_partitioned_topics(store: MetadataStore) -> None:
    ns.ensure_default(store)
    topic = TopicName.parse("events")
    assert ns.get_partitions(store, topic) == 0  # not partitioned
    assert ns.create_partitioned_topic(store, "events", 3) == topic
    assert ns.get_partitions(store, "persistent://public/default/events") == 3
    assert json.loads(store.get("/admin/partitioned-topics/public/default/persistent/events")[0]) == {"partitions": 3}
    assert ns.get_partitions(store, topic.partition_name(0)) == 0  # a partition is an ordinary topic
    with pytest.raises(ns.AlreadyExists, match="partitioned topic .* already exists"):
        ns.create_partitioned_topic(store, topic, 5)
    with pytest.raises(ns.AlreadyExists, match="is a partition name"):
        ns.create_partitioned_topic(store, topic.partition_name(1), 2)
    for bad in (0, -1, ns.MAX_PARTITIONS + 1, True):
        with pytest.raises(ns.InvalidPolicies, match="between 1 and"):
            ns.create_partitioned_topic(store, "other", bad)
    with pytest.raises(ns.NamespaceNotFound, match="namespace nobody/here does not exist"):
        ns.create_partitioned_topic(store, "nobody/here/t", 2)

    odd = TopicName.parse("a b%c?")  # URL-encoded into one node name, decoded when listed
    ns.create_partitioned_topic(store, odd, 1)
    assert ns.list_partitioned_topics(store, "public/default") == [odd, topic]

    ns.update_partitions(store, topic, 8)
    assert ns.get_partitions(store, topic) == 8
    with pytest.raises(ns.InvalidPolicies, match="can only grow"):
        ns.update_partitions(store, topic, 2)
    with pytest.raises(ns.PartitionedTopicNotFound):
        ns.update_partitions(store, "missing", 2)

    with pytest.raises(ns.NotEmpty, match=r"still has topics \(.*events"):
        ns.delete_namespace(store, "public/default")
    ns.delete_partitioned_topic(store, topic)
    ns.delete_partitioned_topic(store, odd)
    with pytest.raises(ns.PartitionedTopicNotFound, match="not a partitioned topic"):
        ns.delete_partitioned_topic(store, topic)
    assert ns.list_partitioned_topics(store, "public/default") == []


def test_topics_with_data_keep_their_namespace(store: MetadataStore) -> None:
    ns.ensure_default(store)
    topic = TopicName.parse("plain")
    store.ensure_path(topic.managed_ledger_path)  # a non-partitioned topic with a managed ledger
    with pytest.raises(ns.AlreadyExists, match="non-partitioned topic"):
        ns.create_partitioned_topic(store, topic, 2)
    with pytest.raises(ns.NotEmpty, match="persistent://public/default/plain"):
        ns.delete_namespace(store, "public/default")
    store.delete(topic.managed_ledger_path)
    ns.delete_namespace(store, "public/default")
    assert ns.list_namespaces(store, "public") == []


def test_ensure_default_is_idempotent(connect: Connect) -> None:
    first, second = connect(), connect()
    ns.ensure_default(first)
    ns.ensure_default(second)
    assert ns.list_tenants(second) == ["public"]
    assert ns.list_namespaces(second, "public") == [NamespaceName("public", "default")]
    assert ns.get_policies(second, "public/default").bundles == ns.DEFAULT_NUMBER_OF_BUNDLES


def test_racing_creators_one_wins(connect: Connect) -> None:
    stores = [connect() for _ in range(4)]
    ns.create_tenant(stores[0], "acme")
    barrier = threading.Barrier(len(stores))
    outcomes: list[str] = []

    def create(store: MetadataStore) -> None:
        barrier.wait()
        try:
            ns.create_namespace(store, "acme/orders")
            outcomes.append("created")
        except ns.AlreadyExists:
            outcomes.append("exists")

    threads = [threading.Thread(target=create, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["created", "exists", "exists", "exists"]


def test_concurrent_retention_changes_are_not_lost(connect: Connect) -> None:
    first, second = connect(), connect()
    ns.ensure_default(first)
    # Another admin bumps the node between our read and our conditional write: we re-read and retry.
    path = "/admin/policies/public/default"
    original_get = first.get
    bumped = []

    def get_then_bump(p: str, watch: object = None) -> tuple[bytes, object]:
        result = original_get(p)
        if p == path and not bumped:
            bumped.append(True)
            second.set(path, ns.NamespacePolicies(bundles=4, retention=ns.RetentionPolicy(1, 1)).to_json())
        return result

    first.get = get_then_bump  # type: ignore[method-assign,assignment]
    ns.set_retention(first, "public/default", ns.RetentionPolicy(time_minutes=30, size_mb=100))
    assert bumped and ns.get_policies(second, "public/default").retention == ns.RetentionPolicy(30, 100)
    assert second.get(path)[1].version == 2  # the bump and ours: the conditional write retried once
