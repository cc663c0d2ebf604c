"""The simulated cluster itself (no TLC): the environment must not invent or lose state."""

from __future__ import annotations

from conformance.ledger_cluster import InFlight, LedgerCluster
from conformance.replay import clone
from impl.bookie.client.writer import WriterState
from impl.bookie.protocol import AddRequest
from impl.metadata.ledger import LedgerState

A, B, C = "a:3181", "b:3181", "c:3181"


def requests_to(cluster: LedgerCluster, bookie: str, client: str) -> list[InFlight]:
    return [m for m in cluster.inflight if m.bookie == bookie and m.client == client]


def recover(cluster: LedgerCluster) -> None:
    cluster.start_recovery("r1")
    while mine := [m for m in cluster.inflight if m.client == "r1"]:
        cluster.deliver(mine[:1])
    cluster.close_recovery("r1")


def test_a_writer_stopped_inside_a_step_keeps_the_view_it_had() -> None:
    # Found by replaying ledger-ensemble-change: the writer's timeout leads to an ensemble change
    # that finds the ledger CLOSED; the writer fails inside that step and drops its pending adds,
    # while ledger.tla keeps wAcks as they were.
    cluster = LedgerCluster([A, B, C], (A, B), (2, 2, 2), "w", ["r1"])
    cluster.writer_add()
    cluster.deliver(requests_to(cluster, A, "w"))
    cluster.lose_requests(requests_to(cluster, B, "w"))
    recover(cluster)
    assert cluster.metadata.state is LedgerState.CLOSED and cluster.metadata.last_entry_id == 0
    cluster.timeout_writer(B, C)
    acks, metadata = cluster.writer_view()
    assert cluster.writer.state is WriterState.FAILED
    assert acks == {0: frozenset({A})}
    assert metadata.fragments[-1].ensemble == (A, B)


def test_a_crash_keeps_only_the_journal_and_a_clone_is_independent() -> None:
    cluster = LedgerCluster([A, B], (A,), (1, 1, 1), "w", ["r1"])
    cluster.writer_add()
    cluster.deliver(requests_to(cluster, A, "w"))
    copy = clone(cluster)
    cluster.crash(A)
    ledger = cluster.bookies[A].core.ledgers[7]
    assert set(ledger.entries) == {0} and not cluster.bookies[A].up and cluster.crashes == 1
    assert copy.bookies[A].up and copy.crashes == 0  # the copy did not crash
    copy.writer_add()
    assert [type(m.request) for m in copy.inflight] == [AddRequest] and cluster.inflight == []
