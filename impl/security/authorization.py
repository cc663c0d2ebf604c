"""Pulsar's authorization rules, as pure decisions over what the metadata store holds.

A role is allowed an action on a topic when it is a super-user, an admin of the topic's tenant, or
holds the action's permission on the topic's namespace or on the topic itself (the namespace
policies' `auth_policies`: `namespace_auth` maps a role to its actions, `destination_auth` a topic
to such a map). A lookup needs produce or consume. Administering a tenant's namespaces and topics
needs its admin role; tenants, brokers and bookies need a super-user.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")  # Pulsar's AuthAction names


class AuthorizationFailed(Exception):
    """The role is not allowed what it asked; the message names the role and the action."""


class InvalidPermissions(ValueError):
    """Actions that are not Pulsar's, or a body that is not a list of them."""


def parse_actions(raw: Any) -> frozenset[str]:
    """The actions of a grant: a JSON list of AuthAction names."""
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise InvalidPermissions(f"give the actions as a JSON list of {', '.join(ACTIONS)}, not {raw!r}")
    unknown = sorted(set(raw) - set(ACTIONS))
    if unknown:
        raise InvalidPermissions(f"unknown actions {unknown}; Pulsar's are {', '.join(ACTIONS)}")
    return frozenset(raw)


Grants = Mapping[str, frozenset[str]]  # role -> actions


@dataclass(frozen=True)
class AuthPolicies:
    """The permissions a namespace's policies hold (Pulsar's AuthPolicies)."""

    namespace_auth: Grants = field(default_factory=dict)
    destination_auth: Mapping[str, Grants] = field(default_factory=dict)  # topic -> role -> actions

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace_auth": _grants_json(self.namespace_auth),
            "destination_auth": {t: _grants_json(g) for t, g in sorted(self.destination_auth.items()) if g},
            "subscription_auth_roles": {},
        }

    @classmethod
    def from_json(cls, raw: Any) -> AuthPolicies:
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise InvalidPermissions(f"auth_policies is {raw!r}, not an object")
        topics = raw.get("destination_auth") or {}
        if not isinstance(topics, dict):
            raise InvalidPermissions(f"destination_auth is {topics!r}, not an object")
        return cls(_grants_of(raw.get("namespace_auth") or {}), {t: _grants_of(g) for t, g in topics.items()})

    def grant(self, role: str, actions: frozenset[str], topic: str | None = None) -> AuthPolicies:
        """Grant replaces the role's actions (as Pulsar's grant-permission does)."""
        if topic is None:
            return AuthPolicies(dict(self.namespace_auth) | {role: actions}, self.destination_auth)
        on_topic = dict(self.destination_auth.get(topic, {})) | {role: actions}
        return AuthPolicies(self.namespace_auth, dict(self.destination_auth) | {topic: on_topic})

    def revoke(self, role: str, topic: str | None = None) -> AuthPolicies:
        """Without the role's grant; InvalidPermissions when it had none there."""
        where = self.namespace_auth if topic is None else self.destination_auth.get(topic, {})
        if role not in where:
            level = "namespace" if topic is None else "topic"
            raise InvalidPermissions(f"role {role!r} has no permissions at the {level} level to revoke")
        kept = {r: a for r, a in where.items() if r != role}
        if topic is None:
            return AuthPolicies(kept, self.destination_auth)
        return AuthPolicies(self.namespace_auth, dict(self.destination_auth) | {topic: kept})

    def on_topic(self, topic: str) -> dict[str, frozenset[str]]:
        """Every role's actions on the topic: the namespace's grants with the topic's own added."""
        merged = dict(self.namespace_auth)
        for role, actions in self.destination_auth.get(topic, {}).items():
            merged[role] = merged.get(role, frozenset()) | actions
        return merged


def _grants_json(grants: Grants) -> dict[str, list[str]]:
    return {role: sorted(actions) for role, actions in sorted(grants.items())}


def _grants_of(raw: Any) -> dict[str, frozenset[str]]:
    if not isinstance(raw, dict):
        raise InvalidPermissions(f"permissions {raw!r} are not an object of role -> actions")
    return {str(role): parse_actions(actions) for role, actions in raw.items()}


class Access(Enum):
    """What a request needs, from the least to the most."""

    AUTHENTICATED = "any authenticated role"
    LOOKUP = "produce or consume"
    PRODUCE = "produce"
    CONSUME = "consume"
    TENANT_ADMIN = "the tenant's admin role"
    SUPER_USER = "a super-user role"


@dataclass(frozen=True)
class Facts:
    """What a decision reads from the metadata store: the tenant's admins and the namespace's grants."""

    tenant_admins: frozenset[str] = frozenset()
    policies: AuthPolicies = field(default_factory=AuthPolicies)


def allowed(role: str, need: Access, super_users: Iterable[str], facts: Facts, topic: str | None = None) -> bool:
    """May `role` do what needs `need` (on `topic`, for the topic-level grants)?"""
    if role in set(super_users):
        return True
    if need is Access.AUTHENTICATED:
        return True
    if need is Access.SUPER_USER:
        return False
    if role in facts.tenant_admins:
        return True
    if need is Access.TENANT_ADMIN:
        return False
    actions = facts.policies.on_topic(topic) if topic else dict(facts.policies.namespace_auth)
    held = actions.get(role, frozenset())
    if need is Access.LOOKUP:
        return bool(held & {"produce", "consume"})
    return need.value in held
