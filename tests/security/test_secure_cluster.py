"""`cluster up --secure`: ZooKeeper, bookies, two brokers and a proxy with TLS, tokens and
authorization, all real processes. The official client reaches the topics through the proxy over TLS
with a token, is refused without one or without permission, and a faulted workload run through it
is audited valid."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from impl.broker.web.admin_client import AdminClient, topic_path
from impl.cluster.deployment import Cluster
from impl.security import tokens
from impl.security.secure_setup import SUPER_USER
from impl.web.http import HttpError
from spark.history import read_history
from spark.reference import check
from tests.cluster.conftest import REPO, processes_of, pulsar_ref

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]

REFRESH_CHECK_S = 1  # how often the cluster's brokers and proxy re-check a token's expiry


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = (tmp_path_factory.mktemp("secure") / "cluster").resolve()
    try:
        up = pulsar_ref(
            "cluster", "up", "--dir", str(directory), "--secure", "--brokers", "2", "--proxies", "1",
            "--authentication-refresh-check-seconds", str(REFRESH_CHECK_S),
        )  # fmt: skip
        assert up.returncode == 0, up.stderr
        assert "super-user token" in up.stderr
        yield Cluster.load(directory)
    finally:
        if (directory / "cluster.json").exists():
            pulsar_ref("cluster", "down", "--dir", str(directory), timeout=120)
        for p in processes_of(directory):
            p.kill()


def client(cluster: Cluster, token: str | None, trust: str | None) -> pulsar.Client:
    assert cluster.security is not None
    return pulsar.Client(
        cluster.security["pulsar_service_tls"],
        authentication=pulsar.AuthenticationToken(token) if token else None,
        tls_trust_certs_file_path=trust,
        tls_validate_hostname=True,
        operation_timeout_seconds=8,
    )


def token_for(cluster: Cluster, role: str, expires_in_s: float | None = None) -> str:
    key = tokens.read_key(cluster.directory / "security" / "secret.key")
    return tokens.create_token(role, secret_key=key, expires_in_s=expires_in_s)


def test_through_the_proxy_over_tls_only_a_permitted_role_writes(secure: Cluster) -> None:
    token, trust = secure.credentials()
    assert token and trust and secure.security and secure.security["pulsar_service_tls"].startswith("pulsar+ssl://")
    admin = AdminClient(secure.admin_url or "", token=token)
    topic = "persistent://public/default/secure-cluster"
    c = client(secure, token, trust)
    try:
        c.create_producer(topic).send(b"by the super-user")
        assert c.create_reader(topic, pulsar.MessageId.earliest).read_next(10_000).data() == b"by the super-user"
    finally:
        c.close()
    refusals = {
        "no token": (None, trust, pulsar.PulsarException),
        "no trusted CA": (token, None, pulsar.PulsarException),
        "a role without permission": (token_for(secure, "guest"), trust, pulsar.AuthorizationError),
    }
    for why, (credential, ca, error) in refusals.items():
        refused = client(secure, credential, ca)
        try:
            with pytest.raises(error):
                refused.create_producer(topic).send(why.encode())
        finally:
            refused.close()
    assert admin.call("GET", topic_path(topic) + "/internalStats")["numberOfEntries"] == 1
    # Granted through the proxy's web port, the guest writes too.
    proxy_web = f"http://127.0.0.1:{next(n for n in secure.state['nodes'] if n['role'] == 'proxy')['web_port']}"
    with pytest.raises(HttpError) as anonymous:
        AdminClient(proxy_web).call("POST", "/admin/v2/namespaces/public/default/permissions/guest", ["produce"])
    assert anonymous.value.status == 401
    AdminClient(proxy_web, token=token).call(
        "POST", "/admin/v2/namespaces/public/default/permissions/guest", ["produce"]
    )
    guest = client(secure, token_for(secure, "guest"), trust)
    try:
        guest.create_producer(topic).send(b"by the guest")
    finally:
        guest.close()
    assert admin.call("GET", topic_path(topic) + "/internalStats")["numberOfEntries"] == 2


def test_a_faulted_workload_with_security_on_is_valid(secure: Cluster, tmp_path: Path) -> None:
    history = tmp_path / "h.jsonl"
    command_line = [
        sys.executable, "-m", "pulsar_ref.cli", "workload", "--cluster-dir", str(secure.directory),
        "--client", "official", "--nemesis", "kill-broker,kill-proxy", "--nemesis-order", "cycle",
        "--nemesis-interval", "2", "--topics", "2", "--partitions", "2", "--ops", "400", "--rate", "40",
        "--seed", "31", "--out", str(history),
    ]  # fmt: skip
    result = subprocess.run(command_line, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in history.read_text().splitlines()]
    assert any(e["process"] != "nemesis" and e["type"] == "ok" for e in events)
    faults = {e["f"] for e in events if e["process"] == "nemesis" and e["f"] in ("kill-broker", "kill-proxy")}
    assert faults == {"kill-broker", "kill-proxy"}
    report = check(read_history(str(history)))
    assert report.valid, report.to_json()


def test_the_cluster_cuts_off_a_connection_whose_token_expires(secure: Cluster) -> None:
    """`cluster up --authentication-refresh-check-seconds` reaches the brokers behind the proxy: a
    producer whose fixed token expires is challenged, answers with the same expired token, and is cut off."""
    _, trust = secure.credentials()
    lifetime_s = 3
    expiring = client(secure, token_for(secure, SUPER_USER, expires_in_s=lifetime_s), trust)
    try:
        producer = expiring.create_producer("persistent://public/default/secure-expiry", send_timeout_millis=3000)
        producer.send(b"before the token expires")
        time.sleep(lifetime_s + 2 * REFRESH_CHECK_S)
        with pytest.raises(pulsar.PulsarException):
            producer.send(b"after it expired")
    finally:
        expiring.close()
