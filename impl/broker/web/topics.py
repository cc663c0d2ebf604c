"""Pulsar's admin REST API v2 for persistent topics: `/admin/v2/persistent/{tenant}/{namespace}/...`.

Calls about one topic's data (stats, unload, subscriptions, ...) are served by the broker that owns
the topic. Elsewhere they are answered 307 with the owner's web URL, as Pulsar does; a lookup that
finds the topic unowned makes this broker (or the one the load manager picks) its owner first.
"""

from __future__ import annotations

from urllib.parse import quote

from impl.broker import namespaces
from impl.broker.compaction import CompactionRunning
from impl.broker.errors import ConsumerBusyError, NotEmptyError
from impl.broker.service import Topic
from impl.broker.web import stats
from impl.broker.web.context import WebContext, redirect_to_owner
from impl.metadata.naming import NamespaceName, TopicName, check_named_entity
from impl.web import client as fetch
from impl.web.http import HttpError, Request, Response, Router

BASE = "/admin/v2/persistent/{tenant}/{namespace}"
TOPIC = BASE + "/{topic}"


def install(router: Router, ctx: WebContext) -> None:
    TopicRoutes(ctx).install(router)


class TopicRoutes:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    def install(self, r: Router) -> None:
        r.add("GET", BASE, self.list_topics)
        r.add("GET", BASE + "/partitioned", self.list_partitioned)
        r.add("PUT", TOPIC, self.create)
        r.add("DELETE", TOPIC, self.delete)
        r.add("PUT", TOPIC + "/partitions", self.create_partitioned)
        r.add("POST", TOPIC + "/partitions", self.update_partitions)
        r.add("GET", TOPIC + "/partitions", self.get_partitions)
        r.add("DELETE", TOPIC + "/partitions", self.delete_partitioned)
        r.add("GET", TOPIC + "/stats", self.stats)
        r.add("GET", TOPIC + "/internalStats", self.internal_stats)
        r.add("GET", TOPIC + "/partitioned-stats", self.partitioned_stats)
        r.add("PUT", TOPIC + "/unload", self.unload)
        r.add("GET", TOPIC + "/subscriptions", self.subscriptions)
        r.add("DELETE", TOPIC + "/subscription/{subscription}", self.delete_subscription)
        r.add("POST", TOPIC + "/subscription/{subscription}/resetcursor/{timestamp}", self.reset_cursor)
        r.add("GET", TOPIC + "/lastMessageId", self.last_message_id)
        r.add("PUT", TOPIC + "/compaction", self.compact)
        r.add("GET", TOPIC + "/compaction", self.compaction_status)
        r.add("POST", TOPIC + "/subscription/{subscription}/expireMessages/{seconds}", self.expire_messages)
        r.add("POST", TOPIC + "/all_subscription/expireMessages/{seconds}", self.expire_all_messages)

    # ---- names, existence, ownership ----------------------------------------------------------

    def _name(self, tenant: str, namespace: str, topic: str) -> TopicName:
        ns = NamespaceName(check_named_entity("tenant", tenant), check_named_entity("namespace", namespace))
        name = TopicName.parse(f"persistent://{ns}/{topic}")
        namespaces.get_policies(self.ctx.configuration_store, ns)  # 404 for a namespace that does not exist
        return name

    def _exists(self, name: TopicName) -> bool:
        return self.ctx.store.exists(name.managed_ledger_path) is not None

    def _is_partitioned(self, name: TopicName) -> bool:
        return namespaces.get_partitions(self.ctx.configuration_store, name) > 0

    def _owned(self, req: Request, name: TopicName, must_exist: bool = True) -> Topic | Response:
        """The loaded topic when this broker serves it; else the 307 to its owner."""
        if must_exist and not self._exists(name):
            raise HttpError(404, f"Topic {name} not found")
        lookup = self.ctx.service.ownership.lookup(name, req.flag("authoritative"))
        if lookup.kind == "redirect":
            return redirect_to_owner(self.ctx, req, name, lookup.broker_address, lookup.authoritative)
        return self.ctx.service.topic(str(name), create=not must_exist)

    # ---- listing and creating -----------------------------------------------------------------

    def list_topics(self, req: Request, tenant: str, namespace: str) -> Response:
        ns = NamespaceName(check_named_entity("tenant", tenant), check_named_entity("namespace", namespace))
        return Response.json(namespaces.all_topics(self.ctx.configuration_store, ns, self.ctx.store))

    def list_partitioned(self, req: Request, tenant: str, namespace: str) -> Response:
        ns = NamespaceName(check_named_entity("tenant", tenant), check_named_entity("namespace", namespace))
        return Response.json(
            sorted(str(t) for t in namespaces.list_partitioned_topics(self.ctx.configuration_store, ns))
        )

    def create(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        if self._exists(name) or self._is_partitioned(name):
            raise HttpError(409, f"This topic already exists: {name}")
        owned = self._owned(req, name, must_exist=False)
        return owned if isinstance(owned, Response) else Response.empty()  # loading created its managed ledger

    def delete(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        owned = self._owned(req, name)
        if isinstance(owned, Response):
            return owned
        force = req.flag("force")
        if not force and owned.attached:
            raise NotEmptyError(f"Topic {name} has active producers; close them or delete with force=true")
        if not force and any(sub.sinks for sub in owned.subscriptions.values()):
            raise NotEmptyError(f"Topic {name} has connected consumers; close them or delete with force=true")
        self.ctx.service.unload_topics(lambda n: n == name, graceful=False)
        owned.ml.delete()
        owned.compactor.delete_compacted_ledger()
        if not name.is_partition:  # a partition's schema is its partitioned topic's
            self.ctx.service.schemas.delete(name)
        return Response.empty()

    # ---- partitioned topics -------------------------------------------------------------------

    def _partitions_body(self, req: Request) -> int:
        partitions = req.json()
        if not isinstance(partitions, int) or isinstance(partitions, bool):
            raise HttpError(400, f"the body must be the number of partitions, not {partitions!r}")
        if partitions <= 0:
            raise HttpError(406, "Number of partitions should be more than 0")
        return partitions

    def create_partitioned(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        namespaces.create_partitioned_topic(
            self.ctx.configuration_store, name, self._partitions_body(req), self.ctx.store
        )
        return Response.empty()

    def update_partitions(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        namespaces.update_partitions(self.ctx.configuration_store, name, self._partitions_body(req))
        return Response.empty()

    def get_partitions(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        partitions = namespaces.get_partitions(self.ctx.configuration_store, name)  # 0: not partitioned
        # One that does not exist yet is 0 too for a client that may create it (the official client asks
        # with checkAllowAutoCreation=true; topics are created on first use); 404 for anyone else.
        if partitions == 0 and not self._exists(name) and not req.flag("checkAllowAutoCreation"):
            raise HttpError(404, f"Topic {name} not found")
        return Response.json({"partitions": partitions})

    def delete_partitioned(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        """The partitions first, each by its owner (a DELETE through this web service, which redirects),
        then the partition count."""
        name = self._name(tenant, namespace, topic)
        count = namespaces.get_partitions(self.ctx.configuration_store, name)
        query = "?force=true" if req.flag("force") else ""
        for i in range(count):
            partition = name.partition_name(i)
            if self._exists(partition):
                fetch.call("DELETE", self.ctx.web_url + _path(partition) + query, headers=self.ctx.internal_headers())
        namespaces.delete_partitioned_topic(self.ctx.configuration_store, name)
        self.ctx.service.schemas.delete(name)
        return Response.empty()

    # ---- one topic's data ---------------------------------------------------------------------

    def stats(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        owned = self._owned(req, self._name(tenant, namespace, topic))
        return owned if isinstance(owned, Response) else Response.json(stats.topic_stats(owned))

    def internal_stats(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        owned = self._owned(req, self._name(tenant, namespace, topic))
        return owned if isinstance(owned, Response) else Response.json(stats.internal_stats(owned))

    def partitioned_stats(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        """Each partition's stats come from its owner, which may be another broker: fetched over HTTP."""
        name = self._name(tenant, namespace, topic)
        count = namespaces.get_partitions(self.ctx.configuration_store, name)
        per_partition = {}
        for i in range(count):
            partition = name.partition_name(i)
            if not self._exists(partition):
                continue
            url = self.ctx.web_url + _path(partition) + "/stats"
            per_partition[str(partition)] = fetch.call("GET", url, headers=self.ctx.internal_headers())
        result = stats.partitioned_stats(count, per_partition)
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
                owned.remove_consumer(sub, consumer)
                sink.close()
        try:
            owned.unsubscribe(subscription)
        except ConsumerBusyError as e:
            raise HttpError(412, f"Subscription has active connected consumers: {e}") from e
        return Response.empty()

    def reset_cursor(
        self, req: Request, tenant: str, namespace: str, topic: str, subscription: str, timestamp: str
    ) -> Response:
        if not timestamp.isdigit():
            raise HttpError(400, f"the timestamp must be milliseconds since the epoch, not {timestamp!r}")
        owned = self._owned(req, self._name(tenant, namespace, topic))
        if isinstance(owned, Response):
            return owned
        sub = owned.subscriptions.get(subscription)
        if sub is None:
            raise HttpError(404, f"Subscription {subscription!r} not found on {owned.name}")
        for sink in sub.reset(owned.first_published_at(int(timestamp))):
            sink.close()  # as Pulsar: its consumers are disconnected and subscribe again from there
        return Response.empty()

    def expire_messages(
        self, req: Request, tenant: str, namespace: str, topic: str, subscription: str, seconds: str
    ) -> Response:
        """Acknowledge, on the subscription, the messages published more than `seconds` ago."""
        return self._expire(req, self._name(tenant, namespace, topic), subscription, seconds)

    def expire_all_messages(self, req: Request, tenant: str, namespace: str, topic: str, seconds: str) -> Response:
        return self._expire(req, self._name(tenant, namespace, topic), None, seconds)

    def _expire(self, req: Request, name: TopicName, subscription: str | None, seconds: str) -> Response:
        if not seconds.isdigit():
            raise HttpError(400, f"the expiry time must be whole seconds >= 0, not {seconds!r}")
        owned = self._owned(req, name)
        if isinstance(owned, Response):
            return owned
        if subscription is not None and subscription not in owned.subscriptions:
            raise HttpError(404, f"Subscription {subscription!r} not found on {owned.name}")
        owned.expire_messages(int(seconds), subscription)
        return Response.empty()

    def last_message_id(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        owned = self._owned(req, self._name(tenant, namespace, topic))
        if isinstance(owned, Response):
            return owned
        last = owned.ml.last_confirmed()
        ledger, entry = (last.ledger_id, last.entry_id) if last is not None else (-1, -1)
        return Response.json({"ledgerId": ledger, "entryId": entry, "partitionIndex": -1})

    def compact(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        """Start a compaction up to the topic's last message (409 while one runs), as Pulsar's triggerCompaction."""
        owned = self._owned(req, self._name(tenant, namespace, topic))
        if isinstance(owned, Response):
            return owned
        try:
            owned.compactor.trigger()
        except CompactionRunning as e:
            raise HttpError(409, str(e)) from e
        return Response.empty()

    def compaction_status(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        """Pulsar's LongRunningProcessStatus of the last compaction: NOT_RUN, RUNNING, SUCCESS or ERROR."""
        owned = self._owned(req, self._name(tenant, namespace, topic))
        return owned if isinstance(owned, Response) else Response.json(owned.compactor.status_json())


def _path(name: TopicName) -> str:
    """The topic's admin path, its local name percent-encoded."""
    return f"/admin/v2/persistent/{name.tenant}/{name.namespace_portion}/{quote(name.local_name, safe='')}"
