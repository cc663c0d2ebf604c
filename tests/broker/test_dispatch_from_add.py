"""New entries reach a caught-up consumer from the managed ledger's add-complete, on the thread that
delivers it, not through the service's executor (issue 46: a thread hand-over per delivery was most of the
gap between a publish's receipt and its delivery). What that must not change: a consumer gets its messages
once each and in order whichever path a round takes (inline when the subscription's lock is free, the
executor when it is held), and an entry the entry cache does not hold is still delivered (read from the
bookies on the executor, never on the add-complete's thread).

The two paths are made to overlap, not left to timing: a consumer's first delivery is held until a round on
the other path has come to the subscription, so a round that does not wait for the subscription's lock
(a delivery made after letting it go, or without taking it) shows every time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from impl.broker.dispatcher import Flow, Message
from impl.broker.service import Append, ConsumerSink, Subscription, SubscriptionType, Topic, consumer_step
from impl.broker.standalone import Standalone
from impl.protocol.entry_codec import SingleMessage, build_messages
from tests.waiting import wait_for

N = 2000
HOLD_S = 10.0  # at most, how long a held delivery waits for the other path's round (then the test fails)


class Recording(ConsumerSink):
    """The positions delivered, in delivery order, the threads that delivered them, and whether two
    deliveries were ever under way at once (a subscription delivers under its lock, one at a time)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.positions: list[tuple[int, int]] = []
        self.threads: set[str] = set()
        self.delivering = 0  # deliveries under way
        self.overlapped = False  # two at once: the consumer's order would be the threads' race

    def deliver(self, messages: list[tuple[Message, int]]) -> None:
        with self.lock:
            self.delivering += 1
            self.overlapped |= self.delivering > 1
            self.threads.add(threading.current_thread().name)
        time.sleep(0.0002)  # another thread runs mid-delivery, as after a GIL switch: an unserialized one shows
        with self.lock:
            self.positions += [(m.id.ledger_id, m.id.entry_id) for m, _ in messages]
            self.delivering -= 1


def start(tmp_path: Path, cache_mb: float | None = None) -> Standalone:
    s = Standalone(tmp_path / "standalone", port=0, web_port=0)
    if cache_mb is not None:
        s.config.managed_ledger_cache_size_mb = cache_mb
    s.start()
    return s


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    s = start(tmp_path)
    try:
        yield s
    finally:
        s.stop()


def attach(s: Standalone, topic: str) -> tuple[Subscription, Recording]:
    """A consumer of `topic` on the service itself, with permits for everything the test publishes."""
    assert s.broker is not None
    service = s.broker.service
    sink = Recording()
    consumer = service.next_consumer_id()
    sub = service.topic(topic).subscribe("sub", SubscriptionType.EXCLUSIVE, True, consumer, "c", sink)
    consumer_step(sub, Flow(consumer, N * 2))
    return sub, sink


def publish(s: Standalone, topic: str) -> None:
    client = pulsar.Client(s.pulsar_service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(
            topic, batching_enabled=False, max_pending_messages=100, block_if_queue_full=True
        )
        for i in range(N):
            producer.send_async(b"%06d" % i, None)
            if i % 50 == 0:
                time.sleep(0.001)  # rounds of a few entries each: many add-completes
        producer.flush()
    finally:
        client.close()


def in_order_once_each(sink: Recording) -> None:
    wait_for(lambda: len(sink.positions) >= N, f"{N} messages delivered")
    time.sleep(0.2)  # a duplicate would come now
    with sink.lock:
        positions = list(sink.positions)
    assert not sink.overlapped
    assert len(positions) == N
    assert positions == sorted(set(positions))  # strictly increasing: in order, none twice


def executor(thread: str) -> bool:
    """A thread of the service's executor (BrokerService.executor), where `Subscription.wake` sends rounds."""
    return thread.startswith("dispatch")


class WatchedLock:
    """A subscription's own lock, wrapped to tell the test which thread holds it, and each time a thread
    finds it held by another (a round that waits for it, the executor's `run`, or gives up on it,
    `entries_added`'s try-acquire: `report(thread, False)`) or takes it (`report(thread, True)`)."""

    def __init__(self, inner: Any, report: Callable[[str, bool], None]) -> None:
        self._inner = inner
        self._report = report
        self._owner: int | None = None
        self._depth = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = bool(self._inner.acquire(blocking=False))
        if not got:
            self._report(threading.current_thread().name, False)
            got = blocking and bool(self._inner.acquire(True, timeout))
        if got:
            self._owner = threading.get_ident()
            self._depth += 1
            self._report(threading.current_thread().name, True)
        return got

    def release(self) -> None:
        self._depth -= 1
        if not self._depth:
            self._owner = None
        self._inner.release()

    def held_here(self) -> bool:
        return self._owner == threading.get_ident()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *_exc: object) -> None:
        self.release()


