"""De-duplication on a topic (impl/broker/service.py), against a managed ledger whose adds complete
when the test says so: a resend while the first copy is being written, after it is written, and
after it failed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from impl.broker.dispatcher import DelayedDelivery
from impl.broker.errors import PersistenceError
from impl.broker.managed_ledger import ManagedLedgerError, Position
from impl.broker.service import Append, BrokerConfig, Topic
from impl.metadata.naming import TopicName
from impl.protocol.entry_codec import SingleMessage, build_messages


class HeldAdds:
    """The managed ledger's side of a topic: every add waits for `complete`."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []

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
