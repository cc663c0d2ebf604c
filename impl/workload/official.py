"""The workload's operations through Apache Pulsar's official client (`pulsar-client`), so the same
workload and audit can judge any Pulsar service, Apache Pulsar's included.

The outcome rule is operations.py's, applied to what the official client can tell:
- append `fail` only when nothing can have been sent: the producer could not be created, or the
  client refused the message itself (too big, invalid); a broker's SEND_ERROR makes the client
  reconnect and resend, so no error it reports after a send is a certain refusal;
- append `info` for every other error (a timeout, a lost connection): the message may be written;
- read: a reader from the start (inclusive) to the last message id the broker reported at the
  start of the read; `fail` on any error.

- consumers: the client offers no ack receipt, so an ack it accepted ends `info` (sent, unconfirmed)
  and one it refused ends `fail`.

With a schema (impl/workload/schemas.py), producers, readers and consumers are typed: a value travels as a
record, and every delivery also records its `schema_version`.

Positions are [ledger, entry, batch index], with batch index 0 for a message alone in its entry
(the official client says -1), as the project's client reports them.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any

from impl.workload.operations import (
    APPEND_TIMEOUT_S,
    READ_TIMEOUT_S,
    RECEIVE_TIMEOUT_S,
    Credentials,
    Outcome,
    Position,
    Received,
    delivery,
    describe,
    sent,
    text,
    tombstone_message,
)

if TYPE_CHECKING:
    from impl.workload.schemas import SchemaPlan

# Errors the client raises before anything reaches the broker.
_CERTAINLY_NOT_SENT = ("MessageTooBig", "InvalidMessage", "ProducerQueueIsFull", "InvalidConfiguration")


def official_position(message_id: Any) -> Position:
    return [int(message_id.ledger_id()), int(message_id.entry_id()), max(0, int(message_id.batch_index()))]


def _has_message_available(reader: Any) -> bool:
    """reader.has_message_available(), but a failed check raises. The client answers a check whose
    GET_LAST_MESSAGE_ID was cut off by a lost connection with `False` (its value is `result == Ok and
    ...`), which would end a read early and look like a stale read; the asynchronous call reports the
    result beside the value."""
    import _pulsar

    done = threading.Event()
    answer: list[Any] = []

    def callback(result: Any, available: bool) -> None:
        answer.extend((result, available))
        done.set()

    reader._reader.has_message_available_async(callback)
    if not done.wait(READ_TIMEOUT_S * 2):
        raise TimeoutError("has_message_available did not answer")
    result, available = answer
    if result != _pulsar.Result.Ok:
        # Not every result has a name in the binding (a lost connection's prints as ???): give its code.
        raise RuntimeError(f"has_message_available failed: result code {int(result)} ({result})")
    return bool(available)


class OfficialSession:
    def __init__(
        self, service_url: str, credentials: Credentials | None = None, schema: SchemaPlan | None = None
    ) -> None:
        import pulsar

        credentials = credentials or Credentials()
        self.pulsar = pulsar
        self.client = pulsar.Client(
            service_url,
            operation_timeout_seconds=int(READ_TIMEOUT_S * 2),
            connection_timeout_ms=5000,
            authentication=pulsar.AuthenticationToken(credentials.token) if credentials.token else None,
            tls_trust_certs_file_path=credentials.tls_trust_certs_file,
            tls_validate_hostname=True,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),  # its INFO lines would drown the progress
        )
        self.producers: dict[str, Any] = {}
        self.schema = schema if schema is not None and schema.typed else None
        self._generations: dict[str, int] = {}  # the schema generation each producer was made with

    def _typed(self, **options: Any) -> dict[str, Any]:
        """Options of a reader or consumer: the run's schema, when it has one."""
        return {**options, "schema": self.schema.consumer_schema()} if self.schema else options

    def _text(self, message: Any) -> str:
        return str(message.value().value) if self.schema else text(message.data(), message.properties())

    def _producer(self, topic: str) -> tuple[Any, int]:
        """The topic's producer; after the schema evolved, a new one with the evolved schema."""
        generation = self.schema.generation if self.schema else 0
        producer = self.producers.get(topic)
        if producer is not None and self._generations.get(topic, 0) != generation:
            self.producers.pop(topic)
            with contextlib.suppress(Exception):
                producer.close()
            producer = None
        if producer is None:
            options: dict[str, Any] = {"send_timeout_millis": int(APPEND_TIMEOUT_S * 1000)}
            if self.schema:
                options["schema"] = self.schema.producer_schema(generation)
            producer = self.producers[topic] = self.client.create_producer(topic, **options)
            self._generations[topic] = generation
        return producer, generation

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()

    def append(self, topic: str, value: str, key: str | None = None, tombstone: bool = False) -> Outcome:
        try:
            producer, generation = self._producer(topic)
        except Exception as e:  # no producer, nothing sent
            return Outcome("fail", {"error": describe(e)})
        properties: dict[str, str] = {}
        try:
            if tombstone:  # untyped runs only (the workload sends none with a schema)
                content, properties = tombstone_message(value)
            else:
                content = self.schema.encode(value, generation) if self.schema else value.encode()
            message_id = producer.send(content, partition_key=key, properties=properties or None)
        except Exception as e:
            if type(e).__name__ in _CERTAINLY_NOT_SENT:
                return Outcome("fail", {"error": describe(e)})
            self.producers.pop(topic, None)
            with contextlib.suppress(Exception):
                producer.close()
            return Outcome("info", {"error": describe(e)})
        if message_id.ledger_id() < 0:
            # A resend the broker de-duplicated (an earlier copy is stored): Pulsar acknowledges it with the
            # id -1:-1, so where it is is unknown; `info` says it may be written, and the final read finds it.
            return Outcome("info", {"error": "acknowledged as a duplicate: its position is unknown"})
        return Outcome("ok", {"position": official_position(message_id)})

    def read(self, topic: str, start: Position | None, limit: int | None) -> Outcome:
        return self._read(topic, start, limit)

    def read_compacted(self, topic: str) -> Outcome:
        """A `read_compacted` reader from the earliest to the end: per key its value at the compaction horizon
        (a deleted key left out), then every message after the horizon."""
        return self._read(topic, None, None, is_read_compacted=True)

    def _read(self, topic: str, start: Position | None, limit: int | None, **options: Any) -> Outcome:
        pulsar = self.pulsar
        reader = None
        try:
            # Batch index 0 stands for -1 too (a message alone in its entry), and the client orders -1
            # before 0: starting at -1 takes the whole entry either way.
            start_id = (
                pulsar.MessageId.earliest
                if start is None
                else pulsar.MessageId(-1, start[0], start[1], start[2] if start[2] > 0 else -1)
            )
            reader = self.client.create_reader(
                topic, start_id, **self._typed(start_message_id_inclusive=True, **options)
            )
            value: list[list[Any]] = []
            while (limit is None or len(value) < limit) and _has_message_available(reader):
                msg = reader.read_next(int(READ_TIMEOUT_S * 1000))
                value.append([official_position(msg.message_id()), self._text(msg)])
        except Exception as e:  # a read has no effect: fail
            return Outcome("fail", {"error": describe(e)})
        finally:
            if reader is not None:
                with contextlib.suppress(Exception):
                    reader.close()
        return Outcome("ok", {"value": value})

    def subscribe(self, topic: str, subscription: str, sub_type: str, name: str) -> tuple[Outcome, Any]:
        pulsar = self.pulsar
        try:
            consumer = self.client.subscribe(
                topic,
                subscription,
                **self._typed(
                    consumer_type=getattr(pulsar.ConsumerType, sub_type.replace("_", "")),
                    initial_position=pulsar.InitialPosition.Earliest,
                    consumer_name=name,
                    negative_ack_redelivery_delay_ms=100,
                ),
            )
        except Exception as e:
            return Outcome("fail", {"error": describe(e)}), None
        return Outcome("ok"), consumer

    def receive(self, consumer: Any, topic: str, timeout_s: float = RECEIVE_TIMEOUT_S) -> Received:
        try:
            msg = consumer.receive(int(timeout_s * 1000))
            value = self._text(msg)
        except Exception as e:
            return Received(Outcome("fail", {"error": describe(e)}))
        fields = delivery(
            topic,
            value,
            official_position(msg.message_id()),
            int(msg.redelivery_count()),
            msg.partition_key(),
            msg.topic_name(),
        )
        if self.schema:
            from impl.workload.schemas import schema_version

            fields["schema_version"] = schema_version(msg)
        return Received(Outcome("ok", fields), msg)

    def ack(self, consumer: Any, message: Any, cumulative: bool) -> Outcome:
        try:
            if cumulative:
                consumer.acknowledge_cumulative(message)
            else:
                consumer.acknowledge(message)
        except Exception as e:  # refused by the client: not sent
            return Outcome("fail", {"error": describe(e)})
        return Outcome("info", {"error": "sent; the client offers no ack receipt"})

    def nack(self, consumer: Any, message: Any) -> Outcome:
        return sent(lambda: consumer.negative_acknowledge(message))

    def close_consumer(self, consumer: Any) -> Outcome:
        return sent(consumer.close)
