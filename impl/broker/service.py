"""The broker service: topics on managed ledgers, producers, subscriptions, ownership checks.

This is the shell that ties the cores together: a topic is served only by the broker owning
its bundle (impl/broker/ownership.py); a topic is one managed ledger (opened with the
takeover sequence, which fences the previous owner); producers append entries; each
subscription is a `Dispatcher` (impl/broker/dispatcher.py) over a durable cursor, driven with
typed events through its `step` (`Subscription.run(event)`).

Threads: the Pulsar listener's and the web service's handlers call in from several threads.
Each topic has a lock for loading and publishing order; each subscription has a lock around its
dispatcher. New entries are dispatched on the managed ledger's delivering thread when that cannot wait
(`Subscription.entries_added`: the subscription's lock free, the entries in the cache), else on the
service's executor, so a completion thread never waits for a subscription lock or a bookie. A read that
misses the entry cache goes to the bookies without holding the lock or the thread (`_PendingRead`): the
answer comes back through the executor, and the dispatcher's next read follows its delivery at once.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import enum
import functools
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from impl.bookie.client.api import BookKeeperClient
from impl.bookie.wire import MAX_FRAME_SIZE_LIMIT
from impl.broker import namespaces, sequence_ids
from impl.broker.authorization import Authorizer
from impl.broker.compaction import COMPACTION_CURSOR, TopicCompactor
from impl.broker.dispatcher import (
    AckEntries,
    ActiveChanged,
    AddConsumer,
    ConsumerAssignError,
    ConsumerBusy,
    DelayedDelivery,
    Deliver,
    Dispatcher,
    EntriesRead,
    KeySharedMeta,
    Message,
    NewEntries,
    Output,
    ReadEntries,
    ReadFailed,
    RemoveConsumer,
    SubscriptionError,
    SubscriptionType,
    Tick,
    UnknownMessageId,
    WakeAt,
    Writable,
    messages_of,
)
from impl.broker.dispatcher import Event as DispatcherEvent
from impl.broker.entry_cache import DEFAULT_CACHE_SIZE_MB, EntryCacheManager
from impl.broker.errors import (
    BrokerError,
    ConsumerBusyError,
    InvalidName,
    MessageTooLarge,
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
from impl.broker.errors import (
    ConsumerAssignError as ConsumerAssignRefused,
)
from impl.broker.managed_ledger import (
    AddCallback,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    NonDurableCursor,
    Position,
)
from impl.broker.managed_ledger_errors import EntryRefusedError
from impl.broker.offload.registry import DEFAULT_DELETION_LAG_S, Offloaders, OffloadSettings
from impl.broker.offload.topic import TopicOffloader
from impl.broker.replication.replicator import CURSOR_PREFIX, is_replicator_cursor
from impl.broker.replication.topic_replicator import TopicReplicator
from impl.broker.schema.registry import SchemaRegistry
from impl.broker.schema.storage import SchemaStorage
from impl.broker.sequence_ids import SequenceIds
from impl.broker.topic_stats import Rate, TopicCounters
from impl.client.api import Client
from impl.client.errors import ClientError
from impl.metadata.naming import InvalidTopicName, NamespaceName, TopicName
from impl.metadata.store import MetadataError, MetadataStore, NoNode
from impl.protocol import entry_codec
from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.entry_codec import CorruptEntry
from impl.protocol.message_id import MessageId
from impl.security.settings import Security
from impl.values import value_type

log = logging.getLogger(__name__)

Published = Future[tuple[Position | None, bool]] | BrokerError  # an appended entry's outcome, or its refusal
# What became of an entry handed to `publish_with_callbacks`: where it is (None: a duplicate, not written)
# and whether it was a duplicate, or why it was not written.
PublishOutcome = tuple[Position | None, bool] | BrokerError
PublishDone = Callable[[PublishOutcome], None]


@value_type  # built for every message: impl/values.py
class Append:
    """One entry a producer publishes: Pulsar's entry format (entry_codec), and what de-duplication
    and the size limit need of it."""

    data: bytes
    sequence_id: int
    highest_sequence_id: int
    payload_size: int
    # De-duplication's producer name when it is not the sending producer's: a replicator sends
    # other producers' messages, which are de-duplicated on their origin's name (`of_replicated`).
    origin_producer: str = ""
    is_chunk: bool = False  # a chunk of a chunked message: its chunks share one sequence id
    num_messages: int = 1  # a batch's; fewer than its span of sequence ids when KeyBased
    batched: bool = False  # in the batch format (num_messages_in_batch set), even with one message
    chunk: tuple[str, int] | None = None  # a chunk's (uuid, chunk_id): which part of which message
    # Read from the metadata once, here: kept beside the cached entry for its deliveries.
    dispatch: entry_codec.DispatchMetadata | None = field(default=None, compare=False)

    @staticmethod
    def chunk_of(metadata: api.MessageMetadata) -> tuple[str, int] | None:
        return (metadata.uuid, metadata.chunk_id) if metadata.HasField("chunk_id") else None

    @functools.cached_property
    def message_ids(self) -> Sequence[int]:
        """Read once: de-duplication asks for them when publishing and again when the add completes."""
        return sequence_ids.message_ids(self.sequence_id, self.highest_sequence_id, self.num_messages, self.data)

    @classmethod
    def of_replicated(cls, data: bytes, entry: entry_codec.Entry | entry_codec.Header) -> Append:
        """A message a replicator (a producer named `pulsar.repl.<cluster>`) sends: as in Pulsar, it is
        de-duplicated on the producer name and sequence ids its origin gave it, not the replicator's."""
        meta = entry.metadata
        return cls(
            data,
            meta.sequence_id,
            entry.highest_sequence_id,
            entry.payload_size,
            meta.producer_name,
            num_messages=entry.num_messages,
            batched=entry.is_batch,
            chunk=cls.chunk_of(meta),
            dispatch=entry_codec.dispatch_metadata(entry),
        )


class AccessMode(enum.Enum):
    """Pulsar's ProducerAccessMode (the wire's values)."""

    SHARED = 0
    EXCLUSIVE = 1
    WAIT_FOR_EXCLUSIVE = 2
    EXCLUSIVE_WITH_FENCING = 3


TOPIC_EPOCHS_ROOT = "/topic-epochs"  # /topic-epochs/<tenant>/<ns>/persistent/<topic>: Pulsar's topic epoch
# /topic-terminated/<tenant>/<ns>/persistent/<topic>: "ledger:entry", the last entry of a terminated topic
# (Pulsar keeps it in the managed ledger's info; here beside it, so every later owner refuses producers).
TERMINATED_ROOT = "/topic-terminated"
TERMINATE_DRAIN_S = 10.0  # how long terminating waits for adds already with the bookies
# /topic-policies/<tenant>/<ns>/persistent/<topic>: a topic's own policies (Pulsar's topic policies, which it
# keeps in a system topic), as JSON: {"deduplicationEnabled": bool}. They override the namespace's.
TOPIC_POLICIES_ROOT = "/topic-policies"
READ_RETRY_S = 0.5  # pause before a subscription retries a failed read
TICK_INTERVAL_S = 10.0  # how often idle topics are checked for age rollover and trimming
DEFAULT_BACKLOG_QUOTA_CHECK_INTERVAL_S = 60.0  # Pulsar's backlogQuotaCheckIntervalInSeconds default
# Adds handed to the managed ledger in one call: enough to share the steps, few enough that the
# bookies start on the first ones while the broker encodes the rest.
PUBLISH_CHUNK = 64
# Managed-ledger steps of a topic's adds with the bookies at once (Topic._submit). One was best in an
# A/B of 1, 2 and unlimited on the standalone (bench/history/pulsar.md): lowest publish latency at 1,000
# msg/s, and async throughput, batched or not, no lower than with more.
STEPS_IN_FLIGHT = 1
# The most an entry's metadata (headers, properties, checksum) may add to its payload.
MAX_METADATA_SIZE = 8 * 1024
# What a bookie's entry adds to a message's payload at most: the metadata above, the BookKeeper entry's
# header and digest, with room to spare. The bookies' frame limit (nettyMaxFrameSizeBytes) must be at
# least max_message_size plus this, as Pulsar's defaults are: maxMessageSize 5 MiB, and the
# nettyMaxFrameSizeBytes its bookkeeper.conf ships, 5 MiB + 10 KiB (impl/bookie/core.py).
ENTRY_ALLOWANCE = 10 * 1024
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # Pulsar's default maxMessageSize


def bookie_frame_for(max_message_size: int) -> int:
    """The least frame limit of the bookies that store every message of up to `max_message_size`."""
    return max_message_size + ENTRY_ALLOWANCE


def size_settings_error(max_message_size: int) -> str | None:
    """Why a broker's `max_message_size` cannot work, or None: its entries must fit a bookie's frame,
    which is at most wire.MAX_FRAME_SIZE_LIMIT (a process that runs both derives its bookies' frame
    limit from it: bookie_frame_for)."""
    largest = MAX_FRAME_SIZE_LIMIT - ENTRY_ALLOWANCE
    if not 0 < max_message_size <= largest:
        return (
            f"the max message size must be 1..{largest} bytes (its entries must fit a bookie's frame, at most "
            f"{MAX_FRAME_SIZE_LIMIT} bytes; producers send larger messages as chunks), not {max_message_size}"
        )
    return None


REMOTE_TIMEOUT_S = 10.0  # replicators' requests to another cluster (lookup, PRODUCER)


@dataclass
class BrokerConfig:
    managed_ledger: ManagedLedgerConfig = field(default_factory=ManagedLedgerConfig)
    # Pulsar's maxMessageSize: advertised in CONNECTED, checked on SEND (size_settings_error says which work)
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    deduplication: bool = False  # Pulsar's brokerDeduplicationEnabled: on per namespace policy
    delayed_delivery: DelayedDelivery = field(default_factory=DelayedDelivery)  # delayedDeliveryEnabled, tick
    security: Security = field(default_factory=Security)  # authentication, authorization, TLS (all off)
    # Pulsar's brokerMaxConnections / brokerMaxConnectionsPerIp: connections past them are closed at once
    # (0: no limit, Pulsar's default).
    max_connections: int = 0
    max_connections_per_ip: int = 0
    # Backpressure towards consumers (docs/security.md): bytes queued for writing on one client connection
    # past which its consumers are given nothing more until it drains below a quarter of it (a consumer
    # that does not read cannot make the broker buffer its backlog). 0: no bound.
    max_pending_write_bytes: int = 2 * 1024 * 1024
    # The most one dispatcher read takes (at least one entry), Pulsar's dispatcherMaxReadSizeBytes: what
    # one delivery can add past the bound above.
    dispatcher_max_read_size_bytes: int = 5 * 1024 * 1024
    # Pulsar's managedLedgerCacheSizeMB: one bound for the entry caches of all the broker's topics
    # (impl/broker/entry_cache.py). 0: nothing is cached, every read goes to the bookies.
    managed_ledger_cache_size_mb: float = DEFAULT_CACHE_SIZE_MB
    # Tiered storage (docs/storage-lifecycle.md): Pulsar's managedLedgerOffloadDriver and its options (None:
    # no offloader; the standalone's default is a directory under its data), and
    # managedLedgerOffloadDeletionLagMs: how long an offloaded ledger's bookie copy stays.
    offload: OffloadSettings | None = None
    offload_deletion_lag_s: float = DEFAULT_DELETION_LAG_S
    # Pulsar's backlogQuotaCheckIntervalInSeconds: how often every topic's backlog is held against its
    # quota (producers disconnected, or the oldest messages evicted, as the policy says).
    backlog_quota_check_interval_s: float = DEFAULT_BACKLOG_QUOTA_CHECK_INTERVAL_S


