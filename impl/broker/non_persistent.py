"""Non-persistent topics (`non-persistent://`): messages held in memory on the owning broker only.

As Pulsar's NonPersistentTopic: a published entry is confirmed at once (no managed ledger, no bookie
write) with the message id Pulsar gives it, ledger 0 entry 0, and offered once to every
subscription; each hands it to one connected consumer with permits or drops it and counts the drop
(impl/broker/non_persistent_dispatcher.py). Lookup and ownership are the persistent topics': the
bundle's owner serves the topic. Unloading it drops everything it held (subscriptions, drop counts);
the producers and consumers reconnect to the next owner. Partitions of a partitioned non-persistent
topic are non-persistent topics of their own. Persistent-only operations (seek, a cursor reset, the
last message id, message expiry) are refused with NotAllowed. docs/non-persistent.md says where
this differs from Pulsar.

`NonPersistentTopic` is a `Topic` (impl/broker/service.py) for what the two share, producers and
their access modes, and replaces everything that touches storage.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from impl.broker import namespaces
from impl.broker.dispatcher import (
    ActiveChanged,
    AddConsumer,
    ConsumerAssignError,
    ConsumerBusy,
    KeySharedMeta,
    Message,
    SubscriptionType,
    Writable,
)
from impl.broker.errors import (
    BrokerError,
    ConsumerBusyError,
    NotAllowed,
    ServiceNotReady,
    TopicNotFound,
)
from impl.broker.errors import ConsumerAssignError as ConsumerAssignRefused
from impl.broker.ledger_list import Position
from impl.broker.non_persistent_dispatcher import Dropped, Entry, NonPersistentDispatcher, Publish, Send
from impl.broker.non_persistent_dispatcher import Event as DispatcherEvent
from impl.broker.service import (
    Append,
    BrokerService,
    ConsumerSink,
    PublishDone,
    Published,
    Topic,
    check_not_reserved,
)
from impl.broker.topic_stats import Rate, TopicCounters
from impl.metadata.naming import NON_PERSISTENT, NamespaceName, TopicName
from impl.protocol import entry_codec
from impl.protocol.entry_codec import CorruptEntry
from impl.protocol.message_id import MessageId

# Pulsar confirms and delivers every non-persistent message as ledger 0, entry 0 (NonPersistentTopic).
POSITION = Position(0, 0)
MESSAGE_ID = MessageId(0, 0, -1)


class NonPersistentCounters(TopicCounters):
    """The topic's counters and its subscriptions' drops (messages, bytes and their rates)."""

    def __init__(self) -> None:
        super().__init__()
        self.drops: dict[str, Rate] = {}  # subscription -> its dropped messages

    def dropped(self, subscription: str, messages: int, size: int) -> None:
        with self._lock:
            self.drops.setdefault(subscription, Rate()).add(messages, size)

    def roll(self) -> None:
        super().roll()
        now = time.monotonic()
        with self._lock:
            for rate in self.drops.values():
                rate.roll(now)


class NonPersistentSubscription:
    """One subscription of a non-persistent topic: its dispatcher core, driven under one lock. It
    stays (dropping what is published to it) until unsubscribed or the topic unloads, as Pulsar's;
    a reader's (non-durable) goes with its consumer."""

    def __init__(self, topic: NonPersistentTopic, name: str, sub_type: SubscriptionType, durable: bool) -> None:
        self.topic = topic
        self.name = name
        self.durable = durable
        self.dispatcher = NonPersistentDispatcher(sub_type, topic.name.partition or 0)
        self.sinks: dict[int, ConsumerSink] = {}
        self.lock = threading.RLock()
        self.cursor = None  # nothing is stored: no cursor
        self.read_compacted = False  # nothing is compacted either

    @property
    def type(self) -> SubscriptionType:
        return self.dispatcher.type

    def run(self, event: DispatcherEvent) -> None:
        with self.lock:
            outputs = self.dispatcher.step(event)
            for out in outputs:
                if isinstance(out, Send):
                    sink = self.sinks.get(out.consumer)
                    if sink is None:
                        continue
                    # One entry per delivery: every entry has the same id, so they must not be grouped.
                    sink.deliver([(Message(MESSAGE_ID, out.entry.key, b"", entry=out.entry.data), 0)])
                    self.topic.counters.dispatched(out.entry.messages, len(out.entry.data))
                    if sink.over_bound():  # its connection is full: what comes next for it is dropped
                        self.dispatcher.step(Writable(out.consumer, False))
                elif isinstance(out, Dropped):
                    self.topic.counters.dropped(self.name, out.entry.messages, len(out.entry.data))
                elif isinstance(out, ActiveChanged):
                    sink = self.sinks.get(out.consumer)
                    if sink is not None:
                        sink.set_active(out.active)

    def reset(self, _start: Position | None) -> list[ConsumerSink]:
        raise NotAllowed(f"seek and cursor reset are not supported on non-persistent topic {self.topic.name}")


