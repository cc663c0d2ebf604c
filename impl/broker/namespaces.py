"""Clusters, tenants, namespaces and partitioned-topic metadata, kept in the configuration store.

The configuration store is the instance-wide metadata store (docs/geo-replication.md): every
cluster's brokers read and write this /admin tree through it, while each cluster's own metadata
store keeps its ledgers, bookies, brokers and ownership. With one cluster it is the cluster's own
metadata store. Functions that also look at a cluster's own data (managed ledgers, ownership
nodes) take that store as `local` (default: `store`, the single-store case).

Layout (impl/metadata/layout.py), as Pulsar's admin resources:
  /admin/clusters/<cluster>                                    JSON ClusterData
  /admin/policies/<tenant>                                     JSON TenantInfo
  /admin/policies/<tenant>/<ns>                                JSON NamespacePolicies
  /admin/partitioned-topics/<tenant>/<ns>/persistent/<topic>   JSON {"partitions": N}

A namespace's node is a child of its tenant's node, so "create a namespace in a tenant that
is being deleted" and "delete a tenant that still has namespaces" are decided by the store
itself (NoNode / NotEmpty), never by a check-then-act race in this module.

The bundle count is fixed when the namespace is created: bundles may already be owned by
brokers, and changing the split under them would move topics without unloading them (Pulsar
changes it only by splitting a bundle, which this implementation does not do).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from impl.metadata import layout
from impl.metadata.naming import NamespaceName, TopicName, check_named_entity
from impl.metadata.store import (
    ANY_VERSION,
    BadVersion,
    Check,
    Create,
    MetadataStore,
    MultiFailed,
    NodeExists,
    NoNode,
    Op,
    SetData,
    Watcher,
)
from impl.metadata.store import NotEmpty as StoreNotEmpty
from impl.security.authorization import AuthPolicies, InvalidPermissions

DEFAULT_NUMBER_OF_BUNDLES = 4  # Pulsar's defaultNumberOfNamespaceBundles
MAX_NUMBER_OF_BUNDLES = 1024
MAX_PARTITIONS = 10_000  # our bound; Pulsar's maxNumPartitionsPerPartitionedTopic is unlimited by default
DEFAULT_CLUSTER = "standalone"


# --- errors ---------------------------------------------------------------------------


class AdminError(Exception):
    """Base of the admin metadata errors; `code` names the condition (as Pulsar's REST answers)."""

    code = "AdminError"


class TenantNotFound(AdminError):
    code = "TenantNotFound"


class NamespaceNotFound(AdminError):
    code = "NamespaceNotFound"


class PartitionedTopicNotFound(AdminError):
    code = "PartitionedTopicNotFound"


class AlreadyExists(AdminError):
    code = "AlreadyExists"


class NotEmpty(AdminError):
    code = "NotEmpty"


class InvalidPolicies(AdminError):
    """A policy value out of range, or a stored policy node that is not valid JSON of the expected shape."""

    code = "InvalidPolicies"


class ClusterNotFound(AdminError):
    """No cluster of that name in the configuration store."""

    code = "ClusterNotFound"


class InvalidClusterData(AdminError):
    """ClusterData that is not an object of URL strings with the right schemes."""

    code = "InvalidClusterData"


class ClusterInUse(AdminError):
    """A cluster cannot be deleted while a tenant allows it or a namespace replicates to it."""

    code = "ClusterInUse"


class ClusterNotAllowed(AdminError):
    """A namespace's replication cluster that its tenant does not allow."""

    code = "ClusterNotAllowed"


# --- values ---------------------------------------------------------------------------

_CLUSTER_URL_SCHEMES = {
    "serviceUrl": ("http://",),
    "serviceUrlTls": ("https://",),
    "brokerServiceUrl": ("pulsar://",),
    "brokerServiceUrlTls": ("pulsar+ssl://",),
}


@dataclass(frozen=True)
class ClusterData:
    """Where a cluster is served, as Pulsar's ClusterData: its web service (http://, https://) and its
    brokers' Pulsar service (pulsar://, pulsar+ssl://); "" for a URL the cluster does not serve. A URL
    may list several hosts (http://h1:8080,h2:8080), as Pulsar's may."""

    service_url: str = ""
    service_url_tls: str = ""
    broker_service_url: str = ""
    broker_service_url_tls: str = ""

    def __post_init__(self) -> None:
        for key, value in zip(_CLUSTER_URL_SCHEMES, dataclasses.astuple(self), strict=True):
            if not isinstance(value, str):
                raise InvalidClusterData(f"{key} must be a string URL, not {value!r}")
            schemes = _CLUSTER_URL_SCHEMES[key]
            if value and (
                not value.startswith(schemes) or len(value) == len(schemes[0]) or any(c.isspace() for c in value)
            ):
                raise InvalidClusterData(f"{key} must be a {schemes[0]}host:port URL, not {value!r}")
        if not self.service_url and not self.broker_service_url and not self.service_url_tls:
            raise InvalidClusterData("a cluster needs a serviceUrl (http://host:port) or a brokerServiceUrl")

    def to_dict(self) -> dict[str, str]:
        """Pulsar's JSON field names (the REST body and the stored node)."""
        return dict(zip(_CLUSTER_URL_SCHEMES, dataclasses.astuple(self), strict=True))

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode()

    @classmethod
    def from_dict(cls, raw: Any) -> ClusterData:
        """From Pulsar's JSON object; unknown fields (Pulsar has more, e.g. proxy settings) are ignored."""
        if not isinstance(raw, dict):
            raise InvalidClusterData(
                'ClusterData must be a JSON object like {"serviceUrl": "http://h:8080", '
                f'"brokerServiceUrl": "pulsar://h:6650"}}, not {type(raw).__name__}'
            )
        return cls(*("" if raw.get(key) is None else raw[key] for key in _CLUSTER_URL_SCHEMES))

    @classmethod
    def from_json(cls, data: bytes, path: str = "ClusterData") -> ClusterData:
        try:
            return cls.from_dict(json.loads(data))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InvalidClusterData(f"{path} is not JSON ({e})") from None


@dataclass(frozen=True)
class TenantInfo:
    admin_roles: tuple[str, ...] = ()
    allowed_clusters: tuple[str, ...] = (DEFAULT_CLUSTER,)

    def to_json(self) -> bytes:
        return json.dumps(
            {"admin_roles": list(self.admin_roles), "allowed_clusters": list(self.allowed_clusters)}, sort_keys=True
        ).encode()

    @classmethod
    def from_json(cls, path: str, data: bytes) -> TenantInfo:
        raw = _load(path, data)
        try:
            return cls(tuple(map(str, raw["admin_roles"])), tuple(map(str, raw["allowed_clusters"])))
        except (KeyError, TypeError) as e:
            raise InvalidPolicies(f"tenant node {path} lacks {e}; rewrite it with the admin API") from None


BACKLOG_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")


@dataclass(frozen=True)
class BacklogQuota:
    """Pulsar's BacklogQuota of type destination_storage: the most a subscription's backlog may hold
    (bytes, and seconds since its oldest unacknowledged message was published; -1 = unlimited) and what
    happens beyond it."""

    limit_size: int = -1
    limit_time: int = -1
    policy: str = "producer_request_hold"

    def __post_init__(self) -> None:
        for what, value in (("limitSize", self.limit_size), ("limitTime", self.limit_time)):
            if not isinstance(value, int) or isinstance(value, bool) or value < -1:
                raise InvalidPolicies(f"{what} must be an integer >= -1 (-1 = unlimited), got {value!r}")
        if self.policy not in BACKLOG_POLICIES:
            raise InvalidPolicies(f"policy must be one of {', '.join(BACKLOG_POLICIES)}, not {self.policy!r}")

    def to_json(self) -> dict[str, Any]:
        return {"limitSize": self.limit_size, "limitTime": self.limit_time, "policy": self.policy}

    @classmethod
    def from_json(cls, raw: Any) -> BacklogQuota:
        if not isinstance(raw, dict):
            raise InvalidPolicies('the body must be {"limitSize": bytes, "limitTime": seconds, "policy": ...}')
        return cls(raw.get("limitSize", -1), raw.get("limitTime", -1), raw.get("policy", "producer_request_hold"))


@dataclass(frozen=True)
class AutoTopicCreation:
    """Pulsar's AutoTopicCreationOverride: whether a producer or consumer may create a topic by using it,
    and of which type (a partitioned one gets default_partitions partitions)."""

    allow: bool = True
    topic_type: str = "non-partitioned"  # or "partitioned"
    default_partitions: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.allow, bool):
            raise InvalidPolicies(f"allowAutoTopicCreation must be true or false, not {self.allow!r}")
        if self.topic_type not in ("non-partitioned", "partitioned"):
            raise InvalidPolicies(f"topicType must be non-partitioned or partitioned, not {self.topic_type!r}")
        n = self.default_partitions
        if self.topic_type == "partitioned" and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise InvalidPolicies(f"a partitioned topic type needs defaultNumPartitions >= 1, got {n!r}")

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"allowAutoTopicCreation": self.allow, "topicType": self.topic_type}
        if self.default_partitions is not None:
            doc["defaultNumPartitions"] = self.default_partitions
        return doc

    @classmethod
    def from_json(cls, raw: Any) -> AutoTopicCreation:
        if not isinstance(raw, dict) or "allowAutoTopicCreation" not in raw:
            raise InvalidPolicies('the body must be {"allowAutoTopicCreation": true|false, "topicType": ...}')
        return cls(
            raw["allowAutoTopicCreation"], raw.get("topicType", "non-partitioned"), raw.get("defaultNumPartitions")
        )


