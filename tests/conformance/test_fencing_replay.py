"""fencing.tla's TLC behaviours replayed against the production cores (conformance/fencing_spec.py).

The cores are the ownership core, the managed ledger's and the subscription's cursor's
(impl/broker/ownership_core.py, managed_ledger_core.py, cursor_core.py), with the BookKeeper
client's and the bookie's:
- a small model's whole state graph (fencing-ci's is replayed by `pulsar-ref conform --spec fencing`);
- the mutations' counterexamples (no fencing; writing on after a bad version), which the
  implementation must refuse at the step where the bug would show, and the witnesses, which it
  must follow;
- deliberately broken cores (each of the three) and a deliberately wrong mapping, which the replay
  must catch;
- the one place where the harness is not the broker's shell (RevalidateOwnership with the node
  free keeps the topic loaded), and only there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.fencing_spec import OWNER_PATH, FencingMapping, FencingWorld
from conformance.mutants import CATALOGUE, applied
from conformance.replay import GraphReplay, read_constants, replay_graph, replay_trace
from conformance.statespace import StateGraph, dump_state_graph
from conformance.suite import replay_behaviours
from conformance.tla_values import Function, ModelValue, Record
from conformance.tlc import SPEC_DIR, load_manifest
from impl.broker import cursor_core, managed_ledger_core, ownership_core
from impl.broker.cursor_core import ManagedCursorCore
from impl.broker.ledger_list import Position
from impl.broker.managed_ledger_core import ManagedLedgerCore, ManagedLedgerState, Output
from impl.broker.ownership_core import OwnershipCore
from tests.conformance.shared import Conformance

pytestmark = pytest.mark.tlc

MODELS = {m.name: m for m in load_manifest()}

# fencing-ci with 2 ledgers and 1 message: every action, takeovers of empty and non-empty ledgers.
SMALL_CFG = """CONSTANTS
    Brokers = {b1, b2}
    MaxLedgers = 2
    MaxMessages = 1
    MaxExpiries = 1
    MaxLostAcks = 1
    FenceOnRecovery = TRUE
    FenceOnBadVersion = TRUE
    DeletedLedgerRefusesAdds = TRUE
    MultiStepRollover = FALSE
    QueuedAddsAwaitListWrite = TRUE
SPECIFICATION Spec
VIEW view
"""

# One broker, two messages, no faults: both messages consumed, across a rollover and a trim.
TWO_MESSAGES_CFG = """CONSTANTS
    Brokers = {b1}
    MaxLedgers = 2
    MaxMessages = 2
    MaxExpiries = 0
    MaxLostAcks = 0
    FenceOnRecovery = TRUE
    FenceOnBadVersion = TRUE
    DeletedLedgerRefusesAdds = TRUE
    MultiStepRollover = FALSE
    QueuedAddsAwaitListWrite = TRUE
SPECIFICATION Spec
VIEW view
"""

# Pulsar's rollover in several steps with adds queued meanwhile, 2 ledgers (fencing-rollover-ci has 3, and
# the list write's bad version, which needs them; its witness model below reaches it): a takeover fences
# the new ledger while queued adds are written to it.
ROLLOVER_CFG = """CONSTANTS
    Brokers = {b1, b2}
    MaxLedgers = 2
    MaxMessages = 2
    MaxExpiries = 1
    MaxLostAcks = 0
    FenceOnRecovery = TRUE
    FenceOnBadVersion = TRUE
    DeletedLedgerRefusesAdds = TRUE
    MultiStepRollover = TRUE
    QueuedAddsAwaitListWrite = TRUE
