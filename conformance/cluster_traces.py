"""Trace validation of broker cluster runs: does ledger.tla admit every ledger the brokers wrote?

A cluster run (`run_cluster`, `pulsar-ref conform --cluster-run`) is `pulsar-ref cluster up` with
`--trace-dir`: real ZooKeeper, bookie and broker processes on 127.0.0.1, each appending its protocol
events to TRACE_DIR/<node>.trace.jsonl (an impl/trace.py `TraceFile` handed to its cores; a
restarted node continues its file after a `TraceFileOpened` line), and `pulsar-ref workload` on it.
Brokers own topics and write managed ledgers through their BookKeeper clients: they create ledgers,
add, roll over (the writer's close), and when a topic moves (a broker killed, its session expired)
the new owner recovers (fences and closes) the previous owner's last ledger.

`split` cuts the logs per ledger: a broker's client events name their ledger (`ledger`), the
bookies' `BookieHandles` too. A ledger's writer (`w`) is the broker process that created it
(`LedgerCreated`: its first ensemble and quorums), its recovery client (`r1`) the broker process
whose `Recovery*` events name it. Each ledger then goes through conformance/linearization.py's merger
(`linearize`: each bookie's handling order, each client's order, the store's version order for
the conditional writes of different clients) and trace_validation's `check_traces` (one TLC run
per batch of ledgers with the same quorums).

Beyond the real-process runs' merge: a writer's ensemble change (a bookie died or stopped
answering) needs the requests it timed out on out of flight; those no bookie logged become
ledger.tla's `MessageLost` before the change (linearization's `_lost_requests`), and the
replacement's copies count as sent by the change. A bookie restart after the ledger's creation
becomes `BookieCrashes` (its state: what the new process replayed of the ledger; traced bookies
never checkpoint, so that is their whole journal) and `BookieRestarts`; an add it handled but had
not made durable, and never answered, is ledger.tla's lost request (a crash before the fsync) and
its handling is dropped.

Classified "not checkable", with the reason, neither accepted nor rejected: what the merge cannot
order or ledger.tla's reductions exclude: recovery by more than one process or more than one
attempt (retries), a recovery write-back's ensemble change, a request handled twice by one bookie,
a fence handled but not replayed after a crash, and logs that cannot be merged for another reason
(the message says which).
"""

from __future__ import annotations

import heapq
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.linearization import RECOVERER, WRITER, CycleError, Linearization, MergeError, linearize
from conformance.trace_files import Record, read_log
from conformance.trace_validation import Run, RunConfig, Verdict, check_traces

BATCH = 40  # ledgers per TLC run (the JVM's start dominates)
_UNORDERED = {"RecoveryChangesEnsemble": "recovery write-back ensemble change"}


@dataclass
class LedgerTrace:
    """One ledger's share of a cluster run's logs."""

    ledger_id: int
    writer: str  # the broker process that created it ("broker-1#0": node, incarnation)
    quorums: tuple[int, int, int]
    ensemble: tuple[str, ...]  # spec names
    bookie_logs: dict[str, list[Record]]  # spec name -> the bookie's whole log
    client_logs: dict[str, list[Record]]  # "w" / "r1" -> that process's records of this ledger
    names: dict[str, str]  # bookie address -> spec name
    recoverers: list[str] = field(default_factory=list)  # broker processes with recovery events of it
    restarts: dict[str, list[int]] = field(default_factory=dict)  # bookie -> lines of its log where it restarted
    reason: str = ""  # why it is not checkable ("" = checkable)

    def events_of(self, client: str) -> list[Record]:
        return self.client_logs.get(client, [])


