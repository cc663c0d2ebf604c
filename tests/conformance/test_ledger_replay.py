"""ledger.tla's TLC behaviours replayed against the pure cores (conformance/replay.py).

- every edge and state of the ci models' state graphs (liveness, striping), and of two small
  models written here for what the ci models leave out (crashes, permanent failures and
  ensemble changes; two entries, where completion order matters);
- the mutation counterexamples (BookKeeper issues 2614, 2615, the Qa negative threshold),
  which the fixed implementation must refuse at the step where the bug would show;
- deliberately broken cores, which the replay must catch: proof that it can fail.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from conformance.ledger_cluster import LEDGER_ID, CoreTypes, InFlight, LedgerCluster
from conformance.ledger_spec import LedgerMapping
from conformance.replay import GraphReplay, has_symmetry, read_constants, replay_graph
from conformance.statespace import StateGraph, dump_state_graph
from conformance.tla_values import Record
from conformance.tlc import SPEC_DIR, load_manifest
from conformance.trace_validation import WRITER, Run, RunConfig, _as, _deliver, _Recorder, check_traces
from impl.bookie.client.read_lac import ReadLacOp
from impl.bookie.client.recovery import RecoveryOp, RecoveryOutput, RecoveryPhase
from impl.bookie.client.writer import AddCompleted, LedgerWriter, Start, WriterOutput, WriterState
from impl.bookie.core import BookieCore, Output, RecordKind, Replay
from impl.bookie.core import Event as BookieEvent
from impl.bookie.protocol import LAST_ENTRY, AddRequest, ReadRequest
from tests.conformance.shared import Conformance

pytestmark = pytest.mark.tlc

MODELS = {m.name: m for m in load_manifest()}
LEDGER_TLA = SPEC_DIR / "ledger.tla"

# Faults the ci models leave out: a crash, a permanent failure, ensemble changes (E=Qw=Qa=1,
# 2 bookies, 1 entry: recovery always starts at entry 0, see test_tiny_fragments_...).
FAULTS_CFG = """CONSTANTS
    Bookies = {b1, b2}
    Writer = w
    Recoverers = {r1}
    E = 1
    Qw = 1
    Qa = 1
    NumEntries = 1
    MaxFragments = 2
    MaxLostMessages = 0
    MaxCrashes = 1
    MaxPermanentFailures = 1
    Mutation = "none"