SPECIFICATION Spec
VIEW view
"""

ROLLOVER_ACTIONS = {
    "QueueAddEntry",
    "RolloverCloseLedger",
    "RolloverCreateLedger",
    "RolloverWriteList",
    "WriteQueuedAdd",
}

EVERY_ACTION = {
    "ExpireSession",
    "Reconnect",
    "AcquireOwnership",
    "RevalidateOwnership",
    "ReadLedgerList",
    "RecoverLastLedger",
    "CreateLedgerAndWriteList",
    "AddEntry",
    "AddEntryAckLost",
    "Rollover",
    "Consume",
    "TrimConsumedLedger",
    "CloseFencedManagedLedger",
}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[StateGraph, str]:
    config = tmp_path_factory.mktemp("cfg") / "fencing_test_small.cfg"
    config.write_text(SMALL_CFG)
    return dump_state_graph(SPEC_DIR / "fencing.tla", config), SMALL_CFG


@pytest.fixture(scope="module")
def two_messages(tmp_path_factory: pytest.TempPathFactory) -> tuple[StateGraph, str]:
    config = tmp_path_factory.mktemp("cfg") / "fencing_test_two_messages.cfg"
    config.write_text(TWO_MESSAGES_CFG)
    return dump_state_graph(SPEC_DIR / "fencing.tla", config), TWO_MESSAGES_CFG


@pytest.fixture(scope="module")
def rollover(tmp_path_factory: pytest.TempPathFactory) -> tuple[StateGraph, str]:
    config = tmp_path_factory.mktemp("cfg") / "fencing_test_rollover.cfg"
    config.write_text(ROLLOVER_CFG)
    return dump_state_graph(SPEC_DIR / "fencing.tla", config), ROLLOVER_CFG


def replay(small: tuple[StateGraph, str], mapping: FencingMapping | None = None) -> GraphReplay:
    graph, config = small
    return replay_graph(mapping or FencingMapping(read_constants(config)), "small", graph, symmetry=False)


def test_every_edge_of_the_state_graph_is_replayed(small: tuple[StateGraph, str]) -> None:
    report = replay(small)
    assert report.mismatch is None, str(report.mismatch)
    graph, _ = small
    assert report.edges_covered == report.edges == len(graph.edges) > 0
    assert report.states_covered == report.states == len(graph.labels)
    assert {e.action for e in graph.edges} == EVERY_ACTION


def test_an_unacknowledged_message_is_consumed_and_trimmed(small: tuple[StateGraph, str]) -> None:
    """The small graph (replayed in full above) has a message whose ack was lost recovered into a
    closed ledger, consumed by the subscription (the log, not the acknowledged messages, is what it
    reads) and trimmed with its ledger, while nothing was acknowledged."""
    graph, _ = small

    def unacked(node: str) -> bool:
        return graph.state(node)["acked"] == () and graph.state(node)["lostAcks"] == 1

    consumed = [e for e in graph.edges if e.action == "Consume" and unacked(e.source)]
    trimmed = [e for e in graph.edges if e.action == "TrimConsumedLedger" and unacked(e.target)]
    assert consumed and any(graph.state(e.target)["trimmed"] == 1 for e in trimmed)


def test_a_takeover_drops_an_empty_last_ledger(small: tuple[StateGraph, str]) -> None:
    """b1 writes nothing to ledger 1; b2 takes over: ledger 1 leaves the list and is deleted, as in
    Pulsar (and in fencing.tla since it drops it too)."""
    mapping = FencingMapping(read_constants(SMALL_CFG))
    world, names = mapping.initial(small[0].state(small[0].initial[0]))
    for action, broker in [
        ("AcquireOwnership", "b1"),
        ("ReadLedgerList", "b1"),
        ("RecoverLastLedger", "b1"),
        ("CreateLedgerAndWriteList", "b1"),
        ("ExpireSession", "b1"),
        ("AcquireOwnership", "b2"),
        ("ReadLedgerList", "b2"),
        ("RecoverLastLedger", "b2"),
        ("CreateLedgerAndWriteList", "b2"),
    ]:
        getattr(mapping, f"_{action}")(world, broker)
    state = mapping.abstract(world, names)
    assert state["list"] == Record.of({"version": 2, "ledgers": (2,)})
    first = state["ledger"][0]  # type: ignore[index]
    assert isinstance(first, Record) and (first["state"], first["fenced"]) == ("deleted", True)
    # The bookie garbage-collected it, fence included; b1, which still writes it, is refused by the
    # deletion the bookie remembers (fencing.tla's DeletedLedgerRefusesAdds), and goes FENCED.
    bookie = world.bookie.core
    assert 1 in bookie.deleted and 1 not in bookie.ledgers and not any(k[0] == 1 for k in world.bookie.storage)
    assert world.brokers["b1"].ml.current == 1
    mapping._AddEntry(world, "b1")
    assert world.brokers["b1"].ml.state is ManagedLedgerState.FENCED and world.acked == []
    assert 1 not in bookie.ledgers  # not re-created by the add


def test_a_bookie_accepting_adds_to_a_deleted_ledger_is_caught(small: tuple[StateGraph, str]) -> None:
    """The mutant `bookie-accepts-deleted-ledger` (conformance/mutants.py): the stale owner's add to the
    ledger the takeover deleted is acknowledged, where fencing.tla refuses it."""
    mutant = next(m for m in CATALOGUE if m.name == "bookie-accepts-deleted-ledger")
    with applied(mutant):
        report = replay(small)
    mismatch = report.mismatch
    assert mismatch is not None and mismatch.action == "AddEntry", str(mismatch)
    assert {"acked", "ml"} <= mismatch.differing, str(mismatch)


@pytest.mark.parametrize(
    ("name", "action", "differing"),
    [
        # Mutation 4: the spec's recovery closes without fencing; the implementation's fences the bookie.
        ("fencing-mutation4-nofence-ci", "RecoverLastLedger", {"ledger"}),
        # Mutation 5 (Pulsar 17736): after a bad version on rollover the implementation is FENCED.
        ("fencing-mutation5-badversion-ci", "Rollover", {"ml"}),
    ],
)
def test_mutation_counterexample_is_refused(
    conformance: Conformance, name: str, action: str, differing: set[str]
) -> None:
    result = conformance.replay(name)  # replay_model(MODELS[name]), once per session
    assert result.trace is not None and not result.follow and result.ok, f"followed the mutation {name}"
    mismatch = result.trace.mismatch
    assert mismatch is not None
    assert (mismatch.action, mismatch.differing) == (action, differing), str(mismatch)


def test_mutation4_is_refused_for_the_fence(conformance: Conformance) -> None:
    result = conformance.replay("fencing-mutation4-nofence-ci")
    assert result.trace is not None and result.trace.mismatch is not None
    closest = result.trace.mismatch.closest
    assert closest is not None
    spec, impl = (next(line for line in closest.diff if line.strip().startswith(side)) for side in ("spec:", "impl:"))
    # ledger 1, recovered: closed without the fence in the mutation, fenced by the implementation.
    recovered = '[entries |-> <<>>, fenced |-> {}, lastEntry |-> 0, state |-> "closed"]'
    assert recovered.format("FALSE") in spec and recovered.format("TRUE") in impl, closest.diff
    # Driven on with the trace's inputs, the old owner's add is then refused (fenced), not acknowledged.
    later = dict((action, variables) for _, action, variables in result.trace.consequences)
    assert {"acked", "nextMsg"} <= later["AddEntry"]


def test_the_multi_step_rollover_is_replayed(rollover: tuple[StateGraph, str]) -> None:
    """Every edge of the small multi-step model, against the same cores: ManagedLedgerCore queues the adds that
    arrive during its rollover and sends them once the list is written (the harness holds them in flight
    until WriteQueuedAdd); a takeover's recovery fences the new ledger under queued adds, which then fail."""
    report = replay(rollover)
    assert report.mismatch is None, str(report.mismatch)
    graph, _ = rollover
    assert report.edges_covered == report.edges == len(graph.edges) > 0
    actions = {e.action for e in graph.edges}
    assert actions >= ROLLOVER_ACTIONS and "Rollover" not in actions

    def states(node: str) -> list[str]:
        ml = graph.state(node)["ml"]
        assert isinstance(ml, Function)
        return [str(r["state"]) for r in (ml.get(ModelValue(b)) for b in ("b1", "b2")) if isinstance(r, Record)]

    queued = [e for e in graph.edges if e.action == "WriteQueuedAdd"]
    written = [e for e in queued if graph.state(e.target)["acked"] != graph.state(e.source)["acked"]]
    refused = [e for e in queued if states(e.target).count("fenced") > states(e.source).count("fenced")]
    assert written and refused  # queued adds acknowledged on the new ledger; and all failing at a fence


