"""`standalone --secure`: one command starts TLS, tokens and authorization, and prints what a client
needs; the official client and `pulsar-ref admin` use it; a restart keeps the same token and CA."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pulsar
import pytest

from impl.security import tokens
from impl.web.client import call
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import Standalone
from tests.processes import ROOT


def admin_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pulsar_ref.cli", "admin", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)


def check_control_endpoint(data: Path, admin_token: str) -> None:
    """Issue 49: with --secure the control endpoint (it can kill the broker) wants the admin API's token,
    of a super-user; cross-origin requests are refused even with it."""
    control = f"http://127.0.0.1:{json.loads((data / 'standalone.json').read_text())['control_port']}"
    alice = tokens.create_token("alice", secret_key=tokens.read_key(data / "security" / "secret.key"))
    for headers, status in (
        ({}, 401),
        ({"Authorization": "Bearer not-a-token"}, 401),
        ({"Authorization": f"Bearer {alice}"}, 403),  # authenticated, not a super-user
        ({"Authorization": f"Bearer {admin_token}", "Origin": "http://evil.example"}, 403),
    ):
        for method, path in (("GET", "/status"), ("POST", "/kill/broker")):
            with pytest.raises(HttpError) as refused:
                call(method, control + path, headers=headers)
            assert refused.value.status == status, (headers, method, path)
    nodes = call("GET", control + "/status", headers={"Authorization": f"Bearer {admin_token}"})
    assert {n["node"]: n["up"] for n in nodes}["broker"]  # served, and nothing above killed it


@pytest.mark.processes
def test_secure_standalone_is_one_command_and_keeps_its_credentials(tmp_path: Path) -> None:
    data = tmp_path / "data"
    tokens_seen = []
    for run in (1, 2):
        standalone = Standalone(data, "--secure")
        try:
            assert standalone.token_file and standalone.trust_file, "the banner names the token and the CA"
            assert standalone.token_file.stat().st_mode & 0o777 == 0o600
            token = standalone.token_file.read_text().strip()
            tokens_seen.append(token)
            client = pulsar.Client(
                standalone.tls_url,
                authentication=pulsar.AuthenticationToken(token),
                tls_trust_certs_file_path=str(standalone.trust_file),
                tls_validate_hostname=True,
                operation_timeout_seconds=10,
            )
            try:
                client.create_producer("persistent://public/default/secure-standalone").send(f"run {run}".encode())
            finally:
                client.close()
            anonymous = pulsar.Client(standalone.url, operation_timeout_seconds=3)
            try:
                with pytest.raises(pulsar.PulsarException):
                    anonymous.create_producer("persistent://public/default/secure-standalone").send(b"no")
            finally:
                anonymous.close()
            stats = admin_cli(
                "--admin-url", standalone.web_tls_url, "--token-file", str(standalone.token_file),
                "--tls-trust-certs-file", str(standalone.trust_file),
                "topics", "internal-stats", "persistent://public/default/secure-standalone",
            )  # fmt: skip
            assert stats.returncode == 0, stats.stderr
            assert f'"numberOfEntries": {run}' in stats.stdout
            refused = admin_cli("--admin-url", standalone.web_url, "tenants", "list")
            assert refused.returncode == 2 and "(401)" in refused.stderr
            if run == 1:
                check_control_endpoint(data, token)
        finally:
            standalone.stop()
    assert tokens_seen[0] == tokens_seen[1]  # the files made on the first start are kept


def test_secure_takes_no_other_security_option(tmp_path: Path) -> None:
    key = tmp_path / "secret.key"
    key.write_bytes(b"0" * 32)
    command = [sys.executable, "-m", "pulsar_ref.cli", "standalone", "--data", str(tmp_path / "d"), "--secure"]
    result = subprocess.run(
        [*command, "--authentication-enabled", "--token-secret-key", str(key)], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 2 and "give no other security option" in result.stderr
