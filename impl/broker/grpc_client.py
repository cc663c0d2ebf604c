"""The project's client over the broker's gRPC API (legacy: admin verbs and the gRPC API's own tests).

The Pulsar-protocol client is impl/broker/client/. This one goes with the gRPC Broker service.

The client finds a topic's broker by lookup (asking any broker it knows, following redirects)
and looks up again when a broker answers NOT_OWNER or goes away, so it follows ownership as
it moves between brokers.

Outcomes are reported honestly, as a linearizability audit needs them:
- a send the broker certainly did not write raises `SendRejected` (safe to report as failed);
- a send whose outcome is unknown (timeout, broker gone mid-call, fenced topic, bookies not
  confirming) raises `SendUnknown`; it may or may not appear in the topic later.
A send is retried only while it is certainly rejected (e.g. NOT_OWNER during a takeover).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import grpc

from impl.broker import broker_pb2 as pb
from impl.broker import broker_pb2_grpc as pb_grpc
from impl.broker.client.api import PartitionedConsumer, PartitionedProducer
from impl.broker.errors import BrokerError, error_for
from impl.broker.subscription import MessageId

__all__ = [
    "Client",
    "ClientError",
    "ConsumerMessage",
    "MessageId",
    "Producer",
    "Consumer",
    "Reader",
    "SendRejected",
    "SendUnknown",
]

PARTITION_SUFFIX = "-partition-"
MAX_REDIRECTS = 8
RETRYABLE = (pb.NOT_OWNER, pb.SERVICE_NOT_READY, pb.TOPIC_FENCED)  # codes that a new lookup may cure
MAX_PIPELINED = 1000  # entries sent in one request at most (their adds are pipelined at the broker)
MAX_IN_FLIGHT = 4  # requests of one producer on their way at once
# Entries waiting before a second request goes out while one is under way: a request costs the broker
# about as much as a few dozen entries, so pipelining pays only with a backlog.
PIPELINE_BACKLOG = 32
MAX_REQUEST_BYTES = 1024 * 1024  # of payload in one request (bigger ones take longer than their share)
MAX_BATCH_BYTES = 128 * 1024  # a batch entry closes at this size (Pulsar's batchingMaxBytes)
RETRY_PAUSE_S = 0.1
_SUB_TYPES = {"Exclusive": pb.EXCLUSIVE, "Shared": pb.SHARED, "Failover": pb.FAILOVER, "Key_Shared": pb.KEY_SHARED}


class ClientError(Exception):
    """Base of the client's errors. `code` is the broker's code when the broker answered."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class SendRejected(ClientError):
    """The broker certainly did not write the message."""


class SendUnknown(ClientError):
    """The message may or may not have been written."""


@dataclass(frozen=True)
class ConsumerMessage:
    id: MessageId
    data: bytes
    key: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    redelivery_count: int = 0
    topic: str = ""  # the topic (partition) it came from: acknowledgements go back there


def _service_addresses(url: str) -> list[str]:
    rest = url.split("://", 1)[1] if "://" in url else url
    addresses = [a.strip().rstrip("/") for a in rest.split(",") if a.strip()]
    if not addresses or not all(":" in a for a in addresses):
        raise ClientError(f"bad service URL {url!r}; use pulsar://HOST:PORT[,HOST:PORT...]")
    return addresses


def _check(resp: Any) -> Any:
    if resp.code != pb.OK:
        raise error_for(resp.code, resp.message)
    return resp


def _id(mid: pb.MessageId) -> MessageId:
    return MessageId(mid.ledger_id, mid.entry_id, mid.batch_index)


def _id_pb(mid: MessageId) -> pb.MessageId:
    return pb.MessageId(ledger_id=mid.ledger_id, entry_id=mid.entry_id, batch_index=mid.batch_index)