def _settle(future: Future[tuple[Position | None, bool]], outcome: PublishOutcome) -> None:
    if isinstance(outcome, BrokerError):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def parse_topic(topic: str) -> TopicName:
    try:
        return TopicName.parse(topic)
    except InvalidTopicName as e:
        raise InvalidName(str(e)) from e


def _now_iso() -> str:
    """The time as Pulsar's stats print `connectedSince` (ISO-8601 with the offset)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


@dataclass
class ProducerInfo:
    """Who an attached producer is, for Pulsar's publisher stats."""

    producer_id: int = -1
    address: str = ""  # as Pulsar prints its connection's remote address: "/host:port"
    client_version: str = ""  # its connection's CONNECT client_version ("": none given)
    metadata: dict[str, str] = field(default_factory=dict)  # PRODUCER's metadata (the client's properties)
    connected_since: str = field(default_factory=_now_iso)
    rate: Rate = field(default_factory=Rate)  # messages and bytes it published


class ConsumerSink:
    """Where a subscription sends a consumer's messages (a Pulsar connection's consumer)."""

    def __init__(
        self, consumer_id: int = -1, address: str = "", client_version: str = "", metadata: dict[str, str] | None = None
    ) -> None:
        # For Pulsar's consumer stats: the client's own consumer id, its address, its connection's client
        # version, SUBSCRIBE's metadata, since when, what it got, and when it last got and acked (epoch ms,
        # 0: never, Pulsar's lastConsumedTimestamp and lastAckedTimestamp).
        self.consumer_id = consumer_id
        self.address = address
        self.client_version = client_version
        self.metadata = dict(metadata or {})
        self.connected_since = _now_iso()
        self.rate = Rate()
        self.last_consumed_ms = 0
        self.last_acked_ms = 0

    def deliver(self, messages: list[tuple[Message, int]]) -> None:
        raise NotImplementedError

    def set_active(self, active: bool) -> None:
        """Failover only: this consumer became (in)active."""

    def close(self) -> None:
        """The broker closes the consumer (its subscription was reset by a seek, its topic closed)."""

    def over_bound(self) -> bool:
        """Backpressure, asked after each delivery: True when the consumer's connection holds more than
        its bound for writing. The subscription then pauses the consumer (Writable False); the sink owes
        it Writable True (through `consumer_step`) once the connection drains."""
        return False

    def reached_end(self) -> None:
        """The consumer read all of a terminated topic (Pulsar's REACHED_END_OF_TOPIC)."""


class _PendingRead:
    """One read of a subscription's, of up to `max_entries` from `start`. Its outcome is kept here until the
    dispatcher's read takes it (`take`): at once when the entry cache held the entries, or a read-ahead the
    bookies answered before the dispatcher asked for it; once taken, an answer still to come goes to the
    service's executor (`Subscription._bookies_answered`)."""

    def __init__(self, sub: Subscription, dispatcher: Dispatcher, start: Position, max_entries: int) -> None:
        self.sub = sub
        self.dispatcher = dispatcher  # whose read it is: a seek replaces the dispatcher, and drops the answer
        self.start = start
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._kept = True  # nobody has taken the outcome yet: an answer is kept here
        self._outcome: list[tuple[Position, bytes]] | ManagedLedgerError | None = None

    def done(self, outcome: list[tuple[Position, bytes]] | ManagedLedgerError) -> None:
        with self._lock:
            if self._kept:
                self._outcome = outcome
                return
        with contextlib.suppress(RuntimeError):  # the service is closing
            self.sub.topic.service.executor.submit(self.sub._bookies_answered, self, outcome)

    def answered_empty(self) -> bool:
        with self._lock:
            return self._outcome == []

    def take(self) -> list[tuple[Position, bytes]] | ManagedLedgerError | None:
        """The outcome if answered already, else None: the answer goes to the executor when it comes."""
        with self._lock:
            self._kept = False
            return self._outcome


