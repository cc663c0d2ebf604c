"""The subscription dispatcher core (impl/broker/dispatcher.py), driven directly through its `step`: no I/O."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from impl.broker.dispatcher import (
    Ack,
    AckEntries,
    ActiveChanged,
    AddConsumer,
    ConsumerAssignError,
    ConsumerBusy,
    Deliver,
    Dispatcher,
    EntriesRead,
    Flow,
    KeySharedMeta,
    KeySharedMode,
    Message,
    Nack,
    NewEntries,
    Output,
    ReadEntries,
    ReadFailed,
    RemoveConsumer,
    SubscriptionError,
    SubscriptionType,
    UnknownMessageId,
    Writable,
    key_slot,
)
from impl.broker.managed_ledger import Position
from impl.protocol.message_id import MessageId


class Log:
    """A topic of single-message entries in ledger 1, and a shell that answers ReadEntries from it."""

    def __init__(self, n: int, keys: list[str] | None = None) -> None:
        self.messages = [Message(MessageId(1, i), (keys or [""])[i % len(keys or [""])], b"m%d" % i) for i in range(n)]
        self.next = 0
        self.delivered: dict[int, list[tuple[MessageId, int]]] = {}
        self.acked_entries: list[Position] = []
        self.active: dict[int, bool] = {}

    def run(self, d: Dispatcher, outputs: list[Output]) -> None:
        while outputs:
            more: list[Output] = []
            for out in outputs:
                if isinstance(out, ReadEntries):
                    chunk = self.messages[self.next : self.next + out.max_entries]
                    self.next += len(chunk)
                    more += d.step(EntriesRead(tuple(chunk)))
                elif isinstance(out, Deliver):
                    self.delivered.setdefault(out.consumer, []).extend((m.id, c) for m, c in out.messages)
                elif isinstance(out, AckEntries):
                    self.acked_entries += out.positions
                elif isinstance(out, ActiveChanged):
                    self.active[out.consumer] = out.active
            outputs = more


def test_exclusive_refuses_a_second_consumer_and_respects_permits() -> None:
    log, d = Log(10), Dispatcher(SubscriptionType.EXCLUSIVE)
    log.run(d, d.step(AddConsumer(1, "a")))
    with pytest.raises(ConsumerBusy):
        d.step(AddConsumer(2, "b"))
    log.run(d, d.step(Flow(1, 3)))
    assert [m for m, _ in log.delivered[1]] == [MessageId(1, i) for i in range(3)]
    log.run(d, d.step(Flow(1, 100)))
    assert [m for m, _ in log.delivered[1]] == [MessageId(1, i) for i in range(10)]


def test_cumulative_ack_acknowledges_every_entry_up_to_it_in_order() -> None:
    log, d = Log(5), Dispatcher(SubscriptionType.EXCLUSIVE)
    log.run(d, d.step(AddConsumer(1, "a")) + d.step(Flow(1, 10)))
    log.run(d, d.step(Ack(1, (MessageId(1, 2),), cumulative=True)))
    assert log.acked_entries == [Position(1, 0), Position(1, 1), Position(1, 2)]
    assert d.unacked() == 2


def test_shared_spreads_messages_and_redelivers_a_leaving_consumers_pending() -> None:
    log, d = Log(6), Dispatcher(SubscriptionType.SHARED)
    log.run(d, d.step(AddConsumer(1, "a")) + d.step(AddConsumer(2, "b")))
    log.run(d, d.step(Flow(1, 3)) + d.step(Flow(2, 3)))
    assert len(log.delivered[1]) == 3 and len(log.delivered[2]) == 3
    gone = [m for m, _ in log.delivered[2]]
    log.run(d, d.step(Flow(1, 10)))
    log.run(d, d.step(RemoveConsumer(2)))
    redelivered = [(m, c) for m, c in log.delivered[1] if m in gone]
    assert sorted(m for m, _ in redelivered) == sorted(gone)
    assert all(count == 1 for _, count in redelivered)
    with pytest.raises(SubscriptionError):
        d.step(Ack(1, (MessageId(1, 0),), cumulative=True))


def test_failover_delivers_to_the_active_consumer_and_fails_over() -> None:
    log, d = Log(4), Dispatcher(SubscriptionType.FAILOVER)
    log.run(d, d.step(AddConsumer(1, "b")) + d.step(AddConsumer(2, "a")))  # "a" sorts first: active
    assert log.active == {1: False, 2: True}
    log.run(d, d.step(Flow(1, 10)) + d.step(Flow(2, 10)))
    assert 1 not in log.delivered and len(log.delivered[2]) == 4
    log.run(d, d.step(Ack(2, (MessageId(1, 0),))))
    log.run(d, d.step(RemoveConsumer(2)))
    assert log.active[1] is True
    assert [m for m, _ in log.delivered[1]] == [MessageId(1, i) for i in (1, 2, 3)]


def test_key_shared_sends_each_key_to_one_consumer() -> None:
    keys = [f"k{i}" for i in range(8)]
    log, d = Log(40, keys), Dispatcher(SubscriptionType.KEY_SHARED)
    log.run(d, d.step(AddConsumer(1, "a")) + d.step(AddConsumer(2, "b")))
    log.run(d, d.step(Flow(1, 100)) + d.step(Flow(2, 100)))
    owner = {}
    for consumer, got in log.delivered.items():
        for mid, _ in got:
            key = log.messages[mid.entry_id].key
            assert owner.setdefault(key, consumer) == consumer
    assert set(owner) == set(keys)
    # AUTO_SPLIT as Pulsar: the second consumer takes the lower half of the slots, 0..32,768.
    assert all(owner[k] == (2 if key_slot(k) <= 32768 else 1) for k in keys)


def test_key_shared_keeps_a_key_with_its_consumer_until_that_one_acknowledges_it() -> None:
    """A consumer that joins takes over keys by hash, but not a key another consumer still holds unacknowledged:
    that would let the two process one key at once, and out of order (Pulsar's draining hashes)."""
    keys = [f"k{i}" for i in range(8)]
    log, d = Log(16, keys), Dispatcher(SubscriptionType.KEY_SHARED)
    log.run(d, d.step(AddConsumer(1, "a")) + d.step(Flow(1, 8)))  # alone: a holds k0..k7, one message each
    held = [m for m, _ in log.delivered[1]]
    assert len(held) == 8
    log.run(d, d.step(AddConsumer(2, "b")) + d.step(Flow(2, 100)) + d.step(Flow(1, 100)))
    moving = {k for k in keys if key_slot(k) <= 32768}  # the joining consumer's half
    assert moving, "no key hashes to the new consumer: pick other keys"
    assert all(log.messages[m.entry_id].key not in moving for m, _ in log.delivered.get(2, []))
    log.run(d, d.step(Ack(1, tuple(m for m, _ in log.delivered[1]))))  # a lets go of every key
    log.run(d, d.step(AddConsumer(3, "c")) + d.step(RemoveConsumer(3)))  # any change of consumers dispatches again
    log.messages += [Message(MessageId(1, 16 + i), k, b"x") for i, k in enumerate(keys)]
    log.run(d, d.step(NewEntries()))
    later = {log.messages[m.entry_id].key for m, _ in log.delivered.get(2, []) if m.entry_id >= 16}
    assert later == moving


def test_key_slots_are_pulsars_murmur3_hashes() -> None:
    """Murmur3 x86 32-bit, seed 0, sign bit cleared (Pulsar's Murmur3_32Hash), modulo 65,536; a message
    without a key hashes "NONE_KEY"."""
    from impl.protocol.murmur3 import murmur3_32, pulsar_hash

    # Published MurmurHash3 x86_32 vectors.
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"", 1) == 0x514E28B7
    assert murmur3_32(b"aaaa", 0x9747B28C) == 0x5A97808A
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723
    assert pulsar_hash(b"Hello, world!") == 0xC0363E43 & 0x7FFFFFFF  # top bit cleared
    assert key_slot("hello") == 0x248BFA47 % 65536
    assert key_slot("") == pulsar_hash(b"NONE_KEY") % 65536


