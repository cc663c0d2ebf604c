"""Authorization on a standalone process with tokens: super-users, tenant admins, produce and consume
grants on namespaces and topics, judged by the official client and the admin REST API; and a fuzz of
the credentials a client sends (CONNECT's auth fields, HTTP's Authorization header)."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from impl.broker.connection import command
from impl.broker.web.admin_client import AdminClient, topic_path
from impl.protocol import frames
from impl.protocol import pulsar_api_pb2 as api
from impl.security import tokens
from impl.web import client as http
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import Standalone
from tests.processes import ROOT
from tests.raw_socket import exchange

T = api.BaseCommand
PULSARS_REFUSALS = (
    "This operation requires super-user access",
    "Don't have permission to administrate resources on this tenant",
    "Unauthorized to validateTopicOperation for operation",
)


class Secured:
    def __init__(self, standalone: Standalone, secret: bytes, key_file: Path) -> None:
        self.standalone, self.secret, self.key_file = standalone, secret, key_file

    def token(self, role: str) -> str:
        return tokens.create_token(role, secret_key=self.secret)

    def admin(self, role: str) -> AdminClient:
        return AdminClient(self.standalone.web_url, token=self.token(role), timeout_s=20)

    def client(self, role: str) -> pulsar.Client:
        auth = pulsar.AuthenticationToken(self.token(role))
        return pulsar.Client(self.standalone.url, authentication=auth, operation_timeout_seconds=10)

    def produce(self, role: str, topic: str, payload: bytes = b"m") -> None:
        client = self.client(role)
        try:
            client.create_producer(topic).send(payload)
        finally:
            client.close()

    def subscribe(self, role: str, topic: str) -> None:
        client = self.client(role)
        try:
            client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
        finally:
            client.close()

    def entries(self, topic: str) -> int:
        try:
            return int(self.admin("root").call("GET", topic_path(topic) + "/internalStats")["numberOfEntries"])
        except HttpError as e:
            assert e.status == 404, e
            return 0


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("authz")
    secret = tokens.create_secret_key()
    key = directory / "secret.key"
    key.write_bytes(secret)
    standalone = Standalone(
        directory / "data",
        "--authentication-enabled",
        "--token-secret-key",
        str(key),
        "--authorization-enabled",
        "--super-user-roles",
        "root,ops",
    )
    try:
        yield Secured(standalone, secret, key)
    finally:
        standalone.stop()


def admin_cli(secured: Secured, role: str, *args: str) -> subprocess.CompletedProcess[str]:
    command_line = [sys.executable, "-m", "pulsar_ref.cli", "admin", "--admin-url", secured.standalone.web_url]
    command_line += ["--token", secured.token(role), *args]
    return subprocess.run(command_line, cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.processes
def test_a_role_without_permission_writes_nothing_until_granted_and_nothing_after_revoked(secured: Secured) -> None:
    topic = "persistent://public/default/granted"
    with pytest.raises(pulsar.AuthorizationError):
        secured.produce("app", topic, b"before the grant")
    assert secured.entries(topic) == 0
    granted = admin_cli(secured, "root", "namespaces", "grant-permission", "public/default", "--role", "app",
                        "--actions", "produce")  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    listed = admin_cli(secured, "root", "namespaces", "permissions", "public/default")
    assert '"app": [\n    "produce"\n  ]' in listed.stdout
    secured.produce("app", topic, b"granted")
    assert secured.entries(topic) == 1
    with pytest.raises(pulsar.AuthorizationError):  # produce does not give consume
        secured.subscribe("app", topic)
    # A grant on one topic gives consume there only.
    assert admin_cli(secured, "root", "topics", "grant-permission", topic, "--role", "app", "--actions",
                     "consume").returncode == 0  # fmt: skip
    secured.subscribe("app", topic)
    with pytest.raises(pulsar.AuthorizationError):
        secured.subscribe("app", "persistent://public/default/not-granted")
    revoked = admin_cli(secured, "root", "namespaces", "revoke-permission", "public/default", "--role", "app")
    assert revoked.returncode == 0, revoked.stderr
    with pytest.raises(pulsar.AuthorizationError):
        secured.produce("app", topic, b"after the revoke")
    assert secured.entries(topic) == 1
    again = admin_cli(secured, "root", "namespaces", "revoke-permission", "public/default", "--role", "app")
    assert again.returncode == 2 and "no permissions at the namespace level" in again.stderr


@pytest.mark.processes
def test_tenant_admins_administer_their_tenant_only(secured: Secured) -> None:
    created = admin_cli(secured, "ops", "tenants", "create", "acme", "--admin-roles", "acme-admin")
    assert created.returncode == 0, created.stderr
    acme = secured.admin("acme-admin")
    acme.call("PUT", "/admin/v2/namespaces/acme/orders", {})
    acme.call("POST", "/admin/v2/namespaces/acme/orders/permissions/shop", ["produce", "consume"])
    secured.produce("acme-admin", "persistent://acme/orders/o1")  # a tenant admin may use its topics
    secured.produce("shop", "persistent://acme/orders/o1")
    assert secured.entries("persistent://acme/orders/o1") == 2
    assert acme.call("GET", topic_path("persistent://acme/orders/o1") + "/stats")["msgInCounter"] == 2
    refusals = [
        (acme, "PUT", "/admin/v2/tenants/acme2", {}),  # tenants: super-users only
        (acme, "PUT", "/admin/v2/namespaces/public/mine", {}),  # another tenant
        (acme, "GET", "/admin/v2/bookies/all", None),
        (acme, "GET", "/admin/v2/tenants/public", None),  # another tenant's info
        (secured.admin("shop"), "PUT", "/admin/v2/namespaces/acme/more", {}),  # a user is not an admin
        (secured.admin("shop"), "DELETE", topic_path("persistent://acme/orders/o1"), None),
        (secured.admin("shop"), "POST", "/admin/v2/namespaces/acme/orders/permissions/shop", ["produce"]),
        (secured.admin("stranger"), "GET", topic_path("persistent://acme/orders/o1") + "/stats", None),
        (secured.admin("stranger"), "GET", "/lookup/v2/topic/persistent/acme/orders/o1", None),
    ]
    for admin, method, path, body in refusals:
        with pytest.raises(HttpError) as refused:
            admin.call(method, path, body)
        assert refused.value.status == 401, (method, path)
        assert any(sentence in refused.value.reason for sentence in PULSARS_REFUSALS), refused.value.reason
    with pytest.raises(HttpError) as namespace_operation:  # Pulsar answers a namespace's operation 403
        secured.admin("stranger").call("GET", "/admin/v2/namespaces/acme/orders/topics")
    assert namespace_operation.value.status == 403 and "validateNamespaceOperation" in namespace_operation.value.reason
    with pytest.raises(HttpError) as anonymous:
        AdminClient(secured.standalone.web_url).call("GET", "/admin/v2/namespaces/acme")
    assert anonymous.value.status == 401
    # What the refused calls would have made does not exist.
    assert "persistent://acme/orders/o1" in secured.admin("root").call("GET", "/admin/v2/persistent/acme/orders")
    assert "acme2" not in secured.admin("root").call("GET", "/admin/v2/tenants")
    assert acme.call("GET", "/admin/v2/tenants/acme")["adminRoles"] == ["acme-admin"]  # its own, as in Pulsar
    with pytest.raises(pulsar.AuthorizationError):
        secured.produce("stranger", "persistent://acme/orders/o1")
    assert secured.entries("persistent://acme/orders/o1") == 2


def _connect(method: str | None, data: bytes | None) -> bytes:
    c = api.CommandConnect(client_version="fuzz", protocol_version=20)
    if method is not None:
        c.auth_method_name = method
    if data is not None:
        c.auth_data = data
    return frames.encode(command(T.CONNECT, connect=c))


def _answer(port: int, data: bytes) -> list[frames.Frame]:
    return frames.FrameDecoder().feed(exchange(port, data, 10))


@pytest.mark.processes
def test_fuzzed_credentials_are_refused_with_authentication_errors_and_harm_nothing(secured: Secured) -> None:
    rng = random.Random(31)
    port = int(secured.standalone.url.rsplit(":", 1)[1])
    good = secured.token("root")
    cases: list[tuple[str | None, bytes | None]] = [
        (None, None),
        ("token", None),
        ("token", b""),
        ("basic", good.encode()),
        ("tls", b"x"),
        ("token", good.encode()[:-3]),  # a truncated signature
        ("token", good.encode() + b"."),
        ("token", b"\xff\xfe\x00" * 50),
        ("token", rng.randbytes(4096)),
        ("token" * 100, good.encode()),
    ]
    cases += [("token", rng.randbytes(rng.randint(1, 600))) for _ in range(15)]
    for method, data in cases:
        answer = _answer(port, _connect(method, data))
        assert [f.command.type for f in answer] == [T.ERROR], (method, data)
        assert answer[0].command.error.error == api.AuthenticationError, (method, data)
    assert [f.command.type for f in _answer(port, _connect("token", good.encode()))][:1] == [T.CONNECTED]
    headers = ["", "Bearer", "Bearer ", "bearer x", "Basic " + good, "Bearer " + good[:-2], good]
    headers += ["Bearer " + "".join(rng.choice("ab.-_=/+ \t") for _ in range(rng.randint(1, 300))) for _ in range(15)]
    for value in headers:
        status, _, _ = http.exchange(
            "GET", secured.standalone.web_url + "/admin/v2/tenants", None, 10, {"Authorization": value}
        )
        assert status == 401, value
    # Still serving, and nothing was created by any of it.
    secured.produce("root", "persistent://public/default/after-fuzz")
    assert secured.entries("persistent://public/default/after-fuzz") == 1


class Sample(pulsar.schema.Record):
    value = pulsar.schema.Integer()


@pytest.mark.processes
def test_schema_requests_on_a_topic_the_role_may_not_use_are_refused_and_register_nothing(secured: Secured) -> None:
    topic = "persistent://public/default/typed-guarded"
    path = "/admin/v2/schemas/public/default/typed-guarded"
    definition = {"type": "AVRO", "schema": pulsar.schema.AvroSchema(Sample).schema_info().schema(), "properties": {}}
    requests = [("POST", "/schema", definition), ("GET", "/schema", None), ("GET", "/schemas", None)]
    for method, endpoint, body in requests:
        with pytest.raises(HttpError) as refused:
            secured.admin("stranger").call(method, path + endpoint, body)
        assert refused.value.status == 401 and "Unauthorized to validateTopicOperation" in refused.value.reason
    client = secured.client("stranger")
    try:
        with pytest.raises(pulsar.AuthorizationError):  # a typed producer: nothing registered either
            client.create_producer(topic, schema=pulsar.schema.AvroSchema(Sample))
    finally:
        client.close()
    with pytest.raises(HttpError) as none:
        secured.admin("root").call("GET", path + "/schema")
    assert none.value.status == 404

    secured.admin("root").call("POST", path + "/schema", definition)
    granted = admin_cli(secured, "root", "topics", "grant-permission", topic, "--role", "reader", "--actions",
                        "consume")  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    assert secured.admin("reader").call("GET", path + "/schema")["version"] == 0  # a lookup's right suffices
    with pytest.raises(HttpError) as upload:  # uploading needs produce
        secured.admin("reader").call("POST", path + "/schema", definition)
    assert upload.value.status == 401