@dataclass(frozen=True)
class RetentionPolicy:
    """Pulsar's RetentionPolicies: keep acknowledged data this long / this big; -1 = unlimited, 0 = none."""

    time_minutes: int = 0
    size_mb: int = 0

    def __post_init__(self) -> None:
        for name, value in (("retention time (minutes)", self.time_minutes), ("retention size (MB)", self.size_mb)):
            if not isinstance(value, int) or isinstance(value, bool) or value < -1:
                raise InvalidPolicies(f"{name} must be an integer >= -1 (-1 = unlimited, 0 = none), got {value!r}")


@dataclass(frozen=True)
class DelayedDeliveryPolicy:
    """Pulsar's DelayedDeliveryPolicies: whether deliver_at is honoured, and the tracker's tick (ms)."""

    active: bool = True
    tick_time_ms: int = 1000

    def __post_init__(self) -> None:
        if not isinstance(self.active, bool):
            raise InvalidPolicies(f"delayed delivery 'active' must be true or false, got {self.active!r}")
        tick = self.tick_time_ms
        if not isinstance(tick, int) or isinstance(tick, bool) or not 1 <= tick <= 3_600_000:
            raise InvalidPolicies(f"delayed delivery tickTime must be 1..3,600,000 ms, got {tick!r}")

    def to_json(self) -> dict[str, Any]:
        return {"active": self.active, "tickTime": self.tick_time_ms, "maxDeliveryDelayInMillis": 0}

    @classmethod
    def from_json(cls, raw: Any) -> DelayedDeliveryPolicy:
        if not isinstance(raw, dict):
            raise InvalidPolicies(f"delayed delivery policies must be an object, got {raw!r}")
        return cls(raw.get("active", True), raw.get("tickTime", 1000))