def test_the_queued_adds_switch_is_refused(conformance: Conformance) -> None:
    """fencing-rollover-queuedearly-ci (QueuedAddsAwaitListWrite = FALSE): the trace writes a queued add to the
    rollover's new ledger before its list write; the core has sent nothing (it waits for the list write), so
    the step is refused. A core that sends the queued adds at the ledger's creation follows the trace."""
    behaviours = conformance.behaviours("fencing-rollover-queuedearly-ci")  # TLC once, replayed twice
    result = conformance.replay("fencing-rollover-queuedearly-ci")  # replay_behaviours(behaviours)
    assert result.trace is not None and not result.follow and result.ok, "followed the switch"
    mismatch = result.trace.mismatch
    assert mismatch is not None and mismatch.action == "WriteQueuedAdd", str(mismatch)
    assert "no SendAdd" in str(mismatch)
    mutant = next(m for m in CATALOGUE if m.name == "ml-sends-queued-adds-before-list-write")
    with applied(mutant):
        broken = replay_behaviours(behaviours)
    assert broken.trace is not None and broken.trace.mismatch is None, str(broken.trace.mismatch)


@pytest.mark.parametrize(
    "name",
    [
        "fencing-witness-fencedadd-ci",
        "fencing-witness-deletedledger-ci",
        "fencing-witness-unackedinlog-ci",
        "fencing-witness-queuedaddlost-ci",
    ],
)
def test_the_witnesses_are_followed(conformance: Conformance, name: str) -> None:
    # Counterexamples of the protocol's own configuration: situations that must be reachable (an
    # old owner's add failing fenced; trimming deleting a stale writer's ledger; a message whose ack
    # was lost kept in a closed ledger by the broker's own recovery; a rollover's list write meeting a
    # takeover while adds are queued, which fail). The cores reach them.
    result = conformance.replay(name)  # replay_model(MODELS[name]), once per session
    assert result.trace is not None and result.follow
    assert result.trace.mismatch is None, str(result.trace.mismatch)
    assert result.ok and result.trace.steps == result.trace_states - 1 > 0


