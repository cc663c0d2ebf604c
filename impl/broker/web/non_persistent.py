"""Pulsar's admin REST API v2 for non-persistent topics: `/admin/v2/non-persistent/{tenant}/{namespace}/...`.

A non-persistent topic exists while it is loaded on the broker owning its bundle (docs/non-persistent.md):
calls about one topic go to that broker (307 elsewhere, as Pulsar), and a topic no broker has loaded
is 404. Partitioned non-persistent topics keep their partition count in the metadata store, as
persistent ones. Persistent-only operations (cursor reset, message expiry, the last message id) are
405, and nothing changes.
"""

from __future__ import annotations

import contextlib
from urllib.parse import quote

from impl.broker import namespaces
from impl.broker.errors import ConsumerBusyError, NotEmptyError
from impl.broker.non_persistent import NonPersistentTopic, internal_stats, namespace_topics, topic_stats
from impl.broker.web import stats
from impl.broker.web.context import WebContext, redirect_to_owner
from impl.metadata.naming import NON_PERSISTENT, NamespaceName, TopicName, check_named_entity
from impl.web import client as fetch
from impl.web.http import HttpError, Request, Response, Router

BASE = "/admin/v2/non-persistent/{tenant}/{namespace}"
TOPIC = BASE + "/{topic}"


def install(router: Router, ctx: WebContext) -> None:
    NonPersistentRoutes(ctx).install(router)


