"""Model-based replay: TLC behaviours fed to the implementation's cores, compared at every step.

A *mapping* (one per spec: conformance/ledger_spec.py) knows, for a spec action, which inputs
the harness can give the cores (`candidates`), and computes the spec's variables from the
implementation's state (`abstract`). The replay, at each step of a behaviour:

  1. takes the candidates of the step's action (for a counterexample trace, only those that
     agree with the step's `lastAction` params);
  2. runs each on a copy of the implementation (the cores are deterministic and pickle);
  3. keeps the first whose abstraction equals TLC's next state (up to a permutation of the
     model's symmetric values, when the model has a SYMMETRY);
  4. if none does, the implementation refuses the behaviour: a `Mismatch` with the behaviour
     so far, the step, the action and a side-by-side diff of the spec's state and the
     implementation's (for the candidate that came closest).

Two sources of behaviours: a trace (TLC's counterexample, `replay_trace`), and TLC's whole
state graph (`replay_graph`): a depth-first walk that replays every edge once, each from the
implementation state reached along the walk's path to its source; it covers every edge and
every distinct state of the model.
"""

from __future__ import annotations

import collections.abc
import enum
import io
import itertools
import pickle
import random
import threading
import time
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from conformance.statespace import Edge, StateGraph
from conformance.tla_values import Function, ModelValue, Record, Value, parse_value

Names = dict[str, ModelValue]  # implementation id (a bookie id) -> the spec's model value
State = Mapping[str, Value]
AUXILIARY = ("lastAction",)  # spec variables outside the VIEW: not part of the state
# Ghost variables (issue 47; named ghost*): history a spec keeps for its properties and the protocol
# never reads; the implementation has none, so the replay compares every other variable.
GHOST_PREFIX = "ghost"


@dataclass
class Candidate:
    label: str  # what the harness does, in words
    params: dict[str, Value]  # the spec-level parameters it realises (checked against lastAction)
    run: Callable[[Any], None]
    # Optional: the refusal `run` would meet before changing anything, checked without changing
    # anything (raises the very exception `run` would raise first). The replay asks it before
    # copying the state: a candidate it refuses costs no copy.
    ready: Callable[[Any], None] | None = None


class Mapping_(Protocol):
    spec: str
    symmetric: frozenset[ModelValue]

    def initial(self, state: State) -> tuple[Any, Names]: ...

    def candidates(self, system: Any, names: Names, action: str) -> list[Candidate]: ...

    def abstract(self, system: Any, names: Names) -> dict[str, Value]: ...


# ---- values ----------------------------------------------------------------------------------


_SECTIONS = {
    "INIT",
    "NEXT",
    "SPECIFICATION",
    "INVARIANT",
    "INVARIANTS",
    "PROPERTY",
    "PROPERTIES",
    "VIEW",
    "SYMMETRY",
    "CONSTRAINT",
    "CONSTRAINTS",
    "ACTION_CONSTRAINT",
    "ACTION_CONSTRAINTS",
    "ALIAS",
    "CHECK_DEADLOCK",
}


def read_constants(config_text: str) -> dict[str, Value]:
    """`Name = value` lines of a .cfg's CONSTANTS section, values parsed as TLA+ values."""
    constants: dict[str, Value] = {}
    inside = False
    for raw in config_text.splitlines():
        line = raw.split("\\*", 1)[0].strip()
        if not line:
            continue
        word = line.split()[0]
        if word in ("CONSTANT", "CONSTANTS"):
            inside = True
            line = line[len(word) :].strip()
            if not line:
                continue
        elif word in _SECTIONS:
            inside = False
        if inside and "=" in line:
            name, _, value = line.partition("=")
            constants[name.strip()] = parse_value(value.strip())
    return constants


def has_symmetry(config_text: str) -> bool:
    return any(line.split("\\*", 1)[0].strip().startswith("SYMMETRY") for line in config_text.splitlines())


def rename(value: Value, mapping: Mapping[ModelValue, ModelValue]) -> Value:
    """`value` with model values renamed (a permutation of symmetric values)."""
    if isinstance(value, ModelValue):
        return mapping.get(value, value)
    if isinstance(value, tuple):
        return tuple(rename(v, mapping) for v in value)
    if isinstance(value, frozenset):
        return frozenset(rename(v, mapping) for v in value)
    if isinstance(value, Record):
        return Record(tuple((k, rename(v, mapping)) for k, v in value.fields))
    if isinstance(value, Function):
        return Function(frozenset((rename(k, mapping), rename(v, mapping)) for k, v in value.pairs))
    return value


