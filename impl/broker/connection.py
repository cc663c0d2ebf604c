"""One client connection of a broker, as Pulsar's protocol has it (pure core).

The listener (impl/broker/listener.py) drives the core with one function,
`step(event) -> list[Output]`, and every input is a typed event:

  ConnectionOpened(now)       the client connected: keep-alive counts from here
  FrameReceived(frame, now)   a frame from the client
  Authenticated(role, expires_at), AuthenticationFailed(message)
                              the answer to DoAuthenticate (CONNECT's credentials, or the fresh
                              ones of an AUTH_RESPONSE)
  ProducerReady(...), ProducerQueued(...), ProducerFailed(...)
                              the answer to DoCreateProducer
  Subscribed(...), SubscribeFailed(...)
                              the answer to DoSubscribe
  SendReceipt(...), SendError(...)
                              a SEND's outcome: SEND_RECEIPT, or SEND_ERROR (also for a SEND the
                              listener refuses itself)
  Message(...)                a message for a consumer: MESSAGE
  Messages(...)               several entries' messages for a consumer: their MESSAGE frames, encoded
                              from the consumer's template and written together (`Frames`)
  ActiveConsumerChange(...)   a Failover consumer became active or inactive
  AckResponse(...)            an ACK's outcome, for a client that asked for one
  CloseProducer(producer_id), CloseConsumer(consumer_id)
                              the broker closes one (unload, fenced topic, seek): the client
                              creates it again
  ConsumerRemoved(consumer_id)  an UNSUBSCRIBE removed the consumer: its id is free again
  ReachedEndOfTopic(consumer_id)  the consumer read all of a terminated topic: REACHED_END_OF_TOPIC
  Tick(now)                   keep-alive, and the re-check of expired credentials
  ConnectionClosed()          the connection is gone, with every producer and consumer on it

Outputs: a reply to write (`Reply`), the connection to close (`Close`), or a request for the
broker's service (the `Do*` dataclasses), whose result comes back as the next event. An event of
another type raises TypeError. The core never touches a socket, a topic or a clock: the listener
does, and passes `now` in. `state`, `role`, `producers` and `consumers` are for reading. Like any
core it is not thread-safe: its shell steps it on one thread (the listener's event loop).

What it decides:
- Nothing but CONNECT is accepted before CONNECTED; the protocol version is the lower of the
  client's and the broker's.
- Every command the broker does not implement is answered with an ERROR that names it (with its
  request id where it has one), so no client waits on a silence.
- Producer and consumer ids are the client's, per connection (every client numbers from 0).
  A SEND for a producer that is not ready is refused, and so is a second producer or consumer
  with an id already in use.
- Keep-alive: a PING is sent after `keepalive_s` of silence from the client, and the
  connection is closed when the client stays silent for another `keepalive_s`.
- Credentials over time (with authentication): every `auth_refresh_check_s` the connection checks
  whether its credentials have expired; if so it sends AUTH_CHALLENGE ("refresh"), checks the
  AUTH_RESPONSE's fresh credentials (DoAuthenticate: they must name the same role), and closes the
  connection when they are refused or when the next check finds the challenge unanswered
  (impl/protocol/session.py CredentialsRefresh; docs/security.md).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from impl.broker.dispatcher import KeySharedMeta, KeySharedMode, SubscriptionType
from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.frames import MAX_FRAME_BEFORE_CONNECTED as MAX_FRAME_BEFORE_CONNECTED
from impl.protocol.frames import Frame, MessageTemplate, command_name, send_receipt
from impl.protocol.message_id import MessageId
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
from impl.values import value_type

SERVER_VERSION = "pulsar-ref"
# Before CONNECT succeeds a client is unknown: it gets a short time to finish the handshake and a small
# frame, so silent or slow connections cannot hold buffers.
HANDSHAKE_TIMEOUT_S = 10.0
LATEST = MessageId(2**63 - 1, 2**63 - 1, -1)  # MessageId.latest of the clients
EARLIEST = MessageId(-1, -1, -1)

T = api.BaseCommand
SUB_TYPES = {
    api.CommandSubscribe.Exclusive: SubscriptionType.EXCLUSIVE,
    api.CommandSubscribe.Shared: SubscriptionType.SHARED,
    api.CommandSubscribe.Failover: SubscriptionType.FAILOVER,
    api.CommandSubscribe.Key_Shared: SubscriptionType.KEY_SHARED,
}
# Requests without an implementation here; each carries its request id in field 1.
_UNSUPPORTED_REQUESTS: dict[int, str] = {
    T.CONSUMER_STATS: "consumerStats",
    T.NEW_TXN: "newTxn",
    T.TC_CLIENT_CONNECT_REQUEST: "tcClientConnectRequest",
    T.WATCH_TOPIC_LIST: "watchTopicList",
}


class State(enum.Enum):
    AWAITING_CONNECT = "awaiting CONNECT"
    AUTHENTICATING = "authenticating"
    CONNECTED = "connected"
    CLOSED = "closed"


# ---- inputs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Authenticated:
    role: str
    expires_at: float | None = None  # when the credentials expire, on the Tick clock; None: never


@dataclass(frozen=True)
class ProducerReady:
    request_id: int
    producer_id: int
    name: str
    last_sequence_id: int
    schema_version: bytes | None = None  # the registry's version of the producer's schema
    topic_epoch: int | None = None  # exclusive access: the topic epoch granted


@dataclass(frozen=True)
class ProducerQueued:
    """A WaitForExclusive producer waits for its turn: PRODUCER_SUCCESS with producer_ready=false now,
    ProducerReady when the broker grants it access."""

    request_id: int
    producer_id: int
    name: str


@dataclass(frozen=True)
class ProducerFailed:
    request_id: int
    producer_id: int
    error: int  # a ServerError
    message: str


@value_type  # built for every message: impl/values.py
class SendReceipt:
    producer_id: int
    sequence_id: int
    highest_sequence_id: int
    message_id: MessageId


@dataclass(frozen=True)
class SendError:
    producer_id: int
    sequence_id: int
    error: int  # a ServerError
    message: str


@dataclass(frozen=True)
class Subscribed:
    request_id: int
    consumer_id: int


@dataclass(frozen=True)
class SubscribeFailed:
    request_id: int
    consumer_id: int
    error: int  # a ServerError
    message: str


@dataclass(frozen=True)
class Message:
    consumer_id: int
    message_id: MessageId
    redelivery_count: int
    ack_set: tuple[int, ...]  # the batch indexes sent, as bit-set words; () = the whole entry
    entry: bytes
    partition: int = -1  # the topic's partition index (-1: not a partition), as Pulsar's broker sets it


@dataclass(frozen=True)
class Messages:
    """A delivery to one consumer: for each entry its ledger id, entry id, the redelivery count, the
    ack_set (as in Message) and the entry's bytes."""

    consumer_id: int
    messages: tuple[tuple[int, int, int, tuple[int, ...], bytes], ...]
    partition: int = -1


