"""The test corpus: generated valid histories of many shapes, and the same with one injected anomaly."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from spark.generate import generate, inject
from spark.report import ONE_CLUSTER_ANOMALIES


@dataclass(frozen=True)
class Shape:
    seed: int
    ops: int
    processes: int
    topics: int
    read_ratio: float
    fail_ratio: float
    info_ratio: float
    rollover: float
    limit_ratio: float
    consumers: int = 0

    def events(self) -> list[dict[str, Any]]:
        return generate(
            seed=self.seed,
            ops=self.ops,
            processes=self.processes,
            topics=self.topics,
            read_ratio=self.read_ratio,
            fail_ratio=self.fail_ratio,
            info_ratio=self.info_ratio,
            rollover=self.rollover,
            limit_ratio=self.limit_ratio,
            consumers=self.consumers,
        )


shapes = st.builds(
    Shape,
    seed=st.integers(0, 2**31),
    ops=st.integers(1, 400),
    processes=st.integers(1, 200),
    topics=st.integers(1, 4),
    read_ratio=st.floats(0.05, 0.6),
    fail_ratio=st.floats(0.0, 0.2),
    info_ratio=st.floats(0.0, 0.1),
    rollover=st.floats(0.0, 0.5),
    limit_ratio=st.floats(0.0, 0.8),
    consumers=st.integers(0, 8),
)


def fixed_corpus(n: int) -> list[tuple[str | None, list[dict[str, Any]], list[int]]]:
    """Deterministic corpus for the Spark agreement test: n shapes, each valid and with every anomaly injected."""
    out: list[tuple[str | None, list[dict[str, Any]], list[int]]] = []
    for k in range(n):
        rng = random.Random(k)
        shape = Shape(
            k, rng.randrange(50, 300), [1, 5, 50, 200][k % 4], 1 + k % 3, 0.3, 0.08, 0.05, 0.2, 0.4, [0, 4, 8][k % 3]
        )
        events = shape.events()
        out.append((None, events, []))
        for anomaly in ONE_CLUSTER_ANOMALIES:
            injected = inject(events, anomaly, random.Random(k))
            if injected is not None:
                out.append((anomaly, injected[0], injected[1]))
    return out