def permutations(values: frozenset[ModelValue]) -> list[dict[ModelValue, ModelValue]]:
    """Every permutation of `values`, the identity first."""
    ordered = sorted(values, key=str)
    return [dict(zip(ordered, perm, strict=True)) for perm in itertools.permutations(ordered)]


def show(value: Value) -> str:
    """A value in TLA+ syntax, sets and functions in a stable order."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, ModelValue):
        return value.name
    if isinstance(value, tuple):
        return "<<" + ", ".join(show(v) for v in value) + ">>"
    if isinstance(value, frozenset):
        return "{" + ", ".join(sorted(show(v) for v in value)) + "}"
    if isinstance(value, Record):
        return "[" + ", ".join(f"{k} |-> {show(v)}" for k, v in value.fields) + "]"
    if isinstance(value, Function):
        return "(" + " @@ ".join(sorted(f"{show(k)} :> {show(v)}" for k, v in value.pairs)) + ")"
    return repr(value)


def differences(spec: State, impl: State) -> list[str]:
    """Side-by-side lines for every variable where the spec's and the implementation's states differ."""
    lines: list[str] = []
    for var in sorted(spec):
        if var in AUXILIARY or var.startswith(GHOST_PREFIX):
            continue
        want, got = spec[var], impl.get(var, "<missing in the abstraction>")
        if want == got:
            continue
        lines.append(f"  {var}:")
        if isinstance(want, frozenset) and isinstance(got, frozenset):
            for v in sorted(show(x) for x in want - got):
                lines.append(f"      only in spec: {v}")
            for v in sorted(show(x) for x in got - want):
                lines.append(f"      only in impl: {v}")
        elif isinstance(want, Function) and isinstance(got, Function):
            for key in sorted(set(want) | set(got), key=show):
                a, b = want.get(key), got.get(key)
                if a != b:
                    left, right = ("-" if v is None else show(v) for v in (a, b))
                    lines.append(f"      [{show(key)}]  spec: {left:<30} impl: {right}")
        else:
            lines.append(f"      spec: {show(want)}")
            lines.append(f"      impl: {show(got)}")
    return lines


# ---- one step ----------------------------------------------------------------------------------


def _restore_exception(cls: type[BaseException], args: tuple[Any, ...], attrs: dict[str, Any]) -> BaseException:
    error = cls.__new__(cls)
    BaseException.__init__(error, *args)
    error.__dict__.update(attrs)
    return error


_LOCKS = (type(threading.Lock()), type(threading.RLock()))

# ---- values the copies share ----
# An object nothing can change need not be copied: a copy may refer to the original. Such a
# *value* is an enum member, or an instance of a frozen dataclass whose fields' declared types
# are values too: int, str, bytes, bool, float, None, literals, enums, tuples and frozensets of
# values, read-only `Mapping`s and `Sequence`s of values (mypy, which the project runs clean,
# rejects writes through them), and frozen dataclasses of the same kind. Anything else (a dict,
# a list, an exception, a class the rule does not know) makes the dataclass a plain object,
# copied. The cores' messages, journal records, ledger metadata and outputs are values.

_VALUE_TYPES = (int, str, bytes, bool, float, type(None))
_READ_ONLY = (tuple, frozenset, collections.abc.Mapping, collections.abc.Sequence)
_shareable: dict[type, bool] = {}


def _is_value_type(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return True
    if origin in (typing.Union, types.UnionType) or origin in _READ_ONLY:
        return all(_is_value_type(arg) for arg in typing.get_args(hint) if arg is not Ellipsis)
    if not isinstance(hint, type):
        return False
    return hint in _VALUE_TYPES or issubclass(hint, enum.Enum) or is_value_class(hint)


def is_value_class(cls: type) -> bool:
    """Whether the instances of `cls` are values (shared by the copies, never copied)."""
    verdict = _shareable.get(cls)
    if verdict is None:
        _shareable[cls] = False  # while deciding: a class that contains itself is not a value
        verdict = issubclass(cls, enum.Enum)
        params = getattr(cls, "__dataclass_params__", None)
        if not verdict and params is not None and params.frozen and "__dataclass_fields__" in vars(cls):
            try:
                hints = typing.get_type_hints(cls)
            except (NameError, TypeError):
                hints = None
            fields = getattr(cls, "__dataclass_fields__", {})
            verdict = hints is not None and all(_is_value_type(hints.get(name)) for name in fields)
        _shareable[cls] = verdict
    return verdict


_shared = threading.local()  # the values of the copy being unpickled


def _value(index: int) -> Any:
    values: list[Any] = _shared.values
    return values[index]


class _Pickler(pickle.Pickler):
    # The client's typed errors take (ledger_id, message) but store one formatted message in
    # args, so default pickling cannot rebuild them; copy them field by field instead. A lock
    # (the in-memory store's) is copied as a new, free lock: the replay runs on one thread.
    # A value is not pickled: the copy refers to it (its index in `values`).
    def __init__(self, file: io.BytesIO, values: list[Any]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.values = values

    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        if _shareable.get(cls) or (cls not in _shareable and is_value_class(cls)):
            self.values.append(obj)
            return _value, (len(self.values) - 1,)
        if isinstance(obj, BaseException):
            return _restore_exception, (cls, obj.args, dict(obj.__dict__))
        if isinstance(obj, _LOCKS):
            return cls if isinstance(obj, _LOCKS[1]) else threading.Lock, ()
        return NotImplemented


class _Frozen:
    """A state as bytes plus the values they refer to: each `thaw()` is a new, independent copy."""

    def __init__(self, system: Any) -> None:
        buffer = io.BytesIO()
        self.values: list[Any] = []
        _Pickler(buffer, self.values).dump(system)
        self.data = buffer.getvalue()

    def thaw(self) -> Any:
        _shared.values = self.values
        try:
            return pickle.loads(self.data)
        finally:
            _shared.values = None


def clone(system: Any) -> Any:
    """A deep copy of the implementation's state (the cores are plain data; values are shared)."""
    return _Frozen(system).thaw()