class HoldsTheFirst(ConsumerSink):
    """Records the deliveries (positions, threads, whether each was made under the subscription's lock,
    overlap), and holds the first one until a round on the other path (`other_path`: its thread's name)
    came to the subscription: it found the lock held (right: it waits, or leaves the round to the
    executor), or took it, or delivered meanwhile (the bugs). So the two rounds overlap every time, with no
    reliance on timing; `held_long` if no round came within HOLD_S."""

    def __init__(self, other_path: Callable[[str], bool]) -> None:
        super().__init__()
        self.other_path = other_path
        self.sub_lock: WatchedLock | None = None
        self.cond = threading.Condition()
        self.positions: list[tuple[int, int]] = []  # in delivery order
        self.threads: list[str] = []  # the thread of each delivery
        self.unlocked: list[tuple[int, int]] = []  # delivered by a thread not holding the subscription's lock
        self.lock_events: list[tuple[str, bool]] = []  # (thread, took it): see WatchedLock
        self.meanwhile: list[tuple[str, bool]] = []  # the other path's, while the first delivery was held
        self.calls = 0
        self.delivering = 0  # deliveries under way
        self.overlapped = False
        self.holding = False
        self.held_long = False

    def lock_event(self, thread: str, took: bool) -> None:
        with self.cond:
            self.lock_events.append((thread, took))
            if self.holding and self.other_path(thread):
                self.meanwhile.append((thread, took))
            self.cond.notify_all()

    def deliver(self, messages: list[tuple[Message, int]]) -> None:
        positions = [(m.id.ledger_id, m.id.entry_id) for m, _ in messages]
        locked = self.sub_lock is not None and self.sub_lock.held_here()
        with self.cond:
            self.calls += 1
            self.delivering += 1
            self.overlapped |= self.delivering > 1
            self.cond.notify_all()
            if self.calls == 1:
                self.holding = True
                self.held_long = not self.cond.wait_for(lambda: self.overlapped or bool(self.meanwhile), HOLD_S)
                self.holding = False
            self.positions += positions
            self.threads.append(threading.current_thread().name)
            if not locked:
                self.unlocked += positions
            self.delivering -= 1
            self.cond.notify_all()


def attach_held(
    s: Standalone, name: str, other_path: Callable[[str], bool]
) -> tuple[Topic, Subscription, HoldsTheFirst]:
    """A consumer of `name` whose first delivery is held (`HoldsTheFirst`), its subscription's lock watched."""
    assert s.broker is not None
    service = s.broker.service
    topic = service.topic(name)
    sink = HoldsTheFirst(other_path)
    consumer = service.next_consumer_id()
    sub = topic.subscribe("sub", SubscriptionType.EXCLUSIVE, True, consumer, "c", sink)
    sink.sub_lock = WatchedLock(sub.lock, sink.lock_event)
    sub.lock = sink.sub_lock  # type: ignore[assignment]
    consumer_step(sub, Flow(consumer, 100))
    return topic, sub, sink


def publish_one(topic: Topic, sequence_id: int) -> threading.Thread:
    """One entry, published from a thread of its own: whichever thread delivers its add-complete (the managed
    ledger's worker, or the publishing thread), it is never the test's, which must stay free to go on."""
    data = build_messages("p", sequence_id, 0, [SingleMessage(b"%d" % sequence_id)])
    append = Append(data, sequence_id, sequence_id, 1)
    publisher = threading.Thread(target=topic.publish_entries, args=("p", [append]), name=f"publish-{sequence_id}")
    publisher.start()
    return publisher


