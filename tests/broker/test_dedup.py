"""De-duplication on a topic (impl/broker/service.py), against a managed ledger whose adds complete
when the test says so: a resend while the first copy is being written, after it is written, and
after it failed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from impl.broker.dispatcher import DelayedDelivery
from impl.broker.entry_cache import EntryCache
from impl.broker.errors import PersistenceError
from impl.broker.managed_ledger import ManagedLedgerError, Position
from impl.broker.service import Append, BrokerConfig, Topic
from impl.metadata.naming import TopicName
from impl.protocol.entry_codec import SingleMessage, build_messages


class HeldAdds:
    """The managed ledger's side of a topic: every add waits for `complete`."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []
        self.cache = EntryCache()  # where a completed add's metadata is kept for its deliveries

    def add_listener(self, _callback: Any) -> None:
        pass

    def first_position(self) -> None:
        return None

    def cursors(self) -> dict[str, Any]:
        return {}  # no compaction cursor: the topic's compactor finds nothing to load

    def add_many_with_callback(self, adds: list[tuple[bytes, Any]]) -> None:
        self.callbacks += [cb for _, cb in adds]

    def complete(self, outcome: Position | ManagedLedgerError) -> None:
        self.callbacks.pop(0)(outcome)


def append(sequence_id: int) -> Append:
    return Append(build_messages("p", sequence_id, 0, [SingleMessage(b"x")]), sequence_id, sequence_id, 1)


def topic() -> tuple[Topic, HeldAdds]:
    ml = HeldAdds()
    service = SimpleNamespace(
        config=BrokerConfig(),
        executor=None,
        deduplication_in=lambda _name: True,
        message_ttl_in=lambda _name: 0,
        load_topic_epoch=lambda _name: None,
        load_terminated=lambda _name: None,
        backlog_quota_in=lambda _name: None,
        delayed_delivery_in=lambda _name: DelayedDelivery(),
        compaction_threshold_in=lambda _name: 0,
        offloaders=SimpleNamespace(configured=None),  # offload off
        offload_threshold_in=lambda _name: -1,
    )
    return Topic(TopicName.parse("t"), ml, service), ml  # type: ignore[arg-type]


def test_a_resend_while_the_first_copy_is_written_is_refused_then_acknowledged_as_a_duplicate() -> None:
    t, ml = topic()
    (first,) = t.publish_entries("p", [append(0)])
    (resend,) = t.publish_entries("p", [append(0)])
    assert isinstance(resend, PersistenceError)  # not known yet whether the first copy is written
    ml.complete(Position(1, 0))
    assert not isinstance(first, PersistenceError) and first.result(1) == (Position(1, 0), False)
    (later,) = t.publish_entries("p", [append(0)])
    assert not isinstance(later, PersistenceError) and later.result(1) == (None, True)
    assert len(ml.callbacks) == 0  # nothing was appended twice


def test_a_resend_after_the_first_copy_failed_is_written() -> None:
    t, ml = topic()
    (first,) = t.publish_entries("p", [append(0)])
    ml.complete(ManagedLedgerError("t", "bookies down"))
    assert not isinstance(first, PersistenceError) and first.exception(1) is not None
    (resend,) = t.publish_entries("p", [append(0)])
    assert not isinstance(resend, PersistenceError)
    assert len(ml.callbacks) == 1  # appended again
    ml.complete(Position(1, 1))
    assert resend.result(1) == (Position(1, 1), False)


def test_a_replicators_messages_are_deduplicated_on_their_origins_producer_and_sequence_id() -> None:
    """A producer named pulsar.repl.<cluster> sends other producers' messages: de-duplication keys on the
    producer name and sequence id in each message's metadata (Pulsar's rule), so a replay after the
    replicator rewound is dropped, whatever sequence ids the replicator's own sends carry."""
    from impl.protocol import entry_codec

    t, ml = topic()

    def replicated(origin: str, sequence_id: int) -> Append:
        data = build_messages(origin, sequence_id, 0, [SingleMessage(b"r")])
        return Append.of_replicated(data, entry_codec.parse(data))

    (first,) = t.publish_entries("pulsar.repl.west", [replicated("east-producer", 7)])
    ml.complete(Position(1, 0))
    assert not isinstance(first, PersistenceError) and first.result(1) == (Position(1, 0), False)
    (replay,) = t.publish_entries("pulsar.repl.west", [replicated("east-producer", 7)])
    assert not isinstance(replay, PersistenceError) and replay.result(1) == (None, True)
    (other,) = t.publish_entries("pulsar.repl.west", [replicated("another-producer", 7)])
    assert len(ml.callbacks) == 1  # another origin producer's sequence 7 is new: appended
    ml.complete(Position(1, 1))
    assert not isinstance(other, PersistenceError) and other.result(1) == (Position(1, 1), False)


def chunk(sequence_id: int, chunk_id: int, uuid: str = "p-0", chunks: int = 3) -> Append:
    """One chunk of a chunked message as the official client sends it: the message's sequence id and
    uuid in every chunk, each with its index."""
    from impl.protocol import entry_codec
    from impl.protocol import pulsar_api_pb2 as api

    meta = api.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=0, uuid=uuid)
    meta.num_chunks_from_msg, meta.total_chunk_msg_size, meta.chunk_id = chunks, 3 * chunks, chunk_id
    data = entry_codec.build(meta, b"c%d" % chunk_id)
    return Append(data, sequence_id, sequence_id, 3, is_chunk=True, chunk=Append.chunk_of(meta))


def test_a_chunk_resent_after_a_lost_receipt_is_not_stored_twice() -> None:
    """A broker that stored chunk 1 and died before its receipt: the producer resends chunk 1 to the next
    owner. Stored twice, the consumer could not put the message together (the official client drops it),
    though its send was confirmed; de-duplication takes the resend for a duplicate, as the chunks' uuid
    and index say, and every next chunk is still written."""
    t, ml = topic()
    for chunk_id in (0, 1):
        (sent,) = t.publish_entries("p", [chunk(5, chunk_id)])
        ml.complete(Position(1, chunk_id))
        assert not isinstance(sent, PersistenceError) and sent.result(1) == (Position(1, chunk_id), False)
    (resent,) = t.publish_entries("p", [chunk(5, 1)])
    assert not isinstance(resent, PersistenceError) and resent.result(1) == (None, True)
    (first_again,) = t.publish_entries("p", [chunk(5, 0)])
    assert not isinstance(first_again, PersistenceError) and first_again.result(1) == (None, True)
    assert len(ml.callbacks) == 0  # nothing appended twice
    (last,) = t.publish_entries("p", [chunk(5, 2)])
    assert len(ml.callbacks) == 1  # the next chunk is new
    (in_flight,) = t.publish_entries("p", [chunk(5, 2)])
    assert isinstance(in_flight, PersistenceError)  # its first copy is not written yet
    ml.complete(Position(1, 2))
    assert not isinstance(last, PersistenceError) and last.result(1) == (Position(1, 2), False)
    (other,) = t.publish_entries("p", [chunk(6, 0, uuid="p-1")])
    assert len(ml.callbacks) == 1  # the next message's first chunk is written
