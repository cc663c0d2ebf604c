"""ledger.tla's JournalSyncData switch in the conformance suite (issue 24, items 3 and 7).

Under the switch (ledger-switch-ackbeforesync-ci) a bookie acknowledges an add before its journal
record is synced, and a crash loses the unsynced tail: TLC reports AckedEntriesReadable violated.
The replay runs that model's bookies with held journals (`SimBookie.hold`): the production core
waits for `on_durable` before it answers an add, so it refuses the counterexample at its first
acknowledged add; the mutant `bookie-acks-before-durable` (conformance/mutants.py), a core that
answers as soon as it hands the record to the journal, follows it to the end and is killed by it.
"""

from __future__ import annotations

import pytest

from conformance.ledger_cluster import LEDGER_ID, HarnessError, LedgerCluster
from conformance.ledger_spec import LedgerMapping
from conformance.mutants import CATALOGUE, applied, run_mutant
from conformance.replay import read_constants
from conformance.suite import replay_behaviours
from conformance.tla_values import Function, ModelValue, Record, Value
from conformance.tlc import SPEC_DIR, load_manifest
from tests.conformance.shared import Conformance

MODEL = "ledger-switch-ackbeforesync-ci"
MUTANT = next(m for m in CATALOGUE if m.name == "bookie-acks-before-durable")
B1 = ModelValue("b1")


def _at_b1(state: dict[str, Value], variable: str) -> Value:
    function = state[variable]
    assert isinstance(function, Function)
    return function[B1]


def _mapping() -> LedgerMapping:
    model = next(m for m in load_manifest() if m.name == MODEL)
    return LedgerMapping(read_constants((SPEC_DIR / model.config).read_text()))


def _start(mapping: LedgerMapping) -> tuple[LedgerCluster, dict[str, ModelValue]]:
    ensemble = Record.of({"first": 0, "ens": (B1,)})
    meta = Record.of({"state": "OPEN", "lastEntry": -1, "length": 0, "fragments": (ensemble,)})
    cluster, names = mapping.initial({"meta": meta})
    return cluster, names


def test_the_switch_holds_journals_and_a_held_add_is_no_acknowledgement() -> None:
    mapping = _mapping()
    assert not mapping.journal_sync and not mapping.counterexamples_are_followed
    cluster, names = _start(mapping)
    assert all(node.hold for node in cluster.bookies.values())
    cluster.writer_add()
    with pytest.raises(HarnessError, match="answered \\[\\] to one request"):
        cluster.deliver(list(cluster.inflight))  # the production core holds its reply for the sync
    assert cluster.writer.last_add_confirmed == -1


def test_an_add_answered_before_its_sync_is_lost_by_a_crash() -> None:
    """The mutant's step, and the abstraction of ledger.tla's durableState around it."""
    mapping = _mapping()
    with applied(MUTANT):
        cluster, names = _start(mapping)
        bookie = next(b for b, spec in names.items() if spec == B1)
        cluster.writer_add()
        cluster.deliver(list(cluster.inflight))  # entry 0 to its one bookie (E = Qw = Qa = 1)
        assert cluster.writer.last_add_confirmed == 0  # acknowledged, its record not durable
        state = mapping.abstract(cluster, names)
        assert _at_b1(state, "entries") == frozenset({0})
        # what a crash would leave: no entry, no LAC header
        assert _at_b1(state, "durableState") == frozenset({Record.of({"entries": frozenset(), "lac": -1})})
        cluster.crash(bookie)
        state = mapping.abstract(cluster, names)
        assert _at_b1(state, "entries") == frozenset() and _at_b1(state, "durableState") == frozenset()
        # the entry the writer confirmed is gone from the only bookie of its write set
        assert cluster.bookies[bookie].body(LEDGER_ID, 0) is None


@pytest.mark.tlc
def test_the_core_refuses_the_switch_and_the_mutant_follows_it(conformance: Conformance) -> None:
    behaviours = conformance.behaviours(MODEL)
    assert behaviours.trace is not None
    assert [action for action, _ in behaviours.trace] == [
        "Initial predicate",
        "WriterSendsAdd",
        "WriterReceivesAddResponse",
        "BookieCrashes",
    ]
    fixed = conformance.replay(MODEL)  # replay_behaviours(behaviours), once per session
    assert fixed.ok and fixed.trace is not None and fixed.trace.mismatch is not None
    assert (fixed.trace.mismatch.step, fixed.trace.mismatch.action) == (2, "WriterReceivesAddResponse")
    with applied(MUTANT):
        broken = replay_behaviours(behaviours)
    assert not broken.ok and broken.trace is not None and broken.trace.mismatch is None

    verdict = run_mutant(MUTANT, conformance.checks())
    assert verdict.killed_by == MODEL and "followed to the end" in verdict.how, verdict