class Client:
    def __init__(self, service_url: str, *, timeout_s: float = 10.0) -> None:
        self.service = _service_addresses(service_url)
        self.timeout_s = timeout_s
        self._stubs: dict[str, tuple[grpc.Channel, pb_grpc.BrokerStub]] = {}
        self._owners: dict[str, str] = {}
        self._lock = threading.Lock()
        self._rotation = itertools.count()

    # ---- connections and lookup --------------------------------------------------------------

    def stub(self, address: str) -> pb_grpc.BrokerStub:
        with self._lock:
            entry = self._stubs.get(address)
            if entry is None:
                channel = grpc.insecure_channel(
                    address,
                    options=[
                        ("grpc.max_receive_message_length", 16 * 1024 * 1024),
                        ("grpc.max_send_message_length", 16 * 1024 * 1024),
                    ],
                )
                entry = (channel, pb_grpc.BrokerStub(channel))
                self._stubs[address] = entry
            return entry[1]

    def lookup(self, topic: str, refresh: bool = False) -> str:
        """The address of the broker serving `topic` (asks a service broker, follows redirects)."""
        if not refresh and topic in self._owners:
            return self._owners[topic]
        errors = []
        for _ in range(len(self.service)):
            address = self.service[next(self._rotation) % len(self.service)]
            authoritative = False
            try:
                for _hop in range(MAX_REDIRECTS):
                    req = pb.LookupReq(topic=topic, authoritative=authoritative)
                    resp = _check(self.stub(address).Lookup(req, timeout=self.timeout_s))
                    if not resp.redirect:
                        self._owners[topic] = address
                        return address
                    address, authoritative = resp.broker, resp.authoritative
                errors.append(f"{address}: more than {MAX_REDIRECTS} redirects")
            except grpc.RpcError as e:
                errors.append(f"{address}: {e.code().name}")
            except BrokerError as e:
                if e.code != pb.SERVICE_NOT_READY:
                    raise ClientError(f"lookup of {topic}: {e}", e.code) from e
                errors.append(f"{address}: {e}")  # that broker is renewing its session: ask another
        raise ClientError(f"lookup of {topic} failed on every broker ({'; '.join(errors)}); are the brokers up?")

    def forget(self, topic: str) -> None:
        self._owners.pop(topic, None)

    def call(self, topic: str, method: str, request: Any, timeout_s: float | None = None) -> Any:
        """A request that is safe to repeat: retried on NOT_OWNER / not ready / unreachable until the deadline."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                address = self.lookup(topic, refresh=last is not None)
                resp = getattr(self.stub(address), method)(request, timeout=max(0.1, deadline - time.monotonic()))
                return _check(resp)
            except BrokerError as e:
                if e.code not in RETRYABLE:
                    raise ClientError(str(e), e.code) from e
                last = e
            except ClientError as e:
                if e.code is not None and e.code not in RETRYABLE:
                    raise  # the lookup was answered with a refusal (an unknown namespace, a bad name)
                last = e
            except grpc.RpcError as e:
                last = e
            self.forget(topic)
            time.sleep(RETRY_PAUSE_S)
        raise ClientError(f"{method} on {topic} did not succeed within {timeout_s or self.timeout_s}s: {last}")

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
                    Producer(self, self._partition(topic, i), name, batching, batch_max_messages, batch_delay_s)
                    for i in range(partitions)
                ]
            )
        return Producer(self, topic, name, batching, batch_max_messages, batch_delay_s)

    @staticmethod
    def _partition(topic: str, index: int) -> str:
        return f"{topic}{PARTITION_SUFFIX}{index}"

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
        if subscription_type not in _SUB_TYPES:
            raise ClientError(f"unknown subscription type {subscription_type!r}; use one of {', '.join(_SUB_TYPES)}")
        if initial_position not in ("earliest", "latest"):
            raise ClientError(f"initial position must be 'earliest' or 'latest', not {initial_position!r}")
        partitions = self.partitions(topic)
        if partitions:
            return PartitionedConsumer(
                [
                    Consumer(
                        self,
                        self._partition(topic, i),
                        subscription,
                        subscription_type,
                        initial_position,
                        consumer_name,
                        receiver_queue_size,
                    )
                    for i in range(partitions)
                ]
            )
        return Consumer(
            self, topic, subscription, subscription_type, initial_position, consumer_name, receiver_queue_size
        )

    def create_reader(self, topic: str, start: MessageId | None = None) -> Reader:
        """A non-durable reader from `start` (inclusive; None = the earliest message)."""
        return Reader(self, topic, start)

    def read_topic(
        self, topic: str, start: MessageId | None = None, limit: int | None = None, timeout_s: float | None = None
    ) -> list[tuple[MessageId, bytes]]:
        """Every message from `start` (inclusive) to the end of the topic as of one instant, or the first `limit`."""
        req = pb.ReadReq(topic=topic, limit=limit or 0)
        if start is not None:
            req.has_start = True
            req.start.CopyFrom(_id_pb(start))
        resp = self.call(topic, "Read", req, timeout_s)
        return [(_id(e.id), e.message.payload) for e in resp.entries]

    def last_message_id(self, topic: str) -> MessageId | None:
        resp = self.call(topic, "LastMessageId", pb.LastIdReq(topic=topic))
        return _id(resp.id) if resp.has_id else None

    def admin(self, verb: str, args: dict[str, Any] | None = None, *, route_topic: str | None = None) -> Any:
        """Run an admin verb ("topics stats", ...) with JSON `args`; a verb about one topic's data
        names it as `route_topic` and goes to the topic's owner."""
        request = pb.AdminReq(verb=verb, args=json.dumps(args or {}))
        if route_topic is not None:
            resp = self.call(route_topic, "Admin", request)
            return json.loads(resp.result) if resp.result else None
        errors = []
        for _ in range(len(self.service)):  # any live broker will do: try each in turn
            address = self.service[next(self._rotation) % len(self.service)]
            try:
                resp = _check(self.stub(address).Admin(request, timeout=self.timeout_s))
            except BrokerError as e:
                if e.code != pb.SERVICE_NOT_READY:
                    raise ClientError(str(e), e.code) from e
                errors.append(f"{address}: {e}")
                continue
            except grpc.RpcError as e:
                errors.append(f"{address}: {e.code().name}")
                continue
            return json.loads(resp.result) if resp.result else None
        raise ClientError(f"admin {verb!r} failed on every broker ({'; '.join(errors)}); are the brokers up?")

    def admin_create_partitioned_topic(self, topic: str, partitions: int) -> None:
        self.admin("topics create-partitioned", {"topic": topic, "partitions": partitions})

    def partitions(self, topic: str) -> int:
        """The partition count of a partitioned topic, 0 for a plain topic."""
        if PARTITION_SUFFIX in topic:
            return 0  # a partition is a plain topic
        try:
            return int(self.admin("topics partitions", {"topic": topic}))
        except ClientError as e:
            if e.code == pb.TOPIC_NOT_FOUND:
                return 0
            raise

    def close(self) -> None:
        with self._lock:
            stubs, self._stubs = self._stubs, {}
        for channel, _ in stubs.values():
            channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


