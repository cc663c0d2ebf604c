"""Read-LAC and recovery cores over a simulated cluster (seeded, deterministic interleavings)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from impl.bookie.client.errors import LedgerFencedError, NotEnoughBookiesError
from impl.bookie.client.ledger_update import StartRecovery, UpdateMetadata
from impl.bookie.client.read_lac import ReadLacDone, ReadLacFailed, ReadLacOp
from impl.bookie.client.recovery import RecoveryDone, RecoveryFailed, RecoveryOp, RecoveryPhase
from impl.bookie.client.writer import Add, AddCompleted, AddFailed, BookieAnswered, Close, LedgerWriter, Send, Start
from impl.bookie.entry_format import encode_entry, master_key, read_header
from impl.bookie.protocol import AddRequest, ErrorCode, ReadRequest, ReadResponse
from impl.metadata.ledger import Fragment, LedgerMetadata, LedgerState

from .simulation import SimCluster


def stored_entries(cluster: SimCluster, bookie: str) -> set[int]:
    ledger = cluster.bookies[bookie].core.ledgers.get(LEDGER)
    return set() if ledger is None else set(ledger.entries)


LEDGER = 3
BOOKIES = ["b0:1", "b1:1", "b2:1"]
SPARES = ("s0:1", "s1:1", "s2:1")


def new_cluster(seed: int = 0, e: int = 3, qw: int = 3, qa: int = 2) -> SimCluster:
    meta = LedgerMetadata(e, qw, qa, (Fragment(0, tuple(BOOKIES[:e])),), password=b"secret")
    return SimCluster(LEDGER, BOOKIES[:e], meta, spares=SPARES, seed=seed)


def write(cluster: SimCluster, writer: LedgerWriter, count: int) -> None:
    for i in range(count):
        cluster.perform(writer, writer.step(Add(f"entry-{i}".encode())))
    cluster.run()


def recover(cluster: SimCluster, read_ahead: int = 1) -> RecoveryOp:
    op = RecoveryOp(LEDGER, cluster.store.metadata, read_ahead=read_ahead)
    cluster.perform(op, op.step(Start()))
    return op


def outcome(cluster: SimCluster, op: RecoveryOp) -> RecoveryDone:
    (result,) = [e for e in cluster.events_of(op) if isinstance(e, RecoveryDone | RecoveryFailed)]
    assert isinstance(result, RecoveryDone), result
    return result


def acknowledged(cluster: SimCluster, writer: LedgerWriter) -> list[int]:
    return [e.entry_id for e in cluster.events_of(writer) if isinstance(e, AddCompleted)]


# ---- read-LAC against recorded answers ------------------------------------------------------------


def lac_answer(entry_id: int, lac: int, length: int = 10) -> ReadResponse:
    body = encode_entry(LEDGER, entry_id, lac, length, b"p", password=b"secret")
    return ReadResponse(LEDGER, entry_id, ErrorCode.EOK, body)


def test_read_lac_fences_every_bookie_and_takes_the_max_lac() -> None:
    meta = LedgerMetadata(3, 3, 2, (Fragment(0, ("a", "b", "c")),), password=b"secret")
    op = ReadLacOp(LEDGER, meta)
    sent = op.step(Start())
    assert [s.bookie for s in sent] == ["a", "b", "c"]
    request = sent[0].request
    assert isinstance(request, ReadRequest) and request.fence and request.master_key == master_key(b"secret")
    assert (
        op.step(BookieAnswered("a", request, lac_answer(5, 3, 50))) == []
    )  # one answer covers no write set of E3/Qw3/Qa2
    # The LAC and the length come from one header (BookKeeper's RecoveryData): the max-LAC answer's.
    assert op.step(BookieAnswered("b", request, lac_answer(6, 4, 60))) == [ReadLacDone(4, 60)]
    assert op.step(BookieAnswered("c", request, lac_answer(9, 8))) == []  # done already


def test_read_lac_counts_no_entry_as_an_answer_and_fails_without_coverage() -> None:
    meta = LedgerMetadata(3, 3, 2, (Fragment(0, ("a", "b", "c")),), password=b"secret")
    op = ReadLacOp(LEDGER, meta)
    request = op.step(Start())[0].request
    assert op.step(BookieAnswered("a", request, ReadResponse(LEDGER, -1, ErrorCode.EIO))) == []
    assert op.step(BookieAnswered("b", request, ReadResponse(LEDGER, -1, ErrorCode.ENOENTRY))) == []
    (failed,) = op.step(BookieAnswered("c", request, None))
    assert isinstance(failed, ReadLacFailed) and isinstance(failed.error, NotEnoughBookiesError)
    assert "a" in str(failed.error) and "c" in str(failed.error)

    op = ReadLacOp(LEDGER, meta)
    assert op.step(BookieAnswered("a", request, ReadResponse(LEDGER, -1, ErrorCode.ENOLEDGER))) == []
    assert op.step(BookieAnswered("b", request, ReadResponse(LEDGER, -1, ErrorCode.ENOENTRY))) == [ReadLacDone(-1, 0)]


def test_read_lac_keeps_the_first_header_with_the_largest_lac() -> None:
    # ReadLastConfirmedOp replaces its RecoveryData only on a strictly larger LAC; (-1, 0) to begin with.
    meta = LedgerMetadata(3, 3, 1, (Fragment(0, ("a", "b", "c")),), password=b"secret")
    op = ReadLacOp(LEDGER, meta, fence=False)
    request = op.step(Start())[0].request
    assert op.step(BookieAnswered("a", request, lac_answer(3, -1, 30))) == []
    assert (op.lac, op.length) == (-1, 0)  # a LAC of -1 replaces nothing
    assert op.step(BookieAnswered("b", request, lac_answer(4, 2, 40))) == []
    assert op.step(BookieAnswered("c", request, lac_answer(5, 2, 50))) == [
        ReadLacDone(2, 40)
    ]  # equal LAC: the first stays


def test_read_lac_treats_a_corrupt_entry_as_an_error() -> None:
    meta = LedgerMetadata(2, 2, 2, (Fragment(0, ("a", "b")),), password=b"secret")
    op = ReadLacOp(LEDGER, meta)
    request = op.step(Start())[0].request
    good = lac_answer(4, 3)
    corrupt = ReadResponse(LEDGER, 4, ErrorCode.EOK, good.body[:-1] + b"X")
    assert op.step(BookieAnswered("a", request, corrupt)) == []
    assert op.step(BookieAnswered("b", request, good)) == [ReadLacDone(3, 10)]


@pytest.mark.parametrize("event", [Add(b"x"), Close(), ReadLacDone(3), "start"])
def test_an_event_of_another_type_is_refused_by_recovery_and_read_lac(event: object) -> None:
    meta = LedgerMetadata(3, 3, 2, (Fragment(0, ("a", "b", "c")),), password=b"secret")
    read_lac = ReadLacOp(LEDGER, meta)
    with pytest.raises(TypeError, match="not a read-LAC event"):
        read_lac.step(event)  # type: ignore[arg-type]
    op = RecoveryOp(LEDGER, meta)
    with pytest.raises(TypeError, match="not a recovery event"):
        op.step(event)  # type: ignore[arg-type]
    assert op.phase is RecoveryPhase.STARTING and op.step(Start()) == [UpdateMetadata(StartRecovery(LEDGER))]


# ---- recovery over the simulated cluster ------------------------------------------------------------


def test_recovery_of_a_closed_ledger_does_nothing() -> None:
    cluster = new_cluster()
    writer = LedgerWriter(LEDGER, cluster.store.metadata)
    write(cluster, writer, 3)
    cluster.perform(writer, writer.step(Close()))
    op = RecoveryOp(LEDGER, cluster.store.metadata)
    (done,) = op.step(Start())
    assert isinstance(done, RecoveryDone) and done.adopted and done.metadata.last_entry_id == 2


def test_recovery_fences_the_writer_and_keeps_every_acknowledged_entry() -> None:
    cluster = new_cluster()
    writer = LedgerWriter(LEDGER, cluster.store.metadata)
    write(cluster, writer, 5)
    op = RecoveryOp(LEDGER, cluster.store.metadata)
    assert op.step(Start()) == [UpdateMetadata(StartRecovery(LEDGER))]
    cluster.perform(op, op.step(cluster.store.apply(StartRecovery(LEDGER))))
    cluster.run()
    done = outcome(cluster, op)
    assert not done.adopted
    assert (done.metadata.state, done.metadata.last_entry_id) == (LedgerState.CLOSED, 4)
    assert done.metadata.length == sum(len(f"entry-{i}") for i in range(5))
    cluster.perform(writer, writer.step(Add(b"late")))
    cluster.run()
    failures = [e for e in cluster.events_of(writer) if isinstance(e, AddFailed)]
    assert failures and all(isinstance(f.error, LedgerFencedError) for f in failures)
    assert all(b.core.ledgers[LEDGER].fenced for b in cluster.bookies.values() if LEDGER in b.core.ledgers)


def recover_recording(cluster: SimCluster, read_ahead: int = 1) -> tuple[RecoveryOp, list[Send]]:
    """Run a recovery to its end; every request it sent, in order."""
    op = RecoveryOp(LEDGER, cluster.store.metadata, read_ahead=read_ahead)
    seen: list[Send] = []
    perform = cluster.perform

    def recording(client: Any, outputs: list[Any]) -> None:
        if client is op:
            seen.extend(o for o in outputs if isinstance(o, Send))
        perform(client, outputs)

    cluster.perform = recording  # type: ignore[method-assign]
    cluster.perform(op, op.step(Start()))
    cluster.run()
    return op, seen


def entries_read(seen: list[Send]) -> list[int]:
    return [s.request.entry_id for s in seen if isinstance(s.request, ReadRequest)]


@pytest.mark.parametrize("read_ahead", [1, 2])
def test_recovery_reads_from_the_start_point_plus_one_and_never_the_start_entry(read_ahead: int) -> None:
    """BookKeeper's LedgerRecoveryOp reads LAC+1, LAC+2, ... straight after the fencing read-LAC:
    the start entry itself is not read (ledger.tla reads start+1 directly)."""
    cluster = new_cluster()
    writer = LedgerWriter(LEDGER, cluster.store.metadata)
    for i in range(3):  # one at a time: entry 2 carries LAC 1
        cluster.perform(writer, writer.step(Add(f"entry-{i}".encode())))
        cluster.run()
    op, seen = recover_recording(cluster, read_ahead)
    done = outcome(cluster, op)
    assert op._start == 1
    assert sorted(set(entries_read(seen))) == [-1, 2, *range(3, 3 + read_ahead)]  # -1: the read-LAC
    assert (done.metadata.last_entry_id, done.metadata.length) == (2, sum(len(f"entry-{i}") for i in range(3)))
    # the write-back of entry 2 carries its own header length and the recovery's LAC (the start point)
    (add, *_) = [s for s in seen if isinstance(s.request, AddRequest)]
    assert isinstance(add.request, AddRequest) and add.request.recovery
    assert read_header(add.request.body)[1:] == (2, 1, done.metadata.length)


def reads_by_entry(seen: list[Send]) -> dict[int, list[str]]:
    """Each entry's recovery reads (not the read-LAC), as the bookies they went to, in order."""
    out: dict[int, list[str]] = {}
    for s in seen:
        if isinstance(s.request, ReadRequest) and s.request.entry_id >= 0:
            out.setdefault(s.request.entry_id, []).append(s.bookie)
    return out


