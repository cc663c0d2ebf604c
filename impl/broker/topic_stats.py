"""What a topic counts for its stats and metrics: messages and bytes in and out, publish latency.

Counters only grow; rates are the counters' growth over the last completed interval (Pulsar
computes its rates the same way, once per stats period). Publish latency, from a producer's
entry reaching the topic to the managed ledger confirming it, is kept in the buckets Pulsar
uses for `pulsar_storage_write_latency` (milliseconds), so metrics can report it as Pulsar does.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass

RATE_INTERVAL_S = 5.0
# Upper bounds (ms) of Pulsar's latency buckets; a last bucket holds everything slower.
LATENCY_BUCKETS_MS = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)


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


class LatencyBuckets:
    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self.sum_ms = 0.0

    def record(self, latency_ms: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_MS, latency_ms)] += 1
        self.sum_ms += latency_ms

    @property
    def count(self) -> int:
        return sum(self.counts)


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
