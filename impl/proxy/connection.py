"""One client connection of the Pulsar proxy (pure core; impl/proxy/listener.py is the shell).

A client uses a proxy in two kinds of connection, as with Apache Pulsar's proxy:

- a lookup connection: CONNECT without `proxy_to_broker_url`. The proxy answers CONNECTED itself,
  then LOOKUP (always "connect, through the service URL": `proxy_through_service_url`, with the
  owner's URL as the logical address), PARTITIONED_METADATA and GET_TOPICS_OF_NAMESPACE, from the
  brokers it finds in the metadata store. Anything else is an ERROR that names the command.
- a proxied connection: CONNECT with `proxy_to_broker_url` = the owner's host:port. The shell
  connects to that broker (only a registered one), hands it the client's CONNECT, passes the
  broker's CONNECTED back, and from then on relays bytes both ways without parsing them: the
  broker's own frame checks apply to everything after CONNECT.

With authentication on, the proxy checks CONNECT's token before either kind (an ERROR with
AuthenticationError, then the close, as a broker does); a proxied connection's CONNECT still goes to
the broker with the client's own credentials, so the broker authenticates and authorizes the client's
role itself, and the proxy's lookups ask the brokers with the client's token too.

Credentials over time: on a proxied connection the broker re-checks the client's token itself (its
AUTH_CHALLENGE and the client's AUTH_RESPONSE pass through the relay untouched, since the broker
authenticated the client's own CONNECT). On a lookup connection the proxy does what a broker does
(impl/protocol/session.py CredentialsRefresh): every `auth_refresh_check_s` an expired token is
challenged, the AUTH_RESPONSE's fresh token is checked (same role) and used for the lookups from then
on, and the connection closes when it is refused or the challenge goes unanswered.

Before CONNECT only CONNECT is accepted, and frames are checked (size, form) by the same decoder
as the broker's. Keep-alive on a lookup connection is the broker's rule: PING after `keepalive_s`
of silence, close after another.

Pure, and driven one way (docs/architecture.md, "One way to drive a core"): every input is a frozen
dataclass fed to `step(event) -> list[Output]`; an event of another type raises TypeError.

  ConnectionOpened(now)         the client connected: its silence is counted from `now`
  FrameReceived(frame, now)     a frame from the client, before the relay -> Reply, Close,
                                DoAuthenticate, DoLookup, DoPartitions, DoTopics or DoConnectBroker
  Authenticated(role, expires_at), AuthenticationFailed(message)
                                the answer to DoAuthenticate (CONNECT's token or an AUTH_RESPONSE's)
  LookupDone(request_id, broker_url, broker_url_tls), LookupFailed(request_id, error, message),
  PartitionsDone(request_id, partitions), PartitionsFailed(...), TopicsDone(request_id, topics),
  TopicsFailed(...)             the answers to DoLookup, DoPartitions, DoTopics -> the client's Reply
  BrokerAnswered(frame)         the broker's first frame after DoConnectBroker -> StartRelay (CONNECTED)
                                or Close; BrokerUnreachable(message): the connect failed -> Close
  Tick(now)                     keep-alive -> a PING or Close; on a lookup connection the re-check
                                of expired credentials -> AUTH_CHALLENGE or Close

`state`, `protocol_version` and `target` are queries.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.frames import Frame, command_name
from impl.protocol.session import (
    AUTH_REFRESH_CHECK_S,
    KEEPALIVE_S,
    PROTOCOL_VERSION,
    AuthenticationFailed,
    Close,
    ConnectionOpened,
    CredentialsRefresh,
    DoAuthenticate,
    FrameReceived,
    Reply,
    Tick,
    command,
    error_reply,
)

T = api.BaseCommand
SERVER_VERSION = "pulsar-ref-proxy"
LookupType = api.CommandLookupTopicResponse.LookupType


class State(enum.Enum):
    AWAITING_CONNECT = "awaiting CONNECT"
    AUTHENTICATING = "checking the client's credentials"
    LOOKUPS = "serving lookups"  # connected to the proxy itself
    CONNECTING = "connecting to the broker"
    RELAYING = "relaying to the broker"
    CLOSED = "closed"


# ---- inputs ----------------------------------------------------------------------------------
# ConnectionOpened, FrameReceived, AuthenticationFailed and Tick are the broker connection's own events:
# a client's connection opens, speaks and times out the same way whichever end it reached.


@dataclass(frozen=True)
class Authenticated:
    """The token was good: go on with the CONNECT (the broker learns the role from it again)."""

    role: str = ""
    expires_at: float | None = None  # on the Tick clock; None: never


@dataclass(frozen=True)
class LookupDone:
    """The owner's URLs, as the logical addresses a client names in `proxy_to_broker_url` (a client
    on pulsar+ssl:// names the TLS one)."""

    request_id: int
    broker_url: str
    broker_url_tls: str