@pytest.mark.parametrize(("e", "qw", "qa"), [(3, 3, 2), (3, 2, 2), (3, 3, 1)])
def test_recovery_reads_one_bookie_at_a_time_in_write_set_order(e: int, qw: int, qa: int) -> None:
    """Sequential recovery reads (BookKeeper's default): an entry found is read from the first bookie of
    its write set only; the end takes Qw-Qa+1 negative answers, asked one after the other."""
    cluster = new_cluster(e=e, qw=qw, qa=qa)
    writer = LedgerWriter(LEDGER, cluster.store.metadata)
    write(cluster, writer, 4)
    op, seen = recover_recording(cluster)
    assert outcome(cluster, op).metadata.last_entry_id == 3
    reads = reads_by_entry(seen)
    in_order = {x: [BOOKIES[(x + i) % e] for i in range(qw)] for x in reads}  # write-set order
    end = max(reads)
    assert end == 4 and reads[end] == in_order[end][: qw - qa + 1]
    assert all(reads[x] == in_order[x][:1] for x in reads if x != end)


def test_a_silent_bookie_moves_the_read_to_the_next_of_the_write_set() -> None:
    cluster = new_cluster()
    writer = LedgerWriter(LEDGER, cluster.store.metadata)
    write(cluster, writer, 3)
    cluster.silent.add("b1:1")  # first of entry 1's write set (b1, b2, b0)
    op, seen = recover_recording(cluster)
    assert outcome(cluster, op).metadata.last_entry_id == 2
    reads = reads_by_entry(seen)
    assert reads[1] == ["b1:1", "b2:1"]  # timed out, then the next bookie
    assert reads[0] == ["b0:1"]