def wait_until_held(sink: HoldsTheFirst) -> None:
    with sink.cond:
        assert sink.cond.wait_for(lambda: sink.holding, 10), "the first delivery never came"


def two_delivered_once_each_in_order(sink: HoldsTheFirst) -> None:
    """Both entries delivered once each, in order, one delivery at a time, each under the subscription's lock,
    and the other path's round kept off the lock while the first delivery was under way (every failure named)."""
    wait_for(lambda: len(sink.positions) >= 2, "both entries delivered", timeout_s=HOLD_S + 5)
    time.sleep(0.2)  # a duplicate would come now
    with sink.cond:
        wrong = []
        if sink.held_long:
            wrong.append(f"no round on the other path came while the first delivery was held: {sink.lock_events}")
        took = [thread for thread, took in sink.meanwhile if took]
        if took:
            wrong.append(f"{took} took the subscription's lock while the first delivery was under way")
        if sink.unlocked:
            wrong.append(f"{sink.unlocked} delivered without the subscription's lock")
        if sink.overlapped:
            wrong.append("two deliveries at once")
        if len(sink.positions) != 2 or sink.positions != sorted(set(sink.positions)):
            wrong.append("not delivered once each in order")
        assert not wrong, f"{'; '.join(wrong)} (delivered {sink.positions} by {sink.threads})"


def test_an_executor_round_waits_for_the_add_completes_delivery(standalone: Standalone) -> None:
    """A round on the add-complete's thread delivers entry 0 (held); entry 1 is confirmed and an executor
    round starts meanwhile: it must wait for the lock, not deliver entry 1 before (or beside) entry 0."""
    topic, sub, sink = attach_held(standalone, "persistent://public/default/add-complete-first", executor)
    publishers = [publish_one(topic, 0)]  # the lock is free: its add-complete's thread steps the dispatcher
    wait_until_held(sink)
    first = topic.ml.last_confirmed()
    assert first is not None
    publishers.append(publish_one(topic, 1))
    wait_for(lambda: topic.ml.last_confirmed() != first, "entry 1 confirmed while entry 0's delivery is held")
    sub.wake()  # an executor round for entry 1, while entry 0's delivery is held
    two_delivered_once_each_in_order(sink)
    for publisher in publishers:
        publisher.join()
    assert not executor(sink.threads[0]), f"entry 0 was not delivered from its add-complete: {sink.threads}"


def test_an_add_complete_round_leaves_the_executors_delivery_alone(standalone: Standalone) -> None:
    """An executor round delivers entry 0 (held); entry 1's add-complete comes meanwhile: it must find the
    lock held and leave the round to the executor, not deliver entry 1 before (or beside) entry 0."""
    topic, sub, sink = attach_held(standalone, "persistent://public/default/executor-first", lambda t: not executor(t))
    with sub.lock:  # entry 0's add-complete finds the lock held: its round goes to the executor
        publishers = [publish_one(topic, 0)]
        wait_for(
            lambda: any(not executor(t) and not took for t, took in sink.lock_events),
            "entry 0's add-complete finding the lock held",
        )
    wait_until_held(sink)
    publishers.append(publish_one(topic, 1))  # its add-complete comes while entry 0's delivery is held
    two_delivered_once_each_in_order(sink)
    for publisher in publishers:
        publisher.join()
    assert executor(sink.threads[0]), f"entry 0 was not delivered from the executor: {sink.threads}"


def test_entries_the_cache_does_not_hold_are_delivered_from_the_bookies(tmp_path: Path) -> None:
    s = start(tmp_path, cache_mb=0)  # nothing is cached: every read from the add-complete misses
    try:
        topic = "persistent://public/default/dispatch-uncached"
        _, sink = attach(s, topic)
        publish(s, topic)
        in_order_once_each(sink)
        assert all(t.startswith("dispatch") for t in sink.threads), sink.threads
    finally:
        s.stop()