# ---- broken cores and wrong mappings must be caught ----------------------------------------------


class CoreKeepingWritingAfterBadVersion(ManagedLedgerCore):
    """Broken (Pulsar 17736): a rollover whose list write got a bad version goes on with the new ledger."""

    def step(self, event: managed_ledger_core.Event) -> list[Output]:
        bad = isinstance(event, managed_ledger_core.LedgerListBadVersion | managed_ledger_core.LedgerListWriteFailed)
        if not bad or self.next_ledger is None or self.current is None:
            return super().step(event)
        self.current, self.next_ledger = self.next_ledger, None
        self.pushed_entries, self.confirmed = 0, -1
        self.phase = type(self.phase).IDLE
        return []


class CoreForgettingTheVersion(ManagedLedgerCore):
    """Broken: keeps the version it read after writing the list (its next conditional write fails)."""

    def step(self, event: managed_ledger_core.Event) -> list[Output]:
        old = self.version
        outputs = super().step(event)
        if isinstance(event, managed_ledger_core.LedgerListWritten):
            self.version = old
        return outputs


class CoreFencingOnEveryAdd(ManagedLedgerCore):
    """Broken: takes every completed add for a fenced one."""

    def step(self, event: managed_ledger_core.Event) -> list[Output]:
        if isinstance(event, managed_ledger_core.AddCompleted):
            event = managed_ledger_core.AddFailed(event.ledger_id, event.entry_id, True, "broken")
        return super().step(event)


class OwnershipCoreKeepingBundlesOnExpiry(OwnershipCore):
    """Broken: an expired session leaves the bundles believed (the broker goes on as their owner)."""

    def step(self, event: ownership_core.Event) -> list[ownership_core.Output]:
        if isinstance(event, ownership_core.SessionExpiredEvent) and event.session == self.session:
            self.expired = True
            return []
        return super().step(event)


