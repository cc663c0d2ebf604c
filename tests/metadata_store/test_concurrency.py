"""Eight threads doing read-increment-conditional-write on one node, each with its own session.

Linearizable conditional writes mean: the final value equals the number of writes
that succeeded, and every write that lost a race was told so with BadVersion.
"""

from __future__ import annotations

import threading
from collections import Counter

from impl.metadata.store import BadVersion, MetadataStore

THREADS = 8
ATTEMPTS_PER_THREAD = 25


def test_conditional_increments_are_linearizable(backend):
    connect = backend.fresh()
    stores: list[MetadataStore] = [connect() for _ in range(THREADS)]
    stores[0].create("/counter", b"0")
    outcomes: Counter[str] = Counter()
    unexpected: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def worker(store: MetadataStore) -> None:
        start.wait()
        for _ in range(ATTEMPTS_PER_THREAD):
            try:
                data, stat = store.get("/counter")
                store.set("/counter", str(int(data) + 1).encode(), stat.version)
                outcome = "written"
            except BadVersion:
                outcome = "conflict"
            except BaseException as e:  # anything else is a contract violation: report it
                with lock:
                    unexpected.append(e)
                return
            with lock:
                outcomes[outcome] += 1

    threads = [threading.Thread(target=worker, args=(s,)) for s in stores]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert unexpected == []
        assert outcomes["written"] + outcomes["conflict"] == THREADS * ATTEMPTS_PER_THREAD
        data, stat = stores[0].get("/counter")
        assert int(data) == outcomes["written"]
        assert stat.version == outcomes["written"]
        assert outcomes["written"] >= 1
    finally:
        for store in stores:
            store.close()