Entry = list[tuple[pb.Message, "Future[MessageId]"]]  # the messages of one entry, with their futures
_Attempt = tuple[str, Any] | ClientError  # a request under way (broker address, gRPC call), or why not sent


class Producer:
    """Sends messages to one topic. With `batching`, messages sent within `batch_delay_s` (up to
    `batch_max_messages`) travel as one entry; each gets its own id (ledger, entry, batch index)."""

    def __init__(
        self, client: Client, topic: str, name: str, batching: bool, batch_max: int, batch_delay_s: float
    ) -> None:
        self.client = client
        self.topic = topic
        resp = client.call(topic, "CreateProducer", pb.ProducerReq(topic=topic, producer_name=name))
        self.name: str = resp.producer_name
        self._next_sequence = resp.last_sequence_id + 1
        self._lock = threading.Condition()
        self.batching = batching
        self.batch_max = batch_max
        self.batch_delay_s = batch_delay_s
        self._batch: list[tuple[pb.Message, Future[MessageId]]] = []
        self._batch_bytes = 0
        self._batch_started: float | None = None  # when the open batch got its first message
        self._closing = False
        self._stopped = False  # the sender took the end marker
        # One sender thread sends entries strictly in sequence-id order, one request at a time: the
        # broker de-duplicates by sequence id, so an entry must never overtake an earlier one.
        self._outbox: queue.SimpleQueue[list[tuple[pb.Message, Future[MessageId]]] | None] = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._send_loop, name=f"producer-{self.name}", daemon=True)
        self._sender.start()
        if batching:
            # One thread closes batches when their delay is up (a timer thread per batch would cost
            # a thread start per entry at low rates).
            self._batcher = threading.Thread(target=self._batch_loop, name=f"batcher-{self.name}", daemon=True)
            self._batcher.start()

    def send(
        self, data: bytes, key: str = "", properties: dict[str, str] | None = None, timeout_s: float | None = None
    ) -> MessageId:
        future = self.send_async(data, key, properties)
        if self.batching:
            self.flush()
        wait_s = (timeout_s or self.client.timeout_s) + 1
        try:
            return future.result(timeout=wait_s)
        except FutureTimeout:
            raise SendUnknown(f"send to {self.topic} not answered within {wait_s}s: outcome unknown") from None

    def send_async(self, data: bytes, key: str = "", properties: dict[str, str] | None = None) -> Future[MessageId]:
        message = pb.Message(payload=data, key=key, properties=properties or {})
        future: Future[MessageId] = Future()
        if not self.batching:
            self._outbox.put([(message, future)])
            return future
        with self._lock:
            self._batch.append((message, future))
            self._batch_bytes += len(data)
            if len(self._batch) >= self.batch_max or self._batch_bytes >= MAX_BATCH_BYTES:
                self._close_batch()  # under the lock: batches leave in order
            elif self._batch_started is None:
                self._batch_started = time.monotonic()
                self._lock.notify()
        return future

    def _close_batch(self) -> None:
        batch, self._batch, self._batch_bytes, self._batch_started = self._batch, [], 0, None
        if batch:
            self._outbox.put(batch)

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

    def _send_loop(self) -> None:
        # Up to MAX_IN_FLIGHT requests at once, completed strictly in order. The broker appends a
        # producer's requests in sequence-id order whatever order they arrive in (Topic._wait_turn),
        # and a rejected request is sent again before any later one is looked at.
        in_flight: deque[tuple[list[Entry], pb.SendReq, float, _Attempt]] = deque()
        stopping = False
        while True:
            while not stopping and len(in_flight) < MAX_IN_FLIGHT:
                if in_flight and self._outbox.qsize() < PIPELINE_BACKLOG:
                    break  # a light load: let entries gather for one request rather than pay one each
                entries = self._take_entries(block=not in_flight)
                if entries is None:
                    stopping = True
                elif entries:
                    request = self._request(entries)
                    deadline = time.monotonic() + self.client.timeout_s
                    in_flight.append((entries, request, deadline, self._start(request, deadline)))
                else:
                    break  # nothing queued now: see to the oldest request in flight
            if not in_flight:
                return
            entries, request, deadline, attempt = in_flight.popleft()
            self._complete(entries, request, deadline, attempt)

    def _take_entries(self, block: bool) -> list[Entry] | None:
        """The entries queued now (waiting for one if `block`), up to a request's worth; None: closed."""
        if self._stopped:
            return None
        try:
            batch = self._outbox.get() if block else self._outbox.get_nowait()
        except queue.Empty:
            return []
        if batch is None:
            self._stopped = True
            return None
        # Entries queued meanwhile travel together: the broker appends them in order with their
        # adds pipelined, one round trip for all of them rather than one each.
        entries = [batch]
        size = sum(len(m.payload) for m, _ in batch)
        while len(entries) < MAX_PIPELINED and size < MAX_REQUEST_BYTES:
            try:
                more = self._outbox.get_nowait()
            except queue.Empty:
                break
            if more is None:
                self._stopped = True
                break
            entries.append(more)
            size += sum(len(m.payload) for m, _ in more)
        return entries

    def _request(self, entries: list[Entry]) -> pb.SendReq:
        count = sum(map(len, entries))
        with self._lock:
            sequence_id = self._next_sequence
            self._next_sequence += count
        request = pb.SendReq(
            topic=self.topic, producer_name=self.name, sequence_id=sequence_id, entry_sizes=[len(e) for e in entries]
        )
        for entry in entries:
            request.messages.extend(m for m, _ in entry)
        return request

    def _start(self, request: pb.SendReq, deadline: float) -> _Attempt:
        """Send without waiting: (address, call), or the refusal of the lookup (nothing sent)."""
        try:
            address = self.client.lookup(self.topic)
        except ClientError as e:
            return SendRejected(f"send to {self.topic} not attempted: {e}")
        timeout = max(0.1, deadline - time.monotonic())
        return address, self.client.stub(address).Send.future(request, timeout=timeout)

    def _complete(self, entries: list[Entry], request: pb.SendReq, deadline: float, attempt: _Attempt) -> None:
        try:
            if isinstance(attempt, ClientError):
                raise attempt
            resp = self._send_one(request, deadline, attempt)
        except ClientError as e:
            if isinstance(e, SendRejected):
                count = sum(map(len, entries))
                with self._lock:
                    if self._next_sequence == request.sequence_id + count:
                        # Certainly not written and nothing numbered after it: the next request reuses
                        # its sequence ids, so the broker sees no gap to wait for (Topic._wait_turn).
                        self._next_sequence = request.sequence_id
            for entry in entries:
                for _, f in entry:
                    f.set_exception(e)
            return
        for entry, result in zip(entries, resp.results, strict=True):
            for i, (_, f) in enumerate(entry):
                try:
                    f.set_result(self._outcome(result, i if len(entry) > 1 else 0))
                except ClientError as e:
                    f.set_exception(e)

    def _outcome(self, result: pb.EntryResult, batch_index: int) -> MessageId:
        if result.code == pb.OK and not result.duplicate:
            return MessageId(result.ledger_id, result.entry_id, batch_index)
        if result.code == pb.OK:
            raise SendUnknown(f"send to {self.topic} duplicated an earlier send: its position is unknown")
        if error_for(result.code, result.message).rejected:
            raise SendRejected(f"send to {self.topic} rejected: {result.message}", result.code)
        raise SendUnknown(f"send to {self.topic}: {result.message}", result.code)

    def _send_one(
        self, request: pb.SendReq, deadline: float, started: tuple[str, grpc.Future] | None = None
    ) -> pb.SendResp:
        """The request's answer; sent again while it is certainly not written (until `deadline`).
        `started`: a first attempt already under way (address, call)."""
        client = self.client
        while True:
            if started is not None:
                address, call = started
                started = None
            else:
                try:
                    address = client.lookup(self.topic)
                except ClientError as e:
                    raise SendRejected(f"send to {self.topic} not attempted: {e}") from e
                call = client.stub(address).Send.future(request, timeout=max(0.1, deadline - time.monotonic()))
            try:
                resp = call.result()
            except grpc.RpcError as e:
                client.forget(self.topic)
                never_sent = e.code() == grpc.StatusCode.UNAVAILABLE and "failed to connect" in (e.details() or "")
                if never_sent and time.monotonic() < deadline:
                    time.sleep(RETRY_PAUSE_S)  # never reached the broker: safe to try again
                    continue
                raise SendUnknown(f"send to {self.topic} via {address}: {e.code().name}: outcome unknown") from e
            if resp.code == pb.OK:
                if resp.duplicate:
                    raise SendUnknown(f"send to {self.topic} duplicated an earlier send: its position is unknown")
                return resp
            error = error_for(resp.code, resp.message)
            if not error.rejected:
                raise SendUnknown(f"send to {self.topic}: {resp.message}", resp.code)
            client.forget(self.topic)
            if resp.code in (pb.NOT_OWNER, pb.SERVICE_NOT_READY) and time.monotonic() < deadline:
                time.sleep(RETRY_PAUSE_S)
                continue
            raise SendRejected(f"send to {self.topic} rejected: {resp.message}", resp.code)

    def close(self) -> None:
        """Send what is batched, wait for every pending send, stop the sender."""
        with self._lock:
            self._close_batch()
            self._closing = True
            self._lock.notify()
        self._outbox.put(None)
        self._sender.join()


