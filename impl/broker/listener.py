"""The broker's `pulsar://` listener: Pulsar's binary protocol over TCP (the shell around
impl/broker/connection.py).

One asyncio event loop thread serves every connection: it reads frames, feeds each connection's
core and writes what the core replies. Sends go straight to the topic from the loop (a topic
append only queues work for the managed ledger); their receipts come back from the bookie
client's threads through `call_soon_threadsafe`. Everything that may wait on the metadata store
or the bookies (lookups, loading a topic, subscribing, acknowledging, reading for a consumer)
runs on a thread pool, one request at a time per connection, so a connection's requests take
effect in the order they came.

Backpressure towards consumers: a connection counts the bytes its consumers were given and not yet
written, plus what its transport still buffers. After each delivery a consumer whose connection is
over `max_pending_write_bytes` is paused in its dispatcher (Writable False: it is given nothing, its
permits kept); once the transport drains below a quarter of the bound, every consumer paused on the
connection is resumed (Writable True). A client that does not read its socket thus holds at most the
bound plus one delivery per consumer (at most `dispatcher_max_read_size_bytes`) in the broker.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from impl.broker import connection as conn
from impl.broker import namespaces, non_persistent, topic_pattern
from impl.broker.dispatcher import WHOLE_ENTRY, Ack, Flow, Message, Nack, Writable
from impl.broker.errors import (
    BrokerError,
    ConsumerAssignError,
    ConsumerBusyError,
    InvalidName,
    NamespaceNotInCluster,
    NotAllowed,
    NotOwner,
    PersistenceError,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ProducerBusy,
    ProducerFenced,
    ReservedName,
    ServiceNotReady,
    TopicFenced,
    TopicNotFound,
    TopicTerminated,
    UnknownMessageIdError,
)
from impl.broker.managed_ledger import Position, after_deliveries
from impl.broker.replication.replicator import REPLICATOR_PREFIX
from impl.broker.schema import protocol as schema_protocol
from impl.broker.schema.model import SchemaError
from impl.broker.service import (
    AccessMode,
    Append,
    BrokerService,
    ConsumerSink,
    ProducerInfo,
    PublishDone,
    PublishOutcome,
    Subscription,
    Topic,
    consumer_step,
    parse_topic,
)
from impl.loop_server import ConnectionListener
from impl.metadata.naming import NamespaceName, TopicName
from impl.metadata.store import ConnectionLoss, MetadataError, SessionExpired
from impl.protocol import bitset, entry_codec, frames
from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.message_id import MessageId
from impl.security import tokens
from impl.security.authorization import Access, AuthorizationFailed

log = logging.getLogger(__name__)

TICK_S = 1.0
# What a job or a delivery thread hands the loop: events for the core, or outputs to perform as they are.
Result = conn.Event | conn.Output
READ_CHUNK = 256 * 1024

_SERVER_ERRORS: dict[type[BrokerError], int] = {
    InvalidName: api.InvalidTopicName,
    TopicNotFound: api.TopicNotFound,
    NamespaceNotInCluster: api.MetadataError,
    ReservedName: api.NotAllowedError,
    NotAllowed: api.NotAllowedError,
    NotOwner: api.ServiceNotReady,
    ServiceNotReady: api.ServiceNotReady,
    ProducerBusy: api.ProducerBusy,
    ProducerFenced: api.ProducerFenced,
    ConsumerBusyError: api.ConsumerBusy,
    ConsumerAssignError: api.ConsumerAssignError,
    TopicFenced: api.ServiceNotReady,
    PersistenceError: api.PersistenceError,
    ProducerBlockedQuotaExceededError: api.ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException: api.ProducerBlockedQuotaExceededException,
    TopicTerminated: api.TopicTerminatedError,
}


def server_error(e: Exception) -> tuple[int, str]:
    """Pulsar's ServerError for a failure, and the sentence to send with it."""
    if isinstance(e, BrokerError):
        return _SERVER_ERRORS.get(type(e), api.UnknownError), str(e)
    if isinstance(e, AuthorizationFailed):
        return api.AuthorizationError, str(e)
    if isinstance(e, SchemaError):
        return schema_protocol.refusal(e)
    if isinstance(e, (SessionExpired, ConnectionLoss)):
        return api.ServiceNotReady, f"metadata session not usable now: {e}; retry"
    if isinstance(e, MetadataError):
        return api.MetadataError, str(e)
    log.exception("Pulsar request failed", exc_info=e)
    return api.UnknownError, f"internal error: {type(e).__name__}: {e}"


@dataclass
class PulsarLookup:
    """What a lookup answers: (redirect, the owner's service URLs, authoritative)."""

    service: BrokerService
    urls_of: Callable[[str], tuple[str, str]]  # a broker address -> its pulsar:// and pulsar+ssl:// URLs

    def __call__(self, topic: str, authoritative: bool) -> tuple[bool, tuple[str, str], bool]:
        redirect, broker, auth = self.service.lookup(topic, authoritative)
        return redirect, self.urls_of(broker), auth


