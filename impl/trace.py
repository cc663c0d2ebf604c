"""Tracing the protocol cores: the recorders a core reports its spec steps to.

A core reports each step it takes of a spec action (ledger.tla's `BookieHandles`, `WriterSendsAdd`,
`RecoveryCloses`, ...) as an event named after the action, with the parameters the spec needs, to a
`Tracer`: a callable `tracer(name, params)` that only records and never feeds anything back, so the
core stays pure. Each core instance is given its own tracer by its driver: `BookieCore(tracer=...)`
(through the bookie shell's `Bookie(tracer=...)`), `LedgerWriter(tracer=...)` and
`RecoveryOp(tracer=...)` (which hands its tracer to its write-back writer), through the BookKeeper
client's `BookKeeperClient(tracer=...)` / `connect_bookkeeper(tracer=...)`, which gives it to every
writer and recovery op it creates. A core given none traces nothing and computes nothing for it.
There is no process-wide recorder: two cores in one process never share a trace unless their driver
hands them the same recorder, as conformance/trace_validation.py does to get one run's events in one
order. A real process (`pulsar-ref bookie --trace FILE`, `pulsar-ref broker --trace FILE`, the client
processes of conformance/process_clients.py) gives its cores a `TraceFile`, which appends each event
as one JSON line, numbered in the order recorded.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

Tracer = Callable[[str, dict[str, Any]], None]  # a recorder: tracer(event name, its parameters)


class TraceFile:
    """A recorder that appends `{"seq", "ns", "name", "params"}` JSON lines to a file, in the order recorded
    (`ns`: the wall clock, shared by the processes of one machine; a merger may use it to choose
    among orders its constraints allow, never as a constraint).

    Thread-safe: a core reports under its own lock (the bookie's core lock, a client driver's), so
    within one core the line order is the order of its steps. Each line is flushed at once, so a
    SIGKILLed process leaves every event it recorded. Opened for appending: a restarted process
    continues the same file (`seq` starts again at 0 after a `TraceFileOpened` line). Once closed it
    records nothing more: a core still stepping while its process shuts down (an answer arriving
    after the run) does not fail on the closed file.
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
            if self._file.closed:
                return
            record = {"seq": self._seq, "ns": time.time_ns(), "name": name, "params": params}
            line = json.dumps(record, default=str)
            self._seq += 1
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()