@dataclass(frozen=True)
class NamespacePolicies:
    bundles: int = DEFAULT_NUMBER_OF_BUNDLES
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    deduplication: bool | None = None  # None: the broker's setting (Pulsar's deduplicationEnabled)
    auth: AuthPolicies = field(default_factory=AuthPolicies)  # who may produce and consume (auth_policies)
    # The clusters whose brokers serve the namespace's topics and replicate them to each other (Pulsar's
    # replication_clusters). () only on a node written before the policy existed: it means the local
    # cluster alone, which get_policies(..., local_cluster=C) fills in.
    replication_clusters: tuple[str, ...] = ()
    # The schema registry's policies (docs/schema.md): None = the broker's strategy (FULL).
    schema_compatibility_strategy: str | None = None
    is_allow_auto_update_schema: bool = True
    schema_validation_enforced: bool = False
    # Pulsar's message_ttl_in_seconds: messages older than this are expired from every subscription's
    # backlog (the cursor moves past them); None = unset (no TTL), 0 = no TTL.
    message_ttl_seconds: int | None = None
    auto_topic_creation: AutoTopicCreation | None = None  # None: the broker's (allowed, non-partitioned)
    backlog_quota: BacklogQuota | None = None  # destination_storage; None: no quota
    delayed_delivery: DelayedDeliveryPolicy | None = None  # None: the broker's (on, tick 1 s)
    # Pulsar's compaction_threshold: compact a topic once this many bytes follow its compaction horizon
    # (checked by the topic ticker); None = unset, 0 = never.
    compaction_threshold: int | None = None
    # Pulsar's offload_threshold (offloadThresholdInBytes): offload a topic's oldest ledgers once more than
    # this many bytes are on the bookies (docs/storage-lifecycle.md); None = unset, -1 = never, 0 = at once.
    offload_threshold: int | None = None

    def __post_init__(self) -> None:
        ttl = self.message_ttl_seconds
        if ttl is not None and (not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0):
            raise InvalidPolicies(f"Invalid value for message TTL: {ttl!r} (seconds, an integer >= 0)")
        threshold = self.compaction_threshold
        if threshold is not None and (not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 0):
            raise InvalidPolicies(f"Invalid value for compaction threshold: {threshold!r} (bytes, an integer >= 0)")
        offload = self.offload_threshold
        if offload is not None and (not isinstance(offload, int) or isinstance(offload, bool) or offload < -1):
            raise InvalidPolicies(
                f"Invalid value for offload threshold: {offload!r} (bytes, an integer >= 0, or -1 to disable)"
            )
        n = self.bundles
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_NUMBER_OF_BUNDLES:
            raise InvalidPolicies(f"a namespace needs between 1 and {MAX_NUMBER_OF_BUNDLES} bundles, got {n!r}")
        clusters = self.replication_clusters
        if not isinstance(clusters, tuple) or not all(isinstance(c, str) and c for c in clusters):
            raise InvalidPolicies(f"replication clusters must be a tuple of cluster names, got {clusters!r}")

    def to_json(self) -> bytes:
        retention = {"time_minutes": self.retention.time_minutes, "size_mb": self.retention.size_mb}
        doc: dict[str, Any] = {"bundles": self.bundles, "retention": retention}
        if self.deduplication is not None:  # unset: the broker's setting (and the node as before the policy)
            doc["deduplication"] = self.deduplication
        if self.auth.namespace_auth or any(self.auth.destination_auth.values()):
            doc["auth_policies"] = self.auth.to_json()
        if self.replication_clusters:
            doc["replication_clusters"] = list(self.replication_clusters)
        if self.schema_compatibility_strategy is not None:
            doc["schema_compatibility_strategy"] = self.schema_compatibility_strategy
        if not self.is_allow_auto_update_schema:
            doc["is_allow_auto_update_schema"] = False
        if self.schema_validation_enforced:
            doc["schema_validation_enforced"] = True
        if self.message_ttl_seconds is not None:
            doc["message_ttl_in_seconds"] = self.message_ttl_seconds
        if self.auto_topic_creation is not None:
            doc["autoTopicCreationOverride"] = self.auto_topic_creation.to_json()
        if self.backlog_quota is not None:
            doc["backlog_quota_map"] = {"destination_storage": self.backlog_quota.to_json()}
        if self.delayed_delivery is not None:
            doc["delayed_delivery_policies"] = self.delayed_delivery.to_json()
        if self.compaction_threshold is not None:
            doc["compaction_threshold"] = self.compaction_threshold
        if self.offload_threshold is not None:
            doc["offload_threshold"] = self.offload_threshold
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, path: str, data: bytes) -> NamespacePolicies:
        raw = _load(path, data)
        try:
            retention = raw["retention"]
            dedup = raw.get("deduplication")
            if dedup is not None and not isinstance(dedup, bool):
                raise InvalidPolicies(f"policies node {path}: deduplication is {dedup!r}, not true/false/null")
            try:
                auth = AuthPolicies.from_json(raw.get("auth_policies"))
            except InvalidPermissions as e:
                raise InvalidPolicies(f"policies node {path}: {e}") from None
            clusters = raw.get("replication_clusters") or []
            if not isinstance(clusters, list) or not all(isinstance(c, str) and c for c in clusters):
                raise InvalidPolicies(
                    f"policies node {path}: replication_clusters is {clusters!r}, not a list of names"
                )
            return cls(
                raw["bundles"],
                RetentionPolicy(retention["time_minutes"], retention["size_mb"]),
                dedup,
                auth,
                tuple(clusters),
                raw.get("schema_compatibility_strategy"),
                bool(raw.get("is_allow_auto_update_schema", True)),
                bool(raw.get("schema_validation_enforced", False)),
                raw.get("message_ttl_in_seconds"),
                None
                if raw.get("autoTopicCreationOverride") is None
                else AutoTopicCreation.from_json(raw["autoTopicCreationOverride"]),
                _backlog_quota(raw.get("backlog_quota_map")),
                None
                if raw.get("delayed_delivery_policies") is None
                else DelayedDeliveryPolicy.from_json(raw["delayed_delivery_policies"]),
                raw.get("compaction_threshold"),
                raw.get("offload_threshold"),
            )
        except (KeyError, TypeError) as e:
            raise InvalidPolicies(f"policies node {path} lacks {e}; rewrite it with the admin API") from None


