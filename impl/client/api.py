"""The project's Pulsar client: `Client`, `Producer`, `Consumer`, `Reader`, over Pulsar's binary
protocol (impl/client/transport.py), so that it works against any Pulsar broker.

- Lookup asks the service URL's brokers in turn and follows redirects to the owner; connections
  are pooled by broker URL.
- A producer attaches to the owner; when the broker closes it or the connection goes, the sends
  still waiting for a receipt end `SendUnknown` (they may be written), and the next send attaches
  again under the same name (the broker de-duplicates by name and sequence id). It never resends
  by itself: a reference client reports what it knows.
- A consumer attaches, grants permits (FLOW) and acknowledges as Pulsar's clients do: a batch
  entry once all its messages are acknowledged, with an `ack_set` of the rest before that. When
  the broker closes it or the connection goes it subscribes again; what it had received and not
  acknowledged is delivered again.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import time
import uuid
import zlib
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Protocol

from impl.client import connection as core
from impl.client.errors import ClientError, ConnectionLost, NotAttached, SendRejected, SendUnknown
from impl.client.transport import BrokerConnection, Token
from impl.protocol import bitset, entry_codec
from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.message_id import MessageId

T = api.BaseCommand
PARTITION_SUFFIX = "-partition-"
MAX_REDIRECTS = 20
RETRY_PAUSE_S = 0.1
MAX_BATCH_BYTES = 128 * 1024  # a batch closes at this size (Pulsar's batchingMaxBytes)
SUB_TYPES = {
    "Exclusive": api.CommandSubscribe.Exclusive,
    "Shared": api.CommandSubscribe.Shared,
    "Failover": api.CommandSubscribe.Failover,
    "Key_Shared": api.CommandSubscribe.Key_Shared,
}
# ServerErrors that a new lookup may cure: the topic moved, or its broker is busy taking it over.
RETRYABLE = (api.ServiceNotReady, api.MetadataError, api.PersistenceError, api.UnknownError)
# SEND_ERRORs after which the message is certainly not on the topic.
NOT_WRITTEN = (api.ChecksumError, api.NotAllowedError, api.TopicTerminatedError, api.ProducerBlockedQuotaExceededError)


@dataclass(frozen=True)
class ConsumerMessage:
    id: MessageId
    data: bytes
    key: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    redelivery_count: int = 0
    topic: str = ""  # the topic (partition) it came from: acknowledgements go back there
    event_time: int = 0
    batch_size: int = 0  # messages in its entry when the entry is a batch, else 0


def service_urls(url: str) -> list[str]:
    scheme, sep, rest = url.partition("://")
    if scheme == "pulsar+ssl":  # a socket shared by a reader and writers cannot be an SSLSocket safely
        raise ClientError("the project's client speaks plain pulsar:// only; use the official client for TLS")
    if not sep or scheme != "pulsar":
        raise ClientError(f"bad service URL {url!r}; use pulsar://HOST:PORT[,HOST:PORT...]")
    hosts = [h.strip().rstrip("/") for h in rest.split(",") if h.strip()]
    if not hosts or not all(":" in h for h in hosts):
        raise ClientError(f"bad service URL {url!r}; use pulsar://HOST:PORT[,HOST:PORT...]")
    return [f"pulsar://{h}" for h in hosts]


class Client:
    """`token`: sent in CONNECT, for brokers with token authentication; a callable is asked for a fresh
    token on each CONNECT and each AUTH_CHALLENGE (when the broker finds the last one expired)."""

    def __init__(self, service_url: str, *, timeout_s: float = 10.0, token: Token | None = None) -> None:
        self.service = service_urls(service_url)
        self.timeout_s = timeout_s
        self.token = token
        self._pool: dict[str, BrokerConnection] = {}
        self._lock = threading.Lock()
        self._rotation = itertools.count()
        self._handler_ids = itertools.count()
        self._closed = False

    # ---- connections and lookup --------------------------------------------------------------

    def connection(self, url: str, connect_timeout_s: float | None = None) -> BrokerConnection:
        with self._lock:
            if self._closed:
                raise ClientError("the client is closed")
            existing = self._pool.get(url)
            if existing is not None and existing.open:
                return existing
        conn = BrokerConnection(url, self.timeout_s, self.token, connect_timeout_s)
        with self._lock:
            current = self._pool.get(url)
            if current is not None and current.open:
                conn.close()
                return current
            self._pool[url] = conn
            return conn

    def next_id(self) -> int:
        """Producer and consumer ids: unique in this client, so per connection too."""
        return next(self._handler_ids)

    def _attempt_s(self, deadline: float) -> float:
        """How long one broker may take to answer a lookup-like request: a share of the whole
        timeout, so that a broker that accepts connections but never answers (paused, overloaded)
        leaves time to ask the others."""
        return max(0.1, min(deadline - time.monotonic(), max(1.0, self.timeout_s / 4)))

    def _any_broker(self, type_: int, message_of: type, fill: dict[str, object]) -> api.BaseCommand:
        """A request any broker of the service URL can answer; each is tried in turn."""
        errors = []
        deadline = time.monotonic() + self.timeout_s
        for _ in range(len(self.service)):
            url = self.service[next(self._rotation) % len(self.service)]
            attempt_s = self._attempt_s(deadline)
            try:
                return self.connection(url, attempt_s).call(type_, message_of(**fill), attempt_s)
            except ClientError as e:
                if e.code is not None and e.code not in RETRYABLE:
                    raise
                errors.append(f"{url}: {e}")
        raise ClientError(f"no broker of {','.join(self.service)} answered ({'; '.join(errors)}); are they up?")

    def lookup(self, topic: str) -> str:
        """The URL of the broker serving `topic` (asks the service's brokers, follows redirects)."""
        deadline = time.monotonic() + self.timeout_s
        last: ClientError | None = None
        while time.monotonic() < deadline:
            url = self.service[next(self._rotation) % len(self.service)]
            authoritative = False
            try:
                for _ in range(MAX_REDIRECTS):
                    lookup = api.CommandLookupTopic(topic=topic, authoritative=authoritative)
                    attempt_s = self._attempt_s(deadline)
                    resp = self.connection(url, attempt_s).call(T.LOOKUP, lookup, attempt_s).lookupTopicResponse
                    if resp.response == api.CommandLookupTopicResponse.Connect:
                        return resp.brokerServiceUrl
                    url, authoritative = resp.brokerServiceUrl, resp.authoritative
                raise ClientError(f"lookup of {topic}: more than {MAX_REDIRECTS} redirects")
            except ClientError as e:
                if e.code is not None and e.code not in RETRYABLE:
                    raise
                last = e
                time.sleep(RETRY_PAUSE_S)
        raise ClientError(
            f"lookup of {topic} did not succeed within {self.timeout_s}s: {last}", last.code if last else None
        )

    def partitions(self, topic: str) -> int:
        """The partition count of a partitioned topic, 0 for a plain topic or a partition."""
        resp = self._any_broker(T.PARTITIONED_METADATA, api.CommandPartitionedTopicMetadata, {"topic": topic})
        return resp.partitionMetadataResponse.partitions

    # ---- the API -----------------------------------------------------------------------------

    def create_producer(
        self,
        topic: str,
        name: str = "",
        *,
        batching: bool = False,
        batch_max_messages: int = 100,
        batch_delay_s: float = 0.001,
    ) -> Producer | PartitionedProducer:
        partitions = self.partitions(topic)
        if partitions:
            return PartitionedProducer(
                [
                    Producer(self, partition_name(topic, i), name, batching, batch_max_messages, batch_delay_s)
                    for i in range(partitions)
                ]
            )
        return Producer(self, topic, name, batching, batch_max_messages, batch_delay_s)

    def subscribe(
        self,
        topic: str,
        subscription: str,
        *,
        subscription_type: str = "Exclusive",
        initial_position: str = "latest",
        consumer_name: str = "",
        receiver_queue_size: int = 1000,
    ) -> Consumer | PartitionedConsumer:
        if subscription_type not in SUB_TYPES:
            raise ClientError(f"unknown subscription type {subscription_type!r}; use one of {', '.join(SUB_TYPES)}")
        if initial_position not in ("earliest", "latest"):
            raise ClientError(f"initial position must be 'earliest' or 'latest', not {initial_position!r}")
        partitions = self.partitions(topic)
        topics = [partition_name(topic, i) for i in range(partitions)] if partitions else [topic]
        consumers = [
            Consumer(
                self,
                t,
                subscription,
                subscription_type,
                initial_position == "earliest",
                consumer_name,
                receiver_queue_size,
            )
            for t in topics
        ]
        return PartitionedConsumer(consumers) if partitions else consumers[0]

    def create_reader(self, topic: str, start: MessageId | None = None) -> Reader:
        """A non-durable reader from `start` (inclusive; None = the earliest message)."""
        return Reader(self, topic, start)

    def read_topic(
        self, topic: str, start: MessageId | None = None, limit: int | None = None, timeout_s: float | None = None
    ) -> list[tuple[MessageId, bytes]]:
        """Every message from `start` (inclusive) to the end of the topic as of one instant (the last
        message id the broker reports when the read starts), or the first `limit` of them."""
        return [(m.id, m.data) for m in self.read_topic_messages(topic, start, limit, timeout_s)]

    def read_topic_messages(
        self, topic: str, start: MessageId | None = None, limit: int | None = None, timeout_s: float | None = None
    ) -> list[ConsumerMessage]:
        """read_topic's messages whole: with their keys and properties."""
        timeout_s = timeout_s or self.timeout_s
        deadline = time.monotonic() + timeout_s
        reader = Reader(self, topic, start)
        try:
            last = reader.last_message_id()
            out: list[ConsumerMessage] = []
            while last is not None and (limit is None or len(out) < limit):
                if out and out[-1].id >= last:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ClientError(f"reading {topic} did not finish within {timeout_s}s")
                out.append(reader.read_next_message(left))
            return [m for m in out if last is None or m.id <= last]
        finally:
            reader.close()

    def last_message_id(self, topic: str) -> MessageId | None:
        reader = Reader(self, topic, None)
        try:
            return reader.last_message_id()
        finally:
            reader.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, {}
        for conn in pool.values():
            conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def partition_name(topic: str, index: int) -> str:
    return f"{topic}{PARTITION_SUFFIX}{index}"


def _id_to_wire(mid: MessageId) -> api.MessageIdData:
    return api.MessageIdData(ledgerId=mid.ledger_id, entryId=mid.entry_id)


# ---- producing -------------------------------------------------------------------------------


@dataclass
class _Pending:
    futures: list[Future[MessageId]]
    batch: bool


class Producer:
    """Sends messages to one topic. With `batching`, messages sent within `batch_delay_s` (up to
    `batch_max_messages`) travel as one entry; each gets its own id (ledger, entry, batch index)."""

    def __init__(
        self, client: Client, topic: str, name: str, batching: bool, batch_max: int, batch_delay_s: float
    ) -> None:
        self.client = client
        self.topic = topic
        self.name = name
        self.batching = batching
        self.batch_max = batch_max
        self.batch_delay_s = batch_delay_s
        self._lock = threading.Condition()
        self._conn: BrokerConnection | None = None
        self._id = client.next_id()
        self._epoch = 0
        self._next_sequence = 0
        self._pending: dict[int, _Pending] = {}  # first sequence id -> the entry's futures
        self._batch: list[tuple[entry_codec.SingleMessage, Future[MessageId]]] = []
        self._batch_bytes = 0
        self._batch_started: float | None = None
        self._closing = False
        self._attach()
        if batching:
            self._batcher = threading.Thread(target=self._batch_loop, name=f"batcher-{self.name}", daemon=True)
            self._batcher.start()

    def _attach(self) -> BrokerConnection:
        """Attach to the topic's owner (under the lock); ClientError: nothing can be sent now."""
        url = self.client.lookup(self.topic)
        conn = self.client.connection(url)
        request = api.CommandProducer(topic=self.topic, producer_id=self._id, epoch=self._epoch)
        if self.name:
            request.producer_name = self.name
            request.user_provided_producer_name = True
        ok = conn.call(T.PRODUCER, request).producer_success
        conn.attach("producer", self._id, self)  # after the answer: no stray receipt can reach us while we wait
        self.name = ok.producer_name
        self._next_sequence = max(self._next_sequence, ok.last_sequence_id + 1)
        self._epoch += 1
        self._conn = conn
        return conn

    # ---- sending ---------------------------------------------------------------------------------

    def send(
        self,
        data: bytes,
        key: str = "",
        properties: dict[str, str] | None = None,
        timeout_s: float | None = None,
        event_time: int = 0,
    ) -> MessageId:
        future = self.send_async(data, key, properties, event_time)
        if self.batching:
            self.flush()
        wait_s = timeout_s or self.client.timeout_s
        try:
            return future.result(timeout=wait_s)
        except FutureTimeout:
            raise SendUnknown(f"send to {self.topic} not answered within {wait_s}s: outcome unknown") from None

    def send_async(
        self, data: bytes, key: str = "", properties: dict[str, str] | None = None, event_time: int = 0
    ) -> Future[MessageId]:
        message = entry_codec.SingleMessage(data, key, tuple(sorted((properties or {}).items())), event_time)
        future: Future[MessageId] = Future()
        with self._lock:
            if not self.batching:
                self._send_entry([(message, future)])
                return future
            self._batch.append((message, future))
            self._batch_bytes += len(data)
            if len(self._batch) >= self.batch_max or self._batch_bytes >= MAX_BATCH_BYTES:
                self._close_batch()
            elif self._batch_started is None:
                self._batch_started = time.monotonic()
                self._lock.notify_all()
        return future

    def _close_batch(self) -> None:
        batch, self._batch, self._batch_bytes, self._batch_started = self._batch, [], 0, None
        if batch:
            self._send_entry(batch)

    def _send_entry(self, messages: list[tuple[entry_codec.SingleMessage, Future[MessageId]]]) -> None:
        """One entry (a batch when several messages) under the lock, in sequence-id order."""
        futures = [f for _, f in messages]
        try:
            conn = self._conn if self._conn is not None and self._conn.open else self._attach()
        except ClientError as e:
            for f in futures:
                f.set_exception(SendRejected(f"send to {self.topic} not attempted: {e}", e.code))
            return
        singles = [m for m, _ in messages]
        size = sum(len(m.payload) for m in singles)
        limit = conn.core.max_message_size
        if limit is not None and size > limit:
            for f in futures:
                f.set_exception(
                    SendRejected(f"{size} bytes is over the broker's limit of {limit}", api.NotAllowedError)
                )
            return
        sequence_id = self._next_sequence
        self._next_sequence += len(singles)
        data = entry_codec.build_messages(self.name, sequence_id, int(time.time() * 1000), singles)
        send = api.CommandSend(producer_id=self._id, sequence_id=sequence_id)
        if len(singles) > 1:
            send.num_messages = len(singles)
        self._pending[sequence_id] = _Pending(futures, len(singles) > 1)
        with contextlib.suppress(ConnectionLost):  # on_detached fails what is pending, this entry included
            conn.write(core.command(T.SEND, "send", send, data))

    def flush(self) -> None:
        with self._lock:
            self._close_batch()

    def _batch_loop(self) -> None:
        with self._lock:
            while not self._closing:
                if self._batch_started is None:
                    self._lock.wait()
                    continue
                left = self._batch_started + self.batch_delay_s - time.monotonic()
                if left > 0:
                    self._lock.wait(left)
                else:
                    self._close_batch()

    # ---- the broker's answers ------------------------------------------------------------------

    def on_event(self, event: core.Output) -> None:
        with self._lock:
            if isinstance(event, core.Receipt):
                pending = self._pending.pop(event.sequence_id, None)
                if pending is None:
                    return
                if event.ledger_id < 0:  # a duplicate: written once before, where is not said
                    error = SendUnknown(f"send to {self.topic} duplicated an earlier send: its position is unknown")
                    for f in pending.futures:
                        f.set_exception(error)
                    return
                for i, f in enumerate(pending.futures):
                    f.set_result(MessageId(event.ledger_id, event.entry_id, i))
                self._lock.notify_all()
            elif isinstance(event, core.SendFailed):
                pending = self._pending.pop(event.sequence_id, None)
                if pending is None:
                    return
                kind = SendRejected if event.error in NOT_WRITTEN else SendUnknown
                err = kind(f"send to {self.topic}: {event.message}", event.error)
                for f in pending.futures:
                    f.set_exception(err)
                self._lock.notify_all()

    def on_detached(self) -> None:
        """Closed by the broker, or the connection is gone: what waits for a receipt may be written."""
        with self._lock:
            self._conn = None
            pending, self._pending = self._pending, {}
            for p in pending.values():
                for f in p.futures:
                    f.set_exception(SendUnknown(f"the producer on {self.topic} was detached: outcome unknown"))
            self._lock.notify_all()

    def close(self) -> None:
        """Send what is batched, wait for every pending send (up to the timeout), detach."""
        deadline = time.monotonic() + self.client.timeout_s
        with self._lock:
            self._close_batch()
            self._closing = True
            while self._pending and time.monotonic() < deadline:
                self._lock.wait(max(0.01, deadline - time.monotonic()))
            conn, self._conn = self._conn, None
            self._lock.notify_all()
        if conn is not None and conn.open:
            conn.detach("producer", self._id)
            with contextlib.suppress(ClientError):  # the broker forgets it with the connection anyway
                conn.call(T.CLOSE_PRODUCER, api.CommandCloseProducer(producer_id=self._id))


class PartitionProducer(Protocol):
    """What a partitioned producer needs of each partition's producer (this client's or the gRPC one's)."""

    def send(
        self, data: bytes, key: str = ..., properties: dict[str, str] | None = ..., timeout_s: float | None = ...
    ) -> MessageId: ...

    def send_async(self, data: bytes, key: str = ..., properties: dict[str, str] | None = ...) -> Future[MessageId]: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class PartitionConsumer(Protocol):
    topic: str

    def receive(self, timeout_s: float | None = ...) -> Any: ...

    def acknowledge(self, message: Any, receipt: bool = ...) -> None: ...

    def acknowledge_cumulative(self, message: Any, receipt: bool = ...) -> None: ...

    def negative_acknowledge(self, message: Any) -> None: ...

    def close(self) -> None: ...


class PartitionedProducer:
    """A producer on a partitioned topic: a message with a key goes to the partition of the key's
    hash (so one key stays in order), one without a key to the next partition in turn."""

    def __init__(self, producers: Sequence[PartitionProducer]) -> None:
        self.producers = list(producers)
        self._next = itertools.count()

    def _route(self, key: str) -> PartitionProducer:
        index = zlib.crc32(key.encode()) if key else next(self._next)
        return self.producers[index % len(self.producers)]

    def send(
        self, data: bytes, key: str = "", properties: dict[str, str] | None = None, timeout_s: float | None = None
    ) -> MessageId:
        return self._route(key).send(data, key, properties, timeout_s)

    def send_async(self, data: bytes, key: str = "", properties: dict[str, str] | None = None) -> Future[MessageId]:
        return self._route(key).send_async(data, key, properties)

    def flush(self) -> None:
        for p in self.producers:
            p.flush()

    def close(self) -> None:
        for p in self.producers:
            p.close()


# ---- consuming -------------------------------------------------------------------------------


class Consumer:
    """A consumer of one subscription on one topic; subscribes again when detached."""

    def __init__(
        self,
        client: Client,
        topic: str,
        subscription: str,
        sub_type: str,
        earliest: bool,
        name: str,
        receiver_queue_size: int,
        durable: bool = True,
        start: MessageId | None = None,
    ) -> None:
        self.client = client
        self.topic = topic
        self.subscription = subscription
        self.sub_type = sub_type
        self.earliest = earliest
        self.name = name
        self.durable = durable
        self.start = start
        self.queue_size = max(1, receiver_queue_size)
        self.active = sub_type != "Failover"
        self._id = client.next_id()
        self._received: queue.Queue[ConsumerMessage] = queue.Queue()
        self._consumed_since_flow = 0
        self._acked_in_batch: dict[tuple[int, int], set[int]] = {}
        self._lock = threading.Lock()
        self._conn: BrokerConnection | None = None
        self._closed = threading.Event()
        self._reattaching = threading.Lock()
        self._attach()

    def _attach(self) -> None:
        url = self.client.lookup(self.topic)
        conn = self.client.connection(url)
        request = api.CommandSubscribe(
            topic=self.topic,
            subscription=self.subscription,
            subType=SUB_TYPES[self.sub_type],
            consumer_id=self._id,
            consumer_name=self.name,
            durable=self.durable,
            initialPosition=api.CommandSubscribe.Earliest if self.earliest else api.CommandSubscribe.Latest,
        )
        if self.start is not None:
            request.start_message_id.CopyFrom(_id_to_wire(self.start))
        with self._lock:
            # What was received and not acknowledged is delivered again after (re)subscribing.
            self._received = queue.Queue()
            self._consumed_since_flow = 0
        conn.call(T.SUBSCRIBE, request)
        conn.attach("consumer", self._id, self)  # before FLOW: nothing is delivered before it
        self._conn = conn
        self._write(T.FLOW, "flow", api.CommandFlow(consumer_id=self._id, messagePermits=self.queue_size))

    def _write(self, type_: int, field_name: str, message: object) -> None:
        conn = self._conn
        if conn is None:
            raise NotAttached(f"consumer of {self.subscription} is reconnecting; try again")
        conn.write(core.command(type_, field_name, message))

    # ---- the broker's messages -----------------------------------------------------------------

    def on_event(self, event: core.Output) -> None:
        if isinstance(event, core.ActiveChanged):
            self.active = event.active
            return
        if not isinstance(event, core.Delivered):
            return
        entry = entry_codec.parse(event.entry)
        wanted = bitset.from_words(event.ack_set) if event.ack_set else None
        size = entry.num_messages if entry.is_batch else 0
        for i, single in enumerate(entry_codec.singles(entry)):
            if wanted is not None and i not in wanted:
                continue
            self._received.put(
                ConsumerMessage(
                    MessageId(event.ledger_id, event.entry_id, i),
                    single.payload,
                    single.key,
                    dict(single.properties),
                    event.redelivery_count,
                    self.topic,
                    single.event_time,
                    size,
                )
            )

    def on_detached(self) -> None:
        self._conn = None
        if self._closed.is_set():
            return
        threading.Thread(target=self._reattach, name=f"resubscribe-{self.subscription}", daemon=True).start()

    def _reattach(self) -> None:
        with self._reattaching:
            while not self._closed.is_set() and (self._conn is None or not self._conn.open):
                try:
                    self._attach()
                    return
                except ClientError:
                    self._closed.wait(RETRY_PAUSE_S)

    # ---- the application's side ----------------------------------------------------------------

    def receive(self, timeout_s: float | None = None) -> ConsumerMessage:
        """The next message; raises TimeoutError after `timeout_s` (None = wait forever)."""
        try:
            msg = self._received.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"no message on {self.subscription} within {timeout_s}s") from None
        with self._lock:
            self._consumed_since_flow += 1
            grant = self._consumed_since_flow >= max(1, self.queue_size // 2)
            if grant:
                permits, self._consumed_since_flow = self._consumed_since_flow, 0
        if grant:
            with contextlib.suppress(ClientError):  # reconnecting: the new subscription grants a full queue
                self._write(T.FLOW, "flow", api.CommandFlow(consumer_id=self._id, messagePermits=permits))
        return msg

    def acknowledge(self, message: ConsumerMessage, receipt: bool = False) -> None:
        """Individual ack. A batch entry is acknowledged whole once all its messages are; before
        that, with an ack_set of the batch indexes still unacknowledged. With `receipt`, wait for the
        broker's ACK_RESPONSE (a refusal raises ClientError); without, the ack is only sent."""
        mid = _id_to_wire(message.id)
        if message.batch_size:
            key = (message.id.ledger_id, message.id.entry_id)
            with self._lock:
                acked = self._acked_in_batch.setdefault(key, set())
                acked.add(message.id.batch_index)
                rest = [i for i in range(message.batch_size) if i not in acked]
                if not rest:
                    del self._acked_in_batch[key]
            if rest:
                mid.ack_set.extend(bitset.to_words(rest))
        ack = api.CommandAck(consumer_id=self._id, ack_type=api.CommandAck.Individual)
        ack.message_id.append(mid)
        self._send_ack(ack, receipt)

    def acknowledge_cumulative(self, message: ConsumerMessage, receipt: bool = False) -> None:
        mid = _id_to_wire(message.id)
        if message.batch_size and message.id.batch_index < message.batch_size - 1:
            mid.ack_set.extend(bitset.to_words(list(range(message.id.batch_index + 1, message.batch_size))))
        ack = api.CommandAck(consumer_id=self._id, ack_type=api.CommandAck.Cumulative)
        ack.message_id.append(mid)
        self._send_ack(ack, receipt)

    def _send_ack(self, ack: api.CommandAck, receipt: bool) -> None:
        if not receipt:
            self._write(T.ACK, "ack", ack)
            return
        conn = self._conn
        if conn is None:
            raise NotAttached(f"consumer of {self.subscription} is reconnecting; try again")
        conn.call(T.ACK, ack)

    def negative_acknowledge(self, message: ConsumerMessage) -> None:
        """Have the message delivered again (at once: no delay, as a reference needs no timer)."""
        ids = api.MessageIdData(ledgerId=message.id.ledger_id, entryId=message.id.entry_id)
        if message.batch_size:
            ids.batch_index = message.id.batch_index
        redeliver = api.CommandRedeliverUnacknowledgedMessages(consumer_id=self._id)
        redeliver.message_ids.append(ids)
        self._write(T.REDELIVER_UNACKNOWLEDGED_MESSAGES, "redeliverUnacknowledgedMessages", redeliver)

    def last_message_id(self) -> MessageId | None:
        """The topic's last message id (None: the topic has none)."""
        if self._conn is None:
            self._reattach()
        conn = self._conn
        if conn is None:
            raise ClientError(f"consumer of {self.topic} is not attached")
        resp = conn.call(T.GET_LAST_MESSAGE_ID, api.CommandGetLastMessageId(consumer_id=self._id))
        last = resp.getLastMessageIdResponse.last_message_id
        if last.entryId < 0:
            return None
        return MessageId(last.ledgerId, last.entryId, max(0, last.batch_index))

    def close(self) -> None:
        self._closed.set()
        conn, self._conn = self._conn, None
        if conn is not None and conn.open:
            conn.detach("consumer", self._id)
            with contextlib.suppress(ClientError):  # the broker forgets it with the connection anyway
                conn.call(T.CLOSE_CONSUMER, api.CommandCloseConsumer(consumer_id=self._id))


class Reader:
    """A non-durable subscription read from `start` (inclusive; None = the earliest message)."""

    def __init__(self, client: Client, topic: str, start: MessageId | None) -> None:
        self.topic = topic
        self._next = start
        self._consumer = Consumer(
            client,
            topic,
            f"reader-{uuid.uuid4().hex[:10]}",
            "Exclusive",
            True,
            "",
            1000,
            durable=False,
            start=start or MessageId(-1, -1, -1),
        )

    def read_next(self, timeout_s: float = 10.0) -> tuple[MessageId, bytes]:
        msg = self.read_next_message(timeout_s)
        return msg.id, msg.data

    def read_next_message(self, timeout_s: float = 10.0) -> ConsumerMessage:
        deadline = time.monotonic() + timeout_s
        while True:
            msg = self._consumer.receive(max(0.0, deadline - time.monotonic()))
            if self._next is not None and msg.id < self._next:
                continue  # before the start inside its entry, or delivered again after a reconnect
            self._next = MessageId(msg.id.ledger_id, msg.id.entry_id, msg.id.batch_index + 1)
            self._consumer.acknowledge_cumulative(msg)
            return msg

    def last_message_id(self) -> MessageId | None:
        return self._consumer.last_message_id()

    def has_message_available(self) -> bool:
        last = self.last_message_id()
        return last is not None and (self._next is None or last >= self._next)

    def close(self) -> None:
        self._consumer.close()


class PartitionedConsumer:
    """One subscription over every partition of a partitioned topic; a message's `topic` says
    which partition it came from, and acknowledgements go back to that partition."""

    def __init__(self, consumers: Sequence[PartitionConsumer]) -> None:
        self.consumers = {c.topic: c for c in consumers}
        self._turn = itertools.count()

    def receive(self, timeout_s: float | None = None) -> Any:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        consumers = list(self.consumers.values())
        while True:
            start = next(self._turn)
            for i in range(len(consumers)):
                try:
                    return consumers[(start + i) % len(consumers)].receive(timeout_s=0)
                except TimeoutError:
                    continue
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"no message on any partition within {timeout_s}s")
            time.sleep(0.005)

    def _owner(self, message: Any) -> PartitionConsumer:
        consumer = self.consumers.get(message.topic)
        if consumer is None:
            raise ClientError(f"{message.topic!r} is not a partition of this consumer; pass the received message")
        return consumer

    def acknowledge(self, message: Any, receipt: bool = False) -> None:
        owner = self._owner(message)
        owner.acknowledge(message, receipt=True) if receipt else owner.acknowledge(message)

    def acknowledge_cumulative(self, message: Any, receipt: bool = False) -> None:
        owner = self._owner(message)
        owner.acknowledge_cumulative(message, receipt=True) if receipt else owner.acknowledge_cumulative(message)

    def negative_acknowledge(self, message: Any) -> None:
        self._owner(message).negative_acknowledge(message)

    def close(self) -> None:
        for c in self.consumers.values():
            c.close()
