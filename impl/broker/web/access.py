"""What each web request needs when authorization is on, read from its method and path alone (so no
route can be added without a rule: an unknown path needs a super-user).

As Pulsar's: clusters are readable by any role; listing and creating tenants, brokers, bookies and
the cluster view need a super-user; a tenant, its namespaces and their permissions need its admin role; a topic's stats,
partitions and lookups need produce or consume, its subscriptions consume, and creating, deleting or
unloading it the tenant's admin role.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from impl.metadata.naming import NamespaceName, TopicName
from impl.security.authorization import Access

OPEN = ("/metrics",)  # served without credentials, as Pulsar's metrics are by default


@dataclass(frozen=True)
class Need:
    access: Access
    tenant: str | None = None
    namespace: NamespaceName | None = None
    topic: TopicName | None = None


_TOPIC_READS = {"stats", "internalStats", "partitioned-stats", "lastMessageId", "partitions"}


def need_of(method: str, path: str) -> Need:
    """The access a request needs; ValueError-free: a path it cannot read needs a super-user."""
    segments = [unquote(s) for s in path.strip("/").split("/")]
    try:
        if segments[:3] == ["lookup", "v2", "topic"] and len(segments) >= 7:
            return _topic_need(Access.LOOKUP, *segments[3:7])
        if segments[:2] != ["admin", "v2"] or len(segments) < 3:
            return Need(Access.SUPER_USER)
        kind, rest = segments[2], segments[3:]
        if kind == "clusters" and method == "GET":
            return Need(Access.AUTHENTICATED)
        if kind == "tenants" and len(rest) == 1 and method in ("GET", "DELETE"):
            return Need(
                Access.TENANT_ADMIN, rest[0]
            )  # its admins may read and delete it; creating one is a super-user's
        if kind == "schemas" and len(rest) >= 3:
            # As Pulsar's topic operations: GET_SCHEMA a lookup, uploading a produce, DELETE_SCHEMA an admin's
            action = rest[3] if len(rest) > 3 else ""
            need = Access.LOOKUP
            if method == "POST" and action == "schema":
                need = Access.PRODUCE
            elif method == "DELETE":
                need = Access.TENANT_ADMIN
            return _topic_need(need, "persistent", *rest[:3])
        if kind == "namespaces" and rest:
            if len(rest) >= 2:
                ns = NamespaceName(rest[0], rest[1])
                if rest[2:] == ["topics"] and method == "GET":
                    return Need(Access.CONSUME, ns.tenant, ns)
                return Need(Access.TENANT_ADMIN, ns.tenant, ns)
            return Need(Access.TENANT_ADMIN, rest[0])
        if kind in ("persistent", "non-persistent") and len(rest) >= 2:
            if len(rest) == 2 or rest[2] == "partitioned":  # the namespace's topic lists
                return Need(Access.CONSUME, rest[0], NamespaceName(rest[0], rest[1]))
            action = rest[3] if len(rest) > 3 else ""
            if action in _TOPIC_READS and method == "GET":
                need = Access.LOOKUP
            elif action in ("subscriptions", "subscription"):
                need = Access.CONSUME
            else:  # creating, deleting, unloading, partitioning, permissions
                need = Access.TENANT_ADMIN
            return _topic_need(need, kind, *rest[:3])
    except ValueError:  # a name that does not parse: only a super-user gets as far as its 4xx
        pass
    return Need(Access.SUPER_USER)


def refusal(need: Need, role: str) -> tuple[int, str]:
    """Pulsar's status and sentence for a request the role may not make, with what the role lacked:
    401 for a super-user's, a tenant admin's or a topic's operation, 403 for a namespace's (Pulsar's
    code answers so, whatever its API documentation lists)."""
    lacked = f"role {role!r} lacks {need.access.value}"
    if need.access is Access.SUPER_USER:
        return 401, f"This operation requires super-user access ({lacked})"
    if need.access is Access.TENANT_ADMIN:
        return 401, f"Don't have permission to administrate resources on this tenant ({lacked} of {need.tenant})"
    operation = {Access.LOOKUP: "LOOKUP", Access.PRODUCE: "PRODUCE", Access.CONSUME: "CONSUME"}.get(need.access, "")
    if need.topic is not None:
        return (
            401,
            f"Unauthorized to validateTopicOperation for operation [{operation}] on topic [{need.topic}] ({lacked})",
        )
    return 403, (
        f"Unauthorized to validateNamespaceOperation for operation [GET_TOPICS] on namespace [{need.namespace}] "
        f"({lacked})"
    )


def _topic_need(access: Access, domain: str, tenant: str, namespace: str, local: str) -> Need:
    topic = TopicName.parse(f"{domain}://{tenant}/{namespace}/{local}")
    return Need(access, topic.tenant, topic.namespace_name, topic)
