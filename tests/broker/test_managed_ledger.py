"""The managed ledger shell over real bookie cores, the real BookKeeper client and the in-memory store."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impl.bookie.client.api import BookKeeperClient
from impl.bookie.client.ledger_update import StartRecovery
from impl.bookie.client.metadata_writes import apply_change
from impl.bookie.client.transport import ThreadedTransport
from impl.bookie.protocol import Request, Response
from impl.bookie.server import Bookie
from impl.broker.ledger_list import LedgerList
from impl.broker.managed_ledger import (
    ManagedLedger,
    ManagedLedgerClosedError,
    ManagedLedgerConfig,
    ManagedLedgerFencedError,
    ManagedLedgerNotReadyError,
    ManagedLedgerState,
    Position,
)
from impl.metadata.layout import InvalidName
from impl.metadata.ledger import LedgerState
from impl.metadata.ledger_store import LedgerMetadataStore, NoSuchLedger
from impl.metadata.memory import MemoryServer
from impl.metadata.naming import InvalidTopicName, NonPersistentNotSupported
from impl.metadata.registry import BookieRegistry

from .conftest import BOOKIES, Cluster, FakeClock, make_cluster

TOPIC = "public/default/persistent/t0"


def open_ml(
    cluster: Cluster, config: ManagedLedgerConfig | None = None, clock: FakeClock | None = None
) -> ManagedLedger:
    store, bk = cluster.broker()
    clock = clock or FakeClock()
    return ManagedLedger.open(TOPIC, store, bk, config or ManagedLedgerConfig(), clock, wall_clock=clock)


def test_open_add_read_and_the_stored_list(cluster: Cluster) -> None:
    ml = open_ml(cluster)
    assert ml.state is ManagedLedgerState.OPEN
    assert ml.last_confirmed() is None and ml.first_position() is None
    positions = [ml.add(b"m%d" % i) for i in range(5)]
    current = positions[0].ledger_id
    assert positions == [Position(current, i) for i in range(5)]
    assert ml.read(None, 10) == [(p, b"m%d" % i) for i, p in enumerate(positions)]
    assert ml.read(positions[3], 10) == [(positions[3], b"m3"), (positions[4], b"m4")]
    assert ml.read(positions[1], 2) == [(positions[1], b"m1"), (positions[2], b"m2")]
    assert ml.last_confirmed() == positions[-1] and ml.first_position() == positions[0]
    assert ml.next_position(positions[4]) == Position(current, 5)  # the next add goes there
    stored = ml.stored_list()
    assert [i.ledger_id for i in stored.ledgers] == [current]
    stats = ml.stats()
    assert stats["entries"] == 5 and stats["ledgers"][0]["entries"] == 5 and stats["last_confirmed"] == f"{current}:4"


def test_pipelined_adds_complete_in_order(cluster: Cluster) -> None:
    ml = open_ml(cluster, ManagedLedgerConfig(max_entries_per_ledger=7))
    order: list[Position] = []
    futures = [ml.add_async(b"x%d" % i) for i in range(30)]
    for f in futures:
        f.add_done_callback(lambda f: order.append(f.result()))
    results = [f.result(timeout=10) for f in futures]
    assert results == sorted(results) and len(set(results)) == 30
    assert order == results
    assert [d for _, d in ml.read(None, 100)] == [b"x%d" % i for i in range(30)]


def test_stats_count_only_confirmed_bytes(cluster: Cluster) -> None:
    """Regression: the current ledger's size counted the bytes of adds still in flight while its entries
    counted confirmed ones, so size/entries (the mean entry a backlog quota's eviction works from) was
    inflated during a burst, and eviction skipped messages the quota allowed to stay."""
    ml = open_ml(cluster)
    ml.add(b"a" * 10)
    for bookie in cluster.transport.bookies.values():
        bookie.hold = True  # the next add's journal appends wait for sync()
    in_flight = ml.add_async(b"b" * 1000)
    stats = ml.stats()
    assert (stats["entries"], stats["size"]) == (1, 10)
    for name, bookie in cluster.transport.bookies.items():
        bookie.hold = False
        cluster.transport.sync(name)
    in_flight.result(timeout=10)
    stats = ml.stats()
    assert (stats["entries"], stats["size"]) == (2, 1010)


def test_rollover_by_entry_count(cluster: Cluster) -> None:
    ml = open_ml(cluster, ManagedLedgerConfig(max_entries_per_ledger=3))
    positions = [ml.add(b"e%d" % i) for i in range(8)]
    ledgers = sorted({p.ledger_id for p in positions})
    assert len(ledgers) == 3
    assert [p.entry_id for p in positions] == [0, 1, 2, 0, 1, 2, 0, 1]
    stored = ml.stored_list()
    assert [(i.ledger_id, i.entries) for i in stored.ledgers] == [(ledgers[0], 3), (ledgers[1], 3), (ledgers[2], 0)]
    # closed ledgers are CLOSED in BookKeeper at their last entry
    md, _ = ml.bookkeeper.ledgers.read(ledgers[0])
    assert md.state is LedgerState.CLOSED and md.last_entry_id == 2
    assert [d for _, d in ml.read(None, 100)] == [b"e%d" % i for i in range(8)]
    assert ml.next_position(positions[2]) == positions[3]  # across the ledger boundary


def test_rollover_by_size(cluster: Cluster) -> None:
    ml = open_ml(cluster, ManagedLedgerConfig(max_size_bytes=250))
    positions = [ml.add(bytes(100)) for _ in range(7)]
    assert [p.entry_id for p in positions] == [0, 1, 2, 0, 1, 2, 0]
    stored = ml.stored_list()
    assert [(i.entries, i.size) for i in stored.ledgers[:2]] == [(3, 300), (3, 300)]


def test_rollover_by_age_with_an_injected_clock(cluster: Cluster) -> None:
    clock = FakeClock()
    ml = open_ml(cluster, ManagedLedgerConfig(max_ledger_age_s=60), clock)
    first = ml.add(b"a")
    clock.advance(30)
    assert ml.add(b"b").ledger_id == first.ledger_id
    clock.advance(31)
    third = ml.add(b"c")
    assert third.ledger_id > first.ledger_id and third.entry_id == 0
    clock.advance(61)
    ml.tick()  # an idle, old ledger is rolled over without an add
    assert ml.stats()["current_ledger"] > third.ledger_id
    assert [d for _, d in ml.read(None, 10)] == [b"a", b"b", b"c"]


def test_takeover_fences_the_old_owner_for_good(cluster: Cluster) -> None:
    old = open_ml(cluster)
    acked = [old.add(b"m%d" % i) for i in range(4)]
    new = open_ml(cluster)
    # the new owner sees every acknowledged entry, then writes to its own ledger
    assert [p for p, _ in new.read(None, 10)] == acked
    assert new.add(b"new").ledger_id > acked[-1].ledger_id
    with pytest.raises(ManagedLedgerFencedError, match=f"managed ledger {TOPIC}: fenced: ledger .* was fenced"):
        old.add(b"late")
    assert old.state is ManagedLedgerState.FENCED
    for operation in (lambda: old.add(b"later"), lambda: old.read(None, 1), old.trim, lambda: old.open_cursor("s")):
        with pytest.raises(ManagedLedgerFencedError):
            operation()
    assert [d for _, d in new.read(None, 10)] == [b"m0", b"m1", b"m2", b"m3", b"new"]


def test_a_rollover_stops_at_a_ledger_another_broker_recovered(cluster: Cluster) -> None:
    """The old owner's ledger is full and idle when the new owner recovers it (closed at the same end):
    a writer close would succeed, and the rollover would write the list before the new owner. It stops
    at the close instead, naming the takeover, and creates no ledger."""
    old = open_ml(cluster, ManagedLedgerConfig(max_entries_per_ledger=1))
    first = old.add(b"a")  # the ledger is full: the next add rolls over
    new = open_ml(cluster)
    with pytest.raises(ManagedLedgerFencedError, match=r"could not close ledger \d+: another broker recovered it"):
        old.add(b"b")
    assert old.state is ManagedLedgerState.FENCED
    listed = [i.ledger_id for i in new.stored_list().ledgers]
    assert first.ledger_id in listed and old.stats()["current_ledger"] == first.ledger_id
    assert new.add(b"c").entry_id == 0
    assert [d for _, d in new.read(None, 10)] == [b"a", b"c"]
    with pytest.raises(ManagedLedgerFencedError):
        old.add(b"d")


def test_a_rollover_stops_at_a_ledger_in_recovery(cluster: Cluster) -> None:
    """Another broker has started recovering the old owner's full ledger (IN_RECOVERY, not closed yet):
    the old owner must not close it over the recovery and roll over; it is fenced, saying so."""
    old = open_ml(cluster, ManagedLedgerConfig(max_entries_per_ledger=1))
    first = old.add(b"a")
    ledgers = LedgerMetadataStore(cluster.store())
    apply_change(ledgers, StartRecovery(first.ledger_id))  # a recoverer's first step
    with pytest.raises(ManagedLedgerFencedError, match=r"another broker is recovering it \(IN_RECOVERY\)"):
        old.add(b"b")
    assert ledgers.read(first.ledger_id)[0].state is LedgerState.IN_RECOVERY  # left to the recoverer
    assert [i.ledger_id for i in old.stored_list().ledgers] == [first.ledger_id]


def test_a_bad_version_at_a_rollover_names_what_the_other_broker_wrote(cluster: Cluster) -> None:
    old = open_ml(cluster, ManagedLedgerConfig(max_entries_per_ledger=1))
    old.add(b"a")
    store = cluster.store()
    data, stat = store.get(old.path)
    listed = LedgerList.decode(data)
    store.set(old.path, LedgerList(listed.ledgers[:0], listed.properties).encode(), stat.version)  # a trim
    with pytest.raises(
        ManagedLedgerFencedError,
        match=r"changed under us while this broker rolled over: another broker took the topic over "
        rf"\(BadVersion: expected version {stat.version}, found version {stat.version + 1} with ledgers "
        rf"\[{listed.ledgers[0].ledger_id}\] removed\)",
    ):
        old.add(b"b")


def test_a_takeover_is_not_starved_by_the_previous_owners_rollovers(cluster: Cluster) -> None:
    """The worst case for a takeover: the previous owner rolls over (one entry per ledger) right before
    each of the new owner's writes of the list (issue 26: such an open lost the list to the rollovers up
    to 16 times in a row, each time told 'another broker took the topic over'). The new owner's recovery
    of the previous owner's current ledger stops those rollovers: the open wins at its first write, and
    the previous owner is fenced for good, its acknowledged adds all on the topic."""
    old = open_ml(cluster, ManagedLedgerConfig(max_entries_per_ledger=1))
    acked = [old.add(b"old-0")]  # full: its next add rolls over
    old_outcomes: list[str] = []

    def previous_owner_rolls_over() -> None:
        try:
            acked.append(old.add(b"old-%d" % len(acked)))
            old_outcomes.append("rolled over")
        except ManagedLedgerFencedError as e:
            old_outcomes.append(str(e))

    store, bk = cluster.broker()
    list_writes = 0
    set_list = store.set

    def set_after_a_rollover(path: str, data: bytes, version: int) -> Any:
        nonlocal list_writes
        if path.endswith("/persistent/t0"):
            list_writes += 1
            previous_owner_rolls_over()  # the adversary's timing: just before our conditional write
        return set_list(path, data, version)

    store.set = set_after_a_rollover  # type: ignore[method-assign]
    clock = FakeClock()
    new = ManagedLedger.open(TOPIC, store, bk, ManagedLedgerConfig(), clock, wall_clock=clock)

    assert list_writes == 1, f"the open wrote the list {list_writes} times"
    assert old_outcomes and "another broker recovered it" in old_outcomes[0], old_outcomes
    assert old.state is ManagedLedgerState.FENCED
    assert [p for p, _ in new.read(None, 100)] == acked
    assert new.add(b"new") > acked[-1]


def test_open_drops_empty_ledgers(cluster: Cluster) -> None:
    first = open_ml(cluster)
    empty = first.stats()["current_ledger"]
    second = open_ml(cluster)  # recovers the empty ledger and drops it
    ids = [i.ledger_id for i in second.stored_list().ledgers]
    assert empty not in ids and len(ids) == 1
    with pytest.raises(NoSuchLedger):
        second.bookkeeper.ledgers.read(empty)


def test_listener_is_told_of_confirmed_entries(cluster: Cluster) -> None:
    ml = open_ml(cluster)
    seen: list[Position] = []
    reads: list[bytes] = []

    def on_confirmed(p: Position) -> None:
        seen.append(p)
        reads.extend(d for _, d in ml.read(p, 1))  # a tailing reader, served from the cache

    ml.add_listener(on_confirmed)
    requests = cluster.transport.requests
    positions = [ml.add(b"t%d" % i) for i in range(3)]
    assert seen == positions and reads == [b"t0", b"t1", b"t2"]
    # only the adds went to the bookies (3 bookies each), the tailing reads did not
    assert cluster.transport.requests - requests == 3 * 3
    assert ml.stats()["cache"]["hits"] >= 3


def test_reads_of_old_entries_go_to_the_bookies(cluster: Cluster) -> None:
    ml = open_ml(cluster, ManagedLedgerConfig(max_entries_per_ledger=2, cache_bytes=10))
    positions = [ml.add(b"%05d" % i) for i in range(5)]
    before = cluster.transport.requests
    assert [d for _, d in ml.read(positions[0], 5)] == [b"%05d" % i for i in range(5)]
    assert cluster.transport.requests > before


def test_close_then_every_operation_fails_closed(cluster: Cluster) -> None:
    ml = open_ml(cluster)
    ml.add(b"a")
    ml.close()
    assert ml.state is ManagedLedgerState.CLOSED
    with pytest.raises(ManagedLedgerClosedError, match="open it again"):
        ml.add(b"b")
    with pytest.raises(ManagedLedgerClosedError):
        ml.read(None, 1)
    ml.close()  # idempotent
    again = open_ml(cluster)
    assert [d for _, d in again.read(None, 5)] == [b"a"]


def test_concurrent_adds_from_threads(cluster: Cluster) -> None:
    ml = open_ml(cluster, ManagedLedgerConfig(max_entries_per_ledger=10))
    results: list[list[Position]] = [[] for _ in range(4)]

    def producer(i: int) -> None:
        for n in range(25):
            results[i].append(ml.add(b"%d-%d" % (i, n)))

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    everything = sorted(p for r in results for p in r)
    assert len(set(everything)) == 100
    for r in results:
        assert r == sorted(r)  # each producer's adds in order
    stored = [(p, d) for p, d in ml.read(None, 200)]
    assert [p for p, _ in stored] == everything


def test_delete_removes_ledgers_cursors_and_the_node(cluster: Cluster) -> None:
    ml = open_ml(cluster, ManagedLedgerConfig(max_entries_per_ledger=2))
    for i in range(5):
        ml.add(b"%d" % i)
    ml.open_cursor("sub")
    ledgers = [i.ledger_id for i in ml.stored_list().ledgers]
    ml.delete()
    assert ml.state is ManagedLedgerState.DELETED
    assert ml.store.exists(ml.path) is None
    for ledger_id in ledgers:
        with pytest.raises(NoSuchLedger):
            ml.bookkeeper.ledgers.read(ledger_id)


def test_list_format_round_trip_and_garbage() -> None:
    listed = LedgerList.decode(b"")
    assert listed.ledgers == ()
    with pytest.raises(ValueError, match="not a managed ledger list"):
        LedgerList.decode(b"{not json")
    with pytest.raises(ValueError, match="unknown format"):
        LedgerList.decode(b'{"format": 9, "ledgers": []}')


def test_a_bad_topic_name_is_refused(cluster: Cluster) -> None:
    store, bk = cluster.broker()
    with pytest.raises(InvalidName, match="not a managed ledger path"):
        ManagedLedger.open("no-such-shape", store, bk)
    with pytest.raises(NonPersistentNotSupported):
        ManagedLedger.open("non-persistent://public/default/t0", store, bk)
    with pytest.raises(InvalidTopicName):
        ManagedLedger.open("persistent://public/t0", store, bk)


def test_the_topic_name_and_the_managed_ledger_name_open_the_same_ledger(cluster: Cluster) -> None:
    store, bk = cluster.broker()
    first = ManagedLedger.open("persistent://public/default/t0", store, bk)
    assert first.name == TOPIC
    position = first.add(b"by topic name")
    first.close()
    again = open_ml(cluster)  # TOPIC, the managed ledger name
    assert again.read(None, 10) == [(position, b"by topic name")]


def test_unreachable_bookies_fail_adds_then_the_ledger_recovers(cluster: Cluster) -> None:
    ml = open_ml(cluster, ManagedLedgerConfig(ensemble=3, write_quorum=3, ack_quorum=3))
    first = ml.add(b"before")
    registry = BookieRegistry(cluster.store())
    down = ["bk0:3181", "bk1:3181"]  # every ensemble of 3 out of 4 holds one of them
    cluster.transport.silent |= set(down)
    for bookie in down:
        registry.set_readonly(bookie, True)  # and no writable bookie is left to replace it
    with pytest.raises(ManagedLedgerNotReadyError, match="retry"):
        ml.add(b"lost")
    assert ml.state is ManagedLedgerState.OPEN
    cluster.transport.silent.clear()
    for bookie in down:
        registry.set_readonly(bookie, False)
    after = ml.add(b"after")
    assert after > first
    assert [d for _, d in ml.read(None, 10)] == [b"before", b"after"]


def test_threaded_transport_adds_rollovers_and_a_takeover_mid_stream(cluster: Cluster) -> None:
    """Completions arrive on transport threads: the worker drains them; order and fencing still hold."""

    def call(bookie: str, request: Request, timeout_s: float) -> Response:
        answers: list[Response | None] = []
        cluster.transport.send(bookie, request, answers.append)
        if answers[0] is None:
            raise TimeoutError(f"{bookie} is silent")
        return answers[0]

    shared = ThreadPoolExecutor(max_workers=2)  # one pool for both brokers' managed ledgers

    def threaded_broker(transport: ThreadedTransport) -> ManagedLedger:
        store = cluster.store()
        bk = BookKeeperClient(LedgerMetadataStore(store), BookieRegistry(store), transport, seed=7)
        config = ManagedLedgerConfig(max_entries_per_ledger=10)
        return ManagedLedger.open(TOPIC, store, bk, config, executor=shared)

    with shared, ThreadedTransport(call, timeout_s=2, max_workers=8) as transport:
        old = threaded_broker(transport)
        order: list[Position] = []
        futures = [old.add_async(b"a%d" % i) for i in range(120)]
        for f in futures:
            f.add_done_callback(lambda f: order.append(f.result()))
        results = [f.result(timeout=30) for f in futures]
        assert results == sorted(results) and len(set(results)) == 120 and order == results
        assert len({p.ledger_id for p in results}) == 12

        more = [old.add_async(b"b%d" % i) for i in range(60)]
        for _ in range(10):
            try:
                new = threaded_broker(transport)
                break
            except ManagedLedgerFencedError:
                # the old owner rolled over between our read and our write of the list: the
                # spec's CreateLedgerAndWriteList with a bad version; a broker tries the open again
                continue
        else:
            raise AssertionError("the takeover never won the list")
        outcomes: list[Position | None] = []
        for f in more:
            try:
                outcomes.append(f.result(timeout=30))
            except ManagedLedgerFencedError:
                outcomes.append(None)
        acked = [p for p in outcomes if p is not None]
        assert outcomes == acked + [None] * (len(outcomes) - len(acked))  # once fenced, every later add fails
        with pytest.raises(ManagedLedgerFencedError):
            old.add(b"late")  # whether or not an add in flight met the fence, this one does
        assert old.state is ManagedLedgerState.FENCED
        log = [d for _, d in new.read(None, 500)]
        assert log[:120] == [b"a%d" % i for i in range(120)]
        assert log[120:] == [b"b%d" % i for i in range(len(acked))]  # exactly the acknowledged ones
        assert new.add(b"c").ledger_id > max(acked + results).ledger_id
        new.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=30),
    max_entries=st.integers(min_value=1, max_value=4),
    max_bytes=st.integers(min_value=1, max_value=100),
    takeovers=st.sets(st.integers(min_value=0, max_value=29), max_size=3),
)
def test_positions_strictly_increase_across_rollovers_and_takeovers(
    sizes: list[int], max_entries: int, max_bytes: int, takeovers: set[int]
) -> None:
    server = MemoryServer()
    cluster = make_cluster(server.connect, "memory://")
    config = ManagedLedgerConfig(max_entries_per_ledger=max_entries, max_size_bytes=max_bytes)
    ml = open_ml(cluster, config)
    written: list[tuple[Position, bytes]] = []
    for i, size in enumerate(sizes):
        if i in takeovers:
            previous, ml = ml, open_ml(cluster, config)
            with pytest.raises(ManagedLedgerFencedError):
                previous.add(b"stale")
        data = bytes([i % 256]) * size
        written.append((ml.add(data), data))
    positions = [p for p, _ in written]
    assert positions == sorted(set(positions))
    for info in ml.stored_list().ledgers[:-1]:  # closed ledgers respect the limits (one add may cross bytes)
        assert info.entries <= max_entries
    assert ml.read(None, 1000) == written
    assert open_ml(cluster, config).read(None, 1000) == written
    cluster.close()


def test_an_expired_session_fences_at_once(cluster: Cluster) -> None:
    ml = open_ml(cluster)
    ml.add(b"a")
    ml.store.expire_session()
    with pytest.raises(ManagedLedgerFencedError, match="metadata session expired"):
        ml.add(b"b")
    assert ml.state is ManagedLedgerState.FENCED


def test_over_journaled_bookies(tmp_path: Path) -> None:
    """The same takeover over impl/bookie/server.py's Bookie: entries and fences go through the
    journal (fdatasync before the answer), answers arrive on the journal's thread."""
    bookies = {b: Bookie(tmp_path / b.replace(":", "_")) for b in BOOKIES}

    def call(bookie: str, request: Request, timeout_s: float) -> Response:
        # A real transport does not answer on the bookie's journal thread: block a pool thread.
        answer: Future[Response] = Future()
        bookies[bookie].submit(request, answer.set_result)
        return answer.result(timeout=timeout_s)

    transport = ThreadedTransport(call, timeout_s=10, max_workers=16)

    server = MemoryServer()
    registry = BookieRegistry(server.connect())
    for b in BOOKIES:
        registry.register(b)

    def broker() -> ManagedLedger:
        store = server.connect()
        bk = BookKeeperClient(LedgerMetadataStore(store), BookieRegistry(store), transport, seed=3)
        return ManagedLedger.open(TOPIC, store, bk, ManagedLedgerConfig(max_entries_per_ledger=4))

    try:
        old = broker()
        futures = [old.add_async(b"j%d" % i) for i in range(10)]
        positions = [f.result(timeout=30) for f in futures]
        assert positions == sorted(positions) and len({p.ledger_id for p in positions}) == 3
        cursor = old.open_cursor("sub", "earliest")
        cursor.mark_delete(positions[5])
        new = broker()
        assert [d for _, d in new.read(None, 20)] == [b"j%d" % i for i in range(10)]
        assert new.cursors()["sub"].mark_delete_position == positions[5]
        with pytest.raises(ManagedLedgerFencedError):
            old.add(b"late")
        new.close()
    finally:
        transport.close()
        for bookie in bookies.values():
            bookie.close()


