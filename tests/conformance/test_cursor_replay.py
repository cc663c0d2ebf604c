"""cursor.tla's TLC behaviours replayed against the durable cursor's core (conformance/cursor_spec.py).

- every ci model of cursor.tla, from the manifest: the passing model's whole state graph (every edge,
  every distinct state), each mutation's counterexample (no recovery, a mark-delete persisted at
  delivery, a blind node write), which `ManagedCursorCore` must refuse where the bug shows, and the
  witness of a fenced append, which it must follow;
- broken cores (a `ManagedCursorCore` subclass, or a mutant of the catalogue), which the replay must catch.
"""

from __future__ import annotations

import pytest

from conformance.cursor_spec import CursorMapping
from conformance.mutants import CATALOGUE, run_mutant
from conformance.replay import read_constants, replay_graph
from conformance.suite import Behaviours
from conformance.tlc import SPEC_DIR, Outcome, load_manifest
from impl.broker.cursor_core import Event, ManagedCursorCore, MarkDelete, Output, SwitchPurpose, _Switch
from tests.conformance.shared import Conformance

pytestmark = pytest.mark.tlc

MODELS = {m.name: m for m in load_manifest()}
CURSOR = [m for m in MODELS.values() if m.spec == "cursor.tla" and m.profile == "ci"]
EVERY_ACTION = {
    "OpenCursor",
    "SessionExpires",
    "RecoverCursorLedger",
    "CreateCursorLedger",
    "WriteCursorNode",
    "Deliver",
    "Acknowledge",
    "AppendCursorState",
}
# where each regression trace must be refused: the step at which the core does not do what the bug does
REFUSED_AT = {
    "cursor-mutation-norecovery-ci": "RecoverCursorLedger",  # the core's recovery fences the cursor ledger
    "cursor-mutation-persistondelivery-ci": "Deliver",  # delivery writes nothing
    "cursor-mutation-blindnodewrite-ci": "WriteCursorNode",  # the stale owner's write gets a bad version
    "cursor-mutation-deleteafterlost-ci": "WriteCursorNode",  # after a lost answer the core stops, deletes nothing
    "cursor-mutation-pumpdropsqueued-ci": "WriteCursorNode",  # the core writes the queued ack after the switch
    "cursor-mutation-openskipsone-ci": "WriteCursorNode",  # the opened core reads from its mark-delete
}


@pytest.fixture(scope="module")
def behaviours(conformance: Conformance) -> dict[str, Behaviours]:
    return {m.name: conformance.behaviours(m.name) for m in CURSOR}


def test_the_manifest_has_the_models_the_issue_asks_for() -> None:
    violations = {m.violates for m in CURSOR if m.expect is Outcome.VIOLATION}
    assert violations == {
        "MarkDeleteNeverMovesBack",
        "NoSkip",
        "CompletedAcksRecoverable",
        "WitnessNoFencedAppend",
        "AcceptedAcksTakeEffect",  # issue 47: liveness, and a mutation for every property
        "AtLeastOnce",
    }
    assert set(REFUSED_AT) <= {m.name for m in CURSOR}
    assert any(m.expect is Outcome.PASS for m in CURSOR)
    assert any(m.spec == "cursor.tla" and m.profile == "deep" for m in MODELS.values())


@pytest.mark.parametrize("name", [m.name for m in CURSOR])
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
    if name in REFUSED_AT:  # bugs the core does not have: refused where the bug shows
        assert not result.follow and result.trace.mismatch is not None
        assert result.trace.mismatch.action == REFUSED_AT[name], str(result.trace.mismatch)
    else:  # the witness: the old owner's append refused by a fenced cursor ledger, followed to the end
        assert result.follow and result.trace.mismatch is None
        assert result.trace.steps == result.trace_states - 1 > 0


def test_the_graph_has_every_action(behaviours: dict[str, Behaviours]) -> None:
    actions = {e.action for b in behaviours.values() if b.graph is not None for e in b.graph.edges}
    assert actions == EVERY_ACTION


class AppliesBeforeWriting(ManagedCursorCore):
    """Broken: an acknowledgement takes effect before its write is stored."""

    def step(self, event: Event) -> list[Output]:
        outputs = super().step(event)
        if isinstance(event, MarkDelete) and self._candidate is None and self._writing is not None:
            self.state = self._writing.state.copy()
        return outputs


class NeverSwitches(ManagedCursorCore):
    """Broken: a full cursor ledger is never replaced (writing goes on in it)."""

    def _start_switch(self, switch: _Switch) -> list[Output]:
        if switch.purpose is SwitchPurpose.ROLLOVER:
            self.ledger_entries = 0
            return self._pump(0.0)
        return super()._start_switch(switch)


class TrustsItsVersion(ManagedCursorCore):
    """Broken: after a bad version on a switch it writes again with the version it finds (no fencing)."""

    def step(self, event: Event) -> list[Output]:
        from impl.broker.cursor_core import CursorNodeWriteFailed, NodeError, WriteCursorNode

        if isinstance(event, CursorNodeWriteFailed) and event.error is NodeError.BAD_VERSION and self._switch:
            switch = self._switch
            assert switch.new_ledger is not None
            return [WriteCursorNode(self.node(switch.new_ledger, switch.state), -1)]
        return super().step(event)


@pytest.mark.parametrize(
    ("core", "symptom"),
    [(AppliesBeforeWriting, "md"), (NeverSwitches, "switch"), (TrustsItsVersion, "status")],
    ids=["applies-before-writing", "never-switches", "trusts-its-version"],
)
def test_a_broken_cursor_core_is_caught(
    behaviours: dict[str, Behaviours], core: type[ManagedCursorCore], symptom: str
) -> None:
    model = MODELS["cursor-ci"]
    graph = behaviours[model.name].graph
    assert graph is not None
    mapping = CursorMapping(read_constants((SPEC_DIR / model.config).read_text()), cores=core)
    report = replay_graph(mapping, model.name, graph, symmetry=False)
    assert report.mismatch is not None, f"the replay did not catch {core.__name__}"
    assert symptom in report.mismatch.differing, str(report.mismatch)


@pytest.mark.parametrize("name", [m.name for m in CATALOGUE if m.core == "impl/broker/cursor_core.py"])
def test_the_cursor_mutants_are_killed(conformance: Conformance, name: str) -> None:
    checks = conformance.checks()  # the models' baselines: the session's replays
    verdict = run_mutant(next(m for m in CATALOGUE if m.name == name), checks)
    assert verdict.killed and not verdict.error, verdict
    assert checks.baseline[verdict.killed_by]
