"""The broker's authorization checks: read the tenant's admin roles and the namespace's permissions
from the configuration store (docs/geo-replication.md), let impl/security/authorization.py decide.
Off (everything allowed) unless the broker runs with authorization enabled."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from impl.broker import namespaces
from impl.metadata.naming import NamespaceName, TopicName
from impl.metadata.store import MetadataStore
from impl.security import authorization
from impl.security.authorization import Access, AuthorizationFailed, Facts
from impl.security.settings import Security
from impl.security.tokens import BROKER_ROLE


class Authorizer:
    def __init__(self, store: Callable[[], MetadataStore], security: Security) -> None:
        self.store = store  # a callable: the broker's store changes when its session is renewed
        self.enabled = security.authorization
        self.super_users = security.super_user_roles | {BROKER_ROLE}  # brokers' calls to each other

    def check(
        self,
        role: str | None,
        need: Access,
        *,
        tenant: str | None = None,
        namespace: NamespaceName | None = None,
        topic: TopicName | None = None,
    ) -> None:
        """Nothing when `role` may do what needs `need`; AuthorizationFailed, naming both, otherwise."""
        if not self.enabled:
            return
        if role is None:
            raise AuthorizationFailed("no authenticated role; authorization needs authentication")
        if topic is not None:
            namespace = topic.namespace_name
        if namespace is not None:
            tenant = namespace.tenant
        facts = self._facts(tenant, namespace)
        if not authorization.allowed(role, need, self.super_users, facts, str(topic) if topic else None):
            what = topic or namespace or tenant or "this broker"
            raise AuthorizationFailed(f"role {role!r} is not authorized on {what}: it needs {need.value}")

    def _facts(self, tenant: str | None, namespace: NamespaceName | None) -> Facts:
        store = self.store()
        admins: frozenset[str] = frozenset()
        if tenant is not None:
            with contextlib.suppress(namespaces.AdminError):  # no such tenant: only super-users administer it
                admins = frozenset(namespaces.get_tenant(store, tenant).admin_roles)
        if namespace is None:
            return Facts(admins)
        try:
            return Facts(admins, namespaces.get_policies(store, namespace).auth)
        except namespaces.AdminError:
            return Facts(admins)  # no such namespace: no grants
