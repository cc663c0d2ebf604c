"""TLS: a standalone process serving pulsar+ssl:// and https:// with a certificate made at run time by
a CA of the test's own, judged by the official client (its trust file, its hostname check)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pulsar
import pytest

from impl.broker.web.admin_client import AdminClient, topic_path
from impl.security.tls import CertificateAuthority, TlsFiles, client_context, write_server_files
from impl.web.http import HttpError
from tests.broker.pulsar_standalone import Standalone
from tests.processes import ROOT


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    # For 127.0.0.1 only: a client that checks host names refuses it under the name "localhost".
    return write_server_files(tmp_path_factory.mktemp("certs"), ["127.0.0.1"])


@pytest.fixture(scope="module")
def tls_standalone(tmp_path_factory: pytest.TempPathFactory, certs: TlsFiles) -> Iterator[Standalone]:
    data = tmp_path_factory.mktemp("tls") / "data"
    standalone = Standalone(data, "--tls-cert-file", str(certs.cert_file), "--tls-key-file", str(certs.key_file))
    try:
        yield standalone
    finally:
        standalone.stop()


def tls_client(url: str, trust: Path | None, validate_hostname: bool = True) -> pulsar.Client:
    return pulsar.Client(
        url,
        tls_trust_certs_file_path=str(trust) if trust else None,
        tls_validate_hostname=validate_hostname,
        operation_timeout_seconds=5,
    )


def entries(standalone: Standalone, topic: str) -> int:
    """Entries the broker stored for a topic (0 when it does not exist), asked over plain HTTP."""
    try:
        return int(standalone.admin.call("GET", topic_path(topic) + "/internalStats")["numberOfEntries"])
    except HttpError as e:
        assert e.status == 404, e
        return 0


@pytest.mark.processes
def test_the_official_client_publishes_and_reads_over_tls(tls_standalone: Standalone, certs: TlsFiles) -> None:
    assert tls_standalone.tls_url.startswith("pulsar+ssl://127.0.0.1:")
    for url in (tls_standalone.tls_url, tls_standalone.web_tls_url):  # binary lookups, then HTTPS lookups
        topic = f"persistent://public/default/tls-{urlsplit(url).scheme}"
        client = tls_client(url, certs.trust_certs_file)
        try:
            client.create_producer(topic).send(b"sealed")
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert reader.read_next(10_000).data() == b"sealed"
        finally:
            client.close()
        assert entries(tls_standalone, topic) == 1
    https = AdminClient(tls_standalone.web_tls_url, tls=client_context(certs.trust_certs_file))
    assert https.call("GET", topic_path("tls-pulsar+ssl") + "/stats")["msgInCounter"] == 1
    assert https.call("GET", "/admin/v2/clusters/standalone")["brokerServiceUrlTls"] == tls_standalone.tls_url


@pytest.mark.processes
def test_a_client_that_cannot_verify_the_broker_writes_nothing(
    tls_standalone: Standalone, certs: TlsFiles, tmp_path: Path
) -> None:
    stranger = write_server_files(tmp_path / "stranger", ["127.0.0.1"])  # another CA
    port = urlsplit(tls_standalone.tls_url).port
    refusals = {
        "another CA": (tls_standalone.tls_url, stranger.trust_certs_file, True),
        "no trust file": (tls_standalone.tls_url, None, True),
        "a name the certificate lacks": (f"pulsar+ssl://localhost:{port}", certs.trust_certs_file, True),
    }
    for why, (url, trust, validate) in refusals.items():
        topic = f"persistent://public/default/refused-{why.replace(' ', '-')}"
        client = tls_client(url, trust, validate)
        try:
            with pytest.raises(pulsar.PulsarException):
                client.create_producer(topic).send(why.encode())
        finally:
            client.close()
        assert entries(tls_standalone, topic) == 0, why
    # The same name with the hostname check off (the client's default) is let in: the check is the client's.
    client = tls_client(f"pulsar+ssl://localhost:{port}", certs.trust_certs_file, validate_hostname=False)
    try:
        client.create_producer("persistent://public/default/by-localhost").send(b"ok")
    finally:
        client.close()
    with pytest.raises(HttpError) as unverified:
        AdminClient(tls_standalone.web_tls_url, tls=client_context(stranger.trust_certs_file)).call(
            "GET", "/admin/v2/clusters"
        )
    assert unverified.value.status == 0 and "CERTIFICATE_VERIFY_FAILED" in unverified.value.reason


@pytest.mark.processes
def test_plain_bytes_and_half_handshakes_on_the_tls_port_harm_nobody(
    tls_standalone: Standalone, certs: TlsFiles
) -> None:
    port = urlsplit(tls_standalone.tls_url).port
    assert port is not None
    for junk in (b"\x00\x00\x00\x0b\x00\x00\x00\x07\x08\x02\x12\x03", b"GET / HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x00"):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(junk)
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(4096) is not None  # an alert or an empty read: the server closed it
    client = tls_client(tls_standalone.tls_url, certs.trust_certs_file)
    try:
        client.create_producer("persistent://public/default/after-junk").send(b"still serving")
    finally:
        client.close()
    assert entries(tls_standalone, "persistent://public/default/after-junk") == 1


def standalone_exit(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pulsar_ref.cli", "standalone", "--data", str(tmp_path / "d"), *options]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_unusable_tls_files_stop_the_start_with_their_names(tmp_path: Path, certs: TlsFiles) -> None:
    missing = standalone_exit(tmp_path, "--tls-cert-file", str(tmp_path / "none.pem"), "--tls-key-file", "k")
    assert missing.returncode == 2 and "none.pem does not exist" in missing.stderr
    half = standalone_exit(tmp_path, "--tls-cert-file", str(certs.cert_file))
    assert half.returncode == 2 and "--tls-key-file" in half.stderr
    _, other_key = CertificateAuthority.create().issue(["127.0.0.1"])
    (tmp_path / "other.key").write_bytes(other_key)
    mismatched = standalone_exit(
        tmp_path, "--tls-cert-file", str(certs.cert_file), "--tls-key-file", str(tmp_path / "other.key")
    )
    assert mismatched.returncode == 2 and "the PEM key that matches it" in mismatched.stderr
    assert not (tmp_path / "d").exists()  # refused before anything was written


def test_a_malformed_https_admin_url_is_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "pulsar_ref.cli",
        "admin",
        "--admin-url",
        "https://127.0.0.1:84x3",
        "clusters",
        "list",
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "is not an http(s)://HOST:PORT" in result.stderr
    assert "Traceback" not in result.stderr