def test_recovery_finding_nothing_past_the_start_closes_with_the_read_lac_length() -> None:
    """The start point is the last fragment's first entry - 1 (entries before it were confirmed when the
    writer changed the ensemble); nothing follows it. The closed length is the read-LAC's: the header
    of the answer with the largest LAC (BookKeeper's RecoveryData), here entry 1's."""
    key = master_key(b"secret")
    fragments = (Fragment(0, tuple(BOOKIES)), Fragment(2, ("b0:1", "b1:1", "s0:1")))
    meta = LedgerMetadata(3, 3, 2, fragments, password=b"secret")
    cluster = SimCluster(LEDGER, BOOKIES, meta, spares=SPARES)
    lengths = {0: 7, 1: 14}
    for bookie in BOOKIES:
        for entry_id, lac in ((0, -1), (1, 0)):
            body = encode_entry(
                LEDGER, entry_id, lac, lengths[entry_id], f"entry-{entry_id}".encode(), password=b"secret"
            )
            assert cluster.bookies[bookie].answer(AddRequest(LEDGER, entry_id, key, body)).code is ErrorCode.EOK
    op, seen = recover_recording(cluster)
    done = outcome(cluster, op)
    assert op._start == 1  # max(LAC 0, first entry 2 - 1)
    assert sorted(set(entries_read(seen))) == [-1, 2]  # no read of entry 1
    assert (done.metadata.last_entry_id, done.metadata.length) == (1, 14)


