"""Which models of spec/models.toml are replayed, and how (shared by `pulsar-ref conform` and the tests).

- A model TLC passes: its whole state graph is replayed (every edge, every distinct state).
- A model where TLC finds a violation: its counterexample is replayed as a trace.
  - ledger.tla's are mutations (known BookKeeper bugs): regression traces. The fixed
    implementation must *refuse* them: at some step its state leaves the mutated behaviour
    (e.g. it sends fenced reads where the mutation does not), before the violation.
  - metadata.tla's are configurations (blind writes, no fencing) whose anomaly the spec
    predicts: the store must *follow* them to the end (it loses the blind write's update).
  - fencing.tla's: a mutation's (no fencing, writing on after a bad version) must be refused;
    a witness's (the protocol's own configuration, a situation that must be reachable) followed.

The behaviours TLC produced can be kept (`keep`) and replayed again: the mutation score
(conformance/mutants.py) replays them with each broken core patched in.

Specs without a mapping in conformance/ are reported as not supported, never passed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from conformance.cursor_spec import CursorMapping
from conformance.fencing_spec import FencingMapping
from conformance.ledger_spec import LedgerMapping
from conformance.metadata_spec import MetadataMapping
from conformance.replay import GraphReplay, TraceReplay, has_symmetry, read_constants, replay_graph, replay_trace
from conformance.replication_spec import ReplicationMapping
from conformance.statespace import StateGraph, dump_state_graph
from conformance.storage_spec import StorageMapping
from conformance.tla_values import Value
from conformance.tlc import SPEC_DIR, Model, Outcome, run_tlc

# spec module -> mapping class (constants of a model, core types) -> the mapping
MAPPINGS: dict[str, Callable[..., Any]] = {
    "cursor.tla": CursorMapping,
    "fencing.tla": FencingMapping,
    "ledger.tla": LedgerMapping,
    "metadata.tla": MetadataMapping,
    "replication.tla": ReplicationMapping,
    "storage.tla": StorageMapping,
}


def supported(spec: str) -> bool:
    return spec in MAPPINGS


def mapping_for(model: Model, cores: Any = None) -> Any:
    constants = read_constants((SPEC_DIR / model.config).read_text())
    return MAPPINGS[model.spec](constants, cores=cores)


@dataclass
class ModelResult:
    model: Model
    graph: GraphReplay | None = None  # passing models
    trace: TraceReplay | None = None  # mutation models
    trace_states: int = 0  # states in the counterexample
    follow: bool = False  # the trace must be followed to the end (else: refused)
    tlc_outcome: str = ""  # what TLC said when the model was not what the manifest expects

    @property
    def ok(self) -> bool:
        if self.tlc_outcome:
            return False
        if self.graph is not None:
            g = self.graph
            return g.mismatch is None and g.edges_covered == g.edges and g.states_covered == g.states
        if self.trace is None:
            return False
        if self.follow:
            return self.trace.mismatch is None and self.trace.steps == self.trace_states - 1
        return self.trace.mismatch is not None

    @property
    def steps(self) -> int:
        if self.graph is not None:
            return self.graph.steps
        return self.trace.steps + (self.trace.mismatch is not None) if self.trace else 0


@dataclass
class Behaviours:
    """What TLC produced for one model: its state graph (expect = pass) or its counterexample."""

    model: Model
    graph: StateGraph | None = None
    trace: list[tuple[str, Mapping[str, Value]]] | None = None
    tlc_outcome: str = ""  # what TLC said when the model was not what the manifest expects


def behaviours_of(model: Model) -> Behaviours:
    """Run TLC once for `model` (the slow part; the mutation runs replay the same behaviours again)."""
    spec_file, config_file = SPEC_DIR / model.spec, SPEC_DIR / model.config
    if model.expect is Outcome.PASS:
        return Behaviours(model, graph=dump_state_graph(spec_file, config_file, short=model.profile == "ci"))
    result = run_tlc(spec_file, config_file, workers=1, short=model.profile == "ci")
    if result.outcome is not Outcome.VIOLATION or not result.trace:
        return Behaviours(model, tlc_outcome=f"TLC: {result.outcome.value} {result.violated}".strip())
    return Behaviours(model, trace=[(s.action, s.values()) for s in result.trace])


def replay_behaviours(
    behaviours: Behaviours,
    *,
    seed: int = 0,
    cores: Any = None,
    on_progress: Callable[[GraphReplay], None] | None = None,
) -> ModelResult:
    """Replay what TLC produced for a model against the cores (the current ones: a mutant is patched in)."""
    model = behaviours.model
    if behaviours.tlc_outcome:
        return ModelResult(model, tlc_outcome=behaviours.tlc_outcome)
    mapping = mapping_for(model, cores)
    if behaviours.graph is not None:
        symmetry = has_symmetry((SPEC_DIR / model.config).read_text())
        report = replay_graph(
            mapping, model.name, behaviours.graph, symmetry=symmetry, seed=seed, on_progress=on_progress
        )
        return ModelResult(model, graph=report)
    states = behaviours.trace or []
    follow = getattr(mapping, "counterexamples_are_followed", False)
    return ModelResult(model, trace=replay_trace(mapping, model.name, states), trace_states=len(states), follow=follow)


def replay_model(
    model: Model,
    *,
    seed: int = 0,
    cores: Any = None,
    on_graph: Callable[[int, int], None] | None = None,
    on_progress: Callable[[GraphReplay], None] | None = None,
    keep: dict[str, Behaviours] | None = None,
) -> ModelResult:
    """Replay one model: its state graph (expect = pass) or its counterexample (expect = violation).

    `keep`: TLC's behaviours are stored there by model name (for the mutation runs).
    """
    behaviours = behaviours_of(model)
    if keep is not None:
        keep[model.name] = behaviours
    if behaviours.graph is not None and on_graph is not None:
        on_graph(len(behaviours.graph.labels), len(behaviours.graph.edges))
    return replay_behaviours(behaviours, seed=seed, cores=cores, on_progress=on_progress)
