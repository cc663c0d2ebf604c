"""The dispatcher core with batch entries dispatched whole (every type but Key_Shared), as Pulsar's
dispatchers send a batch: one Message per entry, acknowledged by index or whole, redelivered whole less
the indexes acknowledged. Driven through `step` only."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from impl.broker.dispatcher import (
    RANGE_SIZE,
    WHOLE_ENTRY,
    Ack,
    AckEntries,
    AddConsumer,
    Deliver,
    Dispatcher,
    EntriesRead,
    Flow,
    Message,
    Nack,
    Output,
    ReadEntries,
    RemoveConsumer,
    SubscriptionType,
    key_slot,
)
from impl.broker.managed_ledger import Position
from impl.protocol.message_id import MessageId


def whole(entry: int, size: int, key: str = "") -> Message:
    return Message(MessageId(1, entry, WHOLE_ENTRY if size > 1 else 0), key, b"", (), size)


class Shell:
    """Entries 0..n-1 of ledger 1 with the given batch sizes; answers reads, records what went where."""

    def __init__(self, sizes: list[int], keys: int = 1) -> None:
        self.entries = [whole(i, n, f"k{i % keys}") for i, n in enumerate(sizes)]
        self.next = 0
        self.delivered: list[tuple[int, Message, int]] = []  # (consumer, message, redelivery count)
        self.acked: list[Position] = []

    def run(self, d: Dispatcher, outputs: list[Output]) -> None:
        while outputs:
            more: list[Output] = []
            for out in outputs:
                if isinstance(out, ReadEntries):
                    chunk = self.entries[self.next : self.next + out.max_entries]
                    self.next += len(chunk)
                    more += d.step(EntriesRead(tuple(chunk)))
                elif isinstance(out, Deliver):
                    self.delivered += [(out.consumer, m, c) for m, c in out.messages]
                elif isinstance(out, AckEntries):
                    self.acked += out.positions
            outputs = more


def test_a_batch_goes_whole_to_one_consumer_and_takes_a_permit_per_message() -> None:
    shell, d = Shell([3, 3]), Dispatcher(SubscriptionType.SHARED)
    shell.run(d, d.step(AddConsumer(1, "a")) + d.step(Flow(1, 1)))
    # One permit: the first batch goes all the same (Pulsar's permits go below 0), the second waits.
    assert [(c, m.id, m.indexes) for c, m, _ in shell.delivered] == [(1, MessageId(1, 0, WHOLE_ENTRY), ())]
    assert d.consumers[1].permits == -2 and d.unacked() == 3
    shell.run(d, d.step(Flow(1, 2)))  # back to 0: still nothing
    assert len(shell.delivered) == 1
    shell.run(d, d.step(Flow(1, 1)))
    assert [m.id.entry_id for _, m, _ in shell.delivered] == [0, 1]


def test_acks_by_index_complete_the_entry_once_and_a_leaving_consumer_hands_over_only_the_rest() -> None:
    shell, d = Shell([4]), Dispatcher(SubscriptionType.SHARED)
    shell.run(d, d.step(AddConsumer(1, "a")) + d.step(Flow(1, 10)))
    shell.run(d, d.step(Ack(1, (MessageId(1, 0, 0), MessageId(1, 0, 2)))))
    assert shell.acked == [] and d.unacked() == 2
    shell.run(d, d.step(AddConsumer(2, "b")) + d.step(Flow(2, 10)) + d.step(RemoveConsumer(1)))
    (_, first, _), (to, again, count) = shell.delivered
    assert to == 2 and again.id == first.id and again.indexes == (1, 3) and count == 1 and again.message_count == 2
    shell.run(d, d.step(Ack(2, (MessageId(1, 0, 1),))))
    assert shell.acked == []
    shell.run(d, d.step(Ack(2, (MessageId(1, 0, 3), MessageId(1, 0, 3)))))
    assert shell.acked == [Position(1, 0)] and d.unacked() == 0
    shell.run(d, d.step(Ack(2, (MessageId(1, 0, 1), MessageId(1, 0, WHOLE_ENTRY)))))  # again: nothing more
    assert shell.acked == [Position(1, 0)]


def test_a_whole_ack_takes_every_index_and_a_nack_of_one_index_redelivers_the_unacked_rest() -> None:
    shell, d = Shell([3, 3]), Dispatcher(SubscriptionType.SHARED)
    shell.run(d, d.step(AddConsumer(1, "a")) + d.step(Flow(1, 10)))
    shell.run(d, d.step(Ack(1, (MessageId(1, 0, WHOLE_ENTRY), MessageId(1, 1, 0)))))
    assert shell.acked == [Position(1, 0)]
    shell.run(d, d.step(Nack(1, (MessageId(1, 1, 2),))))
    _, again, count = shell.delivered[-1]
    assert again.id == MessageId(1, 1, WHOLE_ENTRY) and again.indexes == (1, 2) and count == 1


def test_a_cumulative_ack_inside_a_batch_acknowledges_the_entries_before_and_that_batch_up_to_it() -> None:
    for sub_type in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER):
        shell, d = Shell([2, 3, 3]), Dispatcher(sub_type)
        shell.run(d, d.step(AddConsumer(1, "a")) + d.step(Flow(1, 10)))
        shell.run(d, d.step(Ack(1, (MessageId(1, 1, 1),), cumulative=True)))
        assert shell.acked == [Position(1, 0)] and d.unacked() == 4
        shell.run(d, d.step(Ack(1, (MessageId(1, 1, 2),), cumulative=True)))
        assert shell.acked == [Position(1, 0), Position(1, 1)]
        shell.run(d, d.step(Ack(1, (MessageId(1, 2, WHOLE_ENTRY),), cumulative=True)))
        assert shell.acked == [Position(1, i) for i in range(3)] and d.unacked() == 0


def test_key_shared_lets_a_key_move_once_its_whole_batches_are_acknowledged() -> None:
    """Key_Shared with one-key batches: a key's batches stay with its consumer while any is unacknowledged
    there, and move to the slot's new owner once all are (by a whole ack, or by the last index)."""
    key = next(k for k in (f"k{i}" for i in range(100)) if key_slot(k) <= RANGE_SIZE // 2)  # the lower half
    for ack_whole in (True, False):
        shell, d = Shell([2, 2, 2]), Dispatcher(SubscriptionType.KEY_SHARED)
        shell.entries = [whole(i, 2, key) for i in range(3)]
        shell.run(d, d.step(AddConsumer(1, "a")) + d.step(Flow(1, 2)))  # "a" owns every slot: entry 0
        shell.run(d, d.step(AddConsumer(2, "b")) + d.step(Flow(2, 10)) + d.step(Flow(1, 2)))
        assert [(c, m.id.entry_id) for c, m, _ in shell.delivered] == [(1, 0), (1, 1)]  # "a" still holds it
        for entry in (0, 1):
            ids = (MessageId(1, entry, WHOLE_ENTRY),) if ack_whole else (MessageId(1, entry, 0), MessageId(1, entry, 1))
            shell.run(d, d.step(Ack(1, ids)))
        assert shell.acked == [Position(1, 0), Position(1, 1)]
        shell.run(d, d.step(Flow(1, 2)) + d.step(Flow(2, 1)))
        assert shell.delivered[-1][:2] == (2, shell.entries[2])  # the slot's owner, "b", now


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(list(SubscriptionType)),
    st.lists(st.integers(1, 4), min_size=1, max_size=6),
    st.lists(
        st.tuples(st.sampled_from(["add", "remove", "flow", "ack", "ack-whole", "nack"]), st.integers(0, 2)),
        max_size=40,
    ),
)
def test_no_message_is_lost_and_none_acknowledged_is_delivered_again(
    sub_type: SubscriptionType, sizes: list[int], steps: list[tuple[str, int]]
) -> None:
    """Whatever consumers do, after a drain every entry was acknowledged exactly once, a redelivered
    batch never carries an index acknowledged before, and (Key_Shared, one key per batch as key-based
    batching makes them) no key is ever pending at two consumers."""
    shell, d = Shell(sizes, keys=3), Dispatcher(sub_type)
    connected: set[int] = set()
    acked: set[MessageId] = set()  # (ledger, entry, index) acknowledged so far

    def run(outputs: list[Output]) -> None:
        seen = len(shell.delivered)
        shell.run(d, outputs)
        for _, m, _ in shell.delivered[seen:]:
            got = m.indexes or range(m.batch_size)
            sent = {MessageId(1, m.id.entry_id, i if m.id.batch_index == WHOLE_ENTRY else 0) for i in got}
            assert not sent & acked, f"{m} carries indexes acknowledged already"
        if sub_type is SubscriptionType.KEY_SHARED:
            holders = [(m.key, c) for c, state in d.consumers.items() for m in state.pending.values()]
            assert len(set(holders)) == len({k for k, _ in holders}), f"a key pending at two consumers: {holders}"

    def held(c: int) -> list[Message]:
        return list(d.consumers[c].pending.values()) if c in d.consumers else []

    for verb, consumer in steps:
        if verb == "add" and consumer not in connected:
            if sub_type is SubscriptionType.EXCLUSIVE and connected:
                continue
            run(d.step(AddConsumer(consumer, f"c{consumer}")))
            connected.add(consumer)
        elif verb == "remove" and consumer in connected:
            connected.discard(consumer)
            run(d.step(RemoveConsumer(consumer)))
        elif verb == "flow" and consumer in connected:
            run(d.step(Flow(consumer, 2)))
        elif verb in ("ack", "ack-whole", "nack") and held(consumer):
            m = held(consumer)[0]
            left = sorted(set(m.indexes or range(m.batch_size)) - {i.batch_index for i in acked if i[:2] == m.id[:2]})
            if verb == "nack":  # one index of it
                run(d.step(Nack(consumer, (m.id._replace(batch_index=max(0, m.id.batch_index)),))))
            elif verb == "ack-whole" or m.id.batch_index != WHOLE_ENTRY:
                acked.update(MessageId(1, m.id.entry_id, i) for i in (left if m.id.batch_index == WHOLE_ENTRY else [0]))
                run(d.step(Ack(consumer, (m.id,))))
            else:
                acked.add(MessageId(1, m.id.entry_id, left[0]))
                run(d.step(Ack(consumer, (MessageId(1, m.id.entry_id, left[0]),))))
    for c in list(connected):
        run(d.step(RemoveConsumer(c)))
    run(d.step(AddConsumer(9, "drain")))
    for _ in range(40):
        run(d.step(Flow(9, 3)))
        for m in held(9):
            run(d.step(Ack(9, (m.id,))))
    assert sorted(shell.acked) == [Position(1, i) for i in range(len(sizes))]
    assert d.unacked() == 0