@dataclass(frozen=True)
class ActiveConsumerChange:
    consumer_id: int
    active: bool


@dataclass(frozen=True)
class AckResponse:
    consumer_id: int
    request_id: int
    error: int | None = None  # a ServerError; None = acknowledged
    message: str = ""


@dataclass(frozen=True)
class CloseProducer:
    producer_id: int


@dataclass(frozen=True)
class CloseConsumer:
    consumer_id: int


@dataclass(frozen=True)
class ConsumerRemoved:
    consumer_id: int


@dataclass(frozen=True)
class ReachedEndOfTopic:
    consumer_id: int


@dataclass(frozen=True)
class ConnectionClosed:
    pass


Event = (
    ConnectionOpened
    | FrameReceived
    | Authenticated
    | AuthenticationFailed
    | ProducerReady
    | ProducerQueued
    | ProducerFailed
    | SendReceipt
    | SendError
    | Subscribed
    | SubscribeFailed
    | Message
    | Messages
    | ActiveConsumerChange
    | AckResponse
    | CloseProducer
    | CloseConsumer
    | ConsumerRemoved
    | ReachedEndOfTopic
    | Tick
    | ConnectionClosed
)


# ---- outputs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DoLookup:
    request_id: int
    topic: str
    authoritative: bool


@dataclass(frozen=True)
class DoPartitionedMetadata:
    request_id: int
    topic: str


@dataclass(frozen=True)
class DoCreateProducer:
    request_id: int
    producer_id: int
    topic: str
    producer_name: str  # "" = the broker chooses one
    epoch: int
    exclusive: bool
    schema: api.Schema | None = None  # None: the producer declared none
    access_mode: int = 0  # Pulsar's ProducerAccessMode: Shared, Exclusive, WaitForExclusive, ExclusiveWithFencing
    topic_epoch: int | None = None  # a reconnecting exclusive producer's topic epoch
    metadata: dict[str, str] = field(default_factory=dict)  # PRODUCER's metadata, shown in its stats


@value_type  # built for every message: impl/values.py
class DoPublish:
    producer_id: int
    sequence_id: int
    highest_sequence_id: int
    num_messages: int
    data: bytes  # headers and payload: the entry to store
    is_chunk: bool = False  # one chunk of a chunked message (its chunks share the sequence id)


@dataclass(frozen=True)
class DoCloseProducer:
    request_id: int | None  # None: the connection went away
    producer_id: int


@dataclass(frozen=True)
class DoSubscribe:
    request_id: int
    consumer_id: int
    topic: str
    subscription: str
    sub_type: SubscriptionType
    durable: bool
    earliest: bool  # initial position of a new subscription
    start: MessageId | None  # a reader's (non-durable) start, inclusive
    consumer_name: str
    schema: api.Schema | None = None
    key_shared: KeySharedMeta | None = None  # SUBSCRIBE's keySharedMeta (Key_Shared only)
    read_compacted: bool = False  # SUBSCRIBE's read_compacted: the compacted view, then the topic
    metadata: dict[str, str] = field(default_factory=dict)  # SUBSCRIBE's metadata, shown in its stats


