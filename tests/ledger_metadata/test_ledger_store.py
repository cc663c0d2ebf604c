from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from impl.metadata import layout
from impl.metadata import transitions as t
from impl.metadata.ledger import Fragment, LedgerMetadata, LedgerState
from impl.metadata.ledger_store import LedgerMetadataStore, NoSuchLedger, UpdateOutcome
from impl.metadata.serde import CorruptLedgerMetadata
from impl.metadata.store import BadVersion
from tests.ledger_metadata.conftest import Connect

ENSEMBLE = ("a:3181", "b:3181", "c:3181")


def new_ledger() -> LedgerMetadata:
    return t.create(3, 2, 2, ENSEMBLE, password=b"pw", ctime=1, custom_metadata={"app": b"test"})


def test_create_read_delete_list(connect: Connect) -> None:
    ledgers = LedgerMetadataStore(connect())
    ids = [ledgers.create(new_ledger()) for _ in range(3)]
    assert ids == sorted(set(ids))
    metadata, version = ledgers.read(ids[0])
    assert metadata == new_ledger() and version == 0
    data, _ = ledgers.store.get(layout.ledger_path(ids[0]))
    assert data.startswith(b"LedgerMetadataFormatVersion\t1\n")
    big = 2**40  # long hierarchy
    ledgers.create_with_id(big, new_ledger())
    assert ledgers.store.exists("/ledgers/000/0001/0995/1162/L7776") is not None
    ledgers.store.ensure_path(layout.READONLY)  # registry and idgen nodes are not ledgers
    assert list(ledgers.ledger_ids()) == [*ids, big]
    ledgers.delete(ids[1])
    assert list(ledgers.ledger_ids()) == [ids[0], ids[2], big]
    with pytest.raises(NoSuchLedger, match=f"ledger {ids[1]} does not exist"):
        ledgers.read(ids[1])
    with pytest.raises(NoSuchLedger):
        ledgers.delete(ids[1])
    with pytest.raises(NoSuchLedger):
        ledgers.update(ids[1], t.start_recovery)


def test_a_damaged_node_is_a_typed_error(connect: Connect) -> None:
    ledgers = LedgerMetadataStore(connect())
    ledger_id = ledgers.create(new_ledger())
    ledgers.store.set(layout.ledger_path(ledger_id), b"not metadata")
    with pytest.raises(CorruptLedgerMetadata):
        ledgers.read(ledger_id)


def test_update_life_cycle(connect: Connect) -> None:
    ledgers = LedgerMetadataStore(connect())
    ledger_id = ledgers.create(new_ledger())
    changed = ledgers.update(ledger_id, lambda m: t.ensemble_change(m, 5, "b:3181", "d:3181"))
    assert changed.written and changed.version == 1 and changed.attempts == 1
    assert changed.metadata.fragments[-1] == Fragment(5, ("a:3181", "d:3181", "c:3181"))
    assert ledgers.update(ledger_id, t.start_recovery).metadata.state is LedgerState.IN_RECOVERY
    again = ledgers.update(ledger_id, t.start_recovery)
    assert not again.written and again.version == 2
    with pytest.raises(t.LedgerFenced):
        ledgers.update(ledger_id, lambda m: t.ensemble_change(m, 9, "a:3181", "e:3181"))
    closed = ledgers.update(ledger_id, lambda m: t.recovery_close(m, 7, 700))
    assert closed.written and closed.metadata.last_entry_id == 7
    adopted = ledgers.update(ledger_id, lambda m: t.recovery_close(m, 3, 300))
    assert adopted.adopted and adopted.metadata.last_entry_id == 7
    same = ledgers.update(ledger_id, lambda m: t.writer_close(m, 7, 700))
    assert not same.written and same.version == 3
    with pytest.raises(t.MetadataVersionConflict):
        ledgers.update(ledger_id, lambda m: t.writer_close(m, 8, 800))
    assert ledgers.read(ledger_id) == (closed.metadata, 3)


