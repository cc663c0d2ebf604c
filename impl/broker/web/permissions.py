"""Granting and revoking permissions, as Pulsar's admin API does it: on a namespace
(`/admin/v2/namespaces/{tenant}/{namespace}/permissions[/{role}]`) and on a topic
(`/admin/v2/persistent/{tenant}/{namespace}/{topic}/permissions[/{role}]`). A grant's body is the
JSON list of actions, e.g. ["produce", "consume"]; it replaces what the role held there. The grants
live in the namespace's policies node, so every broker sees a change at once."""

from __future__ import annotations

from impl.broker import namespaces
from impl.broker.web.context import WebContext
from impl.metadata.naming import NamespaceName, TopicName, check_named_entity
from impl.security.authorization import InvalidPermissions, parse_actions
from impl.web.http import HttpError, Request, Response, Router

NS = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/permissions"


def install(r: Router, ctx: WebContext) -> None:
    def namespace_of(tenant: str, namespace: str) -> NamespaceName:
        return NamespaceName(check_named_entity("tenant", tenant), check_named_entity("namespace", namespace))

    def topic_of(tenant: str, namespace: str, topic: str) -> TopicName:
        return TopicName.parse(f"persistent://{tenant}/{namespace}/{topic}")

    def actions_of(req: Request) -> frozenset[str]:
        try:
            return parse_actions(req.json())
        except InvalidPermissions as e:
            raise HttpError(400, str(e)) from None

    def grants_json(grants: dict[str, frozenset[str]]) -> Response:
        return Response.json({role: sorted(actions) for role, actions in sorted(grants.items())})

    def get_namespace(req: Request, tenant: str, namespace: str) -> Response:
        policies = namespaces.get_policies(ctx.configuration_store, namespace_of(tenant, namespace))
        return grants_json(dict(policies.auth.namespace_auth))

    def grant_namespace(req: Request, tenant: str, namespace: str, role: str) -> Response:
        namespaces.grant_permission(ctx.configuration_store, namespace_of(tenant, namespace), role, actions_of(req))
        return Response.empty()

    def revoke_namespace(req: Request, tenant: str, namespace: str, role: str) -> Response:
        namespaces.revoke_permission(ctx.configuration_store, namespace_of(tenant, namespace), role)
        return Response.empty()

    def get_topic(req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = topic_of(tenant, namespace, topic)
        return grants_json(
            namespaces.get_policies(ctx.configuration_store, name.namespace_name).auth.on_topic(str(name))
        )

    def grant_topic(req: Request, tenant: str, namespace: str, topic: str, role: str) -> Response:
        name = topic_of(tenant, namespace, topic)
        namespaces.grant_permission(ctx.configuration_store, name.namespace_name, role, actions_of(req), str(name))
        return Response.empty()

    def revoke_topic(req: Request, tenant: str, namespace: str, topic: str, role: str) -> Response:
        name = topic_of(tenant, namespace, topic)
        namespaces.revoke_permission(ctx.configuration_store, name.namespace_name, role, str(name))
        return Response.empty()

    r.add("GET", NS, get_namespace)
    r.add("POST", NS + "/{role}", grant_namespace)
    r.add("DELETE", NS + "/{role}", revoke_namespace)
    r.add("GET", TOPIC, get_topic)
    r.add("POST", TOPIC + "/{role}", grant_topic)
    r.add("DELETE", TOPIC + "/{role}", revoke_topic)