@pytest.mark.parametrize("read_ahead", [1, 3])
def test_an_entry_gap_does_not_extend_the_recovered_ledger(read_ahead: int) -> None:
    cluster = new_cluster()
    writer = LedgerWriter(LEDGER, cluster.store.metadata)
    write(cluster, writer, 4)  # entries 0..3 everywhere
    stray = encode_entry(LEDGER, 5, 3, 99, b"stray", password=b"secret")
    response = cluster.bookies["b1:1"].answer(AddRequest(LEDGER, 5, master_key(b"secret"), stray))
    assert response.code is ErrorCode.EOK  # entry 4 never written
    op = recover(cluster, read_ahead)
    cluster.run()
    assert outcome(cluster, op).metadata.last_entry_id == 3


def test_recovery_with_one_bookie_silent() -> None:
    cluster = new_cluster(seed=3)
    writer = LedgerWriter(LEDGER, cluster.store.metadata)
    write(cluster, writer, 6)
    cluster.silent.add("b2:1")
    op = recover(cluster)
    cluster.run()
    done = outcome(cluster, op)
    assert done.metadata.last_entry_id == 5
    # write-back to the silent bookie timed out: a local ensemble change, written only by the close
    assert "b2:1" not in done.metadata.fragments[-1].ensemble
    assert cluster.store.version == 2  # StartRecovery and RecoveryClose: no separate ensemble-change write


