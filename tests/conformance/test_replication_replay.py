"""replication.tla's TLC behaviours replayed against the replication cores (conformance/replication_spec.py).

- every ci model of replication.tla, from the manifest: a passing model's whole state graph (every
  edge, every distinct state), a mutation's counterexample (acknowledged before the receipt,
  replicated again), which the cores must refuse, and de-duplication off and the witness of a
  dropped duplicate, which they must follow;
- broken cores (a `Replicator` subclass, or a mutant of the catalogue), which the replay must catch.
"""

from __future__ import annotations

import pytest

from conformance.mutants import CATALOGUE, run_mutant
from conformance.replay import read_constants, replay_graph
from conformance.replication_spec import ReplicationMapping
from conformance.suite import Behaviours
from conformance.tlc import SPEC_DIR, Outcome, load_manifest
from impl.broker.ledger_list import Position
from impl.broker.replication.replicator import Entry, Output, Replicator, SendReceipt
from tests.conformance.shared import Conformance

pytestmark = pytest.mark.tlc

MODELS = {m.name: m for m in load_manifest()}
# replay = false: a liveness mutation whose counterexample's steps are all the protocol's own
REPLICATION = [m for m in MODELS.values() if m.spec == "replication.tla" and m.profile == "ci" and m.replay]
EVERY_ACTION = {
    "Publish",
    "ReplicatorReads",
    "RemoteReceives",
    "ReplicatorReceivesReceipt",
    "BrokerCrashes",
    "OwnershipChange",
}


@pytest.fixture(scope="module")
def behaviours(conformance: Conformance) -> dict[str, Behaviours]:
    return {m.name: conformance.behaviours(m.name) for m in REPLICATION}


def test_the_manifest_has_the_models_the_issue_asks_for() -> None:
    violations = {m.violates for m in REPLICATION if m.expect is Outcome.VIOLATION}
    assert violations == {
        "NoLoss",
        "NoDuplicates",
        "NoLoop",
        "WitnessNoDuplicateDropped",
        "CursorIsMarkDelete",  # issue 47: a mutation for every property
        "ReplicatorCursorReachesEnd",
        "ProducerOrder",
        "TypeOK",  # issue 47: its cursor < outstanding is a rule (mark-delete past a waiting entry)
    }
    assert any(m.expect is Outcome.PASS for m in REPLICATION)
    assert any(m.spec == "replication.tla" and m.profile == "deep" for m in MODELS.values())


@pytest.mark.parametrize("name", [m.name for m in REPLICATION])
def test_every_ci_model_is_replayed(behaviours: dict[str, Behaviours], conformance: Conformance, name: str) -> None:
    result = conformance.replay(name)  # replay_behaviours(behaviours[name]), once per session
    assert result.ok, str(result.graph and result.graph.mismatch) + str(result.trace and result.trace.mismatch)
    if result.graph is not None:
        graph = behaviours[name].graph
        assert graph is not None
        assert result.graph.edges_covered == result.graph.edges == len(graph.edges) > 0
        assert result.graph.states_covered == result.graph.states == len(graph.labels)
        return
    assert result.trace is not None
    if name in ("replication-mutation-nodedup-ci", "replication-witness-duplicatedropped-ci"):
        # de-duplication off is a configuration the cores support; the witness is the protocol's own
        # behaviour (a message sent again is dropped as a duplicate): both followed to the end
        assert result.follow and result.trace.mismatch is None
        assert result.trace.steps == result.trace_states - 1 > 0
    else:  # bugs the replicator does not have: refused where the bug shows
        assert not result.follow and result.trace.mismatch is not None
        refused_at = {
            "replication-mutation-receiptkeepscursor-ci": "ReplicatorReceivesReceipt",
            "replication-mutation-receiptignored-ci": "ReplicatorReceivesReceipt",
            "replication-mutation-remotetakeslast-ci": "RemoteReceives",
        }
        assert result.trace.mismatch.action == refused_at.get(name, "ReplicatorReads"), str(result.trace.mismatch)


def test_the_graphs_have_every_action(behaviours: dict[str, Behaviours]) -> None:
    actions = {e.action for b in behaviours.values() if b.graph is not None for e in b.graph.edges}
    assert actions == EVERY_ACTION


class AckingWhenSent(Replicator):
    """Broken: an entry is acknowledged as soon as it is sent."""

    def _entries_read(self, entries: object) -> list[Output]:
        out = super()._entries_read(entries)  # type: ignore[arg-type]
        for position in self.waiting:
            out += self.step(SendReceipt(position))
        return out


class ReplicatingEverything(Replicator):
    """Broken: entries that arrived by replication are sent on."""

    def _entries_read(self, entries: object) -> list[Output]:
        import dataclasses

        local = [
            dataclasses.replace(e, metadata=dataclasses.replace(e.metadata, replicated_from=""))
            for e in entries  # type: ignore[attr-defined]
            if isinstance(e, Entry)
        ]
        return super()._entries_read(local)


class ForgettingTheCursor(Replicator):
    """Broken: a restart starts from the beginning of the topic, not from the persisted cursor."""

    @classmethod
    def restart(cls, local_cluster: str, remote_cluster: str, persisted: Position) -> Replicator:
        return cls(local_cluster, remote_cluster, Position(persisted.ledger_id, -1))


@pytest.mark.parametrize(
    ("core", "symptom"),
    [(AckingWhenSent, "cursor"), (ReplicatingEverything, "inflight"), (ForgettingTheCursor, "readPos")],
    ids=["acks-when-sent", "replicates-replicated", "forgets-cursor"],
)
def test_a_broken_replicator_is_caught(behaviours: dict[str, Behaviours], core: type[Replicator], symptom: str) -> None:
    model = MODELS["replication-ci"]
    graph = behaviours[model.name].graph
    assert graph is not None
    mapping = ReplicationMapping(read_constants((SPEC_DIR / model.config).read_text()), cores=core)
    report = replay_graph(mapping, model.name, graph, symmetry=False)
    assert report.mismatch is not None, f"the replay did not catch {core.__name__}"
    assert symptom in report.mismatch.differing, str(report.mismatch)


@pytest.mark.parametrize("name", [m.name for m in CATALOGUE if "replication" in m.core])
def test_the_replication_mutants_are_killed(conformance: Conformance, name: str) -> None:
    checks = conformance.checks()  # the models' baselines: the session's replays
    verdict = run_mutant(next(m for m in CATALOGUE if m.name == name), checks)
    assert verdict.killed and not verdict.error, verdict
    assert checks.baseline[verdict.killed_by]


def test_three_clusters_are_replayed_and_a_forwarding_core_is_caught(behaviours: dict[str, Behaviours]) -> None:
    """Issue 47, item 4: the production cores driven with 3 clusters (6 replicators), and a core that
    forwards what arrived by replication is caught sending it on from a cluster that is not its origin."""
    model = MODELS["replication-ci-three-clusters"]
    constants = read_constants((SPEC_DIR / model.config).read_text())
    assert len(constants["Clusters"]) == 3  # type: ignore[arg-type]
    graph = behaviours[model.name].graph
    assert graph is not None
    assert replay_graph(ReplicationMapping(constants), model.name, graph, symmetry=False).mismatch is None
    report = replay_graph(ReplicationMapping(constants, cores=ReplicatingEverything), model.name, graph, symmetry=False)
    assert report.mismatch is not None and "inflight" in report.mismatch.differing, str(report.mismatch)