class PulsarListener(ConnectionListener):
    """Pulsar clients' endpoint of one broker. Bound at construction, so the broker knows its
    service URL before its service exists; `start` begins serving."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        max_message_size: int = frames.DEFAULT_MAX_MESSAGE_SIZE,
        tls: ssl.SSLContext | None = None,
    ):
        super().__init__(host, port, "pulsar-listener", "Pulsar clients" + (" over TLS" if tls else ""), TICK_S, tls)
        self.max_message_size = max_message_size
        self.pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="pulsar-conn")

    @property
    def service_url(self) -> str:
        scheme = "pulsar+ssl" if self.server.tls else "pulsar"
        return f"{scheme}://{self.host}:{self.port}"

    def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> _Connection:
        return _Connection(self, reader, writer)

    def start(self, service: BrokerService, lookup: PulsarLookup) -> None:
        self.service, self.lookup = service, lookup
        self.serve()

    def stop(self) -> None:
        self.stop_serving("the broker is stopping")
        self.pool.shutdown(wait=False, cancel_futures=True)


class _Sink(ConsumerSink):
    """A subscription's messages for one consumer of a connection, as MESSAGE frames."""

    def __init__(
        self, connection: _Connection, consumer_id: int, partition: int = -1, metadata: dict[str, str] | None = None
    ) -> None:
        super().__init__(consumer_id, connection.address, connection.core.client_version, metadata)
        self.connection = connection
        self.consumer_id = consumer_id
        self.partition = partition  # every delivered id carries it, as Pulsar's broker does

    def deliver(self, messages: list[tuple[Message, int]]) -> None:
        # Consecutive messages of one entry go as one MESSAGE, as does a whole batch entry; ack_set names
        # the batch indexes sent when not all of them are (the rest were acknowledged, or went to another
        # consumer). All of them go to the loop as one event, encoded there into one write.
        items: list[tuple[int, int, int, tuple[int, ...], bytes]] = []
        size = 0
        i, n = 0, len(messages)
        while i < n:
            first, count = messages[i]
            ledger_id, entry_id = first.id.ledger_id, first.id.entry_id
            j = i + 1
            ack_set: tuple[int, ...] = ()
            if first.indexes:  # a whole entry, less the indexes acknowledged already
                ack_set = tuple(bitset.to_words(first.indexes))
            elif first.batch_size > 1 and first.id.batch_index != WHOLE_ENTRY:
                while j < n and (m := messages[j][0].id).entry_id == entry_id and m.ledger_id == ledger_id:
                    j += 1
                if j - i < first.batch_size:
                    ack_set = tuple(bitset.to_words([m.id.batch_index for m, _ in messages[i:j]]))
            entry = entry_codec.strip_broker_metadata(first.entry)
            size += len(entry)
            items.append((ledger_id, entry_id, count, ack_set, entry))
            i = j
        self.connection.queued(size)
        self.connection.from_thread([conn.Messages(self.consumer_id, tuple(items), self.partition)])

    def over_bound(self) -> bool:
        return self.connection.over_bound(self.consumer_id)

    def set_active(self, active: bool) -> None:
        self.connection.from_thread([conn.ActiveConsumerChange(self.consumer_id, active)])

    def reached_end(self) -> None:
        self.connection.from_thread([conn.ReachedEndOfTopic(self.consumer_id)])

    def close(self) -> None:
        self.connection.from_thread([conn.CloseConsumer(self.consumer_id)])


@dataclass
class _AttachedConsumer:
    topic: Topic
    sub: Subscription
    service_id: int  # the dispatcher's consumer id (unique in the broker)
    sink: _Sink