@dataclass
class LedgerVerdict:
    ledger: LedgerTrace
    verdict: Verdict | None = None  # None: not checked (see `not_checkable`)
    not_checkable: str = ""
    lost: list[str] = field(default_factory=list)  # ignored answers taken as lost replies (a cycle)

    @property
    def accepted(self) -> bool:
        return self.verdict is not None and self.verdict.accepted

    @property
    def rejected(self) -> bool:
        return self.verdict is not None and not self.verdict.accepted

    def describe(self) -> str:
        t = self.ledger
        who = t.writer + (f", recovered by {', '.join(t.recoverers)}" if t.recoverers else "")
        head = f"ledger {t.ledger_id} ({who})"
        if self.verdict is None:
            return f"{head}: not checkable: {self.not_checkable}"
        v = self.verdict
        if v.accepted:
            text = f"{head}: accepted ({len(v.steps)} steps)"
        elif v.reached < 0:
            text = f"{head}: rejected at the initial state (ensemble {t.ensemble})"
        else:
            s = v.steps[v.reached]
            text = f"{head}: rejected at step {v.reached + 1}/{len(v.steps)}: {s.name} {s.params} state {s.state}"
        if self.lost:
            text += "; NOT in the processes' orders (a cycle): ignored answers taken as lost replies: " + "; ".join(
                self.lost
            )
        return text


# ---- reading and splitting the logs ---------------------------------------------------------------


def load_nodes(trace_dir: Path) -> dict[str, str]:
    """node name -> address, as `Cluster.plan(trace_dir=...)` wrote them."""
    return dict(json.loads((trace_dir / "nodes.json").read_text()))


def spec_name(node: str) -> str:
    """bookie-3 -> b3 (ledger.tla's bookie names)."""
    return "b" + node.rsplit("-", 1)[1]


def split(trace_dir: Path) -> list[LedgerTrace]:
    """Every ledger some broker created in the logs of `trace_dir`, with its share of the logs."""
    nodes = load_nodes(trace_dir)
    names = {address: spec_name(node) for node, address in nodes.items() if node.startswith("bookie-")}
    bookie_logs = {
        spec_name(node): _by_ledger(read_log(trace_dir / f"{node}.trace.jsonl"))
        for node in nodes
        if node.startswith("bookie-")
    }
    created: dict[int, tuple[str, Record]] = {}
    by_ledger: dict[int, dict[str, list[Record]]] = {}  # ledger -> process -> its records of the ledger
    for node in sorted(n for n in nodes if n.startswith("broker-")):
        incarnation = -1
        for r in read_log(trace_dir / f"{node}.trace.jsonl"):
            if r["name"] == "TraceFileOpened":
                incarnation += 1
                continue
            ledger = r["params"].get("ledger")
            if ledger is None:
                continue
            process = f"{node}#{incarnation}"
            if r["name"] == "LedgerCreated":
                created[ledger] = (process, r)
            by_ledger.setdefault(ledger, {}).setdefault(process, []).append(r)
    out = []
    for ledger, (process, record) in sorted(created.items()):
        p = record["params"]
        quorums = (p["quorums"][0], p["quorums"][1], p["quorums"][2])
        ensemble = tuple(names.get(b, b) for b in p["ensemble"])
        logs = by_ledger.get(ledger, {})
        writer = [r for r in logs.get(process, []) if not r["name"].startswith("Recovery")]
        recoverers = sorted(q for q, rs in logs.items() if any(r["name"].startswith("Recovery") for r in rs))
        mine = {b: logs_of(ledger) for b, logs_of in bookie_logs.items()}
        trace = LedgerTrace(ledger, process, quorums, ensemble, mine, {WRITER: writer}, names, recoverers)
        if len(recoverers) == 1:
            trace.client_logs[RECOVERER] = [r for r in logs[recoverers[0]] if r["name"].startswith("Recovery")]
        trace.reason = _unchecked(trace, logs) or _crashes(trace, record["ns"])
        out.append(trace)
    return out


def _by_ledger(log: list[Record]) -> Callable[[int], list[Record]]:
    """A bookie's log cut per ledger: ledger -> its records, with every process start (`TraceFileOpened`)
    kept in place (the merger tells restarts from them)."""
    opened = [(k, r) for k, r in enumerate(log) if r["name"] == "TraceFileOpened"]
    per: dict[int, list[tuple[int, Record]]] = {}
    for k, r in enumerate(log):
        ledger = r["params"].get("ledger")
        if ledger is not None:
            per.setdefault(ledger, []).append((k, r))
    return lambda ledger: [r for _, r in heapq.merge(opened, per.get(ledger, []), key=lambda kr: kr[0])]


