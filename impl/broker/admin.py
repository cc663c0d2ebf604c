"""Admin operations in the spirit of `pulsar-admin`: tenants, namespaces, topics, stats.

Served by every broker through the gRPC `Admin` call (verb + JSON arguments). Metadata-only
verbs run anywhere; verbs about one topic's data (stats, unload, delete) run on the broker
that owns it, and answer NOT_OWNER elsewhere, so the client looks the topic up first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from impl.broker import namespaces
from impl.broker.errors import AlreadyExists, BrokerError, NotEmptyError, ServiceNotReady, TopicNotFound
from impl.broker.naming import InvalidNamespaceName
from impl.broker.service import BrokerService, parse_topic
from impl.metadata.store import ConnectionLoss, MetadataStore, SessionExpired

# Which broker error each admin metadata error becomes on the wire.
_ADMIN_ERRORS: dict[type[namespaces.AdminError], type[BrokerError]] = {
    namespaces.TenantNotFound: TopicNotFound,
    namespaces.NamespaceNotFound: TopicNotFound,
    namespaces.PartitionedTopicNotFound: TopicNotFound,
    namespaces.AlreadyExists: AlreadyExists,
    namespaces.NotEmpty: NotEmptyError,
}


class AdminError(BrokerError):
    """An admin request that cannot be done (bad verb, bad arguments)."""


def _arg(args: dict[str, Any], name: str, kind: type = str) -> Any:
    value = args.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise AdminError(f"argument {name!r} ({kind.__name__}) is required")
    return value


class Admin:
    def __init__(self, service: BrokerService, store: MetadataStore) -> None:
        self.service = service
        self.store = store
        self.verbs: dict[str, Callable[[dict[str, Any]], Any]] = {
            "tenants list": lambda a: namespaces.list_tenants(self.store),
            "tenants create": lambda a: namespaces.create_tenant(self.store, _arg(a, "tenant")),
            "tenants delete": lambda a: namespaces.delete_tenant(self.store, _arg(a, "tenant")),
            "namespaces list": lambda a: [str(n) for n in namespaces.list_namespaces(self.store, _arg(a, "tenant"))],
            "namespaces create": self._create_namespace,
            "namespaces delete": lambda a: namespaces.delete_namespace(self.store, _arg(a, "namespace")),
            "topics list": self._list_topics,
            "topics create": self._create_topic,
            "topics create-partitioned": self._create_partitioned,
            "topics partitions": lambda a: namespaces.get_partitions(self.store, parse_topic(_arg(a, "topic"))),
            "topics delete": self._delete_topic,
            "topics unload": self._unload_topic,
            "topics stats": lambda a: self.service.topic(_arg(a, "topic")).stats(),
            "topics internal-stats": lambda a: self.service.topic(_arg(a, "topic")).ml.stats(),
            "topics unsubscribe": self._unsubscribe,
            "brokers list": lambda a: self.service.ownership.live_brokers(),
        }

    def run(self, verb: str, args: dict[str, Any]) -> Any:
        action = self.verbs.get(verb)
        if action is None:
            raise AdminError(f"unknown admin verb {verb!r}; known: {', '.join(sorted(self.verbs))}")
        try:
            return action(args)
        except namespaces.AdminError as e:
            raise _ADMIN_ERRORS.get(type(e), AdminError)(str(e)) from e
        except InvalidNamespaceName as e:
            raise AdminError(str(e)) from e
        except (SessionExpired, ConnectionLoss) as e:  # this broker's session is being renewed: retry
            raise ServiceNotReady(f"admin {verb!r}: the metadata session is not usable now ({e}); retry") from e

    def _create_namespace(self, args: dict[str, Any]) -> str:
        bundles = args.get("bundles", 4)
        if not isinstance(bundles, int) or isinstance(bundles, bool):
            raise AdminError("argument 'bundles' must be a whole number")
        policies = namespaces.NamespacePolicies(bundles=bundles)
        return str(namespaces.create_namespace(self.store, _arg(args, "namespace"), policies))

    def _create_partitioned(self, args: dict[str, Any]) -> str:
        topic = parse_topic(_arg(args, "topic"))
        return str(namespaces.create_partitioned_topic(self.store, topic, _arg(args, "partitions", int)))

    def _list_topics(self, args: dict[str, Any]) -> list[str]:
        return [str(t) for t in namespaces.list_topics(self.store, _arg(args, "namespace"))]

    def _create_topic(self, args: dict[str, Any]) -> str:
        topic = self.service.topic(_arg(args, "topic"))  # loading creates the managed ledger
        return str(topic.name)

    def _delete_topic(self, args: dict[str, Any]) -> str:
        topic = self.service.topic(_arg(args, "topic"))
        if any(sub.sinks for sub in topic.subscriptions.values()):
            raise NotEmptyError(f"{topic.name} has connected consumers; close them first")
        self.service.unload_topics(lambda n: n == topic.name, graceful=False)
        topic.ml.delete()
        return str(topic.name)

    def _unload_topic(self, args: dict[str, Any]) -> list[str]:
        name = parse_topic(_arg(args, "topic"))
        return self.service.unload_topics(lambda n: n == name, graceful=True)

    def _unsubscribe(self, args: dict[str, Any]) -> str:
        topic = self.service.topic(_arg(args, "topic"))
        topic.unsubscribe(_arg(args, "subscription"))
        return "ok"
