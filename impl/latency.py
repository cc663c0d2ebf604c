"""Latencies counted in fixed buckets, as Pulsar and BookKeeper export them (milliseconds)."""

from __future__ import annotations

import bisect
import threading

# Upper bounds (ms) of Pulsar's latency buckets; a last bucket holds everything slower.
BUCKETS_MS = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)


class LatencyBuckets:
    """How many latencies fell at or under each bound, and their sum. Thread-safe."""

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS_MS) + 1)
        self.sum_ms = 0.0
        self._lock = threading.Lock()

    def record(self, latency_ms: float) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(BUCKETS_MS, latency_ms)] += 1
            self.sum_ms += latency_ms

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus histogram buckets: (upper bound in seconds, count at or under it), +Inf last."""
        with self._lock:
            counts = list(self.counts)
        out, total = [], 0
        for bound, count in zip([*(f"{b / 1000:g}" for b in BUCKETS_MS), "+Inf"], counts, strict=True):
            total += count
            out.append((bound, total))
        return out