@dataclass(frozen=True)
class LookupFailed:
    request_id: int
    error: int  # a ServerError
    message: str


@dataclass(frozen=True)
class PartitionsDone:
    request_id: int
    partitions: int


@dataclass(frozen=True)
class PartitionsFailed:
    request_id: int
    error: int  # a ServerError
    message: str


@dataclass(frozen=True)
class TopicsDone:
    request_id: int
    topics: tuple[str, ...]


@dataclass(frozen=True)
class TopicsFailed:
    request_id: int
    error: int  # a ServerError
    message: str


@dataclass(frozen=True)
class BrokerAnswered:
    """The broker's first frame on a proxied connection."""

    frame: Frame


@dataclass(frozen=True)
class BrokerUnreachable:
    """The target is not a registered broker, or it could not be reached."""

    message: str


Event = (
    ConnectionOpened
    | FrameReceived
    | Authenticated
    | AuthenticationFailed
    | LookupDone
    | LookupFailed
    | PartitionsDone
    | PartitionsFailed
    | TopicsDone
    | TopicsFailed
    | BrokerAnswered
    | BrokerUnreachable
    | Tick
)


# ---- outputs (with Reply, Close and DoAuthenticate of the broker's connection) ------------------


@dataclass(frozen=True)
class DoLookup:
    request_id: int
    topic: str


@dataclass(frozen=True)
class DoPartitions:
    request_id: int
    topic: str


@dataclass(frozen=True)
class DoTopics:
    request_id: int
    namespace: str
    mode: str = "PERSISTENT"  # the request's CommandGetTopicsOfNamespace.Mode: PERSISTENT, NON_PERSISTENT, ALL


@dataclass(frozen=True)
class DoConnectBroker:
    """Connect to `target` (host:port: must be a registered broker) and send it `connect` (the client's
    CONNECT, without the proxy field); then step BrokerAnswered with its first frame."""

    target: str
    connect: api.BaseCommand


@dataclass(frozen=True)
class StartRelay:
    """From now on copy bytes both ways between the client and the broker, unparsed."""


Output = Reply | Close | DoAuthenticate | DoLookup | DoPartitions | DoTopics | DoConnectBroker | StartRelay


