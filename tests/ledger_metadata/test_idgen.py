from __future__ import annotations

import threading

from impl.metadata import layout
from impl.metadata.idgen import LedgerIdGenerator
from tests.ledger_metadata.conftest import Connect


def test_ids_are_unique_and_increasing_and_leave_nothing_behind(connect: Connect) -> None:
    store = connect()
    generator = LedgerIdGenerator(store)
    ids = [generator.next_id() for _ in range(20)]
    assert ids == sorted(set(ids))
    assert store.children(layout.IDGEN) == []  # every ID- node was cleaned up
    # a second client of the same store continues above, never reusing an id
    other = LedgerIdGenerator(connect())
    assert other.next_id() > ids[-1]


def test_ids_from_eight_threads_are_unique(connect: Connect) -> None:
    per_thread = 15
    results: list[list[int]] = [[] for _ in range(8)]
    errors: list[BaseException] = []
    LedgerIdGenerator(connect()).next_id()  # create the idgen path once, so threads race on ids only

    def work(index: int) -> None:
        try:
            generator = LedgerIdGenerator(connect())
            for _ in range(per_thread):
                results[index].append(generator.next_id())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    every = [i for r in results for i in r]
    assert len(every) == 8 * per_thread and len(set(every)) == len(every)
    for ids in results:
        assert ids == sorted(ids)  # increasing as seen by each client
