"""What every Pulsar server connection shares, the broker's and the proxy's: the protocol version,
keep-alive, the events that open, feed, tick and authenticate a connection, and the outputs that
write a reply or close it. Each side's core (impl/broker/connection.py, impl/proxy/connection.py)
adds its own."""

from __future__ import annotations

from dataclasses import dataclass

from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.frames import Frame

PROTOCOL_VERSION = 20  # what the servers speak: the official 4.x client's
KEEPALIVE_S = 30.0
T = api.BaseCommand


# ---- events ----


@dataclass(frozen=True)
class ConnectionOpened:
    now: float


@dataclass(frozen=True)
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
    """Check the client's credentials; answer with Authenticated or AuthenticationFailed."""

    method: str
    data: bytes


# ---- building commands ----


def command(type_: int, **fields: object) -> api.BaseCommand:
    """A BaseCommand of `type_` with its one sub-message set from `fields` (name=message)."""
    cmd = api.BaseCommand(type=type_)
    for name, value in fields.items():
        getattr(cmd, name).CopyFrom(value)
    return cmd


def error_reply(request_id: int, error: int, message: str) -> Reply:
    return Reply(command(T.ERROR, error=api.CommandError(request_id=request_id, error=error, message=message)))  # type: ignore[arg-type]