def test_auto_split_gives_each_new_consumer_half_of_the_largest_range_and_merges_on_leave() -> None:
    d = Dispatcher(SubscriptionType.KEY_SHARED)
    for c in (1, 2, 3):
        d.step(AddConsumer(c, f"c{c}"))
    # 1: (32768, 65536], 2: (16384, 32768], 3: [0, 16384]
    assert d._split_owner == {65536: 1, 32768: 2, 16384: 3}
    d.step(RemoveConsumer(1))  # the top range goes to its lower neighbour
    assert d._split_owner == {65536: 2, 16384: 3}
    d.step(RemoveConsumer(3))
    assert d._split_owner == {65536: 2}


def test_sticky_ranges_route_by_slot_and_bad_ranges_are_refused() -> None:
    keys = [f"k{i}" for i in range(40)]
    log, d = Log(40, keys), Dispatcher(SubscriptionType.KEY_SHARED)
    sticky = KeySharedMode.STICKY
    log.run(d, d.step(AddConsumer(1, "a", KeySharedMeta(sticky, ((0, 9999), (30000, 65535))))))
    for bad in [((5000, 12000),), ((10000, 70000),), ((-1, 5),), ((20, 10),), ()]:
        with pytest.raises(ConsumerAssignError):
            d.step(AddConsumer(2, "b", KeySharedMeta(sticky, bad)))
    with pytest.raises(ConsumerBusy):  # another mode on the same subscription
        d.step(AddConsumer(2, "b"))
    log.run(d, d.step(AddConsumer(2, "b", KeySharedMeta(sticky, ((10000, 19999),)))))
    log.run(d, d.step(Flow(1, 100)) + d.step(Flow(2, 100)))
    got = {c: {log.messages[m.entry_id].key for m, _ in ms} for c, ms in log.delivered.items()}
    slot = {k: key_slot(k) for k in keys}
    assert got.get(1, set()) == {k for k in keys if slot[k] < 10000 or slot[k] >= 30000}
    assert got.get(2, set()) == {k for k in keys if 10000 <= slot[k] < 20000}
    assert d.unacked() == 40  # keys in the gap 20000..29999 wait for a consumer owning them


