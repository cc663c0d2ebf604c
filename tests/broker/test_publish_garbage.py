"""Publishing leaves nothing for the cycle collector: what a message allocates on its way through the
broker is freed by reference counting as soon as its receipt is written.

A reference cycle per message (a future whose done-callback refers back to it) survives every young
collection, and the middle generation then walks thousands of them at once: at 1,000 msg/s that was a
10-40 ms pause of the whole broker every 2-3 s, the largest in-process part of the publish latency's
tail (bench/history/broker.md, "Fixed-rate publish latency")."""

from __future__ import annotations

import gc
import uuid
from concurrent.futures import Future

import pulsar

from impl.broker.ledger_list import Position
from impl.broker.standalone import Standalone

MESSAGES = 200


def publish_outcomes(garbage: list[object]) -> list[Future[object]]:
    """The futures among `garbage` that carried a publish's outcome: (position or None, duplicate)."""
    found: list[Future[object]] = []
    for o in garbage:
        if isinstance(o, Future) and o.done() and o.exception() is None:
            result = o.result()
            if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], Position | None):
                found.append(o)
    return found


def test_published_messages_leave_no_reference_cycles(standalone: Standalone) -> None:
    quiet = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    client = pulsar.Client(standalone.pulsar_service_url, operation_timeout_seconds=20, logger=quiet)
    try:
        producer = client.create_producer(f"persistent://public/default/garbage-{uuid.uuid4().hex[:8]}")
        producer.send(b"first")  # the topic, the producer and their lookups are made before the count
        gc.collect()
        gc.disable()
        try:
            for i in range(MESSAGES):
                producer.send(b"m%d" % i)
            gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds unreachable is kept, to be looked at
            gc.collect()
            garbage = list(gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        producer.close()
    finally:
        client.close()
    assert publish_outcomes(garbage) == []
    # Nothing else on the path makes a cycle per message either (what is left: a few one-off objects).
    assert len(garbage) < MESSAGES, sorted({type(o).__name__ for o in garbage})