@dataclass
class ProxyConnection:
    keepalive_s: float = KEEPALIVE_S
    handshake_timeout_s: float = 10.0  # CONNECT (and its authentication) within this of the accept
    authentication: bool = False  # CONNECT must carry credentials the proxy accepts
    auth_refresh_check_s: float = AUTH_REFRESH_CHECK_S  # how often a lookup connection re-checks them
    state: State = State.AWAITING_CONNECT
    role: str = ""  # the client's, once authenticated
    _connect_command: api.CommandConnect | None = None  # the CONNECT being authenticated
    protocol_version: int = 0
    target: str = ""
    _last_heard: float = 0.0
    _opened_at: float = 0.0
    _ping_sent_at: float | None = field(default=None)
    _credentials: CredentialsRefresh | None = None

    # ---- the one entry point -------------------------------------------------------------------

    def step(self, event: Event) -> list[Output]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a proxy connection event: {event!r}")
        return handler(self, event)

    # ---- the client's frames -------------------------------------------------------------------

    def _connection_opened(self, e: ConnectionOpened) -> list[Output]:
        self._last_heard = self._opened_at = e.now
        return []

    def _frame_received(self, e: FrameReceived) -> list[Output]:
        self._last_heard, self._ping_sent_at = e.now, None
        cmd = e.frame.command
        if self.state is State.AWAITING_CONNECT:
            if cmd.type != T.CONNECT:
                self.state = State.CLOSED
                return [Close(f"{command_name(cmd.type)} before CONNECT: the first command must be CONNECT")]
            if self.authentication:
                self.state, self._connect_command = State.AUTHENTICATING, cmd.connect
                self._credentials = CredentialsRefresh(self.auth_refresh_check_s)
                self._credentials.start(cmd.connect, e.now)
                return [DoAuthenticate(cmd.connect.auth_method_name, cmd.connect.auth_data)]
            return self._connect(cmd.connect)
        if self.state is not State.LOOKUPS:
            # While authenticating or connecting, the client waits for CONNECTED; once relaying,
            # frames bypass the core.
            was, self.state = self.state, State.CLOSED
            return [Close(f"{command_name(cmd.type)} while {was.value}")]
        if cmd.type == T.PING:
            return [Reply(command(T.PONG, pong=api.CommandPong()))]
        if cmd.type in (T.PONG, T.SUCCESS, T.ERROR):
            return []
        if cmd.type == T.AUTH_RESPONSE and self._credentials is not None:
            self._credentials.answered()
            r = cmd.authResponse.response
            return [DoAuthenticate(r.auth_method_name, r.auth_data)]
        if cmd.type == T.LOOKUP:
            return [DoLookup(cmd.lookupTopic.request_id, cmd.lookupTopic.topic)]
        if cmd.type == T.PARTITIONED_METADATA:
            return [DoPartitions(cmd.partitionMetadata.request_id, cmd.partitionMetadata.topic)]
        if cmd.type == T.GET_TOPICS_OF_NAMESPACE:
            g = cmd.getTopicsOfNamespace
            return [DoTopics(g.request_id, g.namespace, api.CommandGetTopicsOfNamespace.Mode.Name(g.mode))]
        return [self._not_here(cmd)]

    def _connect(self, c: api.CommandConnect) -> list[Output]:
        self.protocol_version = min(c.protocol_version, PROTOCOL_VERSION)
        if c.HasField("proxy_to_broker_url"):
            self.state, self.target = State.CONNECTING, c.proxy_to_broker_url
            forwarded = api.CommandConnect()
            forwarded.CopyFrom(c)
            forwarded.ClearField("proxy_to_broker_url")
            return [DoConnectBroker(c.proxy_to_broker_url, command(T.CONNECT, connect=forwarded))]
        self.state = State.LOOKUPS
        connected = api.CommandConnected(server_version=SERVER_VERSION, protocol_version=self.protocol_version)
        return [Reply(command(T.CONNECTED, connected=connected))]

    def _authenticated(self, e: Authenticated) -> list[Output]:
        if self._credentials is None:
            return []
        if self.state is State.LOOKUPS:  # a refresh: same role, new expiry
            if e.role != self.role:
                self.state = State.CLOSED
                return [Close(f"the refreshed token names role {e.role!r}, not {self.role!r}: a role cannot change")]
            self._credentials.renewed(e.expires_at)
            return []
        if self.state is not State.AUTHENTICATING or self._connect_command is None:
            return []
        self.role = e.role
        self._credentials.renewed(e.expires_at)
        connect, self._connect_command = self._connect_command, None
        return self._connect(connect)

    def _authentication_failed(self, e: AuthenticationFailed) -> list[Output]:
        """As a broker: an ERROR (AuthenticationError), then the connection closes."""
        self.state, self._connect_command = State.CLOSED, None
        return [error_reply(0, api.AuthenticationError, e.message), Close(f"authentication failed: {e.message}")]

    def _not_here(self, cmd: api.BaseCommand) -> Reply:
        name = command_name(cmd.type)
        request_id = 0
        for field_name in ("producer", "subscribe", "getSchema", "getLastMessageId", "seek"):
            if cmd.HasField(field_name):
                request_id = getattr(cmd, field_name).request_id
        why = f"{name} goes to a broker: connect through the proxy with proxy_to_broker_url (a lookup gives it)"
        return error_reply(request_id, api.NotAllowedError, why)

    # ---- results of the shell's work -----------------------------------------------------------

    def _lookup_done(self, e: LookupDone) -> list[Output]:
        answer = api.CommandLookupTopicResponse(
            request_id=e.request_id,
            response=LookupType.Connect,
            brokerServiceUrl=e.broker_url,
            brokerServiceUrlTls=e.broker_url_tls,
            authoritative=True,
            proxy_through_service_url=True,
        )
        return [Reply(command(T.LOOKUP_RESPONSE, lookupTopicResponse=answer))]

    def _lookup_failed(self, e: LookupFailed) -> list[Output]:
        answer = api.CommandLookupTopicResponse(
            request_id=e.request_id,
            response=LookupType.Failed,
            error=e.error,  # type: ignore[arg-type]
            message=e.message,
        )
        return [Reply(command(T.LOOKUP_RESPONSE, lookupTopicResponse=answer))]

    def _partitions_done(self, e: PartitionsDone) -> list[Output]:
        answer = api.CommandPartitionedTopicMetadataResponse(
            request_id=e.request_id,
            partitions=e.partitions,
            response=api.CommandPartitionedTopicMetadataResponse.Success,
        )
        return [Reply(command(T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=answer))]

    def _partitions_failed(self, e: PartitionsFailed) -> list[Output]:
        answer = api.CommandPartitionedTopicMetadataResponse(
            request_id=e.request_id,
            response=api.CommandPartitionedTopicMetadataResponse.Failed,
            error=e.error,  # type: ignore[arg-type]
            message=e.message,
        )
        return [Reply(command(T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=answer))]

    def _topics_done(self, e: TopicsDone) -> list[Output]:
        answer = api.CommandGetTopicsOfNamespaceResponse(request_id=e.request_id, topics=e.topics)
        return [Reply(command(T.GET_TOPICS_OF_NAMESPACE_RESPONSE, getTopicsOfNamespaceResponse=answer))]

    def _topics_failed(self, e: TopicsFailed) -> list[Output]:
        return [error_reply(e.request_id, e.error, e.message)]

    def _broker_answered(self, e: BrokerAnswered) -> list[Output]:
        """CONNECTED starts the relay; an ERROR (or anything else) goes to the client and the
        connection closes."""
        if self.state is not State.CONNECTING:
            return []
        if e.frame.command.type == T.CONNECTED:
            self.state = State.RELAYING
            return [Reply(e.frame.command), StartRelay()]
        self.state = State.CLOSED
        return [Reply(e.frame.command), Close(f"broker {self.target} refused the connection")]

    def _broker_unreachable(self, e: BrokerUnreachable) -> list[Output]:
        """The client's connect fails (it looks the topic up again and retries)."""
        self.state = State.CLOSED
        return [error_reply(0, api.ServiceNotReady, e.message), Close(e.message)]

    # ---- time ------------------------------------------------------------------------------

    def _tick(self, e: Tick) -> list[Output]:
        """Keep-alive on a lookup connection (a relayed one is the broker's to keep alive)."""
        now = e.now
        if self.state in (State.AWAITING_CONNECT, State.AUTHENTICATING) and (
            now - self._opened_at >= self.handshake_timeout_s
        ):
            self.state = State.CLOSED
            return [Close(f"the handshake did not complete within {self.handshake_timeout_s:.0f} s")]
        if self.state is State.LOOKUPS and self._credentials is not None:
            checked = self._credentials.tick(now)
            if isinstance(checked, Close):
                self.state = State.CLOSED
                return [checked]
            if checked is not None:
                return [checked, *self._keepalive(now)]
        return self._keepalive(now)

    def _keepalive(self, now: float) -> list[Output]:
        if self.state not in (State.AWAITING_CONNECT, State.LOOKUPS) or now - self._last_heard < self.keepalive_s:
            return []
        if self.state is State.AWAITING_CONNECT or (
            self._ping_sent_at is not None and now - self._ping_sent_at >= self.keepalive_s
        ):
            self.state = State.CLOSED
            return [Close(f"no frame from the client for {now - self._last_heard:.0f} s")]
        if self._ping_sent_at is not None:
            return []
        self._ping_sent_at = now
        return [Reply(command(T.PING, ping=api.CommandPing()))]


# Event type -> handler.
_HANDLERS: dict[type, Callable[[ProxyConnection, Any], list[Output]]] = {
    ConnectionOpened: ProxyConnection._connection_opened,
    FrameReceived: ProxyConnection._frame_received,
    Authenticated: ProxyConnection._authenticated,
    AuthenticationFailed: ProxyConnection._authentication_failed,
    LookupDone: ProxyConnection._lookup_done,
    LookupFailed: ProxyConnection._lookup_failed,
    PartitionsDone: ProxyConnection._partitions_done,
    PartitionsFailed: ProxyConnection._partitions_failed,
    TopicsDone: ProxyConnection._topics_done,
    TopicsFailed: ProxyConnection._topics_failed,
    BrokerAnswered: ProxyConnection._broker_answered,
    BrokerUnreachable: ProxyConnection._broker_unreachable,
    Tick: ProxyConnection._tick,
}