class Source:
    """The implementation's state an edge starts from: each candidate runs on a copy of it.

    The state is pickled once (on the first copy), and every copy is an unpickling of those
    bytes: one walk node's edges and candidates share one pickling. `take()` hands out the state
    itself, for the last candidate of the node's last edge: nothing needs the original after it.
    """

    def __init__(self, system: Any) -> None:
        self.system = system
        self._frozen: _Frozen | None = None

    def copy(self) -> Any:
        if self._frozen is None:
            self._frozen = _Frozen(self.system)
        return self._frozen.thaw()

    def take(self) -> Any:
        system, self.system = self.system, None
        return system


@dataclass
class Attempt:
    candidate: Candidate
    error: str = ""  # the cores refused (HarnessError or a core exception)
    state: dict[str, Value] | None = None  # the abstraction after the candidate ran
    diff: list[str] = field(default_factory=list)
    system: Any = field(default=None, repr=False)  # the implementation after the candidate ran

    @property
    def differing(self) -> set[str]:
        """The variables named in the diff."""
        return {line.strip().rstrip(":") for line in self.diff if line.startswith("  ") and not line.startswith("   ")}


@dataclass
class Mismatch(Exception):
    spec: str
    model: str
    behaviour: list[str]  # the steps replayed before, as "action: what the harness did"
    step: int  # 1-based step number of the refused step (state `step + 1` of the behaviour)
    action: str
    params: Value | None
    attempts: list[Attempt]

    def __str__(self) -> str:
        lines = [f"{self.spec} ({self.model}): the implementation refuses step {self.step}, action {self.action}"]
        if self.params is not None:
            lines[0] += f" {show(self.params)}"
        lines.append("behaviour so far:")
        lines += [f"  {i}. {s}" for i, s in enumerate(self.behaviour, start=1)] or ["  (the initial state)"]
        if not self.attempts:
            lines.append("no input of the implementation realises this action here")
        for attempt in self.attempts:
            lines.append(f"tried: {attempt.candidate.label}")
            if attempt.error:
                lines.append(f"  the cores refused: {attempt.error}")
            elif attempt.diff:
                lines.append("  spec state vs implementation state (differing variables):")
                lines += attempt.diff
        return "\n".join(lines)

    @property
    def differing(self) -> set[str]:
        """Variables that differ for the closest attempt (empty if every attempt errored)."""
        best = self.closest
        return best.differing if best else set()

    @property
    def closest(self) -> Attempt | None:
        scored = [a for a in self.attempts if a.state is not None]
        return min(scored, key=lambda a: len(a.diff)) if scored else None