class NonPersistentRoutes:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    def install(self, r: Router) -> None:
        r.add("GET", BASE, self.list_topics)
        r.add("GET", BASE + "/partitioned", self.list_partitioned)
        r.add("PUT", TOPIC, self.create)
        r.add("DELETE", TOPIC, self.delete)
        r.add("GET", TOPIC + "/internalStats", self.internal_stats)
        r.add("PUT", TOPIC + "/partitions", self.create_partitioned)
        r.add("POST", TOPIC + "/partitions", self.update_partitions)
        r.add("GET", TOPIC + "/partitions", self.get_partitions)
        r.add("DELETE", TOPIC + "/partitions", self.delete_partitioned)
        r.add("GET", TOPIC + "/stats", self.stats)
        r.add("GET", TOPIC + "/partitioned-stats", self.partitioned_stats)
        r.add("PUT", TOPIC + "/unload", self.unload)
        r.add("GET", TOPIC + "/subscriptions", self.subscriptions)
        r.add("DELETE", TOPIC + "/subscription/{subscription}", self.delete_subscription)
        for path in (
            "/subscription/{subscription}/resetcursor/{timestamp}",
            "/subscription/{subscription}/expireMessages/{seconds}",
            "/all_subscription/expireMessages/{seconds}",
        ):
            r.add("POST", TOPIC + path, self.not_allowed)
        r.add("GET", TOPIC + "/lastMessageId", self.not_allowed)

    def _namespace(self, tenant: str, namespace: str) -> NamespaceName:
        ns = NamespaceName(check_named_entity("tenant", tenant), check_named_entity("namespace", namespace))
        namespaces.get_policies(self.ctx.configuration_store, ns)  # 404 for a namespace that does not exist
        return ns

    def _name(self, tenant: str, namespace: str, topic: str) -> TopicName:
        ns = self._namespace(tenant, namespace)
        return TopicName.parse(f"{NON_PERSISTENT}://{ns}/{topic}")

    def _loaded(self, name: TopicName) -> NonPersistentTopic | None:
        topic = self.ctx.service.topics.get(str(name))
        return topic if isinstance(topic, NonPersistentTopic) and not topic.closed else None

    def _owned(self, req: Request, name: TopicName, create: bool = False) -> NonPersistentTopic | Response:
        """The topic when this broker serves it (loaded, or created when `create`); else the 307 to its owner."""
        lookup = self.ctx.service.ownership.lookup(name, req.flag("authoritative"))
        if lookup.kind == "redirect":
            return redirect_to_owner(self.ctx, req, name, lookup.broker_address, lookup.authoritative)
        loaded = self._loaded(name)
        if loaded is not None:
            return loaded
        if not create:
            raise HttpError(404, f"Topic {name} not found")
        topic = self.ctx.service.topic(str(name), create=True)
        assert isinstance(topic, NonPersistentTopic)
        return topic

    # ---- listing and creating -----------------------------------------------------------------

    def list_topics(self, req: Request, tenant: str, namespace: str) -> Response:
        return Response.json(namespace_topics(self.ctx.service, self._namespace(tenant, namespace)))

    def list_partitioned(self, req: Request, tenant: str, namespace: str) -> Response:
        ns = self._namespace(tenant, namespace)
        topics = namespaces.list_partitioned_topics(self.ctx.configuration_store, ns, NON_PERSISTENT)
        return Response.json(sorted(str(t) for t in topics))

    def create(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        if self._loaded(name) is not None or namespaces.get_partitions(self.ctx.configuration_store, name) > 0:
            raise HttpError(409, f"This topic already exists: {name}")
        owned = self._owned(req, name, create=True)
        return owned if isinstance(owned, Response) else Response.empty()

    def delete(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        """Drop the topic from its owner's memory (412 with clients attached, unless `force=true`)."""
        name = self._name(tenant, namespace, topic)
        owned = self._owned(req, name)
        if isinstance(owned, Response):
            return owned
        if not req.flag("force") and (owned.attached or any(sub.sinks for sub in owned.subscriptions.values())):
            raise NotEmptyError(f"Topic {name} has connected producers or consumers; close them or use force=true")
        self.ctx.service.unload_topics(lambda n: n == name, graceful=False)
        return Response.empty()

    def _partitions_body(self, req: Request) -> int:
        partitions = req.json()
        if not isinstance(partitions, int) or isinstance(partitions, bool):
            raise HttpError(400, f"the body must be the number of partitions, not {partitions!r}")
        if partitions <= 0:
            raise HttpError(406, "Number of partitions should be more than 0")
        return partitions

    def create_partitioned(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        namespaces.create_partitioned_topic(self.ctx.configuration_store, name, self._partitions_body(req))
        return Response.empty()

    def update_partitions(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        namespaces.update_partitions(self.ctx.configuration_store, name, self._partitions_body(req))
        return Response.empty()

    def get_partitions(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        return Response.json({"partitions": namespaces.get_partitions(self.ctx.configuration_store, name)})

    def delete_partitioned(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        """The partition count goes; partitions loaded anywhere are unloaded (through their owners)."""
        name = self._name(tenant, namespace, topic)
        count = namespaces.get_partitions(self.ctx.configuration_store, name)
        namespaces.delete_partitioned_topic(self.ctx.configuration_store, name)
        for i in range(count):
            with contextlib.suppress(HttpError):  # 404: not loaded anywhere, nothing to drop
                url = self.ctx.web_url + _path(name.partition_name(i)) + "/unload"
                fetch.call("PUT", url, headers=self.ctx.internal_headers())
        return Response.empty()

    # ---- one topic's state --------------------------------------------------------------------

    def stats(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        owned = self._owned(req, self._name(tenant, namespace, topic))
        return owned if isinstance(owned, Response) else Response.json(topic_stats(owned))

    def internal_stats(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        owned = self._owned(req, self._name(tenant, namespace, topic))
        return owned if isinstance(owned, Response) else Response.json(internal_stats(owned))

    def partitioned_stats(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        """Each loaded partition's stats, from its owner over HTTP, added up as Pulsar does."""
        name = self._name(tenant, namespace, topic)
        count = namespaces.get_partitions(self.ctx.configuration_store, name)
        if count == 0:
            raise HttpError(404, f"Partitioned Topic not found: {name} is not a partitioned topic")
        per_partition = {}
        for i in range(count):
            partition = name.partition_name(i)
            url = self.ctx.web_url + _path(partition) + "/stats"
            try:
                per_partition[str(partition)] = fetch.call("GET", url, headers=self.ctx.internal_headers())
            except HttpError as e:
                if e.status != 404:
                    raise
        result = stats.partitioned_stats(count, per_partition)
        result["msgDropRate"] = sum(p["msgDropRate"] for p in per_partition.values())
        for partition in per_partition.values():  # each subscription's drops, added up over the partitions
            for sub_name, sub in partition["subscriptions"].items():
                merged = result["subscriptions"][sub_name]
                merged["msgDropRate"] = merged.get("msgDropRate", 0.0) + sub["msgDropRate"]
                merged["msgDropCount"] = merged.get("msgDropCount", 0) + sub["msgDropCount"]
        if not req.flag("perPartition", True):
            result.pop("partitions")
        return Response.json(result)

    def unload(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        owned = self._owned(req, name)
        if isinstance(owned, Response):
            return owned
        self.ctx.service.unload_topics(lambda n: n == name, graceful=True)
        return Response.empty()

    def subscriptions(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        owned = self._owned(req, self._name(tenant, namespace, topic))
        return owned if isinstance(owned, Response) else Response.json(sorted(owned.subscriptions))

    def delete_subscription(self, req: Request, tenant: str, namespace: str, topic: str, subscription: str) -> Response:
        owned = self._owned(req, self._name(tenant, namespace, topic))
        if isinstance(owned, Response):
            return owned
        sub = owned.subscriptions.get(subscription)
        if sub is None:
            raise HttpError(404, f"Subscription {subscription!r} not found on {owned.name}")
        if req.flag("force"):
            for consumer, sink in list(sub.sinks.items()):
                owned.remove_consumer(sub, consumer)  # type: ignore[arg-type]
                sink.close()
        try:
            owned.unsubscribe(subscription)
        except ConsumerBusyError as e:
            raise HttpError(412, f"Subscription has active connected consumers: {e}") from e
        return Response.empty()

    def not_allowed(self, req: Request, tenant: str, namespace: str, topic: str, **_: str) -> Response:
        name = self._name(tenant, namespace, topic)
        what = req.path.rsplit("/", 2)[-2] if "/subscription/" in req.path or "all_subscription" in req.path else ""
        operation = "getLastMessageId" if req.path.endswith("/lastMessageId") else (what or "this operation")
        raise HttpError(405, f"{operation} is not supported on non-persistent topic {name}")


def _path(name: TopicName) -> str:
    return f"/admin/v2/non-persistent/{name.tenant}/{name.namespace_portion}/{quote(name.local_name, safe='')}"