def _crashes(trace: LedgerTrace, created_ns: int) -> str:
    """Name the bookies' restarts after the ledger was created (`LedgerTrace.restarts`: the merger
    puts ledger.tla's BookieCrashes and BookieRestarts there, the crash's state being what the new
    process replayed of the ledger). A SIGKILL loses what the bookie handled but had not yet made
    durable, and no reply went out for it: ledger.tla's reduction takes such an add as a lost request,
    so its handling is dropped from the log (and the entry from what the bookie held after it until
    the crash). One that was answered stays: TLC then rejects the crash. Returns why the ledger is not
    checkable ("" if it is): a fence handled but not replayed (not modelled as a lost request here)."""
    answered = {
        (trace.names.get(r["params"]["bookie"], r["params"]["bookie"]), r["params"]["entry"])
        for client in (WRITER, RECOVERER)
        for r in trace.events_of(client)
        if r["name"] in ("WriterReceivesAddResponse", "RecoveryReceivesAddResponse")
    }
    for bookie, log in trace.bookie_logs.items():
        starts = [k for k, r in enumerate(log) if k > 0 and r["name"] == "TraceFileOpened" and r["ns"] > created_ns]
        if not starts:
            continue
        kept: list[Record] = []
        since = 0  # where the current process's records begin in `kept`
        for k, r in enumerate(log):
            if k not in starts:
                kept.append(r)
                continue
            fence = any(x["params"]["kind"] == "FENCE" for x in _replays(log, k))
            entries = {x["params"]["entry"] for x in _replays(log, k) if x["params"]["kind"] == "ENTRY"}
            lost: set[int] = set()
            for n in range(since, len(kept)):
                h = kept[n]
                if h["name"] != "BookieHandles":
                    continue
                p = h["params"]
                durable = p["entry"] in entries or p["entry"] in lost
                if p["kind"] in ("add", "recoveryAdd") and not durable and (bookie, p["entry"]) not in answered:
                    lost.add(p["entry"])
                    kept[n] = {}  # dropped below
                    continue
                if p["fenced"] and not fence:
                    return f"bookie {bookie} handled a fence of the ledger that its restart did not replay"
                if lost & set(p["entries"]):
                    kept[n] = {**h, "params": {**p, "entries": [x for x in p["entries"] if x not in lost]}}
            kept = [x for x in kept if x]
            trace.restarts.setdefault(bookie, []).append(len(kept))
            kept.append(r)
            since = len(kept)
        trace.bookie_logs[bookie] = kept
    return ""


def _replays(log: list[Record], start: int) -> list[Record]:
    """The journal records a process replayed of the ledger: from its start to its next process start."""
    out = []
    for r in log[start + 1 :]:
        if r["name"] == "TraceFileOpened":
            break
        if r["name"] == "BookieReplays":
            out.append(r)
    return out


def _unchecked(trace: LedgerTrace, logs: dict[str, list[Record]]) -> str:
    """Why the merge cannot order this ledger's steps, or ledger.tla's reductions exclude them ("": none)."""
    foreign = [q for q, rs in logs.items() if q != trace.writer and any(r["name"].startswith("Writer") for r in rs)]
    if foreign:
        return f"writer events from a process other than its creator: {', '.join(foreign)}"
    if len(trace.recoverers) > 1:
        return f"recovered by {len(trace.recoverers)} processes ({', '.join(trace.recoverers)}): one recovery client"
    starts = sum(r["name"] == "RecoveryStarts" for r in trace.events_of(RECOVERER))
    if starts > 1:
        return f"{starts} recovery attempts (retries): the merge pairs the fencing reads with one attempt"
    for client in (WRITER, RECOVERER):
        changes = Counter(r["name"] for r in trace.events_of(client) if r["name"] in _UNORDERED)
        if changes:
            what = ", ".join(f"{n} {_UNORDERED[name]}(s)" for name, n in changes.items())
            return (
                f"{what}: the requests the client timed out on are in no log (which were lost, and when, "
                "is not recorded), so the spec's lost-request steps cannot be placed"
            )
    pushed = -1
    for r in trace.events_of(WRITER):
        if r["name"] == "WriterSendsAdd":
            pushed = r["params"]["entry"]
        if r["name"] == "WriterChangesEnsemble" and pushed < r["params"]["first"]:
            return (
                "an ensemble change with no entry pending (ledger.tla's writer times out only entries short of "
                f"Qa acks, its delayed-ensemble-change reduction): bookie {trace.names.get(r['params']['failed'])} "
                "failed on an add that reached Qa acks from the others before the replacement was chosen; the "
                f"change, decided already, still went ahead, at entry {r['params']['first']}"
            )
    handled: Counter[tuple[str, str, int]] = Counter()
    for bookie, records in trace.bookie_logs.items():
        for r in records:
            p = r["params"]
            if r["name"] == "BookieHandles" and p["ledger"] == trace.ledger_id:
                if p.get("fence") is False and p["kind"] in ("read", "readLac"):
                    continue
                handled[(bookie, p["kind"], p["entry"])] += 1
    twice = sorted(k for k, n in handled.items() if n > 1)
    if twice:
        bookie, kind, entry = twice[0]
        return (
            f"a request handled twice by one bookie ({kind} of entry {entry} at {bookie}, {len(twice)} such): "
            "answers are paired with handlings first-come"
        )
    return ""


