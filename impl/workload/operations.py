"""One workload operation through the Pulsar client, and the rule that classifies its outcome.

The rule (docs/history.md: never guess):
- append `ok`: the client returned a message id, the entry is durable on Qa bookies.
- append `fail`: the broker said it certainly did not write it (`SendRejected`).
- append `info`: anything else -- a timeout, a dropped connection, an unexpected error: the
  entry may or may not have been written, and may still appear later.
- read `ok`: the entries returned. A read that raised is `fail`: a read changes nothing, so it
  certainly took no effect (Jepsen records failed reads the same way); this keeps the process.
- consumers (docs/history.md, Consumers): receive `ok` with the delivery, `fail` when nothing came;
  ack `ok` on the broker's receipt, `fail` when it certainly was not applied (refused, or never sent),
  `info` otherwise; nack `ok` once sent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

Position = list[int]
APPEND_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 5.0
RECEIVE_TIMEOUT_S = 1.0


@dataclass
class Outcome:
    kind: str  # ok, fail, info
    fields: dict[str, Any] = field(default_factory=dict)  # position (append) or value (read), error


def describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


@dataclass
class Received:
    """A receive's outcome, and the client's message to acknowledge (None unless `ok`)."""

    outcome: Outcome
    message: Any = None


class Session(Protocol):
    """One logical process's client, replaced after an `info`; each operation classified as above.
    A consumer is the client's own object, opaque to the workload."""

    def append(self, topic: str, value: str, key: str | None = None, tombstone: bool = False) -> Outcome: ...

    def read(self, topic: str, start: Position | None, limit: int | None) -> Outcome: ...

    def subscribe(self, topic: str, subscription: str, sub_type: str, name: str) -> tuple[Outcome, Any]: ...

    def receive(self, consumer: Any, topic: str, timeout_s: float = RECEIVE_TIMEOUT_S) -> Received: ...

    def ack(self, consumer: Any, message: Any, cumulative: bool) -> Outcome: ...

    def nack(self, consumer: Any, message: Any) -> Outcome: ...

    def close_consumer(self, consumer: Any) -> Outcome: ...

    def close(self) -> None: ...


# A tombstone's payload is empty (Pulsar's compaction deletes its key): the workload names its value in this
# message property instead, so reads and deliveries name it as the history's append does.
TOMBSTONE_PROPERTY = "pulsar-ref-tombstone"


def tombstone_message(value: str) -> tuple[bytes, dict[str, str]]:
    """A tombstone's payload and properties."""
    return b"", {TOMBSTONE_PROPERTY: value}


def text(data: bytes, properties: dict[str, str]) -> str:
    """A message's value in the history: its payload, or the name a tombstone carries."""
    if not data and TOMBSTONE_PROPERTY in properties:
        return properties[TOMBSTONE_PROPERTY]
    return data.decode()


def delivery(topic: str, value: str, position: Position, redelivery_count: int, key: str, log: str) -> dict[str, Any]:
    """The fields of an `ok` receive (and, but the redelivery count, of its ack)."""
    fields: dict[str, Any] = {"value": value, "position": position, "redelivery_count": redelivery_count}
    if key:
        fields["key"] = key
    if log != topic:
        fields["partition"] = log
    return fields


def create_partitioned_topic(admin_url: str, topic: str, partitions: int, credentials: Credentials) -> None:
    """Through the admin REST API of any Pulsar service (set-up, not an operation of the history); a
    topic that exists already (an earlier try that did reach the broker) is fine."""
    from impl.broker.web.admin_client import AdminClient
    from impl.security.tls import client_context

    tls = client_context(credentials.tls_trust_certs_file) if credentials.tls_trust_certs_file else None
    admin = AdminClient(admin_url, timeout_s=10.0, token=credentials.token, tls=tls)
    admin.create_partitioned_topic(topic, partitions, exist_ok=True)


def enable_deduplication(admin_url: str, topics: list[str], credentials: Credentials) -> None:
    """Topic-level de-duplication on each topic (set-up): Pulsar's is off by default, and then a producer
    that reconnects after a fault resends what it had in flight, which may already be stored. A plain
    topic is created first (a policy needs its topic); one that exists already is fine."""
    from impl.broker.web.admin_client import AdminClient, topic_path
    from impl.security.tls import client_context
    from impl.web.http import HttpError

    tls = client_context(credentials.tls_trust_certs_file) if credentials.tls_trust_certs_file else None
    admin = AdminClient(admin_url, timeout_s=10.0, token=credentials.token, tls=tls)
    for topic in topics:
        try:
            admin.call("PUT", topic_path(topic))
        except HttpError as e:
            if e.status != 409:  # 409: it exists (an earlier try, or a partitioned topic)
                raise
        admin.call("POST", topic_path(topic) + "/deduplicationEnabled", True)