def test_out_of_order_delivery_lets_a_new_consumer_take_its_keys_at_once() -> None:
    keys = [f"k{i}" for i in range(8)]
    log, d = Log(16, keys), Dispatcher(SubscriptionType.KEY_SHARED)
    ooo = KeySharedMeta(allow_out_of_order=True)
    log.run(d, d.step(AddConsumer(1, "a", ooo)) + d.step(Flow(1, 8)))
    log.run(d, d.step(AddConsumer(2, "b", ooo)) + d.step(Flow(2, 100)))
    moving = {k for k in keys if key_slot(k) <= 32768}
    assert {log.messages[m.entry_id].key for m, _ in log.delivered[2]} == moving


def test_nack_redelivers_with_a_higher_count_and_unknown_acks_are_refused() -> None:
    log, d = Log(3), Dispatcher(SubscriptionType.EXCLUSIVE)
    log.run(d, d.step(AddConsumer(1, "a")) + d.step(Flow(1, 3)))
    log.run(d, d.step(Nack(1, (MessageId(1, 1),))) + d.step(Flow(1, 1)))
    assert log.delivered[1][-1] == (MessageId(1, 1), 1)
    with pytest.raises(UnknownMessageId):
        d.step(Ack(1, (MessageId(1, 7),)))
    with pytest.raises(SubscriptionError):
        d.step(Flow(1, 0))


