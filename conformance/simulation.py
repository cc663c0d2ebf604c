"""Random behaviours for models too large for their state graph: TLC's simulation mode, replayed.

The replay's first source is a model's whole state graph (conformance/statespace.py), which
needs a model small enough to replay whole; ledger-deep has millions of states, and its VIEW
(deepView) merges states whose successors differ, so its graph is not replayable. Its behaviours come
from `tlc2.TLC -simulate -seed S -depth D` instead: TLC walks from a random initial state taking
random enabled steps. TLC 2.15 has no option to print the walks it makes, so a wrapper module
adds one invariant, `SimGoesOn`, false at depth D and in a state with no successor: TLC prints
each walk as that invariant's counterexample and, with `-continue`, goes on with the next walk.
The walks are read as TLC prints them, de-duplicated by their sequence of actions with
parameters (`lastAction`), and each is replayed with `replay_trace`: the implementation must
follow every step. With one worker and a fixed seed TLC makes the same walks every time.

The model's VIEW and SYMMETRY are left out (they shape TLC's fingerprints, not its steps) and so
are its invariants and properties (model checking, `pulsar-ref spec check`, checks those).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.replay import TraceReplay, replay_trace
from conformance.tla_values import Value
from conformance.tlc import (
    MSG_STATE,
    SEVERITY_ERROR,
    SPEC_DIR,
    Model,
    TLCError,
    TLCErrorKind,
    _messages,
    own_tmpdir,
    parse_state,
    tla2tools_jar,
)

WRAPPER = "SimBehaviours"
Behaviour = list[tuple[str, dict[str, Value]]]

# cfg lines that shape model checking only: fingerprints, and what TLC checks of each state
_DROPPED_SECTIONS = ("INVARIANT", "INVARIANTS", "PROPERTY", "PROPERTIES")
_DROPPED_LINES = ("VIEW", "SYMMETRY")


def simulation_config(config_text: str) -> str:
    """The model's cfg for simulation: its CONSTANTS and SPECIFICATION, with `SimGoesOn` as the one invariant."""
    kept: list[str] = []
    dropping = False
    for line in config_text.splitlines():
        if line.lstrip().startswith("\\*"):
            continue  # comments (they may name what is dropped)
        word = line.split(maxsplit=1)[0] if line.strip() else ""
        if word in _DROPPED_SECTIONS:
            dropping = True
            continue
        if dropping and (not line.strip() or line[:1].isspace()):
            continue  # the dropped section's items
        dropping = False
        if word not in _DROPPED_LINES:
            kept.append(line)
    return "\n".join(kept) + "\nINVARIANT SimGoesOn\n"


def wrapper_module(spec: str, depth: int) -> str:
    module = Path(spec).stem
    return (
        f"---- MODULE {WRAPPER} ----\n"
        f"EXTENDS {module}, TLC\n"
        "\\* False where a walk ends (its depth, or no step is enabled): TLC prints the walk as a counterexample.\n"
        f'SimGoesOn == TLCGet("level") < {depth} /\\ ENABLED Next\n'
        "====\n"
    )


@dataclass
class Simulation:
    model: str
    seed: int
    depth: int
    behaviours: list[Behaviour] = field(default_factory=list)  # distinct walks, in TLC's order
    walks: int = 0  # walks read (duplicates included)
    seconds: float = 0.0


def _walks(lines: Iterator[str]) -> Iterator[Behaviour]:
    """Each counterexample TLC prints, as [(action, state), ...]."""
    current: Behaviour = []
    for msg in _messages(lines):
        if msg.code == MSG_STATE:
            state = parse_state(msg.text)
            if state.number == 1 and current:
                yield current
                current = []
            current.append((state.action, state.values()))
        elif msg.severity == SEVERITY_ERROR and "SimGoesOn" not in msg.text and "behavior up to" not in msg.text:
            raise TLCError(TLCErrorKind.EVALUATION, msg.text.splitlines()[0] if msg.text else "TLC failed", msg.text)
    if current:
        yield current


def _key(behaviour: Behaviour) -> tuple[str, ...]:
    return tuple(f"{action} {state.get('lastAction')!r}" for action, state in behaviour)


def simulate(
    model: Model, *, count: int, seed: int = 0, depth: int = 40, java: str = "java", max_walks: int = 0
) -> Simulation:
    """`count` distinct random behaviours of `model` (fewer if TLC's first `max_walks` walks hold fewer)."""
    if shutil.which(java) is None:
        raise TLCError(TLCErrorKind.SETUP, f"{java!r} not found: install a Java runtime (Java 11 or later)")
    max_walks = max_walks or 20 * count
    sim = Simulation(model.name, seed, depth)
    seen: set[tuple[str, ...]] = set()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tlc-sim-") as tmp:
        d = Path(tmp)
        shutil.copy(SPEC_DIR / model.spec, d / model.spec)
        (d / f"{WRAPPER}.tla").write_text(wrapper_module(model.spec, depth))
        (d / f"{WRAPPER}.cfg").write_text(simulation_config((SPEC_DIR / model.config).read_text()))
        cmd = [java, "-XX:+UseParallelGC", own_tmpdir(d), "-cp", str(tla2tools_jar()), "tlc2.TLC", "-tool", "-deadlock"]
        cmd += ["-simulate", "-depth", str(depth + 1), "-seed", str(seed), "-continue", "-workers", "1"]
        cmd += ["-metadir", str(d / "states"), f"{WRAPPER}.tla"]
        with subprocess.Popen(cmd, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            assert proc.stdout is not None
            try:
                for walk in _walks(iter(proc.stdout.readline, "")):
                    sim.walks += 1
                    key = _key(walk)
                    if key not in seen:
                        seen.add(key)
                        sim.behaviours.append(walk)
                    if len(sim.behaviours) >= count or sim.walks >= max_walks:
                        break
            finally:
                proc.kill()
                proc.stdout.close()
                proc.wait()
    if not sim.behaviours:
        raise TLCError(TLCErrorKind.EVALUATION, f"TLC's simulation of {model.name} printed no behaviour")
    sim.seconds = time.monotonic() - started
    return sim


@dataclass
class SimulationReplay:
    simulation: Simulation
    replays: list[TraceReplay]
    seconds: float

    @property
    def mismatches(self) -> list[TraceReplay]:
        return [r for r in self.replays if r.mismatch is not None]

    @property
    def steps(self) -> int:
        return sum(r.steps for r in self.replays)


def replay_simulation(
    mapping: Any, sim: Simulation, on_progress: Callable[[int, int], None] | None = None
) -> SimulationReplay:
    """Replay every behaviour; each must be followed to its end."""
    started = time.monotonic()
    replays = []
    for n, behaviour in enumerate(sim.behaviours, start=1):
        replays.append(replay_trace(mapping, sim.model, behaviour))
        if on_progress is not None and (n % 50 == 0 or n == len(sim.behaviours)):
            on_progress(n, len(sim.behaviours))
    return SimulationReplay(sim, replays, time.monotonic() - started)
