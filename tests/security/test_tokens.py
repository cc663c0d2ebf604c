"""Token authentication: the tokens themselves, `pulsar-ref tokens`, and a standalone process that
requires a token on the binary protocol and on the web service, judged by the official client."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from impl.broker.web.admin_client import AdminClient, topic_path
from impl.security import tokens
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import Standalone
from tests.processes import ROOT


def test_hs256_and_rs256_tokens_name_their_role_and_bad_ones_are_refused() -> None:
    secret = tokens.create_secret_key()
    by_secret = tokens.TokenAuthenticator(secret_key=secret)
    assert by_secret.authenticate(tokens.create_token("alice", secret_key=secret)) == "alice"
    private, public = tokens.create_key_pair()
    by_key = tokens.TokenAuthenticator(public_key=public)
    assert by_key.authenticate(tokens.create_token("bob", private_key=private, expires_in_s=60)) == "bob"
    refused = [
        (by_secret, ""),
        (by_secret, "not.a.token"),
        (by_secret, tokens.create_token("alice", secret_key=tokens.create_secret_key())),  # another key
        (by_secret, tokens.create_token("alice", secret_key=secret, expires_in_s=-10)),  # expired
        (by_key, tokens.create_token("bob", secret_key=secret)),  # HS256 where RS256 is expected
        (by_secret, tokens.create_token("", secret_key=secret)),  # no role
    ]
    for authenticator, token in refused:
        with pytest.raises(tokens.AuthenticationFailed):
            authenticator.authenticate(token)
    with pytest.raises(ValueError):
        tokens.TokenAuthenticator()


@pytest.mark.parametrize(
    ("header", "answer"),
    [
        ("", "Authentication required: send Authorization: Bearer <token>"),
        ("Basic YWxpY2U6cHc=", "Authentication required: send Authorization: Bearer <token>"),
        ("Bearer   ", "Authentication required: send Authorization: Bearer <token>"),
        ("Bearer not.a.token", "Authentication failed: the token is not valid"),
    ],
)
def test_an_http_authorization_header_names_its_role_or_the_401_answer(header: str, answer: str) -> None:
    secret = tokens.create_secret_key()
    authenticator = tokens.TokenAuthenticator(secret_key=secret)
    assert authenticator.authenticate_http("bearer " + tokens.create_token("alice", secret_key=secret)) == "alice"
    with pytest.raises(tokens.AuthenticationFailed) as refused:
        authenticator.authenticate_http(header)
    assert str(refused.value).startswith(answer)


def tokens_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pulsar_ref.cli", "tokens", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_the_tokens_command_makes_keys_and_tokens_that_validate(tmp_path: Path) -> None:
    secret = tmp_path / "secret.key"
    assert tokens_cli("create-secret-key", "--output", str(secret)).returncode == 0
    assert secret.stat().st_mode & 0o777 == 0o600
    made = tokens_cli("create", "--subject", "admin", "--secret-key", str(secret), "--expiry-time", "1h")
    assert made.returncode == 0
    checked = tokens_cli("validate", made.stdout.strip(), "--secret-key", str(secret))
    assert checked.returncode == 0 and checked.stdout.strip() == "admin"
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    assert (
        tokens_cli(
            "create-key-pair", "--output-private-key", str(private), "--output-public-key", str(public)
        ).returncode
        == 0
    )
    signed = tokens_cli("create", "--subject", "bob", "--private-key", str(private)).stdout.strip()
    assert tokens_cli("validate", signed, "--public-key", str(public)).stdout.strip() == "bob"
    wrong = tokens_cli("validate", signed, "--secret-key", str(secret))
    assert wrong.returncode == 1 and "not valid" in wrong.stderr
    assert tokens_cli("create", "--subject", "x", "--secret-key", str(secret), "--expiry-time", "soon").returncode == 2


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return tokens.create_secret_key()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, secret: bytes) -> Iterator[Standalone]:
    directory = tmp_path_factory.mktemp("secure")
    key = directory / "secret.key"
    key.write_bytes(secret)
    standalone = Standalone(directory / "data", "--authentication-enabled", "--token-secret-key", str(key))
    try:
        yield standalone
    finally:
        standalone.stop()


@pytest.mark.processes
def test_clients_need_a_valid_token_on_the_binary_protocol(secure: Standalone, secret: bytes) -> None:
    good = tokens.create_token("app", secret_key=secret, expires_in_s=600)
    client = pulsar.Client(secure.url, authentication=pulsar.AuthenticationToken(good), operation_timeout_seconds=20)
    try:
        producer = client.create_producer("persistent://public/default/secured")
        producer.send(b"allowed")
        reader = client.create_reader("persistent://public/default/secured", pulsar.MessageId.earliest)
        assert reader.read_next(10_000).data() == b"allowed"
    finally:
        client.close()
    bad_tokens = {
        "missing": None,
        "expired": tokens.create_token("app", secret_key=secret, expires_in_s=-5),
        "another key": tokens.create_token("app", secret_key=tokens.create_secret_key()),
        "garbage": "x" * 40,
    }
    for why, token in bad_tokens.items():
        auth = pulsar.AuthenticationToken(token) if token else None
        refused = pulsar.Client(secure.url, authentication=auth, operation_timeout_seconds=3)
        try:
            # The broker answers CONNECT with an AuthenticationError (tests/security/test_authorization.py
            # reads it); the official client takes any answer but CONNECTED as a disconnection and retries.
            with pytest.raises(pulsar.PulsarException):
                refused.create_producer("persistent://public/default/secured").send(b"refused: " + why.encode())
        finally:
            refused.close()
    admin = AdminClient(secure.web_url, token=good)
    assert (
        admin.call("GET", topic_path("persistent://public/default/secured") + "/internalStats")["numberOfEntries"] == 1
    )


@pytest.mark.processes
def test_the_web_service_needs_a_bearer_token_except_for_metrics(secure: Standalone, secret: bytes) -> None:
    with pytest.raises(HttpError) as missing:
        AdminClient(secure.web_url).call("GET", "/admin/v2/tenants")
    assert missing.value.status == 401 and "Bearer" in missing.value.reason
    expired = tokens.create_token("ops", secret_key=secret, expires_in_s=-1)
    with pytest.raises(HttpError) as old:
        AdminClient(secure.web_url, token=expired).call("GET", "/admin/v2/tenants")
    assert old.value.status == 401 and "expired" in old.value.reason
    good = tokens.create_token("ops", secret_key=secret)
    assert "public" in AdminClient(secure.web_url, token=good).call("GET", "/admin/v2/tenants")
    assert AdminClient(secure.web_url).call("GET", "/metrics", raw=True).startswith("#")  # open, as in Pulsar
    # The broker's own calls (partitioned stats of its partitions) carry its credentials.
    admin = AdminClient(secure.web_url, token=good)
    admin.create_partitioned_topic("secured-parts", 2)
    client = pulsar.Client(secure.url, authentication=pulsar.AuthenticationToken(good), operation_timeout_seconds=20)
    try:
        client.create_producer("persistent://public/default/secured-parts").send(b"p")
    finally:
        client.close()
    stats = admin.call("GET", topic_path("secured-parts") + "/partitioned-stats")
    assert stats["msgInCounter"] == 1
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "pulsar_ref.cli",
            "admin",
            "--admin-url",
            secure.web_url,
            "--token",
            good,
            "tenants",
            "list",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0 and "public" in cli.stdout