def test_a_batch_entry_is_acknowledged_once_every_message_is() -> None:
    batch = [Message(MessageId(1, 0, i), "", b"x", (), 3) for i in range(3)]
    d = Dispatcher(SubscriptionType.SHARED)
    d.step(AddConsumer(1, "a"))
    (read,) = d.step(Flow(1, 10))
    assert isinstance(read, ReadEntries)
    d.step(EntriesRead(tuple(batch)))
    partial = d.step(Ack(1, (MessageId(1, 0, 0), MessageId(1, 0, 2))))
    assert not any(isinstance(o, AckEntries) for o in partial)
    outputs = d.step(Ack(1, (MessageId(1, 0, 1),)))
    assert AckEntries((Position(1, 0),)) in outputs


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(list(SubscriptionType)),
    st.lists(
        st.tuples(
            st.sampled_from(["add", "remove", "flow", "ack", "nack", "pause", "resume"]),
            st.integers(0, 2),
            st.integers(1, 5),
        ),
        max_size=40,
    ),
)
def test_every_message_is_delivered_and_each_entry_acknowledged_at_most_once(
    sub_type: SubscriptionType, steps: list[tuple[str, int, int]]
) -> None:
    """Whatever consumers do, no message is lost: after everyone acknowledges, every entry was
    acknowledged exactly once, nobody ever held more messages than its permits allowed, and a paused
    consumer (backpressure) was given nothing."""
    log, d = Log(12, ["a", "b", "c"]), Dispatcher(sub_type)
    connected: set[int] = set()
    paused: set[int] = set()
    held: dict[int, set[MessageId]] = {}

    def run(outputs: list[Output]) -> None:
        before = {c: len(v) for c, v in log.delivered.items()}
        log.run(d, outputs)
        for c, got in log.delivered.items():
            assert c not in paused or len(got) == before.get(c, 0), f"paused consumer {c} was given messages"
            held.setdefault(c, set()).update(m for m, _ in got[before.get(c, 0) :])

    for verb, consumer, n in steps:
        if verb == "add" and consumer not in connected:
            try:
                run(d.step(AddConsumer(consumer, f"c{consumer}")))
                connected.add(consumer)
            except ConsumerBusy:
                assert sub_type is SubscriptionType.EXCLUSIVE
        elif verb == "remove" and consumer in connected:
            connected.discard(consumer)
            paused.discard(consumer)
            held.pop(consumer, None)
            run(d.step(RemoveConsumer(consumer)))
        elif verb == "flow" and consumer in connected:
            run(d.step(Flow(consumer, n)))
        elif verb in ("pause", "resume"):  # for a consumer not (or no longer) there too: ignored
            if consumer in connected:
                (paused.add if verb == "pause" else paused.discard)(consumer)
            run(d.step(Writable(consumer, verb == "resume")))
        elif verb in ("ack", "nack") and consumer in connected and held.get(consumer):
            ids = sorted(held[consumer])[:n]
            held[consumer] -= set(ids)
            run(d.step(Ack(consumer, tuple(ids)) if verb == "ack" else Nack(consumer, tuple(ids))))
    # Drain: one consumer acknowledges everything.
    for c in list(connected):
        held.pop(c, None)
        run(d.step(RemoveConsumer(c)))
    paused.clear()
    run(d.step(AddConsumer(9, "drain")))
    for _ in range(30):
        run(d.step(Flow(9, 5)))
        if held.get(9):
            run(d.step(Ack(9, tuple(sorted(held.pop(9))))))
    assert sorted(log.acked_entries) == [Position(1, i) for i in range(12)]


def test_a_paused_consumer_is_given_nothing_and_nothing_is_read_for_it_until_it_is_writable() -> None:
    """Backpressure: Writable False keeps the consumer's permits but gives it nothing (on Shared the
    others take its share), asks for no read (no busy loop), and Writable True resumes in order."""
    log, d = Log(10), Dispatcher(SubscriptionType.EXCLUSIVE)
    log.run(d, d.step(AddConsumer(1, "a")) + d.step(Flow(1, 3)))
    assert d.step(Writable(1, False)) == []
    assert d.step(Flow(1, 100)) == [] and d.step(NewEntries()) == []  # nothing read while paused
    assert d.step(Writable(1, False)) == [] and d.step(Writable(7, True)) == []  # no change; unknown
    log.run(d, d.step(Writable(1, True)))
    assert [m for m, _ in log.delivered[1]] == [MessageId(1, i) for i in range(10)]

    log, d = Log(6), Dispatcher(SubscriptionType.SHARED)
    log.run(d, d.step(AddConsumer(1, "a")) + d.step(AddConsumer(2, "b")) + d.step(Writable(2, False)))
    log.run(d, d.step(Flow(1, 10)) + d.step(Flow(2, 10)))
    assert len(log.delivered[1]) == 6 and 2 not in log.delivered


def test_reads_of_batch_entries_ask_for_as_many_entries_as_the_permits_cover_and_hold_the_rest() -> None:
    """Permits count messages; a batch entry of 4 takes 4. Granting 10 asks for one entry first, then
    for ceil(permits / 4); what does not fit waits, in order, for the next permits."""
    entries = [[Message(MessageId(1, e, i), "", b"%d-%d" % (e, i), (), 4) for i in range(4)] for e in range(10)]
    d = Dispatcher(SubscriptionType.EXCLUSIVE)
    d.step(AddConsumer(1, "c"))
    (read,) = d.step(Flow(1, 10))
    assert read == ReadEntries(10)  # nothing known of the entries yet: one message each
    outs = d.step(EntriesRead(tuple(entries[0])))
    delivered = [m.id for out in outs if isinstance(out, Deliver) for m, _ in out.messages]
    assert len(delivered) == 4
    assert [o for o in outs if isinstance(o, ReadEntries)] == [ReadEntries(2)]  # 6 permits left: two entries of 4
    outs = d.step(EntriesRead(tuple(entries[1] + entries[2])))
    delivered += [m.id for out in outs if isinstance(out, Deliver) for m, _ in out.messages]
    assert delivered == [m.id for e in entries[:3] for m in e][:10]  # 10 permits, 10 messages
    assert d.unacked() == 12  # the last two of entry 2 wait
    outs = d.step(Flow(1, 2))
    assert [m.id for out in outs if isinstance(out, Deliver) for m, _ in out.messages] == [
        MessageId(1, 2, 2),
        MessageId(1, 2, 3),
    ]


