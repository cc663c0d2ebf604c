"""Pulsar's token authentication: JSON Web Tokens whose `sub` is the client's role, signed with a secret
key (HS256) or an RSA private key and checked with its public key (RS256); `exp`, when present, is
honoured. Key files are what `pulsar tokens` writes: a secret key as its raw bytes (or
`data:;base64,...`), RSA keys as PEM.
"""

from __future__ import annotations

import base64
import os
import time
from dataclasses import dataclass
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

AUTH_METHOD = "token"  # CONNECT's auth_method_name for this provider
BROKER_ROLE = "pulsar-ref-broker"  # the role of a broker's own calls (a super-user)


class AuthenticationFailed(Exception):
    """A missing, malformed, expired or wrongly signed token; the message says which."""


def on_monotonic_clock(epoch_s: float | None) -> float | None:
    """A token's expiry (wall clock) on the clock connection cores tick with (time.monotonic)."""
    return None if epoch_s is None else time.monotonic() + (epoch_s - time.time())


def create_secret_key() -> bytes:
    return os.urandom(32)


def create_key_pair() -> tuple[bytes, bytes]:
    """(private key PEM, public key PEM) of a new 2048-bit RSA key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


def read_key(path: Path | str) -> bytes:
    data = Path(path).read_bytes()
    prefix = b"data:;base64,"
    return base64.b64decode(data[len(prefix) :].strip()) if data.startswith(prefix) else data


def create_token(
    subject: str,
    *,
    secret_key: bytes | None = None,
    private_key: bytes | None = None,
    expires_in_s: float | None = None,
    now: float | None = None,
) -> str:
    """A token for `subject`, signed with the secret key (HS256) or the private key (RS256)."""
    if (secret_key is None) == (private_key is None):
        raise ValueError("sign with exactly one of a secret key or a private key")
    claims: dict[str, object] = {"sub": subject}
    if expires_in_s is not None:
        claims["exp"] = int((time.time() if now is None else now) + expires_in_s)
    if secret_key is not None:
        return jwt.encode(claims, secret_key, algorithm="HS256")
    assert private_key is not None
    return jwt.encode(claims, private_key, algorithm="RS256")


@dataclass(frozen=True)
class TokenAuthenticator:
    """Checks tokens against a secret key (HS256) or a public key (RS256)."""

    secret_key: bytes | None = None
    public_key: bytes | None = None

    def __post_init__(self) -> None:
        if (self.secret_key is None) == (self.public_key is None):
            raise ValueError("token authentication needs exactly one of a secret key or a public key")

    def authenticate(self, token: str) -> str:
        """The token's role (`sub`); AuthenticationFailed otherwise."""
        return self.authenticate_until(token)[0]

    def authenticate_http(self, authorization: str) -> str:
        """The role of an HTTP request's `Authorization: Bearer <token>` header; AuthenticationFailed
        otherwise, saying what the 401 answer says (the web service's and the standalone's control)."""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationFailed("Authentication required: send Authorization: Bearer <token>")
        try:
            return self.authenticate(token.strip())
        except AuthenticationFailed as e:
            raise AuthenticationFailed(f"Authentication failed: {e}") from None

    def authenticate_until(self, token: str) -> tuple[str, float | None]:
        """The token's role (`sub`) and when it expires (`exp`, seconds since the epoch; None: never);
        AuthenticationFailed otherwise."""
        if not token:
            raise AuthenticationFailed("no token: give one (the client's token authentication)")
        key, algorithm = (self.secret_key, "HS256") if self.secret_key is not None else (self.public_key, "RS256")
        assert key is not None
        try:
            claims = jwt.decode(token, key, algorithms=[algorithm], options={"require": ["sub"]})
        except jwt.ExpiredSignatureError:
            raise AuthenticationFailed("the token has expired") from None
        except jwt.PyJWTError as e:
            raise AuthenticationFailed(f"the token is not valid: {e}") from None
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise AuthenticationFailed("the token names no role (its 'sub' claim)")
        expires = claims.get("exp")
        return subject, float(expires) if isinstance(expires, (int, float)) else None

    def authenticate_connect(self, method: str, data: bytes) -> str:
        """The role of a CONNECT's credentials (`auth_method_name`, `auth_data`); AuthenticationFailed
        when the method is not "token" or the token is not good."""
        return self.authenticate_connect_until(method, data)[0]

    def authenticate_connect_until(self, method: str, data: bytes) -> tuple[str, float | None]:
        """As authenticate_connect, with the token's expiry (epoch seconds; None: never): a connection
        re-checks its credentials once they have expired (AUTH_CHALLENGE, docs/security.md)."""
        if method != AUTH_METHOD:
            raise AuthenticationFailed(
                f"authentication method {method or '(none)'!r} is not enabled; use token authentication"
            )
        return self.authenticate_until(data.decode("utf-8", "replace"))

    def internal_token(self) -> str | None:
        """A token for the broker's own calls to the web services (role `pulsar-ref-broker`), when the
        broker holds the secret key that can sign one."""
        if self.secret_key is None:
            return None
        return create_token(BROKER_ROLE, secret_key=self.secret_key, expires_in_s=3600)
