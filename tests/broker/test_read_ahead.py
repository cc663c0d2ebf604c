"""A consumer's reads that miss the entry cache go to the bookies without holding the thread that delivers
(issue 46): as Pulsar's dispatcher (asyncReadEntriesOrWait, then readMoreEntries once a batch is handed
to the consumers), the next batch's read is issued as soon as the previous batch is delivered, while
permits remain, so the bookies read it while that batch is written to the consumer. A read the bookies
fail is tried again and the consumer stays; every message arrives once, in order.

Deterministic, not timed: the bookies' answers to reads are held by the test (`ReadGate`), so "the next
batch is being read while the previous one is delivered" is a state the test waits for and looks at."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from impl.bookie.protocol import ReadRequest
from impl.broker.dispatcher import Ack, Flow, Message
from impl.broker.ledger_list import Position
from impl.broker.service import ConsumerSink, Subscription, SubscriptionType, consumer_step
from impl.broker.standalone import Standalone
from impl.protocol.message_id import MessageId
from tests.waiting import wait_for

N = 300  # three batches of READ_BATCH (100) entries
TOPIC = "persistent://public/default/read-ahead"
STUCK_S = 5.0  # a call that waits for the held bookies this long has waited for them (the test fails)


class Recording(ConsumerSink):
    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.ids: list[MessageId] = []

    def deliver(self, messages: list[tuple[Message, int]]) -> None:
        with self.lock:
            self.ids += [m.id for m, _ in messages]

    def entries(self) -> list[int]:
        with self.lock:
            return [mid.entry_id for mid in self.ids]


class ReadGate:
    """The bookie transport of the broker's BookKeeper client, with the answers to reads held until
    `release()`, or (`fail()`) answered as if no bookie did, or (`open()`) passed as usual. Adds pass."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.lock = threading.Lock()
        self.mode = "hold"
        self.held: list[tuple[Any, Any, Any]] = []
        self.failed: list[int] = []  # entry ids of the reads failed

    def send(self, bookie: Any, request: Any, on_answer: Any) -> None:
        self.send_many([(bookie, request, on_answer)])

    def send_many(self, sends: list[tuple[Any, Any, Any]]) -> None:
        passed, failed = [], []
        with self.lock:
            for send in sends:
                if not isinstance(send[1], ReadRequest) or self.mode == "open":
                    passed.append(send)
                elif self.mode == "hold":
                    self.held.append(send)
                else:
                    failed.append(send)
                    self.failed.append(send[1].entry_id)
        for _, _, on_answer in failed:
            on_answer(None)  # no answer in time: the reader tries the next bookie, then fails the read
        if passed:
            self.inner.send_many(passed)

    def held_entries(self) -> list[int]:
        with self.lock:
            return sorted(request.entry_id for _, request, _ in self.held)

    def release(self, mode: str = "hold") -> None:
        """Let the held reads go to the bookies (`fail`: answer them as failed); then hold, fail or pass."""
        with self.lock:
            held, self.held = self.held, []
            failing, self.mode = mode == "fail", mode
        if failing:
            self.send_many(held)
        else:
            self.inner.send_many(held)


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    s = Standalone(tmp_path / "standalone", port=0, web_port=0)
    s.config.managed_ledger_cache_size_mb = 0  # no entry cache: every read goes to the bookies
    s.start()
    try:
        yield s
    finally:
        s.stop()


def in_thread(action: Any) -> threading.Thread:
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    return thread


def backlog(standalone: Standalone) -> tuple[Subscription, Recording, int, ReadGate]:
    """A consumer without permits yet, N messages published, and the bookies' read answers held."""
    assert standalone.broker is not None
    service = standalone.broker.service
    sink = Recording()
    consumer = service.next_consumer_id()
    sub = service.topic(TOPIC, create=True).subscribe("sub", SubscriptionType.EXCLUSIVE, True, consumer, "c", sink)
    client = pulsar.Client(standalone.pulsar_service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(N):
            producer.send_async(b"%06d" % i, None)
        producer.flush()
    finally:
        client.close()
    ml = sub.topic.ml
    gate = ReadGate(ml.bookkeeper.transport)
    ml.bookkeeper.transport = gate  # type: ignore[assignment]
    return sub, sink, consumer, gate


def test_next_batch_is_read_while_the_previous_is_delivered(standalone: Standalone) -> None:
    sub, sink, consumer, gate = backlog(standalone)

    # The consumer's FLOW starts the first read: it returns without waiting for the bookies.
    flow = in_thread(lambda: consumer_step(sub, Flow(consumer, 1000)))
    wait_for(lambda: gate.held_entries() == list(range(100)), "the first batch's read at the bookies")
    flow.join(STUCK_S)
    assert not flow.is_alive(), "the FLOW waited for the bookies' read"
    assert sink.entries() == []

    # The first batch answered: the next batch's read goes out (read ahead, before this batch is dispatched)
    # and stays out while this batch is delivered; the consumer's acks are served meanwhile.
    gate.release()
    wait_for(lambda: gate.held_entries() == list(range(100, 200)), "the next batch's read at the bookies")
    wait_for(lambda: sink.entries() == list(range(100)), "the first batch delivered")
    assert gate.held_entries() == list(range(100, 200))  # one read out at a time, not one per delivery
    first = tuple(sink.ids)
    ack = in_thread(lambda: consumer_step(sub, Ack(consumer, first)))
    ack.join(STUCK_S)
    assert not ack.is_alive(), "the ACK waited for the bookies' read"

    # The bookies fail the second batch (and its retries): the consumer stays, the read is tried again.
    gate.release("fail")
    wait_for(lambda: gate.failed.count(100) >= 4, "the failed read tried again")
    assert sink.entries() == list(range(100))
    assert consumer in sub.sinks
    gate.release("open")
    wait_for(lambda: len(sink.entries()) >= N, f"all {N} messages delivered")
    assert sink.entries() == list(range(N))  # in order, once each


def test_entries_expired_while_their_read_is_out_are_skipped_and_reading_goes_on(standalone: Standalone) -> None:
    """Message TTL moves the cursor past the batch being read: its answer delivers none of it, and the
    dispatcher reads on from past the expired entries instead of waiting for new ones."""
    sub, sink, consumer, gate = backlog(standalone)
    flow = in_thread(lambda: consumer_step(sub, Flow(consumer, 1000)))
    wait_for(lambda: gate.held_entries() == list(range(100)), "the first batch's read at the bookies")
    flow.join(STUCK_S)
    last = sub.topic.ml.last_confirmed()
    assert last is not None
    assert sub.expire_to(Position(last.ledger_id, 149))
    gate.release("open")
    wait_for(lambda: len(sink.entries()) >= N - 150, f"the {N - 150} messages after the expired ones")
    assert sink.entries() == list(range(150, N))
