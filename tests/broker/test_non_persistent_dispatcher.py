"""The non-persistent dispatcher core: who gets an entry, and when it is dropped (and counted)."""

from __future__ import annotations

import pytest

from impl.broker.dispatcher import (
    Ack,
    ActiveChanged,
    AddConsumer,
    ConsumerBusy,
    Flow,
    Nack,
    RemoveConsumer,
    SubscriptionType,
    Writable,
)
from impl.broker.non_persistent_dispatcher import Dropped, Entry, NonPersistentDispatcher, Publish, Send
from impl.protocol.message_id import MessageId


def entry(n: int = 1, key: str = "") -> Entry:
    return Entry(b"x", n, key)


def test_no_consumer_or_no_permits_drops_and_counts() -> None:
    d = NonPersistentDispatcher(SubscriptionType.EXCLUSIVE)
    assert d.step(Publish(entry(3))) == [Dropped(entry(3))]
    d.step(AddConsumer(1, "a"))
    assert d.step(Publish(entry())) == [Dropped(entry())]  # subscribed, no permits yet
    d.step(Flow(1, 2))
    assert d.step(Publish(entry())) == [Send(1, entry())]
    # A batch goes to a consumer with any permits left and takes as many as it holds.
    assert d.step(Publish(entry(5))) == [Send(1, entry(5))]
    assert d.permits[1] == -4
    assert d.step(Publish(entry())) == [Dropped(entry())]
    assert (d.dropped, d.delivered) == (5, 6)


def test_acks_and_nacks_change_nothing() -> None:
    d = NonPersistentDispatcher(SubscriptionType.SHARED)
    d.step(AddConsumer(1, "a"))
    d.step(Flow(1, 1))
    d.step(Publish(entry()))
    mid = MessageId(0, 0, -1)
    assert d.step(Ack(1, (mid,))) == [] and d.step(Nack(1, (mid,))) == []
    assert d.unacked() == 0 and d.step(Publish(entry())) == [Dropped(entry())]


def test_exclusive_refuses_a_second_consumer() -> None:
    d = NonPersistentDispatcher(SubscriptionType.EXCLUSIVE)
    d.step(AddConsumer(1, "a"))
    with pytest.raises(ConsumerBusy):
        d.step(AddConsumer(2, "b"))
    assert list(d.consumers) == [1] and list(d.permits) == [1]


def test_shared_round_robin_over_consumers_with_permits() -> None:
    d = NonPersistentDispatcher(SubscriptionType.SHARED)
    for c in (1, 2, 3):
        d.step(AddConsumer(c, f"c{c}"))
    d.step(Flow(1, 10))
    d.step(Flow(3, 10))
    targets = [out.consumer for out in (d.step(Publish(entry()))[0] for _ in range(4)) if isinstance(out, Send)]
    assert targets == [1, 3, 1, 3]


def test_failover_sends_to_the_active_consumer_only() -> None:
    d = NonPersistentDispatcher(SubscriptionType.FAILOVER)
    assert d.step(AddConsumer(2, "b")) == [ActiveChanged(2, True)]
    assert d.step(AddConsumer(1, "a")) == [ActiveChanged(2, False), ActiveChanged(1, True)]
    d.step(Flow(2, 5))
    assert d.step(Publish(entry())) == [Dropped(entry())]  # the active one has no permits
    d.step(RemoveConsumer(1))
    assert d.step(Publish(entry())) == [Send(2, entry())]


def test_key_shared_routes_each_key_to_its_slot_owner() -> None:
    d = NonPersistentDispatcher(SubscriptionType.KEY_SHARED)
    d.step(AddConsumer(1, "a"))
    d.step(AddConsumer(2, "b"))
    d.step(Flow(1, 1000))
    d.step(Flow(2, 1000))
    owners: dict[str, int] = {}
    for i in range(200):
        key = f"k{i % 20}"
        (out,) = d.step(Publish(entry(key=key)))
        assert isinstance(out, Send)
        assert owners.setdefault(key, out.consumer) == out.consumer
    assert set(owners.values()) == {1, 2}


def test_a_consumer_whose_connection_is_full_is_skipped_and_its_entries_dropped() -> None:
    d = NonPersistentDispatcher(SubscriptionType.SHARED)
    d.step(AddConsumer(1, "a"))
    d.step(AddConsumer(2, "b"))
    d.step(Flow(1, 10))
    d.step(Flow(2, 10))
    d.step(Writable(1, False))
    assert [d.step(Publish(entry())) for _ in range(2)] == [[Send(2, entry())]] * 2
    d.step(Writable(2, False))
    assert d.step(Publish(entry())) == [Dropped(entry())]
    d.step(Writable(1, True))
    assert d.step(Publish(entry())) == [Send(1, entry())]
    e = NonPersistentDispatcher(SubscriptionType.EXCLUSIVE)
    e.step(AddConsumer(1, "a"))
    e.step(Flow(1, 10))
    e.step(Writable(1, False))
    assert e.step(Publish(entry())) == [Dropped(entry())]


def test_unknown_events_are_refused() -> None:
    with pytest.raises(TypeError):
        NonPersistentDispatcher(SubscriptionType.SHARED).step(object())  # type: ignore[arg-type]