def _match(
    impl: dict[str, Value], spec: State, perms: Sequence[dict[ModelValue, ModelValue]]
) -> dict[ModelValue, ModelValue] | None:
    variables = [v for v in spec if v not in AUXILIARY and not v.startswith(GHOST_PREFIX)]
    if all(impl.get(var) == spec[var] for var in variables):
        return perms[0] if perms else {}  # the identity (perms start with it)
    for perm in perms[1:]:
        # `meta` names every bookie of the ensemble: a cheap filter before renaming everything.
        if "meta" in spec and rename(impl["meta"], perm) != spec["meta"]:
            continue
        if all(rename(impl.get(var), perm) == spec[var] for var in variables):  # type: ignore[arg-type]
            return perm
    return None


def step(
    mapping: Mapping_,
    system: Any,
    names: Names,
    action: str,
    target: State,
    perms: Sequence[dict[ModelValue, ModelValue]],
    params: Record | None = None,
    errors: tuple[type[BaseException], ...] = (Exception,),
    *,
    last_use: bool = False,
) -> tuple[Any, Names, Candidate] | list[Attempt]:
    """Run the action's candidates until one lands on `target`: (system, names, candidate), or the attempts.

    `system` is the state itself or its `Source`; each candidate runs on a copy, except with
    `last_use` (the caller needs the source no more) the last candidate, which runs on the source.
    """
    attempts: list[Attempt] = []
    source = system if isinstance(system, Source) else Source(system)
    candidates = mapping.candidates(source.system, names, action)
    if params is not None:
        candidates = [c for c in candidates if all(params.get(k, v) == v for k, v in c.params.items())]
    for number, candidate in enumerate(candidates, start=1):
        if candidate.ready is not None:
            try:
                candidate.ready(source.system)
            except errors as e:
                attempts.append(Attempt(candidate, error=f"{type(e).__name__}: {e}"))
                continue
        trial = source.take() if last_use and number == len(candidates) else source.copy()
        try:
            candidate.run(trial)
            state = mapping.abstract(trial, names)
        except errors as e:
            attempts.append(Attempt(candidate, error=f"{type(e).__name__}: {e}"))
            continue
        perm = _match(state, target, perms)
        if perm is not None:
            return trial, {impl: perm.get(spec, spec) for impl, spec in names.items()}, candidate
        attempts.append(Attempt(candidate, state=state, diff=differences(target, state), system=trial))
    return attempts


# ---- traces ----------------------------------------------------------------------------------


@dataclass
class TraceReplay:
    steps: int  # steps the implementation followed
    mismatch: Mismatch | None
    seconds: float
    # After a refusal the replay goes on, driving the implementation with the trace's inputs
    # from its own (diverged) state: (step, action, variables that newly differ there). It
    # shows where the refusal shows up, e.g. a late add rejected by a bookie the fenced read fenced.
    consequences: list[tuple[int, str, frozenset[str]]] = field(default_factory=list)


def replay_trace(mapping: Mapping_, model: str, states: Sequence[tuple[str, State]]) -> TraceReplay:
    """Replay one behaviour [(action, state), ...] (the first is the initial state), params from lastAction."""
    started = time.monotonic()
    identity: list[dict[ModelValue, ModelValue]] = [{}]  # a trace's states are concrete: no symmetry
    init = states[0][1]
    system, names = mapping.initial(init)
    behaviour: list[str] = []
    first = mapping.abstract(system, names)
    if _match(first, init, identity) is None:
        attempt = Attempt(Candidate("initial state", {}, lambda s: None), state=first, diff=differences(init, first))
        return TraceReplay(0, Mismatch(mapping.spec, model, [], 0, "Init", None, [attempt]), time.monotonic() - started)
    for number, (action, state) in enumerate(states[1:], start=1):
        last = state.get("lastAction")
        params = last["params"] if isinstance(last, Record) else None
        assert params is None or isinstance(params, Record)
        result = step(mapping, system, names, action, state, identity, params)
        if isinstance(result, list):
            mismatch = Mismatch(mapping.spec, model, behaviour, number, action, params, result)
            after = _consequences(mapping, mismatch, names, states, number, identity)
            return TraceReplay(number - 1, mismatch, time.monotonic() - started, after)
        system, names, candidate = result
        behaviour.append(f"{action}: {candidate.label}")
    return TraceReplay(len(states) - 1, None, time.monotonic() - started)


