"""How a long-running server process (bookie, broker, standalone) sets up CPython's cycle collector.

What startup allocated (modules, gRPC, protobuf, the metadata client: tens of thousands of objects)
lives as long as the process. `gc.freeze()` takes it out of the collector's view; otherwise every
full collection walks it again and stops the process for tens of ms (40-55 ms measured in a bookie,
which at 1,000 requests/s shows as a latency tail).

The freeze has a side effect. The collector runs a full collection only when the objects that reached
the oldest generation since the last one exceed a quarter of those it holds. After the freeze it holds
almost nothing, so a backlog of requests triggers a full collection every few hundred ms. Each one walks
the whole backlog and frees nothing: 0.55 s of the 3.6 s a standalone took to take 20,000 messages,
the longest 80 ms (bench/RESULTS.md, broker). So a full collection is also tried only every
`FULL_EVERY` collections of the middle generation, instead of CPython's 10.
"""

from __future__ import annotations

import gc

FULL_EVERY = 100


def settle_after_startup() -> None:
    """Call once the server has started: freeze what exists, and space out the full collections."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_EVERY)