def _load(path: str, data: bytes) -> Any:
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidPolicies(f"node {path} does not hold JSON ({e}); rewrite it with the admin API") from None
    if not isinstance(raw, dict):
        raise InvalidPolicies(f"node {path} holds {type(raw).__name__}, not a JSON object")
    return raw


def _namespace(namespace: NamespaceName | str) -> NamespaceName:
    return namespace if isinstance(namespace, NamespaceName) else NamespaceName.parse(namespace)


def _topic(topic: TopicName | str) -> TopicName:
    return topic if isinstance(topic, TopicName) else TopicName.parse(topic)


# --- clusters ---------------------------------------------------------------------------


def list_clusters(store: MetadataStore) -> list[str]:
    """The instance's clusters, in name order."""
    return sorted(_children(store, layout.CLUSTERS))


def get_cluster(store: MetadataStore, name: str) -> ClusterData:
    """A cluster's ClusterData; ClusterNotFound when the instance has no such cluster."""
    path = layout.cluster_path(check_named_entity("cluster", name))
    try:
        data, _ = store.get(path)
    except NoNode:
        raise ClusterNotFound(f"cluster {name!r} does not exist; create it first (create_cluster)") from None
    return ClusterData.from_json(data, path)


def create_cluster(store: MetadataStore, name: str, data: ClusterData) -> None:
    """Add a cluster to the instance; AlreadyExists when the name is taken."""
    check_named_entity("cluster", name)
    if not isinstance(data, ClusterData):
        raise InvalidClusterData(f"a cluster needs ClusterData, not {type(data).__name__}")
    store.ensure_path(layout.CLUSTERS)
    try:
        store.create(layout.cluster_path(name), data.to_json())
    except NodeExists:
        raise AlreadyExists(f"cluster {name!r} already exists") from None


def update_cluster(store: MetadataStore, name: str, data: ClusterData) -> None:
    """Replace a cluster's ClusterData; ClusterNotFound when it does not exist."""
    path = layout.cluster_path(check_named_entity("cluster", name))
    if not isinstance(data, ClusterData):
        raise InvalidClusterData(f"a cluster needs ClusterData, not {type(data).__name__}")
    try:
        store.set(path, data.to_json())
    except NoNode:
        raise ClusterNotFound(f"cluster {name!r} does not exist") from None


def delete_cluster(store: MetadataStore, name: str) -> None:
    """Remove a cluster from the instance; ClusterInUse while a tenant allows it or a namespace
    replicates to it (then nothing is deleted), ClusterNotFound when it does not exist."""
    path = layout.cluster_path(check_named_entity("cluster", name))
    try:
        _, stat = store.get(path)
    except NoNode:
        raise ClusterNotFound(f"cluster {name!r} does not exist") from None
    users: list[str] = []
    for tenant in list_tenants(store):
        with contextlib.suppress(TenantNotFound):
            if name in get_tenant(store, tenant).allowed_clusters:
                users.append(f"tenant {tenant}")
        for ns in _children(store, layout.tenant_policies_path(tenant)):
            with contextlib.suppress(NamespaceNotFound):
                if name in get_policies(store, NamespaceName(tenant, ns)).replication_clusters:
                    users.append(f"namespace {tenant}/{ns}")
    if users:
        raise ClusterInUse(
            f"cluster {name!r} is in use by {', '.join(users)}; remove it from their allowed and replication "
            "clusters first"
        )
    try:
        store.delete(path, stat.version)  # a cluster re-created meanwhile is not deleted unchecked
    except (NoNode, BadVersion):
        raise ClusterNotFound(f"cluster {name!r} changed or vanished meanwhile; look again") from None


