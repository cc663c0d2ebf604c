"""The dispatcher of one subscription: which consumer gets which message (pure core).

Pulsar's four subscription types differ only in who may receive a message:
- Exclusive: one consumer; a second one is refused (ConsumerBusy).
- Failover: many consumers, one active (the first by name, shifted by the partition index so
  partitions spread over consumers); the others stand by and take over when it leaves.
- Shared: round-robin over consumers that have permits.
- Key_Shared: a message goes to the consumer that holds unacknowledged messages of its key, if
  one does, else to the consumer owning its key's slot: Pulsar's Murmur3 32-bit hash of the sticky
  key (ordering key, else partition key, else "NONE_KEY") modulo 65,536. AUTO_SPLIT (the default)
  gives the first consumer every slot and each new one the lower half of the largest range, as
  Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector; STICKY takes the consumer's own ranges
  (overlaps and ranges outside 0-65,535 refused: ConsumerAssignError). A key whose owner changed
  (a consumer joined or left) stays with its previous consumer until that one has acknowledged it
  (Pulsar's "draining hashes"), so one key is consumed in order by one consumer at a time, unless
  the consumers allow out-of-order delivery. A message whose slot no consumer owns (a STICKY gap)
  waits; up to KEY_SHARED_LOOKAHEAD such waiting messages do not stop others from being read.

Delayed delivery (Shared and Key_Shared only, as Pulsar; other types deliver at once): a message
whose `deliver_at` (ms since the epoch, from its metadata's deliver_at_time) is after the read's
`now_ms` plus the tick is held in the delayed index, not delivered; `Tick(now_ms)` releases the
messages due by then, and `WakeAt` tells the shell when to tick next. As Pulsar's non-strict
in-memory tracker, a message may go out up to one tick early, never later than the next tick once
a consumer has permits. The index is memory only: held messages are unacknowledged on the cursor,
so a reopened subscription reads them again and rebuilds it.

Flow control is by permits: a consumer grants N, and receives at most N messages until it
grants more. A batch entry counts as consumed (its position is acknowledged to the cursor) once
every message of the batch is acknowledged. Key_Shared dispatches the messages of a batch of
several keys one by one (each by its own key); a batch of one key (key-based batching), and any
batch on the other types, goes whole, as Pulsar's dispatchers send it: one `Message` with batch
index WHOLE_ENTRY (-1), which takes as many permits as it holds messages (a consumer with fewer
permits still gets it, and owes the rest), is acknowledged index by index or whole, and is
redelivered whole less the indexes acknowledged (`indexes`).
Unacknowledged messages of a consumer that leaves, and negatively acknowledged ones, are
redelivered (before new messages) with their redelivery count raised.

Pure: the shell (impl/broker/service.py's `Subscription`, fed by impl/broker/listener.py)
gives every input as a typed event to one function, `step(event) -> list[Output]`, reads the
managed ledger, sends to consumers and updates the durable cursor, as the outputs ask:

  AddConsumer(consumer, name, key_shared)
                                a consumer subscribes (ConsumerBusy: a second one on Exclusive, or
                                another Key_Shared mode; ConsumerAssignError: bad STICKY ranges)
  RemoveConsumer(consumer)      it leaves: its unacknowledged messages go to the others
  Flow(consumer, permits)       it grants permits (SubscriptionError unless positive)
  NewEntries                    the managed ledger confirmed new entries
  EntriesRead(messages)         the answer to ReadEntries; ReadFailed: nothing could be read (the
                                shell retries later)
  Ack(consumer, ids, cumulative)  acknowledgements -> AckEntries for the entries now wholly
                                acknowledged (UnknownMessageId for an id never delivered; cumulative
                                refused on Shared and Key_Shared)
  Nack(consumer, ids)           negative acknowledgements: redelivered, their count raised
  Tick(now_ms)                  the clock: delayed messages due by now (plus the tick) are released
  Writable(consumer, writable)  backpressure: while its connection has more queued for writing than
                                its bound the consumer takes nothing (as if it had no permits, which
                                it keeps); writable again, dispatch resumes where it stopped

Outputs: ReadEntries (read up to that many entries after the read position, answer EntriesRead or
ReadFailed), Deliver, AckEntries, ActiveChanged (Failover), WakeAt (send Tick then). A refused input raises before it
changes anything; an event of another type raises TypeError. `consumers`, `active_consumer`,
`unacked()` and `read_ahead(n)` (the ReadEntries that will follow the dispatch of n entries just read, for
the shell to issue that read before dispatching them) are queries.
"""