SPECIFICATION Spec
VIEW view
SYMMETRY BookieSymmetry
"""


def with_constants(config: str, **values: object) -> str:
    """`config` with the named CONSTANTS set to `values`."""
    for name, value in values.items():
        config, n = re.subn(rf"^(\s*{name} = ).*$", rf"\g<1>{value}", config, flags=re.MULTILINE)
        assert n == 1, name
    return config


# Two entries to one bookie, no recovery: the bookie may acknowledge entry 1 before entry 0.
WRITER_CFG = FAULTS_CFG.replace("Bookies = {b1, b2}", "Bookies = {b1}").replace("Recoverers = {r1}", "Recoverers = {}")
WRITER_CFG = WRITER_CFG.replace("NumEntries = 1", "NumEntries = 2").replace("MaxFragments = 2", "MaxFragments = 1")
WRITER_CFG = WRITER_CFG.replace("MaxCrashes = 1", "MaxCrashes = 0").replace(
    "MaxPermanentFailures = 1", "MaxPermanentFailures = 0"
)
WRITER_CFG = WRITER_CFG.replace("SYMMETRY BookieSymmetry\n", "")

# One bookie, two entries, a recovery: the writer's entry 1 carries LAC 0, so recovery's start
# point can be entry 0 (it reads entry 1 first, never entry 0; decision 1 in spec/ledger.md).
START_CFG = WRITER_CFG.replace("Recoverers = {}", "Recoverers = {r1}")

# Sequential recovery reads: E=Qw=2 Qa=1 (the end takes 2 negatives), one lost message. A negative
# answer or a lost read moves the read to the write set's other bookie.
READS_CFG = with_constants(
    FAULTS_CFG, E=2, Qw=2, MaxFragments=1, MaxLostMessages=1, MaxCrashes=0, MaxPermanentFailures=0
)

# E=Qw=Qa=2, two lost messages: a lost write-back aborts the attempt while the read of the next entry,
# also lost, could still move on to the other bookie (the abort fires the write-back's timeout only).
READS_ABORT_CFG = with_constants(READS_CFG, Qa=2, MaxLostMessages=2)

# FAULTS_CFG with ledger.tla's SharedFate (ledger-deep's network): the requests a client sends a bookie
# that is down wait on one connection attempt and share its fate: all fail when it starts, or all reach
# the restarted bookie.
SHARED_FATE_CFG = FAULTS_CFG.replace('    Mutation = "none"\n', '    Mutation = "none"\n    SharedFate = TRUE\n')

# Two entries, an ensemble change, no recovery: a pending add is re-sent to the replacement.
RESEND_CFG = with_constants(
    FAULTS_CFG, Recoverers="{}", NumEntries=2, MaxLostMessages=1, MaxCrashes=0, MaxPermanentFailures=0
)

REQUESTS = {"add", "recoveryAdd", "readLac", "read"}

EVERY_ACTION = {
    "WriterSendsAdd",
    "WriterReceivesAddResponse",
    "WriterChangesEnsemble",
    "WriterCloses",
    "RecoveryStarts",
    "RecoveryReceivesReadLacResponse",
    "RecoveryReceivesReadResponse",
    "RecoveryReceivesAddResponse",
    "RecoveryChangesEnsemble",
    "RecoveryCloses",
    "RecoveryAborts",
    "RecoveryReadTimedOut",
    "MessageLost",
    "ReplyLost",
    "RequestToDownBookieLost",
    "BookieCrashes",
    "BookieRestarts",
    "BookieFailsPermanently",
}


@pytest.fixture(scope="module")
def graphs(
    tmp_path_factory: pytest.TempPathFactory, conformance: Conformance
) -> Callable[[str], tuple[StateGraph, str]]:
    """TLC's state graph of a manifest model (the session's, conftest.py) or of one of the configs above
    (dumped once per module)."""
    cache: dict[str, tuple[StateGraph, str]] = {}
    extra = {
        "faults": FAULTS_CFG,
        "writer": WRITER_CFG,
        "resend": RESEND_CFG,
        "start": START_CFG,
        "reads": READS_CFG,
        "reads-abort": READS_ABORT_CFG,
        "shared-fate": SHARED_FATE_CFG,
    }

    def get(name: str) -> tuple[StateGraph, str]:
        if name not in cache:
            if name in extra:
                config = tmp_path_factory.mktemp("cfg") / f"ledger_test_{name}.cfg"
                config.write_text(extra[name])
                cache[name] = (dump_state_graph(LEDGER_TLA, config), config.read_text())
            else:
                model = MODELS[name]
                assert model.spec == "ledger.tla", name
                graph = conformance.behaviours(name).graph
                assert graph is not None, f"{name}: no state graph"
                cache[name] = (graph, (SPEC_DIR / model.config).read_text())
        return cache[name]

    return get


def replay(
    graphs: Callable[[str], tuple[StateGraph, str]],
    name: str,
    cores: CoreTypes | None = None,
    conformance: Conformance | None = None,
) -> GraphReplay:
    """The replay of `name`'s graph against `cores`; of a manifest model against the production cores,
    the session's (conftest.py: the same replay, also the mutation score's baseline), given `conformance`."""
    if cores is None and conformance is not None and name in MODELS:
        report = conformance.replay(name).graph
        assert report is not None, f"{name}: no graph replay"
        return report
    graph, config = graphs(name)
    mapping = LedgerMapping(read_constants(config), cores=cores)
    return replay_graph(mapping, name, graph, symmetry=has_symmetry(config))


# ---- the whole state graphs --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "ledger-ci-liveness",
        "ledger-ci-striping",
        "ledger-basic",
        "ledger-ci-recoverers",
        "ledger-ci-liveness-crash",
        "ledger-ci-liveness-qa",
        "ledger-ci-liveness-recoverer-crash",
        "faults",
        "writer",
        "reads",
        "reads-abort",
        "shared-fate",
    ],
)
def test_every_edge_of_the_state_graph_is_replayed(
    graphs: Callable[[str], tuple[StateGraph, str]], conformance: Conformance, name: str
) -> None:
    report = replay(graphs, name, conformance=conformance)
    assert report.mismatch is None, str(report.mismatch)
    graph, _ = graphs(name)
    assert report.edges == len(graph.edges) > 0 and report.states == len(graph.labels)
    assert report.edges_covered == report.edges, "every edge of TLC's graph"
    assert report.states_covered == report.states, "every distinct state"
    assert report.steps == report.edges


def test_the_graph_is_the_models(graphs: Callable[[str], tuple[StateGraph, str]]) -> None:
    # The dump is of the model itself (same VIEW and SYMMETRY): as many states as TLC reports for it.
    graph, _ = graphs("ledger-ci-liveness")
    assert len(graph.labels) == 526 and len(graph.initial) == 2  # spec/ledger.md; an initial state per ensemble
    graph, _ = graphs("ledger-ci-striping")
    assert len(graph.labels) == 479 and len(graph.initial) == 1  # symmetry: one initial class


def test_the_replayed_models_exercise_every_action(graphs: Callable[[str], tuple[StateGraph, str]]) -> None:
    seen = {
        e.action
        for name in ("ledger-ci-liveness", "ledger-ci-striping", "faults", "writer", "reads")
        for e in graphs(name)[0].edges
    }
    assert seen == EVERY_ACTION


def test_shared_fate_queues_requests_to_a_down_bookie_on_one_connection_attempt(
    graphs: Callable[[str], tuple[StateGraph, str]],
) -> None:
    def to_down_bookie(graph: StateGraph, node: str) -> list[Record]:
        up = graph.state(node)["up"]
        assert isinstance(up, Mapping)
        return [m for m in _msgs(graph, node) if m["kind"] in REQUESTS and up[m["bookie"]] is False]

    general, _ = graphs("faults")
    shared, shared_config = graphs("shared-fate")
    assert LedgerMapping(read_constants(shared_config)).shared_fate
    actions = {e.action for e in shared.edges}
    assert "RequestToDownBookieLost" not in actions  # a queued request fails only with its attempt
    assert {"BookieCrashes", "BookieRestarts"} <= actions
    # An attempt that connects: requests queued while the bookie is down, there at its restart.
    queued = {node for node in shared.labels if to_down_bookie(shared, node)}
    assert any(e.action == "BookieRestarts" and e.source in queued for e in shared.edges)

    # The writer's add to its (only) bookie while it is down: the attempt fails (nothing in flight
    # after the step) or waits for the restart (the add queued).
    def add_queued(e: Any) -> bool | None:
        source = shared.state(e.source)
        up, fragments = source["up"], source["wFragments"]
        assert isinstance(up, Mapping) and isinstance(fragments, tuple)
        if e.action != "WriterSendsAdd" or up[fragments[-1]["ens"][0]] is not False:
            return None
        return any(m["kind"] == "add" for m in to_down_bookie(shared, e.target))

    assert {add_queued(e) for e in shared.edges} >= {True, False}
    # (one request per client and bookie at a time here: as many states as the general network)
    assert 0 < len(shared.labels) <= len(general.labels)


def test_another_walk_order_reaches_the_states_along_other_paths(
    graphs: Callable[[str], tuple[StateGraph, str]],
) -> None:
    graph, config = graphs("ledger-ci-liveness")
    report = replay_graph(LedgerMapping(read_constants(config)), "liveness", graph, symmetry=False, seed=7)
    assert report.mismatch is None, str(report.mismatch)
    assert report.edges_covered == report.edges


# ---- regression: the mutations' counterexamples ------------------------------------------------


@pytest.mark.parametrize(
    ("name", "action", "differing"),
    [
        # 2614: the implementation's recovery reads carry the fence flag; the mutation's do not.
        ("ledger-mutation1-nofence-ci", "RecoveryReceivesReadLacResponse", {"msgs"}),
        # 2615: the implementation starts at max(LAC, first entry of the last fragment - 1) = 0, not LAC = -1.
        # (It reads entry 1 where the mutation reads entry 0, hence msgs and rNext too.)
        ("ledger-mutation2-startfromlac-ci", "RecoveryReceivesReadLacResponse", {"msgs", "rNext", "rWbLac"}),
        # One negative of Qw=2, Qa=1 does not end the implementation's recovery (it needs Qw-Qa+1 = 2):
        # it asks the write set's next bookie. The mutation, ending, resets rNegatives and rTried (dead
        # once the end is found), the cores keep the answer and the count.
        ("ledger-mutation3-negqa-ci", "RecoveryReceivesReadResponse", {"msgs", "rNegatives", "rPhase", "rTried"}),
    ],
)
def test_mutation_counterexample_is_refused(
    conformance: Conformance, name: str, action: str, differing: set[str]
) -> None:
    result = conformance.replay(name)  # replay_model(MODELS[name]), once per session
    assert result.trace is not None and result.ok, f"the implementation followed the mutation {name} to the end"
    mismatch = result.trace.mismatch
    assert mismatch is not None
    assert mismatch.step < result.trace_states - 1, "refused before the violating state"
    assert (mismatch.action, mismatch.differing) == (action, differing), str(mismatch)
    assert len(mismatch.behaviour) == mismatch.step - 1 == result.trace.steps


def test_mutation4_one_read_lac_answer_is_refused_where_fencing_would_end(conformance: Conformance) -> None:
    # The weakened coverage rule ends fencing at the first read-LAC answer (and starts reading); the
    # implementation waits for every write set to be covered: refused at that answer, the last step
    # (FencedBeforeReading is violated in the state it reaches).
    result = conformance.replay("ledger-mutation4-readlacone-ci")
    assert result.trace is not None and result.ok, "the implementation followed the weakened coverage rule"
    mismatch = result.trace.mismatch
    assert mismatch is not None and mismatch.step == result.trace_states - 1
    assert mismatch.action == "RecoveryReceivesReadLacResponse" and "rPhase" in mismatch.differing, str(mismatch)


@pytest.mark.parametrize(
    ("name", "last_action"),
    [
        # The writer's LAC moves while r1 reads: its add reached one bookie before that bookie's fence.
        ("ledger-witness-lacmoves-ci", "WriterReceivesAddResponse"),
        # A recovery that read nothing past its start closes with the read-LAC's length.
        ("ledger-witness-closedlength-ci", "RecoveryCloses"),
    ],
)
def test_a_witness_of_the_protocol_is_followed_to_the_end(
    conformance: Conformance, name: str, last_action: str
) -> None:
    behaviours = conformance.behaviours(name)
    assert behaviours.trace is not None and behaviours.trace[-1][0] == last_action
    result = conformance.replay(name)  # replay_behaviours(behaviours)
    assert result.follow and result.ok, str(result.trace.mismatch if result.trace else result.tlc_outcome)
    assert result.trace is not None and result.trace.steps == result.trace_states - 1 > 1


def test_two_recoverers_race_and_the_second_adopts_the_close(
    graphs: Callable[[str], tuple[StateGraph, str]],
) -> None:
    """ledger-ci-recoverers (replayed in full above) has both clients fencing the same ledger, and a
    close of one that finds the other's CLOSED (it adopts its end, BookKeeper's closeRecovered)."""
    graph, _ = graphs("ledger-ci-recoverers")

    def phases(node: str) -> Mapping[Any, Any]:
        value = graph.state(node)["rPhase"]
        assert isinstance(value, Mapping)
        return value

    both = [n for n in graph.labels if all(p in ("fencing", "reading", "closing") for p in phases(n).values())]
    assert both, "no state with both recovery clients at work"
    adopted = [
        e
        for e in graph.edges
        if e.action == "RecoveryCloses" and graph.state(e.source)["meta"]["state"] == "CLOSED"  # type: ignore[index]
    ]
    assert adopted, "no recovery close that adopts another's"


def test_the_liveness_models_have_their_fault(graphs: Callable[[str], tuple[StateGraph, str]]) -> None:
    crash, _ = graphs("ledger-ci-liveness-crash")
    assert {"BookieCrashes", "BookieRestarts"} <= {e.action for e in crash.edges}
    qa, config = graphs("ledger-ci-liveness-qa")
    constants = read_constants(config)
    assert constants["Qa"] == 1 and constants["Qw"] == 2  # type: ignore[comparison-overlap]
    assert "MessageLost" in {e.action for e in qa.edges}
    # issue 47, item 3: the recovery client crashes in every phase of its attempt and retries after
    recoverer, _ = graphs("ledger-ci-liveness-recoverer-crash")

    def phase(node: str) -> object:
        (value,) = recoverer.state(node)["rPhase"].values()  # type: ignore[union-attr]  # one recoverer
        return value

    assert {phase(e.source) for e in recoverer.edges if e.action == "RecovererCrashes"} == {
        "fencing",
        "reading",
        "closing",
    }
    assert any(e.action == "RecoveryStarts" and phase(e.source) == "aborted" for e in recoverer.edges)


def test_mutation1_fenced_reads_then_the_late_add_is_rejected(conformance: Conformance) -> None:
    result = conformance.replay("ledger-mutation1-nofence-ci")
    assert result.trace is not None and result.trace.mismatch is not None
    closest = result.trace.mismatch.closest
    assert closest is not None
    text = "\n".join(closest.diff)
    assert 'kind |-> "read", val |-> 0' in text and 'kind |-> "read", val |-> 1' in text
    # Driven on with the trace's inputs: a fenced read fences the last bookie, so the old
    # writer's add, which the mutation acknowledges there, is refused (no entry, no LAC).
    later = dict((action, variables) for _, action, variables in result.trace.consequences)
    assert "fenced" in later["RecoveryReceivesReadResponse"]
    assert {"wLac", "wState", "entries"} <= later["WriterReceivesAddResponse"]


# ---- the decisions that made ledger.tla and the cores agree (spec/ledger.md, "Decisions") ----------


def _msgs(graph: StateGraph, node: str) -> list[Record]:
    msgs = graph.state(node)["msgs"]
    assert isinstance(msgs, frozenset)
    return [m for m in msgs if isinstance(m, Record)]


def test_recovery_reads_the_entry_after_its_start_point_first(
    graphs: Callable[[str], tuple[StateGraph, str]],
) -> None:
    """Decision 1: as BookKeeper's LedgerRecoveryOp, recovery reads start+1 straight after the fencing
    read-LAC; the start entry itself is not read (the cores used to read it first, for its length)."""
    report = replay(graphs, "start")
    assert report.mismatch is None, str(report.mismatch)
    assert report.edges_covered == report.edges
    graph, _ = graphs("start")
    started = [e for e in graph.edges if e.action == "RecoveryReceivesReadLacResponse"]
    reads = {m["entry"] for e in started for m in _msgs(graph, e.target) if m["kind"] == "read"}
    assert reads == {0, 1}  # start -1 reads entry 0, start 0 reads entry 1 (and never entry 0)


def test_tiny_fragments_is_replayed_in_full(
    graphs: Callable[[str], tuple[StateGraph, str]], conformance: Conformance
) -> None:
    """Decision 1 again, with ensemble changes (a start point at a fragment's first entry - 1) and the
    ledger length of decision 4 (recovery closing with the read-LAC's length)."""
    report = replay(graphs, "ledger-ci-tiny-fragments", conformance=conformance)
    assert report.mismatch is None, str(report.mismatch)
    assert report.edges_covered == report.edges and report.states_covered == report.states
    graph, _ = graphs("ledger-ci-tiny-fragments")
    assert report.edges == len(graph.edges) > 0 and report.states == len(graph.labels)


def test_a_resent_add_carries_the_lac_it_was_first_sent_with(graphs: Callable[[str], tuple[StateGraph, str]]) -> None:
    """Decision 3: after an ensemble change the writer re-sends a pending add verbatim (BookKeeper's
    PendingAddOp re-sends its buffer), so with the LAC it had when first sent (ledger.tla's wSentLac)."""
    report = replay(graphs, "resend")
    assert report.mismatch is None, str(report.mismatch)
    assert report.edges_covered == report.edges
    graph, _ = graphs("resend")
    stale = [
        e
        for e in graph.edges
        if e.action == "WriterChangesEnsemble"
        and any(m["kind"] == "add" and m["entry"] == 1 and m["val"] == -1 for m in _msgs(graph, e.target))
        and graph.state(e.target)["wLac"] == 0
    ]
    assert stale, "no re-send of entry 1 with its first LAC (-1) while the writer's LAC is 0"


def _hand_run(config: RunConfig, ensemble: tuple[str, ...], script: Callable[[LedgerCluster, _Recorder], None]) -> Run:
    """A scripted (not random) run of the cores, recorded as trace_validation records its runs."""
    recorder = _Recorder()
    cluster = LedgerCluster(
        config.bookie_ids, ensemble, config.quorums, WRITER, config.recoverer_names, tracer=recorder
    )
    run = Run(config, 0, ensemble)
    script(cluster, recorder)
    run.events = recorder.events
    return run


def _deliver_where(c: LedgerCluster, r: _Recorder, keep: Callable[[InFlight], bool]) -> None:
    (m,) = [m for m in c.inflight if keep(m)]
    _deliver(r, c, m)


def _entry_of(m: InFlight) -> int:
    request = m.request
    assert isinstance(request, AddRequest | ReadRequest)
    return request.entry_id


def _is(kind: type, client: str, bookie: str, entry: int) -> Callable[[InFlight], bool]:
    return lambda m: isinstance(m.request, kind) and (m.client, m.bookie, _entry_of(m)) == (client, bookie, entry)


HAND = RunConfig("hand-e2-qw2-qa1", 2, (2, 2, 1), entries=3, recoverers=2)


def _efenced_after_qa(c: LedgerCluster, r: _Recorder) -> None:
    # Entry 1 reaches Qa = 1 ack while entry 0 waits; a recovery fences b2; b2's EFENCED for entry 1
    # is ignored (PendingAddOp: completed), its EFENCED for entry 0 (no ack) stops the writer.
    for _ in range(2):
        _as(r, WRITER, c.writer_add)
    _deliver_where(c, r, _is(AddRequest, WRITER, "b1", 1))
    _as(r, "r1", partial(c.start_recovery, "r1"))
    _deliver_where(c, r, _is(ReadRequest, "r1", "b2", LAST_ENTRY))
    _deliver_where(c, r, _is(AddRequest, WRITER, "b2", 1))
    assert c.writer.state is WriterState.WRITING  # ignored
    _deliver_where(c, r, _is(AddRequest, WRITER, "b2", 0))
    assert c.writer.state is WriterState.FAILED  # fenced


def _read_lac_below_a_lac_seen(c: LedgerCluster, r: _Recorder) -> None:
    # b1 ends up with entry 1 carrying LAC 0 (r1's write-back) while its last entry, 2, carries -1:
    # r2's fencing read-LAC answer from b1 is -1 (ledger.tla's bookieLac), not 0.
    for _ in range(3):
        _as(r, WRITER, c.writer_add)
    for m in list(c.inflight):
        _deliver(r, c, m)
    _as(r, "r1", partial(c.start_recovery, "r1"))
    for b in ("b1", "b2"):
        _deliver_where(c, r, _is(ReadRequest, "r1", b, LAST_ENTRY))
    _deliver_where(c, r, _is(ReadRequest, "r1", "b1", 0))
    _deliver_where(c, r, _is(AddRequest, "r1", "b1", 0))
    _deliver_where(c, r, _is(ReadRequest, "r1", "b2", 1))  # entry 1's write set starts at b2
    _deliver_where(c, r, _is(AddRequest, "r1", "b1", 1))
    assert c.bookies["b1"].core.ledgers[LEDGER_ID].piggybacked_lac == 0 and c.last_entry_lac("b1") == -1
    _as(r, "r2", partial(c.start_recovery, "r2"))
    _deliver_where(c, r, _is(ReadRequest, "r2", "b1", LAST_ENTRY))
    (answer,) = [e for e in r.events if e.name == "RecoveryReceivesReadLacResponse" and e.params["client"] == "r2"]
    assert answer.params["lac"] == -1


def test_ledger_tla_admits_the_efenced_and_read_lac_decisions() -> None:
    """Decisions 2 and 3: TLC checks that ledger.tla admits both scripted runs, with no step admitted
    outside the spec (trace_validation.py). The spec before the decisions rejected each of them:
    its writer stopped on any EFENCED answer, and its read-LAC answered the largest LAC seen (0)."""
    runs = [_hand_run(HAND, ("b1", "b2"), script) for script in (_efenced_after_qa, _read_lac_below_a_lac_seen)]
    verdicts, _ = check_traces(HAND, runs)
    assert all(v.accepted for v in verdicts), "\n".join(v.describe() for v in verdicts)


# ---- broken cores must be caught ---------------------------------------------------------------


class HoleSkippingWriter(LedgerWriter):
    """Broken: completes the highest acknowledged entry even if an earlier one is still pending."""

    def _deliver_completed(self) -> list[WriterOutput]:
        done = [e for e, p in self._pending.items() if len(p.acked) >= self.metadata.ack_quorum]
        if not done:
            return []
        top = max(done)
        self.length = self._pending[top].length  # the length is right: only the hole is the bug
        for entry_id in [e for e in self._pending if e <= top]:
            del self._pending[entry_id]
        self.last_add_confirmed = top
        return [AddCompleted(top)]


class RecoveryWithoutFencing(RecoveryOp):
    """Broken: the recovery read-LAC does not set the fence flag (BookKeeper issue 2614's cousin)."""

    def _fence(self) -> list[RecoveryOutput]:
        self.phase = RecoveryPhase.FENCING
        self.read_lac = ReadLacOp(self.ledger_id, self.metadata, fence=False)
        return [*self.read_lac.step(Start())]


class BookieIgnoringFence(BookieCore):
    """Broken: stores a plain add on a fenced ledger."""

    def _add(self, req: AddRequest, request_id: int) -> list[Output]:
        ledger = self.ledgers.get(req.ledger_id)
        if ledger is None or not ledger.fenced:
            return super()._add(req, request_id)
        ledger.fenced = False
        try:
            return super()._add(req, request_id)
        finally:
            ledger.fenced = True


class BookieForgettingFenceOnRestart(BookieCore):
    """Broken: journal replay skips fence records, so a restarted bookie accepts the old writer."""

    def step(self, event: BookieEvent) -> list[Output]:
        if isinstance(event, Replay) and event.record.kind is RecordKind.FENCE:
            return []
        return super().step(event)


@pytest.mark.parametrize(
    ("name", "cores", "symptom"),
    [
        ("writer", CoreTypes(writer=HoleSkippingWriter), "wLac"),
        ("ledger-ci-liveness", CoreTypes(recovery=RecoveryWithoutFencing), "msgs"),
        ("ledger-ci-liveness", CoreTypes(bookie=BookieIgnoringFence), "wState"),
        ("faults", CoreTypes(bookie=BookieForgettingFenceOnRestart), "fenced"),
    ],
    ids=["writer-lac-past-a-hole", "recovery-without-fence", "bookie-ignores-fence", "replay-forgets-fence"],
)
def test_a_broken_core_is_caught(
    graphs: Callable[[str], tuple[StateGraph, str]], name: str, cores: CoreTypes, symptom: str
) -> None:
    report = replay(graphs, name, cores)
    assert report.mismatch is not None, f"the replay did not catch {cores}"
    assert symptom in report.mismatch.differing, str(report.mismatch)
    assert report.edges_covered < report.edges
    text = str(report.mismatch)
    assert "behaviour so far:" in text and "spec state vs implementation state" in text


def test_mismatch_report_shows_behaviour_step_action_and_diff(graphs: Callable[[str], tuple[StateGraph, str]]) -> None:
    report = replay(graphs, "writer", CoreTypes(writer=HoleSkippingWriter))
    assert report.mismatch is not None
    text = str(report.mismatch)
    assert f"refuses step {report.mismatch.step}, action WriterReceivesAddResponse" in text
    assert "1. WriterSendsAdd: writer.add" in text
    assert "wLac:\n      spec: -1\n      impl: 1" in text


def test_the_cli_replays_and_reports(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from pulsar_ref.commands import conform

    code = conform.main(["--model", "ledger-ci-liveness", "--model", "ledger-mutation3-negqa-ci"], "pulsar-ref conform")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "526/526" in out and "960/960" in out
    assert "regression traces refused: 1/1" in out and "steps/s" in out
