"""Tracing the protocol cores: the recorders a core reports its spec steps to.

A core reports each step it takes of a spec action (ledger.tla's `BookieHandles`, `WriterSendsAdd`,
`RecoveryCloses`, ...) as an event named after the action, with the parameters the spec needs, to a
`Tracer`: a callable `tracer(name, params)` that only records and never feeds anything back, so the
core stays pure. Each core instance is given its own tracer by its driver (`BookieCore(tracer=...)`,
through the bookie shell's `Bookie(tracer=...)`); a core given none traces nothing and computes
nothing for it. Two cores in one process therefore never share a trace unless their driver hands
them the same recorder, as conformance/trace_validation.py does to get one run's events in one order.
A real process (`pulsar-ref bookie --trace FILE`) gives its core a `TraceFile`, which appends each
event as one JSON line, numbered in emit order.

The BookKeeper client's cores (impl/bookie/client/: the writer, recovery and the client API) do not
take a tracer yet: they report to the process-wide hook `emit`, which listens while `tracing(recorder)`
(or `run_traced`, for a `--trace FILE` option) installs a recorder. A tracer per instance is to replace
it there too.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

Tracer = Callable[[str, dict[str, Any]], None]  # a recorder: tracer(event name, its parameters)

_tracer: Tracer | None = None  # the process-wide hook of the cores that take no tracer of their own


def emit(name: str, **params: Any) -> None:
    """Record one protocol event with the process-wide recorder, if one is installed."""
    if _tracer is not None:
        _tracer(name, params)


def active() -> bool:
    """True while a process-wide recorder listens: lets a core skip computing parameters nobody reads."""
    return _tracer is not None


@contextmanager
def tracing(tracer: Tracer) -> Iterator[None]:
    """Install `tracer` as the process-wide recorder for the duration of the block (not re-entrant: one
    recorder per run)."""
    global _tracer
    if _tracer is not None:
        raise RuntimeError("a tracer is already installed: one recorder per run")
    _tracer = tracer
    try:
        yield
    finally:
        _tracer = None


class TraceFile:
    """A recorder that appends `{"seq", "ns", "name", "params"}` JSON lines to a file, in emit order
    (`ns`: the wall clock, shared by the processes of one machine; a merger may use it to choose
    among orders its constraints allow, never as a constraint).

    Thread-safe: a core reports under its own lock (the bookie's core lock, a client driver's), so
    within one core the line order is the order of its steps. Each line is flushed at once, so a
    SIGKILLed process leaves every event it emitted. Opened for appending: a restarted process
    continues the same file (`seq` starts again at 0 after a `TraceFileOpened` line).
    """

    def __init__(self, path: str | Path, **context: Any) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._file: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())
        self.write("TraceFileOpened", dict(context))

    def __call__(self, name: str, params: dict[str, Any]) -> None:
        self.write(name, params)

    def write(self, name: str, params: dict[str, Any]) -> None:
        """One line (also for records of the driver itself, e.g. which ledger a client created)."""
        with self._lock:
            record = {"seq": self._seq, "ns": time.time_ns(), "name": name, "params": params}
            line = json.dumps(record, default=str)
            self._seq += 1
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def run_traced(path: str | Path | None, role: str, run: Callable[[], int]) -> int:
    """`run()`, with every event emitted meanwhile appended to `path` (a `--trace FILE` option); untraced if None."""
    if not path:
        return run()
    recorder = TraceFile(path, role=role)
    try:
        with tracing(recorder):
            return run()
    finally:
        recorder.close()