# ---- checking ------------------------------------------------------------------------------------


def config_for(traces: Sequence[LedgerTrace], bookies: int) -> RunConfig:
    """The trace module's constants for ledgers of one quorum configuration."""
    e, qw, qa = traces[0].quorums
    entries = 1
    for t in traces:
        for records in t.client_logs.values():
            for r in records:
                entry = r["params"].get("entry")
                if isinstance(entry, int):
                    entries = max(entries, entry + 1)
    return RunConfig(f"cluster-e{e}-qw{qw}-qa{qa}", bookies, (e, qw, qa), entries=entries, recoverers=1)


def check_ledgers(
    traces: Sequence[LedgerTrace],
    *,
    batch: int = BATCH,
    on_verdict: Callable[[LedgerVerdict], None] | None = None,
) -> list[LedgerVerdict]:
    """Merge each checkable ledger's logs and check them with TLC, `batch` ledgers per TLC run."""
    out: list[LedgerVerdict] = []
    todo: dict[tuple[int, int, int], list[tuple[LedgerTrace, Linearization]]] = {}

    def done(v: LedgerVerdict) -> None:
        out.append(v)
        if on_verdict is not None:
            on_verdict(v)

    for t in traces:
        if t.reason:
            done(LedgerVerdict(t, not_checkable=t.reason))
            continue
        try:
            try:
                lin = linearize(t.bookie_logs, t.client_logs, t.ledger_id, t.names, restarts=t.restarts)
            except CycleError:
                lin = linearize(t.bookie_logs, t.client_logs, t.ledger_id, t.names, relaxed=True, restarts=t.restarts)
        except MergeError as exc:
            done(LedgerVerdict(t, not_checkable=f"logs not mergeable: {exc}"))
            continue
        todo.setdefault(t.quorums, []).append((t, lin))
    bookies = max((len(t.bookie_logs) for t in traces), default=0)
    for group in todo.values():
        for start in range(0, len(group), batch):
            chunk = group[start : start + batch]
            config = config_for([t for t, _ in chunk], bookies)
            runs = [Run(config, t.ledger_id, t.ensemble, lin.events) for t, lin in chunk]
            verdicts, _ = check_traces(config, runs)
            for (t, lin), v in zip(chunk, verdicts, strict=True):
                done(LedgerVerdict(t, v, lost=lin.lost))
    order = {id(t): i for i, t in enumerate(traces)}
    return sorted(out, key=lambda v: order[id(v.ledger)])


def check_dir(
    trace_dir: Path, *, on_verdict: Callable[[LedgerVerdict], None] | None = None
) -> tuple[list[LedgerVerdict], float]:
    """Split the logs of `trace_dir` per ledger and check every ledger; (verdicts, seconds)."""
    started = time.monotonic()
    verdicts = check_ledgers(split(trace_dir), on_verdict=on_verdict)
    return verdicts, time.monotonic() - started


