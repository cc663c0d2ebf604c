"""TLC's whole state graph of a model, for exhaustive replay.

`dump_state_graph` runs TLC with `-dump dot,actionlabels FILE` on a *graph variant* of a
model's config: the same CONSTANTS, VIEW and SYMMETRY (so the graph is exactly the model's:
same distinct states), but `SPECIFICATION Spec` and no invariants or properties (the graph
of FairSpec is the same; checking is tests/spec's business, and a violation would stop the
dump early).

What the dump holds, and what it does not (TLC 2.15):
  - one node per distinct state (fingerprint under the VIEW and the SYMMETRY), labelled with
    the first concrete state TLC found for it; initial states are `style = filled`;
  - one edge per generated successor, labelled with the action's name only (no parameters).
    Under a SYMMETRY the edge's target is the *class* of the successor: the successor of the
    source's label is some bookie permutation of the target's label;
  - `lastAction` in a label is that of the first path found into the node, not of each edge
    into it (it is outside the VIEW). The replay therefore derives each edge's parameters by
    trying every input the action could be (see conformance/replay.py).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from conformance.tla_values import Value, parse_value
from conformance.tlc import TLCError, TLCErrorKind, parse_state, run_tlc

_NODE = re.compile(r'^(-?\d+) \[label="(.*)"(,style = filled)?\];?$')
_EDGE = re.compile(r'^(-?\d+) -> (-?\d+) \[label="(\w+)"')


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    action: str


@dataclass
class StateGraph:
    labels: dict[str, str]  # fingerprint -> the node's state text (`/\ var = value` lines)
    edges: list[Edge]
    initial: list[str]
    distinct_states: int = 0  # as TLC reported it (equals len(labels))
    _parsed: dict[str, dict[str, Value]] = field(default_factory=dict, repr=False)
    _values: dict[tuple[str, str], Value] = field(default_factory=dict, repr=False)

    def state(self, node: str) -> dict[str, Value]:
        """The node's state as values (parsed on first use; a variable's text is parsed once for all nodes)."""
        if node not in self._parsed:
            texts = parse_state(f"1: <node>\n{self.labels[node]}").variables
            values = {}
            for var, text in texts.items():
                key = (var, text)
                if key not in self._values:
                    self._values[key] = parse_value(text)
                values[var] = self._values[key]
            self._parsed[node] = values
        return self._parsed[node]

    def successors(self) -> dict[str, list[Edge]]:
        out: dict[str, list[Edge]] = {node: [] for node in self.labels}
        for edge in self.edges:
            out[edge.source].append(edge)
        return out


_ESCAPE = re.compile(r"\\(.)", re.S)


def _unescaped(m: re.Match[str]) -> str:
    return "\n" if m.group(1) == "n" else m.group(1)


def _unescape(label: str) -> str:
    """DOT label text as TLC writes it: `\\n` newline, `\\"` quote, `\\\\` backslash. One regex pass, not
    a loop over characters: a big graph has tens of thousands of kilobyte labels."""
    return _ESCAPE.sub(_unescaped, label)


def parse_dot(text: str) -> StateGraph:
    labels: dict[str, str] = {}
    initial: list[str] = []
    edges: list[Edge] = []
    seen: set[Edge] = set()
    for line in text.splitlines():
        edge = _EDGE.match(line)
        if edge:
            e = Edge(edge.group(1), edge.group(2), edge.group(3))
            if e not in seen:  # a DOT `strict digraph`: the same edge twice is one edge
                seen.add(e)
                edges.append(e)
            continue
        node = _NODE.match(line)
        if node:
            labels[node.group(1)] = _unescape(node.group(2))
            if node.group(3):
                initial.append(node.group(1))
    missing = {e.source for e in edges} | {e.target for e in edges}
    missing -= set(labels)
    if missing:
        raise ValueError(f"the dot dump has edges to {len(missing)} unlabelled nodes, e.g. {sorted(missing)[:3]}")
    return StateGraph(labels, edges, initial, len(labels))


def graph_config(config_text: str) -> str:
    """The graph variant of a config: same CONSTANTS, VIEW, SYMMETRY; `Spec`; nothing to check."""
    keep: list[str] = []
    skipping = False
    for line in config_text.splitlines():
        word = line.split(" ", 1)[0].strip()
        if word in ("INVARIANT", "INVARIANTS", "PROPERTY", "PROPERTIES"):
            skipping = True
            continue
        if word in ("CONSTANTS", "CONSTANT", "VIEW", "SYMMETRY", "SPECIFICATION", "INIT", "NEXT"):
            skipping = False
        if skipping or word == "SPECIFICATION":
            continue
        keep.append(line)
    keep.append("SPECIFICATION Spec")
    return "\n".join(keep) + "\n"


def dump_state_graph(
    spec_file: Path, config_file: Path, *, on_progress: Callable[[str], None] | None = None, short: bool = True
) -> StateGraph:
    """Run TLC on the graph variant of `config_file` and read the whole state graph (a graph small
    enough to dump and replay: `short`, see run_tlc)."""
    with tempfile.TemporaryDirectory(prefix="tlc-graph-") as tmp:
        variant = Path(tmp) / config_file.name
        dot = Path(tmp) / "graph.dot"
        variant.write_text(graph_config(config_file.read_text()))
        result = run_tlc(
            spec_file,
            variant,
            workers=1,
            on_progress=on_progress,
            extra_args=["-dump", "dot,actionlabels", str(dot)],
            short=short,
        )
        if not dot.is_file():
            raise TLCError(TLCErrorKind.SETUP, f"TLC wrote no state graph for {config_file.name}")
        graph = parse_dot(dot.read_text())
    if graph.distinct_states != result.distinct_states:
        raise ValueError(
            f"the dot dump of {config_file.name} has {graph.distinct_states} nodes, TLC reported "
            f"{result.distinct_states} distinct states"
        )
    return graph