class OwnershipCoreAcquiringWithoutTheNode(OwnershipCore):
    """Broken: an acquire believes at once, creating no ownership node."""

    def step(self, event: ownership_core.Event) -> list[ownership_core.Output]:
        if isinstance(event, ownership_core.Acquire) and not self.expired:
            self.owned[event.bundle.path] = event.bundle
            return [ownership_core.CompleteRequest(event.token, True)]
        return super().step(event)


class CursorMarkingPastTheAck(ManagedCursorCore):
    """Broken: a cumulative ack marks the entry after the acknowledged one deleted too."""

    def step(self, event: cursor_core.Event) -> list[cursor_core.Output]:
        if isinstance(event, cursor_core.MarkDelete):
            after = event.view.next_position(event.position)
            if after is not None and event.view.exists(after):
                event = cursor_core.MarkDelete(event.token, after, event.view, event.now)
        return super().step(event)


class MappingLosingTheOwnershipNode(FencingMapping):
    """Wrong mapping: the ownership core acquires, but the node does not stay in the store."""

    def _AcquireOwnership(self, world: FencingWorld, name: str) -> None:
        super()._AcquireOwnership(world, name)
        del world.server.nodes[OWNER_PATH]


def test_a_broken_core_follows_the_mutation5_counterexample(conformance: Conformance) -> None:
    behaviours = conformance.behaviours("fencing-mutation5-badversion-ci")
    assert behaviours.trace is not None
    config = SPEC_DIR / MODELS["fencing-mutation5-badversion-ci"].config
    mapping = FencingMapping(read_constants(config.read_text()), cores=CoreKeepingWritingAfterBadVersion)
    report = replay_trace(mapping, "mutation5", behaviours.trace)
    assert report.mismatch is None and report.steps == len(behaviours.trace) - 1, str(report.mismatch)


def test_a_core_fencing_on_every_add_is_caught(small: tuple[StateGraph, str]) -> None:
    report = replay(small, FencingMapping(read_constants(SMALL_CFG), cores=CoreFencingOnEveryAdd))
    mismatch = report.mismatch
    assert mismatch is not None and mismatch.action == "AddEntry", str(mismatch)


def test_a_broken_core_is_caught(small: tuple[StateGraph, str]) -> None:
    report = replay(small, FencingMapping(read_constants(SMALL_CFG), cores=CoreForgettingTheVersion))
    mismatch = report.mismatch
    assert mismatch is not None and mismatch.action == "CreateLedgerAndWriteList", str(mismatch)
    assert mismatch.differing == {"ml"}
    assert "spec state vs implementation state" in str(mismatch)


@pytest.mark.parametrize(
    ("broken", "action", "differing"),
    [
        # after its session expired the broker still believes it owns the bundle, so it does not acquire the
        # free node again (and where another broker took it, it would not unload)
        (OwnershipCoreKeepingBundlesOnExpiry, "RevalidateOwnership", {"ownerNode"}),
        (OwnershipCoreAcquiringWithoutTheNode, "AcquireOwnership", {"ownerNode"}),
    ],
)
def test_a_broken_ownership_core_is_caught(
    small: tuple[StateGraph, str], broken: type[OwnershipCore], action: str, differing: set[str]
) -> None:
    report = replay(small, FencingMapping(read_constants(SMALL_CFG), ownership=broken))
    mismatch = report.mismatch
    assert mismatch is not None and mismatch.action == action, str(mismatch)
    assert mismatch.differing == differing, str(mismatch)


def test_the_two_messages_model_is_replayed(two_messages: tuple[StateGraph, str]) -> None:
    report = replay(two_messages)
    assert report.mismatch is None, str(report.mismatch)
    assert report.edges_covered == report.edges == len(two_messages[0].edges) > 0


def test_a_broken_cursor_core_is_caught(two_messages: tuple[StateGraph, str]) -> None:
    report = replay(two_messages, FencingMapping(read_constants(TWO_MESSAGES_CFG), cursor=CursorMarkingPastTheAck))
    mismatch = report.mismatch
    assert mismatch is not None and mismatch.action == "Consume", str(mismatch)
    assert mismatch.differing == {"consumed"}, str(mismatch)