from __future__ import annotations

import bisect
import enum
import functools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from impl.broker.ledger_list import Position, position_key
from impl.protocol import entry_codec
from impl.protocol.message_id import MessageId
from impl.protocol.murmur3 import pulsar_hash

READ_BATCH = 100  # entries read per ReadEntries at most
RANGE_SIZE = 65536  # Key_Shared hash slots (Pulsar's DEFAULT_RANGE_SIZE, 2 << 15)
NONE_KEY = b"NONE_KEY"  # Pulsar's sticky key of a message without one
# Key_Shared: messages waiting for a consumer that cannot take them now, past which no more is read.
KEY_SHARED_LOOKAHEAD = 1000


class SubscriptionType(enum.Enum):
    EXCLUSIVE = "Exclusive"
    SHARED = "Shared"
    FAILOVER = "Failover"
    KEY_SHARED = "Key_Shared"


class SubscriptionError(Exception):
    """Base of the dispatcher's refusals; each says what to do."""


class ConsumerBusy(SubscriptionError):
    pass


class UnknownMessageId(SubscriptionError):
    pass


class ConsumerAssignError(SubscriptionError):
    """Key_Shared: the consumer cannot be given hash ranges (Pulsar's ConsumerAssignError)."""


class KeySharedMode(enum.Enum):
    AUTO_SPLIT = 0
    STICKY = 1


@dataclass(frozen=True)
class KeySharedMeta:
    """A Key_Shared consumer's policy (SUBSCRIBE's keySharedMeta): STICKY ranges are inclusive slots."""

    mode: KeySharedMode = KeySharedMode.AUTO_SPLIT
    ranges: tuple[tuple[int, int], ...] = ()
    allow_out_of_order: bool = False


def position_of(mid: MessageId) -> Position:
    """The managed-ledger position of the entry that holds a message."""
    return Position(mid.ledger_id, mid.entry_id)


WHOLE_ENTRY = -1  # the batch index of a Message that stands for a whole batch entry


class Message(NamedTuple):
    """A message (or a whole batch entry) for a consumer. A NamedTuple, as MessageId: one is built per
    message read, in C (a frozen dataclass took 1.3 us against 0.4)."""

    id: MessageId
    key: str
    payload: bytes
    properties: tuple[tuple[str, str], ...] = ()
    batch_size: int = 1
    entry: bytes = b""  # the whole entry, as stored (Pulsar's format)
    deliver_at: int = 0  # ms since the epoch (the metadata's deliver_at_time); 0: at once
    # A whole batch entry (id's batch index WHOLE_ENTRY): the indexes still to deliver, when fewer
    # than all (the others were acknowledged); (): every one of its batch_size.
    indexes: tuple[int, ...] = ()

    def __repr__(self) -> str:  # without the entry's bytes
        return (
            f"Message(id={self.id!r}, key={self.key!r}, payload={self.payload[:32]!r}, batch_size={self.batch_size}, "
            f"deliver_at={self.deliver_at}, indexes={self.indexes!r})"
        )

    @property
    def message_count(self) -> int:
        """The messages it stands for: the permits it takes."""
        return (len(self.indexes) or self.batch_size) if self.id.batch_index == WHOLE_ENTRY else 1

    @property
    def last_id(self) -> MessageId:
        """The highest id it stands for (a whole entry's last batch index)."""
        if self.id.batch_index != WHOLE_ENTRY:
            return self.id
        return MessageId(self.id.ledger_id, self.id.entry_id, self.batch_size - 1)


# ---- inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AddConsumer:
    consumer: int
    name: str  # Failover orders consumers by name
    key_shared: KeySharedMeta | None = None  # Key_Shared only; None: AUTO_SPLIT


@dataclass(frozen=True)
class RemoveConsumer:
    consumer: int


@dataclass(frozen=True)
class Flow:
    consumer: int
    permits: int


@dataclass(frozen=True)
class NewEntries:
    """The managed ledger confirmed new entries."""


@dataclass(frozen=True)
class EntriesRead:
    """The answer to ReadEntries: the messages of the entries read (already-acked entries left out)."""

    messages: tuple[Message, ...]
    now_ms: int = 0  # the shell's clock when read: delayed messages are judged against it