class NonPersistentTopic(Topic):
    """A `non-persistent://` topic on its owning broker; see the module docstring."""

    def __init__(self, name: TopicName, service: BrokerService) -> None:  # no super(): there is no ledger
        self.name = name
        self.service = service
        self.subscriptions: dict[str, NonPersistentSubscription] = {}  # type: ignore[assignment]
        self.lock = threading.RLock()
        self.closed = False
        self.last_sequence: dict[str, int] = {}  # never filled: no de-duplication, as Pulsar
        self._producer_seq = 0
        self.attached: dict[str, tuple[object, int, bool]] = {}
        self.access_modes = {}
        self.producer_info = {}
        self.terminated = None  # Pulsar terminates persistent topics only
        self._waiting = []
        self._fence = {}
        self._waiting_fence = {}
        self._waiting_info = {}
        self.topic_epoch: int | None = None  # in memory only, as Pulsar's non-persistent topics
        self.close_watchers: dict[object, Callable[[], None]] = {}
        self.counters: NonPersistentCounters = NonPersistentCounters()
        self.replicators = {}
        self.message_ttl_s = 0
        self.backlog_quota = None
        self.deduplication = False

    # ---- producers ---------------------------------------------------------------------------

    def _next_epoch(self, asked: int | None) -> int:
        self.topic_epoch = asked if asked is not None else (-1 if self.topic_epoch is None else self.topic_epoch) + 1
        return self.topic_epoch

    def set_deduplication(self, enabled: bool) -> None:
        pass  # Pulsar de-duplicates persistent topics only

    def check_backlog_quota(self) -> None:
        pass  # nothing is kept: no backlog

    def publish_with_callbacks(
        self, producer: str, appends: list[Append], callbacks: list[PublishDone]
    ) -> list[BrokerError | None]:
        """`publish_entries`, each entry's callback called before this returns (confirmed at once)."""
        refusals: list[BrokerError | None] = []
        for result, callback in zip(self.publish_entries(producer, appends), callbacks, strict=True):
            if isinstance(result, BrokerError):
                refusals.append(result)
            else:
                refusals.append(None)
                callback(result.result())
        return refusals

    def publish_entries(self, producer: str, appends: list[Append]) -> list[Published]:
        """Confirm each entry at once (ledger 0, entry 0) and offer it to every subscription. An entry
        refused (too large, topic closing) gets its error, and so does every later one."""
        results: list[Published] = []
        refusal: BrokerError | None = None
        with self.lock:
            subs = list(self.subscriptions.values())
        keyed = any(s.type is SubscriptionType.KEY_SHARED for s in subs)
        for append in appends:
            if refusal is None:
                try:
                    self._check_entry(append)
                    parsed = entry_codec.parse(append.data, verify_checksum=False)
                except BrokerError as e:
                    refusal = e
                except CorruptEntry as e:
                    refusal = BrokerError(f"the message is malformed: {e}")
            if refusal is not None:
                results.append(refusal)
                continue
            key = entry_codec.keys(parsed)[0] if keyed and parsed.num_messages else ""
            entry = Entry(append.data, parsed.num_messages, key)
            self.counters.published(entry.messages, len(append.data), time.monotonic())
            for sub in subs:
                sub.run(Publish(entry))
            done: Future[tuple[Position | None, bool]] = Future()
            done.set_result((POSITION, False))
            results.append(done)
        return results

    # ---- subscriptions -----------------------------------------------------------------------

    def subscribe(  # type: ignore[override]
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
    ) -> NonPersistentSubscription:
        """Attach a consumer; it receives what is published from now on (no initial position applies)."""
        if not sub_name:
            raise BrokerError("a subscription needs a name")
        if read_compacted:  # Pulsar's words: nothing is kept, so nothing is compacted
            raise NotAllowed("readCompacted only valid on persistent topics")
        check_not_reserved(sub_name)
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
                sub = NonPersistentSubscription(self, sub_name, sub_type, durable=reader_start is False)
                self.subscriptions[sub_name] = sub
        with sub.lock:
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

    def unsubscribe(self, sub_name: str) -> None:
        check_not_reserved(sub_name)
        with self.lock:
            sub = self.subscriptions.get(sub_name)
            if sub is not None and sub.sinks:
                raise ConsumerBusyError(f"subscription {sub_name} has connected consumers; close them first")
            self.subscriptions.pop(sub_name, None)

    # ---- what only a persistent topic has ----------------------------------------------------

    def maybe_trim(self) -> None:
        pass

    def last_entry(self) -> tuple[Position, entry_codec.Entry] | None:
        raise NotAllowed(f"getLastMessageId is not supported on non-persistent topic {self.name}")

    def first_published_at(self, publish_time_ms: int) -> Position | None:
        raise NotAllowed(f"seek and cursor reset are not supported on non-persistent topic {self.name}")

    def expire_messages(self, seconds: float, subscription: str | None = None) -> list[str]:
        raise NotAllowed(f"message expiry is not supported on non-persistent topic {self.name}")

    def evict_backlog(self) -> list[str]:
        return []

    def set_replication(self, clusters: tuple[str, ...]) -> None:
        pass  # geo-replication of non-persistent topics is not implemented (docs/non-persistent.md)

    def stats(self) -> dict[str, Any]:
        return {"topic": str(self.name), "subscriptions": {n: s.type.value for n, s in self.subscriptions.items()}}


