"""Pulsar's admin REST API v2: clusters, tenants, namespaces, brokers and bookies.

Metadata-only calls run on any broker. Clusters, tenants and namespaces live in the instance's
configuration store (`ctx.configuration_store`); bookies, brokers and topics' data in the cluster's
own metadata store (`ctx.store`). Topic calls are in impl/broker/web/topics.py.
"""

from __future__ import annotations

from typing import Any

from impl.broker import namespaces, non_persistent
from impl.broker.web.context import WebContext
from impl.metadata.naming import NamespaceName, check_named_entity
from impl.metadata.registry import NETTY_MAX_FRAME_SIZE_BYTES, BookieRegistry
from impl.metadata.store import MetadataStore
from impl.web.http import HttpError, Request, Response, Router


def install(router: Router, ctx: WebContext) -> None:
    AdminRoutes(ctx).install(router)


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise HttpError(400, f"{what} must be a whole number, not {value!r}")
    return value


class AdminRoutes:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    def install(self, r: Router) -> None:
        v2 = "/admin/v2"
        r.add("GET", f"{v2}/clusters", self.clusters)
        r.add("GET", f"{v2}/clusters/{{cluster}}", self.cluster)
        r.add("PUT", f"{v2}/clusters/{{cluster}}", self.create_cluster)
        r.add("POST", f"{v2}/clusters/{{cluster}}", self.update_cluster)
        r.add("DELETE", f"{v2}/clusters/{{cluster}}", self.delete_cluster)
        r.add("GET", f"{v2}/tenants", self.tenants)
        r.add("GET", f"{v2}/tenants/{{tenant}}", self.get_tenant)
        r.add("PUT", f"{v2}/tenants/{{tenant}}", self.create_tenant)
        r.add("POST", f"{v2}/tenants/{{tenant}}", self.update_tenant)
        r.add("DELETE", f"{v2}/tenants/{{tenant}}", self.delete_tenant)
        r.add("GET", f"{v2}/namespaces/{{tenant}}", self.namespaces)
        r.add("GET", f"{v2}/namespaces/{{tenant}}/{{namespace}}", self.get_policies)
        r.add("PUT", f"{v2}/namespaces/{{tenant}}/{{namespace}}", self.create_namespace)
        r.add("DELETE", f"{v2}/namespaces/{{tenant}}/{{namespace}}", self.delete_namespace)
        r.add("GET", f"{v2}/namespaces/{{tenant}}/{{namespace}}/topics", self.namespace_topics)
        r.add("GET", f"{v2}/namespaces/{{tenant}}/{{namespace}}/deduplication", self.get_deduplication)
        r.add("POST", f"{v2}/namespaces/{{tenant}}/{{namespace}}/deduplication", self.set_deduplication)
        r.add("DELETE", f"{v2}/namespaces/{{tenant}}/{{namespace}}/deduplication", self.remove_deduplication)
        r.add("GET", f"{v2}/namespaces/{{tenant}}/{{namespace}}/delayedDelivery", self.get_delayed_delivery)
        r.add("POST", f"{v2}/namespaces/{{tenant}}/{{namespace}}/delayedDelivery", self.set_delayed_delivery)
        r.add("DELETE", f"{v2}/namespaces/{{tenant}}/{{namespace}}/delayedDelivery", self.remove_delayed_delivery)
        r.add("GET", f"{v2}/namespaces/{{tenant}}/{{namespace}}/replication", self.get_replication)
        r.add("POST", f"{v2}/namespaces/{{tenant}}/{{namespace}}/replication", self.set_replication)
        r.add("GET", f"{v2}/namespaces/{{tenant}}/{{namespace}}/retention", self.get_retention)
        r.add("POST", f"{v2}/namespaces/{{tenant}}/{{namespace}}/retention", self.set_retention)
        r.add("GET", f"{v2}/namespaces/{{tenant}}/{{namespace}}/messageTTL", self.get_message_ttl)
        r.add("GET", f"{v2}/namespaces/{{tenant}}/{{namespace}}/autoTopicCreation", self.get_auto_creation)
        r.add("GET", f"{v2}/namespaces/{{tenant}}/{{namespace}}/backlogQuotaMap", self.get_backlog_quotas)
        r.add("POST", f"{v2}/namespaces/{{tenant}}/{{namespace}}/backlogQuota", self.set_backlog_quota)
        r.add("DELETE", f"{v2}/namespaces/{{tenant}}/{{namespace}}/backlogQuota", self.remove_backlog_quota)
        r.add("POST", f"{v2}/namespaces/{{tenant}}/{{namespace}}/autoTopicCreation", self.set_auto_creation)
        r.add("DELETE", f"{v2}/namespaces/{{tenant}}/{{namespace}}/autoTopicCreation", self.remove_auto_creation)
        r.add("POST", f"{v2}/namespaces/{{tenant}}/{{namespace}}/messageTTL", self.set_message_ttl)
        r.add("DELETE", f"{v2}/namespaces/{{tenant}}/{{namespace}}/messageTTL", self.remove_message_ttl)
        r.add("GET", f"{v2}/namespaces/{{tenant}}/{{namespace}}/offloadThreshold", self.get_offload_threshold)
        r.add("PUT", f"{v2}/namespaces/{{tenant}}/{{namespace}}/offloadThreshold", self.set_offload_threshold)
        r.add("GET", f"{v2}/namespaces/{{tenant}}/{{namespace}}/compactionThreshold", self.get_compaction_threshold)
        r.add("PUT", f"{v2}/namespaces/{{tenant}}/{{namespace}}/compactionThreshold", self.set_compaction_threshold)
        r.add(
            "DELETE", f"{v2}/namespaces/{{tenant}}/{{namespace}}/compactionThreshold", self.remove_compaction_threshold
        )
        r.add("GET", f"{v2}/brokers/health", self.health)
        r.add("GET", f"{v2}/brokers/leaderBroker", self.leader)
        r.add("GET", f"{v2}/brokers/{{cluster}}", self.brokers)
        r.add("GET", f"{v2}/bookies/all", self.bookies)

    # ---- clusters -----------------------------------------------------------------------------

    @property
    def _config(self) -> MetadataStore:
        return self.ctx.configuration_store

    def clusters(self, req: Request) -> Response:
        return Response.json(namespaces.list_clusters(self._config))

    def cluster(self, req: Request, cluster: str) -> Response:
        data = namespaces.get_cluster(self._config, check_named_entity("cluster", cluster))
        return Response.json(data.to_dict() | {"brokerClientTlsEnabled": False})

    def _cluster_data(self, req: Request) -> namespaces.ClusterData:
        return namespaces.ClusterData.from_dict(req.json())  # InvalidClusterData: 400

    def create_cluster(self, req: Request, cluster: str) -> Response:
        namespaces.create_cluster(self._config, check_named_entity("cluster", cluster), self._cluster_data(req))
        return Response.empty()

    def update_cluster(self, req: Request, cluster: str) -> Response:
        namespaces.update_cluster(self._config, check_named_entity("cluster", cluster), self._cluster_data(req))
        return Response.empty()

    def delete_cluster(self, req: Request, cluster: str) -> Response:
        namespaces.delete_cluster(self._config, check_named_entity("cluster", cluster))
        return Response.empty()

    def _check_cluster(self, cluster: str) -> None:
        if cluster != self.ctx.cluster:
            raise HttpError(404, f"Cluster {cluster!r} does not exist (this one is {self.ctx.cluster!r})")

    # ---- tenants ------------------------------------------------------------------------------

    def tenants(self, req: Request) -> Response:
        return Response.json(namespaces.list_tenants(self._config))

    def get_tenant(self, req: Request, tenant: str) -> Response:
        info = namespaces.get_tenant(self._config, check_named_entity("tenant", tenant))
        return Response.json({"adminRoles": list(info.admin_roles), "allowedClusters": list(info.allowed_clusters)})

    def create_tenant(self, req: Request, tenant: str) -> Response:
        check_named_entity("tenant", tenant)
        namespaces.create_tenant(self._config, tenant, self._tenant_info(req))
        return Response.empty()

    def update_tenant(self, req: Request, tenant: str) -> Response:
        """Replace a tenant's admin roles and allowed clusters (a cluster its namespaces replicate to stays)."""
        check_named_entity("tenant", tenant)
        namespaces.get_tenant(self._config, tenant)  # 404 before the body's faults, as Pulsar answers
        namespaces.update_tenant(self._config, tenant, self._tenant_info(req))
        return Response.empty()

    def _tenant_info(self, req: Request) -> namespaces.TenantInfo:
        body = req.json() if req.body.strip() else {}
        if not isinstance(body, dict):
            raise HttpError(
                400, 'the body must be a TenantInfo object: {"adminRoles": [...], "allowedClusters": [...]}'
            )
        roles = body.get("adminRoles") or []
        clusters = body.get("allowedClusters")
        clusters = [self.ctx.cluster] if clusters is None else clusters
        for name, value in (("adminRoles", roles), ("allowedClusters", clusters)):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise HttpError(400, f"{name} must be a list of strings, not {value!r}")
        if not clusters:
            raise HttpError(412, "Clusters should be specified")
        known = set(namespaces.list_clusters(self._config))
        unknown = [c for c in clusters if c not in known]
        if unknown:
            raise HttpError(412, f"Clusters do not exist: {unknown} (the instance has {sorted(known)})")
        return namespaces.TenantInfo(tuple(roles), tuple(dict.fromkeys(clusters)))

    def delete_tenant(self, req: Request, tenant: str) -> Response:
        namespaces.delete_tenant(self._config, check_named_entity("tenant", tenant))
        return Response.empty()

    # ---- namespaces ---------------------------------------------------------------------------

    def namespaces(self, req: Request, tenant: str) -> Response:
        return Response.json([str(ns) for ns in namespaces.list_namespaces(self._config, tenant)])

    def _ns(self, tenant: str, namespace: str) -> NamespaceName:
        return NamespaceName(check_named_entity("tenant", tenant), check_named_entity("namespace", namespace))

    def get_policies(self, req: Request, tenant: str, namespace: str) -> Response:
        ns = self._ns(tenant, namespace)
        policies = namespaces.get_policies(self._config, ns, local_cluster=self.ctx.cluster)
        step = 2**32 // policies.bundles
        boundaries = [f"0x{i * step:08x}" for i in range(policies.bundles)] + ["0xffffffff"]
        return Response.json(
            {
                "bundles": {"boundaries": boundaries, "numBundles": policies.bundles},
                "deduplicationEnabled": policies.deduplication,
                "retention_policies": _retention_json(policies.retention),
                "replication_clusters": list(policies.replication_clusters),
            }
        )

    def create_namespace(self, req: Request, tenant: str, namespace: str) -> Response:
        ns = self._ns(tenant, namespace)
        body = req.json() if req.body.strip() else {}
        if not isinstance(body, dict):
            raise HttpError(400, 'the body must be a Policies object, e.g. {"bundles": {"numBundles": 4}}')
        bundles = body.get("bundles") or {}
        if not isinstance(bundles, dict):
            raise HttpError(400, f'bundles must be an object like {{"numBundles": 4}}, not {bundles!r}')
        count = _int(bundles.get("numBundles", namespaces.DEFAULT_NUMBER_OF_BUNDLES), "bundles.numBundles")
        dedup = body.get("deduplicationEnabled")
        if dedup is not None and not isinstance(dedup, bool):
            raise HttpError(400, f"deduplicationEnabled must be true, false or null, not {dedup!r}")
        clusters = body.get("replication_clusters") or [self.ctx.cluster]
        if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
            raise HttpError(400, f"replication_clusters must be a list of cluster names, not {clusters!r}")
        allowed = namespaces.get_tenant(self._config, ns.tenant).allowed_clusters  # 404 for no tenant
        for cluster in clusters:
            namespaces.get_cluster(self._config, check_named_entity("cluster", cluster))
            if cluster not in allowed:
                raise HttpError(403, f"Cluster {cluster!r} is not in the allowed clusters of tenant {ns.tenant!r}")
        policies = namespaces.NamespacePolicies(
            bundles=count, deduplication=dedup, replication_clusters=tuple(dict.fromkeys(clusters))
        )
        namespaces.create_namespace(self._config, ns, policies)
        return Response.empty()

    def delete_namespace(self, req: Request, tenant: str, namespace: str) -> Response:
        namespaces.delete_namespace(self._config, self._ns(tenant, namespace), self.ctx.store)
        return Response.empty()

    def get_replication(self, req: Request, tenant: str, namespace: str) -> Response:
        ns = self._ns(tenant, namespace)
        policies = namespaces.get_policies(self._config, ns, local_cluster=self.ctx.cluster)
        return Response.json(list(policies.replication_clusters))

    def set_replication(self, req: Request, tenant: str, namespace: str) -> Response:
        ns = self._ns(tenant, namespace)
        clusters = req.json()
        if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
            raise HttpError(400, f'the body must be a list of cluster names, e.g. ["cluster-1"], not {clusters!r}')
        namespaces.set_replication_clusters(self._config, ns, clusters)
        return Response.empty()

    def namespace_topics(self, req: Request, tenant: str, namespace: str) -> Response:
        mode = req.query.get("mode", "PERSISTENT").upper()
        if mode not in ("PERSISTENT", "NON_PERSISTENT", "ALL"):
            raise HttpError(400, f"mode must be PERSISTENT, NON_PERSISTENT or ALL, not {mode!r}")
        ns = self._ns(tenant, namespace)
        topics = namespaces.all_topics(self._config, ns, self.ctx.store) if mode != "NON_PERSISTENT" else []
        if mode != "PERSISTENT":
            topics += non_persistent.namespace_topics(self.ctx.service, ns)
        return Response.json(topics)

    def get_deduplication(self, req: Request, tenant: str, namespace: str) -> Response:
        return Response.json(namespaces.get_policies(self._config, self._ns(tenant, namespace)).deduplication)

    def set_deduplication(self, req: Request, tenant: str, namespace: str) -> Response:
        enabled = req.json()
        if not isinstance(enabled, bool):
            raise HttpError(400, f"the body must be true or false, not {enabled!r}")
        namespaces.set_deduplication(self._config, self._ns(tenant, namespace), enabled)
        return Response.empty()

    def remove_deduplication(self, req: Request, tenant: str, namespace: str) -> Response:
        namespaces.set_deduplication(self._config, self._ns(tenant, namespace), None)
        return Response.empty()

    def get_delayed_delivery(self, req: Request, tenant: str, namespace: str) -> Response:
        policy = namespaces.get_policies(self._config, self._ns(tenant, namespace)).delayed_delivery
        return Response.json(None if policy is None else policy.to_json())

    def set_delayed_delivery(self, req: Request, tenant: str, namespace: str) -> Response:
        body = req.json()
        if not isinstance(body, dict):
            raise HttpError(400, f"the body must be {{'active': bool, 'tickTime': ms}}, not {body!r}")
        try:
            policy = namespaces.DelayedDeliveryPolicy.from_json(body)
        except namespaces.InvalidPolicies as e:
            raise HttpError(400, str(e)) from None
        namespaces.set_delayed_delivery(self._config, self._ns(tenant, namespace), policy)
        return Response.empty()

    def remove_delayed_delivery(self, req: Request, tenant: str, namespace: str) -> Response:
        namespaces.set_delayed_delivery(self._config, self._ns(tenant, namespace), None)
        return Response.empty()

    def get_retention(self, req: Request, tenant: str, namespace: str) -> Response:
        policies = namespaces.get_policies(self._config, self._ns(tenant, namespace))
        return Response.json(_retention_json(policies.retention))

    def set_retention(self, req: Request, tenant: str, namespace: str) -> Response:
        body = req.json()
        if not isinstance(body, dict):
            raise HttpError(400, 'the body must be {"retentionTimeInMinutes": N, "retentionSizeInMB": N}')
        minutes = _int(body.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes")
        size = _int(body.get("retentionSizeInMB", 0), "retentionSizeInMB")
        retention = namespaces.RetentionPolicy(minutes, size)
        namespaces.set_retention(self._config, self._ns(tenant, namespace), retention)
        return Response.empty()

    def get_message_ttl(self, req: Request, tenant: str, namespace: str) -> Response:
        policies = namespaces.get_policies(self._config, self._ns(tenant, namespace))
        return Response.json(policies.message_ttl_seconds)  # null when unset, as Pulsar

    def set_message_ttl(self, req: Request, tenant: str, namespace: str) -> Response:
        seconds = _int(req.json(), "the message TTL (seconds)")
        namespaces.set_message_ttl(self._config, self._ns(tenant, namespace), seconds)
        return Response.empty()

    def get_offload_threshold(self, req: Request, tenant: str, namespace: str) -> Response:
        policies = namespaces.get_policies(self._config, self._ns(tenant, namespace))
        threshold = policies.offload_threshold
        return Response.json(-1 if threshold is None else threshold)  # Pulsar's default: -1, off

    def set_offload_threshold(self, req: Request, tenant: str, namespace: str) -> Response:
        threshold = _int(req.json(), "the offload threshold (bytes, -1 to disable)")
        namespaces.set_offload_threshold(self._config, self._ns(tenant, namespace), threshold)
        return Response.empty()

    def get_compaction_threshold(self, req: Request, tenant: str, namespace: str) -> Response:
        policies = namespaces.get_policies(self._config, self._ns(tenant, namespace))
        return Response.json(policies.compaction_threshold)  # null when unset, as Pulsar

    def set_compaction_threshold(self, req: Request, tenant: str, namespace: str) -> Response:
        threshold = _int(req.json(), "the compaction threshold (bytes)")
        namespaces.set_compaction_threshold(self._config, self._ns(tenant, namespace), threshold)
        return Response.empty()

    def remove_compaction_threshold(self, req: Request, tenant: str, namespace: str) -> Response:
        namespaces.set_compaction_threshold(self._config, self._ns(tenant, namespace), None)
        return Response.empty()

    def get_backlog_quotas(self, req: Request, tenant: str, namespace: str) -> Response:
        quota = namespaces.get_policies(self._config, self._ns(tenant, namespace)).backlog_quota
        return Response.json({} if quota is None else {"destination_storage": quota.to_json()})

    def _quota_type(self, req: Request) -> None:
        kind = req.query.get("backlogQuotaType", "destination_storage")
        if kind != "destination_storage":
            raise HttpError(400, f"backlogQuotaType {kind!r} is not supported here (only destination_storage)")

    def set_backlog_quota(self, req: Request, tenant: str, namespace: str) -> Response:
        self._quota_type(req)
        try:
            quota = namespaces.BacklogQuota.from_json(req.json())
        except namespaces.InvalidPolicies as e:
            raise HttpError(400, str(e)) from None
        namespaces.set_backlog_quota(self._config, self._ns(tenant, namespace), quota)
        return Response.empty()

    def remove_backlog_quota(self, req: Request, tenant: str, namespace: str) -> Response:
        self._quota_type(req)
        namespaces.set_backlog_quota(self._config, self._ns(tenant, namespace), None)
        return Response.empty()

    def get_auto_creation(self, req: Request, tenant: str, namespace: str) -> Response:
        policy = namespaces.get_policies(self._config, self._ns(tenant, namespace)).auto_topic_creation
        return Response.json(None if policy is None else policy.to_json())

    def set_auto_creation(self, req: Request, tenant: str, namespace: str) -> Response:
        try:
            policy = namespaces.AutoTopicCreation.from_json(req.json())
        except namespaces.InvalidPolicies as e:
            raise HttpError(400, str(e)) from None
        namespaces.set_auto_topic_creation(self._config, self._ns(tenant, namespace), policy)
        return Response.empty()

    def remove_auto_creation(self, req: Request, tenant: str, namespace: str) -> Response:
        namespaces.set_auto_topic_creation(self._config, self._ns(tenant, namespace), None)
        return Response.empty()

    def remove_message_ttl(self, req: Request, tenant: str, namespace: str) -> Response:
        namespaces.set_message_ttl(self._config, self._ns(tenant, namespace), None)
        return Response.empty()

    # ---- brokers and bookies ------------------------------------------------------------------

    def health(self, req: Request) -> Response:
        namespaces.list_tenants(self._config)  # the configuration store answers
        self.ctx.store.exists("/")  # and the cluster's metadata store
        why = self.ctx.unhealthy()  # and writes can succeed: registered, on a live session, enough bookies
        if why is not None:
            raise HttpError(503, f"unhealthy: {why}")
        return Response.text("ok")

    def leader(self, req: Request) -> Response:
        leader = self.ctx.leader()
        load = self.ctx.live_brokers().get(leader or "")
        if load is None:
            raise HttpError(404, "Couldn't find leader broker")
        return Response.json({"serviceUrl": load.web_url, "brokerId": _web_address(load.web_url)})

    def brokers(self, req: Request, cluster: str) -> Response:
        self._check_cluster(cluster)
        return Response.json(sorted(_web_address(load.web_url) for load in self.ctx.live_brokers().values()))

    def bookies(self, req: Request) -> Response:
        """Pulsar's BookiesClusterInfo; each bookie also says whether it is read-only, where its HTTP
        service is (this project's bookies register it: /metrics, info), and the frame limit it published
        (`nettyMaxFrameSizeBytes`, absent when it published none), which brokers check their entries against."""
        bookies = []
        for info in BookieRegistry(self.ctx.store).all_bookies():
            entry: dict[str, Any] = {"bookieId": str(info.bookie_id), "state": "ro" if info.readonly else "rw"}
            if info.http_url:
                entry["httpUrl"] = info.http_url
            if info.netty_max_frame_size_bytes is not None:
                entry[NETTY_MAX_FRAME_SIZE_BYTES] = info.netty_max_frame_size_bytes
            bookies.append(entry)
        return Response.json({"bookies": bookies})


def _retention_json(retention: namespaces.RetentionPolicy) -> dict[str, int]:
    return {"retentionTimeInMinutes": retention.time_minutes, "retentionSizeInMB": retention.size_mb}


def _web_address(web_url: str) -> str:
    return web_url.removeprefix("http://").removeprefix("https://")
