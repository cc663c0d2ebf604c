"""Replaying a state graph around a known divergence between a spec and the implementation.

`replay_graph` (conformance/replay.py) stops at the first refused edge. When a mapping names a
*known* divergence (a reported difference between the spec and the cores, such as fencing.tla
keeping an empty last ledger the managed ledger drops), the walk here goes on past the edges it
explains: such an edge is counted as refused for that reason and its target is not entered from
there (the implementation is not in the spec's state). Every other refusal is a mismatch, and the
walk stops at it as `replay_graph` does. The coverage then says how much of the graph lies
before the divergence; a model with a known divergence is still reported as a mismatch.

A mapping opts in with `known_divergence(target, impl) -> str | None`: the name of the known
divergence that explains why the implementation's state `impl` differs from the spec's `target`
after the edge, or None. It must be precise (compare the whole states), or it hides bugs.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from conformance.replay import (
    Attempt,
    Candidate,
    GraphReplay,
    Mapping_,
    Mismatch,
    Names,
    State,
    _match,
    differences,
    permutations,
    step,
)
from conformance.statespace import Edge, StateGraph
from conformance.tla_values import Value


def explained(mapping: Any, target: State, attempts: list[Attempt]) -> str | None:
    """The known divergence that explains a refused edge (some candidate's state), if any."""
    known: Callable[[State, dict[str, Value]], str | None] | None = getattr(mapping, "known_divergence", None)
    if known is None:
        return None
    for attempt in attempts:
        if attempt.state is not None and (name := known(target, attempt.state)) is not None:
            return name
    return None


def replay_graph_around(
    mapping: Mapping_,
    model: str,
    graph: StateGraph,
    *,
    symmetry: bool,
    seed: int = 0,
    on_progress: Callable[[GraphReplay], None] | None = None,
) -> tuple[GraphReplay, Counter[str]]:
    """Replay every edge reachable without crossing a known divergence: (report, refusals by divergence)."""
    started = time.monotonic()
    report = GraphReplay(model, len(graph.labels), len(graph.edges))
    diverged: Counter[str] = Counter()
    perms = permutations(mapping.symmetric) if symmetry else [{}]
    out = graph.successors()
    if seed:
        shuffle = random.Random(seed).shuffle
        for successors in out.values():
            shuffle(successors)
    visited: set[str] = set()
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
        stack: list[tuple[str, Any, Names, Iterator[Edge]]] = [(init, system, names, iter(out[init]))]
        while stack and report.mismatch is None:
            node, system, names, edges = stack[-1]
            edge = next(edges, None)
            if edge is None:
                stack.pop()
                continue
            target = graph.state(edge.target)
            result = step(mapping, system, names, edge.action, target, perms)
            report.steps += 1
            if isinstance(result, list):
                reason = explained(mapping, target, result)
                if reason is not None:
                    diverged[reason] += 1
                    continue
                behaviour = path_to(node)
                report.mismatch = Mismatch(
                    mapping.spec, model, behaviour, len(behaviour) + 1, edge.action, None, result
                )
                break
            report.edges_covered += 1
            new_system, new_names, candidate = result
            if edge.target not in visited:
                visited.add(edge.target)
                parent[edge.target] = (node, f"{edge.action}: {candidate.label}")
                if out[edge.target]:
                    stack.append((edge.target, new_system, new_names, iter(out[edge.target])))
                else:
                    report.behaviours += 1  # a tree leaf ends a behaviour
            else:
                report.behaviours += 1  # an edge into a known state ends a behaviour too
            if on_progress is not None and report.steps % 500 == 0:
                report.states_covered, report.seconds = len(visited), time.monotonic() - started
                on_progress(report)
        if report.mismatch is not None:
            break
    report.states_covered = len(visited)
    report.seconds = time.monotonic() - started
    return report, diverged