def load(service: BrokerService, name: TopicName, create: bool) -> NonPersistentTopic:
    """The loaded topic, created here (on the broker owning its bundle) when it is used: when `create`
    (the admin API), the namespace's auto creation allows, or it is a partition of a partitioned topic."""
    key = str(name)
    existing = service.topics.get(key)
    if isinstance(existing, NonPersistentTopic) and not existing.closed:
        return existing
    service.check_owner(name)
    with service.loading_lock(key):
        existing = service.topics.get(key)
        if isinstance(existing, NonPersistentTopic) and not existing.closed:
            return existing
        service.ownership.check_namespace(name)
        if not create and not service.may_create(name):
            raise TopicNotFound(f"Topic {name} does not exist (auto topic creation is off in its namespace)")
        loaded = NonPersistentTopic(name, service)
        service.topics[key] = loaded
        return loaded


def namespace_topics(service: BrokerService, ns: NamespaceName) -> list[str]:
    """The namespace's non-persistent topics loaded on this broker, and every partition of its
    partitioned non-persistent topics (Pulsar asks every bundle's owner; see docs/non-persistent.md)."""
    found = {
        key
        for key, t in list(service.topics.items())
        if isinstance(t, NonPersistentTopic) and not t.closed and t.name.namespace_name == ns
    }
    store = service.configuration_store
    for topic in namespaces.list_partitioned_topics(store, ns, NON_PERSISTENT):
        found |= {str(topic.partition_name(i)) for i in range(namespaces.get_partitions(store, topic))}
    return sorted(found)


def internal_stats(topic: NonPersistentTopic) -> dict[str, Any]:
    """Pulsar's internal stats of a non-persistent topic: entries added, and a cursor entry per subscription."""
    return {
        "entriesAddedCounter": topic.counters.inbound.messages,
        "numberOfEntries": 0,
        "totalSize": 0,
        "ledgers": [],
        "cursors": {name: {} for name in sorted(topic.subscriptions)},
    }


