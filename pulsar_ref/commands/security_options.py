"""The security options brokers, standalone and proxies share: token authentication, authorization,
TLS. Named as Pulsar's broker.conf names them (authenticationEnabled, authorizationEnabled,
superUserRoles, tlsCertificateFilePath, ...)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from impl.security.settings import Security


def add_security_options(parser: argparse.ArgumentParser, authorization: bool = True) -> None:
    group = parser.add_argument_group("security (docs/security.md)")
    group.add_argument(
        "--authentication-enabled",
        action="store_true",
        help="require a token from every client (CONNECT's token, HTTP's Authorization: Bearer); needs one key",
    )
    group.add_argument("--token-secret-key", metavar="FILE", help="secret key checking HS256 tokens")
    group.add_argument("--token-public-key", metavar="FILE", help="RSA public key (PEM) checking RS256 tokens")
    group.add_argument(
        "--authentication-refresh-check-seconds",
        type=float,
        default=60.0,
        metavar="S",
        help="how often each connection checks whether its token has expired; an expired one is challenged "
        "(AUTH_CHALLENGE) and the connection closed without fresh credentials (Pulsar's "
        "authenticationRefreshCheckSeconds; default 60)",
    )
    if authorization:
        group.add_argument(
            "--authorization-enabled",
            action="store_true",
            help="check every lookup, producer, consumer and admin call against the role's permissions "
            "(needs --authentication-enabled)",
        )
        group.add_argument(
            "--super-user-roles",
            default="",
            metavar="ROLE[,ROLE...]",
            help="roles allowed everything: creating tenants, granting permissions, any topic",
        )
    group.add_argument("--tls-cert-file", metavar="PEM", help="the server's certificate (chain): serve TLS too")
    group.add_argument("--tls-key-file", metavar="PEM", help="the key of --tls-cert-file")
    group.add_argument("--tls-trust-certs-file", metavar="PEM", help="CAs trusted when connecting to TLS services")


def security_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Security:
    """What the options ask for; a usage error (exit 2, with the reason) when they do not fit together."""
    from impl.security.settings import Security
    from impl.security.tls import TlsConfigError, tls_files_of
    from impl.security.tokens import TokenAuthenticator, read_key

    keys = [k for k in (args.token_secret_key, args.token_public_key) if k]
    authenticator = None
    if not args.authentication_enabled:
        if keys:
            parser.error("--token-secret-key/--token-public-key need --authentication-enabled")
    elif len(keys) != 1:
        parser.error("--authentication-enabled needs exactly one of --token-secret-key or --token-public-key")
    else:
        try:
            if args.token_secret_key:
                authenticator = TokenAuthenticator(secret_key=read_key(args.token_secret_key))
            else:
                authenticator = TokenAuthenticator(public_key=read_key(args.token_public_key))
        except OSError as e:
            parser.error(f"cannot read the key: {e}")
    authorization = bool(getattr(args, "authorization_enabled", False))
    if authorization and authenticator is None:
        parser.error("--authorization-enabled needs --authentication-enabled: roles come from tokens")
    roles = frozenset(r.strip() for r in getattr(args, "super_user_roles", "").split(",") if r.strip())
    try:
        tls = tls_files_of(args.tls_cert_file, args.tls_key_file, args.tls_trust_certs_file)
    except TlsConfigError as e:
        parser.error(str(e))
    refresh = args.authentication_refresh_check_seconds
    if not refresh > 0:
        parser.error(f"--authentication-refresh-check-seconds must be > 0, not {refresh}")
    return Security(authenticator, authorization, roles, tls, auth_refresh_check_s=refresh)