def register_cluster(store: MetadataStore, name: str, data: ClusterData) -> bool:
    """A broker's start: record its cluster's ClusterData unless the cluster is already known (an
    operator's data is never overwritten). True when this call created it."""
    try:
        create_cluster(store, name, data)
        return True
    except AlreadyExists:
        return False


# --- tenants ----------------------------------------------------------------------------


def create_tenant(store: MetadataStore, tenant: str, info: TenantInfo | None = None) -> None:
    check_named_entity("tenant", tenant)
    store.ensure_path(layout.ADMIN_POLICIES)
    try:
        store.create(layout.tenant_policies_path(tenant), (info or TenantInfo()).to_json())
    except NodeExists:
        raise AlreadyExists(f"tenant {tenant!r} already exists") from None


def get_tenant(store: MetadataStore, tenant: str) -> TenantInfo:
    path = layout.tenant_policies_path(check_named_entity("tenant", tenant))
    try:
        data, _ = store.get(path)
    except NoNode:
        raise TenantNotFound(f"tenant {tenant!r} does not exist; create it first (create_tenant)") from None
    return TenantInfo.from_json(path, data)


def list_tenants(store: MetadataStore) -> list[str]:
    try:
        return store.children(layout.ADMIN_POLICIES)
    except NoNode:
        return []


def update_tenant(store: MetadataStore, tenant: str, info: TenantInfo) -> None:
    """Replace a tenant's TenantInfo; ClusterInUse (nothing changed) when it would stop allowing a cluster
    one of its namespaces replicates to."""
    path = layout.tenant_policies_path(check_named_entity("tenant", tenant))
    while True:
        try:
            _, stat = store.get(path)
        except NoNode:
            raise TenantNotFound(f"tenant {tenant!r} does not exist") from None
        checks: list[Op] = []
        for ns in _children(store, path):
            ns_path = layout.namespace_policies_path(tenant, ns)
            try:
                data, ns_stat = store.get(ns_path)
            except NoNode:
                continue
            used = [
                c
                for c in NamespacePolicies.from_json(ns_path, data).replication_clusters
                if c not in info.allowed_clusters
            ]
            if used:
                raise ClusterInUse(
                    f"namespace {tenant}/{ns} replicates to {used}; take them out of its replication clusters first"
                )
            checks.append(Check(ns_path, ns_stat.version))
        try:
            # One step with the namespaces as read: none starts replicating to a dropped cluster meanwhile.
            store.multi([*checks, SetData(path, info.to_json(), stat.version)])
            return
        except MultiFailed as failed:
            if not isinstance(failed.cause, (NoNode, BadVersion)):
                raise failed.cause from None


def delete_tenant(store: MetadataStore, tenant: str) -> None:
    path = layout.tenant_policies_path(check_named_entity("tenant", tenant))
    try:
        store.delete(path)
    except NoNode:
        raise TenantNotFound(f"tenant {tenant!r} does not exist") from None
    except StoreNotEmpty:
        names = ", ".join(f"{tenant}/{ns}" for ns in _children(store, path))
        raise NotEmpty(f"tenant {tenant!r} still has namespaces ({names}); delete them first") from None


def _children(store: MetadataStore, path: str) -> list[str]:
    try:
        return store.children(path)
    except NoNode:
        return []


# --- namespaces -------------------------------------------------------------------------


def create_namespace(
    store: MetadataStore, namespace: NamespaceName | str, policies: NamespacePolicies | None = None
) -> NamespaceName:
    ns = _namespace(namespace)
    path = layout.namespace_policies_path(ns.tenant, ns.namespace)
    try:
        store.create(path, (policies or NamespacePolicies()).to_json())
    except NoNode:
        raise TenantNotFound(f"cannot create namespace {ns}: tenant {ns.tenant!r} does not exist") from None
    except NodeExists:
        raise AlreadyExists(f"namespace {ns} already exists") from None
    return ns


def get_policies(
    store: MetadataStore,
    namespace: NamespaceName | str,
    watch: Watcher | None = None,
    *,
    local_cluster: str | None = None,
) -> NamespacePolicies:
    """The namespace's policies; `watch` (one-shot) fires when they change or the namespace is deleted.
    With `local_cluster`, a node written before replication clusters existed reads as replicated to that
    cluster alone (without it, such a node's replication_clusters is ())."""
    ns = _namespace(namespace)
    path = layout.namespace_policies_path(ns.tenant, ns.namespace)
    try:
        data, _ = store.get(path, watch=watch)
    except NoNode:
        raise NamespaceNotFound(f"namespace {ns} does not exist; create it first (create_namespace)") from None
    policies = NamespacePolicies.from_json(path, data)
    if local_cluster is not None and not policies.replication_clusters:
        policies = dataclasses.replace(policies, replication_clusters=(local_cluster,))
    return policies


