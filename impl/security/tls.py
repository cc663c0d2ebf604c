"""TLS for the `pulsar+ssl://` listeners and the `https://` web services: contexts built from PEM files
(Pulsar's tlsCertificateFilePath, tlsKeyFilePath, tlsTrustCertsFilePath), and a small certificate
authority for tests and `standalone --secure`, which make their own certificates at run time.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


class TlsConfigError(ValueError):
    """A certificate, key or trust file that is missing or unusable; the message names it."""


@dataclass(frozen=True)
class TlsFiles:
    """A server's certificate chain and key, and the CAs it trusts when it connects as a client."""

    cert_file: Path
    key_file: Path
    trust_certs_file: Path | None = None

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as e:
            raise TlsConfigError(
                f"cannot use certificate {self.cert_file} with key {self.key_file}: {e}; give a PEM certificate "
                "and the PEM key that matches it"
            ) from e
        return context


def client_context(trust_certs_file: Path | str | None, verify_hostname: bool = True) -> ssl.SSLContext:
    """A client's context: trusts the CAs of `trust_certs_file` (else the system's), checks the name."""
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = verify_hostname
    if trust_certs_file is not None:
        try:
            context.load_verify_locations(cafile=str(trust_certs_file))
        except (OSError, ssl.SSLError) as e:
            raise TlsConfigError(f"cannot read trusted certificates from {trust_certs_file}: {e}") from e
    return context


def tls_files_of(cert: str | None, key: str | None, trust: str | None) -> TlsFiles | None:
    """The files the command-line options name (None: TLS off); TlsConfigError when half given or missing."""
    if cert is None and key is None:
        if trust is not None:
            raise TlsConfigError("--tls-trust-certs-file needs --tls-cert-file and --tls-key-file")
        return None
    if cert is None or key is None:
        raise TlsConfigError("TLS needs both --tls-cert-file and --tls-key-file")
    for path in (cert, key, trust):
        if path is not None and not Path(path).is_file():
            raise TlsConfigError(f"{path} does not exist or is not a file")
    files = TlsFiles(Path(cert), Path(key), Path(trust) if trust else None)
    files.server_context()  # fail now, with the file's name, rather than at the first connection
    return files


# ---- a certificate authority of one's own --------------------------------------------------------


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass(frozen=True)
class CertificateAuthority:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(cls, name: str = "pulsar-ref test CA", days: int = 365) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, hosts: list[str], days: int = 365) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) of a server certificate for `hosts` (DNS names or IP addresses)."""
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def write_server_files(directory: Path, hosts: list[str], ca: CertificateAuthority | None = None) -> TlsFiles:
    """A CA (ca.cert.pem) and a server certificate for `hosts` signed by it (broker.cert.pem,
    broker.key.pem, the key with mode 600) in `directory`; the files as TlsFiles."""
    ca = ca or CertificateAuthority.create()
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = ca.issue(hosts)
    files = TlsFiles(directory / "broker.cert.pem", directory / "broker.key.pem", directory / "ca.cert.pem")
    assert files.trust_certs_file is not None
    files.trust_certs_file.write_bytes(ca.cert_pem)
    files.cert_file.write_bytes(cert)
    files.key_file.touch(mode=0o600)
    files.key_file.write_bytes(key)
    return files
