"""The files of a secure set-up made in one step (`standalone --secure`, `cluster up --secure`): a secret
key for tokens, a super-user's token, and a CA with a server certificate for 127.0.0.1 and localhost.
Made once; a restart finds and keeps them (so tokens and trust files handed out stay good)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from impl.security import tokens
from impl.security.settings import Security
from impl.security.tls import TlsFiles, write_server_files

SUPER_USER = "admin"  # the role of the token made for the operator
HOSTS = ["127.0.0.1", "localhost"]


@dataclass(frozen=True)
class SecureFiles:
    secret_key: Path
    super_user_token: Path
    tls: TlsFiles

    def security(self) -> Security:
        """Token authentication, authorization with SUPER_USER, TLS: everything on."""
        authenticator = tokens.TokenAuthenticator(secret_key=tokens.read_key(self.secret_key))
        return Security(authenticator, True, frozenset({SUPER_USER}), self.tls)


def _private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600)
    path.write_bytes(data)


def ensure_secure_files(directory: Path) -> SecureFiles:
    """The files under `directory`, made now if they are not all there yet."""
    directory.mkdir(parents=True, exist_ok=True)
    files = SecureFiles(
        directory / "secret.key",
        directory / f"{SUPER_USER}.token",
        TlsFiles(directory / "broker.cert.pem", directory / "broker.key.pem", directory / "ca.cert.pem"),
    )
    assert files.tls.trust_certs_file is not None
    if not files.secret_key.exists():
        _private(files.secret_key, tokens.create_secret_key())
    if not files.super_user_token.exists():
        token = tokens.create_token(SUPER_USER, secret_key=tokens.read_key(files.secret_key))
        _private(files.super_user_token, token.encode() + b"\n")
    if not all(p.exists() for p in (files.tls.cert_file, files.tls.key_file, files.tls.trust_certs_file)):
        write_server_files(directory, HOSTS)
    return files