class Consumer:
    """A subscription's consumer over a stream; resubscribes (after a lookup) when the stream breaks."""

    def __init__(
        self,
        client: Client,
        topic: str,
        subscription: str,
        sub_type: str,
        initial_position: str,
        name: str,
        receiver_queue_size: int,
    ) -> None:
        self.client = client
        self.topic = topic
        self.subscription = subscription
        self.sub_type = sub_type
        self.initial_position = initial_position
        self.name = name
        self.queue_size = max(1, receiver_queue_size)
        self.active = sub_type != "Failover"
        self._received: queue.Queue[ConsumerMessage] = queue.Queue()
        self._requests: queue.Queue[pb.ConsumeReq | None] | None = None
        self._consumed_since_flow = 0
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self._error: ClientError | None = None
        self._thread = threading.Thread(target=self._run, name=f"consumer-{subscription}", daemon=True)
        self._thread.start()
        if not self._subscribed.wait(client.timeout_s * 2) or self._error is not None:
            self.close()
            raise self._error or ClientError(f"subscribe to {topic} timed out; is the broker up?")

    def _run(self) -> None:
        while not self._closed.is_set():
            try:
                self._stream_once()
            except ClientError as e:
                if e.code in (pb.CONSUMER_BUSY, pb.INVALID_TOPIC_NAME, pb.INVALID_ARGUMENT, pb.TOPIC_NOT_FOUND):
                    self._error = e  # permanent: tell the caller
                    self._subscribed.set()
                    return
            except grpc.RpcError:
                pass  # the broker went away or lost the topic: look up again
            self.client.forget(self.topic)
            self._closed.wait(RETRY_PAUSE_S)

    def _stream_once(self) -> None:
        address = self.client.lookup(self.topic)
        requests: queue.Queue[pb.ConsumeReq | None] = queue.Queue()
        requests.put(
            pb.ConsumeReq(
                subscribe=pb.Subscribe(
                    topic=self.topic,
                    subscription=self.subscription,
                    type=_SUB_TYPES[self.sub_type],
                    initial_position=pb.EARLIEST if self.initial_position == "earliest" else pb.LATEST,
                    consumer_name=self.name,
                )
            )
        )

        def outgoing() -> Iterator[pb.ConsumeReq]:
            while True:
                item = requests.get()
                if item is None:
                    return
                yield item

        stream = self.client.stub(address).Consume(outgoing())
        try:
            for resp in stream:
                if resp.code != pb.OK:
                    error = error_for(resp.code, resp.message)
                    raise ClientError(str(error), resp.code)
                if resp.subscribed:
                    with self._lock:
                        # Messages received before a reconnect are redelivered by the broker: drop ours.
                        self._received = queue.Queue()
                        self._requests = requests
                        self._consumed_since_flow = 0
                    requests.put(pb.ConsumeReq(flow=pb.Flow(permits=self.queue_size)))
                    self._subscribed.set()
                if resp.active_changed:
                    self.active = resp.active
                for d in resp.deliveries:
                    self._received.put(
                        ConsumerMessage(
                            _id(d.id),
                            d.message.payload,
                            d.message.key,
                            dict(d.message.properties),
                            d.redelivery_count,
                            self.topic,
                        )
                    )
                if self._closed.is_set():
                    return
        finally:
            with self._lock:
                if self._requests is requests:
                    self._requests = None
            requests.put(None)
            stream.cancel()

    def _send(self, request: pb.ConsumeReq) -> None:
        with self._lock:
            requests = self._requests
        if requests is None:
            raise ClientError(f"consumer of {self.subscription} is reconnecting; acknowledge again later")
        requests.put(request)

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
            with contextlib.suppress(ClientError):  # reconnecting: the new stream grants a full queue
                self._send(pb.ConsumeReq(flow=pb.Flow(permits=permits)))
        return msg

    def acknowledge(self, message: ConsumerMessage | MessageId, receipt: bool = False) -> None:
        _no_receipt(receipt)
        mid = message.id if isinstance(message, ConsumerMessage) else message
        self._send(pb.ConsumeReq(ack=pb.Ack(ids=[_id_pb(mid)])))

    def acknowledge_cumulative(self, message: ConsumerMessage | MessageId, receipt: bool = False) -> None:
        _no_receipt(receipt)
        mid = message.id if isinstance(message, ConsumerMessage) else message
        self._send(pb.ConsumeReq(ack=pb.Ack(ids=[_id_pb(mid)], cumulative=True)))

    def negative_acknowledge(self, message: ConsumerMessage | MessageId) -> None:
        mid = message.id if isinstance(message, ConsumerMessage) else message
        self._send(pb.ConsumeReq(nack=pb.Nack(ids=[_id_pb(mid)])))

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            requests = self._requests
        if requests is not None:
            requests.put(None)
        self._thread.join(timeout=5)


class Reader:
    """A non-durable reader: reads the topic from a position, polling for new messages."""

    def __init__(self, client: Client, topic: str, start: MessageId | None) -> None:
        self.client = client
        self.topic = topic
        self._next = start
        self._buffer: list[tuple[MessageId, bytes]] = []

    def read_next(self, timeout_s: float = 10.0) -> tuple[MessageId, bytes]:
        deadline = time.monotonic() + timeout_s
        while not self._buffer:
            self._buffer = self.client.read_topic(self.topic, self._next, limit=100)
            if self._buffer:
                break
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no message on {self.topic} within {timeout_s}s")
            time.sleep(0.02)
        mid, data = self._buffer.pop(0)
        self._next = MessageId(mid.ledger_id, mid.entry_id, mid.batch_index + 1)
        return mid, data

    def has_message_available(self) -> bool:
        last = self.client.last_message_id(self.topic)
        return last is not None and (self._next is None or last >= self._next)


def _no_receipt(receipt: bool) -> None:
    if receipt:
        raise ClientError("the gRPC Broker service has no ack receipts; use the pulsar:// client (impl/broker/client)")