class Subscription:
    """One subscription: a dispatcher core over a durable cursor, driven under one lock."""

    def __init__(
        self,
        topic: Topic,
        name: str,
        cursor: ManagedCursor | NonDurableCursor,
        sub_type: SubscriptionType,
        partition: int,
    ) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = isinstance(cursor, ManagedCursor)
        self.dispatcher = Dispatcher(sub_type, partition, topic.delayed_delivery)
        self._wake_timer: threading.Timer | None = None
        self.sinks: dict[int, ConsumerSink] = {}
        self._told_end: set[str] = set()  # consumer names told the terminated topic has no more
        self.lock = threading.RLock()
        # The last entry handed to the dispatcher; reading resumes after it. Starts at the
        # mark-delete position, so unacknowledged entries after it are delivered again.
        self.read_after: Position | None = cursor.mark_delete_position
        # At most one wake waits on the executor: entries are confirmed by the thousand per second,
        # and one read after the wake-up takes all that arrived meanwhile.
        self._wake_scheduled = False
        self._wake_lock = threading.Lock()
        self._entry_size = 1  # a running estimate, for reads of at most dispatcher_max_read_size_bytes
        # readCompacted: read the topic's compacted view up to its horizon, then the topic after it.
        self.read_compacted = False
        # While `entries_added` steps the dispatcher (under the lock): reads from the entry cache only, and
        # whether one stopped at an entry the cache does not hold (the executor reads it then).
        self._cache_only = False
        self._cache_missed = False
        self._stepping = False  # a step's outputs are being performed (under the lock)
        # The read issued for the batch after the one being dispatched (`_read_ahead`), until the dispatcher
        # asks for that batch.
        self._ahead: _PendingRead | None = None
        self._read_skipped = False  # the last read's entries were all skipped (`_entries_read`)

    def wake(self) -> None:
        """New entries (or a retry): the dispatcher reads them, on the service's executor."""
        with self._wake_lock:
            if self._wake_scheduled:
                return
            self._wake_scheduled = True
        try:
            self.topic.service.executor.submit(self._woken)
        except RuntimeError:  # the service is closing
            with self._wake_lock:
                self._wake_scheduled = False

    def entries_added(self) -> None:
        """New entries confirmed, on the managed ledger's delivering thread: dispatch them here, as Pulsar's
        managed ledger completes a cursor's waiting read from its cache, not through the executor (a thread
        hand-over per delivery, most of the gap between a publish's receipt and its delivery at a fixed
        rate). Only what cannot make that thread wait: the lock must be free (its holder may be reading
        from the bookies) and the reads come from the entry cache; anything else goes to the executor."""
        if self.read_compacted or not self.lock.acquire(blocking=False):  # a compacted view reads bookies
            self.wake()
            return
        if self._stepping:
            # Called back from within a step on this thread (a managed-ledger look of the read delivers
            # completions, whose callback publishes the next adds and runs the round's notification): a
            # nested step would interleave with the one under way.
            self.lock.release()
            self.wake()
            return
        acked: list[Position] = []
        try:
            self._cache_only = True
            acked = self._step(NewEntries())
        except Exception:
            log.exception("dispatch of subscription %s failed", self.name)
        finally:
            self._cache_only = False
            missed, self._cache_missed = self._cache_missed, False
            self.lock.release()
        self._persist_acks(acked)
        if missed:
            self.wake()

    def _woken(self) -> None:
        with self._wake_lock:
            self._wake_scheduled = False  # before reading: entries confirmed from now on wake again
        try:
            self.run(NewEntries())
        except Exception:
            log.exception("dispatch of subscription %s failed", self.name)

    @property
    def type(self) -> SubscriptionType:
        return self.dispatcher.type

    def run(self, event: DispatcherEvent) -> None:
        """Step the dispatcher with `event` under the lock and perform its outputs (a refusal raises first)."""
        with self.lock:
            acked = self._step(event)
        self._persist_acks(acked)

    def _step(self, event: DispatcherEvent) -> list[Position]:
        """Under the lock: step the dispatcher and perform its outputs; the positions it acknowledged."""
        outer, self._stepping = self._stepping, True
        try:
            outputs = self.dispatcher.step(event)
        finally:
            self._stepping = outer
        return self._perform_all(outputs)

    def _perform_all(self, outputs: list[Output]) -> list[Position]:
        """Under the lock: perform the dispatcher's outputs (and those they lead to); the positions acknowledged."""
        acked: list[Position] = []
        outer, self._stepping = self._stepping, True
        try:
            while outputs:
                more: list[Output] = []
                for out in outputs:
                    if isinstance(out, AckEntries):
                        acked += out.positions
                    else:
                        more += self._perform(out)
                outputs = more
        finally:
            self._stepping = outer
        return acked

    def _persist_acks(self, acked: list[Position]) -> None:
        if acked:
            # Persisted after the lock is let go: a cursor-ledger add takes milliseconds, and the
            # dispatcher's state does not wait for it (the cursor orders its own updates).
            self.cursor.delete(acked)
            self.topic.maybe_trim()

    def _perform(self, out: Output) -> list[Output]:
        if isinstance(out, Deliver):
            sink = self.sinks.get(out.consumer)
            if sink is not None:
                delivered = list(out.messages)
                sink.deliver(delivered)
                count = sum(m.message_count for m, _ in delivered)  # a whole batch entry counts its messages
                size = sum(len(m.entry) or len(m.payload) for m, _ in delivered)
                self.topic.counters.dispatched(count, size)
                rate = getattr(sink, "rate", None)  # sinks made without ConsumerSink.__init__ count nothing
                if rate is not None:
                    rate.add(count, size)
                    sink.last_consumed_ms = int(time.time() * 1000)  # Pulsar's lastConsumedTimestamp
                if sink.over_bound():  # paused before anything more is read for it
                    return self.dispatcher.step(Writable(out.consumer, False))
            return []
        if isinstance(out, ActiveChanged):
            sink = self.sinks.get(out.consumer)
            if sink is not None:
                sink.set_active(out.active)
            return []
        if isinstance(out, WakeAt):
            if self._wake_timer is not None:
                self._wake_timer.cancel()
            self._wake_timer = threading.Timer(max(0.0, out.at_ms / 1000 - time.time()), self._tick)
            self._wake_timer.daemon = True
            self._wake_timer.start()
            return []
        assert isinstance(out, ReadEntries)
        try:
            done = self._read(out.max_entries)
        except Exception as e:  # topic fenced or closed: try again shortly
            return self._read_failed(e)
        return [] if done is None else self._entries_read(done)

    def _read_failed(self, e: BaseException) -> list[Output]:
        """Under the lock: a read failed (bookies unavailable, topic fenced). As Pulsar's readEntriesFailed,
        the consumers stay and the read is tried again shortly."""
        log.warning("reading for subscription %s of %s: %s; retrying", self.name, self.topic.name, e)
        retry = threading.Timer(READ_RETRY_S, self.wake)
        retry.daemon = True
        retry.start()
        return self.dispatcher.step(ReadFailed())

    def _entries_read(self, messages: list[Message]) -> list[Output]:
        outputs = self.dispatcher.step(EntriesRead(tuple(messages), int(time.time() * 1000)))
        if not messages and self._read_skipped:
            # Entries were read but none is to be delivered (acknowledged already, or expired while the read
            # was with the bookies): the dispatcher took it for the end; there may be more after them.
            outputs += self.dispatcher.step(NewEntries())
        return outputs

    def _bookies_answered(self, read: _PendingRead, outcome: list[tuple[Position, bytes]] | ManagedLedgerError) -> None:
        """On the service's executor: a read that went to the bookies is done. The next batch's read goes out
        first (`_read_ahead`), then these entries go to the dispatcher, so the bookies read the next batch
        while this one is dispatched and written to the consumers."""
        acked: list[Position] = []
        try:
            with self.lock:
                if read.dispatcher is not self.dispatcher:
                    return  # a seek or a skip replaced the dispatcher meanwhile: it reads again itself
                # A managed-ledger look (next_position, the read's view) may deliver add-completes on this
                # thread: their `entries_added` must not step the dispatcher inside this step.
                outer, self._stepping = self._stepping, True
                try:
                    if isinstance(outcome, ManagedLedgerError):
                        outputs = self._read_failed(outcome)
                    else:
                        self._read_ahead(read, outcome)
                        outputs = self._entries_read(self._messages_of(outcome))
                finally:
                    self._stepping = outer
                acked = self._perform_all(outputs)
        except Exception:
            log.exception("dispatch of subscription %s failed", self.name)
        self._persist_acks(acked)

    def _tick(self) -> None:
        """Delayed delivery's clock: release the messages due now (on the service's executor)."""
        with contextlib.suppress(RuntimeError):  # the service is closing
            self.topic.service.executor.submit(self._run_tick)

    def _run_tick(self) -> None:
        try:
            self.run(Tick(int(time.time() * 1000)))
        except Exception:
            log.exception("delayed delivery tick of subscription %s failed", self.name)

    def _reached_end(self) -> None:
        """A terminated topic read to its end: each consumer is told (Pulsar's REACHED_END_OF_TOPIC), once
        per consumer name: the official client (its C++ core) does not know the command and reconnects
        on it; told again each time, it would reconnect forever."""
        for consumer, sink in list(self.sinks.items()):
            state = self.dispatcher.consumers.get(consumer)
            name = state.name if state is not None else str(consumer)
            if name not in self._told_end:
                self._told_end.add(name)
                sink.reached_end()

    def skip(self, entries: int | None) -> bool:
        """Pulsar's skip (None: skip_all, clear the backlog): the next `entries` entries not yet
        acknowledged are acknowledged, as Pulsar counts them (a batch is one entry). True if the cursor moved."""
        ml, start = self.topic.ml, self.cursor.mark_delete_position
        view = ml.view()
        last: Position | None = None
        if entries is None:
            last = view.last_confirmed()
        else:
            left = entries
            for position in view.positions(None if start is None else view.next_position(start)):
                if left <= 0:
                    break
                if not self.cursor.is_acknowledged(position):
                    left -= 1
                    last = position
        moved = last is not None and self.expire_to(last)
        with self.lock:
            if moved and not self.sinks:  # what the last consumers left unacknowledged is skipped too
                self.dispatcher = Dispatcher(
                    self.dispatcher.type, self.dispatcher.partition_index, self.dispatcher.delayed_policy
                )
        return moved

    def expire_to(self, position: Position) -> bool:
        """Message TTL: the entries up to `position` expired; the cursor moves past them (never back).
        True if it moved."""
        current = self.cursor.mark_delete_position
        if current is not None and position <= current:
            return False
        self.cursor.mark_delete(position)
        with self.lock:
            if self.read_after is None or self.read_after < position:
                self.read_after = position  # not read (delivered) any more
        return True

    def reset(self, start: Position | None) -> list[ConsumerSink]:
        """Seek: the cursor reads again from `start`; every consumer is removed (the caller closes them,
        and their clients subscribe again). Returns the removed consumers' sinks."""
        with self.lock:
            removed = list(self.sinks.values())
            self.sinks.clear()
            self.dispatcher = Dispatcher(
                self.dispatcher.type, self.dispatcher.partition_index, self.dispatcher.delayed_policy
            )
            self.cursor.reset(start)
            self.read_after = self.cursor.mark_delete_position
            self._ahead = None
        return removed

    def _read(self, max_entries: int) -> list[Message] | None:
        """Under the lock: the messages after the read position, or None when the read went to the bookies
        (`_bookies_answered` takes it from there; the dispatcher is reading until then)."""
        self._read_skipped = False
        if self.read_compacted:
            compacted = self._read_compacted(max_entries)
            if compacted is not None:
                return compacted
        ml = self.topic.ml
        start = ml.first_position() if self.read_after is None else ml.next_position(self.read_after)
        end = self.topic.terminated
        drained = start is None or (self.read_after is not None and end is not None and self.read_after >= end)
        if end is not None and end != _TERMINATING and drained:
            self._reached_end()
            return []
        if start is None:
            return []
        max_entries = self._capped(max_entries)
        ahead, self._ahead = self._ahead, None
        if ahead is not None and (
            ahead.dispatcher is not self.dispatcher
            or ahead.start != start
            or ahead.max_entries > max_entries
            or ahead.answered_empty()
        ):
            ahead = None  # not the read asked for (or it found nothing new): read afresh
        if self._cache_only and ahead is None:
            entries, self._cache_missed = ml.read_cached(start, max_entries)
            return self._messages_of(entries)
        # A miss goes to the bookies without holding this thread (nor the lock: acks and flows go on);
        # entries the cache holds come back inline, before read_with_callback returns.
        read = ahead or self._issue(start, max_entries)
        outcome = read.take()
        if isinstance(outcome, ManagedLedgerError):
            raise outcome
        if outcome is None:
            return None
        if ahead is not None:  # the bookies answered the read-ahead first: the next one goes out now
            self._read_ahead(read, outcome)
        return self._messages_of(outcome)

    def _capped(self, max_entries: int) -> int:
        """At most dispatcher_max_read_size_bytes (and one entry at least), as many entries as the last
        reads' sizes suggest: one delivery's size is what backpressure can let past its bound."""
        cap = self.topic.service.config.dispatcher_max_read_size_bytes
        return max(1, min(max_entries, cap // self._entry_size)) if cap > 0 else max_entries

    def _issue(self, start: Position, max_entries: int) -> _PendingRead:
        read = _PendingRead(self, self.dispatcher, start, max_entries)
        self.topic.ml.read_with_callback(start, max_entries, read.done)
        return read

    def _read_ahead(self, read: _PendingRead, entries: list[tuple[Position, bytes]]) -> None:
        """Under the lock, as the bookies' answer to `read` comes: issue the read of the batch after it before
        this one is parsed and dispatched, when the consumers' permits will outlast it; the dispatcher's
        next read takes it (`_read`). The bookies then read that batch while this one is dispatched."""
        if self._ahead is not None or len(entries) < read.max_entries or self.read_compacted or self._cache_only:
            # One ahead at most; a short batch reached the end (what comes next comes as NewEntries); and not
            # from the add-complete's thread (an offloaded ledger's read would hold it).
            return
        size = self._capped(self.dispatcher.read_ahead(len(entries)))
        start = self.topic.ml.next_position(entries[-1][0])
        last = self.topic.ml.last_confirmed()
        if size and start is not None and last is not None and start <= last:
            try:
                self._ahead = self._issue(start, size)
            except Exception as e:  # fenced, closed: the dispatcher's own read finds out and retries
                log.debug("read-ahead for subscription %s: %s", self.name, e)

    def _messages_of(self, entries: list[tuple[Position, bytes]]) -> list[Message]:
        """Under the lock: the messages of entries read after the read position, which moves past them."""
        messages: list[Message] = []
        keys_needed = self.dispatcher.type is SubscriptionType.KEY_SHARED  # only Key_Shared routes by key
        cap = self.topic.service.config.dispatcher_max_read_size_bytes
        size = 0
        cache = self.topic.ml.cache
        acknowledged = self.cursor.acknowledged_among([p for p, _ in entries])
        for position, data in entries:
            if self.read_after is not None and position <= self.read_after:
                continue  # expired (message TTL) while the read was with the bookies
            if cap > 0 and size and size + len(data) > cap:
                break  # read again next time
            size += len(data)
            self._entry_size = max(1, (self._entry_size + len(data)) // 2)
            self.read_after = position
            if position in acknowledged:
                continue  # acknowledged individually before a restart or takeover
            try:
                metadata = cache.metadata(position)
                messages += messages_of(position, data, payloads=False, keys_needed=keys_needed, metadata=metadata)
            except CorruptEntry as e:
                log.error("skipping %s on %s: %s", position, self.topic.name, e)
        self.topic.evict_read_entries()
        self._read_skipped = bool(entries) and not messages
        return messages

    def _read_compacted(self, max_entries: int) -> list[Message] | None:
        """The compacted view's entries after the read position (Pulsar's CompactedTopicImpl); None once
        the read position is at or past its horizon (the topic after it is read as usual)."""
        view = self.topic.compactor.view
        if view is None or (self.read_after is not None and self.read_after >= view.horizon):
            return None
        batch = view.after(self.read_after, max_entries)
        if not batch:
            self.read_after = view.horizon  # every compacted entry delivered: the tail follows
            return None
        mark = self.cursor.mark_delete_position
        keys_needed = self.dispatcher.type is SubscriptionType.KEY_SHARED
        messages: list[Message] = []
        for position, data in batch:
            self.read_after = position
            if mark is not None and position > mark and self.cursor.is_acknowledged(position):
                continue
            try:
                messages += messages_of(position, data, payloads=False, keys_needed=keys_needed)
            except CorruptEntry as e:
                log.error("skipping compacted %s on %s: %s", position, self.topic.name, e)
        return messages


class Topic:
    def __init__(self, name: TopicName, ml: ManagedLedger, service: BrokerService) -> None:
        self.name = name
        self.ml = ml
        self.service = service
        self.subscriptions: dict[str, Subscription] = {}
        self.lock = threading.RLock()
        self.closed = False
        self.last_sequence: dict[str, int] = {}  # producer -> highest sequence id persisted or in flight
        self.persisted_sequence: dict[str, int] = {}  # producer -> highest sequence id persisted
        # The ids themselves, which KeyBased batches need (impl/broker/sequence_ids.py): pushed and persisted.
        self.pushed_ids: dict[str, SequenceIds] = {}
        self.persisted_ids: dict[str, SequenceIds] = {}
        # A chunked message's chunks share its sequence id: the last chunk pushed and persisted per producer,
        # (sequence id, uuid, chunk id), tell a chunk resent after a lost receipt from the next one.
        self.pushed_chunk: dict[str, tuple[int, str, int]] = {}
        self.persisted_chunk: dict[str, tuple[int, str, int]] = {}
        # Guards the two maps against completions; a leaf lock (nothing is taken while it is held), as
        # completions come from the managed ledger's threads while a publisher holds the topic lock.
        self._dedup_lock = threading.Lock()
        # One managed-ledger step of adds in flight at a time: adds published while a step is with the
        # bookies wait, and all of them go in the next step together (see `_submit`).
        self._step_lock = threading.Lock()  # a leaf lock too
        self._steps: collections.deque[int] = collections.deque()  # adds still out, per step in flight
        self._waiting_adds: list[tuple[bytes, AddCallback]] = []
        self._producer_seq = 0
        self._trim_scheduled = False
        # Producers attached over Pulsar connections: name -> (owner, epoch, exclusive). A name is
        # connected once; a re-created producer (higher epoch) replaces its stale predecessor.
        self.attached: dict[str, tuple[object, int, bool]] = {}
        self.access_modes: dict[str, AccessMode] = {}  # attached producer -> its access mode
        self.producer_info: dict[str, ProducerInfo] = {}  # attached producer -> who it is, for stats
        # The last entry of a terminated topic (None: not terminated); kept across owners.
        self.terminated: Position | None = service.load_terminated(name)
        # Producers waiting for exclusive access (WaitForExclusive), in order: (name, owner, epoch, on_granted).
        self._waiting: list[tuple[str, object, int, Callable[[str, int, int], None] | None]] = []
        self._fence: dict[str, Callable[[], None]] = {}  # attached producer -> how to close it (fencing)
        self._waiting_fence: dict[str, Callable[[], None]] = {}  # the same, for waiting producers
        self._waiting_info: dict[str, ProducerInfo] = {}  # who they are, kept for their stats once granted
        # Pulsar's topic epoch, moved by each new exclusive producer; kept across owners (_next_epoch).
        self.topic_epoch: int | None = service.load_topic_epoch(name)
        # Called once when the topic closes (unload, fenced, lost bundle): connections then close
        # their producers and consumers on it, and the clients look the topic up again.
        self.close_watchers: dict[object, Callable[[], None]] = {}
        self.counters = TopicCounters()
        # Geo-replication: one replicator per remote cluster of the namespace (set_replication).
        self.replicators: dict[str, TopicReplicator] = {}
        self.message_ttl_s = service.message_ttl_in(name)  # 0: none; follows the namespace's policy
        self.backlog_quota = service.backlog_quota_in(name)  # None: none; follows the namespace's policy
        self.deduplication = service.deduplication_in(name)
        self.delayed_delivery = service.delayed_delivery_in(name)
        if self.deduplication:
            self._rebuild_dedup()
        ml.add_listener(self._on_new_entry)
        self.compactor = TopicCompactor(str(name), ml)
        self.compactor.load()
        self.compactor.threshold = service.compaction_threshold_in(name)  # follows the namespace's policy
        self.offloader = TopicOffloader(
            str(name), ml, service.offloaders.configured, service.config.offload_deletion_lag_s
        )
        self.offloader.threshold = service.offload_threshold_in(name)  # follows the namespace's policy
        self._current_ledger: int | None = None  # the threshold is checked when the ledger rolls over
        # As Pulsar's PersistentTopic on load: every durable cursor is a subscription, consumers or not, so
        # after a restart or an unload the admin API (delete, list, stats, reset, expire), message TTL and
        # backlog quotas see it as before. Replicator and compaction cursors are not subscriptions here.
        for cursor_name, cursor in ml.cursors().items():
            if cursor_name != COMPACTION_CURSOR and not is_replicator_cursor(cursor_name):
                self.subscriptions[cursor_name] = Subscription(
                    self, cursor_name, cursor, SubscriptionType.EXCLUSIVE, name.partition or 0
                )  # its type is its next consumer's (`subscribe` replaces a subscription without consumers)

    def evict_read_entries(self) -> None:
        """The entries every subscription with consumers has read (handed to its dispatcher, which keeps
        what it may deliver again) leave the entry cache: Pulsar's eviction by the slowest active
        cursor's read position. A subscription without consumers does not hold the cache."""
        slowest: Position | None = None
        for sub in list(self.subscriptions.values()):
            if not sub.sinks:
                continue
            read_after = sub.read_after
            if read_after is None:
                return  # it reads from the first entry on: nothing is read by all
            if slowest is None or read_after < slowest:
                slowest = read_after
        if slowest is not None:
            self.ml.evict_read(slowest)

    # ---- producers ---------------------------------------------------------------------------

    def set_deduplication(self, enabled: bool) -> None:
        """Turn de-duplication on or off for the producers to come (turning it on reads the topic)."""
        with self.lock:
            if enabled == self.deduplication:
                return
            if enabled:
                self._rebuild_dedup()
            self.deduplication = enabled
        log.info("de-duplication %s on %s", "enabled" if enabled else "disabled", self.name)

    def _rebuild_dedup(self) -> None:
        """Highest sequence id per producer, from the entries on the ledgers (O(topic size))."""
        position = self.ml.first_position()
        while position is not None:
            batch = self.ml.read(position, 1000)
            if not batch:
                break
            for _pos, data in batch:
                try:
                    entry = entry_codec.parse(data, verify_checksum=False)
                except CorruptEntry:
                    continue
                producer = entry.metadata.producer_name
                ids = sequence_ids.message_ids(
                    entry.metadata.sequence_id, entry.highest_sequence_id, entry.num_messages, data
                )
                self._published(producer, ids, entry.is_batch, persisted=True)
                chunk = Append.chunk_of(entry.metadata)
                if chunk is not None:
                    self.pushed_chunk[producer] = self.persisted_chunk[producer] = (ids[0], *chunk)
                last = max(entry.highest_sequence_id, self.pushed_ids[producer].highest)
                if last > self.last_sequence.get(producer, -1):
                    self.last_sequence[producer] = self.persisted_sequence[producer] = last
            position = self.ml.next_position(batch[-1][0])

    def attach_producer(
        self,
        requested: str,
        owner: object,
        epoch: int,
        mode: AccessMode | bool = AccessMode.SHARED,
        topic_epoch: int | None = None,
        on_granted: Callable[[str, int, int], None] | None = None,
        on_fenced: Callable[[], None] | None = None,
        info: ProducerInfo | None = None,
    ) -> tuple[str, int, int | None] | str:
        """A producer connects with Pulsar's access mode: (its name, chosen here when `requested` is
        empty; the last sequence id it persisted; the topic epoch for exclusive access). A
        WaitForExclusive producer that must wait gets only its name: `on_granted(name, last, epoch)`
        is called when its turn comes (the holder and every other producer gone). ProducerBusy when the
        name is connected, or a Shared producer meets an exclusive one; ProducerFenced when exclusive
        access is not possible now (Pulsar's messages). ExclusiveWithFencing closes every other producer
        (`on_fenced`) and refuses the waiting ones."""
        if isinstance(mode, bool):
            mode = AccessMode.EXCLUSIVE if mode else AccessMode.SHARED
        fenced: list[Callable[[], None]] = []
        refused: list[Callable[[str, int, int], None] | None] = []
        with self.lock:
            if self.closed:
                raise ServiceNotReady(f"topic {self.name} is closing; look it up again and retry")
            if self.terminated is not None:
                raise TopicTerminated(f"Topic {self.name} was already terminated")
            others = {n: a for n, a in self.attached.items() if a[0] != owner}
            if requested in others and epoch <= others[requested][1]:
                raise ProducerBusy(f"a producer named {requested!r} is already connected to {self.name}")
            rivals = {n: a for n, a in others.items() if n != requested}
            holder = next((n for n, a in rivals.items() if a[2]), None)
            name = requested
            if not name:
                self._producer_seq += 1
                name = f"{self.service.address}-{int(time.time() * 1000)}-{self._producer_seq}"
            if mode is AccessMode.SHARED:
                if holder is not None or self._waiting:
                    raise ProducerBusy(f"Topic has an existing exclusive producer: {holder or self._waiting[0][0]}")
            elif mode is AccessMode.EXCLUSIVE_WITH_FENCING:
                for n in rivals:
                    self.attached.pop(n)
                    callback = self._fence.pop(n, None)
                    if callback is not None:
                        fenced.append(callback)
                refused = [w[3] for w in self._waiting]
                self._waiting.clear()
                self._waiting_fence.clear()
                self._waiting_info.clear()
            elif topic_epoch is not None and self.topic_epoch is not None and topic_epoch < self.topic_epoch:
                # A fenced exclusive producer reconnecting: a newer one took the topic since (not queued).
                raise ProducerFenced(
                    f"Topic epoch has already moved. Current epoch: {self.topic_epoch}, Producer epoch: {topic_epoch}"
                )
            elif holder is not None or self._waiting or rivals:
                if mode is AccessMode.WAIT_FOR_EXCLUSIVE:
                    self._waiting.append((name, owner, epoch, on_granted))
                    if on_fenced is not None:
                        self._waiting_fence[name] = on_fenced
                    if info is not None:
                        self._waiting_info[name] = info
                    log.info("producer %s waits for exclusive access to %s", name, self.name)
                    return name
                if holder is not None or self._waiting:
                    raise ProducerFenced(f"Topic has an existing exclusive producer: {holder or self._waiting[0][0]}")
                raise ProducerFenced("Topic has existing shared producers")
            granted: int | None = None
            if mode is not AccessMode.SHARED:
                if topic_epoch is not None and self.topic_epoch is not None and topic_epoch < self.topic_epoch:
                    raise ProducerFenced(
                        f"Topic epoch has already moved. Current epoch: {self.topic_epoch}, "
                        f"Producer epoch: {topic_epoch}"
                    )
                granted = self._next_epoch(topic_epoch)
            self.attached[name] = (owner, epoch, mode is not AccessMode.SHARED)
            self.access_modes[name] = mode
            self.producer_info[name] = info or ProducerInfo()
            if on_fenced is not None:
                self._fence[name] = on_fenced
            last = self.last_sequence.get(name, -1)
        for callback in fenced:
            callback()
        for waiter in refused:
            if waiter is not None:
                waiter("", -1, -1)  # -1: fenced by an ExclusiveWithFencing producer
        return name, last, granted

    def _next_epoch(self, asked: int | None) -> int:
        """Pulsar's topic epoch: a reconnecting exclusive producer keeps its epoch; a new one moves it on.
        Stored in the metadata store, so the next owner of the topic (failover, restart) goes on from it."""
        self.topic_epoch = asked if asked is not None else (-1 if self.topic_epoch is None else self.topic_epoch) + 1
        self.service.store_topic_epoch(self.name, self.topic_epoch)
        return self.topic_epoch

    def detach_producer(self, name: str, owner: object) -> None:
        granted: tuple[str, int, int, Callable[[str, int, int], None] | None] | None = None
        with self.lock:
            self._waiting = [w for w in self._waiting if w[1] != owner]
            waiting = {w[0] for w in self._waiting}
            for n in [n for n in self._waiting_fence if n not in waiting]:
                del self._waiting_fence[n]
            for n in [n for n in self._waiting_info if n not in waiting]:
                del self._waiting_info[n]
            if name in self.attached and self.attached[name][0] == owner:
                del self.attached[name]
                self.access_modes.pop(name, None)
                self.producer_info.pop(name, None)
                self._fence.pop(name, None)
            if not self.attached and self._waiting and not self.closed:
                # The next waiting producer's turn (Pulsar grants them in the order they came).
                name_, owner_, epoch_, callback = self._waiting.pop(0)
                self.attached[name_] = (owner_, epoch_, True)
                self.access_modes[name_] = AccessMode.WAIT_FOR_EXCLUSIVE
                self.producer_info[name_] = self._waiting_info.pop(name_, ProducerInfo())
                fence = self._waiting_fence.pop(name_, None)
                if fence is not None:
                    self._fence[name_] = fence
                granted = (name_, self.last_sequence.get(name_, -1), self._next_epoch(None), callback)
        if granted is not None and granted[3] is not None:
            granted[3](granted[0], granted[1], granted[2])

    def close_attached(self) -> None:
        """Tell every watcher that the topic closed (each at most once)."""
        with self.lock:
            watchers = list(self.close_watchers.values())
            self.close_watchers.clear()
            self.attached.clear()
            self.access_modes.clear()
            self.producer_info.clear()
            self._waiting.clear()
            self._fence.clear()
            self._waiting_fence.clear()
            self._waiting_info.clear()
        for watcher in watchers:
            try:
                watcher()
            except Exception:
                log.exception("closing a connection's producers and consumers on %s", self.name)

    def publish_entries(self, producer: str, appends: list[Append]) -> list[Published]:
        """`publish_with_callbacks` with a future for each entry not refused at once."""
        futures: list[Future[tuple[Position | None, bool]]] = [Future() for _ in appends]
        refusals = self.publish_with_callbacks(producer, appends, [functools.partial(_settle, f) for f in futures])
        return [future if refusal is None else refusal for future, refusal in zip(futures, refusals, strict=True)]

    def publish_with_callbacks(
        self, producer: str, appends: list[Append], callbacks: list[PublishDone]
    ) -> list[BrokerError | None]:
        """Append entries in order, in one step of the managed ledger. An entry refused gets its error
        here, and so does every later one: nothing after a refusal is appended. Every other entry's
        callback is called once with its outcome, in order, when it is known: (position, False), or (None,
        True) for an entry whose first sequence id the producer already published (a duplicate, nothing
        appended; called before this returns), or the error it failed with. A producer's sends arrive in
        sequence order (one Pulsar connection carries them). A callback instead of a future per entry: a
        future is a lock and a condition, made, settled and waited on for every message."""
        results: list[BrokerError | None] = []
        adds: list[tuple[bytes, Callable[[Position | ManagedLedgerError], None]]] = []
        duplicates: list[PublishDone] = []
        refusal: BrokerError | None = None
        with self.lock:
            info = self.producer_info.get(producer)
            if self.terminated is not None:
                refusal = TopicTerminated(f"Topic {self.name} was already terminated")
            for append, callback in zip(appends, callbacks, strict=True):
                key = append.origin_producer or producer  # whose sequence ids these are
                dedup = self.deduplication and key
                if refusal is None:
                    try:
                        self._check_entry(append)
                    except BrokerError as e:
                        refusal = e
                if refusal is not None:
                    results.append(refusal)
                elif dedup and self._duplicate(key, append):
                    if self._persisted(key, append):
                        duplicates.append(callback)
                        results.append(None)
                    else:  # its first copy is still being written: its outcome is not known yet (as Pulsar)
                        refusal = PersistenceError(
                            f"sequence id {append.sequence_id} of {key} is still being persisted; resend it later"
                        )
                        results.append(refusal)
                else:
                    adds.append((append.data, self._finisher(callback, key if dedup else "", append)))
                    if info is not None:  # a batch's messages are its sequence ids
                        info.rate.add(max(1, append.highest_sequence_id - append.sequence_id + 1), append.payload_size)
                    results.append(None)
                    if dedup:
                        with self._dedup_lock:
                            self._published(key, append.message_ids, append.batched, persisted=False)
                            if append.chunk is not None:
                                self.pushed_chunk[key] = (append.sequence_id, *append.chunk)
                            highest = max(append.highest_sequence_id, self.pushed_ids[key].highest)
                            self.last_sequence[key] = max(highest, self.last_sequence.get(key, -1))
            if adds:
                self._submit(adds)
        for done in duplicates:  # outside the topic's lock, as the appended entries' callbacks
            done((None, True))
        return results

    def _duplicate(self, producer: str, append: Append) -> bool:
        """Whether de-duplication takes the entry for one the producer already published: every one of
        its messages' sequence ids was pushed. Pulsar's rule (its first id at or below the highest
        pushed) would confirm and drop two kinds of messages never stored, which are kept instead
        (docs/pulsar-protocol.md, "De-duplication"): the later chunks of a chunked message, which share
        its sequence id, and KeyBased batches, whose ids interleave with other keys' batches."""
        last = self.last_sequence.get(producer, -1)
        if append.sequence_id > last:
            return False  # the common case: nothing to look up
        if append.is_chunk and append.sequence_id == last:
            return self._chunk_seen(self.pushed_chunk.get(producer), append)
        if not append.batched:
            return True  # a message sent on its own: Pulsar's rule, so a topic keeps its producers' order
        pushed = self.pushed_ids.get(producer)
        return pushed is not None and pushed.covers(append.message_ids)

    @staticmethod
    def _chunk_seen(last: tuple[int, str, int] | None, append: Append) -> bool:
        """Whether this chunk is at or before the last one recorded of the same message (a chunk without
        its uuid and index, from a client that leaves them out, is never taken for a resend)."""
        if last is None or append.chunk is None:
            return False
        sequence_id, uuid, chunk_id = last
        return (sequence_id, uuid) == (append.sequence_id, append.chunk[0]) and append.chunk[1] <= chunk_id

    def _persisted(self, producer: str, append: Append) -> bool:
        """Whether a duplicate's first copy is persisted (confirm it) or still in flight (refuse it)."""
        if append.is_chunk and append.chunk is not None:
            persisted = self.persisted_chunk.get(producer)
            if persisted is not None and persisted[:2] == (append.sequence_id, append.chunk[0]):
                return self._chunk_seen(persisted, append)  # its message is being persisted: this chunk?
        if not append.batched:
            return append.sequence_id <= self.persisted_sequence.get(producer, -1)
        return self.persisted_ids[producer].covers(append.message_ids)

    def _published(self, producer: str, ids: Sequence[int], batched: bool, persisted: bool) -> None:
        """Record a producer's ids as pushed (and persisted). A producer's first ids start its sets: the
        ids below them count as published, as Pulsar's one number counts them (a resend of a message
        trimmed away, or sent before this topic was loaded, is a duplicate); so does every id below a
        message sent on its own."""
        if producer not in self.pushed_ids:
            low = min(ids) - 1 if len(ids) else -1
            self.pushed_ids[producer], self.persisted_ids[producer] = SequenceIds(low), SequenceIds(low)
        sequence_ids.record(self.pushed_ids[producer], ids, batched)
        if persisted:
            sequence_ids.record(self.persisted_ids[producer], ids, batched)

    def _submit(self, adds: list[tuple[bytes, AddCallback]]) -> None:
        """Hand the adds to the managed ledger now, or, while STEPS_IN_FLIGHT earlier steps' adds are
        still with the bookies, with the next step. Every step costs the broker, the BookKeeper client and the
        bookies about the same whatever its size, so a producer's sends that arrive one by one (an
        unbatched client at a steady rate) share steps instead of each paying for its own; the wait
        is at most one round trip to the bookies. Order is kept: waiting adds go before later ones."""
        with self._step_lock:
            if len(self._steps) >= STEPS_IN_FLIGHT:
                self._waiting_adds += adds
                return
            self._steps.append(len(adds))
        self._add(adds)

    def _add(self, adds: list[tuple[bytes, AddCallback]]) -> None:
        counted = [(data, self._counted(callback)) for data, callback in adds]
        for first in range(0, len(counted), PUBLISH_CHUNK):
            try:
                self.ml.add_many_with_callback(counted[first : first + PUBLISH_CHUNK])
            except ManagedLedgerError as e:  # fenced or closed: these adds were never handed over
                for _data, callback in counted[first:]:
                    callback(e)
                return

    def _counted(self, callback: AddCallback) -> AddCallback:
        def done(outcome: Position | ManagedLedgerError) -> None:
            callback(outcome)
            with self._step_lock:
                self._steps[0] -= 1  # the managed ledger completes adds in order: the oldest step's
                if self._steps[0]:
                    return
                self._steps.popleft()
                if not self._waiting_adds:
                    return
                waiting, self._waiting_adds = self._waiting_adds, []
                self._steps.append(len(waiting))
            self._add(waiting)  # on the managed ledger's completion thread: the adds that waited

        return done

    def _check_entry(self, append: Append) -> None:
        size = append.payload_size
        if size > self.service.config.max_message_size:
            raise MessageTooLarge(
                f"{size} bytes is over the broker's limit of {self.service.config.max_message_size}; split the message"
                " (or enable chunking on the producer)"
            )
        if len(append.data) - size > MAX_METADATA_SIZE:
            raise MessageTooLarge(
                f"the message's metadata is {len(append.data) - size} bytes, over the limit of {MAX_METADATA_SIZE}"
            )
        if self.closed:
            raise ServiceNotReady(f"topic {self.name} is closing; look it up again and retry")

    def _finisher(
        self, result: PublishDone, producer: str, append: Append
    ) -> Callable[[Position | ManagedLedgerError], None]:
        started = time.monotonic()

        def finish(outcome: Position | ManagedLedgerError) -> None:
            if producer:
                with self._dedup_lock:
                    persisted = self.persisted_sequence.get(producer, -1)
                    if not isinstance(outcome, ManagedLedgerError):
                        sequence_ids.record(self.persisted_ids[producer], append.message_ids, append.batched)
                        if append.chunk is not None:
                            self.persisted_chunk[producer] = (append.sequence_id, *append.chunk)
                        highest = max(append.highest_sequence_id, self.persisted_ids[producer].highest)
                        self.persisted_sequence[producer] = max(persisted, highest)
                    else:  # not written (as far as we know): a resend must be written, not acknowledged
                        self.last_sequence[producer] = persisted
                        self.pushed_ids[producer] = self.persisted_ids[producer].copy()
                        if producer in self.persisted_chunk:
                            self.pushed_chunk[producer] = self.persisted_chunk[producer]
                        else:
                            self.pushed_chunk.pop(producer, None)
            if isinstance(outcome, ManagedLedgerFencedError):
                self.service.topic_fenced(self)
                result(TopicFenced(str(outcome)))
            elif isinstance(outcome, ManagedLedgerError) and outcome.rejected and self.closed:
                # It waited for a step and the topic closed (unload) meanwhile: nothing was written.
                result(ServiceNotReady(f"topic {self.name} closed before the entry was written; retry"))
            elif isinstance(outcome, EntryRefusedError):  # never stored, and never will be: not retriable
                result(MessageTooLarge(f"entry refused on {self.name}: {outcome}"))
            elif isinstance(outcome, ManagedLedgerError):
                result(PersistenceError(f"entry not confirmed on {self.name}: {outcome}"))
            else:
                messages = append.highest_sequence_id - append.sequence_id + 1
                self.counters.published(messages, len(append.data), started)
                if append.dispatch is not None:
                    self.ml.cache.annotate(outcome, append.dispatch)
                result((outcome, False))

        return finish

    # ---- reading ------------------------------------------------------------------------------

    def last_entry(self) -> tuple[Position, entry_codec.Entry] | None:
        """The last confirmed entry, parsed (None: the topic has none)."""
        end = self.ml.last_confirmed()
        if end is None:
            return None
        ((_, data),) = self.ml.read(end, 1)
        return end, entry_codec.parse(data, verify_checksum=False)

    def first_published_at(self, publish_time_ms: int) -> Position | None:
        """The first entry published at or after the time, for a seek or a cursor reset by time
        (None: the first entry; a scan, as the reference keeps no time index)."""
        position, last = self.ml.first_position(), self.ml.last_confirmed()
        while position is not None and last is not None and position <= last:
            batch = self.ml.read(position, 500)
            if not batch:
                break
            for pos, data in batch:
                if entry_codec.parse(data, verify_checksum=False).metadata.publish_time >= publish_time_ms:
                    return pos
            position = self.ml.next_position(batch[-1][0])
        return None if last is None else Position(last.ledger_id, last.entry_id + 1)

    def last_published_before(self, publish_time_ms: int, after: Position | None) -> Position | None:
        """The last entry after `after` (None: from the first) published before the time (None: none);
        a scan from `after`, as the reference keeps no time index."""
        position = self.ml.first_position() if after is None else self.ml.next_position(after)
        last, found = self.ml.last_confirmed(), None
        while position is not None and last is not None and position <= last:
            batch = self.ml.read(position, 500)
            if not batch:
                break
            for pos, data in batch:
                if entry_codec.parse(data, verify_checksum=False).metadata.publish_time >= publish_time_ms:
                    return found
                found = pos
            position = self.ml.next_position(batch[-1][0])
        return found

    def expire_messages(self, seconds: float, subscription: str | None = None) -> list[str]:
        """Message TTL and expireMessages: on each subscription (or the one named), the messages published
        more than `seconds` ago are acknowledged. Returns the subscriptions whose cursor moved."""
        cutoff = int((time.time() - seconds) * 1000)
        moved: list[str] = []
        for name, sub in list(self.subscriptions.items()):
            if subscription is not None and name != subscription:
                continue
            end = self.last_published_before(cutoff, sub.cursor.mark_delete_position)
            if end is not None and sub.expire_to(end):
                moved.append(name)
        if moved:
            self.maybe_trim()
        return moved

    # ---- backlog quota ------------------------------------------------------------------------------

    def _entry_size(self) -> float:
        stats = self.ml.stats()
        return stats["size"] / stats["entries"] if stats["entries"] else 0.0

    def backlog_bytes(self) -> dict[str, int]:
        """Each durable subscription's backlog in bytes (entries times the topic's mean entry size, as
        Pulsar estimates it from ledger sizes)."""
        size = self._entry_size()
        return {n: int(s.cursor.backlog() * size) for n, s in list(self.subscriptions.items()) if s.durable}

    def _oldest_unacknowledged_ms(self) -> int | None:
        """The publish time of the oldest message a durable subscription has not acknowledged."""
        last, oldest = self.ml.last_confirmed(), None
        for sub in list(self.subscriptions.values()):
            position = sub.cursor.first_unacknowledged_from() if sub.durable else None
            if position is None or last is None or position > last:
                continue
            ((_, data),) = self.ml.read(position, 1)
            published = entry_codec.parse(data, verify_checksum=False).metadata.publish_time
            oldest = published if oldest is None else min(oldest, published)
        return oldest

    def _over_quota(self) -> bool:
        quota = self.backlog_quota
        if quota is None:
            return False
        if quota.limit_size >= 0 and any(b > quota.limit_size for b in self.backlog_bytes().values()):
            return True
        if quota.limit_time >= 0:
            oldest = self._oldest_unacknowledged_ms()
            return oldest is not None and time.time() * 1000 - oldest > quota.limit_time * 1000
        return False

    def check_backlog_quota(self) -> None:
        """A new producer, with the backlog over the quota: refused as the policy says (hold: retriable)."""
        if not self._over_quota():
            return
        assert self.backlog_quota is not None
        limit, policy = self.backlog_quota.limit_size, self.backlog_quota.policy
        message = f"Cannot create producer on topic with backlog quota exceeded ({limit} bytes) on {self.name}"
        if policy == "producer_request_hold":
            raise ProducerBlockedQuotaExceededError(message)
        if policy == "producer_exception":
            raise ProducerBlockedQuotaExceededException(message)

    def handle_exceeded_backlog_quota(self) -> None:
        """Pulsar's periodic check (BrokerService.monitorBacklogQuotas, then BacklogQuotaManager's
        handleExceededBacklogQuota): eviction skips the oldest messages; producer_request_hold and
        producer_exception disconnect the producers already attached, so that their clients reconnect and
        their PRODUCER meets `check_backlog_quota` (hold: the client retries, its sends wait; exception:
        the client fails its pending sends)."""
        quota = self.backlog_quota
        if quota is None:
            return
        if quota.policy == "consumer_backlog_eviction":
            self.evict_backlog()
        elif quota.policy in ("producer_request_hold", "producer_exception") and self._over_quota():
            self.disconnect_producers()

    def disconnect_producers(self) -> int:
        """Close every attached producer (Pulsar's Producer.disconnect: CLOSE_PRODUCER to its client, which
        creates it again). Returns how many were closed."""
        with self.lock:
            closing = [(name, attached[0], self._fence.get(name)) for name, attached in self.attached.items()]
        for name, owner, close in closing:
            self.detach_producer(name, owner)
            if close is not None:
                close()
        if closing:
            log.info("backlog quota exceeded on %s: %d producer(s) disconnected", self.name, len(closing))
        return len(closing)

    def evict_backlog(self) -> list[str]:
        """consumer_backlog_eviction: the oldest messages of each subscription over the quota are skipped
        (acknowledged) until its backlog fits. Returns the subscriptions moved."""
        quota = self.backlog_quota
        if quota is None or quota.policy != "consumer_backlog_eviction":
            return []
        moved = self.expire_messages(quota.limit_time) if quota.limit_time >= 0 else []  # older than the limit
        if quota.limit_size < 0:
            return moved
        size = self._entry_size()
        for name, sub in list(self.subscriptions.items()):
            backlog = sub.cursor.backlog() if sub.durable else 0
            if not size or backlog * size <= quota.limit_size:
                continue
            skip = backlog - int(quota.limit_size // size)
            view = self.ml.view()
            start = sub.cursor.mark_delete_position
            positions = view.positions(None if start is None else view.next_position(start))
            last = None
            for _, position in zip(range(skip), positions, strict=False):
                last = position
            if last is not None and sub.expire_to(last):
                moved.append(name)
        if moved:
            self.maybe_trim()
        return moved

    # ---- termination -------------------------------------------------------------------------

    def terminate(self) -> Position:
        """Pulsar's terminate: no more messages. New sends and producers are refused (TopicTerminatedError),
        the attached producers are closed (they come back to that refusal), adds already with the
        bookies finish first; consumers get REACHED_END_OF_TOPIC once they read the last entry. Kept
        across owners. Returns the last entry (-1:-1: the topic is empty); again the same when repeated."""
        with self.lock:
            if self.closed:
                raise ServiceNotReady(f"topic {self.name} is closing; look it up again and retry")
            if self.terminated is not None and self.terminated != _TERMINATING:
                return self.terminated
            self.terminated = _TERMINATING  # publish_entries refuses from now on
            closing = list(self._fence.values()) + list(self._waiting_fence.values())
            self.attached.clear()
            self.access_modes.clear()
            self.producer_info.clear()
            self._fence.clear()
            self._waiting.clear()
            self._waiting_fence.clear()
            self._waiting_info.clear()
        deadline = time.monotonic() + TERMINATE_DRAIN_S
        while time.monotonic() < deadline:
            with self._step_lock:
                if not self._steps and not self._waiting_adds:
                    break
            time.sleep(0.01)
        last = self.ml.last_confirmed() or Position(-1, -1)
        self.service.store_terminated(self.name, last)
        with self.lock:
            self.terminated = last
        log.info("terminated %s at %s", self.name, last)
        for close in closing:
            close()
        for sub in list(self.subscriptions.values()):
            sub.wake()  # caught-up consumers learn they reached the end
        return last

    # ---- admin on subscriptions ----------------------------------------------------------------

    def subscription(self, sub_name: str) -> Subscription | None:
        """The subscription, also a durable one with no consumer since the topic loaded (from its cursor)."""
        with self.lock:
            return self.subscriptions.get(sub_name)

    def create_subscription(self, sub_name: str, start: Position | None | bool) -> Subscription:
        """Pulsar's PUT subscription: a durable subscription without consumers, reading from `start`
        (None: the first entry; True: after the last). Its type is its first consumer's. AlreadyExists
        when it does."""
        if not sub_name:
            raise BrokerError("a subscription needs a name")
        check_not_reserved(sub_name)
        with self.lock:
            if self.closed:
                raise ServiceNotReady(f"topic {self.name} is closing; look it up again and retry")
            if self.subscription(sub_name) is not None:
                raise namespaces.AlreadyExists(f"Subscription already exists for topic: {sub_name}")
            cursor = self.ml.open_cursor(sub_name, initial="latest" if start is True else "earliest")
            if isinstance(start, Position):
                cursor.reset(start)
            sub = Subscription(self, sub_name, cursor, SubscriptionType.EXCLUSIVE, self.name.partition or 0)
            self.subscriptions[sub_name] = sub
            return sub

    def last_message_id(self) -> MessageId | None:
        last = self.last_entry()
        if last is None:
            return None
        end, entry = last
        return MessageId(end.ledger_id, end.entry_id, entry.num_messages - 1)

    # ---- subscriptions -----------------------------------------------------------------------

    def subscribe(
        self,
        sub_name: str,
        sub_type: SubscriptionType,
        earliest: bool,
        consumer: int,
        name: str,
        sink: ConsumerSink,
        reader_start: Position | None | bool = False,
        key_shared: KeySharedMeta | None = None,
        read_compacted: bool = False,
    ) -> Subscription:
        """Attach a consumer. reader_start (not False): a non-durable subscription (a reader) starting
        at that position inclusive (None: the first entry; True: after the last one)."""
        if not sub_name:
            raise BrokerError("a subscription needs a name")
        check_not_reserved(sub_name)
        if read_compacted and sub_type not in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER):
            raise NotAllowed("readCompacted is only allowed on Exclusive and Failover subscriptions (as Pulsar)")
        with self.lock:
            if self.closed:
                raise ServiceNotReady(f"topic {self.name} is closing; look it up again and retry")
            sub = self.subscriptions.get(sub_name)
            if sub is not None and sub.type is not sub_type:
                if sub.sinks:
                    raise ConsumerBusyError(
                        f"subscription {sub_name} is {sub.type.value}; subscribe with that type or another name"
                    )
                sub = None
            if sub is None:
                cursor: ManagedCursor | NonDurableCursor
                new_cursor = sub_name not in self.ml.cursors()
                if reader_start is False:
                    cursor = self.ml.open_cursor(sub_name, initial="earliest" if earliest else "latest")
                elif reader_start is True:
                    cursor = self.ml.new_non_durable_cursor(self.ml.last_confirmed(), after=True)
                else:
                    assert not isinstance(reader_start, bool)
                    cursor = self.ml.new_non_durable_cursor(reader_start)
                sub = Subscription(self, sub_name, cursor, sub_type, self.name.partition or 0)
                if read_compacted and (reader_start is None or (reader_start is False and earliest and new_cursor)):
                    sub.read_after = None  # from the earliest: the compacted view's first entry, which may
                    # come from a ledger trimmed since
                self.subscriptions[sub_name] = sub
        with sub.lock:
            if not sub.sinks:  # the first consumer chooses (readCompacted is Exclusive and Failover only)
                sub.read_compacted = read_compacted
            sub.sinks[consumer] = sink
            try:
                sub.run(AddConsumer(consumer, name, key_shared))
            except ConsumerBusy as e:
                del sub.sinks[consumer]
                raise ConsumerBusyError(f"subscription {sub_name} on {self.name}: {e}") from e
            except ConsumerAssignError as e:
                del sub.sinks[consumer]
                raise ConsumerAssignRefused(f"subscription {sub_name} on {self.name}: {e}") from e
        return sub

    def remove_consumer(self, sub: Subscription, consumer: int) -> None:
        """A consumer left: its unacknowledged messages go to the others; a reader's subscription goes."""
        sub.sinks.pop(consumer, None)
        sub.run(RemoveConsumer(consumer))
        if not sub.durable and not sub.sinks:
            with self.lock:
                if self.subscriptions.get(sub.name) is sub:
                    del self.subscriptions[sub.name]

    def unsubscribe(self, sub_name: str) -> None:
        check_not_reserved(sub_name)
        with self.lock:
            sub = self.subscriptions.get(sub_name)
            if sub is not None and sub.sinks:
                raise ConsumerBusyError(f"subscription {sub_name} has connected consumers; close them first")
            self.subscriptions.pop(sub_name, None)
            self.ml.delete_cursor(sub_name)

    def maybe_trim(self) -> None:
        """Schedule trimming once every cursor has moved past the first ledger (not per ack), or, on a
        topic without cursors and with a finite retention, at every tick (retention alone decides)."""
        slowest, first = self.ml.slowest_mark_delete(), self.ml.first_position()
        if first is None:
            return
        if slowest is None:
            # No subscription holds data back: only retention does, when a finite one is set (the ticker
            # trims). Deviation: with none set, Pulsar deletes such data; the reference keeps it, so
            # readers of topics nobody subscribes to (the workload's, the tests') read it back.
            if self.ml.cursors() or not any(0 < r < math.inf for r in self.ml.retention()):
                return
        elif slowest.ledger_id <= first.ledger_id:
            return
        with self.lock:
            if self._trim_scheduled or self.closed:
                return
            self._trim_scheduled = True
        self.service.executor.submit(self._trim)

    def _trim(self) -> None:
        try:
            trimmed = self.ml.trim()
            if trimmed:
                log.info("trimmed ledgers %s of %s", trimmed, self.name)
        except Exception as e:  # trimming is retried at the next acknowledgement
            log.warning("trimming %s: %s", self.name, e)
        finally:
            with self.lock:
                self._trim_scheduled = False

    def _on_new_entry(self, position: Position) -> None:
        if self.offloader.threshold >= 0 and position.ledger_id != self._current_ledger:
            self._current_ledger = position.ledger_id  # a rollover: maybe more than the threshold is closed now
            self.service.executor.submit(self.offloader.maybe_offload)
        for sub in list(self.subscriptions.values()):
            sub.entries_added()
        for replicator in list(self.replicators.values()):
            replicator.new_entries()

    # ---- geo-replication -----------------------------------------------------------------------

    def set_replication(self, clusters: tuple[str, ...]) -> None:
        """Replicate to the namespace's clusters other than this one: a replicator starts for each new
        remote (from its cursor, kept across restarts and owners); a remote no longer listed has its
        replicator stopped and its cursor deleted, as Pulsar does. Replicator cursors of clusters not
        listed, left from before, are deleted too."""
        local = self.service.cluster
        remotes = {c for c in clusters if c != local}
        with self.lock:
            if self.closed:
                return
            gone = [self.replicators.pop(r) for r in list(self.replicators) if r not in remotes]
            added = []
            for remote in sorted(remotes - set(self.replicators)):
                replicator = TopicReplicator(
                    str(self.name),
                    self.ml,
                    local,
                    remote,
                    functools.partial(self.service.remote_client, remote),
                    self.service.executor,
                )
                self.replicators[remote] = replicator
                added.append(replicator)
            kept = {r.cursor.name for r in self.replicators.values()}
            stale = [n for n in self.ml.cursors() if is_replicator_cursor(n) and n not in kept]
        for replicator in gone:
            replicator.delete()
            log.info("replication of %s to %s stopped", self.name, replicator.remote)
        for name in stale:
            self.ml.delete_cursor(name)
        for replicator in added:
            replicator.start()
            log.info("replicating %s to %s", self.name, replicator.remote)

    def stop_replication(self) -> None:
        """The topic closes here (unload, fenced, lost ownership): its next owner replicates."""
        with self.lock:
            replicators = list(self.replicators.values())
        for replicator in replicators:
            replicator.stop()

    def stats(self) -> dict[str, Any]:
        ml_stats = self.ml.stats()
        subs = {}
        for name, sub in self.subscriptions.items():
            subs[name] = {
                "type": sub.type.value,
                "consumers": len(sub.sinks),
                "unacked": sub.dispatcher.unacked(),
                "backlog": sub.cursor.backlog(),
            }
        return {
            "topic": str(self.name),
            "subscriptions": subs,
            "managed_ledger": ml_stats,
            "replication": {remote: r.stats() for remote, r in sorted(self.replicators.items())},
        }


# While terminating waits for adds in flight: refuses publishing, reaches no end yet.
_TERMINATING = Position(2**63 - 1, 2**63 - 1)


def check_not_reserved(sub_name: str) -> None:
    """A replicator's cursor is not a subscription: acknowledging on it would skip entries never replicated;
    nor is the compaction cursor (its mark-delete is the compaction horizon)."""
    if sub_name == COMPACTION_CURSOR:
        raise ReservedName(f"subscription name {sub_name!r} is reserved for compaction; choose another name")
    if is_replicator_cursor(sub_name):
        raise ReservedName(
            f"subscription name {sub_name!r} is reserved: replicators' cursors are named "
            f"{CURSOR_PREFIX}<cluster>; choose another name"
        )


def consumer_step(sub: Subscription, event: DispatcherEvent) -> None:
    """Run a consumer's request (Flow, Ack, Nack) on its subscription, mapping dispatcher refusals to broker errors."""
    try:
        sub.run(event)
    except UnknownMessageId as e:
        raise UnknownMessageIdError(str(e)) from e
    except SubscriptionError as e:
        raise BrokerError(str(e)) from e


class BrokerService:
    """All topics this broker serves. `ownership` decides which; see impl/broker/ownership.py."""

    def __init__(
        self,
        store: MetadataStore,
        bookkeeper: BookKeeperClient,
        ownership: Any,
        address: str,
        config: BrokerConfig | None = None,
        configuration_store: Callable[[], MetadataStore] | None = None,  # the /admin tree; default `store`
        cluster: str = namespaces.DEFAULT_CLUSTER,
    ) -> None:
        self.store = store
        self._configuration_store = configuration_store
        self.bookkeeper = bookkeeper
        self.ownership = ownership
        self.address = address
        self.cluster = cluster
        self._remote_clients: dict[str, tuple[str, Client]] = {}  # cluster -> (its pulsar:// URL, client)
        self.config = config or BrokerConfig()
        self.authorizer = Authorizer(lambda: self.configuration_store, self.config.security)
        self.schemas = SchemaRegistry(
            SchemaStorage(store, bookkeeper, self.config.managed_ledger), lambda: self.configuration_store
        )
        self.topics: dict[str, Topic] = {}
        # Loads a non-persistent topic (impl/broker/non_persistent.py, which builds on this module's
        # Topic, so the broker plugs it in): (name, create) -> the topic.
        self.load_non_persistent: Callable[[TopicName, bool], Topic] | None = None
        self._loading: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._policy_watches: set[tuple[int, NamespaceName]] = set()  # (store, namespace) being watched
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="dispatch")
        self.offloaders = Offloaders(self.config.offload)  # tiered storage: the configured one, and readers
        self.entry_cache = EntryCacheManager(int(self.config.managed_ledger_cache_size_mb * 1024 * 1024))
        self._consumer_ids = 0
        self._stopping = threading.Event()
        self._ticker = threading.Thread(target=self._tick_loop, name="topic-ticker", daemon=True)
        self._ticker.start()
        self._quota_checker = threading.Thread(target=self._backlog_quota_loop, name="backlog-quota", daemon=True)
        self._quota_checker.start()

    def adopt_session(self, store: MetadataStore, bookkeeper: BookKeeperClient) -> None:
        """The broker's new metadata session and its BookKeeper client (the old session expired). The
        schema registry is rebuilt on them and swapped in one assignment: an operation that took the old
        one keeps it, read and write, and fails SessionExpired rather than mix two sessions."""
        self.store, self.bookkeeper = store, bookkeeper
        self.schemas = self.schemas.on_session(store, bookkeeper)

    @property
    def configuration_store(self) -> MetadataStore:
        """Tenants, namespaces, their policies (docs/geo-replication.md); the metadata store when shared."""
        return self.store if self._configuration_store is None else self._configuration_store()

    def _tick_loop(self) -> None:
        """Time passes for every topic: roll idle ledgers over by age (Pulsar's periodic check), trim."""
        while not self._stopping.wait(TICK_INTERVAL_S):
            for topic in list(self.topics.values()):
                topic.counters.roll()
                if not topic.name.persistent:
                    continue  # nothing stored: nothing to roll over, expire or trim
                try:
                    topic.ml.tick()
                    if topic.message_ttl_s > 0:
                        topic.expire_messages(topic.message_ttl_s)
                    topic.maybe_trim()
                    topic.compactor.maybe_compact()
                    topic.offloader.sweep()  # bookie copies of offloaded ledgers past the deletion lag
                    topic.offloader.maybe_offload()
                except Exception as e:  # a fenced or closing topic: its owner handles it
                    log.debug("tick of %s: %s", topic.name, e)

    def _backlog_quota_loop(self) -> None:
        """Pulsar's monitorBacklogQuotas, every backlogQuotaCheckIntervalInSeconds: each persistent topic
        over its quota is handled as its policy says (a new producer is checked when it comes)."""
        while not self._stopping.wait(self.config.backlog_quota_check_interval_s):
            for topic in list(self.topics.values()):
                if not topic.name.persistent:
                    continue  # nothing kept: no backlog
                try:
                    topic.handle_exceeded_backlog_quota()
                except Exception as e:  # a fenced or closing topic: its owner handles it
                    log.debug("backlog quota check of %s: %s", topic.name, e)

    def managed_ledger_config(self, name: TopicName) -> ManagedLedgerConfig:
        """The broker's managed-ledger settings, with the namespace's retention policy when it sets one."""
        try:
            retention = namespaces.get_policies(self.configuration_store, name.namespace_name).retention
        except (namespaces.AdminError, MetadataError):
            return self.config.managed_ledger
        minutes, size_mb = self._retention(retention)
        return dataclasses.replace(self.config.managed_ledger, retention_minutes=minutes, retention_size_mb=size_mb)

    def _retention(self, retention: namespaces.RetentionPolicy) -> tuple[float, float]:
        """(minutes, MB) to keep: the policy's (-1 = unlimited), or the broker's when it sets none."""
        if retention.time_minutes == 0 and retention.size_mb == 0:
            return self.config.managed_ledger.retention_minutes, self.config.managed_ledger.retention_size_mb

        def limit(value: int) -> float:
            return math.inf if value == -1 else float(value)

        return limit(retention.time_minutes), limit(retention.size_mb)

    def _watch_policies(self, namespace: NamespaceName) -> None:
        """Follow the namespace's policies while topics of it are loaded here: a change of retention or
        deduplication applies to them at once, as in Pulsar (a watch fires once: it is set again)."""
        key = (id(self.configuration_store), namespace)
        with self._lock:
            if key in self._policy_watches:
                return
            self._policy_watches.add(key)

        def changed(_event: object) -> None:
            with self._lock:
                self._policy_watches.discard(key)
            if not self._stopping.is_set():
                self.executor.submit(self._apply_policies, namespace)

        try:
            namespaces.get_policies(self.configuration_store, namespace, watch=changed)
        except (namespaces.AdminError, MetadataError):
            with self._lock:
                self._policy_watches.discard(key)

    def _apply_policies(self, namespace: NamespaceName) -> None:
        loaded = [
            t
            for t in list(self.topics.values())
            if t.name.namespace_name == namespace and not t.closed and t.name.persistent
        ]
        if not loaded:
            return  # nothing to follow any more; the next load watches again
        try:
            policies = namespaces.get_policies(self.configuration_store, namespace, local_cluster=self.cluster)
        except (namespaces.AdminError, MetadataError) as e:
            log.debug("policies of %s: %s", namespace, e)
            return
        finally:
            self._watch_policies(namespace)
        minutes, size_mb = self._retention(policies.retention)
        dedup = self.config.deduplication if policies.deduplication is None else policies.deduplication
        for topic in loaded:
            try:
                own = self.topic_policies(topic.name).get("deduplicationEnabled")
            except (MetadataError, ValueError):
                own = None
            topic.message_ttl_s = policies.message_ttl_seconds or 0
            topic.backlog_quota = policies.backlog_quota
            topic.compactor.threshold = policies.compaction_threshold or 0
            topic.offloader.threshold = -1 if policies.offload_threshold is None else policies.offload_threshold
            topic.ml.set_retention(minutes, size_mb)
            topic.set_deduplication(own if isinstance(own, bool) else dedup)
            try:
                topic.set_replication(policies.replication_clusters)
            except Exception as e:  # the topic closed meanwhile, or a cursor could not be written
                log.warning("replication of %s: %s", topic.name, e)

    def replication_clusters(self, namespace: NamespaceName) -> tuple[str, ...]:
        policies = namespaces.get_policies(self.configuration_store, namespace, local_cluster=self.cluster)
        return policies.replication_clusters

    def remote_client(self, cluster: str) -> Client:
        """The client of another cluster of the instance, at its ClusterData's pulsar:// URL (ClientError
        when the configuration store does not know it, or it has none)."""
        try:
            url = namespaces.get_cluster(self.configuration_store, cluster).broker_service_url
        except (namespaces.AdminError, MetadataError) as e:
            raise ClientError(f"cluster {cluster}: {e}") from e
        if not url:
            raise ClientError(f"cluster {cluster} has no brokerServiceUrl; set one with `admin clusters update`")
        with self._lock:
            known = self._remote_clients.get(cluster)
            if known is not None and known[0] == url:
                return known[1]
            client = Client(url, timeout_s=REMOTE_TIMEOUT_S)
            self._remote_clients[cluster] = (url, client)
        if known is not None:
            known[1].close()
        return client

    def auto_topic_creation(self, name: TopicName) -> namespaces.AutoTopicCreation:
        """The namespace's override, else the broker's default (allowed, non-partitioned)."""
        try:
            policy = namespaces.get_policies(self.configuration_store, name.namespace_name).auto_topic_creation
        except (namespaces.AdminError, MetadataError):
            policy = None
        return policy or namespaces.AutoTopicCreation()

    def may_create(self, name: TopicName) -> bool:
        """Whether using `name` creates it: partitions of a partitioned topic always do."""
        return self.auto_topic_creation(name).allow or (
            name.is_partition and namespaces.get_partitions(self.configuration_store, name.base) > 0
        )

    def backlog_quota_in(self, name: TopicName) -> namespaces.BacklogQuota | None:
        try:
            return namespaces.get_policies(self.configuration_store, name.namespace_name).backlog_quota
        except (namespaces.AdminError, MetadataError):
            return None

    def compaction_threshold_in(self, name: TopicName) -> int:
        """The namespace's compaction threshold in bytes (0: no automatic compaction)."""
        try:
            threshold = namespaces.get_policies(self.configuration_store, name.namespace_name).compaction_threshold
        except (namespaces.AdminError, MetadataError):
            threshold = None
        return threshold or 0

    def offload_threshold_in(self, name: TopicName) -> int:
        """The namespace's offloadThresholdInBytes (-1: no automatic offload)."""
        try:
            threshold = namespaces.get_policies(self.configuration_store, name.namespace_name).offload_threshold
        except (namespaces.AdminError, MetadataError):
            threshold = None
        return -1 if threshold is None else threshold

    def message_ttl_in(self, name: TopicName) -> int:
        """The namespace's message TTL in seconds (0: none)."""
        try:
            ttl = namespaces.get_policies(self.configuration_store, name.namespace_name).message_ttl_seconds
        except (namespaces.AdminError, MetadataError):
            ttl = None
        return ttl or 0

    @staticmethod
    def _topic_policies_path(name: TopicName) -> str:
        return TOPIC_POLICIES_ROOT + name.managed_ledger_path[len("/managed-ledgers") :]

    def topic_policies(self, name: TopicName) -> dict[str, Any]:
        """The topic's own policies ({} when it has none)."""
        try:
            data, _ = self.store.get(self._topic_policies_path(name))
        except NoNode:
            return {}
        policies = json.loads(data)
        return policies if isinstance(policies, dict) else {}

    def set_topic_policy(self, name: TopicName, key: str, value: Any) -> None:
        """Set one of the topic's own policies (None: remove it, the namespace's applies again)."""
        path = self._topic_policies_path(name)
        policies = self.topic_policies(name)
        if value is None:
            policies.pop(key, None)
        else:
            policies[key] = value
        data = json.dumps(policies, sort_keys=True).encode()
        try:
            self.store.set(path, data)
        except NoNode:
            self.store.ensure_path(path.rsplit("/", 1)[0])
            self.store.create(path, data)

    def forget_topic(self, name: TopicName) -> None:
        """The topic is deleted: a topic of the same name created later is neither terminated nor has
        its policies."""
        for root in (TERMINATED_ROOT, TOPIC_POLICIES_ROOT):
            with contextlib.suppress(NoNode):
                self.store.delete(root + name.managed_ledger_path[len("/managed-ledgers") :])

    def deduplication_in(self, name: TopicName) -> bool:
        """Whether the topic's producers are de-duplicated: its own policy, else its namespace's, else the
        broker's setting. Read when the topic loads; the admin calls that change them apply them at once."""
        try:
            own = self.topic_policies(name).get("deduplicationEnabled")
        except (MetadataError, ValueError):
            own = None
        if isinstance(own, bool):
            return own
        try:
            policy = namespaces.get_policies(self.configuration_store, name.namespace_name).deduplication
        except (namespaces.AdminError, MetadataError):
            policy = None
        return self.config.deduplication if policy is None else policy

    def delayed_delivery_in(self, name: TopicName) -> DelayedDelivery:
        """The topic's delayed-delivery policy: its namespace's, else the broker's (Pulsar's
        delayedDeliveryEnabled=true, tick 1 s). Read when the topic loads."""
        try:
            policy = namespaces.get_policies(self.configuration_store, name.namespace_name).delayed_delivery
        except (namespaces.AdminError, MetadataError):
            policy = None
        if policy is None:
            return self.config.delayed_delivery
        return DelayedDelivery(policy.active, policy.tick_time_ms)

    def load_terminated(self, name: TopicName) -> Position | None:
        """The last entry of the topic when it was terminated (by any owner), else None."""
        try:
            data, _ = self.store.get(TERMINATED_ROOT + name.managed_ledger_path[len("/managed-ledgers") :])
        except NoNode:
            return None
        except MetadataError as e:  # never load a terminated topic as writable
            raise ServiceNotReady(f"cannot read whether {name} is terminated: {e}; retry") from e
        ledger, _, entry = data.decode().partition(":")
        return Position(int(ledger), int(entry))

    def store_terminated(self, name: TopicName, last: Position) -> None:
        path = TERMINATED_ROOT + name.managed_ledger_path[len("/managed-ledgers") :]
        data = f"{last.ledger_id}:{last.entry_id}".encode()
        try:
            self.store.set(path, data)
        except NoNode:
            self.store.ensure_path(path.rsplit("/", 1)[0])
            self.store.create(path, data)

    @staticmethod
    def _epoch_path(name: TopicName) -> str:
        return TOPIC_EPOCHS_ROOT + name.managed_ledger_path[len("/managed-ledgers") :]

    def load_topic_epoch(self, name: TopicName) -> int | None:
        """The topic epoch the topic's last owner stored (None: no exclusive producer yet)."""
        try:
            data, _ = self.store.get(self._epoch_path(name))
            return int(data.decode())
        except NoNode:
            return None
        except (MetadataError, ValueError) as e:
            log.warning("topic epoch of %s unreadable (%s): starting again", name, e)
            return None

    def store_topic_epoch(self, name: TopicName, epoch: int) -> None:
        """Best effort: a failed write is logged; the epoch then lives only in this broker's memory."""
        path = self._epoch_path(name)
        try:
            try:
                self.store.set(path, str(epoch).encode())
            except NoNode:
                self.store.ensure_path(path.rsplit("/", 1)[0])
                self.store.create(path, str(epoch).encode())
        except MetadataError as e:
            log.warning("storing the topic epoch %d of %s failed: %s", epoch, name, e)

    def next_consumer_id(self) -> int:
        with self._lock:
            self._consumer_ids += 1
            return self._consumer_ids

    # ---- ownership ---------------------------------------------------------------------------

    def lookup(self, topic: str, authoritative: bool = False) -> tuple[bool, str, bool]:
        """(redirect, broker, authoritative): connect here, or ask `broker` (passing `authoritative` on)."""
        name = parse_topic(topic)
        result = self.ownership.lookup(name, authoritative)
        return result.kind == "redirect", result.broker_address, result.authoritative

    def check_owner(self, name: TopicName) -> None:
        redirect, broker, _ = self.lookup(str(name))
        if redirect:
            raise NotOwner(f"{name} is served by {broker}; look it up again")

    def loading_lock(self, key: str) -> threading.Lock:
        """The lock a topic is loaded under: one load at a time per topic."""
        with self._lock:
            return self._loading.setdefault(key, threading.Lock())

    def topic(self, topic: str, create: bool = False) -> Topic:
        """The loaded topic, loading it (takeover: recover and fence the last ledger) if needed. A topic that
        does not exist is created when `create` (the admin API) or the namespace's auto creation allows."""
        name = parse_topic(topic)
        if not name.persistent:
            if self.load_non_persistent is None:
                raise InvalidName(f"{name}: this broker serves no non-persistent topics")
            return self.load_non_persistent(name, create)
        key = str(name)
        existing = self.topics.get(key)
        if existing is not None and not existing.closed:
            return existing
        self.check_owner(name)
        with self.loading_lock(key):
            existing = self.topics.get(key)
            if existing is not None and not existing.closed:
                return existing
            self.ownership.check_namespace(name)
            if not create and not self.may_create(name) and self.store.exists(name.managed_ledger_path) is None:
                raise TopicNotFound(f"Topic {name} does not exist (auto topic creation is off in its namespace)")
            try:
                ml = ManagedLedger.open(
                    name.managed_ledger_name,
                    self.store,
                    self.bookkeeper,
                    self.managed_ledger_config(name),
                    cache=self.entry_cache,
                )
                ml.offloaders = self.offloaders  # before anything reads it: offloaded ledgers read from their copy
            except ManagedLedgerFencedError as e:
                raise ServiceNotReady(f"{name} is being taken over: {e}; retry") from e
            except MetadataError as e:
                raise ServiceNotReady(f"cannot load {name}: {e}; retry") from e
            try:
                loaded = Topic(name, ml, self)
            except ServiceNotReady:
                ml.close()
                raise
            try:  # before any producer attaches: the replicators' cursors start at the latest entry
                loaded.set_replication(self.replication_clusters(name.namespace_name))
            except (namespaces.AdminError, MetadataError, ManagedLedgerError) as e:
                loaded.stop_replication()
                ml.close()
                raise ServiceNotReady(f"cannot start the replication of {name}: {e}; retry") from e
            self.topics[key] = loaded
            self._watch_policies(name.namespace_name)
            log.info("loaded %s", name)
            return loaded

    def topic_fenced(self, topic: Topic) -> None:
        """The managed ledger is FENCED for good: close the topic (a new lookup may reload it)."""
        with topic.lock:
            if topic.closed:
                return
            topic.closed = True
        self.topics.pop(str(topic.name), None)
        topic.offloader.close()
        topic.stop_replication()
        topic.close_attached()
        log.warning("topic %s fenced: another broker took it over; closed", topic.name)

    def unload_topics(self, predicate: Callable[[TopicName], bool], graceful: bool) -> list[str]:
        """Close matching topics. graceful=False (session lost): drop them without writing anything."""
        unloaded = []
        for key, topic in list(self.topics.items()):
            if not predicate(topic.name):
                continue
            with topic.lock:
                topic.closed = True
            self.topics.pop(key, None)
            if topic.name.persistent:
                topic.offloader.close()
            topic.stop_replication()
            topic.close_attached()
            if graceful and topic.name.persistent:  # a non-persistent topic's state just goes
                try:
                    topic.ml.close()
                except Exception as e:  # closing is best effort: the next owner recovers the ledger
                    log.warning("closing %s: %s", key, e)
            unloaded.append(key)
        return unloaded

    def close(self) -> None:
        self._stopping.set()
        self.unload_topics(lambda _n: True, graceful=True)
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.offloaders.close()
        with self._lock:
            clients, self._remote_clients = list(self._remote_clients.values()), {}
        for _url, client in clients:
            client.close()
