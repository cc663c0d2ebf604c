"""The one tracing hook of the protocol cores: `emit(name, **params)`.

The cores call `emit` at the points where they take a step of a spec action (ledger.tla's
`WriterSendsAdd`, `RecoveryCloses`, ...), naming the action and the parameters the spec
needs. By default nothing listens and `emit` returns at once (one global read), so the cores
stay fast and pure: the hook only hands the event to a recorder, it never feeds anything
back. A driver that wants a trace (conformance/trace_validation.py) installs a recorder
with `tracing(recorder)` around a deterministic run and checks the sequence against the spec.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Tracer = Callable[[str, dict[str, Any]], None]

_tracer: Tracer | None = None


def emit(name: str, **params: Any) -> None:
    """Record one protocol event, if a recorder is installed."""
    if _tracer is not None:
        _tracer(name, params)


def active() -> bool:
    """True while a recorder listens: lets a core skip computing parameters nobody reads."""
    return _tracer is not None


@contextmanager
def tracing(tracer: Tracer) -> Iterator[None]:
    """Install `tracer` for the duration of the block (not re-entrant: one recorder per run)."""
    global _tracer
    if _tracer is not None:
        raise RuntimeError("a tracer is already installed: one recorder per run")
    _tracer = tracer
    try:
        yield
    finally:
        _tracer = None