class _Connection:
    def __init__(self, listener: PulsarListener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.listener = listener
        self.service = listener.service
        self.loop = listener.loop
        self.reader, self.writer = reader, writer
        self.core = conn.ServerConnection(
            max_message_size=listener.max_message_size,
            authentication=self.service.config.security.authenticator is not None,
            auth_refresh_check_s=self.service.config.security.auth_refresh_check_s,
        )
        self.decoder = frames.FrameDecoder(conn.MAX_FRAME_BEFORE_CONNECTED)  # raised once CONNECTED
        self.producers: dict[int, tuple[Topic, str]] = {}
        self.consumers: dict[int, _AttachedConsumer] = {}
        self.jobs: asyncio.Queue[Callable[[], list[conn.Output]] | None] = asyncio.Queue()
        self.open = True
        # Frames to write, joined into one write at the end of the loop's turn.
        self._out: list[bytes] = []
        # SENDs of one read, appended together (one managed-ledger step for a producer's run of them).
        self._sends: list[conn.DoPublish] = []
        # Appends completed on the bookie client's threads, answered on the loop in one turn.
        self._completed: collections.deque[tuple[int, int, int, PublishOutcome]] = collections.deque()
        self._completed_lock = threading.Lock()
        self._drain_scheduled = False
        # Backpressure (see the module's docstring). Under _bp_lock: bytes delivered by the consumers' sinks
        # and not yet handed to the transport, the transport's buffer when last looked at (on the loop), the
        # consumers paused since. `_unflushed`: of those bytes, the ones in `_out` (the loop's own).
        self.max_pending = self.service.config.max_pending_write_bytes
        if self.max_pending > 0:
            writer.transport.set_write_buffer_limits(high=self.max_pending, low=self.max_pending // 4)
        self._bp_lock = threading.Lock()
        self._queued = self._buffered = self._unflushed = 0
        self._paused: set[int] = set()
        self._drainer: asyncio.Task[None] | None = None
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.address = f"/{self.peer}"  # for stats, as Pulsar prints the remote address (Java's "/host:port")
        self.perform(self.core.step(conn.ConnectionOpened(time.monotonic())))

    # ---- the loop's side ---------------------------------------------------------------------

    async def serve(self) -> None:
        worker = asyncio.ensure_future(self._work())
        try:
            while self.open:
                data = await self.reader.read(READ_CHUNK)
                if not data:
                    break
                if self.core.state is conn.State.CONNECTED:  # the client is known now: full-size frames
                    self.decoder.max_frame_size = self.listener.max_message_size + frames.FRAME_PADDING
                try:
                    received = self.decoder.feed(data)
                except frames.FrameError as e:
                    log.warning("closing Pulsar connection from %s: %s", self.peer, e)
                    break
                now = time.monotonic()
                for frame in received:
                    self.perform(self.core.step(conn.FrameReceived(frame, now)))
                    if not self.open:
                        break
                self._publish_sends()
        except (ConnectionError, OSError):
            pass
        finally:
            self.close("the client went away")
            self.jobs.put_nowait(None)
            await worker

    def write(self, reply: conn.Reply) -> None:
        if not self.open:
            return
        if not self._out:
            self.loop.call_soon(self._flush)
        self._out.append(frames.encode(reply.command, reply.payload))

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.open and out:
            self.writer.write(b"".join(out))
        buffered = self.writer.transport.get_write_buffer_size()
        with self._bp_lock:
            self._queued -= self._unflushed
            self._unflushed, self._buffered = 0, buffered
        if self._paused:
            self._resume_when_drained()

    # ---- backpressure --------------------------------------------------------------------------

    def queued(self, size: int) -> None:
        """A sink's thread: `size` bytes of messages are on their way to the loop."""
        with self._bp_lock:
            self._queued += size

    def over_bound(self, consumer_id: int) -> bool:
        """A sink's thread, after a delivery: is the connection over its bound? If so the consumer counts
        as paused (its subscription pauses it) and the loop resumes it once the connection drained."""
        if self.max_pending <= 0:
            return False
        with self._bp_lock:
            if self._queued + self._buffered < self.max_pending:
                return False
            self._paused.add(consumer_id)
        self.from_thread_call(self._resume_when_drained)
        return True

    def _resume_when_drained(self) -> None:
        if self.open and self._paused and self._drainer is None:
            self._drainer = self.loop.create_task(self._drained())

    async def _drained(self) -> None:
        """Resume the paused consumers once the transport is under its low mark (drain() waits for that
        when it went over its high one) and what is still on its way to it would not put it over again."""
        try:
            await self.writer.drain()
        except (ConnectionError, OSError, RuntimeError):
            return  # the connection is gone, and its consumers with it
        finally:
            self._drainer = None
        buffered = self.writer.transport.get_write_buffer_size()
        with self._bp_lock:
            self._buffered = buffered
            if self._queued + buffered >= self.max_pending:
                return  # messages still on their way: the flush that writes them looks again
            resumed, self._paused = self._paused, set()
        if resumed and self.open:
            self.jobs.put_nowait(functools.partial(self._resume, resumed))

    def _resume(self, consumer_ids: set[int]) -> list[conn.Output]:
        for cid in consumer_ids:
            c = self.consumers.get(cid)
            if c is not None:
                consumer_step(c.sub, Writable(c.service_id, True))
        return []

    def close(self, reason: str) -> None:
        if not self.open:
            return
        out, self._out = self._out, []
        if out:  # what the core answered last (an ERROR before a close) goes out before the close
            self.writer.write(b"".join(out))
        self.open = False
        log.debug("Pulsar connection from %s closed: %s", self.peer, reason)
        self.writer.close()
        self.perform(self.core.step(conn.ConnectionClosed()))

    def tick(self, now: float) -> None:
        self.perform(self.core.step(conn.Tick(now)))

    def perform(self, outputs: list[conn.Output]) -> None:
        for out in outputs:
            if isinstance(out, conn.Reply):
                self.write(out)
            elif isinstance(out, conn.Frames):
                if self.open:
                    if not self._out:
                        self.loop.call_soon(self._flush)
                    self._out.append(out.data)
            elif isinstance(out, conn.Close):
                self.close(out.reason)
            elif isinstance(out, conn.DoPublish):
                self._sends.append(out)
            elif isinstance(out, conn.DoFlow) and self._in_memory(out.consumer_id):
                # A non-persistent subscription drops what its consumer has no permits for: its permits
                # count from now, before the SENDs read after them (a job would run after those).
                self._flow(out)
            else:
                handler = self._JOBS[type(out)]
                self.jobs.put_nowait(lambda h=handler, o=out: h(self, o))  # type: ignore[misc]

    async def _work(self) -> None:
        """Blocking requests, one at a time and in order, on the listener's pool."""
        while True:
            job = await self.jobs.get()
            if job is None:
                if not self.open and self.jobs.empty():
                    return
                continue
            try:
                results = await self.loop.run_in_executor(self.listener.pool, job)
            except Exception:
                log.exception("a Pulsar request from %s failed", self.peer)
                continue
            self.apply(results)

    def apply(self, results: Sequence[Result]) -> None:
        """On the loop: step the core with each event, perform each output, in order. Jobs and
        delivery threads hand their events here, so the core is only ever stepped on the loop."""
        for item in results:
            self.perform([item] if isinstance(item, conn.Output) else self.core.step(item))
            if isinstance(item, conn.Message):
                self._unflushed += len(item.entry)  # in _out now, written by the next _flush
            elif isinstance(item, conn.Messages):
                self._unflushed += sum(len(m[4]) for m in item.messages)

    def from_thread(self, results: Sequence[Result]) -> None:
        self.from_thread_call(lambda: self.apply(results))

    def from_thread_call(self, call: Callable[[], None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the connection is gone
            self.loop.call_soon_threadsafe(call)

    # ---- producing -----------------------------------------------------------------------------

    def _publish_sends(self) -> None:
        """Append the SENDs of one read: a producer's consecutive ones in one call (its entries go to
        the managed ledger in one step), in the order they came."""
        sends, self._sends = self._sends, []
        run: list[tuple[conn.DoPublish, Append]] = []
        for out in sends:
            append = self._checked(out)
            if append is None:
                continue
            if run and run[0][0].producer_id != out.producer_id:
                self._publish(run)
                run = []
            run.append((out, append))
        if run:
            self._publish(run)

    def _checked(self, out: conn.DoPublish) -> Append | None:
        """The entry of a SEND, or None when it is refused here (answered with SEND_ERROR)."""
        pid, seq = out.producer_id, out.sequence_id
        if pid not in self.producers:
            self.perform(
                self.core.step(conn.SendError(pid, seq, api.NotAllowedError, f"producer {pid} is not attached"))
            )
            return None
        try:
            entry = entry_codec.parse_header(out.data)  # checked, the payload not copied out
        except entry_codec.ChecksumMismatch as e:
            self.perform(self.core.step(conn.SendError(pid, seq, api.ChecksumError, str(e))))
            return None
        except entry_codec.CorruptEntry as e:
            self.perform(self.core.step(conn.SendError(pid, seq, api.UnknownError, f"the message is malformed: {e}")))
            return None
        if self.producers[pid][1].startswith(REPLICATOR_PREFIX):
            return Append.of_replicated(out.data, entry)
        return Append(
            out.data,
            seq,
            out.highest_sequence_id,
            entry.payload_size,
            is_chunk=out.is_chunk,
            num_messages=entry.num_messages,
            batched=entry.is_batch,
            chunk=Append.chunk_of(entry.metadata) if out.is_chunk else None,
            dispatch=entry_codec.dispatch_metadata(entry),
        )

    def _publish(self, run: list[tuple[conn.DoPublish, Append]]) -> None:
        pid = run[0][0].producer_id
        topic, name = self.producers.get(pid, (None, ""))
        if topic is None:
            return
        # A partial per entry, holding no reference to what it is handed: a closure over a per-message
        # object that refers back to it would make a reference cycle per message, which only the cycle
        # collector frees; at 1,000 msg/s its middle-generation collections then took 10-40 ms each,
        # every 2-3 s, stalling every thread of the broker.
        callbacks: list[PublishDone] = [
            functools.partial(self._complete, pid, out.sequence_id, out.highest_sequence_id) for out, _ in run
        ]
        refusals = topic.publish_with_callbacks(name, [a for _, a in run], callbacks)
        for (out, _), refusal in zip(run, refusals, strict=True):
            if refusal is not None:
                self._send_failed(pid, out.sequence_id, refusal)

    def _complete(self, pid: int, seq: int, highest: int, outcome: PublishOutcome) -> None:
        """On the managed ledger's thread: queue the outcome; wake the loop once for all that queue meanwhile,
        and not before the managed ledger delivered the step's other completions: woken at the first, the
        loop would answer them one by one, each a hand-over of the GIL between the two threads (50 receipts
        of a step took 25-30 ms that way, and the next step waited for them)."""
        with self._completed_lock:
            self._completed.append((pid, seq, highest, outcome))
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        if not after_deliveries(self._wake_to_drain):
            self._wake_to_drain()

    def _wake_to_drain(self) -> None:
        self.from_thread_call(self._drain)

    def _drain(self) -> None:
        with self._completed_lock:
            completed, self._completed = self._completed, collections.deque()
            self._drain_scheduled = False
        for pid, seq, highest, outcome in completed:
            self._published(pid, seq, highest, outcome)

    def _published(self, pid: int, seq: int, highest: int, outcome: PublishOutcome) -> None:
        if isinstance(outcome, BrokerError):
            self._send_failed(pid, seq, outcome)
            return
        position, _duplicate = outcome
        mid = MessageId(-1, -1, -1) if position is None else MessageId(position.ledger_id, position.entry_id, -1)
        self.perform(self.core.step(conn.SendReceipt(pid, seq, highest, mid)))

    def _send_failed(self, pid: int, seq: int, error: BrokerError) -> None:
        if isinstance(error, TopicFenced | ServiceNotReady | NotOwner):
            # The topic is no longer ours to write: close the producer; the client looks the topic up
            # again, re-creates it and resends what is pending (de-duplication keeps it once).
            self._detach_producer(pid)
            self.perform(self.core.step(conn.CloseProducer(pid)))
            return
        code, message = server_error(error)
        self.perform(self.core.step(conn.SendError(pid, seq, code, message)))

    def _detach_producer(self, pid: int) -> None:
        topic, name = self.producers.pop(pid, (None, ""))
        if topic is not None:
            topic.detach_producer(name, (self, pid))
            topic.close_watchers.pop((self, "producer", pid), None)

    # ---- jobs (on the pool) ------------------------------------------------------------------

    def _lookup(self, out: conn.DoLookup) -> list[Result]:
        resp = api.CommandLookupTopicResponse(request_id=out.request_id)
        try:
            self._authorize(out.topic, Access.LOOKUP, "Lookup")
            redirect, (url, url_tls), authoritative = self.listener.lookup(out.topic, out.authoritative)
        except Exception as e:
            resp.response = api.CommandLookupTopicResponse.Failed
            resp.error, resp.message = server_error(e)  # type: ignore[assignment]
        else:
            resp.response = (
                api.CommandLookupTopicResponse.Redirect if redirect else api.CommandLookupTopicResponse.Connect
            )
            resp.brokerServiceUrl, resp.authoritative = url, authoritative
            if url_tls:  # a client on pulsar+ssl:// connects there
                resp.brokerServiceUrlTls = url_tls
        return [conn.Reply(conn.command(api.BaseCommand.LOOKUP_RESPONSE, lookupTopicResponse=resp))]

    def _partitioned_metadata(self, out: conn.DoPartitionedMetadata) -> list[Result]:
        resp = api.CommandPartitionedTopicMetadataResponse(request_id=out.request_id)
        try:
            name = parse_topic(out.topic)
            self._authorize(out.topic, Access.LOOKUP, "Get Partition Metadata")
            namespaces.get_policies(self.service.configuration_store, name.namespace_name)
            resp.partitions = (
                0 if name.is_partition else namespaces.get_partitions(self.service.configuration_store, name)
            )
            if resp.partitions == 0 and not name.is_partition:
                resp.partitions = self._auto_partition(name)
            resp.response = api.CommandPartitionedTopicMetadataResponse.Success
        except namespaces.AdminError as e:
            resp.response = api.CommandPartitionedTopicMetadataResponse.Failed
            resp.error, resp.message = api.TopicNotFound, f"{out.topic}: {e}"
        except Exception as e:
            resp.response = api.CommandPartitionedTopicMetadataResponse.Failed
            resp.error, resp.message = server_error(e)  # type: ignore[assignment]
        return [conn.Reply(conn.command(api.BaseCommand.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=resp))]

    def _auto_partition(self, name: TopicName) -> int:
        """A topic used for the first time in a namespace whose auto creation is partitioned: create it
        partitioned (Pulsar creates it when the client asks for its partitions). Its partition count."""
        policy = self.service.auto_topic_creation(name)
        if not policy.allow or policy.topic_type != "partitioned" or policy.default_partitions is None:
            return 0
        if name.persistent and self.service.store.exists(name.managed_ledger_path) is not None:
            return 0  # a non-partitioned topic of that name exists
        with contextlib.suppress(namespaces.AlreadyExists):  # another client created it first
            namespaces.create_partitioned_topic(
                self.service.configuration_store, name, policy.default_partitions, local=self.service.store
            )
        return namespaces.get_partitions(self.service.configuration_store, name)

    def _create_producer(self, out: conn.DoCreateProducer) -> list[Result]:
        try:
            self._authorize(out.topic, Access.PRODUCE, "Produce")
            schemas = self.service.schemas  # the session's, before the topic check (schema/protocol.py)
            topic = self.service.topic(out.topic)
            topic.check_backlog_quota()
            schema_version = schema_protocol.producer_version(schemas, topic.name, out.schema)
            pid = out.producer_id
            try:
                mode = AccessMode(out.access_mode)
            except ValueError:
                raise BrokerError(f"unknown producer access mode {out.access_mode}") from None
            attached = topic.attach_producer(
                out.producer_name,
                (self, pid),
                out.epoch,
                mode,
                out.topic_epoch,
                on_granted=lambda name, last, epoch: self.from_thread(
                    [conn.ProducerReady(out.request_id, pid, name, last, schema_version, epoch)]
                    if epoch >= 0
                    else [
                        conn.ProducerFailed(
                            out.request_id,
                            pid,
                            api.ProducerFenced,
                            "Producer was fenced because a new producer with ExclusiveWithFencing was created",
                        )
                    ]
                ),
                on_fenced=lambda: self.from_thread_call(lambda: self._broker_closes_producer(pid)),
                info=ProducerInfo(pid, self.address, self.core.client_version, out.metadata),
            )
        except Exception as e:
            code, message = server_error(e)
            return [conn.ProducerFailed(out.request_id, out.producer_id, code, message)]
        if isinstance(attached, str):  # WaitForExclusive: queued; ProducerReady comes when granted
            self.producers[pid] = (topic, attached)
            topic.close_watchers[(self, "producer", pid)] = lambda: self.from_thread_call(
                lambda: self._broker_closes_producer(pid)
            )
            return [conn.ProducerQueued(out.request_id, pid, attached)]
        name, last, topic_epoch = attached
        self.producers[pid] = (topic, name)
        topic.close_watchers[(self, "producer", pid)] = lambda: self.from_thread_call(
            lambda: self._broker_closes_producer(pid)
        )
        return [conn.ProducerReady(out.request_id, pid, name, last, schema_version, topic_epoch)]

    def _broker_closes_producer(self, pid: int) -> None:
        topic, _ = self.producers.pop(pid, (None, ""))
        if topic is not None:  # closed on its own (fenced, over its backlog quota): the topic's close skips it
            topic.close_watchers.pop((self, "producer", pid), None)
        self.perform(self.core.step(conn.CloseProducer(pid)))

    def _close_producer(self, out: conn.DoCloseProducer) -> list[Result]:
        self._detach_producer(out.producer_id)
        return [] if out.request_id is None else [conn.success_reply(out.request_id)]

    def _subscribe(self, out: conn.DoSubscribe) -> list[Result]:
        try:
            self._authorize(out.topic, Access.CONSUME, "subscribe")
            schemas = self.service.schemas  # the session's, before the topic check (schema/protocol.py)
            topic = self.service.topic(out.topic)
            schema_protocol.check_consumer(schemas, topic.name, out.schema)
            service_id = self.service.next_consumer_id()
            partition = -1 if topic.name.partition is None else topic.name.partition
            sink = _Sink(self, out.consumer_id, partition, out.metadata)
            reader_start: Position | None | bool = False
            if not out.durable:
                reader_start = _reader_start(out.start, out.earliest)
            sub = topic.subscribe(
                out.subscription,
                out.sub_type,
                out.earliest,
                service_id,
                out.consumer_name or f"{self.peer}-{out.consumer_id}",
                sink,
                reader_start,
                out.key_shared,
                out.read_compacted,
            )
        except Exception as e:
            code, message = server_error(e)
            return [conn.SubscribeFailed(out.request_id, out.consumer_id, code, message)]
        cid = out.consumer_id
        self.consumers[cid] = _AttachedConsumer(topic, sub, service_id, sink)
        topic.close_watchers[(self, "consumer", cid)] = sink.close
        return [conn.Subscribed(out.request_id, cid)]

    def _consumer(self, consumer_id: int) -> _AttachedConsumer | None:
        return self.consumers.get(consumer_id)

    def _in_memory(self, consumer_id: int) -> bool:
        """Whether the consumer is on a non-persistent topic (its dispatcher does no I/O)."""
        c = self.consumers.get(consumer_id)
        return c is not None and not c.topic.name.persistent

    def _flow(self, out: conn.DoFlow) -> list[Result]:
        c = self._consumer(out.consumer_id)
        if c is not None:
            consumer_step(c.sub, Flow(c.service_id, out.permits))
        return []

    def _ack(self, out: conn.DoAck) -> list[Result]:
        c = self._consumer(out.consumer_id)
        if c is None:
            return []
        c.sink.last_acked_ms = int(time.time() * 1000)  # Pulsar's lastAckedTimestamp: any ACK counts
        try:
            ids = self._acked_ids(c, out)
            if ids and out.cumulative:
                consumer_step(c.sub, Ack(c.service_id, (max(ids),), True))
            elif ids:
                consumer_step(c.sub, Ack(c.service_id, tuple(ids), False))
        except UnknownMessageIdError as e:
            log.debug("ack of an unknown id from %s ignored (as Pulsar does): %s", self.peer, e)
        except BrokerError as e:
            if out.request_id is not None:
                code, message = server_error(e)
                return [conn.AckResponse(out.consumer_id, out.request_id, code, message)]
        return [] if out.request_id is None else [conn.AckResponse(out.consumer_id, out.request_id)]

    def _acked_ids(self, c: _AttachedConsumer, out: conn.DoAck) -> list[MessageId]:
        """The delivered messages an ACK names. An id is a whole entry, less the batch indexes its
        ack_set still marks unacknowledged; a cumulative ack takes everything before it too."""
        ids: list[MessageId] = []
        rest: list[conn.AckedId] = []
        with c.sub.lock:
            consumer = c.sub.dispatcher.consumers.get(c.service_id)
            pending = consumer.pending if consumer is not None else {}
            for a in out.ids:
                if a.id.batch_index >= 0 and not a.ack_set:
                    ids.append(a.id)
                    continue
                # A whole entry of one message (an unbatched one): its id, without grouping the pending
                # messages by entry (thousands, for each ACK of a consumer reading a backlog).
                only = MessageId(a.id.ledger_id, a.id.entry_id, 0)
                msg = pending.get(only) if not a.ack_set else None
                if msg is not None and msg.batch_size == 1:
                    ids.append(only)
                    continue
                # A batch entry delivered whole: all of it, or the indexes its ack_set no longer marks.
                whole = pending.get(MessageId(a.id.ledger_id, a.id.entry_id, WHOLE_ENTRY))
                if whole is None:
                    rest.append(a)
                elif not a.ack_set:
                    ids.append(whole.id)
                else:
                    unacked = bitset.from_words(a.ack_set)
                    ledger_id, entry_id = a.id.ledger_id, a.id.entry_id
                    ids += [MessageId(ledger_id, entry_id, i) for i in range(whole.batch_size) if i not in unacked]
        if not rest and not out.cumulative:
            return ids
        by_entry = self._pending_by_entry(c)
        for a in rest:
            still = bitset.from_words(a.ack_set) if a.ack_set else ()
            ids += [m for m in by_entry.get((a.id.ledger_id, a.id.entry_id), ()) if m.batch_index not in still]
        if out.cumulative and out.ids:
            upto = max((a.id.ledger_id, a.id.entry_id) for a in out.ids)
            ids += [m for entry, ms in by_entry.items() if entry < upto for m in ms]
        return ids

    @staticmethod
    def _pending_by_entry(c: _AttachedConsumer) -> dict[tuple[int, int], list[MessageId]]:
        """The consumer's delivered, unacknowledged messages by entry (ledger id, entry id)."""
        with c.sub.lock:
            consumer = c.sub.dispatcher.consumers.get(c.service_id)
            pending = list(consumer.pending) if consumer is not None else []
        by_entry: dict[tuple[int, int], list[MessageId]] = {}
        for m in pending:
            by_entry.setdefault((m.ledger_id, m.entry_id), []).append(m)
        return by_entry

    def _redeliver(self, out: conn.DoRedeliver) -> list[Result]:
        c = self._consumer(out.consumer_id)
        if c is None:
            return []
        by_entry = self._pending_by_entry(c)
        if out.ids is None:
            ids = [m for ms in by_entry.values() for m in ms]
        else:
            ids = []
            for wanted in out.ids:
                at = by_entry.get((wanted.ledger_id, wanted.entry_id), [])
                # One message of an entry delivered whole: the entry goes again (less what was acknowledged).
                ids += at if wanted.batch_index < 0 else [m for m in at if m == wanted or m.batch_index == WHOLE_ENTRY]
        if ids:
            consumer_step(c.sub, Nack(c.service_id, tuple(ids)))
        return []

    def _detach_consumer(self, consumer_id: int) -> _AttachedConsumer | None:
        c = self.consumers.pop(consumer_id, None)
        if c is not None:
            c.topic.close_watchers.pop((self, "consumer", consumer_id), None)
            try:
                c.topic.remove_consumer(c.sub, c.service_id)
            except Exception as e:  # a closing topic: its consumers go with it
                log.debug("removing consumer %d of %s: %s", consumer_id, self.peer, e)
        return c

    def _close_consumer(self, out: conn.DoCloseConsumer) -> list[Result]:
        self._detach_consumer(out.consumer_id)
        return [] if out.request_id is None else [conn.success_reply(out.request_id)]

    def _unsubscribe(self, out: conn.DoUnsubscribe) -> list[Result]:
        c = self._consumer(out.consumer_id)
        if c is None:
            return [conn.error_reply(out.request_id, api.ConsumerNotFound, "no such consumer")]
        others = set(c.sub.sinks) - {c.service_id}
        if others:
            return [conn.error_reply(out.request_id, api.ConsumerBusy, "other consumers are connected")]
        self._detach_consumer(out.consumer_id)
        removed = conn.ConsumerRemoved(out.consumer_id)
        try:
            if c.sub.durable:
                c.topic.unsubscribe(c.sub.name)
        except Exception as e:
            code, message = server_error(e)
            return [removed, conn.error_reply(out.request_id, code, message)]
        return [removed, conn.success_reply(out.request_id)]

    def _seek(self, out: conn.DoSeek) -> list[Result]:
        c = self._consumer(out.consumer_id)
        if c is None:
            return [conn.error_reply(out.request_id, api.ConsumerNotFound, "no such consumer")]
        try:
            if not c.topic.name.persistent:
                raise NotAllowed(f"seek is not supported on non-persistent topic {c.topic.name}")
            if out.message_id is not None:
                start = _seek_position(c.topic, out.message_id)
            else:
                start = c.topic.first_published_at(out.publish_time_ms or 0)
            sinks = c.sub.reset(start)
        except Exception as e:
            code, message = server_error(e)
            return [conn.error_reply(out.request_id, code, message)]
        # As Pulsar: every consumer of the subscription is closed; each subscribes again and reads
        # from the new position.
        for sink in sinks:
            sink.close()
        return [conn.success_reply(out.request_id)]

    def _get_last_message_id(self, out: conn.DoGetLastMessageId) -> list[Result]:
        c = self._consumer(out.consumer_id)
        if c is None:
            return [conn.error_reply(out.request_id, api.ConsumerNotFound, "no such consumer")]
        try:
            last = c.topic.last_entry()
            if c.sub.read_compacted:
                last = c.topic.compactor.last_entry(last)
        except Exception as e:
            code, message = server_error(e)
            return [conn.error_reply(out.request_id, code, message)]
        # The topic's partition index, as Apache Pulsar's broker sets it: delivered ids carry it too, and the
        # C++ client compares ids with the partition included (has_message_available).
        partition = -1 if c.topic.name.partition is None else c.topic.name.partition
        if last is None:
            last_id = api.MessageIdData(ledgerId=-1, entryId=-1)
        else:
            position, entry = last
            batch = entry.num_messages - 1 if entry.is_batch else -1
            last_id = conn.id_to_wire(MessageId(position.ledger_id, position.entry_id, batch), partition)
        resp = api.CommandGetLastMessageIdResponse(request_id=out.request_id, last_message_id=last_id)
        mark = c.sub.cursor.mark_delete_position
        if mark is not None:
            resp.consumer_mark_delete_position.CopyFrom(
                api.MessageIdData(ledgerId=mark.ledger_id, entryId=mark.entry_id)
            )
        return [conn.Reply(conn.command(api.BaseCommand.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=resp))]

    def _get_topics(self, out: conn.DoGetTopics) -> list[Result]:
        try:
            namespace = NamespaceName.parse(out.namespace)
            self.service.authorizer.check(self.core.role or None, Access.CONSUME, namespace=namespace)
            modes = api.CommandGetTopicsOfNamespace
            topics = []
            if out.mode != modes.NON_PERSISTENT:
                topics += namespaces.all_topics(self.service.configuration_store, namespace, self.service.store)
            if out.mode != modes.PERSISTENT:
                topics += non_persistent.namespace_topics(self.service, namespace)
        except Exception as e:
            code, message = server_error(e)
            return [conn.error_reply(out.request_id, code, message)]
        resp = api.CommandGetTopicsOfNamespaceResponse(request_id=out.request_id)
        if out.pattern is not None:
            try:
                matches = topic_pattern.matcher(out.pattern)
            except topic_pattern.BadTopicsPattern as e:
                return [conn.error_reply(out.request_id, api.NotAllowedError, f"bad topics pattern: {e}")]
            topics = [t for t in topics if matches(t)]
            resp.filtered = True
        resp.topics.extend(topics)
        cmd = conn.command(api.BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE, getTopicsOfNamespaceResponse=resp)
        return [conn.Reply(cmd)]

    def _authorize(self, topic: str, need: Access, operation: str) -> None:
        """AuthorizationFailed, worded as Pulsar's, when the connection's role may not do this."""
        if not self.service.authorizer.enabled:
            return  # nothing to check: not even the name is parsed twice
        try:
            self.service.authorizer.check(self.core.role or None, need, topic=parse_topic(topic))
        except AuthorizationFailed as e:
            raise AuthorizationFailed(f"Client is not authorized to {operation}: {e}") from None

    def _authenticate(self, out: conn.DoAuthenticate) -> list[Result]:
        authenticator = self.service.config.security.authenticator
        assert authenticator is not None
        try:
            role, expires = authenticator.authenticate_connect_until(out.method, out.data)
        except tokens.AuthenticationFailed as e:
            return [conn.AuthenticationFailed(str(e))]
        return [conn.Authenticated(role, tokens.on_monotonic_clock(expires))]

    _JOBS: dict[type, Callable[[Any, Any], list[Result]]] = {
        conn.DoAuthenticate: _authenticate,
        conn.DoLookup: _lookup,
        conn.DoPartitionedMetadata: _partitioned_metadata,
        conn.DoCreateProducer: _create_producer,
        conn.DoCloseProducer: _close_producer,
        conn.DoSubscribe: _subscribe,
        conn.DoFlow: _flow,
        conn.DoAck: _ack,
        conn.DoRedeliver: _redeliver,
        conn.DoCloseConsumer: _close_consumer,
        conn.DoUnsubscribe: _unsubscribe,
        conn.DoSeek: _seek,
        conn.DoGetLastMessageId: _get_last_message_id,
        conn.DoGetTopics: _get_topics,
        conn.DoGetSchema: lambda self, out: schema_protocol.get_schema(self, out, server_error),
        conn.DoGetOrCreateSchema: lambda self, out: schema_protocol.get_or_create_schema(self, out, server_error),
    }


def _reader_start(start: MessageId | None, earliest: bool) -> Position | None | bool:
    """A reader's start for Topic.subscribe: a position (inclusive), None (the first entry) or True
    (after the last entry)."""
    if start is None:
        return None if earliest else True
    if start.ledger_id < 0:
        return None
    if start.ledger_id >= conn.LATEST.ledger_id:
        return True
    return Position(start.ledger_id, max(start.entry_id, 0))


def _seek_position(topic: Topic, mid: MessageId) -> Position | None:
    """Where a seek to `mid` reads from (None: the first entry)."""
    if mid.ledger_id < 0:
        return None
    if mid.ledger_id >= conn.LATEST.ledger_id:
        last = topic.ml.last_confirmed()
        return None if last is None else topic.ml.next_position(last) or Position(last.ledger_id, last.entry_id + 1)
    return Position(mid.ledger_id, max(mid.entry_id, 0))