def _consumer_stats(sub: NonPersistentSubscription, cid: int, sink: ConsumerSink) -> dict[str, Any]:
    """Pulsar's ConsumerStats, as far as a consumer of a non-persistent topic has them (nothing is
    acknowledged or kept for it: no unacked count)."""
    state = sub.dispatcher.consumers.get(cid)
    return {
        "consumerName": state.name if state is not None else f"consumer-{cid}",
        "availablePermits": sub.dispatcher.permits.get(cid, 0),
        "address": getattr(sink, "address", ""),
        "connectedSince": getattr(sink, "connected_since", ""),
        "clientVersion": getattr(sink, "client_version", ""),
        "metadata": dict(getattr(sink, "metadata", {})),
    }


def topic_stats(topic: NonPersistentTopic) -> dict[str, Any]:
    """Pulsar's NonPersistentTopicStats: its TopicStats with `msgDropRate` on each subscription (what it
    dropped for want of a consumer with permits) and on the topic and its publishers (publishes dropped
    over Pulsar's in-flight limit per connection, which is not implemented: 0). Each subscription's
    `msgDropCount` (its drops so far) is the reference's own, as a rate needs a period."""
    topic.counters.roll()
    inbound, outbound = topic.counters.inbound, topic.counters.outbound
    subscriptions = {}
    with topic.lock:
        subs = sorted(topic.subscriptions.items())
    for name, sub in subs:
        drops = topic.counters.drops.get(name) or Rate()
        subscriptions[name] = {
            "msgRateOut": outbound.message_rate if sub.sinks else 0.0,
            "msgThroughputOut": outbound.byte_rate if sub.sinks else 0.0,
            "msgBacklog": 0,
            "unackedMessages": 0,
            "msgRateRedeliver": 0.0,
            "msgDropRate": drops.message_rate,
            "msgDropCount": drops.messages,
            "type": sub.type.value,
            "isDurable": sub.durable,
            "isReplicated": False,
            "consumers": [_consumer_stats(sub, cid, sink) for cid, sink in sorted(sub.sinks.items())],
        }
    publishers = []
    for n, (_owner, epoch, exclusive) in sorted(topic.attached.items()):
        info = topic.producer_info.get(n)
        publishers.append(
            {
                "producerId": info.producer_id if info is not None else -1,
                "producerName": n,
                "accessMode": _mode_name(topic, n, exclusive),
                "epoch": epoch,
                "msgDropRate": 0.0,
                "address": info.address if info is not None else "",
                "connectedSince": info.connected_since if info is not None else "",
                "clientVersion": info.client_version if info is not None else "",
                "metadata": dict(info.metadata) if info is not None else {},
            }
        )
    return {
        "msgRateIn": inbound.message_rate,
        "msgThroughputIn": inbound.byte_rate,
        "msgRateOut": outbound.message_rate,
        "msgThroughputOut": outbound.byte_rate,
        "msgInCounter": inbound.messages,
        "bytesInCounter": inbound.bytes,
        "msgOutCounter": outbound.messages,
        "bytesOutCounter": outbound.bytes,
        "averageMsgSize": inbound.bytes / inbound.messages if inbound.messages else 0.0,
        "msgDropRate": 0.0,  # the publishers' (see above)
        "storageSize": 0,
        "backlogSize": 0,
        "publishers": publishers,
        "subscriptions": subscriptions,
        "replication": {},
        "topicEpoch": topic.topic_epoch,
        "deduplicationStatus": "Disabled",
    }


_ACCESS_MODES = {0: "Shared", 1: "Exclusive", 2: "WaitForExclusive", 3: "ExclusiveWithFencing"}


def _mode_name(topic: NonPersistentTopic, name: str, exclusive: bool) -> str:
    mode = topic.access_modes.get(name)
    return _ACCESS_MODES[mode.value if mode is not None else (1 if exclusive else 0)]