def set_replication_clusters(store: MetadataStore, namespace: NamespaceName | str, clusters: Sequence[str]) -> None:
    """Make `clusters` the namespace's replication clusters. Each must exist (ClusterNotFound) and be
    allowed by the namespace's tenant (ClusterNotAllowed); an empty list is InvalidPolicies. The write
    checks, in the same atomic step, that every cluster still exists and the tenant is unchanged."""
    ns = _namespace(namespace)
    names = tuple(dict.fromkeys(clusters))  # once each, in the given order
    if not names:
        raise InvalidPolicies("replication clusters must not be empty: name at least the local cluster")
    for name in names:
        check_named_entity("cluster", name)
    path = layout.namespace_policies_path(ns.tenant, ns.namespace)
    tenant_path = layout.tenant_policies_path(ns.tenant)
    while True:
        get_policies(store, ns)  # NamespaceNotFound first, as Pulsar answers
        for name in names:
            get_cluster(store, name)
        try:
            tenant_data, tenant_stat = store.get(tenant_path)
        except NoNode:
            raise TenantNotFound(f"tenant {ns.tenant!r} does not exist") from None
        allowed = TenantInfo.from_json(tenant_path, tenant_data).allowed_clusters
        refused = [name for name in names if name not in allowed]
        if refused:
            raise ClusterNotAllowed(
                f"clusters {refused} are not in the allowed clusters of tenant {ns.tenant!r} ({list(allowed)})"
            )
        try:
            data, stat = store.get(path)
        except NoNode:
            raise NamespaceNotFound(f"namespace {ns} does not exist") from None
        current = NamespacePolicies.from_json(path, data)
        changed = dataclasses.replace(current, replication_clusters=names)
        checks = [Check(layout.cluster_path(name), ANY_VERSION) for name in names]
        try:
            store.multi(
                [*checks, Check(tenant_path, tenant_stat.version), SetData(path, changed.to_json(), stat.version)]
            )
            return
        except MultiFailed as failed:
            if not isinstance(failed.cause, (NoNode, BadVersion)):
                raise failed.cause from None
            continue  # a cluster, the tenant or the policies changed meanwhile: decide again


def set_retention(store: MetadataStore, namespace: NamespaceName | str, retention: RetentionPolicy) -> None:
    _update_policies(store, namespace, lambda p: dataclasses.replace(p, retention=retention))


def set_deduplication(store: MetadataStore, namespace: NamespaceName | str, enabled: bool | None) -> None:
    """Enable or disable de-duplication in the namespace; None returns it to the broker's setting."""
    _update_policies(store, namespace, lambda p: dataclasses.replace(p, deduplication=enabled))


def set_delayed_delivery(
    store: MetadataStore, namespace: NamespaceName | str, policy: DelayedDeliveryPolicy | None
) -> None:
    """Set the namespace's delayed-delivery policy (None: the broker's); loaded topics keep theirs until reloaded."""
    _update_policies(store, namespace, lambda p: dataclasses.replace(p, delayed_delivery=policy))


def set_compaction_threshold(store: MetadataStore, namespace: NamespaceName | str, threshold: int | None) -> None:
    """Set the namespace's compaction threshold in bytes (None removes it, 0 turns automatic compaction off)."""
    _update_policies(store, namespace, lambda p: dataclasses.replace(p, compaction_threshold=threshold))


def set_offload_threshold(store: MetadataStore, namespace: NamespaceName | str, threshold: int | None) -> None:
    """Set the namespace's offload threshold in bytes (None removes it, -1 turns automatic offload off)."""
    _update_policies(store, namespace, lambda p: dataclasses.replace(p, offload_threshold=threshold))


def set_message_ttl(store: MetadataStore, namespace: NamespaceName | str, seconds: int | None) -> None:
    """Set the namespace's message TTL in seconds (None removes it)."""
    _update_policies(store, namespace, lambda p: dataclasses.replace(p, message_ttl_seconds=seconds))


def _backlog_quota(raw: Any) -> BacklogQuota | None:
    if not raw or "destination_storage" not in raw:
        return None
    return BacklogQuota.from_json(raw["destination_storage"])


def set_backlog_quota(store: MetadataStore, namespace: NamespaceName | str, quota: BacklogQuota | None) -> None:
    """Set the namespace's destination_storage backlog quota (None removes it)."""
    _update_policies(store, namespace, lambda p: dataclasses.replace(p, backlog_quota=quota))


def set_auto_topic_creation(
    store: MetadataStore, namespace: NamespaceName | str, policy: AutoTopicCreation | None
) -> None:
    """Override the broker's auto topic creation in the namespace (None removes the override)."""
    _update_policies(store, namespace, lambda p: dataclasses.replace(p, auto_topic_creation=policy))


def set_schema_policies(store: MetadataStore, namespace: NamespaceName | str, **changes: Any) -> None:
    """Change schema_compatibility_strategy, is_allow_auto_update_schema or schema_validation_enforced."""
    _update_policies(store, namespace, lambda p: dataclasses.replace(p, **changes))