@dataclass(frozen=True)
class DoFlow:
    consumer_id: int
    permits: int


class AckedId(NamedTuple):
    """One id of an ACK: batch_index -1 = the whole entry; ack_set = the batch indexes still not
    acknowledged (bit set), when the client acknowledges a batch in part. A NamedTuple, built for every
    message a consumer acknowledges: half the cost of a frozen dataclass."""

    id: MessageId
    ack_set: tuple[int, ...] = ()
    batch_size: int = 0


@dataclass(frozen=True)
class DoAck:
    consumer_id: int
    ids: tuple[AckedId, ...]
    cumulative: bool
    request_id: int | None  # set: the client wants an ACK_RESPONSE


@dataclass(frozen=True)
class DoRedeliver:
    consumer_id: int
    ids: tuple[MessageId, ...] | None  # None: every unacknowledged message of the consumer


@dataclass(frozen=True)
class DoCloseConsumer:
    request_id: int | None  # None: the connection went away
    consumer_id: int


@dataclass(frozen=True)
class DoUnsubscribe:
    request_id: int
    consumer_id: int


@dataclass(frozen=True)
class DoSeek:
    request_id: int
    consumer_id: int
    message_id: MessageId | None
    publish_time_ms: int | None


@dataclass(frozen=True)
class DoGetLastMessageId:
    request_id: int
    consumer_id: int


@dataclass(frozen=True)
class DoGetTopics:
    request_id: int
    namespace: str
    pattern: str | None
    mode: int = 0  # CommandGetTopicsOfNamespace.Mode: PERSISTENT, NON_PERSISTENT, ALL


@dataclass(frozen=True)
class DoGetSchema:
    request_id: int
    topic: str
    version: bytes | None  # None: the latest


@dataclass(frozen=True)
class DoGetOrCreateSchema:
    request_id: int
    topic: str
    schema: api.Schema


@value_type  # built for every message: impl/values.py
class Frames:
    """Output: frames already encoded (MESSAGEs, SEND_RECEIPTs), to write as they are."""

    data: bytes


Output = (
    Reply
    | Frames
    | Close
    | DoLookup
    | DoPartitionedMetadata
    | DoCreateProducer
    | DoPublish
    | DoCloseProducer
    | DoSubscribe
    | DoFlow
    | DoAck
    | DoRedeliver
    | DoCloseConsumer
    | DoUnsubscribe
    | DoSeek
    | DoGetLastMessageId
    | DoGetTopics
    | DoGetSchema
    | DoGetOrCreateSchema
    | DoAuthenticate
)


# ---- building commands -------------------------------------------------------------------------


def success_reply(request_id: int) -> Reply:
    return Reply(command(T.SUCCESS, success=api.CommandSuccess(request_id=request_id)))


def _send_error_reply(producer_id: int, sequence_id: int, error: int, message: str) -> Reply:
    err = api.CommandSendError(producer_id=producer_id, sequence_id=sequence_id, error=error, message=message)  # type: ignore[arg-type]
    return Reply(command(T.SEND_ERROR, send_error=err))


def _ack_response_reply(consumer_id: int, request_id: int, error: int | None = None, message: str = "") -> Reply:
    resp = api.CommandAckResponse(consumer_id=consumer_id, request_id=request_id)
    if error is not None:
        resp.error, resp.message = error, message  # type: ignore[assignment]
    return Reply(command(T.ACK_RESPONSE, ackResponse=resp))


def id_from_wire(mid: api.MessageIdData) -> MessageId:
    return MessageId(mid.ledgerId, mid.entryId, mid.batch_index)


def id_to_wire(mid: MessageId, partition: int = -1) -> api.MessageIdData:
    out = api.MessageIdData(ledgerId=mid.ledger_id, entryId=mid.entry_id)
    if mid.batch_index >= 0:
        out.batch_index = mid.batch_index
    if partition >= 0:
        out.partition = partition
    return out


_HOLDS_STRINGS: dict[str, bool] = {}


def _holds_strings(message_type: Any) -> bool:
    """Whether a message type has a string field, itself or in a message field: an ACK's thousand
    MessageIdData (none) are then not looked through one by one."""
    name = message_type.full_name
    if name not in _HOLDS_STRINGS:
        _HOLDS_STRINGS[name] = True  # while deciding (a type within itself): looked through, to be safe
        _HOLDS_STRINGS[name] = any(
            f.type == f.TYPE_STRING or (f.type == f.TYPE_MESSAGE and _holds_strings(f.message_type))
            for f in message_type.fields
        )
    return _HOLDS_STRINGS[name]


