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


def test_the_read_lac_answer_is_the_last_entrys_lac_even_below_a_lac_seen_before() -> None:
    """Decision (spec/ledger.md): a fencing read-LAC answer is the bookie's last entry, so its LAC is
    that entry's header's (BookKeeper's ledger storage returns the last entry for entry -1), which
    can be below a LAC piggybacked on an earlier entry. ledger.tla's bookieLac is that LAC."""
    from conformance.ledger_spec import LedgerMapping
    from conformance.tla_values import Function, ModelValue
    from impl.bookie.client.recovery import RecoveryPhase

    cluster = LedgerCluster([A], (A,), (1, 1, 1), "w", ["r1", "r2"])
    for _ in range(3):  # entries 0, 1, 2 all sent with LAC -1
        cluster.writer_add()
    cluster.deliver(list(cluster.inflight))
    assert cluster.writer.last_add_confirmed == 2
    cluster.start_recovery("r1")  # read-LAC -1: start -1, read 0
    for _ in range(4):  # read 0 -> write back 0 (LAC -1); read 1 -> write back 1 with LAC 0
        (first, *_) = [m for m in cluster.inflight if m.client == "r1"]
        cluster.deliver([first])
    op = cluster.recoveries["r1"]
    assert op is not None and op.writer is not None and op.writer.last_add_confirmed == 0
    cluster.deliver([m for m in cluster.inflight if isinstance(m.request, AddRequest)])  # entry 1, LAC 0
    core = cluster.bookies[A].core.ledgers[7]
    assert core.piggybacked_lac == 0  # the largest LAC the bookie saw...
    assert cluster.last_entry_lac(A) == -1  # ...but its last entry (2) carries -1
    mapping = LedgerMapping(
        {
            "Bookies": frozenset({ModelValue("b1")}),
            "Recoverers": frozenset({ModelValue("r1"), ModelValue("r2")}),
            "Writer": ModelValue("w"),
            "E": 1,
            "Qw": 1,
            "Qa": 1,
            "NumEntries": 3,
        }
    )
    assert mapping.abstract(cluster, {A: ModelValue("b1")})["bookieLac"] == Function.of({ModelValue("b1"): -1})
    cluster.start_recovery("r2")  # the ledger is IN_RECOVERY: r2 fences and reads the LAC at once
    (read_lac,) = [m for m in cluster.inflight if m.client == "r2"]
    cluster.deliver([read_lac])
    r2 = cluster.recoveries["r2"]
    assert r2 is not None and r2.phase is RecoveryPhase.READING and r2._start == -1  # not 0