def grant_permission(
    store: MetadataStore, namespace: NamespaceName | str, role: str, actions: frozenset[str], topic: str | None = None
) -> None:
    """Give `role` exactly `actions` on the namespace (or on one of its topics)."""
    _update_policies(store, namespace, lambda p: dataclasses.replace(p, auth=p.auth.grant(role, actions, topic)))


def revoke_permission(
    store: MetadataStore, namespace: NamespaceName | str, role: str, topic: str | None = None
) -> None:
    """Take away what `role` was granted on the namespace (or on the topic); InvalidPolicies if nothing."""

    def revoke(p: NamespacePolicies) -> NamespacePolicies:
        try:
            return dataclasses.replace(p, auth=p.auth.revoke(role, topic))
        except InvalidPermissions as e:
            raise InvalidPolicies(str(e)) from None

    _update_policies(store, namespace, revoke)


def _update_policies(
    store: MetadataStore, namespace: NamespaceName | str, change: Callable[[NamespacePolicies], NamespacePolicies]
) -> None:
    """Change a policy: a read-modify-conditional-write loop, so concurrent changes are not lost."""
    ns = _namespace(namespace)
    path = layout.namespace_policies_path(ns.tenant, ns.namespace)
    while True:
        try:
            data, stat = store.get(path)
            current = NamespacePolicies.from_json(path, data)
            store.set(path, change(current).to_json(), stat.version)
            return
        except NoNode:
            raise NamespaceNotFound(f"namespace {ns} does not exist") from None
        except BadVersion:
            continue  # someone changed the policies since we read them: re-read and apply ours on top


def list_namespaces(store: MetadataStore, tenant: str) -> list[NamespaceName]:
    path = layout.tenant_policies_path(check_named_entity("tenant", tenant))
    try:
        return [NamespaceName(tenant, ns) for ns in store.children(path)]
    except NoNode:
        raise TenantNotFound(f"tenant {tenant!r} does not exist") from None


def delete_namespace(store: MetadataStore, namespace: NamespaceName | str, local: MetadataStore | None = None) -> None:
    """Delete an empty namespace: no partitioned topics and no topics with data (managed ledgers, in
    the `local` cluster's store; another cluster's topics are that cluster's to delete)."""
    local = store if local is None else local
    ns = _namespace(namespace)
    get_policies(store, ns)  # NamespaceNotFound before NotEmpty, as Pulsar answers
    partitioned = _children(store, layout.partitioned_topics_path(ns.tenant, ns.namespace))
    ledgers = _children(local, f"{layout.MANAGED_LEDGERS_ROOT}/{ns.tenant}/{ns.namespace}/persistent")
    np_partitioned = _children(store, layout.partitioned_topics_path(ns.tenant, ns.namespace, "non-persistent"))
    if partitioned or ledgers or np_partitioned:
        topics = [str(TopicName(ns.tenant, ns.namespace, unquote(c))) for c in sorted(set(partitioned) | set(ledgers))]
        topics += [str(TopicName(ns.tenant, ns.namespace, unquote(c), "non-persistent")) for c in np_partitioned]
        raise NotEmpty(f"namespace {ns} still has topics ({', '.join(topics)}); delete them first")
    try:
        store.delete(layout.namespace_policies_path(ns.tenant, ns.namespace))
    except NoNode:
        raise NamespaceNotFound(f"namespace {ns} does not exist") from None
    # Tidy the empty bookkeeping parents; a broker still owning a bundle keeps its node until it unloads.
    for tidy, path in (
        (store, layout.partitioned_topics_path(ns.tenant, ns.namespace)),
        (store, layout.partitioned_topics_path(ns.tenant, ns.namespace, "non-persistent")),
        (store, f"{layout.PARTITIONED_TOPICS}/{ns.tenant}/{ns.namespace}"),
        (local, layout.namespace_path(ns.tenant, ns.namespace)),
    ):
        with contextlib.suppress(NoNode, StoreNotEmpty):
            tidy.delete(path)


# --- partitioned topics -----------------------------------------------------------------


def create_partitioned_topic(
    store: MetadataStore, topic: TopicName | str, partitions: int, local: MetadataStore | None = None
) -> TopicName:
    """Record that `topic` has `partitions` partitions (topic-partition-0 ... -(N-1)); AlreadyExists
    when the `local` cluster holds a non-partitioned topic of that name."""
    local = store if local is None else local
    name = _topic(topic)
    if name.is_partition:
        raise AlreadyExists(f"{name} is a partition name; create the partitioned topic {name.base} instead")
    _check_partitions(partitions)
    if name.persistent and local.exists(name.managed_ledger_path) is not None:
        raise AlreadyExists(f"{name} already exists as a non-partitioned topic")
    parent = layout.partitioned_topics_path(name.tenant, name.namespace_portion, name.domain)
    store.ensure_path(parent)
    path = layout.partitioned_topic_path(name.tenant, name.namespace_portion, name.local_name, name.domain)
    ns_path = layout.namespace_policies_path(name.tenant, name.namespace_portion)
    try:
        # One atomic step: the namespace cannot be deleted between the check and the create.
        store.multi([Check(ns_path, ANY_VERSION), Create(path, _partitions_json(partitions))])
    except MultiFailed as failed:
        if failed.index == 0:
            raise NamespaceNotFound(f"cannot create {name}: namespace {name.namespace} does not exist") from None
        if isinstance(failed.cause, NodeExists):
            raise AlreadyExists(f"partitioned topic {name} already exists") from None
        raise failed.cause from None
    return name