def _consequences(
    mapping: Mapping_,
    mismatch: Mismatch,
    names: Names,
    states: Sequence[tuple[str, State]],
    refused: int,
    perms: Sequence[dict[ModelValue, ModelValue]],
) -> list[tuple[int, str, frozenset[str]]]:
    closest = mismatch.closest
    if closest is None:
        return []
    system, differing = closest.system, closest.differing
    out: list[tuple[int, str, frozenset[str]]] = []
    for number in range(refused + 1, len(states)):
        action, state = states[number]
        last = state.get("lastAction")
        params = last["params"] if isinstance(last, Record) else None
        result = step(mapping, system, names, action, state, perms, params if isinstance(params, Record) else None)
        if not isinstance(result, list):
            system, names, _ = result
            differing = set()
            continue
        scored = [a for a in result if a.system is not None]
        if not scored:
            out.append((number, action, frozenset({"(the cores refused the input)"})))
            break
        best = min(scored, key=lambda a: len(a.diff))
        if best.differing - differing:
            out.append((number, action, frozenset(best.differing - differing)))
        system, differing = best.system, best.differing
    return out


# ---- the whole state graph ---------------------------------------------------------------------


@dataclass
class GraphReplay:
    model: str
    states: int  # distinct states in TLC's graph
    edges: int  # edges in TLC's graph
    states_covered: int = 0
    edges_covered: int = 0
    steps: int = 0  # steps replayed (each edge once)
    behaviours: int = 0  # maximal paths of the walk (from an initial state to a leaf of its tree)
    candidates_run: int = 0
    seconds: float = 0.0
    mismatch: Mismatch | None = None

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0


@dataclass
class _Visit:
    """A node on the walk's path: its implementation state, and which of its edges comes next."""

    node: str
    source: Source
    names: Names
    edges: list[Edge]
    next: int = 0


def replay_graph(
    mapping: Mapping_,
    model: str,
    graph: StateGraph,
    *,
    symmetry: bool,
    seed: int = 0,
    on_progress: Callable[[GraphReplay], None] | None = None,
) -> GraphReplay:
    """Replay every edge of TLC's state graph; stops at the first mismatch.

    `seed` 0 walks the edges in TLC's order; another seed shuffles each state's edges, so the
    walk reaches states along other paths (other implementation states behind the same spec state).
    """
    started = time.monotonic()
    report = GraphReplay(model, len(graph.labels), len(graph.edges))
    perms = permutations(mapping.symmetric) if symmetry else [{}]
    out = graph.successors()
    if seed:
        shuffle = random.Random(seed).shuffle
        for successors in out.values():
            shuffle(successors)
    visited: set[str] = set()
    # node -> (parent node, step text) of the walk's tree, to print the behaviour on a mismatch
    parent: dict[str, tuple[str | None, str]] = {}

    def path_to(node: str) -> list[str]:
        steps: list[str] = []
        current: str | None = node
        while current is not None and parent[current][0] is not None:
            prev, text = parent[current]
            steps.append(text)
            current = prev
        return steps[::-1]

    for init in graph.initial:
        system, names = mapping.initial(graph.state(init))
        first = mapping.abstract(system, names)
        if _match(first, graph.state(init), perms) is None:
            attempt = Attempt(
                Candidate("initial state", {}, lambda s: None), state=first, diff=differences(graph.state(init), first)
            )
            report.mismatch = Mismatch(mapping.spec, model, [], 0, "Init", None, [attempt])
            break
        visited.add(init)
        parent[init] = (None, "")
        stack = [_Visit(init, Source(system), names, out[init])]
        report.behaviours += not out[init]
        while stack and report.mismatch is None:
            top = stack[-1]
            if top.next == len(top.edges):
                stack.pop()
                continue
            node, names, edge = top.node, top.names, top.edges[top.next]
            top.next += 1
            target = graph.state(edge.target)
            # the node's last edge may use its state itself: the walk leaves the node after it
            result = step(mapping, top.source, names, edge.action, target, perms, last_use=top.next == len(top.edges))
            report.steps += 1
            if isinstance(result, list):
                report.mismatch = Mismatch(
                    mapping.spec, model, path_to(node), len(path_to(node)) + 1, edge.action, None, result
                )
                break
            report.edges_covered += 1
            new_system, new_names, candidate = result
            if edge.target not in visited:
                visited.add(edge.target)
                parent[edge.target] = (node, f"{edge.action}: {candidate.label}")
                if out[edge.target]:
                    stack.append(_Visit(edge.target, Source(new_system), new_names, out[edge.target]))
                else:
                    report.behaviours += 1  # a tree leaf ends a behaviour
            else:
                report.behaviours += 1  # an edge into a known state ends a behaviour too
            if on_progress is not None and report.steps % 500 == 0:
                report.states_covered = len(visited)
                report.seconds = time.monotonic() - started
                on_progress(report)
        if report.mismatch is not None:
            break
    report.states_covered = len(visited)
    report.seconds = time.monotonic() - started
    return report
