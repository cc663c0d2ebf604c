"""The authorization rules as pure decisions: who may do what, how grants combine, and what each web
request needs."""

from __future__ import annotations

import pytest

from impl.broker.web.access import need_of, refusal
from impl.metadata.naming import NamespaceName, TopicName
from impl.security.authorization import (
    Access,
    AuthPolicies,
    Facts,
    InvalidPermissions,
    allowed,
    parse_actions,
)

TOPIC = "persistent://acme/ns/orders"
OTHER = "persistent://acme/ns/audit"


def test_super_users_tenant_admins_and_grants_each_allow_what_they_should() -> None:
    policies = AuthPolicies({"writer": frozenset({"produce"})}).grant("reader", frozenset({"consume"}), TOPIC)
    facts = Facts(frozenset({"acme-admin"}), policies)
    supers = {"root"}
    expected = {
        # role: (lookup, produce, consume, tenant admin, super-user) on TOPIC
        "root": (True, True, True, True, True),
        "acme-admin": (True, True, True, True, False),
        "writer": (True, True, False, False, False),
        "reader": (True, False, True, False, False),
        "stranger": (False, False, False, False, False),
    }
    needs = (Access.LOOKUP, Access.PRODUCE, Access.CONSUME, Access.TENANT_ADMIN, Access.SUPER_USER)
    for role, answers in expected.items():
        got = tuple(allowed(role, need, supers, facts, TOPIC) for need in needs)
        assert got == answers, role
        assert allowed(role, Access.AUTHENTICATED, supers, facts)
    # The reader's grant is on one topic only; the writer's covers the namespace.
    assert not allowed("reader", Access.CONSUME, supers, facts, OTHER)
    assert allowed("writer", Access.PRODUCE, supers, facts, OTHER)


def test_grants_replace_revokes_remove_and_the_topic_view_merges_both_levels() -> None:
    policies = AuthPolicies().grant("app", frozenset({"produce", "consume"}))
    policies = policies.grant("app", frozenset({"consume"}))  # a grant replaces
    assert policies.namespace_auth == {"app": frozenset({"consume"})}
    policies = policies.grant("app", frozenset({"produce"}), TOPIC)
    assert policies.on_topic(TOPIC) == {"app": frozenset({"consume", "produce"})}
    assert policies.on_topic(OTHER) == {"app": frozenset({"consume"})}
    assert AuthPolicies.from_json(policies.to_json()) == policies
    revoked = policies.revoke("app")
    assert revoked.on_topic(OTHER) == {} and revoked.on_topic(TOPIC) == {"app": frozenset({"produce"})}
    with pytest.raises(InvalidPermissions, match="namespace level"):
        revoked.revoke("app")
    with pytest.raises(InvalidPermissions, match="topic level"):
        policies.revoke("nobody", TOPIC)


@pytest.mark.parametrize("body", [["produce", "steal"], "produce", [1], {"produce": True}, None])
def test_actions_must_be_a_list_of_pulsars_names(body: object) -> None:
    with pytest.raises(InvalidPermissions):
        parse_actions(body)


def test_every_web_request_needs_what_pulsar_asks_for_it() -> None:
    ns = NamespaceName("acme", "ns")
    topic = TopicName.parse("persistent://acme/ns/my%20topic".replace("%20", " "))
    cases = [
        ("GET", "/admin/v2/clusters", Access.AUTHENTICATED, None),
        ("PUT", "/admin/v2/clusters/x", Access.SUPER_USER, None),
        ("GET", "/admin/v2/tenants", Access.SUPER_USER, None),
        ("PUT", "/admin/v2/tenants/acme", Access.SUPER_USER, None),
        ("GET", "/admin/v2/tenants/acme", Access.TENANT_ADMIN, None),
        ("DELETE", "/admin/v2/tenants/acme", Access.TENANT_ADMIN, None),
        ("GET", "/admin/v2/namespaces/acme", Access.TENANT_ADMIN, None),
        ("PUT", "/admin/v2/namespaces/acme/ns", Access.TENANT_ADMIN, None),
        ("POST", "/admin/v2/namespaces/acme/ns/permissions/app", Access.TENANT_ADMIN, None),
        ("GET", "/admin/v2/namespaces/acme/ns/topics", Access.CONSUME, None),
        ("GET", "/admin/v2/persistent/acme/ns", Access.CONSUME, None),
        ("GET", "/admin/v2/persistent/acme/ns/my%20topic/stats", Access.LOOKUP, topic),
        ("GET", "/admin/v2/persistent/acme/ns/my%20topic/partitions", Access.LOOKUP, topic),
        ("PUT", "/admin/v2/persistent/acme/ns/my%20topic/partitions", Access.TENANT_ADMIN, topic),
        ("DELETE", "/admin/v2/persistent/acme/ns/my%20topic", Access.TENANT_ADMIN, topic),
        ("PUT", "/admin/v2/persistent/acme/ns/my%20topic/unload", Access.TENANT_ADMIN, topic),
        ("GET", "/admin/v2/persistent/acme/ns/my%20topic/subscriptions", Access.CONSUME, topic),
        ("DELETE", "/admin/v2/persistent/acme/ns/my%20topic/subscription/s", Access.CONSUME, topic),
        ("POST", "/admin/v2/persistent/acme/ns/my%20topic/permissions/app", Access.TENANT_ADMIN, topic),
        ("GET", "/lookup/v2/topic/persistent/acme/ns/my%20topic", Access.LOOKUP, topic),
        ("GET", "/admin/v2/schemas/acme/ns/my%20topic/schema", Access.LOOKUP, topic),
        ("POST", "/admin/v2/schemas/acme/ns/my%20topic/schema", Access.PRODUCE, topic),
        ("POST", "/admin/v2/schemas/acme/ns/my%20topic/compatibility", Access.LOOKUP, topic),
        ("DELETE", "/admin/v2/schemas/acme/ns/my%20topic/schema", Access.TENANT_ADMIN, topic),
        ("GET", "/admin/v2/brokers/standalone", Access.SUPER_USER, None),
        ("GET", "/admin/v2/bookies/all", Access.SUPER_USER, None),
        ("GET", "/view", Access.SUPER_USER, None),
        ("GET", "/admin/v2/persistent/bad%2Fname/ns/t/stats", Access.SUPER_USER, None),  # unparsable
        ("GET", "/no/such/thing", Access.SUPER_USER, None),
    ]
    for method, path, access, on_topic in cases:
        need = need_of(method, path)
        assert need.access is access, (method, path)
        assert need.topic == on_topic, (method, path)
        if on_topic is not None or "/namespaces/acme/ns" in path:
            assert need.namespace == ns, path
    # Pulsar's statuses: 403 for a namespace operation, 401 for the rest.
    assert refusal(need_of("GET", "/admin/v2/namespaces/acme/ns/topics"), "x")[0] == 403
    status, reason = refusal(need_of("GET", "/admin/v2/persistent/acme/ns/t/stats"), "x")
    assert status == 401 and reason.startswith("Unauthorized to validateTopicOperation for operation [LOOKUP]")
    assert refusal(need_of("PUT", "/admin/v2/tenants/a"), "x")[1].startswith("This operation requires super-user")
