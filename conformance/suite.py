"""Which models of spec/models.toml are replayed, and how (shared by `pulsar-ref conform` and the tests).

- A model TLC passes: its whole state graph is replayed (every edge, every distinct state).
- A model where TLC finds a violation: its counterexample is replayed as a trace.
  - ledger.tla's are mutations (known BookKeeper bugs): regression traces. The fixed
    implementation must *refuse* them: at some step its state leaves the mutated behaviour
    (e.g. it sends fenced reads where the mutation does not), before the violation.
  - metadata.tla's are configurations (blind writes, no fencing) whose anomaly the spec
    predicts: the store must *follow* them to the end (it loses the blind write's update).

Specs without a mapping in conformance/ are reported as not supported, never passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conformance.ledger_spec import LedgerMapping
from conformance.metadata_spec import MetadataMapping
from conformance.replay import GraphReplay, TraceReplay, has_symmetry, read_constants, replay_graph, replay_trace
from conformance.statespace import dump_state_graph
from conformance.tlc import SPEC_DIR, Model, Outcome, run_tlc

# spec module -> mapping class (constants of a model, core types) -> the mapping
MAPPINGS: dict[str, Callable[..., Any]] = {"ledger.tla": LedgerMapping, "metadata.tla": MetadataMapping}


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


def replay_model(
    model: Model,
    *,
    seed: int = 0,
    cores: Any = None,
    on_graph: Callable[[int, int], None] | None = None,
    on_progress: Callable[[GraphReplay], None] | None = None,
) -> ModelResult:
    """Replay one model: its state graph (expect = pass) or its counterexample (expect = violation)."""
    spec_file, config_file = SPEC_DIR / model.spec, SPEC_DIR / model.config
    mapping = mapping_for(model, cores)
    if model.expect is Outcome.PASS:
        graph = dump_state_graph(spec_file, config_file)
        if on_graph is not None:
            on_graph(len(graph.labels), len(graph.edges))
        symmetry = has_symmetry(config_file.read_text())
        report = replay_graph(mapping, model.name, graph, symmetry=symmetry, seed=seed, on_progress=on_progress)
        return ModelResult(model, graph=report)
    result = run_tlc(spec_file, config_file, workers=1)
    if result.outcome is not Outcome.VIOLATION or not result.trace:
        return ModelResult(model, tlc_outcome=f"TLC: {result.outcome.value} {result.violated}".strip())
    states = [(s.action, s.values()) for s in result.trace]
    follow = getattr(mapping, "counterexamples_are_followed", False)
    return ModelResult(model, trace=replay_trace(mapping, model.name, states), trace_states=len(states), follow=follow)