@dataclass(frozen=True)
class Tick:
    """The clock, for delayed delivery: release what is due by `now_ms` (plus the tick)."""

    now_ms: int


@dataclass(frozen=True)
class DelayedDelivery:
    """The delayed-delivery policy (Pulsar's delayedDeliveryEnabled and tickTime, in ms)."""

    enabled: bool = True
    tick_ms: int = 1000


@dataclass(frozen=True)
class ReadFailed:
    """The ReadEntries could not be served (bookies unavailable): nothing read; the shell retries."""


@dataclass(frozen=True)
class Ack:
    consumer: int
    ids: tuple[MessageId, ...]
    cumulative: bool = False


@dataclass(frozen=True)
class Nack:
    consumer: int
    ids: tuple[MessageId, ...]


@dataclass(frozen=True)
class Writable:
    """Backpressure from the consumer's connection: False while it has more queued for writing than its
    bound (nothing is given to the consumer), True once it drained."""

    consumer: int
    writable: bool


Event = AddConsumer | RemoveConsumer | Flow | NewEntries | EntriesRead | ReadFailed | Ack | Nack | Tick | Writable


# ---- outputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadEntries:
    """Output: read up to `max_entries` confirmed entries from the read position; answer EntriesRead."""

    max_entries: int


@dataclass(frozen=True)
class Deliver:
    consumer: int
    messages: tuple[tuple[Message, int], ...]  # (message, redelivery count)


@dataclass(frozen=True)
class AckEntries:
    """Output: every message of these entries is acknowledged: acknowledge them on the cursor."""

    positions: tuple[Position, ...]


@dataclass(frozen=True)
class ActiveChanged:
    """Output (failover): `consumer` became active (True) or inactive (False)."""

    consumer: int
    active: bool


@dataclass(frozen=True)
class WakeAt:
    """Output (delayed delivery): send Tick at `at_ms` (ms since the epoch), the next message's time."""

    at_ms: int


Output = ReadEntries | Deliver | AckEntries | ActiveChanged | WakeAt


@dataclass
class _Consumer:
    name: str
    permits: int = 0
    pending: dict[MessageId, Message] = field(default_factory=dict)
    paused: bool = False  # its connection is over its write bound (Writable)

    @property
    def available(self) -> int:
        """The permits it can use now: none while paused."""
        return 0 if self.paused else self.permits


@functools.lru_cache(maxsize=65536)
def key_slot(key: str) -> int:
    """A sticky key's Key_Shared slot, as Pulsar computes it (Murmur3_32Hash % 65,536)."""
    return pulsar_hash(key.encode() if key else NONE_KEY) % RANGE_SIZE


