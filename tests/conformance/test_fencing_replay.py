"""fencing.tla's TLC behaviours replayed against the managed ledger's core (conformance/fencing_spec.py).

- a small model's state graph, replayed until the known divergence (the implementation drops an
  empty last ledger from the list when it opens; fencing.tla keeps it);
- the mutations' counterexamples (no fencing; writing on after a bad version), which the
  implementation must refuse at the step where the bug would show;
- a deliberately broken core and a deliberately wrong mapping, which the replay must catch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.divergences import replay_graph_around
from conformance.fencing_spec import EMPTY_LAST_LEDGER, OWNER_PATH, FencingMapping, FencingWorld
from conformance.replay import GraphReplay, read_constants, replay_graph, replay_trace
from conformance.statespace import StateGraph, dump_state_graph
from conformance.suite import behaviours_of, replay_model
from conformance.tla_values import Function, ModelValue
from conformance.tlc import SPEC_DIR, load_manifest
from impl.broker.managed_ledger_core import ManagedLedgerCore, Output

pytestmark = pytest.mark.tlc

MODELS = {m.name: m for m in load_manifest()}

# fencing-ci with 2 ledgers and 1 message: 1,028 states, every action.
SMALL_CFG = """CONSTANTS
    Brokers = {b1, b2}
    MaxLedgers = 2
    MaxMessages = 1
    MaxExpiries = 1
    FenceOnRecovery = TRUE
    FenceOnBadVersion = TRUE
SPECIFICATION Spec
VIEW view
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[StateGraph, str]:
    config = tmp_path_factory.mktemp("cfg") / "fencing_test_small.cfg"
    config.write_text(SMALL_CFG)
    return dump_state_graph(SPEC_DIR / "fencing.tla", config), SMALL_CFG


def replay(small: tuple[StateGraph, str], mapping: FencingMapping | None = None) -> GraphReplay:
    graph, config = small
    return replay_graph(mapping or FencingMapping(read_constants(config)), "small", graph, symmetry=False)


def test_the_graph_replays_up_to_the_known_divergence(small: tuple[StateGraph, str]) -> None:
    """Known divergence (reported): an open recovers the last ledger of the list; ManagedLedgerCore,
    like Pulsar, drops it from the list when it is empty (and deletes it once the new list is
    written); fencing.tla keeps it. When the spec drops it too, make this a full replay."""
    report = replay(small)
    mismatch = report.mismatch
    assert mismatch is not None
    assert (mismatch.action, mismatch.differing) == ("RecoverLastLedger", {"ml"}), str(mismatch)
    closest = mismatch.closest
    assert closest is not None
    # The spec's snapshot keeps the empty ledger 2 (the rollover's new ledger); the core's does not.
    assert "ledgers |-> <<1, 2>>" in "\n".join(closest.diff) and "ledgers |-> <<1>>" in "\n".join(closest.diff)
    assert report.edges_covered > 50 and report.states_covered > 40
    # Every action of the spec was replayed (and matched) on the way.
    done = {line.split(":")[0] for line in mismatch.behaviour}
    assert {"AcquireOwnership", "ExpireSession", "Reconnect", "ReadLedgerList", "RecoverLastLedger"} <= done
    assert {"CreateLedgerAndWriteList", "AddEntry", "Rollover", "RevalidateOwnership"} <= done


def test_the_walk_goes_on_around_the_known_divergence(small: tuple[StateGraph, str]) -> None:
    graph, config = small
    report, diverged = replay_graph_around(FencingMapping(read_constants(config)), "small", graph, symmetry=False)
    assert report.mismatch is None, str(report.mismatch)  # no refusal but the known one
    assert set(diverged) == {EMPTY_LAST_LEDGER} and diverged[EMPTY_LAST_LEDGER] > 0
    # About half the graph lies before a takeover of an empty ledger.
    assert 1000 < report.edges_covered < report.edges and 500 < report.states_covered < report.states


def test_the_known_divergence_is_recognised_precisely(small: tuple[StateGraph, str]) -> None:
    mismatch = replay(small).mismatch
    assert mismatch is not None and mismatch.step > 0
    mapping = FencingMapping(read_constants(SMALL_CFG))
    closest = mismatch.closest
    assert closest is not None and closest.state is not None
    graph = small[0]
    # The target of the refused edge: the spec state whose ml differs from the implementation's.
    targets = [graph.state(e.target) for e in graph.edges if e.action == "RecoverLastLedger"]
    target = next(t for t in targets if mapping.known_divergence(t, closest.state))
    assert mapping.known_divergence(target, closest.state) == EMPTY_LAST_LEDGER
    assert mapping.known_divergence(target, {**closest.state, "nextLedger": 99}) is None  # anything else differs
    assert mapping.known_divergence(target, {**target}) is None  # nothing differs: nothing to explain


def test_a_broken_core_is_caught_around_the_divergence(small: tuple[StateGraph, str]) -> None:
    mapping = FencingMapping(read_constants(SMALL_CFG), cores=CoreFencingOnEveryAdd)
    report, _ = replay_graph_around(mapping, "small", small[0], symmetry=False)
    mismatch = report.mismatch
    assert mismatch is not None and mismatch.action == "AddEntry", str(mismatch)


@pytest.mark.parametrize(
    ("name", "action", "differing"),
    [
        # Mutation 4: the spec's recovery closes without fencing; the implementation's fences the bookie.
        ("fencing-mutation4-nofence-ci", "RecoverLastLedger", {"ledger", "ml"}),
        # Mutation 5 (Pulsar 17736): after a bad version on rollover the implementation is FENCED.
        ("fencing-mutation5-badversion-ci", "Rollover", {"ml"}),
    ],
)
def test_mutation_counterexample_is_refused(name: str, action: str, differing: set[str]) -> None:
    result = replay_model(MODELS[name])
    assert result.trace is not None and not result.follow and result.ok, f"followed the mutation {name}"
    mismatch = result.trace.mismatch
    assert mismatch is not None
    assert (mismatch.action, mismatch.differing) == (action, differing), str(mismatch)