def non_utf8_field(message: Any, prefix: str = "") -> str | None:
    """The path of the first string field holding bytes that are not UTF-8, or None. Python's protobuf
    returns such a proto2 `string` as bytes instead of failing the parse."""
    for descriptor, value in message.ListFields():
        path = f"{prefix}{descriptor.name}"
        values = value if descriptor.is_repeated else [value]
        if descriptor.type == descriptor.TYPE_STRING:
            if any(isinstance(v, bytes) for v in values):
                return path
        elif descriptor.type == descriptor.TYPE_MESSAGE and _holds_strings(descriptor.message_type):
            for v in values:
                found = non_utf8_field(v, path + ".")
                if found is not None:
                    return found
    return None


# ---- the connection ------------------------------------------------------------------------


@dataclass
class _Producer:
    topic: str
    name: str = ""
    ready: bool = False
    schema_version: bytes | None = None


@dataclass
class _Consumer:
    topic: str
    subscription: str
    ready: bool = False
    epoch: int = 0
    template: MessageTemplate | None = field(default=None, repr=False, compare=False)  # of its MESSAGEs


@dataclass
class ServerConnection:
    """The broker's side of one client connection."""

    max_message_size: int
    keepalive_s: float = KEEPALIVE_S
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S
    authentication: bool = False  # CONNECT must carry credentials the broker accepts
    auth_refresh_check_s: float = AUTH_REFRESH_CHECK_S  # how often expired credentials are re-checked
    role: str = ""  # who the client is, once authenticated
    state: State = State.AWAITING_CONNECT
    protocol_version: int = 0
    # CONNECT's client_version, shown in the stats of this connection's producers and consumers.
    client_version: str = ""
    producers: dict[int, _Producer] = field(default_factory=dict)
    consumers: dict[int, _Consumer] = field(default_factory=dict)
    _last_heard: float = 0.0
    _opened_at: float = 0.0
    _ping_sent_at: float | None = None
    _credentials: CredentialsRefresh | None = None  # with authentication: their expiry and challenge
    _checking: int = 0  # DoAuthenticate asked and not answered yet: only those answers count

    # ---- the one entry point -------------------------------------------------------------------

    def step(self, event: Event) -> list[Output]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a Pulsar connection event: {event!r}")
        return handler(self, event)

    # ---- frames in ---------------------------------------------------------------------------

    def _opened(self, e: ConnectionOpened) -> list[Output]:
        self._last_heard = self._opened_at = e.now
        return []

    def _frame_received(self, e: FrameReceived) -> list[Output]:
        frame = e.frame
        self._last_heard, self._ping_sent_at = e.now, None
        cmd = frame.command
        kind = cmd.type
        if self.state is State.CLOSED:
            return []
        bad = non_utf8_field(cmd)
        if bad is not None:
            return self._not_utf8(cmd, bad)
        if self.state is State.AWAITING_CONNECT:
            if kind != T.CONNECT:
                self.state = State.CLOSED
                return [Close(f"{command_name(kind)} before CONNECT: the first command must be CONNECT")]
            return self._connect(cmd.connect)
        if self.state is State.AUTHENTICATING:
            self.state = State.CLOSED
            return [Close(f"{command_name(kind)} before authentication completed")]
        handler = self._COMMANDS.get(kind)
        if handler is None:
            return self._unsupported(cmd, frame)
        return handler(self, cmd, frame)

    def _connect(self, c: api.CommandConnect) -> list[Output]:
        self.protocol_version = min(c.protocol_version, PROTOCOL_VERSION)
        # As Pulsar's ServerCnx: a blank version, or one with a space (a client's unset default, "Pulsar
        # Client"), is not recorded.
        version = c.client_version
        self.client_version = version if version.strip() and " " not in version else ""
        if self.authentication:
            self.state = State.AUTHENTICATING
            self._credentials = CredentialsRefresh(self.auth_refresh_check_s)
            self._credentials.start(c, self._last_heard)
            self._checking += 1
            return [DoAuthenticate(c.auth_method_name, c.auth_data)]
        return self._connected()

    def _authenticated(self, e: Authenticated) -> list[Output]:
        if self._checking == 0 or self._credentials is None:
            return []
        self._checking -= 1
        if self.state not in (State.AUTHENTICATING, State.CONNECTED):
            return []
        if self.state is State.CONNECTED and e.role != self.role:
            # As Pulsar: a refresh renews the credentials of the same principal, never switches to another.
            self.state = State.CLOSED
            return [Close(f"the refreshed credentials name role {e.role!r}, not {self.role!r}: a role cannot change")]
        self._credentials.renewed(e.expires_at)
        if self.state is State.CONNECTED:
            return []  # refreshed: the connection goes on
        self.role = e.role
        return self._connected()

    def _authentication_failed(self, e: AuthenticationFailed) -> list[Output]:
        """As Pulsar: an ERROR (AuthenticationError), then the connection closes."""
        self._checking = max(0, self._checking - 1)
        if self.state is State.CLOSED:
            return []
        self.state = State.CLOSED
        return [error_reply(0, api.AuthenticationError, e.message), Close(f"authentication failed: {e.message}")]

    def _connected(self) -> list[Output]:
        self.state = State.CONNECTED
        connected = api.CommandConnected(
            server_version=SERVER_VERSION,
            protocol_version=self.protocol_version,
            max_message_size=self.max_message_size,
        )
        return [Reply(command(T.CONNECTED, connected=connected))]

    def _not_utf8(self, cmd: api.BaseCommand, field_path: str) -> list[Output]:
        """A name that is not UTF-8 (protobuf hands it over as bytes): refused before any handler sees it,
        so no producer or consumer is half-made. A request gets its error; anything else closes."""
        message = f"{field_path} is not valid UTF-8"
        request_id = None
        for descriptor, value in cmd.ListFields():
            if descriptor.message_type is not None and "request_id" in descriptor.message_type.fields_by_name:
                request_id = value.request_id
        if self.state is not State.CONNECTED or request_id is None:
            self.state = State.CLOSED
            return [Close(message)]
        code = api.InvalidTopicName if field_path.endswith(".topic") else api.NotAllowedError
        return [error_reply(request_id, code, message)]

    def _unsupported(self, cmd: api.BaseCommand, frame: Frame) -> list[Output]:
        name = command_name(cmd.type)
        field_name = _UNSUPPORTED_REQUESTS.get(cmd.type)
        if cmd.type == T.CONNECT:
            return [error_reply(0, api.NotAllowedError, "already connected: CONNECT comes once per connection")]
        if field_name is not None:
            request_id = getattr(cmd, field_name).request_id
            return [error_reply(request_id, api.NotAllowedError, f"{name} is not implemented by this broker")]
        return [error_reply(0, api.NotAllowedError, f"{name} is not implemented by this broker")]

    def _ping(self, _cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        return [Reply(command(T.PONG, pong=api.CommandPong()))]

    def _auth_response(self, cmd: api.BaseCommand, frame: Frame) -> list[Output]:
        """Fresh credentials, in answer to an AUTH_CHALLENGE: checked as CONNECT's were."""
        if self._credentials is None:
            return self._unsupported(cmd, frame)  # no authentication: nothing to answer
        self._credentials.answered()
        self._checking += 1
        r = cmd.authResponse.response
        return [DoAuthenticate(r.auth_method_name, r.auth_data)]

    def _pong(self, _cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        return []

    def _partitioned_metadata(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        m = cmd.partitionMetadata
        return [DoPartitionedMetadata(m.request_id, m.topic)]

    def _lookup(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        m = cmd.lookupTopic
        return [DoLookup(m.request_id, m.topic, m.authoritative)]

    def _producer(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        p = cmd.producer
        existing = self.producers.get(p.producer_id)
        if existing is not None:
            if existing.topic == p.topic and existing.ready:  # the client asked again: it is there
                return [self._producer_success(p.request_id, existing.name, -1, existing.schema_version)]
            return [error_reply(p.request_id, api.ServiceNotReady, f"producer id {p.producer_id} is being created")]
        self.producers[p.producer_id] = _Producer(p.topic)
        name = p.producer_name if p.HasField("producer_name") else ""
        exclusive = p.producer_access_mode in (api.Exclusive, api.ExclusiveWithFencing, api.WaitForExclusive)
        schema = p.schema if p.HasField("schema") else None
        topic_epoch = p.topic_epoch if p.HasField("topic_epoch") else None
        return [
            DoCreateProducer(
                p.request_id,
                p.producer_id,
                p.topic,
                name,
                p.epoch,
                exclusive,
                schema,
                p.producer_access_mode,
                topic_epoch,
                {kv.key: kv.value for kv in p.metadata},
            )
        ]

    def _send(self, cmd: api.BaseCommand, frame: Frame) -> list[Output]:
        s = cmd.send
        producer = self.producers.get(s.producer_id)
        if producer is None or not producer.ready:
            return [
                _send_error_reply(
                    s.producer_id,
                    s.sequence_id,
                    api.NotAllowedError,
                    f"producer {s.producer_id} is not ready on this connection",
                )
            ]
        if frame.payload is None:
            return [_send_error_reply(s.producer_id, s.sequence_id, api.UnknownError, "SEND without a payload")]
        num = s.num_messages if s.HasField("num_messages") else 1
        highest = s.highest_sequence_id if s.HasField("highest_sequence_id") else s.sequence_id + num - 1
        highest = max(highest, s.sequence_id)
        return [DoPublish(s.producer_id, s.sequence_id, highest, num, frame.payload, s.is_chunk)]

    def _close_producer(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        c = cmd.close_producer
        if self.producers.pop(c.producer_id, None) is None:
            return [success_reply(c.request_id)]  # closing what is not there is done
        return [DoCloseProducer(c.request_id, c.producer_id)]

    def _subscribe(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        s = cmd.subscribe
        if s.consumer_id in self.consumers:
            existing = self.consumers[s.consumer_id]
            if existing.ready and existing.topic == s.topic and existing.subscription == s.subscription:
                return [success_reply(s.request_id)]
            return [error_reply(s.request_id, api.ServiceNotReady, f"consumer id {s.consumer_id} is in use")]
        if not s.subscription:
            return [error_reply(s.request_id, api.NotAllowedError, "a subscription needs a name")]
        start = None
        if s.HasField("start_message_id") and not s.durable:
            start = id_from_wire(s.start_message_id)
        key_shared = None
        if s.HasField("keySharedMeta"):
            k = s.keySharedMeta
            mode = KeySharedMode.STICKY if k.keySharedMode == KeySharedMode.STICKY.value else KeySharedMode.AUTO_SPLIT
            ranges = tuple((r.start, r.end) for r in k.hashRanges)
            key_shared = KeySharedMeta(mode, ranges, k.allowOutOfOrderDelivery)
        self.consumers[s.consumer_id] = _Consumer(s.topic, s.subscription, epoch=s.consumer_epoch)
        return [
            DoSubscribe(
                s.request_id,
                s.consumer_id,
                s.topic,
                s.subscription,
                SUB_TYPES.get(s.subType, SubscriptionType.EXCLUSIVE),
                s.durable,
                s.initialPosition == api.CommandSubscribe.Earliest,
                start,
                s.consumer_name,
                s.schema if s.HasField("schema") else None,
                key_shared,
                s.read_compacted,
                {kv.key: kv.value for kv in s.metadata},
            )
        ]

    def _ready_consumer(self, consumer_id: int) -> _Consumer | None:
        consumer = self.consumers.get(consumer_id)
        return consumer if consumer is not None and consumer.ready else None

    def _flow(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        f = cmd.flow
        if self._ready_consumer(f.consumer_id) is None or f.messagePermits <= 0:
            return []  # as Pulsar: a flow for an unknown consumer is dropped
        return [DoFlow(f.consumer_id, f.messagePermits)]

    def _ack(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        a = cmd.ack
        request_id = a.request_id if a.HasField("request_id") else None
        if self._ready_consumer(a.consumer_id) is None:
            if request_id is None:
                return []
            return [_ack_response_reply(a.consumer_id, request_id, api.ConsumerNotFound, "no such consumer")]
        # id_from_wire inlined and ack_set read once: an ACK names a thousand ids when a backlog is read.
        ids = tuple(
            AckedId(MessageId(m.ledgerId, m.entryId, m.batch_index), tuple(s) if (s := m.ack_set) else (), m.batch_size)
            for m in a.message_id
        )
        return [DoAck(a.consumer_id, ids, a.ack_type == api.CommandAck.Cumulative, request_id)]

    def _redeliver(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        r = cmd.redeliverUnacknowledgedMessages
        consumer = self._ready_consumer(r.consumer_id)
        if consumer is None:
            return []
        if r.HasField("consumer_epoch"):
            consumer.epoch = max(consumer.epoch, r.consumer_epoch)
        ids = tuple(id_from_wire(m) for m in r.message_ids) if r.message_ids else None
        return [DoRedeliver(r.consumer_id, ids)]

    def _close_consumer(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        c = cmd.close_consumer
        if self.consumers.pop(c.consumer_id, None) is None:
            return [success_reply(c.request_id)]
        return [DoCloseConsumer(c.request_id, c.consumer_id)]

    def _unsubscribe(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        u = cmd.unsubscribe
        if self._ready_consumer(u.consumer_id) is None:
            return [error_reply(u.request_id, api.ConsumerNotFound, f"no consumer {u.consumer_id}")]
        return [DoUnsubscribe(u.request_id, u.consumer_id)]

    def _seek(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        s = cmd.seek
        if self._ready_consumer(s.consumer_id) is None:
            return [error_reply(s.request_id, api.ConsumerNotFound, f"no consumer {s.consumer_id}")]
        if s.HasField("message_id"):
            return [DoSeek(s.request_id, s.consumer_id, id_from_wire(s.message_id), None)]
        if s.HasField("message_publish_time"):
            return [DoSeek(s.request_id, s.consumer_id, None, s.message_publish_time)]
        return [error_reply(s.request_id, api.NotAllowedError, "SEEK needs a message id or a publish time")]

    def _get_last_message_id(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        g = cmd.getLastMessageId
        if self._ready_consumer(g.consumer_id) is None:
            return [error_reply(g.request_id, api.ConsumerNotFound, f"no consumer {g.consumer_id}")]
        return [DoGetLastMessageId(g.request_id, g.consumer_id)]

    def _get_topics(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        g = cmd.getTopicsOfNamespace
        pattern = g.topics_pattern if g.HasField("topics_pattern") else None
        return [DoGetTopics(g.request_id, g.namespace, pattern, g.mode)]

    def _get_schema(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        g = cmd.getSchema
        return [DoGetSchema(g.request_id, g.topic, g.schema_version if g.HasField("schema_version") else None)]

    def _get_or_create_schema(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        g = cmd.getOrCreateSchema
        return [DoGetOrCreateSchema(g.request_id, g.topic, g.schema)]

    def _ignored(self, cmd: api.BaseCommand, _frame: Frame) -> list[Output]:
        return []  # a client's answer to a broker request (none are sent but CLOSE_*): nothing to do

    # Command type -> its handler; any other command is answered by _unsupported.
    _COMMANDS: ClassVar[dict[int, Callable[[ServerConnection, api.BaseCommand, Frame], list[Output]]]] = {
        T.PING: _ping,
        T.PONG: _pong,
        T.AUTH_RESPONSE: _auth_response,
        T.PARTITIONED_METADATA: _partitioned_metadata,
        T.LOOKUP: _lookup,
        T.PRODUCER: _producer,
        T.SEND: _send,
        T.CLOSE_PRODUCER: _close_producer,
        T.SUBSCRIBE: _subscribe,
        T.FLOW: _flow,
        T.ACK: _ack,
        T.REDELIVER_UNACKNOWLEDGED_MESSAGES: _redeliver,
        T.CLOSE_CONSUMER: _close_consumer,
        T.UNSUBSCRIBE: _unsubscribe,
        T.SEEK: _seek,
        T.GET_LAST_MESSAGE_ID: _get_last_message_id,
        T.GET_TOPICS_OF_NAMESPACE: _get_topics,
        T.GET_SCHEMA: _get_schema,
        T.GET_OR_CREATE_SCHEMA: _get_or_create_schema,
        T.SUCCESS: _ignored,
        T.ERROR: _ignored,
    }

    # ---- results of the broker's work ------------------------------------------------------

    def _producer_success(
        self, request_id: int, name: str, last_sequence_id: int, schema_version: bytes | None = None
    ) -> Reply:
        ok = api.CommandProducerSuccess(request_id=request_id, producer_name=name, last_sequence_id=last_sequence_id)
        if schema_version is not None:
            ok.schema_version = schema_version
        return Reply(command(T.PRODUCER_SUCCESS, producer_success=ok))

    def _producer_ready(self, e: ProducerReady) -> list[Output]:
        producer = self.producers.get(e.producer_id)
        if producer is None:  # closed while being created: the shell closes it again
            return [DoCloseProducer(None, e.producer_id)]
        producer.name, producer.ready, producer.schema_version = e.name, True, e.schema_version
        ok = self._producer_success(e.request_id, e.name, e.last_sequence_id, e.schema_version)
        if e.topic_epoch is not None:
            ok.command.producer_success.topic_epoch = e.topic_epoch
        return [ok]

    def _producer_queued(self, e: ProducerQueued) -> list[Output]:
        if e.producer_id not in self.producers:
            return [DoCloseProducer(None, e.producer_id)]
        ok = self._producer_success(e.request_id, e.name, -1)
        ok.command.producer_success.producer_ready = False
        return [ok]

    def _producer_failed(self, e: ProducerFailed) -> list[Output]:
        self.producers.pop(e.producer_id, None)
        return [error_reply(e.request_id, e.error, e.message)]

    def _send_receipt(self, e: SendReceipt) -> list[Output]:
        mid = e.message_id
        receipt = send_receipt(
            e.producer_id, e.sequence_id, e.highest_sequence_id, (mid.ledger_id, mid.entry_id, mid.batch_index)
        )
        return [Frames(receipt)]  # encoded by hand: one per message of an unbatched producer

    def _send_error(self, e: SendError) -> list[Output]:
        return [_send_error_reply(e.producer_id, e.sequence_id, e.error, e.message)]

    def _subscribed(self, e: Subscribed) -> list[Output]:
        consumer = self.consumers.get(e.consumer_id)
        if consumer is None:
            return [DoCloseConsumer(None, e.consumer_id)]
        consumer.ready = True
        return [success_reply(e.request_id)]

    def _subscribe_failed(self, e: SubscribeFailed) -> list[Output]:
        self.consumers.pop(e.consumer_id, None)
        return [error_reply(e.request_id, e.error, e.message)]

    def _message(self, e: Message) -> list[Output]:
        consumer = self.consumers.get(e.consumer_id)
        msg = api.CommandMessage(
            consumer_id=e.consumer_id,
            message_id=id_to_wire(e.message_id, e.partition),
            redelivery_count=e.redelivery_count,
        )
        msg.ack_set.extend(e.ack_set)
        if consumer is not None and consumer.epoch:
            msg.consumer_epoch = consumer.epoch
        return [Reply(command(T.MESSAGE, message=msg), e.entry)]

    def _messages(self, e: Messages) -> list[Output]:
        consumer = self.consumers.get(e.consumer_id)
        epoch = consumer.epoch if consumer is not None else 0
        template = consumer.template if consumer is not None else None
        if template is None or (template.epoch, template.partition) != (epoch, e.partition):
            template = MessageTemplate(e.consumer_id, e.partition, epoch)  # a new epoch (a redelivery request)
            if consumer is not None:
                consumer.template = template
        parts = template.parts
        return [Frames(b"".join([p for m in e.messages for p in parts(*m)]))]

    def _active_consumer_change(self, e: ActiveConsumerChange) -> list[Output]:
        change = api.CommandActiveConsumerChange(consumer_id=e.consumer_id, is_active=e.active)
        return [Reply(command(T.ACTIVE_CONSUMER_CHANGE, active_consumer_change=change))]

    def _ack_response(self, e: AckResponse) -> list[Output]:
        return [_ack_response_reply(e.consumer_id, e.request_id, e.error, e.message)]

    def _broker_closes_producer(self, e: CloseProducer) -> list[Output]:
        """The broker closes a producer (unload, fenced topic): the client looks the topic up again."""
        if self.producers.pop(e.producer_id, None) is None:
            return []
        close = api.CommandCloseProducer(producer_id=e.producer_id, request_id=0)
        return [Reply(command(T.CLOSE_PRODUCER, close_producer=close))]

    def _broker_closes_consumer(self, e: CloseConsumer) -> list[Output]:
        """The broker closes a consumer (unload, seek): the client subscribes again."""
        if self.consumers.pop(e.consumer_id, None) is None:
            return []
        close = api.CommandCloseConsumer(consumer_id=e.consumer_id, request_id=0)
        return [Reply(command(T.CLOSE_CONSUMER, close_consumer=close))]

    def _reached_end_of_topic(self, e: ReachedEndOfTopic) -> list[Output]:
        """The consumer's topic is terminated and it read all of it (Pulsar's REACHED_END_OF_TOPIC)."""
        if e.consumer_id not in self.consumers:
            return []
        end = api.CommandReachedEndOfTopic(consumer_id=e.consumer_id)
        return [Reply(command(T.REACHED_END_OF_TOPIC, reachedEndOfTopic=end))]

    def _consumer_removed(self, e: ConsumerRemoved) -> list[Output]:
        # The UNSUBSCRIBE's answer tells the client; no CLOSE_CONSUMER is due.
        self.consumers.pop(e.consumer_id, None)
        return []

    # ---- time and the end ----------------------------------------------------------------------

    def _tick(self, e: Tick) -> list[Output]:
        """Keep-alive: ping a silent client once, close the connection if it stays silent. And the
        re-check of credentials: challenge expired ones, close on an unanswered challenge."""
        now = e.now
        if self.state in (State.AWAITING_CONNECT, State.AUTHENTICATING) and (
            now - self._opened_at >= self.handshake_timeout_s
        ):
            self.state = State.CLOSED
            return [Close(f"the handshake did not complete within {self.handshake_timeout_s:.0f} s")]
        if self.state is State.CONNECTED and self._credentials is not None:
            checked = self._credentials.tick(now)
            if isinstance(checked, Close):
                self.state = State.CLOSED
                return [checked]
            if checked is not None:
                return [checked, *self._keepalive(now)]
        return self._keepalive(now)

    def _keepalive(self, now: float) -> list[Output]:
        if self.state is State.CLOSED or now - self._last_heard < self.keepalive_s:
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

    def _closed(self, _e: ConnectionClosed) -> list[Output]:
        """The connection is gone: every producer and consumer on it goes too."""
        self.state = State.CLOSED
        outputs: list[Output] = [DoCloseProducer(None, pid) for pid in self.producers]
        outputs += [DoCloseConsumer(None, cid) for cid in self.consumers]
        self.producers.clear()
        self.consumers.clear()
        return outputs


# Event type -> handler.
_HANDLERS: dict[type, Callable[[ServerConnection, Any], list[Output]]] = {
    ConnectionOpened: ServerConnection._opened,
    FrameReceived: ServerConnection._frame_received,
    Authenticated: ServerConnection._authenticated,
    AuthenticationFailed: ServerConnection._authentication_failed,
    ProducerReady: ServerConnection._producer_ready,
    ProducerQueued: ServerConnection._producer_queued,
    ProducerFailed: ServerConnection._producer_failed,
    SendReceipt: ServerConnection._send_receipt,
    SendError: ServerConnection._send_error,
    Subscribed: ServerConnection._subscribed,
    SubscribeFailed: ServerConnection._subscribe_failed,
    Message: ServerConnection._message,
    Messages: ServerConnection._messages,
    ActiveConsumerChange: ServerConnection._active_consumer_change,
    AckResponse: ServerConnection._ack_response,
    CloseProducer: ServerConnection._broker_closes_producer,
    CloseConsumer: ServerConnection._broker_closes_consumer,
    ReachedEndOfTopic: ServerConnection._reached_end_of_topic,
    ConsumerRemoved: ServerConnection._consumer_removed,
    Tick: ServerConnection._tick,
    ConnectionClosed: ServerConnection._closed,
}
