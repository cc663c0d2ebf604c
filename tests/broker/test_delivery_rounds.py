"""A round of managed-ledger completions (the adds one step confirmed) is answered as one: its
listeners are told once, after every add's callback, and the Pulsar listener wakes its event loop
once for all the round's receipts. Woken per completion, a thread that is free at once (the event
loop, a subscription's dispatcher) takes the GIL for each message, and the step's completions and
the next step wait behind those hand-overs (bench/history/broker.md, "Fixed-rate publish latency")."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from impl.broker import listener, managed_ledger
from impl.broker.managed_ledger import ManagedLedger, ManagedLedgerConfig, ManagedLedgerError, Position

from .conftest import Cluster, FakeClock

TOPIC = "public/default/persistent/rounds"
ADDS = 10


class Idle(Executor):
    """A worker that never runs what it is given: the caller's own step drains the managed ledger, so
    that every completion of a step is delivered in one round, on the caller's thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return Future()


def open_ml(cluster: Cluster) -> ManagedLedger:
    store, bk = cluster.broker()
    clock = FakeClock()
    return ManagedLedger.open(TOPIC, store, bk, ManagedLedgerConfig(), clock, wall_clock=clock, executor=Idle())


def add_step(ml: ManagedLedger, callback: Callable[[int, Position | ManagedLedgerError], None]) -> None:
    """ADDS entries in one step of the managed ledger; `callback(i, outcome)` for each."""
    ml.add_many_with_callback(
        [(b"e%d" % i, lambda outcome, i=i: callback(i, outcome)) for i in range(ADDS)]  # type: ignore[misc]
    )


def test_listeners_are_told_once_per_round_after_every_callback(cluster: Cluster) -> None:
    ml = open_ml(cluster)
    called: list[int] = []
    told: list[tuple[Position, list[int]]] = []
    ml.add_listener(lambda position: told.append((position, list(called))))
    add_step(ml, lambda i, _outcome: called.append(i))
    assert called == list(range(ADDS))
    last = ml.last_confirmed()
    assert told == [(last, list(range(ADDS)))]  # once, with the last position, after every callback


def test_work_put_off_runs_after_the_rounds_callbacks(cluster: Cluster) -> None:
    ml = open_ml(cluster)
    order: list[object] = []

    def callback(i: int, _outcome: object) -> None:
        order.append(i)
        if i == 0:
            assert managed_ledger.after_deliveries(lambda: order.append("put off"))

    add_step(ml, callback)
    assert order == [*range(ADDS), "put off"]
    assert not managed_ledger.after_deliveries(lambda: order.append("outside a round"))
    assert order[-1] == "put off"


def test_the_pulsar_listener_wakes_its_loop_once_for_a_rounds_receipts(cluster: Cluster) -> None:
    """A connection whose loop wakes at once (it drains as soon as it is asked) is asked once for the
    receipts of a step, not once for each."""
    ml = open_ml(cluster)
    connection = object.__new__(listener._Connection)  # just its completion queue; no socket, no loop
    connection._completed = listener.collections.deque()
    connection._completed_lock = threading.Lock()
    connection._drain_scheduled = False
    wakes: list[int] = []
    receipts: list[int] = []

    def loop_runs_at_once(call: Callable[[], None]) -> None:
        wakes.append(len(connection._completed))
        call()

    connection.from_thread_call = loop_runs_at_once  # type: ignore[method-assign]

    def published(pid: int, seq: int, highest: int, done: Future[tuple[Position | None, bool]]) -> None:
        receipts.append(seq)

    connection._published = published  # type: ignore[method-assign]

    def completed(i: int, outcome: Position | ManagedLedgerError) -> None:
        future: Future[tuple[Position | None, bool]] = Future()
        assert isinstance(outcome, Position)
        future.set_result((outcome, False))
        connection._complete(1, i, i, future)

    add_step(ml, completed)
    assert receipts == list(range(ADDS))
    assert wakes == [ADDS]  # one wake-up, which found the whole step's receipts waiting


def test_work_put_off_goes_before_new_adds_a_callback_hands_over(cluster: Cluster) -> None:
    """The broker hands its next step to the managed ledger from the callback of the last add of the
    previous one: the receipts' wake-up, put off until then, must not wait for that hand-over."""
    ml = open_ml(cluster)
    order: list[object] = []

    def callback(i: int, _outcome: object) -> None:
        order.append(i)
        if i == 0:
            assert managed_ledger.after_deliveries(lambda: order.append("put off"))
        if i == ADDS - 1:
            order.append("handing over")
            ml.add_many_with_callback([(b"next", lambda _outcome: order.append("next done"))])

    add_step(ml, callback)
    assert order == [*range(ADDS), "handing over", "put off", "next done"]
