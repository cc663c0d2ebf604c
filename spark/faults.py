"""The nemesis's steps of a history (docs/history.md) and the fault intervals they make, for the HTML report.

The history's validator (spark/history.py) skips the nemesis's events; the report needs more of them: the node
each step names and the kind a heal undoes. A step is an event of process "nemesis" (type "info"):

- an injection: `f` is the fault kind, `value` the node it hit; with an `error` nothing was injected;
- a heal: `f` is "heal", `value` the node, `fault` the kind it undoes (absent when the nemesis brings a node
  back after an earlier heal failed, or at the end of the run: then it ends every fault open on that node);
  with an `error` the node stayed broken and its fault goes on;
- "stopped": the schedule ended early; it changes no interval.

A fault lasts from its injection to the first successful heal of its node and kind; one never healed lasts
until the end of the history.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from spark.history import NEMESIS, is_parquet, iter_events

HEAL, STOPPED = "heal", "stopped"


@dataclass(frozen=True)
class NemesisStep:
    index: int
    time: int
    f: str  # the fault kind, "heal" or "stopped"
    node: str  # the event's `value` ("-" when it names none)
    heals: str | None  # of a heal: the kind it undoes, None for "whatever is open on the node"
    error: str | None  # the step failed: nothing changed

    @property
    def injection(self) -> bool:
        return self.f not in (HEAL, STOPPED) and self.error is None


@dataclass(frozen=True)
class Fault:
    """One fault from its injection to its heal (or to the end of the history: `healed` is False)."""

    kind: str
    node: str
    start: int
    end: int
    healed: bool
    inject_index: int
    heal_index: int | None

    @property
    def duration(self) -> int:
        return self.end - self.start


def _text(raw: Any) -> str:
    if raw is None:
        return "-"
    return raw if isinstance(raw, str) else json.dumps(raw, sort_keys=True)


def steps_from_events(events: Iterable[dict[str, Any]]) -> list[NemesisStep]:
    """The nemesis's steps among the events (others are passed over), in history order."""
    steps: list[NemesisStep] = []
    for ev in events:
        if ev.get("process") != NEMESIS:
            continue
        index, time = ev.get("index"), ev.get("time")
        if type(index) is not int or type(time) is not int:
            continue  # the validator rejects such a history before a report is made
        heals = ev.get("fault")
        error = ev.get("error")
        steps.append(
            NemesisStep(
                index,
                time,
                str(ev.get("f")),
                _text(ev.get("value")),
                heals if isinstance(heals, str) else None,
                None if error is None else _text(error),
            )
        )
    steps.sort(key=lambda s: s.index)
    return steps


def read_steps(path: str) -> list[NemesisStep]:
    """The nemesis's steps of a history file. JSON Lines: only lines that mention the nemesis are parsed, so a
    history of millions of operations is scanned at the speed of the disk."""
    if is_parquet(path):
        return steps_from_events(ev for _, ev in iter_events(path))
    import orjson

    def events() -> Iterable[dict[str, Any]]:
        marker = NEMESIS.encode()
        with open(path, "rb") as fh:
            for raw in fh:
                if marker in raw:
                    try:
                        ev = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        ev = json.loads(raw.decode("utf-8"))
                    if isinstance(ev, dict):
                        yield ev

    return steps_from_events(events())


def intervals(steps: Sequence[NemesisStep], end: int) -> list[Fault]:
    """Pair each injection with the heal of its node and kind; `end` closes the faults never healed."""
    open_: dict[tuple[str, str], list[NemesisStep]] = {}
    faults: list[Fault] = []
    for s in steps:
        if s.injection:
            open_.setdefault((s.node, s.f), []).append(s)
        elif s.f == HEAL and s.error is None:
            keys = [(s.node, s.heals)] if s.heals is not None else [k for k in open_ if k[0] == s.node]
            for key in keys:
                for inj in open_.pop(key, []):
                    faults.append(Fault(inj.f, inj.node, inj.time, max(s.time, inj.time), True, inj.index, s.index))
    for waiting in open_.values():
        for inj in waiting:
            faults.append(Fault(inj.f, inj.node, inj.time, max(end, inj.time), False, inj.index, None))
    faults.sort(key=lambda f: (f.start, f.inject_index))
    return faults
