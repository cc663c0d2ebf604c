"""Pulsar's admin REST API v2 for persistent topics: `/admin/v2/persistent/{tenant}/{namespace}/...`.

Calls about one topic's data (stats, unload, subscriptions, ...) are served by the broker that owns
the topic. Elsewhere they are answered 307 with the owner's web URL, as Pulsar does; a lookup that
finds the topic unowned makes this broker (or the one the load manager picks) its owner first.
"""

from __future__ import annotations

import datetime
import json
from typing import Any
from urllib.parse import quote

from impl.broker import namespaces
from impl.broker.compaction import CompactionRunning
from impl.broker.errors import ConsumerBusyError, NotEmptyError
from impl.broker.managed_ledger import Position
from impl.broker.offload.topic import OffloadNotConfigured, OffloadRunning
from impl.broker.service import Subscription, Topic
from impl.broker.web import stats
from impl.broker.web.context import WebContext, redirect_to_owner
from impl.metadata.naming import NamespaceName, TopicName, check_named_entity
from impl.protocol import entry_codec
from impl.protocol import pulsar_api_pb2 as api
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
        r.add("PUT", TOPIC + "/offload", self.offload)
        r.add("GET", TOPIC + "/offload", self.offload_status)
        r.add("POST", TOPIC + "/subscription/{subscription}/expireMessages/{seconds}", self.expire_messages)
        r.add("POST", TOPIC + "/all_subscription/expireMessages/{seconds}", self.expire_all_messages)
        r.add("PUT", TOPIC + "/subscription/{subscription}", self.create_subscription)
        r.add("POST", TOPIC + "/subscription/{subscription}/skip/{count}", self.skip)
        r.add("POST", TOPIC + "/subscription/{subscription}/skip_all", self.skip_all)
        r.add("GET", TOPIC + "/examinemessage", self.examine_message)
        r.add("POST", TOPIC + "/terminate", self.terminate)
        r.add("GET", TOPIC + "/deduplicationEnabled", self.get_deduplication)
        r.add("POST", TOPIC + "/deduplicationEnabled", self.set_deduplication)
        r.add("DELETE", TOPIC + "/deduplicationEnabled", self.remove_deduplication)

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
        self.ctx.service.forget_topic(name)
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
        """The topic's subscriptions, also those without consumers (the loaded topic knows its cursors'); of
        a partitioned topic, those of any partition (each asked of its owner), as Pulsar."""
        name = self._name(tenant, namespace, topic)
        if self._is_partitioned(name) and not self._exists(name):
            found: set[str] = set()
            for partition in self._used_partitions(name):
                url = self.ctx.web_url + _path(partition) + "/subscriptions"
                found.update(fetch.call("GET", url, headers=self.ctx.internal_headers()))
            return Response.json(sorted(found))
        owned = self._owned(req, name)
        return owned if isinstance(owned, Response) else Response.json(sorted(owned.subscriptions))

    def _used_partitions(self, name: TopicName) -> list[TopicName]:
        """A partitioned topic's partitions that exist (a client or the admin used them)."""
        count = namespaces.get_partitions(self.ctx.configuration_store, name)
        return [p for p in (name.partition_name(i) for i in range(count)) if self._exists(p)]

    def delete_subscription(self, req: Request, tenant: str, namespace: str, topic: str, subscription: str) -> Response:
        name = self._name(tenant, namespace, topic)
        if self._is_partitioned(name) and not self._exists(name):
            return self._delete_partitioned_subscription(req, name, subscription)
        owned = self._owned(req, name)
        if isinstance(owned, Response):
            return owned
        sub = self._subscription(owned, subscription)  # loading the topic made its cursors subscriptions
        if req.flag("force"):
            for consumer, sink in list(sub.sinks.items()):
                owned.remove_consumer(sub, consumer)
                sink.close()
        try:
            owned.unsubscribe(subscription)
        except ConsumerBusyError as e:
            raise HttpError(412, f"Subscription has active connected consumers: {e}") from e
        return Response.empty()

    def _delete_partitioned_subscription(self, req: Request, name: TopicName, subscription: str) -> Response:
        """As Pulsar: deleted on every partition (each by its owner)."""
        query = "?force=true" if req.flag("force") else ""
        return self._on_each_partition("DELETE", name, f"/subscription/{quote(subscription, safe='')}{query}")

    def _on_each_partition(self, method: str, name: TopicName, suffix: str) -> Response:
        """A subscription's call on a partitioned topic, as Pulsar makes it: on every partition (each by its
        owner); once all were asked, 404 "Subscription not found" if a partition had none, else the first
        refusal (e.g. 412: consumers connected)."""
        refusals: list[HttpError] = []
        partitions = self._used_partitions(name)
        for partition in partitions:
            try:
                fetch.call(method, self.ctx.web_url + _path(partition) + suffix, headers=self.ctx.internal_headers())
            except HttpError as e:
                refusals.append(e)
        if not partitions or any(e.status == 404 for e in refusals):
            raise HttpError(404, "Subscription not found")
        if refusals:
            raise refusals[0]
        return Response.empty()

    def reset_cursor(
        self, req: Request, tenant: str, namespace: str, topic: str, subscription: str, timestamp: str
    ) -> Response:
        if not timestamp.isdigit():
            raise HttpError(400, f"the timestamp must be milliseconds since the epoch, not {timestamp!r}")
        name = self._name(tenant, namespace, topic)
        if self._is_partitioned(name) and not self._exists(name):
            suffix = f"/subscription/{quote(subscription, safe='')}/resetcursor/{timestamp}"
            return self._on_each_partition("POST", name, suffix)
        owned = self._owned(req, name)
        if isinstance(owned, Response):
            return owned
        sub = self._subscription(owned, subscription)
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
        if self._is_partitioned(name) and not self._exists(name):
            which = "all_subscription" if subscription is None else f"subscription/{quote(subscription, safe='')}"
            return self._on_each_partition("POST", name, f"/{which}/expireMessages/{seconds}")
        owned = self._owned(req, name)
        if isinstance(owned, Response):
            return owned
        if subscription is not None:
            self._subscription(owned, subscription)  # 404 for one that does not exist
        owned.expire_messages(int(seconds), subscription)
        return Response.empty()

    # ---- messages: skip, examine, terminate, subscriptions made by the admin --------------------

    def _not_partitioned(self, name: TopicName, what: str) -> None:
        """Pulsar's 405 for calls that only a partition (or a non-partitioned topic) can serve."""
        if self._is_partitioned(name):
            raise HttpError(405, f"{what} on a partitioned topic is not allowed")

    def _subscription(self, owned: Topic, subscription: str) -> Subscription:
        sub = owned.subscription(subscription)
        if sub is None:
            raise HttpError(404, "Subscription not found")
        return sub

    def create_subscription(self, req: Request, tenant: str, namespace: str, topic: str, subscription: str) -> Response:
        """Pulsar's createSubscription: the body is the message id to start at (inclusive), as
        {"ledgerId", "entryId"}; none, or Pulsar's latest (Long.MAX_VALUE ids), starts after the last
        entry, and earliest (-1:-1) at the first. 409 when it exists."""
        name = self._name(tenant, namespace, topic)
        start = _start_position(req)
        body = req.json() if req.body.strip() else None
        if self._each_partition(req, name, f"/subscription/{quote(subscription, safe='')}", body):
            return Response.empty()  # as Pulsar: on every partition, each from the same message id
        owned = self._owned(req, name, must_exist=not self._partition_of_partitioned(name))
        if isinstance(owned, Response):
            return owned
        owned.create_subscription(subscription, start)
        return Response.empty()

    def _partition_of_partitioned(self, name: TopicName) -> bool:
        """A partition of a partitioned topic: created here if no client used it yet."""
        return name.is_partition and self._is_partitioned(name.base)

    def _each_partition(self, req: Request, name: TopicName, suffix: str, body: Any = None) -> bool:
        """For a partitioned topic: the same call on each partition, through this web service (which
        redirects to each one's owner); the first refusal is the answer. False for another topic."""
        partitions = namespaces.get_partitions(self.ctx.configuration_store, name)
        for i in range(partitions):
            url = self.ctx.web_url + _path(name.partition_name(i)) + suffix
            fetch.call(req.method, url, body, headers=self.ctx.internal_headers())
        return partitions > 0

    def skip(self, req: Request, tenant: str, namespace: str, topic: str, subscription: str, count: str) -> Response:
        """Acknowledge the subscription's next `count` messages (entries, as Pulsar counts them: a batch is one)."""
        try:
            entries = int(count)
        except ValueError:
            raise HttpError(400, f"the number of messages to skip must be a whole number, not {count!r}") from None
        if entries < 0:
            raise HttpError(400, f"the number of messages to skip must be >= 0, not {entries}")
        name = self._name(tenant, namespace, topic)
        self._not_partitioned(name, "Skipping messages")
        owned = self._owned(req, name)
        if isinstance(owned, Response):
            return owned
        self._subscription(owned, subscription).skip(entries)
        owned.maybe_trim()
        return Response.empty()

    def skip_all(self, req: Request, tenant: str, namespace: str, topic: str, subscription: str) -> Response:
        """Clear the subscription's backlog: everything published so far is acknowledged."""
        name = self._name(tenant, namespace, topic)
        if self._each_partition(req, name, f"/subscription/{quote(subscription, safe='')}/skip_all"):
            return Response.empty()  # as Pulsar: every partition's backlog cleared
        owned = self._owned(req, name, must_exist=not self._partition_of_partitioned(name))
        if isinstance(owned, Response):
            return owned
        self._subscription(owned, subscription).skip(None)
        owned.maybe_trim()
        return Response.empty()

    def examine_message(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        """The n-th entry from the first (`initialPosition=earliest`) or the last (`latest`, the default),
        n = `messagePosition` (default 1), as Pulsar's examinemessage: the payload (uncompressed) as the
        body and the metadata in X-Pulsar-* headers."""
        initial = req.query.get("initialPosition", "latest")
        if initial not in ("earliest", "latest"):
            raise HttpError(400, f"initialPosition must be 'earliest' or 'latest', not {initial!r}")
        raw = req.query.get("messagePosition", "1")
        try:
            nth = int(raw)
        except ValueError:
            raise HttpError(400, f"messagePosition must be a whole number, not {raw!r}") from None
        nth = max(nth, 1)  # as Pulsar: positions below 1 mean the first
        name = self._name(tenant, namespace, topic)
        if self._is_partitioned(name):
            raise HttpError(
                405,
                "Examine messages on a partitioned topic is not allowed, please try examine message on specific "
                "topic partition",
            )
        owned = self._owned(req, name)
        if isinstance(owned, Response):
            return owned
        view = owned.ml.view()
        first, last = view.first_position(), view.last_confirmed()
        total = 0 if first is None or last is None else view.count_between(first.before(), last)
        if total == 0:
            raise HttpError(412, "Could not examine messages due to the total message is zero")
        if nth > total:
            raise HttpError(404, f"Message position {nth} is beyond the topic's {total} messages")
        index = nth - 1 if initial == "earliest" else total - nth
        position = next(p for i, p in enumerate(view.positions(first)) if i == index)
        ((_, data),) = owned.ml.read(position, 1)
        return _message_response(position, data)

    def terminate(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        """No more messages on the topic; answers its last message id (the same when already terminated)."""
        name = self._name(tenant, namespace, topic)
        if self._is_partitioned(name):
            raise HttpError(405, "Termination of a partitioned topic is not allowed")
        owned = self._owned(req, name)
        if isinstance(owned, Response):
            return owned
        last = owned.terminate()
        partition = -1 if name.partition is None else name.partition
        return Response.json({"ledgerId": last.ledger_id, "entryId": last.entry_id, "partitionIndex": partition})

    # ---- topic policies: de-duplication -------------------------------------------------------

    def get_deduplication(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        """The topic's own setting (null: none); `applied=true`: the one in force (topic, namespace, broker)."""
        name = self._name(tenant, namespace, topic)
        partitions = namespaces.get_partitions(self.ctx.configuration_store, name)
        probe = name.partition_name(0) if partitions else name  # a partitioned topic's partitions carry it
        if not partitions and not self._exists(name):
            raise HttpError(404, f"Topic {name} not found")
        if req.flag("applied"):
            return Response.json(self.ctx.service.deduplication_in(probe))
        value = self.ctx.service.topic_policies(probe).get("deduplicationEnabled")
        return Response.json(value if isinstance(value, bool) else None)

    def set_deduplication(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        enabled = req.json()
        if not isinstance(enabled, bool):
            raise HttpError(400, f"the body must be true or false, not {enabled!r}")
        return self._deduplication(req, self._name(tenant, namespace, topic), enabled)

    def remove_deduplication(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        return self._deduplication(req, self._name(tenant, namespace, topic), None)

    def _deduplication(self, req: Request, name: TopicName, enabled: bool | None) -> Response:
        """Stored by the topic's owner, which applies it at once; a partitioned topic's go to each partition."""
        if self._each_partition(req, name, "/deduplicationEnabled", enabled):
            return Response.empty()
        owned = self._owned(req, name, must_exist=not self._partition_of_partitioned(name))
        if isinstance(owned, Response):
            return owned
        self.ctx.service.set_topic_policy(name, "deduplicationEnabled", enabled)
        owned.set_deduplication(self.ctx.service.deduplication_in(name))
        return Response.empty()

    def last_message_id(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        owned = self._owned(req, self._name(tenant, namespace, topic))
        if isinstance(owned, Response):
            return owned
        last = owned.ml.last_confirmed()
        ledger, entry = (last.ledger_id, last.entry_id) if last is not None else (-1, -1)
        return Response.json({"ledgerId": ledger, "entryId": entry, "partitionIndex": -1})

    def compact(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        """Start a compaction up to the topic's last message (409 while one runs), as Pulsar's triggerCompaction;
        of each partition of a partitioned topic (each by its owner, through this web service's redirects)."""
        name = self._name(tenant, namespace, topic)
        if not self._exists(name) and self._is_partitioned(name):
            running = []
            for i in range(namespaces.get_partitions(self.ctx.configuration_store, name)):
                partition = name.partition_name(i)
                if not self._exists(partition):
                    continue  # never used: nothing to compact
                try:
                    url = self.ctx.web_url + _path(partition) + "/compaction"
                    fetch.call("PUT", url, headers=self.ctx.internal_headers())
                except HttpError as e:
                    if e.status != 409:
                        raise
                    running.append(str(partition))
            if running:
                raise HttpError(409, f"Compaction already in progress on {', '.join(running)}")
            return Response.empty()
        owned = self._owned(req, name)
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

    def offload(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        """Offload every closed ledger before the one holding the message id in the body, in the background
        (Pulsar's triggerOffload): 409 while an offload runs, 412 without an offloader."""
        owned = self._owned(req, self._name(tenant, namespace, topic))
        if isinstance(owned, Response):
            return owned
        body: Any = req.json()
        ledger = body.get("ledgerId") if isinstance(body, dict) else None
        entry = body.get("entryId") if isinstance(body, dict) else None
        if not isinstance(ledger, int) or not isinstance(entry, int) or isinstance(ledger, bool):
            raise HttpError(400, f'the body must be a message id {{"ledgerId": L, "entryId": E}}, not {body!r}')
        try:
            owned.offloader.trigger(Position(ledger, entry))
        except OffloadRunning as e:
            raise HttpError(409, str(e)) from e
        except OffloadNotConfigured as e:
            raise HttpError(412, str(e)) from e
        return Response.empty()

    def offload_status(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        """Pulsar's OffloadProcessStatus of the last offload: NOT_RUN, RUNNING, SUCCESS or ERROR, lastError,
        firstUnoffloadedMessage."""
        owned = self._owned(req, self._name(tenant, namespace, topic))
        return owned if isinstance(owned, Response) else Response.json(owned.offloader.status_json())


_LATEST = 2**63 - 1  # Pulsar's MessageId.latest: Long.MAX_VALUE ledger and entry ids


def _start_position(req: Request) -> Position | None | bool:
    """Where a subscription made with PUT starts: True after the last entry, None at the first, or at
    the message id the body names (inclusive)."""
    if not req.body.strip():
        return True
    body: Any = req.json()
    if not isinstance(body, dict):
        raise HttpError(400, f'the body must be a message id {{"ledgerId": ..., "entryId": ...}}, not {body!r}')
    ledger, entry = body.get("ledgerId"), body.get("entryId")
    for what, value in (("ledgerId", ledger), ("entryId", entry)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise HttpError(400, f"{what} must be a whole number, not {value!r}")
    assert isinstance(ledger, int) and isinstance(entry, int)
    if ledger == _LATEST and entry == _LATEST:
        return True
    if ledger < 0 or entry < 0:
        return None  # Pulsar's earliest is -1:-1
    return Position(ledger, entry)


def _message_response(position: Position, data: bytes) -> Response:
    """An entry as Pulsar's examinemessage (and peek) answer it: payload as the body, metadata as headers."""
    entry = entry_codec.parse(data, verify_checksum=False)
    meta = entry.metadata
    headers: list[tuple[str, str]] = [("X-Pulsar-Message-ID", f"{position.ledger_id}:{position.entry_id}")]
    properties = {p.key: p.value for p in meta.properties}
    for key, value in properties.items():
        headers.append((f"X-Pulsar-PROPERTY-{key}", value))
    if properties:
        headers.append(("X-Pulsar-Property", json.dumps(properties)))
    headers.append(("X-Pulsar-publish-time", _date(meta.publish_time)))
    if meta.event_time:
        headers.append(("X-Pulsar-event-time", _date(meta.event_time)))
    if meta.HasField("deliver_at_time"):
        headers.append(("X-Pulsar-deliver-at-time", _date(meta.deliver_at_time)))
    if meta.HasField("num_messages_in_batch"):
        headers.append(("X-Pulsar-num-batch-message", str(meta.num_messages_in_batch)))
        headers.append(("X-Pulsar-batch-size", str(len(entry.payload))))
    headers.append(("X-Pulsar-producer-name", meta.producer_name))
    headers.append(("X-Pulsar-sequence-id", str(meta.sequence_id)))
    if meta.HasField("partition_key"):
        headers.append(("X-Pulsar-partition-key", meta.partition_key))
    if meta.HasField("replicated_from"):
        headers.append(("X-Pulsar-replicated-from", meta.replicated_from))
    try:
        body = entry_codec.decompress(entry)
    except entry_codec.UnsupportedCompression:  # kept compressed; the header says how
        body = entry.payload
        headers.append(("X-Pulsar-compression", api.CompressionType.Name(meta.compression)))
        headers.append(("X-Pulsar-uncompressed-size", str(meta.uncompressed_size)))
    return Response(200, body, "application/octet-stream", tuple(headers))


def _date(ms: int) -> str:
    """A time as Pulsar's DateFormatter prints it (ISO-8601 with milliseconds and the offset)."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="milliseconds")


def _path(name: TopicName) -> str:
    """The topic's admin path, its local name percent-encoded."""
    return f"/admin/v2/persistent/{name.tenant}/{name.namespace_portion}/{quote(name.local_name, safe='')}"