def test_read_ahead_names_the_read_that_will_follow_a_batch_and_changes_nothing() -> None:
    """The shell reads the next batch ahead, before a batch from the bookies is dispatched: `read_ahead(n)`
    is the ReadEntries that will follow the dispatch of n entries (0: none will), without any step."""
    d = Dispatcher(SubscriptionType.SHARED)
    d.step(AddConsumer(1, "a"))
    assert d.read_ahead(0) == 0  # no permits
    (read,) = d.step(Flow(1, 250))
    assert read == ReadEntries(100)
    assert [d.read_ahead(n) for n in (100, 200, 250)] == [100, 50, 0]
    batch = tuple(Message(MessageId(1, i), "", b"") for i in range(100))
    outs = d.step(EntriesRead(batch))  # what read_ahead(100) said comes next
    assert [o for o in outs if isinstance(o, ReadEntries)] == [ReadEntries(100)]
    assert d.read_ahead(100) == 50


def test_a_failed_read_is_asked_for_again_by_the_next_event_and_a_refusal_changes_nothing() -> None:
    log, d = Log(3), Dispatcher(SubscriptionType.SHARED)
    d.step(AddConsumer(1, "a"))
    (read,) = d.step(Flow(1, 5))
    assert read == ReadEntries(5)
    assert d.step(Flow(1, 1)) == []  # one read at a time
    assert d.step(ReadFailed()) == []  # nothing read: the shell retries later (a wake-up)
    log.run(d, d.step(NewEntries()))
    assert [m for m, _ in log.delivered[1]] == [MessageId(1, i) for i in range(3)]
    with pytest.raises(UnknownMessageId):
        d.step(Ack(1, (MessageId(1, 0), MessageId(1, 9))))  # one unknown id: none is acknowledged
    assert d.unacked() == 3
    with pytest.raises(TypeError, match="not a dispatcher event"):
        d.step(ReadEntries(1))  # type: ignore[arg-type]


def test_delayed_messages_wait_for_their_time_on_shared_only() -> None:
    from impl.broker.dispatcher import DelayedDelivery, Tick, WakeAt

    def run(sub_type: SubscriptionType, policy: DelayedDelivery | None = None) -> tuple[Dispatcher, list[Output]]:
        d = Dispatcher(sub_type, delayed=policy)
        d.step(AddConsumer(1, "a"))
        d.step(Flow(1, 10))
        messages = (Message(MessageId(1, 0), "", b"later", deliver_at=10_000), Message(MessageId(1, 1), "", b"now"))
        return d, d.step(EntriesRead(messages, now_ms=5_000))

    d, out = run(SubscriptionType.SHARED)
    delivered = [m.id for o in out if isinstance(o, Deliver) for m, _ in o.messages]
    assert delivered == [MessageId(1, 1)] and d.delayed() == 1
    assert WakeAt(9_000) in out  # one tick (1 s) early at most, as Pulsar's tracker
    assert not [o for o in d.step(Tick(7_000)) if isinstance(o, Deliver)]
    out = d.step(Tick(9_000))
    assert [m.id for o in out if isinstance(o, Deliver) for m, _ in o.messages] == [MessageId(1, 0)]
    assert d.delayed() == 0
    for sub_type, policy in ((SubscriptionType.EXCLUSIVE, None), (SubscriptionType.SHARED, DelayedDelivery(False))):
        d, out = run(sub_type, policy)  # ignored on Exclusive/Failover, and when the policy turns it off
        assert len([m for o in out if isinstance(o, Deliver) for m in o.messages]) == 2 and d.delayed() == 0