def summary(verdicts: Sequence[LedgerVerdict], seconds: float) -> str:
    """The rejections and the not checkable reasons, then the totals."""
    lines = [v.describe() for v in verdicts if v.rejected]
    accepted = [v for v in verdicts if v.accepted]
    relaxed = sum(bool(v.lost) for v in accepted)
    rejected = sum(v.rejected for v in verdicts)
    unchecked = Counter(_reason_kind(v.not_checkable) for v in verdicts if v.verdict is None)
    steps = sum(len(v.verdict.steps) for v in verdicts if v.verdict is not None)
    recovered = [v.ledger for v in accepted if v.ledger.recoverers]
    moved = sum(t.recoverers != [t.writer] for t in recovered)
    changed = sum(any(s.name == "WriterChangesEnsemble" for s in v.verdict.steps) for v in accepted)  # type: ignore[union-attr]
    crashed = sum(any(s.name == "BookieCrashes" for s in v.verdict.steps) for v in accepted)  # type: ignore[union-attr]
    lines.append(
        f"{len(verdicts)} ledgers seen: {len(accepted)} accepted by ledger.tla ({len(recovered)} of them recovered, "
        f"{moved} by another broker process than their writer; {changed} with a writer ensemble change; {crashed} "
        f"with a bookie crash; {relaxed} only with ignored answers taken as lost replies), {rejected} rejected, "
        f"{sum(unchecked.values())} not checkable ({steps:,} steps; {seconds:.1f}s)"
    )
    lines += [f"  not checkable, {n}: {reason}" for reason, n in unchecked.most_common()]
    return "\n".join(lines)


def _reason_kind(reason: str) -> str:
    """A reason without its particulars (for counting): the text before the first colon."""
    return reason.split(":", 1)[0]


# ---- a cluster run --------------------------------------------------------------------------------


@dataclass
class ClusterRun:
    trace_dir: Path
    history: Path
    summary: Any  # impl.workload.run.Summary
    seconds: float


def run_cluster(
    directory: Path | None = None,
    *,
    duration_s: float = 30.0,
    seed: int = 0,
    bookies: int = 3,
    brokers: int = 2,
    quorums: tuple[int, int, int] = (2, 2, 2),
    entries_per_ledger: int = 8,
    nemesis: str = "kill-bookie,kill-broker,expire-session",
    nemesis_interval_s: float = 5.0,
    progress: Callable[[str], None] = lambda _: None,
) -> ClusterRun:
    """`pulsar-ref cluster up` with every bookie and broker tracing, a workload of `duration_s` seconds
    with a nemesis (a killed bookie makes writers change ensembles; a killed broker or an expired
    session moves topics, and the new owner recovers their last ledgers), then `cluster down`. Small
    ledgers (`entries_per_ledger`) so brokers roll over often."""
    from impl.cluster.deployment import Cluster
    from impl.workload.history import HistoryWriter
    from impl.workload.nemesis import Nemesis
    from impl.workload.run import Workload, WorkloadConfig

    started = time.monotonic()
    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="cluster-traces-"))
    trace_dir = directory / "traces"
    e, qw, qa = quorums
    options: tuple[str, ...] = ("--ensemble", str(e), "--write-quorum", str(qw), "--ack-quorum", str(qa))
    options = (*options, "--max-entries-per-ledger", str(entries_per_ledger))
    cluster = Cluster.plan(
        directory / "cluster", 1, bookies, brokers, die_with_parent=True, broker_options=options, trace_dir=trace_dir
    )
    rate = 40.0
    history_path = directory / "history.jsonl"
    try:
        cluster.up(90.0, progress)
        assert cluster.pulsar_service_url is not None
        config = WorkloadConfig(
            service=cluster.pulsar_service_url,
            admin_url=cluster.admin_url,
            out=history_path,
            topics=2,
            partitions=2,
            processes=4,
            ops=int(duration_s * rate),
            rate=rate,
            seed=seed,
            final_read_timeout_s=60.0,
        )
        history = HistoryWriter(history_path)
        try:
            faults = [f for f in nemesis.split(",") if f]
            chaos = Nemesis(cluster, faults, nemesis_interval_s, history, seed, cycle=True) if faults else None
            result = Workload(config, chaos, history).run(progress)
        finally:
            history.close()
    finally:
        progress("stopping the cluster ...")
        cluster.down(progress)
    return ClusterRun(trace_dir, history_path, result, time.monotonic() - started)
