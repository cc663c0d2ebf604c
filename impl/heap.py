"""How a long-running server process (bookie, broker, standalone) sets up CPython's cycle collector.

What startup allocated (modules, gRPC, protobuf, the metadata client: tens of thousands of objects)
lives as long as the process. `gc.freeze()` takes it out of the collector's view; otherwise every
full collection walks it again and stops the process for tens of ms (40-55 ms measured in a bookie,
which at 1,000 requests/s shows as a latency tail).

The freeze has a side effect. The collector runs a full collection only when the objects that reached
the oldest generation since the last one exceed a quarter of those it holds. After the freeze it holds
almost nothing, so a backlog of requests triggers a full collection every few hundred ms. Each one walks
the whole backlog and frees nothing: 0.55 s of the 3.6 s a standalone took to take 20,000 messages,
the longest 80 ms (bench/history/broker.md). So a full collection is also tried only every
`FULL_EVERY` collections of the middle generation, instead of CPython's 10.

The middle generation has the same trouble on a smaller scale. A server with thousands of requests in
flight (a client recovering a ledger, a bookie answering it) promotes them all at every young
collection, and each middle collection walks them again and frees almost nothing: 0.4 s of the 7 s a
client spent recovering 100,000 entries. So the middle generation is collected every `MIDDLE_EVERY`
young collections, instead of CPython's 10: 0.13 s there (bench/history/client.md).
"""

from __future__ import annotations

import gc

FULL_EVERY = 100
MIDDLE_EVERY = 100


def settle_after_startup() -> None:
    """Call once the server has started: freeze what exists, and space out the middle and full collections."""
    gc.freeze()
    young, _, _ = gc.get_threshold()
    gc.set_threshold(young, MIDDLE_EVERY, FULL_EVERY)