def get_partitions(store: MetadataStore, topic: TopicName | str) -> int:
    """The partition count of a partitioned topic; 0 for any other topic (as Pulsar's partitioned metadata)."""
    name = _topic(topic)
    path = layout.partitioned_topic_path(name.tenant, name.namespace_portion, name.local_name, name.domain)
    try:
        data, _ = store.get(path)
    except NoNode:
        return 0
    raw = _load(path, data)
    partitions = raw.get("partitions")
    if not isinstance(partitions, int) or partitions < 1:
        raise InvalidPolicies(f"partitioned topic node {path} has no valid partition count: {raw!r}")
    return partitions


def update_partitions(store: MetadataStore, topic: TopicName | str, partitions: int) -> None:
    """Raise the partition count (Pulsar never lowers it: data in the dropped partitions would be orphaned)."""
    name = _topic(topic)
    _check_partitions(partitions)
    path = layout.partitioned_topic_path(name.tenant, name.namespace_portion, name.local_name, name.domain)
    while True:
        try:
            _, stat = store.get(path)
        except NoNode:
            raise PartitionedTopicNotFound(f"{name} is not a partitioned topic") from None
        current = get_partitions(store, name)
        if partitions < current:
            raise InvalidPolicies(f"{name} has {current} partitions; the count can only grow, not to {partitions}")
        try:
            store.set(path, _partitions_json(partitions), stat.version)
            return
        except BadVersion:
            continue
        except NoNode:
            raise PartitionedTopicNotFound(f"{name} was deleted meanwhile") from None


def list_topics(
    store: MetadataStore, namespace: NamespaceName | str, local: MetadataStore | None = None
) -> list[TopicName]:
    """The topics of a namespace that have a managed ledger in the `local` cluster (partitions among
    them), in name order."""
    local = store if local is None else local
    ns = _namespace(namespace)
    get_policies(store, ns)  # NamespaceNotFound if missing
    base = TopicName.of(ns, "x").managed_ledger_path.rsplit("/", 1)[0]
    return sorted((TopicName.of(ns, name) for name in _children(local, base)), key=str)


def all_topics(store: MetadataStore, namespace: NamespaceName | str, local: MetadataStore | None = None) -> list[str]:
    """Every persistent topic of a namespace: those with a managed ledger in the `local` cluster, and
    every partition of its partitioned topics (Pulsar's "topics of a namespace")."""
    found = {str(t) for t in list_topics(store, namespace, local)}
    for topic in list_partitioned_topics(store, namespace):
        found |= {str(topic.partition_name(i)) for i in range(get_partitions(store, topic))}
    return sorted(found)


def list_partitioned_topics(
    store: MetadataStore, namespace: NamespaceName | str, domain: str = "persistent"
) -> list[TopicName]:
    ns = _namespace(namespace)
    get_policies(store, ns)
    children = _children(store, layout.partitioned_topics_path(ns.tenant, ns.namespace, domain))
    return [TopicName(ns.tenant, ns.namespace, unquote(child), domain) for child in children]


def delete_partitioned_topic(store: MetadataStore, topic: TopicName | str) -> None:
    """Forget the partition count; the partitions' own data is the broker's to delete."""
    name = _topic(topic)
    try:
        store.delete(layout.partitioned_topic_path(name.tenant, name.namespace_portion, name.local_name, name.domain))
    except NoNode:
        raise PartitionedTopicNotFound(f"{name} is not a partitioned topic") from None


def _check_partitions(partitions: int) -> None:
    if not isinstance(partitions, int) or isinstance(partitions, bool) or not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidPolicies(
            f"a partitioned topic needs between 1 and {MAX_PARTITIONS} partitions, got {partitions!r}"
        )


def _partitions_json(partitions: int) -> bytes:
    return json.dumps({"partitions": partitions}).encode()


# --- standalone defaults ----------------------------------------------------------------


def ensure_default(store: MetadataStore, cluster: str = DEFAULT_CLUSTER) -> None:
    """Create tenant `public` (allowing `cluster`) and namespace `public/default` (served by `cluster`)
    if missing, as Pulsar's cluster set-up does; a cluster joining an instance whose `public` tenant
    exists is added to its allowed clusters. public/default's replication is left as it is."""
    tenant_path = layout.tenant_policies_path("public")
    while True:
        try:
            create_tenant(store, "public", TenantInfo(allowed_clusters=(cluster,)))
            break
        except AlreadyExists:
            pass
        try:
            data, stat = store.get(tenant_path)
        except NoNode:
            continue  # deleted meanwhile: create it
        info = TenantInfo.from_json(tenant_path, data)
        if cluster in info.allowed_clusters:
            break
        widened = dataclasses.replace(info, allowed_clusters=(*info.allowed_clusters, cluster))
        try:
            store.set(tenant_path, widened.to_json(), stat.version)
            break
        except (BadVersion, NoNode):
            continue
    with contextlib.suppress(AlreadyExists):
        create_namespace(store, NamespaceName("public", "default"), NamespacePolicies(replication_clusters=(cluster,)))
