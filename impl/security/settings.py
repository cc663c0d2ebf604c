"""What a server's security options ask for, as one value: brokers, standalone and proxies take it."""

from __future__ import annotations

from dataclasses import dataclass, field

from impl.protocol.session import AUTH_REFRESH_CHECK_S
from impl.security.tls import TlsFiles
from impl.security.tokens import TokenAuthenticator


@dataclass(frozen=True)
class Security:
    authenticator: TokenAuthenticator | None = None  # None: every client is let in
    authorization: bool = False  # check each role's permissions (needs an authenticator)
    super_user_roles: frozenset[str] = field(default_factory=frozenset)
    tls: TlsFiles | None = None  # set: serve pulsar+ssl:// and https:// too
    # How often a connection re-checks its credentials, and challenges expired ones (Pulsar's
    # authenticationRefreshCheckSeconds).
    auth_refresh_check_s: float = AUTH_REFRESH_CHECK_S
