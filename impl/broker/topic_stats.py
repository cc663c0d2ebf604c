"""What a topic counts for its stats and metrics: messages and bytes in and out, publish latency.

Counters only grow; rates are the counters' growth over the last completed interval (Pulsar
computes its rates the same way, once per stats period). Publish latency, from a producer's
entry reaching the topic to the managed ledger confirming it, is kept in the buckets Pulsar
uses (impl/latency.py), so metrics can report it as Pulsar does.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from impl.latency import LatencyBuckets

RATE_INTERVAL_S = 5.0


@dataclass
class Rate:
    """A message and byte counter, with its per-second rates over the last completed interval."""

    messages: int = 0
    bytes: int = 0
    message_rate: float = 0.0
    byte_rate: float = 0.0
    _mark: tuple[float, int, int] = (0.0, 0, 0)

    def add(self, messages: int, size: int) -> None:
        self.messages += messages
        self.bytes += size

    def roll(self, now: float) -> None:
        at, messages, size = self._mark
        if at and now - at >= RATE_INTERVAL_S:
            self.message_rate = (self.messages - messages) / (now - at)
            self.byte_rate = (self.bytes - size) / (now - at)
        if not at or now - at >= RATE_INTERVAL_S:
            self._mark = (now, self.messages, self.bytes)


class TopicCounters:
    """One topic's counters; `published` and `dispatched` are called from the broker's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.inbound = Rate()
        self.outbound = Rate()
        self.publish_latency = LatencyBuckets()

    def published(self, messages: int, size: int, started: float) -> None:
        latency_ms = (time.monotonic() - started) * 1000
        with self._lock:
            self.inbound.add(messages, size)
        self.publish_latency.record(latency_ms)

    def dispatched(self, messages: int, size: int) -> None:
        with self._lock:
            self.outbound.add(messages, size)

    def roll(self) -> None:
        now = time.monotonic()
        with self._lock:
            self.inbound.roll(now)
            self.outbound.roll(now)
