"""New entries reach a caught-up consumer from the managed ledger's add-complete, on the thread that
delivers it, not through the service's executor (issue 46: a thread hand-over per delivery was most of the
gap between a publish's receipt and its delivery). What that must not change: a consumer gets its messages
once each and in order whichever path a round takes (inline when the subscription's lock is free, the
executor when it is held), and an entry the entry cache does not hold is still delivered (read from the
bookies on the executor, never on the add-complete's thread)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from impl.broker.dispatcher import Flow, Message
from impl.broker.service import ConsumerSink, Subscription, SubscriptionType, consumer_step
from impl.broker.standalone import Standalone
from tests.waiting import wait_for

N = 2000


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


def test_a_consumer_gets_every_message_once_in_order_through_either_path(standalone: Standalone) -> None:
    topic = "persistent://public/default/dispatch-from-add"
    sub, sink = attach(standalone, topic)
    stop = threading.Event()

    def hold() -> None:  # the subscription's lock held now and then: those rounds go to the executor
        while not stop.is_set():
            with sub.lock:
                time.sleep(0.0005)
            time.sleep(0.0005)

    holder = threading.Thread(target=hold, name="holder", daemon=True)
    holder.start()
    try:
        publish(standalone, topic)
        in_order_once_each(sink)
    finally:
        stop.set()
        holder.join()
    executor = {t for t in sink.threads if t.startswith("dispatch")}
    assert executor, f"no round went through the executor: {sink.threads}"
    assert sink.threads - executor, f"no round was dispatched from the add-complete: {sink.threads}"


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
