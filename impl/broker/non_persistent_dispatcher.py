"""The dispatcher of one subscription of a non-persistent topic (pure core).

A non-persistent topic keeps nothing: each entry a producer publishes is offered once to every
subscription, and each subscription hands it at once to one connected consumer that has permits,
or drops it and counts the drop (Pulsar's NonPersistentDispatcher*, `msgDropRate`). Nothing is
redelivered and acknowledgements change nothing.

Who may receive an entry is decided as on a persistent topic, by a persistent `Dispatcher` kept
for its consumer bookkeeping only (it never reads): Exclusive refuses a second consumer, Failover
has one active consumer (ActiveChanged when it changes), Key_Shared gives each key's hash slot to
one consumer (AUTO_SPLIT or STICKY ranges). Shared is round robin over consumers with permits.
As Pulsar, an entry goes to a consumer whose permits are above zero and whose connection is
writable (Writable False: it holds more than its bound for writing), and takes as many permits as
it holds messages (permits may go below zero with a batch); otherwise it is dropped.

Events: AddConsumer, RemoveConsumer, Flow, Writable, Ack and Nack (impl/broker/dispatcher.py's, the
last two are no-ops), and Publish(entry). Outputs: Send(consumer, entry), Dropped(entry) and ActiveChanged.
A refused AddConsumer raises (ConsumerBusy, ConsumerAssignError) before anything changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from impl.broker.dispatcher import (
    Ack,
    ActiveChanged,
    AddConsumer,
    Dispatcher,
    Flow,
    Nack,
    RemoveConsumer,
    SubscriptionError,
    SubscriptionType,
    Writable,
)
from impl.broker.dispatcher import Output as MembershipOutput


@dataclass(frozen=True)
class Entry:
    """One published entry: Pulsar's entry format, its message count and sticky key (Key_Shared)."""

    data: bytes = field(repr=False)
    messages: int = 1
    key: str = ""


@dataclass(frozen=True)
class Publish:
    entry: Entry


@dataclass(frozen=True)
class Send:
    """Output: deliver the entry to the consumer now."""

    consumer: int
    entry: Entry


@dataclass(frozen=True)
class Dropped:
    """Output: no consumer could take the entry; its messages are lost (and counted)."""

    entry: Entry


Event = AddConsumer | RemoveConsumer | Flow | Writable | Ack | Nack | Publish
Output = Send | Dropped | ActiveChanged


class NonPersistentDispatcher:
    """One non-persistent subscription's dispatcher (pure core); see the module docstring."""

    def __init__(self, sub_type: SubscriptionType, partition_index: int = 0) -> None:
        self.type = sub_type
        self._membership = Dispatcher(sub_type, partition_index)
        self.permits: dict[int, int] = {}
        self.unwritable: set[int] = set()  # consumers whose connection is over its bound
        self.dropped = 0  # messages dropped so far
        self.delivered = 0  # messages sent so far
        self._rr = 0

    @property
    def consumers(self) -> Any:
        """The consumers (the persistent bookkeeping's view: each has an always-empty `pending`)."""
        return self._membership.consumers

    @property
    def active_consumer(self) -> int | None:
        return self._membership.active_consumer

    def unacked(self) -> int:
        return 0  # nothing is kept for acknowledgement

    def delayed(self) -> int:
        return 0

    def step(self, event: Event) -> list[Output]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a non-persistent dispatcher event: {event!r}")
        return handler(self, event)

    def _membership_step(self, event: AddConsumer | RemoveConsumer) -> list[Output]:
        outputs: list[MembershipOutput] = self._membership.step(event)
        # With no permits granted to it, the bookkeeping dispatcher never reads nor delivers.
        return [o for o in outputs if isinstance(o, ActiveChanged)]

    def _add_consumer(self, e: AddConsumer) -> list[Output]:
        outputs = self._membership_step(e)
        self.permits[e.consumer] = 0
        return outputs

    def _remove_consumer(self, e: RemoveConsumer) -> list[Output]:
        self.permits.pop(e.consumer, None)
        self.unwritable.discard(e.consumer)
        return self._membership_step(e)

    def _flow(self, e: Flow) -> list[Output]:
        if e.permits <= 0:
            raise SubscriptionError(f"a flow grants a positive number of permits, not {e.permits}")
        if e.consumer in self.permits:
            self.permits[e.consumer] += e.permits
        return []

    def _writable(self, e: Writable) -> list[Output]:
        if e.writable:
            self.unwritable.discard(e.consumer)
        elif e.consumer in self.permits:
            self.unwritable.add(e.consumer)
        return []

    def _ignored(self, _e: Ack | Nack) -> list[Output]:
        return []  # nothing is kept, so nothing is acknowledged or redelivered

    def _publish(self, e: Publish) -> list[Output]:
        target = self._target(e.entry)
        if target is None or self.permits.get(target, 0) <= 0 or target in self.unwritable:
            self.dropped += e.entry.messages
            return [Dropped(e.entry)]
        self.permits[target] -= e.entry.messages
        self.delivered += e.entry.messages
        return [Send(target, e.entry)]

    def _target(self, entry: Entry) -> int | None:
        if not self.permits:
            return None
        if self.type is SubscriptionType.EXCLUSIVE:
            return next(iter(self.consumers))
        if self.type is SubscriptionType.FAILOVER:
            return self.active_consumer
        if self.type is SubscriptionType.KEY_SHARED:
            return self._membership.owner_of(entry.key)
        ids = list(self.consumers)
        for i in range(len(ids)):  # Shared: the next consumer with permits, round robin
            candidate = ids[(self._rr + i) % len(ids)]
            if self.permits.get(candidate, 0) > 0 and candidate not in self.unwritable:
                self._rr = (self._rr + i + 1) % len(ids)
                return candidate
        return None


_HANDLERS: dict[type, Callable[[NonPersistentDispatcher, Any], list[Output]]] = {
    AddConsumer: NonPersistentDispatcher._add_consumer,
    RemoveConsumer: NonPersistentDispatcher._remove_consumer,
    Flow: NonPersistentDispatcher._flow,
    Writable: NonPersistentDispatcher._writable,
    Ack: NonPersistentDispatcher._ignored,
    Nack: NonPersistentDispatcher._ignored,
    Publish: NonPersistentDispatcher._publish,
}