def test_recovery_with_one_bookie_dropping_adds() -> None:
    cluster = new_cluster(seed=5)
    cluster.drop_adds.add("b0:1")
    writer = LedgerWriter(LEDGER, cluster.store.metadata)
    write(cluster, writer, 6)  # the writer replaces b0 by an ensemble change
    assert acknowledged(cluster, writer) == list(range(6))
    assert "b0:1" not in cluster.store.metadata.last_ensemble
    op = recover(cluster)
    cluster.run()
    assert outcome(cluster, op).metadata.last_entry_id == 5


def test_recovery_fails_when_an_entry_can_be_neither_found_nor_ruled_out() -> None:
    cluster = new_cluster()
    writer = LedgerWriter(LEDGER, cluster.store.metadata)
    write(cluster, writer, 2)
    op = recover(cluster)
    # fence everything, then silence two bookies before the recovery reads are answered
    while op.phase is RecoveryPhase.FENCING:
        cluster.step()
    cluster.silent.update({"b1:1", "b2:1"})
    cluster.run()
    (failed,) = [e for e in cluster.events_of(op) if isinstance(e, RecoveryFailed)]
    assert isinstance(failed.error, NotEnoughBookiesError) and "retry" in str(failed.error)
    assert cluster.store.metadata.state is LedgerState.IN_RECOVERY  # a retry can pick it up


@pytest.mark.parametrize("seed", range(12))
def test_concurrent_recoveries_during_writing_agree_and_keep_the_writers_lac(seed: int) -> None:
    cluster = new_cluster(seed=seed)
    writer = LedgerWriter(LEDGER, cluster.store.metadata)
    write(cluster, writer, 3)
    for i in range(12):  # keep adds in flight while recoveries start
        cluster.perform(writer, writer.step(Add(f"more-{i}".encode())))
        for _ in range(cluster.random.randrange(4)):
            cluster.step()
    ops = []
    for _ in range(4):
        ops.append(recover(cluster))
        for _ in range(cluster.random.randrange(6)):
            cluster.step()
    cluster.run()
    ends = {outcome(cluster, op).metadata.last_entry_id for op in ops}
    assert len(ends) == 1, ends
    (end,) = ends
    assert cluster.store.metadata.last_entry_id == end
    confirmed = acknowledged(cluster, writer)
    assert confirmed == list(range(len(confirmed)))
    assert end >= writer.last_add_confirmed  # recovery never ends below the writer's LAC
    assert all(entry_id <= end for entry_id in confirmed)


