"""What every Pulsar server connection shares, the broker's and the proxy's: the protocol version,
keep-alive, the events that open, feed, tick and authenticate a connection, the outputs that
write a reply or close it, and the re-check of credentials that expire (CredentialsRefresh). Each
side's core (impl/broker/connection.py, impl/proxy/connection.py) adds its own."""

from __future__ import annotations

from dataclasses import dataclass

from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.frames import Frame
from impl.values import value_type

PROTOCOL_VERSION = 20  # what the servers speak: the official 4.x client's
KEEPALIVE_S = 30.0
AUTH_REFRESH_CHECK_S = 60.0  # Pulsar's authenticationRefreshCheckSeconds default
REFRESH_AUTH_DATA = b"refresh"  # an AUTH_CHALLENGE carrying this asks for fresh credentials (Pulsar's AuthData)
T = api.BaseCommand


# ---- events ----


@dataclass(frozen=True)
class ConnectionOpened:
    now: float


@value_type  # built for every message: impl/values.py
class FrameReceived:
    frame: Frame
    now: float


@dataclass(frozen=True)
class AuthenticationFailed:
    message: str


@dataclass(frozen=True)
class Tick:
    now: float


# ---- outputs ----


@dataclass(frozen=True)
class Reply:
    command: api.BaseCommand
    payload: bytes | None = None


@dataclass(frozen=True)
class Close:
    reason: str


@dataclass(frozen=True)
class DoAuthenticate:
    """Check the client's credentials (CONNECT's, or an AUTH_RESPONSE's); answer with Authenticated
    (with when they expire, on the Tick clock) or AuthenticationFailed."""

    method: str
    data: bytes


# ---- credentials over time ----


@dataclass
class CredentialsRefresh:
    """Credentials that expire, re-checked while the connection lasts, as Pulsar's ServerCnx does.

    Every `check_every_s` from the CONNECT (Pulsar's authenticationRefreshCheckSeconds), a connection
    whose credentials have expired is challenged: AUTH_CHALLENGE with auth data "refresh", which the
    client answers with AUTH_RESPONSE and fresh credentials. The next check closes the connection if
    the challenge is still unanswered, as it does a client that did not announce `supports_auth_refresh`
    in CONNECT. Credentials that are refused, or that name another role, close it too (the core says
    so when its DoAuthenticate is answered). Pure: the owning core calls it with its own `now`.
    """

    check_every_s: float = AUTH_REFRESH_CHECK_S
    method: str = ""  # the CONNECT's auth_method_name: the challenge names it
    client_supports_refresh: bool = False
    expires_at: float | None = None  # on the Tick clock; None: the credentials never expire
    next_check: float | None = None  # None: not authenticated (nothing to re-check)
    challenged: bool = False  # an AUTH_CHALLENGE awaits its AUTH_RESPONSE
    protocol_version: int = PROTOCOL_VERSION  # the connection's: the challenge states it

    def start(self, connect: api.CommandConnect, now: float) -> None:
        """CONNECT arrived: remember what a challenge needs; checks count from `now`."""
        self.method = connect.auth_method_name
        self.client_supports_refresh = connect.feature_flags.supports_auth_refresh
        self.protocol_version = min(connect.protocol_version, PROTOCOL_VERSION)
        self.next_check = now + self.check_every_s

    def renewed(self, expires_at: float | None) -> None:
        self.expires_at = expires_at

    def answered(self) -> None:
        """An AUTH_RESPONSE came: as Pulsar, the challenge counts as answered before it is checked."""
        self.challenged = False

    def tick(self, now: float) -> Reply | Close | None:
        """What a check due at `now` decides: nothing, an AUTH_CHALLENGE, or the close."""
        if self.next_check is None or now < self.next_check:
            return None
        self.next_check = now + self.check_every_s
        if self.expires_at is None or now < self.expires_at:
            return None
        if not self.client_supports_refresh:
            return Close("the credentials expired and the client does not support refreshing them")
        if self.challenged:
            return Close(f"no AUTH_RESPONSE with fresh credentials within {self.check_every_s:g} s of the challenge")
        self.challenged = True
        challenge = api.CommandAuthChallenge(
            server_version="pulsar-ref",
            challenge=api.AuthData(auth_method_name=self.method, auth_data=REFRESH_AUTH_DATA),
            protocol_version=self.protocol_version,
        )
        return Reply(command(T.AUTH_CHALLENGE, authChallenge=challenge))


# ---- building commands ----


def command(type_: int, **fields: object) -> api.BaseCommand:
    """A BaseCommand of `type_` with its one sub-message set from `fields` (name=message)."""
    cmd = api.BaseCommand(type=type_)
    for name, value in fields.items():
        getattr(cmd, name).CopyFrom(value)
    return cmd


def error_reply(request_id: int, error: int, message: str) -> Reply:
    return Reply(command(T.ERROR, error=api.CommandError(request_id=request_id, error=error, message=message)))  # type: ignore[arg-type]