@dataclass(frozen=True)
class Credentials:
    """What a secured service asks of its clients: a token, and the CAs to trust over TLS."""

    token: str | None = None
    tls_trust_certs_file: str | None = None


class ClientSession:
    """Through the project's own Pulsar client (impl/client/)."""

    def __init__(self, service_url: str, credentials: Credentials | None = None) -> None:
        from impl.client import Client

        self.client = Client(service_url, token=credentials.token if credentials else None)
        self.producers: dict[str, Any] = {}

    def producer(self, topic: str) -> Any:
        if topic not in self.producers:
            self.producers[topic] = self.client.create_producer(topic)
        return self.producers[topic]

    def close(self) -> None:
        # Closing a client whose broker died may fail; there is nothing to salvage.
        with contextlib.suppress(Exception):
            self.client.close()

    def append(self, topic: str, value: str, key: str | None = None, tombstone: bool = False) -> Outcome:
        from impl.client import SendRejected

        data, properties = tombstone_message(value) if tombstone else (value.encode(), {})
        try:
            message_id = self.producer(topic).send(data, key or "", properties, timeout_s=APPEND_TIMEOUT_S)
        except SendRejected as e:
            return Outcome("fail", {"error": describe(e)})
        except Exception as e:  # unknown outcome, see the module docstring
            self.producers.pop(topic, None)
            return Outcome("info", {"error": describe(e)})
        return Outcome("ok", {"position": position_of(message_id)})

    def read(self, topic: str, start: Position | None, limit: int | None) -> Outcome:
        from impl.client import MessageId

        try:
            messages = self.client.read_topic_messages(
                topic, None if start is None else MessageId(*start), limit, timeout_s=READ_TIMEOUT_S
            )
            value = [[position_of(m.id), text(m.data, m.properties)] for m in messages]
        except Exception as e:  # a read has no effect: fail, see the module docstring
            return Outcome("fail", {"error": describe(e)})
        return Outcome("ok", {"value": value})

    def subscribe(self, topic: str, subscription: str, sub_type: str, name: str) -> tuple[Outcome, Any]:
        try:
            consumer = self.client.subscribe(
                topic, subscription, subscription_type=sub_type, initial_position="earliest", consumer_name=name
            )
        except Exception as e:  # not subscribed; a half-made subscription is the broker's to forget
            return Outcome("fail", {"error": describe(e)}), None
        return Outcome("ok"), consumer

    def receive(self, consumer: Any, topic: str, timeout_s: float = RECEIVE_TIMEOUT_S) -> Received:
        try:
            msg = consumer.receive(timeout_s)
        except Exception as e:  # a timeout, or closed: nothing delivered
            return Received(Outcome("fail", {"error": describe(e)}))
        value = text(msg.data, msg.properties)
        fields = delivery(topic, value, position_of(msg.id), msg.redelivery_count, msg.key, msg.topic)
        return Received(Outcome("ok", fields), msg)

    def ack(self, consumer: Any, message: Any, cumulative: bool) -> Outcome:
        from impl.client import ClientError, NotAttached

        try:
            if cumulative:
                consumer.acknowledge_cumulative(message, receipt=True)
            else:
                consumer.acknowledge(message, receipt=True)
        except NotAttached as e:  # never sent
            return Outcome("fail", {"error": describe(e)})
        except ClientError as e:
            # The broker refused it (a ServerError), or the answer never came: it may have been applied.
            return Outcome("fail" if e.code is not None else "info", {"error": describe(e)})
        except Exception as e:
            return Outcome("info", {"error": describe(e)})
        return Outcome("ok")

    def nack(self, consumer: Any, message: Any) -> Outcome:
        return sent(lambda: consumer.negative_acknowledge(message))

    def close_consumer(self, consumer: Any) -> Outcome:
        return sent(consumer.close)


def sent(action: Callable[[], Any]) -> Outcome:
    """A nack or a consumer's close, which no answer confirms: `ok` once done, `info` if it raised (it may have
    reached the broker)."""
    try:
        action()
    except Exception as e:
        return Outcome("info", {"error": describe(e)})
    return Outcome("ok")


def position_of(message_id: Any) -> Position:
    return [int(message_id.ledger_id), int(message_id.entry_id), int(message_id.batch_index)]