def test_recovery_sends_only_fenced_reads_and_recovery_adds() -> None:
    cluster = new_cluster()
    writer = LedgerWriter(LEDGER, cluster.store.metadata)
    write(cluster, writer, 2)
    op = RecoveryOp(LEDGER, cluster.store.metadata)
    op.step(Start())
    outputs = op.step(cluster.store.apply(StartRecovery(LEDGER)))
    seen: list[Send] = []
    pending = [o for o in outputs if isinstance(o, Send)]
    while pending:
        send = pending.pop(0)
        seen.append(send)
        response = cluster.network.answer(send.bookie, send.request)
        more = op.step(BookieAnswered(send.bookie, send.request, response))
        pending += [o for o in more if isinstance(o, Send)]
        for o in more:
            if isinstance(o, UpdateMetadata):
                op.step(cluster.store.apply(o.change))
    assert seen and all(
        (isinstance(s.request, ReadRequest) and s.request.fence)
        or (isinstance(s.request, AddRequest) and s.request.recovery)
        for s in seen
    )
    assert op.phase is RecoveryPhase.DONE and cluster.store.metadata.last_entry_id == 1


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    quorums=st.sampled_from([(3, 3, 2), (3, 2, 2), (2, 2, 2), (3, 3, 3), (3, 2, 1)]),
    recoverers=st.integers(1, 4),
    fault=st.sampled_from(["none", "silent", "drop-adds"]),
    read_ahead=st.integers(1, 4),
)
def test_any_interleaving_recovers_one_end_covering_every_acknowledged_entry(
    seed: int, quorums: tuple[int, int, int], recoverers: int, fault: str, read_ahead: int
) -> None:
    e, qw, qa = quorums
    cluster = new_cluster(seed=seed, e=e, qw=qw, qa=qa)
    writer = LedgerWriter(LEDGER, cluster.store.metadata)
    for i in range(10):
        cluster.perform(writer, writer.step(Add(f"w-{i}".encode())))
        for _ in range(cluster.random.randrange(5)):
            cluster.step()
    victim = cluster.random.choice(BOOKIES[:e])
    # A silent bookie only leaves Qw-Qa+1 answers when Qa < Qw: otherwise recovery must (rightly) fail.
    if fault == "silent" and qa < qw:
        cluster.silent.add(victim)
    elif fault == "drop-adds":
        cluster.drop_adds.add(victim)
    ops = []
    for _ in range(recoverers):
        ops.append(recover(cluster, read_ahead))
        for _ in range(cluster.random.randrange(8)):
            cluster.step()
    cluster.run()
    results = [e for op in ops for e in cluster.events_of(op) if isinstance(e, RecoveryDone | RecoveryFailed)]
    assert len(results) == len(ops)
    ends = {r.metadata.last_entry_id for r in results if isinstance(r, RecoveryDone)}
    assert len(ends) <= 1, ends
    confirmed = acknowledged(cluster, writer)
    assert confirmed == list(range(len(confirmed)))  # in order, no holes
    stored = cluster.store.metadata
    if stored.state is LedgerState.CLOSED:
        assert ends == {stored.last_entry_id}
        assert all(entry_id <= stored.last_entry_id for entry_id in confirmed)
        # every acknowledged entry is readable from the closed ledger's fragments
        for entry_id in confirmed:
            holders = [b for b in stored.write_set(entry_id) if entry_id in stored_entries(cluster, b)]
            assert len(holders) >= 1, (entry_id, stored.fragments)
    else:
        assert not ends and all(isinstance(r, RecoveryFailed) for r in results)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    quorums=st.sampled_from([(3, 3, 2), (3, 2, 2), (2, 2, 2), (3, 2, 1)]),
    faulty=st.lists(st.sampled_from(["b0:1", "b1:1", "b2:1"]), max_size=2, unique=True),
)
def test_every_completed_add_sits_on_qa_bookies_of_its_stored_write_set(
    seed: int, quorums: tuple[int, int, int], faulty: list[str]
) -> None:
    e, qw, qa = quorums
    cluster = new_cluster(seed=seed, e=e, qw=qw, qa=qa)
    writer = LedgerWriter(LEDGER, cluster.store.metadata)
    checked = 0

    def check_new_completions() -> None:
        # At the moment an add completes, Qa bookies of its write set *in the stored metadata* hold it.
        nonlocal checked
        confirmed = acknowledged(cluster, writer)
        stored = cluster.store.metadata
        for entry_id in confirmed[checked:]:
            holders = [b for b in stored.write_set(entry_id) if entry_id in stored_entries(cluster, b)]
            assert len(holders) >= qa, (entry_id, holders, stored.fragments)
        checked = len(confirmed)

    for i in range(15):
        cluster.perform(writer, writer.step(Add(f"w-{i}".encode())))
        for _ in range(cluster.random.randrange(4)):
            cluster.step()
            check_new_completions()
        if i == 8:  # bookies start failing mid-stream: one goes silent, one drops adds
            for n, bookie in enumerate(b for b in faulty if b in BOOKIES[:e]):
                (cluster.silent if n == 0 else cluster.drop_adds).add(bookie)
    while cluster.step():
        check_new_completions()
    assert acknowledged(cluster, writer) == list(range(15))  # spares replace the failing bookies; nothing is lost
    assert cluster.store.metadata.fragments == writer.metadata.fragments
