"""One real-process run: a writer and a recovery client racing on one ledger of a ProcessCluster.

`run_once` starts the two client processes (conformance/process_clients.py) against the cluster's
bookies, lets them race (or phases them, with a bookie restart between the writer's phases), and
keeps the clients' trace files; `collect`, once the bookies stopped, gives every run the bookies'
logs. A `ProcessRun` holds everything conformance/linearization.py needs to merge the run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conformance.linearization import RECOVERER, WRITER, Linearization, linearize
from conformance.process_cluster import ChildProcess, ProcessCluster
from conformance.trace_files import Record, read_log
from conformance.trace_validation import Event, Run, RunConfig


@dataclass
class ProcessRun:
    """One run's logs: which ledger, its ensemble (spec names), every process's records."""

    config: RunConfig
    seed: int
    ledger_id: int
    ensemble: tuple[str, ...]
    bookie_logs: dict[str, list[Record]]
    client_logs: dict[str, list[Record]]
    names: dict[str, str]  # real bookie id -> spec name
    writer_output: str = ""
    recovery_output: str = ""
    restarts: dict[str, list[int]] = field(default_factory=dict)  # bookie -> lines where a restart began

    def linearize(self, *, relaxed: bool = False) -> Linearization:
        return linearize(
            self.bookie_logs, self.client_logs, self.ledger_id, self.names, relaxed=relaxed, restarts=self.restarts
        )

    def as_run(self, events: list[Event]) -> Run:
        return Run(self.config, self.seed, self.ensemble, events)


def _client(cluster: ProcessCluster, role: str, trace: Path, *options: str) -> ChildProcess:
    args = ["-m", "conformance.process_clients", role, "--metadata", cluster.metadata, "--trace", str(trace), *options]
    return ChildProcess(args, trace.with_suffix(".stderr"))


def run_once(
    cluster: ProcessCluster, config: RunConfig, seed: int, *, fence_after: int | None = None, restart: bool = False
) -> ProcessRun:
    """One run on `cluster`: a writer adds `config.entries` entries, a recovery client opens the ledger.

    Random (by `seed`): the writer and the recovery start together; the writer pauses up to 40 ms
    between adds, the recovery waits up to 60 ms before opening, so the fence lands anywhere among
    the adds. `fence_after=k`: the writer adds k entries and waits for them, the recovery runs to the
    end, then the writer adds the rest (which the fenced bookies refuse). `restart` (with
    `fence_after`): once the first adds are answered, a bookie of the ensemble (by `seed`) is SIGKILLed
    and started again before the recovery. Bookie logs are read by `collect` once the bookies stopped
    (a request may be handled after its client exited)."""
    if restart and fence_after is None:
        raise ValueError("a restart needs fence_after: the bookie is killed between the writer's phases")
    rng = random.Random(seed)
    d = cluster.directory / f"run-{config.name}-{seed}"
    d.mkdir()
    e, qw, qa = config.quorums
    writer = _client(
        cluster, "writer", d / "w.trace.jsonl",
        "--quorums", f"{e},{qw},{qa}", "--entries", str(config.entries), "--seed", str(seed),
        "--fence-after", str(-1 if fence_after is None else fence_after),
    )  # fmt: skip
    recovery = _client(cluster, "recover", d / "r1.trace.jsonl", "--seed", str(seed))
    restarts: dict[str, list[int]] = {}
    try:
        created = writer.line(60, "writer: create the ledger")
        ledger_id = int(created.split()[1])
        recovery.line(60, "recovery client: start")  # "ready": both processes have imported everything
        if fence_after is None:
            recovery.tell(f"{ledger_id} {rng.uniform(0, 0.06):.3f}")
            writer.tell("go")
        else:
            writer.tell("go")
            writer.line(60, "writer: first adds")  # "paused"
            if restart:
                time.sleep(0.3)  # the answers beyond Qa too: nothing in flight when the bookie dies
                ensemble = next(r for r in read_log(d / "w.trace.jsonl") if r["name"] == "LedgerCreated")
                victim = cluster.names[rng.choice(ensemble["params"]["ensemble"])]
                restarts[victim] = [cluster.restart(victim)]
            recovery.tell(f"{ledger_id} 0")
            recovery_out = recovery.line(60, "recovery client: recover")
            writer.tell("go")
        writer_out = writer.line(60, "writer: adds")
        if fence_after is None:
            recovery_out = recovery.line(60, "recovery client: recover")
        if writer.wait(30) != 0 or recovery.wait(30) != 0:
            raise RuntimeError(f"a client failed: see {d}/*.stderr")
    finally:
        writer.stop()
        recovery.stop()
    clients = {WRITER: read_log(d / "w.trace.jsonl"), RECOVERER: read_log(d / "r1.trace.jsonl")}
    run = ProcessRun(config, seed, ledger_id, (), {}, clients, dict(cluster.names), writer_out, recovery_out)
    run.restarts = restarts
    return run


def collect(cluster: ProcessCluster, runs: Sequence[ProcessRun]) -> None:
    """After `cluster.stop()`: give each run the bookie logs and its ensemble in spec names."""
    logs = {name: read_log(cluster.log(name)) for name in cluster.bookies}
    for run in runs:
        run.bookie_logs = logs
        created = next(r for r in run.client_logs[WRITER] if r["name"] == "LedgerCreated")
        run.ensemble = tuple(cluster.names[b] for b in created["params"]["ensemble"])
