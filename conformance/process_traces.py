"""Trace validation of real-process runs: does ledger.tla admit what real bookies and clients did?

conformance/trace_validation.py checks deterministic runs, where one scheduler orders every
step. Here the runs are real: three `pulsar-ref bookie` processes on 127.0.0.1
(conformance/process_cluster.py), and per run a writer process that creates a ledger and adds a
few entries through the BookKeeper client (gRPC) and a recovery process, a second client, that
opens the ledger with recovery while the writer may still be adding (conformance/process_runs.py,
conformance/process_clients.py). No process sees a global order, so each records its own: its cores
are handed an impl/trace.py `TraceFile` (conformance/trace_files.py); conformance/linearization.py
merges a run's logs into one sequence of ledger.tla steps, and TLC checks it here (`check_runs`,
one TLC run per configuration), with a verdict per run and a summary (`summary`).

`validate_process_runs` does it all: the runs on one set of bookies, then their verdicts
(`pulsar-ref conform --real-processes N`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conformance.linearization import CycleError, MergeError
from conformance.process_cluster import process_cluster
from conformance.process_runs import ProcessRun, collect, run_once
from conformance.trace_validation import Run, RunConfig, Verdict, check_traces

CONFIGS = (
    RunConfig("process-e3-qw3-qa2", 3, (3, 3, 2), entries=3, recoverers=1),
    RunConfig("process-e2-qw2-qa2", 3, (2, 2, 2), entries=3, recoverers=1),
)


@dataclass
class ProcessVerdict:
    run: ProcessRun
    verdict: Verdict | None  # None: the logs could not be merged (see error)
    error: str = ""  # why the logs could not be merged, or (with `lost`) the cycle in the processes' orders
    lost: list[str] = field(default_factory=list)  # ignored answers taken as lost replies to break the cycle

    @property
    def accepted(self) -> bool:
        """TLC matched every step (in the processes' orders, or with `lost` replies)."""
        return self.verdict is not None and self.verdict.accepted

    @property
    def in_order(self) -> bool:
        return self.accepted and not self.lost

    def describe(self) -> str:
        head = f"{self.run.config.name} seed {self.run.seed} (ledger {self.run.ledger_id})"
        if self.verdict is None:
            return f"{head}: {self.error}"
        text = self.verdict.describe().replace(f"{self.run.config.name} seed {self.run.seed}", head, 1)
        if self.lost:
            text += (
                "; NOT in the processes' orders, which form a cycle (atomic delivery cannot order them; "
                "spec/conformance.md, trace validation): answers the client ignored taken as lost replies: "
                + "; ".join(self.lost)
            )
        return text


def check_runs(runs: Sequence[ProcessRun], *, relaxed: bool = True) -> list[ProcessVerdict]:
    """Merge each run's logs and check the merged traces with TLC (one TLC run per configuration).

    A run whose logs form a cycle is reported as such; with `relaxed` it is checked with the ignored
    answers on the cycle taken as lost replies (`linearize`), and its verdict says so."""
    out: list[ProcessVerdict] = []
    todo: dict[RunConfig, list[tuple[ProcessRun, Run, str, list[str]]]] = {}
    for r in runs:
        try:
            try:
                lin, cycle = r.linearize(), ""
            except CycleError as exc:
                if not relaxed:
                    raise
                lin, cycle = r.linearize(relaxed=True), str(exc)
        except MergeError as exc:
            out.append(ProcessVerdict(r, None, str(exc)))
            continue
        todo.setdefault(r.config, []).append((r, r.as_run(lin.events), cycle, lin.lost))
    for config, group in todo.items():
        verdicts, _ = check_traces(config, [run for _, run, _, _ in group])
        out += [ProcessVerdict(r, v, c, lost) for (r, _, c, lost), v in zip(group, verdicts, strict=True)]
    order = {id(r): i for i, r in enumerate(runs)}
    return sorted(out, key=lambda v: order[id(v.run)])


def summary(verdicts: Sequence[ProcessVerdict], seconds: float) -> str:
    """One line per run, then the totals."""
    lines = [v.describe() for v in verdicts]
    in_order = sum(v.in_order for v in verdicts)
    relaxed = sum(v.accepted and not v.in_order for v in verdicts)
    rejected = sum(v.verdict is not None and not v.accepted for v in verdicts)
    unmerged = sum(v.verdict is None for v in verdicts)
    steps = sum(len(v.verdict.steps) for v in verdicts if v.verdict is not None)
    lines.append(
        f"{in_order}/{len(verdicts)} real-process runs accepted by ledger.tla in the processes' own orders, "
        f"{relaxed} only with ignored answers taken as lost replies, {rejected} rejected, {unmerged} not mergeable "
        f"({steps:,} steps; {seconds:.1f}s)"
    )
    return "\n".join(lines)


def validate_process_runs(
    count: int,
    *,
    seed: int = 0,
    configs: Sequence[RunConfig] = CONFIGS,
    directory: Path | None = None,
    on_run: Callable[[ProcessRun], None] | None = None,
    restart_every: int = 0,
) -> list[ProcessVerdict]:
    """`count` real-process runs (configurations alternate, seeds seed, seed+1, ...) on one set of
    bookie processes, each on its own ledger; then every run's logs merged and checked by TLC.
    `restart_every=k`: every k-th run is phased with a bookie SIGKILL and restart (`run_once`)."""
    runs: list[ProcessRun] = []
    with process_cluster(directory) as cluster:
        for k in range(count):
            restart = restart_every > 0 and k % restart_every == restart_every - 1
            config = configs[k % len(configs)]
            run = run_once(cluster, config, seed + k, fence_after=1 if restart else None, restart=restart)
            runs.append(run)
            if on_run is not None:
                on_run(run)
        cluster.stop()
        collect(cluster, runs)
    return check_runs(runs)