class Race:
    """Makes two updaters read the same version before either writes: the first application of
    each transition waits at a barrier, so exactly one conditional write wins and the other
    gets BadVersion and must re-read and re-apply."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=30)
        self.seen: dict[str, list[LedgerMetadata]] = {"x": [], "y": []}

    def transition(self, who: str, inner: t.Transition) -> t.Transition:
        def apply(current: LedgerMetadata) -> t.TransitionResult:
            self.seen[who].append(current)
            if len(self.seen[who]) == 1:
                self.barrier.wait()
            return inner(current)

        return apply


def run_both(jobs: dict[str, Callable[[], UpdateOutcome]]) -> dict[str, UpdateOutcome | Exception]:
    outcomes: dict[str, UpdateOutcome | Exception] = {}

    def run(who: str, job: Callable[[], UpdateOutcome]) -> None:
        try:
            outcomes[who] = job()
        except Exception as e:  # noqa: BLE001 - the outcome under test
            outcomes[who] = e

    threads = [threading.Thread(target=run, args=item) for item in jobs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


def test_racing_ensemble_changes_both_apply_after_one_retry(connect: Connect) -> None:
    ledger_id = LedgerMetadataStore(connect()).create(new_ledger())
    x, y = LedgerMetadataStore(connect()), LedgerMetadataStore(connect())
    race = Race()
    outcomes = run_both(
        {
            "x": lambda: x.update(
                ledger_id, race.transition("x", lambda m: t.ensemble_change(m, 4, "a:3181", "d:3181"))
            ),
            "y": lambda: y.update(
                ledger_id, race.transition("y", lambda m: t.ensemble_change(m, 4, "c:3181", "e:3181"))
            ),
        }
    )
    done = {who: o for who, o in outcomes.items() if isinstance(o, UpdateOutcome)}
    assert len(done) == 2, outcomes
    assert sorted(o.attempts for o in done.values()) == [1, 2], outcomes  # the loser saw BadVersion, re-applied
    loser = "x" if done["x"].attempts == 2 else "y"
    assert race.seen[loser][1] != race.seen[loser][0]  # it re-applied on the winner's metadata
    final, version = x.read(ledger_id)
    assert version == 2
    # same first entry: the second change replaced the fragment instead of adding one
    assert final.fragments == (Fragment(0, ENSEMBLE), Fragment(4, ("d:3181", "b:3181", "e:3181")))


def test_racing_closes_one_wins_the_other_sees_a_version_conflict(connect: Connect) -> None:
    ledger_id = LedgerMetadataStore(connect()).create(new_ledger())
    writer, recoverer = LedgerMetadataStore(connect()), LedgerMetadataStore(connect())
    race = Race()
    outcomes = run_both(
        {
            "x": lambda: writer.update(ledger_id, race.transition("x", lambda m: t.writer_close(m, 10, 100))),
            "y": lambda: recoverer.update(ledger_id, race.transition("y", lambda m: t.writer_close(m, 12, 120))),
        }
    )
    winners = [who for who, o in outcomes.items() if not isinstance(o, Exception)]
    assert len(winners) == 1, outcomes
    loser = "y" if winners == ["x"] else "x"
    assert isinstance(outcomes[loser], t.MetadataVersionConflict)
    assert len(race.seen[loser]) == 2 and race.seen[loser][1].state is LedgerState.CLOSED
    final, _ = writer.read(ledger_id)
    assert final.last_entry_id == (10 if winners == ["x"] else 12)


def test_writer_close_after_recovery_started_still_closes_and_recovery_adopts_it(connect: Connect) -> None:
    """The recoverer's start_recovery wins the race: the writer's close re-applies on IN_RECOVERY and still
    closes (docs/protocol-rules.md: writer close also from IN_RECOVERY), and the recoverer's close then adopts it."""
    ledger_id = LedgerMetadataStore(connect()).create(new_ledger())
    writer, recoverer = LedgerMetadataStore(connect()), LedgerMetadataStore(connect())
    assert recoverer.update(ledger_id, t.start_recovery).written
    closed = writer.update(ledger_id, lambda m: t.writer_close(m, 3, 30))
    assert closed.written and closed.metadata.state is LedgerState.CLOSED
    adopted = recoverer.update(ledger_id, lambda m: t.recovery_close(m, 5, 50))
    assert adopted.adopted and adopted.metadata.last_entry_id == 3


def test_bad_version_is_what_the_loop_absorbs(connect: Connect) -> None:
    ledgers = LedgerMetadataStore(connect())
    ledger_id = ledgers.create(new_ledger())
    path = layout.ledger_path(ledger_id)
    ledgers.update(ledger_id, t.start_recovery)
    with pytest.raises(BadVersion):
        ledgers.store.set(path, b"x", 0)  # a raw stale write fails; the loop re-reads instead
    assert ledgers.read(ledger_id)[1] == 1