def test_a_ledger_that_failed_for_want_of_a_spare_bookie_closes_at_what_it_acknowledged() -> None:
    """E3/Qw3/Qa2 on exactly 3 bookies, two go silent: the add reaches one bookie only and the writer
    finds no replacement and fails. The managed ledger closes the failed ledger with its writer's close,
    at the entries it acknowledged (BookKeeper's handle closes itself so; a metadata write, no bookie
    needed), as Pulsar does, and sends the add to a new ledger; that one cannot store it either, so the
    add fails, certainly not stored: the copy on the one bookie lies beyond the closed end. Reads of the
    closed ledger use its closed metadata (found by the workload once: 'entry 3 is beyond the last
    confirmed entry 2', for ever), before and after a takeover."""
    cluster = make_cluster(MemoryServer().connect, "memory://", BOOKIES[:3])
    ml = open_ml(cluster, ManagedLedgerConfig(cache_bytes=0))  # every read goes to the bookies
    acked = [ml.add(b"a%d" % i) for i in range(3)]
    cluster.transport.silent |= set(BOOKIES[:2])
    with pytest.raises(ManagedLedgerNotReadyError, match="could not store the adds either") as failed:
        ml.add(b"b")
    assert failed.value.rejected  # beyond the closed ends of both ledgers: on no reader's topic
    first = acked[0].ledger_id
    stored, _ = LedgerMetadataStore(cluster.store()).read(first)
    assert (stored.state, stored.last_entry_id) == (LedgerState.CLOSED, 2)
    assert (BOOKIES[2], first, 3) in cluster.transport.storage  # "b" did reach the third bookie
    assert [p for p, _ in ml.read(None, 10)] == acked
    cluster.transport.silent.clear()
    c = ml.add(b"c")
    assert c.ledger_id > first
    assert [d for _, d in ml.read(None, 10)] == [b"a0", b"a1", b"a2", b"c"]
    again = open_ml(cluster)  # and after a takeover
    assert [d for _, d in again.read(None, 10)] == [b"a0", b"a1", b"a2", b"c"]