class Dispatcher:
    """One subscription's dispatcher (pure core); see the module docstring."""

    def __init__(
        self, sub_type: SubscriptionType, partition_index: int = 0, delayed: DelayedDelivery | None = None
    ) -> None:
        self.type = sub_type
        self.partition_index = partition_index
        self.delayed_policy = delayed or DelayedDelivery()
        self._delays = self.delayed_policy.enabled and sub_type in (
            SubscriptionType.SHARED,
            SubscriptionType.KEY_SHARED,
        )
        self._delayed: dict[MessageId, Message] = {}  # held until their time
        self._wake_at: int | None = None  # the WakeAt last asked for
        self.consumers: OrderedDict[int, _Consumer] = OrderedDict()
        self._redeliver: dict[MessageId, Message] = {}  # served before new messages, in id order
        self._redelivery_count: dict[MessageId, int] = {}
        self._unacked_in_entry: dict[Position, int] = {}  # batch entry dispatched by message -> messages unacked
        # A whole batch entry delivered and acknowledged in part: its id -> the indexes still unacknowledged.
        self._entry_left: dict[MessageId, set[int]] = {}
        self._reading = False
        self._caught_up = False  # the last read found nothing: wait for new_entries
        self._highest_delivered: MessageId | None = None
        self._active: int | None = None
        self._rr = 0
        self._messages_per_entry = 1  # of the last entry read: a read asks for about as many entries as permits allow
        self._key_holders: dict[str, tuple[int, int]] = {}  # Key_Shared: key -> (consumer, its pending messages)
        self._ks = KeySharedMeta()  # Key_Shared: the subscription's policy (its first consumer's)
        self._split_ends: list[int] = []  # AUTO_SPLIT: sorted range ends; a slot goes to the ceiling one
        self._split_owner: dict[int, int] = {}  # AUTO_SPLIT: range end -> consumer
        self._sticky: list[tuple[int, int, int]] = []  # STICKY: (start, end, consumer), sorted

    # ---- the one entry point -------------------------------------------------------------------

    def step(self, event: Event) -> list[Output]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a dispatcher event: {event!r}")
        return handler(self, event)

    # ---- consumers ---------------------------------------------------------------------------

    def _add_consumer(self, e: AddConsumer) -> list[Output]:
        if self.type is SubscriptionType.EXCLUSIVE and self.consumers:
            raise ConsumerBusy("the exclusive subscription already has a consumer; use Shared or Failover")
        if self.type is SubscriptionType.KEY_SHARED:
            self._assign_ranges(e.consumer, e.name, e.key_shared or KeySharedMeta())
        self.consumers[e.consumer] = _Consumer(e.name)
        return self._update_active() + self._dispatch()

    def _assign_ranges(self, consumer: int, name: str, meta: KeySharedMeta) -> None:
        """Give a Key_Shared consumer its hash ranges, or raise before changing anything."""
        if self.consumers and (meta.mode, meta.allow_out_of_order) != (self._ks.mode, self._ks.allow_out_of_order):
            raise ConsumerBusy(
                f"the Key_Shared subscription's consumers use {self._ks.mode.name} "
                f"(allowOutOfOrderDelivery={self._ks.allow_out_of_order}); subscribe with the same policy"
            )
        if meta.mode is KeySharedMode.STICKY:
            if not meta.ranges:
                raise ConsumerAssignError("Ranges for KeyShared policy must not be empty.")
            taken = list(self._sticky)
            for start, end in meta.ranges:
                if start > end:
                    raise ConsumerAssignError(f"Fixed hash range start > end: [{start}, {end}]")
                if start < 0 or end >= RANGE_SIZE:
                    raise ConsumerAssignError(f"hash range [{start}, {end}] is outside [0, {RANGE_SIZE - 1}]")
                for s0, e0, other in taken:
                    if max(start, s0) <= min(end, e0):
                        who = self.consumers[other].name if other in self.consumers else "itself"
                        raise ConsumerAssignError(
                            f"Range conflict with consumer {who}: [{start}, {end}] overlaps [{s0}, {e0}]"
                        )
                taken.append((start, end, consumer))
            self._sticky = sorted(taken)
        elif not self._split_ends:
            self._split_ends, self._split_owner = [RANGE_SIZE], {RANGE_SIZE: consumer}
        else:
            # Split the largest range (the lowest of equals): the new consumer takes its lower half.
            best, size, low = RANGE_SIZE, 0, 0
            for end in self._split_ends:
                if end - low > size:
                    best, size = end, end - low
                low = end
            if size <= 1:
                raise ConsumerAssignError(
                    f"No more range can assigned to new consumer, assigned consumers {len(self._split_ends)}"
                )
            split = best - (size >> 1)
            bisect.insort(self._split_ends, split)
            self._split_owner[split] = consumer
        if not self.consumers:
            self._ks = meta

    def _release_ranges(self, consumer: int) -> None:
        self._sticky = [r for r in self._sticky if r[2] != consumer]
        mine = [end for end, c in self._split_owner.items() if c == consumer]
        for end in mine:
            i = self._split_ends.index(end)
            del self._split_owner[end]
            del self._split_ends[i]
            if end == RANGE_SIZE and self._split_ends:  # the top range's lower neighbour takes it over
                lower = self._split_ends.pop()
                self._split_owner[RANGE_SIZE] = self._split_owner.pop(lower)
                self._split_ends.append(RANGE_SIZE)

    def _select(self, key: str) -> int | None:
        """Key_Shared: the consumer owning the key's slot (None: no consumer owns it)."""
        slot = key_slot(key)
        if self._ks.mode is KeySharedMode.STICKY:
            for start, end, consumer in self._sticky:
                if start <= slot <= end:
                    return consumer
            return None
        i = bisect.bisect_left(self._split_ends, slot)
        return self._split_owner[self._split_ends[i]] if i < len(self._split_ends) else None

    def _remove_consumer(self, e: RemoveConsumer) -> list[Output]:
        gone = self.consumers.pop(e.consumer, None)
        if gone is None:
            return []
        self._release_ranges(e.consumer)
        for msg in gone.pending.values():
            self._unhold(msg)
            self._requeue(msg)
        return self._update_active() + self._dispatch()

    def _flow(self, e: Flow) -> list[Output]:
        if e.permits <= 0:
            raise SubscriptionError(f"permits must be positive, got {e.permits}")
        self.consumers[e.consumer].permits += e.permits
        return self._dispatch()

    def _writable(self, e: Writable) -> list[Output]:
        consumer = self.consumers.get(e.consumer)
        if consumer is None or consumer.paused == (not e.writable):
            return []  # gone meanwhile, or no change
        consumer.paused = not e.writable
        return self._dispatch() if e.writable else []

    # ---- entries -----------------------------------------------------------------------------

    def _new_entries(self, e: NewEntries) -> list[Output]:
        self._caught_up = False
        return self._dispatch()

    def _read_failed(self, e: ReadFailed) -> list[Output]:
        self._reading = False
        return []

    def _entries_read(self, e: EntriesRead) -> list[Output]:
        messages = list(e.messages)
        self._reading = False
        if not messages:
            self._caught_up = True
            return []
        for msg in messages:  # an entry of one message, or a whole entry, is done at its first ack
            if msg.batch_size > 1 and msg.id.batch_index != WHOLE_ENTRY:
                self._unacked_in_entry.setdefault(position_of(msg.id), msg.batch_size)
        self._messages_per_entry = max(1, messages[-1].batch_size)
        outputs: list[Output] = []
        if self._delays:
            cutoff = e.now_ms + self.delayed_policy.tick_ms
            held = [m for m in messages if m.deliver_at > cutoff]
            if held:
                for m in held:
                    self._delayed[m.id] = m
                newest = max(m.last_id for m in held)
                if self._highest_delivered is None or newest > self._highest_delivered:
                    self._highest_delivered = newest  # held ids are known: their acks are not refused
                messages = [m for m in messages if m.deliver_at <= cutoff]
                outputs += self._next_wake()
        outputs += self._assign(messages)
        return outputs + self._dispatch()

    def _tick(self, e: Tick) -> list[Output]:
        self._wake_at = None
        cutoff = e.now_ms + self.delayed_policy.tick_ms
        due = [mid for mid, m in self._delayed.items() if m.deliver_at <= cutoff]
        for mid in due:
            self._redeliver[mid] = self._delayed.pop(mid)  # not a redelivery: the count stays
        return self._next_wake() + self._dispatch()

    def _next_wake(self) -> list[Output]:
        if not self._delayed:
            return []
        at = min(m.deliver_at for m in self._delayed.values()) - self.delayed_policy.tick_ms
        if self._wake_at is not None and self._wake_at <= at:
            return []
        self._wake_at = at
        return [WakeAt(at)]

    # ---- acknowledgements --------------------------------------------------------------------

    def _ack(self, e: Ack) -> list[Output]:
        owner = self.consumers[e.consumer]
        pending = owner.pending
        if e.cumulative:
            if self.type in (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED):
                raise SubscriptionError("cumulative acknowledgement is not allowed on Shared/Key_Shared subscriptions")
            upto = max(e.ids)
            self._check_known(upto)
            acked = [m for m in pending if m <= upto]
            if upto.batch_index >= 0:  # a whole entry at `upto` is acknowledged up to its index only
                whole = MessageId(upto.ledger_id, upto.entry_id, WHOLE_ENTRY)
                if whole in pending and upto.batch_index < pending[whole].batch_size - 1:
                    acked.remove(whole)
                    acked += [MessageId(upto.ledger_id, upto.entry_id, i) for i in range(upto.batch_index + 1)]
        else:
            if e.ids:
                self._check_known(max(e.ids))  # every id is known when the highest is
            acked = list(e.ids)
        done: list[Position] = []
        unacked, counts = self._unacked_in_entry, self._redelivery_count
        key_shared = self.type is SubscriptionType.KEY_SHARED  # only Key_Shared holds keys
        for mid in acked:
            msg = pending.pop(mid, None)
            if msg is None:  # one message of a whole entry, else not delivered to it or named twice
                whole = MessageId(mid.ledger_id, mid.entry_id, WHOLE_ENTRY)
                if mid.batch_index >= 0 and whole in pending and (msg := self._ack_index(pending, whole, mid)):
                    if key_shared:
                        self._unhold(msg)
                    done.append(Position(mid.ledger_id, mid.entry_id))
                continue
            if mid.batch_index == WHOLE_ENTRY:
                if key_shared:
                    self._unhold(msg)
                self._whole_entry_acked(mid)
                done.append(Position(mid.ledger_id, mid.entry_id))
                continue
            if key_shared:
                self._unhold(msg)
            if counts:
                counts.pop(mid, None)
            position = Position(mid.ledger_id, mid.entry_id)
            left = unacked.get(position, 1) - 1
            if left <= 0:
                unacked.pop(position, None)
                done.append(position)
            else:
                unacked[position] = left
        # Sorted by a tuple key (compared in C): an ACK names thousands of entries.
        outputs: list[Output] = [AckEntries(tuple(sorted(done, key=position_key)))] if done else []
        return outputs + self._dispatch()

    def _ack_index(self, pending: dict[MessageId, Message], whole: MessageId, mid: MessageId) -> Message | None:
        """Message `mid` of a whole entry pending at a consumer is acknowledged: the entry, when it was the
        last of it (it leaves `pending`), else None."""
        msg = pending[whole]
        left = self._entry_left.get(whole)
        if left is None:
            left = self._entry_left[whole] = set(msg.indexes or range(msg.batch_size))
        left.discard(mid.batch_index)
        if left:
            return None
        del pending[whole]
        self._whole_entry_acked(whole)
        return msg

    def _whole_entry_acked(self, whole: MessageId) -> None:
        """A whole entry left its consumer acknowledged: forget its acked indexes and its redelivery count."""
        self._entry_left.pop(whole, None)
        self._redelivery_count.pop(whole, None)

    def _nack(self, e: Nack) -> list[Output]:
        owner = self.consumers[e.consumer]
        for mid in e.ids:
            msg = owner.pending.pop(mid, None)
            if msg is None and mid.batch_index >= 0:  # one message of a whole entry: the entry goes again
                msg = owner.pending.pop(MessageId(mid.ledger_id, mid.entry_id, WHOLE_ENTRY), None)
            if msg is not None:
                self._unhold(msg)
                self._requeue(msg)
        return self._dispatch()

    def _check_known(self, mid: MessageId) -> None:
        if self._highest_delivered is None or mid > self._highest_delivered:
            raise UnknownMessageId(f"message {mid} was never delivered on this subscription; ack only received ids")

    # ---- dispatch ----------------------------------------------------------------------------

    def _unhold(self, msg: Message) -> None:
        """Key_Shared: `msg` is no longer pending at its consumer."""
        holder = self._key_holders.get(msg.key)
        if holder is None:
            return
        if holder[1] <= 1:
            del self._key_holders[msg.key]
        else:
            self._key_holders[msg.key] = (holder[0], holder[1] - 1)

    def _requeue(self, msg: Message) -> None:
        left = self._entry_left.pop(msg.id, None) if self._entry_left else None
        if left is not None:  # a whole entry goes again less what was acknowledged of it
            msg = msg._replace(indexes=tuple(sorted(left)))
        self._redeliver[msg.id] = msg
        self._redelivery_count[msg.id] = self._redelivery_count.get(msg.id, 0) + 1

    def _update_active(self) -> list[Output]:
        if self.type is not SubscriptionType.FAILOVER:
            return []
        ordered = sorted(self.consumers, key=lambda c: (self.consumers[c].name, c))
        active = ordered[self.partition_index % len(ordered)] if ordered else None
        if active == self._active:
            return []
        outputs: list[Output] = []
        old = self._active
        if old is not None and old in self.consumers:
            outputs.append(ActiveChanged(old, False))
            for msg in list(self.consumers[old].pending.values()):  # the new active one takes over
                self._requeue(msg)
            self.consumers[old].pending.clear()
        self._active = active
        if active is not None:
            outputs.append(ActiveChanged(active, True))
        return outputs

    def _eligible(self, msg: Message) -> int | None:
        """The consumer that may receive `msg` now (None: nobody with permits)."""
        if not self.consumers:
            return None
        if self.type in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER):
            target = self._active if self.type is SubscriptionType.FAILOVER else next(iter(self.consumers))
            return target if target is not None and self.consumers[target].available > 0 else None
        if self.type is SubscriptionType.KEY_SHARED:
            holder = None if self._ks.allow_out_of_order else self._key_holders.get(msg.key)
            target = holder[0] if holder is not None else self._select(msg.key)
            return target if target is not None and self.consumers[target].available > 0 else None
        if len(self.consumers) == 1:  # Shared with one consumer: no turn to take
            ((only, consumer),) = self.consumers.items()
            return only if consumer.available > 0 else None
        ids = list(self.consumers)
        for i in range(len(ids)):  # Shared: round robin over those with permits
            candidate = ids[(self._rr + i) % len(ids)]
            if self.consumers[candidate].available > 0:
                self._rr = (self._rr + i + 1) % len(ids)
                return candidate
        return None

    def _assign(self, messages: list[Message]) -> list[Output]:
        """Give each message to its consumer; what cannot go now waits in the redelivery queue."""
        batches: dict[int, list[tuple[Message, int]]] = {}
        consumers, counts, highest = self.consumers, self._redelivery_count, self._highest_delivered
        key_shared = self.type is SubscriptionType.KEY_SHARED
        left = sum(c.available for c in consumers.values())  # permits anywhere
        for i, msg in enumerate(messages):
            if left <= 0:  # nobody can take anything now: the rest wait, none looked at one by one
                self._highest_delivered = highest
                self._hold(messages[i:])
                return [Deliver(c, tuple(ms)) for c, ms in batches.items()]
            mid = msg.id
            whole = mid.batch_index == WHOLE_ENTRY
            last = msg.last_id if whole else mid
            if highest is None or last > highest:
                highest = last
            target = self._eligible(msg)
            if target is None:
                self._redeliver[mid] = msg  # not a redelivery: the count stays
                continue
            consumer = consumers[target]
            count = msg.message_count if whole else 1
            consumer.permits -= count  # a whole entry may take it below 0, as Pulsar's permits
            left -= count
            consumer.pending[mid] = msg
            if key_shared:
                holder = self._key_holders.get(msg.key)
                self._key_holders[msg.key] = (target, (holder[1] if holder else 0) + 1)
            batch = batches.get(target)
            if batch is None:
                batch = batches[target] = []
            batch.append((msg, counts.get(mid, 0) if counts else 0))
        self._highest_delivered = highest
        return [Deliver(c, tuple(ms)) for c, ms in batches.items()]

    def _hold(self, messages: list[Message]) -> None:
        """Messages read (or due again) that no consumer can take now: served first once permits come."""
        for msg in messages:
            self._redeliver[msg.id] = msg
        newest = max(msg.last_id for msg in messages)
        if self._highest_delivered is None or newest > self._highest_delivered:
            self._highest_delivered = newest

    def _dispatch(self) -> list[Output]:
        outputs: list[Output] = []
        if self._redeliver and any(c.available > 0 for c in self.consumers.values()):
            queued = [self._redeliver.pop(mid) for mid in sorted(self._redeliver)]
            outputs += self._assign(queued)
        size = self._read_size(0)
        if size and not self._reading and not self._caught_up:
            self._reading = True
            outputs.append(ReadEntries(size))
        return outputs

    def _read_size(self, coming: int) -> int:
        """The entries the next read would ask for once `coming` more entries are dispatched (0: none)."""
        permits = sum(c.available for c in self.consumers.values())
        if self.type is SubscriptionType.FAILOVER and self._active is not None:
            permits = self.consumers[self._active].available
        permits -= coming * self._messages_per_entry
        # Key_Shared reads on past messages waiting for one consumer (one key's owner with no permits,
        # a STICKY gap) so that other keys keep flowing, up to a bound.
        waiting_ok = self.type is SubscriptionType.KEY_SHARED and len(self._redeliver) < KEY_SHARED_LOOKAHEAD
        if permits <= 0 or not (waiting_ok or not self._redeliver):
            return 0
        # Permits count messages and a batch entry holds several: ask for about as many entries as
        # the permits cover (reading 100 batches of 128 for 1,000 permits held 11,800 messages back).
        return min(-(-permits // self._messages_per_entry), READ_BATCH)

    def read_ahead(self, entries: int) -> int:
        """Query, for the shell's read-ahead: the size of the read that will follow the dispatch of `entries`
        entries just read (0: none will, for lack of permits or with messages waiting for a consumer)."""
        return self._read_size(entries)

    # ---- inspection --------------------------------------------------------------------------

    @property
    def active_consumer(self) -> int | None:
        return self._active

    def owner_of(self, key: str) -> int | None:
        """Key_Shared: the consumer owning the key's slot (None: none does), for non-persistent dispatch."""
        return self._select(key)

    def unacked(self) -> int:
        """Messages delivered and not acknowledged, or waiting to be (a whole entry counts its messages)."""
        waiting = sum(m.message_count for m in (*self._redeliver.values(), *self._delayed.values()))
        return waiting + sum(self.unacked_of(c) for c in self.consumers)

    def unacked_of(self, consumer: int) -> int:
        """The messages delivered to `consumer` and not acknowledged (Pulsar's unackedMessages)."""
        c = self.consumers.get(consumer)
        if c is None:
            return 0
        total = len(c.pending)
        for mid, m in c.pending.items():
            if mid.batch_index == WHOLE_ENTRY:
                left = self._entry_left.get(mid)
                total += (len(left) if left is not None else m.message_count) - 1
        return total

    def delayed(self) -> int:
        """Messages held for delayed delivery (Pulsar's msgDelayed)."""
        return len(self._delayed)


# Event type -> handler.
_HANDLERS: dict[type, Callable[[Dispatcher, Any], list[Output]]] = {
    AddConsumer: Dispatcher._add_consumer,
    RemoveConsumer: Dispatcher._remove_consumer,
    Flow: Dispatcher._flow,
    NewEntries: Dispatcher._new_entries,
    EntriesRead: Dispatcher._entries_read,
    ReadFailed: Dispatcher._read_failed,
    Ack: Dispatcher._ack,
    Nack: Dispatcher._nack,
    Tick: Dispatcher._tick,
    Writable: Dispatcher._writable,
}


def messages_of(
    position: Position,
    data: bytes,
    payloads: bool = True,
    keys_needed: bool = True,
    metadata: entry_codec.DispatchMetadata | None = None,
) -> list[Message]:
    """The messages of one entry, with their ids (ledger, entry, batch index), each holding the
    whole entry (`entry`) for dispatch. With payloads=False nothing is decompressed, and with
    keys_needed=False (every subscription type but Key_Shared) a batch is not even opened.
    `metadata`: what the entry's publish read of it (entry_codec.dispatch_metadata); with it the
    entry is not parsed again unless Key_Shared needs the keys inside a batch. A batch entry is one Message,
    its id's batch index WHOLE_ENTRY (dispatched whole), without keys_needed or when all its messages have
    one key; Key_Shared takes a batch of several keys message by message."""
    ledger_id, entry_id = position.ledger_id, position.entry_id
    if payloads:
        entry = entry_codec.parse(data, verify_checksum=False)
        n = entry.num_messages
        at = entry.metadata.deliver_at_time if entry.metadata.HasField("deliver_at_time") else 0
        return [
            Message(MessageId(ledger_id, entry_id, i), m.key, m.payload, m.properties, n, data, at)
            for i, m in enumerate(entry_codec.singles(entry))
        ]
    keys: tuple[str, ...] | list[str] | None = None
    if metadata is None or (keys_needed and metadata.keys is None):
        if keys_needed:  # a batch's keys are in its payload: parsed whole
            whole = entry_codec.parse(data, verify_checksum=False)
            metadata = entry_codec.dispatch_metadata(whole)
            if metadata.keys is None:
                keys = entry_codec.keys(whole)
        else:  # the payload not copied out
            metadata = entry_codec.dispatch_metadata(entry_codec.parse_header(data, verify_checksum=False))
    n, at = metadata.num_messages, metadata.deliver_at
    if not keys_needed:
        return [Message(MessageId(ledger_id, entry_id, WHOLE_ENTRY if n > 1 else 0), "", b"", (), n, data, at)]
    keys = keys if keys is not None else metadata.keys
    assert keys is not None
    if n > 1 and keys.count(keys[0]) == n:  # one key (a key-based batch): Key_Shared takes it whole too
        return [Message(MessageId(ledger_id, entry_id, WHOLE_ENTRY), keys[0], b"", (), n, data, at)]
    return [Message(MessageId(ledger_id, entry_id, i), key, b"", (), n, data, at) for i, key in enumerate(keys)]