def test_the_replay_drives_the_production_cores(small: tuple[StateGraph, str]) -> None:
    """believesOwner is the ownership core's belief, consumed the cursor core's mark-delete position."""
    mapping = FencingMapping(read_constants(SMALL_CFG))
    world, names = mapping.initial(small[0].state(small[0].initial[0]))
    for action in ("AcquireOwnership", "ReadLedgerList", "RecoverLastLedger", "CreateLedgerAndWriteList", "AddEntry"):
        getattr(mapping, f"_{action}")(world, "b1")
    mapping._Consume(world)
    b1 = world.brokers["b1"]
    assert type(b1.ownership.core) is OwnershipCore and b1.ownership.core.is_owned(OWNER_PATH)
    assert type(b1.ml) is ManagedLedgerCore and b1.ml.current == 1
    cursor = world.subscription.thaw().core
    assert type(cursor) is ManagedCursorCore and cursor.state.mark_delete == Position(1, 0)
    state = mapping.abstract(world, names)
    assert state["consumed"] == 1 and state["believesOwner"] == Function.of(
        {ModelValue("b1"): True, ModelValue("b2"): False}
    )
    with pytest.raises(Exception, match="nothing to consume"):
        mapping._Consume(world)  # the log's one entry is consumed already


def _expired_and_reconnected(mapping: FencingMapping, world: FencingWorld) -> None:
    """b1 owns the topic, open on ledger 1; its session expires; it reconnects, still believing."""
    for action in ("AcquireOwnership", "ReadLedgerList", "RecoverLastLedger", "CreateLedgerAndWriteList"):
        getattr(mapping, f"_{action}")(world, "b1")
    mapping._ExpireSession(world, "b1")
    mapping._Reconnect(world, "b1")
    assert world.brokers["b1"].ownership.core.is_owned(OWNER_PATH)  # not told yet


def test_revalidation_with_the_node_free_keeps_the_topic_loaded(small: tuple[StateGraph, str]) -> None:
    """The spec's re-create branch: the core drops the bundle and acquires it again on the new session; the
    harness keeps the managed ledger open across the loss (the broker would unload it) and counts it."""
    mapping = FencingMapping(read_constants(SMALL_CFG))
    world, names = mapping.initial(small[0].state(small[0].initial[0]))
    _expired_and_reconnected(mapping, world)
    with pytest.raises(Exception, match="node is free"):
        mapping._RevalidateOwnership(world, "b1", True)  # the other branch is refused
    mapping._RevalidateOwnership(world, "b1", False)
    b1 = world.brokers["b1"]
    assert b1.ownership.core.session == 1 and b1.ownership.core.is_owned(OWNER_PATH)
    assert world.server.nodes[OWNER_PATH].ephemeral_owner == b1.store.session_id
    assert b1.ml.state is ManagedLedgerState.OPEN and world.kept_loaded == 1
    with pytest.raises(Exception, match="holds the ownership node"):
        mapping._ready_RevalidateOwnership(world, "b1", False)  # revalidated: nothing left to do


def test_revalidation_with_the_node_taken_unloads_the_topic(small: tuple[StateGraph, str]) -> None:
    mapping = FencingMapping(read_constants(SMALL_CFG))
    world, names = mapping.initial(small[0].state(small[0].initial[0]))
    _expired_and_reconnected(mapping, world)
    mapping._AcquireOwnership(world, "b2")
    with pytest.raises(Exception, match="held"):
        mapping._RevalidateOwnership(world, "b1", False)  # the other branch is refused
    mapping._RevalidateOwnership(world, "b1", True)
    b1 = world.brokers["b1"]
    assert not b1.ownership.core.is_owned(OWNER_PATH) and b1.ownership.core.session == 1
    assert b1.ml.state is ManagedLedgerState.CLOSED and world.kept_loaded == 0
    state = mapping.abstract(world, names)
    assert str(state["ownerNode"]) == "b2"


def test_a_wrong_mapping_is_caught(small: tuple[StateGraph, str]) -> None:
    report = replay(small, MappingLosingTheOwnershipNode(read_constants(SMALL_CFG)))
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
