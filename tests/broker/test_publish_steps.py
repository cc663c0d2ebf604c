"""A topic keeps one managed-ledger step of adds in flight (impl/broker/service.py `Topic._submit`):
sends published meanwhile wait and go together in the next step, in order, and nothing that
waited is lost when the step fails or the topic closes."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from impl.broker.errors import PersistenceError, ServiceNotReady
from impl.broker.managed_ledger import ManagedLedgerClosedError, ManagedLedgerError, Position
from impl.broker.service import Topic
from tests.broker.test_dedup import HeldAdds, append, topic


class CountedSteps(HeldAdds):
    def __init__(self) -> None:
        super().__init__()
        self.steps: list[int] = []  # the number of adds in each call

    def add_many_with_callback(self, adds: list[tuple[bytes, Any]]) -> None:
        self.steps.append(len(adds))
        super().add_many_with_callback(adds)


def publish(t: Topic, sequence_id: int) -> Future[tuple[Position | None, bool]]:
    (result,) = t.publish_entries("p", [append(sequence_id)])
    assert isinstance(result, Future), result  # not refused
    return result


def counted_topic() -> tuple[Topic, CountedSteps]:
    t, _ = topic()
    ml = CountedSteps()
    t.ml = ml  # type: ignore[assignment]
    return t, ml


def test_sends_published_while_a_step_is_in_flight_share_the_next_step_in_order() -> None:
    t, ml = counted_topic()
    first = publish(t, 0)
    later = [publish(t, i) for i in range(1, 4)]
    assert ml.steps == [1]  # the three wait for the first step
    ml.complete(Position(1, 0))
    assert ml.steps == [1, 3]  # ... and go together
    for entry_id in range(1, 4):
        ml.complete(Position(1, entry_id))
    assert first.result(1) == (Position(1, 0), False)
    assert [f.result(1)[0] for f in later] == [Position(1, i) for i in range(1, 4)]
    publish(t, 4)
    assert ml.steps == [1, 3, 1]  # nothing in flight: handed over at once


def test_a_failed_step_lets_the_waiting_sends_go_and_a_closed_topic_refuses_them() -> None:
    t, ml = counted_topic()
    first, second = publish(t, 0), publish(t, 1)
    ml.complete(ManagedLedgerError("t", "bookies down"))
    assert isinstance(first.exception(1), PersistenceError)
    assert ml.steps == [1, 1]  # the waiting send was handed over after the failure
    third = publish(t, 2)
    t.closed = True  # the topic unloads while the third waits
    ml.complete(Position(1, 0))
    assert second.result(1) == (Position(1, 0), False)
    ml.complete(ManagedLedgerClosedError("t", "is closed on this broker"))  # what a closed ledger answers
    assert isinstance(third.exception(1), ServiceNotReady)  # nothing written: the client looks up again
