"""A client's side of one connection to a broker, in Pulsar's protocol (pure core).

It numbers requests, builds their frames, and turns the broker's frames into outputs: the answer
to a request (by request id), a send's receipt or error (by producer id and sequence id), a
message for a consumer, a producer or consumer closed by the broker. It keeps no socket and no
clock; the shell (impl/client/transport.py) writes what it returns and routes the rest.

Pure, and driven one way (docs/architecture.md, "One way to drive a core"): every input is a frozen
dataclass fed to `step(event) -> list[Output]`; an event of another type raises TypeError.

  Connect(token)            -> Write(CONNECT), with the token when the brokers authenticate (and
                            supports_auth_refresh: the client answers AUTH_CHALLENGE)
  AnswerChallenge(token)    -> Write(AUTH_RESPONSE) with a fresh token, after Challenged
  Request(kind, message)    a request answered by request id (LOOKUP, PRODUCER, SUBSCRIBE...) ->
                            WriteRequest: its frame, the request id set here
  RequestTimedOut(request_id)  the caller gave up: a late answer is dropped
  FrameReceived(frame)      a frame from the broker -> Connected, Answered or Refused (by request id),
                            Receipt or SendFailed (by producer id), Delivered, ProducerClosed,
                            ConsumerClosed, ActiveChanged, Write (PONG), Challenged (AUTH_CHALLENGE:
                            the shell gets a fresh token and steps AnswerChallenge); ProtocolViolation
                            when the broker sends what the protocol does not allow
  ConnectionClosed()        -> Unanswered for every request still waiting

Frames that expect no answer by request id (SEND, FLOW, ACK, REDELIVER...) change nothing here:
`command(...)` builds them. `connected`, `protocol_version` and `max_message_size` are queries.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.frames import Frame, command_name, encode

CLIENT_VERSION = "pulsar-ref-client"
PROTOCOL_VERSION = 20
T = api.BaseCommand

# The sub-message field of each request kind, and the field that carries its request id.
REQUESTS: dict[int, tuple[str, str]] = {
    T.LOOKUP: ("lookupTopic", "request_id"),
    T.PARTITIONED_METADATA: ("partitionMetadata", "request_id"),
    T.PRODUCER: ("producer", "request_id"),
    T.CLOSE_PRODUCER: ("close_producer", "request_id"),
    T.SUBSCRIBE: ("subscribe", "request_id"),
    T.CLOSE_CONSUMER: ("close_consumer", "request_id"),
    T.UNSUBSCRIBE: ("unsubscribe", "request_id"),
    T.SEEK: ("seek", "request_id"),
    T.GET_LAST_MESSAGE_ID: ("getLastMessageId", "request_id"),
    T.GET_TOPICS_OF_NAMESPACE: ("getTopicsOfNamespace", "request_id"),
    T.ACK: ("ack", "request_id"),  # only when the consumer wants a receipt (ACK_RESPONSE)
}
# Answers to requests, and where their request id is.
ANSWERS: dict[int, str] = {
    T.SUCCESS: "success",
    T.PRODUCER_SUCCESS: "producer_success",
    T.LOOKUP_RESPONSE: "lookupTopicResponse",
    T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
    T.ACK_RESPONSE: "ackResponse",
}


class ProtocolViolation(Exception):
    """The broker sent what the protocol does not allow here: the connection cannot go on."""


# ---- inputs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Connect:
    """Open the session: CONNECT, with a token when the brokers authenticate (Pulsar's token provider)."""

    token: str | None = None


@dataclass(frozen=True)
class AnswerChallenge:
    """The fresh token for the broker's AUTH_CHALLENGE (its credentials expired)."""

    token: str


@dataclass(frozen=True)
class Request:
    """A request of kind `kind` (a key of REQUESTS); its request id is set on the frame, not on `message`."""

    kind: int
    message: Any


@dataclass(frozen=True)
class RequestTimedOut:
    request_id: int


@dataclass(frozen=True)
class FrameReceived:
    frame: Frame


@dataclass(frozen=True)
class ConnectionClosed:
    """The connection is gone (closed by either side, or broken)."""


Event = Connect | AnswerChallenge | Request | RequestTimedOut | FrameReceived | ConnectionClosed


# ---- outputs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """A frame to send (CONNECT, PONG)."""

    data: bytes


@dataclass(frozen=True)
class WriteRequest:
    """A request's frame to send; its answer comes as Answered or Refused with this request id."""

    request_id: int
    data: bytes


@dataclass(frozen=True)
class Connected:
    server_version: str
    protocol_version: int
    max_message_size: int | None


@dataclass(frozen=True)
class Answered:
    request_id: int
    command: api.BaseCommand


@dataclass(frozen=True)
class Refused:
    """An ERROR for a request (or a failed lookup / partitioned-metadata answer)."""

    request_id: int
    error: int
    message: str


@dataclass(frozen=True)
class Unanswered:
    """The connection closed before the request's answer came."""

    request_id: int


@dataclass(frozen=True)
class Receipt:
    producer_id: int
    sequence_id: int
    ledger_id: int
    entry_id: int


@dataclass(frozen=True)
class SendFailed:
    producer_id: int
    sequence_id: int
    error: int
    message: str


@dataclass(frozen=True)
class Delivered:
    consumer_id: int
    ledger_id: int
    entry_id: int
    redelivery_count: int
    ack_set: tuple[int, ...]
    entry: bytes


@dataclass(frozen=True)
class ProducerClosed:
    producer_id: int


@dataclass(frozen=True)
class ConsumerClosed:
    consumer_id: int


@dataclass(frozen=True)
class ActiveChanged:
    consumer_id: int
    active: bool


@dataclass(frozen=True)
class Challenged:
    """The broker asks for fresh credentials (AUTH_CHALLENGE): step AnswerChallenge with a new token."""

    method: str


Output = (
    Write
    | WriteRequest
    | Connected
    | Answered
    | Refused
    | Unanswered
    | Receipt
    | SendFailed
    | Delivered
    | ProducerClosed
    | ConsumerClosed
    | ActiveChanged
    | Challenged
)


def build(type_: int, field_name: str, message: Any) -> api.BaseCommand:
    cmd = api.BaseCommand(type=type_)
    getattr(cmd, field_name).CopyFrom(message)
    return cmd


def command(type_: int, field_name: str, message: Any, payload: bytes | None = None) -> bytes:
    """A frame that expects no answer by request id (SEND, FLOW, ACK, REDELIVER...)."""
    return encode(build(type_, field_name, message), payload)


@dataclass
class ClientConnection:
    connected: bool = False
    protocol_version: int = 0
    max_message_size: int | None = None
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _pending: dict[int, int] = field(default_factory=dict)  # request id -> its command type

    # ---- the one entry point -------------------------------------------------------------------

    def step(self, event: Event) -> list[Output]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a client connection event: {event!r}")
        return handler(self, event)

    # ---- the client's requests ---------------------------------------------------------------

    def _connect(self, e: Connect) -> list[Output]:
        c = api.CommandConnect(
            client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION, auth_method_name="none"
        )
        if e.token is not None:
            c.auth_method_name, c.auth_data = "token", e.token.encode()
            c.feature_flags.supports_auth_refresh = True
        return [Write(encode(build(T.CONNECT, "connect", c)))]

    def _answer_challenge(self, e: AnswerChallenge) -> list[Output]:
        r = api.CommandAuthResponse(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION)
        r.response.auth_method_name, r.response.auth_data = "token", e.token.encode()
        return [Write(encode(build(T.AUTH_RESPONSE, "authResponse", r)))]

    def _request(self, e: Request) -> list[Output]:
        field_name, id_field = REQUESTS[e.kind]
        request_id = next(self._ids)
        cmd = build(e.kind, field_name, e.message)
        setattr(getattr(cmd, field_name), id_field, request_id)  # on the copy: the event stays as given
        self._pending[request_id] = e.kind
        return [WriteRequest(request_id, encode(cmd))]

    def _request_timed_out(self, e: RequestTimedOut) -> list[Output]:
        self._pending.pop(e.request_id, None)
        return []

    # ---- the broker's frames -----------------------------------------------------------------

    def _frame_received(self, e: FrameReceived) -> list[Output]:
        frame = e.frame
        cmd = frame.command
        kind = cmd.type
        if not self.connected:
            if kind != T.CONNECTED:
                raise ProtocolViolation(f"{command_name(kind)} before CONNECTED")
            self.connected = True
            c = cmd.connected
            self.protocol_version = c.protocol_version
            self.max_message_size = c.max_message_size if c.HasField("max_message_size") else None
            return [Connected(c.server_version, c.protocol_version, self.max_message_size)]
        if kind in ANSWERS:
            answer = getattr(cmd, ANSWERS[kind])
            if self._pending.pop(answer.request_id, None) is None:
                return []  # an answer nobody waits for any more
            refused = _refusal(kind, answer)
            return [refused] if refused is not None else [Answered(answer.request_id, cmd)]
        if kind == T.ERROR:
            err = cmd.error
            if self._pending.pop(err.request_id, None) is None:
                return []
            return [Refused(err.request_id, err.error, err.message)]
        if kind == T.SEND_RECEIPT:
            r = cmd.send_receipt
            return [Receipt(r.producer_id, r.sequence_id, r.message_id.ledgerId, r.message_id.entryId)]
        if kind == T.SEND_ERROR:
            s = cmd.send_error
            return [SendFailed(s.producer_id, s.sequence_id, s.error, s.message)]
        if kind == T.MESSAGE:
            if frame.payload is None:
                raise ProtocolViolation("MESSAGE without a payload")
            m = cmd.message
            return [
                Delivered(
                    m.consumer_id,
                    m.message_id.ledgerId,
                    m.message_id.entryId,
                    m.redelivery_count,
                    tuple(m.ack_set),
                    frame.payload,
                )
            ]
        if kind == T.CLOSE_PRODUCER:
            return [ProducerClosed(cmd.close_producer.producer_id)]
        if kind == T.CLOSE_CONSUMER:
            return [ConsumerClosed(cmd.close_consumer.consumer_id)]
        if kind == T.ACTIVE_CONSUMER_CHANGE:
            a = cmd.active_consumer_change
            return [ActiveChanged(a.consumer_id, a.is_active)]
        if kind == T.PING:
            return [Write(encode(build(T.PONG, "pong", api.CommandPong())))]
        if kind in (T.PONG, T.REACHED_END_OF_TOPIC):  # this client does not report a terminated topic's end
            return []
        if kind == T.AUTH_CHALLENGE:
            return [Challenged(cmd.authChallenge.challenge.auth_method_name)]
        raise ProtocolViolation(f"unexpected {command_name(kind)} from the broker")

    def _connection_closed(self, e: ConnectionClosed) -> list[Output]:
        waiting: list[Output] = [Unanswered(request_id) for request_id in self._pending]
        self._pending.clear()
        self.connected = False
        return waiting


def _refusal(kind: int, answer: Any) -> Refused | None:
    """Lookups, partitioned metadata and ack receipts carry their failure in the answer itself."""
    if kind == T.LOOKUP_RESPONSE and answer.response == api.CommandLookupTopicResponse.Failed:
        return Refused(answer.request_id, answer.error, answer.message)
    if (
        kind == T.PARTITIONED_METADATA_RESPONSE
        and answer.response == api.CommandPartitionedTopicMetadataResponse.Failed
    ):
        return Refused(answer.request_id, answer.error, answer.message)
    if kind == T.ACK_RESPONSE and answer.HasField("error"):
        return Refused(answer.request_id, answer.error, answer.message)
    return None


# Event type -> handler.
_HANDLERS: dict[type, Callable[[ClientConnection, Any], list[Output]]] = {
    Connect: ClientConnection._connect,
    AnswerChallenge: ClientConnection._answer_challenge,
    Request: ClientConnection._request,
    RequestTimedOut: ClientConnection._request_timed_out,
    FrameReceived: ClientConnection._frame_received,
    ConnectionClosed: ClientConnection._connection_closed,
}