def test_mutation4_is_refused_for_the_fence() -> None:
    result = replay_model(MODELS["fencing-mutation4-nofence-ci"])
    assert result.trace is not None and result.trace.mismatch is not None
    closest = result.trace.mismatch.closest
    assert closest is not None
    spec, impl = (next(line for line in closest.diff if line.strip().startswith(side)) for side in ("spec:", "impl:"))
    # ledger 1, recovered: closed without the fence in the mutation, fenced by the implementation
    # (`ml` differs too: the ledger is empty, the known divergence).
    recovered = '[entries |-> <<>>, fenced |-> {}, lastEntry |-> 0, state |-> "closed"]'
    assert recovered.format("FALSE") in spec and recovered.format("TRUE") in impl, closest.diff


def test_witnesses_stop_at_the_known_divergence() -> None:
    # Reachability witnesses of the protocol's own configuration are followed, not refused; today
    # both reach a takeover of an empty ledger first (the known divergence above).
    for name in ("fencing-witness-fencedadd-ci", "fencing-witness-deletedledger-ci"):
        result = replay_model(MODELS[name])
        assert result.trace is not None and result.follow
        mismatch = result.trace.mismatch
        assert mismatch is not None and (mismatch.action, mismatch.differing) == ("RecoverLastLedger", {"ml"})
        assert result.known == EMPTY_LAST_LEDGER


# ---- broken cores and wrong mappings must be caught ----------------------------------------------


class CoreKeepingWritingAfterBadVersion(ManagedLedgerCore):
    """Broken (Pulsar 17736): a rollover whose list write got a bad version goes on with the new ledger."""

    def on_list_bad_version(self, detail: str) -> list[Output]:
        if self.next_ledger is None or self.current is None:
            return super().on_list_bad_version(detail)
        self.current, self.next_ledger = self.next_ledger, None
        self.pushed_entries, self.confirmed = 0, -1
        self.phase = type(self.phase).IDLE
        return []


class CoreForgettingTheVersion(ManagedLedgerCore):
    """Broken: keeps the version it read after writing the list (its next conditional write fails)."""

    def on_list_written(self, new_version: int) -> list[Output]:
        old = self.version
        outputs = super().on_list_written(new_version)
        self.version = old
        return outputs


class CoreFencingOnEveryAdd(ManagedLedgerCore):
    """Broken: takes every completed add for a fenced one."""

    def on_add_completed(self, ledger_id: int, entry_id: int) -> list[Output]:
        return self.on_add_failed(ledger_id, entry_id, True, "broken")


class MappingWithoutOwnershipNode(FencingMapping):
    """Wrong mapping: AcquireOwnership only sets the broker's belief, no ephemeral node."""

    @staticmethod
    def _AcquireOwnership(world: FencingWorld, name: str) -> None:
        world.brokers[name].believes = True


def test_a_broken_core_follows_the_mutation5_counterexample() -> None:
    behaviours = behaviours_of(MODELS["fencing-mutation5-badversion-ci"])
    assert behaviours.trace is not None
    config = SPEC_DIR / MODELS["fencing-mutation5-badversion-ci"].config
    mapping = FencingMapping(read_constants(config.read_text()), cores=CoreKeepingWritingAfterBadVersion)
    report = replay_trace(mapping, "mutation5", behaviours.trace)
    assert report.mismatch is None and report.steps == len(behaviours.trace) - 1, str(report.mismatch)


def test_a_broken_core_is_caught(small: tuple[StateGraph, str]) -> None:
    report = replay(small, FencingMapping(read_constants(SMALL_CFG), cores=CoreForgettingTheVersion))
    mismatch = report.mismatch
    assert mismatch is not None and mismatch.action == "CreateLedgerAndWriteList", str(mismatch)
    assert mismatch.differing == {"ml"}
    assert "spec state vs implementation state" in str(mismatch)


def test_a_wrong_mapping_is_caught(small: tuple[StateGraph, str]) -> None:
    report = replay(small, MappingWithoutOwnershipNode(read_constants(SMALL_CFG)))
    mismatch = report.mismatch
    assert mismatch is not None and mismatch.action == "AcquireOwnership", str(mismatch)
    assert mismatch.differing == {"ownerNode"}  # at the first AcquireOwnership of the walk


def test_the_abstraction_reads_the_store(small: tuple[StateGraph, str]) -> None:
    mapping = FencingMapping(read_constants(SMALL_CFG))
    world, names = mapping.initial(small[0].state(small[0].initial[0]))
    mapping._AcquireOwnership(world, "b2")
    state = mapping.abstract(world, names)
    assert str(state["ownerNode"]) == "b2" and world.server.nodes[OWNER_PATH].ephemeral_owner != 0
    mapping._ExpireSession(world, "b2")  # the store deletes the ephemeral node; the broker still believes
    state = mapping.abstract(world, names)
    assert state["ownerNode"] == "none" and state["expiries"] == 1
    believes = state["believesOwner"]
    assert isinstance(believes, Function) and believes.get(ModelValue("b2")) is True


def test_the_cli_replays_fencing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from pulsar_ref.commands import conform

    code = conform.main(["--model", "fencing-mutation5-badversion-ci"], "pulsar-ref conform")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "refused at step 12/12 Rollover (ml)" in out and "regression traces refused: 1/1" in out
    assert "NOT SUPPORTED" not in out
