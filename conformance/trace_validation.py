"""Trace validation, implementation -> spec: does ledger.tla admit what the cores did?

The reverse of the model-based replay (conformance/replay.py): here the *implementation*
leads. A seeded scheduler (`simulate`) plays the environment of one ledger over the
conformance cluster's simulated network, disk and metadata store (LedgerCluster): it picks
which message to deliver, lose or drop, which bookie crashes or restarts, when the writer
adds, times out or closes, when recovery clients start, time out, abort or close. The cores
report what they did to the tracer (impl/trace.py) the cluster hands each of them, one recorder
for the run (`_Recorder`), so its events are in one order: the writer and the recovery op
one event per ledger.tla action they take, with its parameters and their state after it; the
bookie core what it holds of the ledger after each request (`BookieHandles`) and each journal
record it applies at a restart (`BookieReplays`). The scheduler records the environment's
events (losses, crashes, restarts) with the same recorder.

`to_tla` writes the events as a TLA+ module: a `TraceSpec` that EXTENDS ledger, with a
variable `l` for the position in the trace and `t` for which trace (several traces per TLC
run: the JVM's start dominates). Each step is `l' = l + 1` /\\ ledger.tla's action with the
event's parameters (TLC picks the message) /\\ `lastAction'` equal to the event's
parameters /\\ the spec's state equal to the logged values (wLac, wState, rPhase, rNext, rTried, rEnd,
rWbLac, and the entries and fenced flag of the bookie involved). TLC explores every way to
match; `-dump` lists the states reached (run_tlc keeps no PrintT output), and the furthest `l`
of each trace gives the verdict: accepted, or the first event no behaviour can match.

Every event is a ledger.tla action: no step is admitted outside the spec. (Until the spec and
the cores were made to agree on BookKeeper's behaviour, three were: recovery's "anchor read" of
its start entry, the writer ignoring a stale EFENCED answer, and a read-LAC answer below the
spec's bookieLac; spec/ledger.md, "Decisions".) To keep the runs inside ledger.tla's
reductions, the scheduler merges identical requests in flight (the spec's messages are a
set), times a request out only when nothing else is in flight about it, and starts a
recovery attempt only when nothing of the previous one is in flight.
"""

from __future__ import annotations

import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from conformance.ledger_cluster import (
    LEDGER_ID,
    CoreTypes,
    HarnessError,
    InFlight,
    LedgerCluster,
    pending_acks,
)
from conformance.tlc import SPEC_DIR, Outcome, TLCError, TLCErrorKind, TLCResult, run_tlc
from impl.bookie.client.recovery import RecoveryOp, RecoveryPhase
from impl.bookie.client.writer import LedgerWriter, WriterState
from impl.bookie.protocol import LAST_ENTRY, AddRequest, ReadRequest

WRITER = "w"


# ---- runs -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunConfig:
    """One family of randomized runs (the constants of their trace module)."""

    name: str
    bookies: int
    quorums: tuple[int, int, int]  # E, Qw, Qa
    entries: int = 3  # the writer adds at most this many
    recoverers: int = 2
    max_lost: int = 2
    max_crashes: int = 1
    max_failures: int = 1  # bookies that fail for good
    steps: int = 60

    @property
    def bookie_ids(self) -> list[str]:
        return [f"b{i}" for i in range(1, self.bookies + 1)]

    @property
    def recoverer_names(self) -> list[str]:
        return [f"r{i}" for i in range(1, self.recoverers + 1)]


CONFIGS = (
    RunConfig("e2-qw2-qa2", 3, (2, 2, 2)),
    RunConfig("e3-qw3-qa2", 4, (3, 3, 2)),
    RunConfig("striping-e3-qw2-qa2", 4, (3, 2, 2)),
)


@dataclass
class Event:
    name: str
    params: dict[str, Any]


@dataclass
class Run:
    config: RunConfig
    seed: int
    ensemble: tuple[str, ...]
    events: list[Event] = field(default_factory=list)


class _Recorder:
    """The tracer: appends each event with the driver's context (which client is being fed)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.client = ""
        self.bookie = ""

    def __call__(self, name: str, params: dict[str, Any]) -> None:
        self.events.append(Event(name, {"client": self.client, "bookie": self.bookie, **params}))


def simulate(config: RunConfig, seed: int, cores: CoreTypes | None = None) -> Run:
    """One deterministic run: the seed decides every choice of the environment."""
    rng = random.Random(seed)
    ensemble = tuple(rng.sample(config.bookie_ids, config.quorums[0]))
    recorder = _Recorder()
    cluster = LedgerCluster(
        config.bookie_ids, ensemble, config.quorums, WRITER, config.recoverer_names, cores or CoreTypes(), recorder
    )
    run = Run(config, seed, ensemble)
    # Recovery and the writer's close wait this long: an early recovery leaves little to recover.
    warmup = rng.randrange(config.steps // 3)
    for step in range(config.steps):
        choices = _choices(cluster, config, late=step >= warmup)
        if not choices:
            break
        kept = len(recorder.events)
        try:
            rng.choice(choices)(recorder)
        except HarnessError:
            # The scheduler offered a step the cores do not take: end the run before it.
            del recorder.events[kept:]
            break
    run.events = recorder.events
    return run


Step = Callable[[_Recorder], None]


def _choices(c: LedgerCluster, config: RunConfig, *, late: bool) -> list[Step]:
    """The environment's possible next steps (repeated entries weigh the draw)."""
    out: list[Step] = []
    w = c.writer
    if w.state is WriterState.WRITING and w.last_add_pushed < config.entries - 1:
        out += [partial(_as, client=WRITER, call=c.writer_add)] * 3
    for m in list(c.inflight):
        up = c.bookies[m.bookie].up
        if up:
            out += [partial(_deliver, c=c, m=m)] * 4
        if up and c.lost < config.max_lost:
            out.append(partial(_lose, c=c, m=m, how="MessageLost"))
            out.append(partial(_lose, c=c, m=m, how="ReplyLost"))
        if not up:
            out.append(partial(_lose, c=c, m=m, how="RequestToDownBookieLost"))
    for b, node in c.bookies.items():
        if node.up and c.crashes < config.max_crashes:
            out.append(partial(_env, c=c, name="BookieCrashes", bookie=b, call=c.crash))
        failures = sum(n.failed for n in c.bookies.values())
        if node.up and failures < config.max_failures:
            out.append(partial(_env, c=c, name="BookieFailsPermanently", bookie=b, call=c.fail_permanently))
        if not node.up and not node.failed:
            out += [partial(_env, c=c, name="BookieRestarts", bookie=b, call=c.restart)] * 2
    if w.state is WriterState.WRITING:
        for b in _timeouts(c, w, w):
            for nb in _spares(c, w.metadata.last_ensemble):
                out += [partial(_as, client=WRITER, call=partial(c.timeout_writer, b, nb))] * 2
        if w.last_add_pushed >= 0 and late:
            out.append(partial(_as, client=WRITER, call=c.writer_close))
    for name, op in c.recoveries.items():
        mine = [m for m in c.inflight if m.client == name]
        if (op is None or op.phase is RecoveryPhase.FAILED) and not mine and late:
            out.append(partial(_as, client=name, call=partial(c.start_recovery, name)))
        if op is None or op.phase in (RecoveryPhase.DONE, RecoveryPhase.FAILED):
            continue
        if name in c.held_close:
            out += [partial(_as, client=name, call=partial(c.close_recovery, name))] * 3
        if op.writer is not None:
            for b in _timeouts(c, op, op.writer):
                for nb in _spares(c, op.writer.metadata.last_ensemble):
                    out.append(partial(_as, client=name, call=partial(c.timeout_recovery_adds, name, b, nb)))
        if _read_times_out(c, op):
            out.append(partial(_as, client=name, call=partial(c.timeout_recovery_read, name)))
        if not mine and _abort_fails(c, op):
            out.append(partial(_as, client=name, call=partial(c.abort_recovery, name)))
    return out


def _read_times_out(c: LedgerCluster, op: RecoveryOp) -> bool:
    """The read of the entry being decided got no answer, nothing else about it is in flight, and a
    bookie of its write set is left to ask (ledger.tla's RecoveryReadTimedOut)."""
    if op.phase is not RecoveryPhase.READING or op._end_found:
        return False
    if op.reads_asked() >= op.metadata.write_quorum:
        return False
    about = [m for m in c.inflight if m.core is op and _kind(m) == "read" and _entry(m) == op._next]
    return not about and any(m.core is op and _kind(m) == "read" and _entry(m) == op._next for m in c.timed_out)


def _abort_fails(c: LedgerCluster, op: RecoveryOp) -> bool:
    """Whether the attempt's timeouts make it fail (LedgerCluster.abort_recovery: reads, then one add)."""
    timed_out = [m for m in c.timed_out if m.core is op]
    if op.phase is RecoveryPhase.FENCING:
        return any(_kind(m) == "readLac" for m in timed_out)
    if op.phase is not RecoveryPhase.READING:
        return False
    exhausted = op.reads_asked() >= op.metadata.write_quorum  # no bookie left to ask
    if not op._end_found and exhausted and any(_kind(m) == "read" and _entry(m) == op._next for m in timed_out):
        return True
    adds = [m for m in timed_out if isinstance(m.request, AddRequest)]
    writer = op.writer
    if not adds or writer is None:
        return False
    first = adds[0]
    return first.bookie in _timeouts(c, op, writer) and _entry(first) in writer.pending_entry_ids


def _as(recorder: _Recorder, client: str, call: Callable[[], object]) -> None:
    recorder.client = client
    call()


def _merge_duplicates(c: LedgerCluster, m: InFlight) -> None:
    """ledger.tla's messages are a set: an identical request still in flight is the same message."""
    c.take(
        [x for x in c.inflight if x is not m and x.core is m.core and x.bookie == m.bookie and x.request == m.request]
    )


# The bookie core's events (BookieHandles, BookieReplays) come before the event of the step they
# belong to: the client's answer, or the environment's ReplyLost / BookieCrashes emitted after them.


def _deliver(recorder: _Recorder, c: LedgerCluster, m: InFlight) -> None:
    recorder.client, recorder.bookie = m.client, m.bookie
    _merge_duplicates(c, m)
    c.deliver([m])


def _lose(recorder: _Recorder, c: LedgerCluster, m: InFlight, how: str) -> None:
    recorder.client, recorder.bookie = m.client, m.bookie
    _merge_duplicates(c, m)
    if how == "ReplyLost":
        c.lose_replies([m])
    else:
        c.lose_requests([m], counted=how == "MessageLost")
    recorder(how, {"kind": _kind(m), "bookie": m.bookie, "entry": _entry(m), "client": m.client})


def _env(recorder: _Recorder, c: LedgerCluster, name: str, bookie: str, call: Callable[[str], object]) -> None:
    recorder.bookie = bookie
    call(bookie)
    recorder(name, {"bookie": bookie})


def _kind(m: InFlight) -> str:
    request = m.request
    if isinstance(request, AddRequest):
        return "recoveryAdd" if request.recovery else "add"
    assert isinstance(request, ReadRequest)
    return "readLac" if request.entry_id == LAST_ENTRY else "read"


def _entry(m: InFlight) -> int:
    request = m.request
    assert isinstance(request, AddRequest | ReadRequest)
    return -1 if isinstance(request, ReadRequest) and request.entry_id == LAST_ENTRY else request.entry_id


def _spares(c: LedgerCluster, ensemble: Sequence[str]) -> list[str]:
    return [b for b, node in c.bookies.items() if node.up and b not in ensemble]


def _quiet(c: LedgerCluster, core: object, bookie: str, entry: int) -> bool:
    """Nothing in flight from `core` to `bookie` about `entry` (ledger.tla's timeout guard)."""
    return not any(
        m.core is core and m.bookie == bookie and isinstance(m.request, AddRequest) and m.request.entry_id == entry
        for m in c.inflight
    )


def _timeouts(c: LedgerCluster, core: object, writer: LedgerWriter) -> list[str]:
    """Bookies whose lost add leaves a pending entry short of Qa acks, with nothing else in flight
    about it (ledger.tla's WriterTimedOut / RecoveryAddTimedOut); `writer` is the core's writer."""
    acks = pending_acks(writer)
    qa = writer.metadata.ack_quorum
    out = set()
    for m in c.timed_out:
        if m.core is not core or not isinstance(m.request, AddRequest):
            continue
        e, b = m.request.entry_id, m.bookie
        short = e in acks and b not in acks[e] and len(acks[e]) < qa
        if short and b in writer.metadata.last_ensemble and _quiet(c, core, b, e):
            out.add(b)
    return sorted(out)


# ---- events -> trace steps ------------------------------------------------------------------------

# action -> the lastAction params the step must match (the rest of an event is state)
PARAMS = {
    "WriterSendsAdd": ("entry", "lac"),
    "WriterReceivesAddResponse": ("bookie", "entry", "ok", "counted"),
    "WriterChangesEnsemble": ("failed", "replacement", "first", "outcome"),
    "WriterCloses": ("lac",),
    "RecoveryStarts": ("client", "outcome"),
    "RecoveryReceivesReadLacResponse": ("client", "bookie", "lac", "stale"),
    "RecoveryReceivesReadResponse": ("client", "bookie", "entry", "found", "stale"),
    "RecoveryReceivesAddResponse": ("client", "bookie", "entry", "counted"),
    "RecoveryChangesEnsemble": ("client", "failed", "replacement", "first"),
    "RecoveryCloses": ("client", "lastEntry", "outcome"),
    "RecoveryAborts": ("client", "phase"),
    "RecoveryReadTimedOut": ("client", "entry"),
    "MessageLost": ("kind", "client", "bookie", "entry"),
    "ReplyLost": ("kind", "client", "bookie", "entry"),
    "RequestToDownBookieLost": ("kind", "client", "bookie", "entry"),
    "BookieCrashes": ("bookie",),
    "BookieRestarts": ("bookie",),
    "BookieFailsPermanently": ("bookie",),
}

_SPEC_PHASE = {"fencing": "fencing", "reading": "reading", "closing": "closing", "done": "done", "failed": "aborted"}


@dataclass
class TraceStep:
    name: str
    params: dict[str, Any]
    state: dict[str, Any]  # spec variable (per client / bookie) -> logged value


def to_steps(events: Iterable[Event]) -> list[TraceStep]:
    """The events as trace steps: spec actions with their parameters and the state to match."""
    steps: list[TraceStep] = []
    bookie: dict[str, Any] | None = None  # what the bookie core reported, for the next step
    for ev in events:
        p = ev.params
        if ev.name == "BookieHandles":
            if p["ledger"] == LEDGER_ID:
                bookie = {"id": p["bookie"], "entries": set(p["entries"]), "fenced": p["fenced"]}
            continue
        if ev.name == "BookieReplays":  # a restart rebuilds the bookie from its journal
            if bookie is None or bookie["id"] != p["bookie"]:
                bookie = {"id": p["bookie"], "entries": set(), "fenced": False}
            if p["ledger"] == LEDGER_ID and p["kind"] == "ENTRY":
                bookie["entries"].add(p["entry"])
            if p["ledger"] == LEDGER_ID and p["kind"] == "FENCE":
                bookie["fenced"] = True
            continue
        if ev.name == "BookieCrashes" and bookie is None:  # an empty journal: nothing replayed
            bookie = {"id": p["bookie"], "entries": set(), "fenced": False}
        if ev.name not in PARAMS:
            raise ValueError(f"event {ev.name!r} is no ledger.tla action")
        params = {k: p[k] for k in PARAMS[ev.name] if k != "phase"}
        if ev.name == "RecoveryAborts":
            params["phase"] = _SPEC_PHASE.get(p["before"], p["before"])
        state = _state(ev)
        if bookie is not None:
            state["bookie"] = bookie
            bookie = None
        steps.append(TraceStep(ev.name, params, state))
    return steps


def _state(ev: Event) -> dict[str, Any]:
    p = ev.params
    state: dict[str, Any]
    if ev.name.startswith("Writer") and "state" in p:
        wstate = p["state"].upper()
        if wstate == "FAILED" and p["fenced"]:
            wstate = "FENCED"
        return {"wLac": p["lac"], "wState": wstate}
    if ev.name == "RecoveryReceivesAddResponse":
        return {"rWbLac": p["lac"]} if p["counted"] else {}
    if ev.name.startswith("Recovery") and "phase" in p:
        phase = _SPEC_PHASE[p["phase"]]
        if phase == "reading" and p["end_found"]:
            phase = "closing"
        state = {"rPhase": phase}
        if phase == "reading" and "tried" in p:  # (logs recorded before sequential reads have none)
            state["rTried"] = p["tried"]
        if ev.name == "RecoveryReceivesReadLacResponse" and phase == "reading" and not p["stale"]:
            state["rNext"] = p["start"] + 1
        if ev.name == "RecoveryReceivesReadResponse" and not p["stale"]:
            if phase == "reading":
                state["rNext"] = p["next"]
            elif phase == "closing":
                state["rEnd"] = p["next"] - 1
        return state
    return {}


# ---- TLA+ -----------------------------------------------------------------------------------------


def tla_value(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, set | frozenset):
        return "{" + ", ".join(tla_value(v) for v in sorted(value)) + "}"
    if isinstance(value, tuple | list):
        return "<<" + ", ".join(tla_value(v) for v in value) + ">>"
    if isinstance(value, dict):
        if not value:
            return "[none |-> 0]"
        return "[" + ", ".join(f"{k} |-> {tla_value(v)}" for k, v in value.items()) + "]"
    raise TypeError(f"no TLA+ form for {value!r}")


def _step_tla(step: TraceStep) -> str:
    return tla_value({"name": step.name, "p": step.params, "s": step.state})


TRACE_MODULE = """---- MODULE {module} ----
(* Generated by conformance/trace_validation.py: implementation traces that ledger.tla must admit. *)
EXTENDS ledger

TraceBookies == {bookies}
TraceRecoverers == {recoverers}
TraceE == {e}
TraceQw == {qw}
TraceQa == {qa}
TraceNumEntries == {entries}

Ensembles == <<{ensembles}>>

Traces == <<
{traces}
>>

VARIABLES l, t   \\* position in the trace, which trace

Do(ev) ==
    \\/ ev.name = "WriterSendsAdd" /\\ WriterSendsAdd
    \\/ ev.name = "WriterReceivesAddResponse" /\\ WriterReceivesAddResponse
    \\/ ev.name = "WriterChangesEnsemble" /\\ WriterChangesEnsemble(ev.p.failed, ev.p.replacement)
    \\/ ev.name = "WriterCloses" /\\ WriterCloses
    \\/ ev.name = "RecoveryStarts" /\\ RecoveryStarts(ev.p.client)
    \\/ ev.name = "RecoveryReceivesReadLacResponse" /\\ RecoveryReceivesReadLacResponse
    \\/ ev.name = "RecoveryReceivesReadResponse" /\\ RecoveryReceivesReadResponse
    \\/ ev.name = "RecoveryReceivesAddResponse" /\\ RecoveryReceivesAddResponse
    \\/ ev.name = "RecoveryChangesEnsemble" /\\ RecoveryChangesEnsemble(ev.p.client, ev.p.failed, ev.p.replacement)
    \\/ ev.name = "RecoveryCloses" /\\ RecoveryCloses(ev.p.client)
    \\/ ev.name = "RecoveryAborts" /\\ RecoveryAborts(ev.p.client)
    \\/ ev.name = "RecoveryReadTimedOut" /\\ RecoveryReadTimedOut(ev.p.client)
    \\/ ev.name = "MessageLost" /\\ MessageLost
    \\/ ev.name = "ReplyLost" /\\ ReplyLost
    \\/ ev.name = "RequestToDownBookieLost" /\\ RequestToDownBookieLost
    \\/ ev.name = "BookieCrashes" /\\ BookieCrashes(ev.p.bookie)
    \\/ ev.name = "BookieRestarts" /\\ BookieRestarts(ev.p.bookie)
    \\/ ev.name = "BookieFailsPermanently" /\\ BookieFailsPermanently(ev.p.bookie)

ParamsMatch(ev) == \\A k \\in DOMAIN ev.p : lastAction'.params[k] = ev.p[k]

StateMatch(ev) ==
    \\A k \\in DOMAIN ev.s :
        CASE k = "wLac" -> wLac' = ev.s[k]
          [] k = "wState" -> wState' = ev.s[k]
          [] k = "rPhase" -> rPhase'[ev.p.client] = ev.s[k]
          [] k = "rNext" -> rNext'[ev.p.client] = ev.s[k]
          [] k = "rEnd" -> rEnd'[ev.p.client] = ev.s[k]
          [] k = "rTried" -> rTried'[ev.p.client] = ev.s[k]
          [] k = "rWbLac" -> rWbLac'[ev.p.client] = ev.s[k]
          [] k = "bookie" -> entries'[ev.s[k].id] = ev.s[k].entries /\\ fenced'[ev.s[k].id] = ev.s[k].fenced
          [] OTHER -> TRUE

TraceInit ==
    /\\ t \\in 1 .. Len(Traces)
    /\\ l = 1
    /\\ Init
    /\\ meta.fragments[1].ens = Ensembles[t]

TraceNext ==
    /\\ l <= Len(Traces[t])
    /\\ LET ev == Traces[t][l] IN
       /\\ Do(ev)
       /\\ lastAction'.name = ev.name
       /\\ ParamsMatch(ev)
       /\\ StateMatch(ev)
    /\\ l' = l + 1
    /\\ t' = t

TraceSpec == TraceInit /\\ [][TraceNext]_<<vars, l, t>>

\\* Two states differ if the spec's state or the position differs (lastAction excluded).
TraceView == <<view, l, t>>
====
"""

TRACE_CFG = """CONSTANTS
    Bookies <- TraceBookies
    Writer = "w"
    Recoverers <- TraceRecoverers
    E <- TraceE
    Qw <- TraceQw
    Qa <- TraceQa
    NumEntries <- TraceNumEntries
    MaxFragments = 20
    MaxLostMessages = 100
    MaxCrashes = 100
    MaxPermanentFailures = 100
    Mutation = "none"
INIT TraceInit
NEXT TraceNext
VIEW TraceView
"""


def to_tla(config: RunConfig, runs: Sequence[Run], module: str = "TraceSpec") -> tuple[str, str]:
    """The trace module (all runs of one configuration) and its cfg."""
    e, qw, qa = config.quorums
    traces = ",\n".join("  <<" + ",\n    ".join(_step_tla(s) for s in to_steps(r.events)) + ">>" for r in runs)
    text = TRACE_MODULE.format(
        module=module,
        bookies=tla_value(set(config.bookie_ids)),
        recoverers=tla_value(set(config.recoverer_names)),
        e=e,
        qw=qw,
        qa=qa,
        entries=config.entries,
        ensembles=", ".join(tla_value(r.ensemble) for r in runs),
        traces=traces,
    )
    return text, TRACE_CFG


# ---- TLC ------------------------------------------------------------------------------------------


@dataclass
class Verdict:
    run: Run
    steps: list[TraceStep]
    reached: int  # steps matched (0: not even the initial state)

    @property
    def accepted(self) -> bool:
        return self.reached == len(self.steps)

    def describe(self) -> str:
        r = self.run
        head = f"{r.config.name} seed {r.seed}"
        if self.accepted:
            return f"{head}: accepted ({len(self.steps)} steps)"
        if self.reached < 0:
            return f"{head}: rejected at the initial state (ensemble {r.ensemble})"
        s = self.steps[self.reached]
        return f"{head}: rejected at step {self.reached + 1}/{len(self.steps)}: {s.name} {s.params} state {s.state}"


_DUMP_L = re.compile(r"^/\\ l = (\d+)\s*$")
_DUMP_T = re.compile(r"^/\\ t = (\d+)\s*$")


def check_traces(config: RunConfig, runs: Sequence[Run], *, workers: int = 1) -> tuple[list[Verdict], TLCResult]:
    """One TLC run over all `runs` (one configuration); a verdict per run."""
    text, cfg = to_tla(config, runs)
    with tempfile.TemporaryDirectory(prefix="trace-") as tmp:
        d = Path(tmp)
        shutil.copy(SPEC_DIR / "ledger.tla", d / "ledger.tla")
        (d / "TraceSpec.tla").write_text(text)
        (d / "TraceSpec.cfg").write_text(cfg)
        dump = d / "states"
        try:
            result = run_tlc(
                d / "TraceSpec.tla",
                d / "TraceSpec.cfg",
                workers=workers,
                extra_args=("-dump", str(dump)),
                short=True,
            )
        except TLCError as exc:  # keep the module to look at
            kept = Path(tempfile.mkdtemp(prefix="trace-failed-"))
            shutil.copytree(d, kept, dirs_exist_ok=True)
            raise TLCError(exc.kind, f"{exc} (trace module kept in {kept})", exc.detail) from exc
        if result.outcome is not Outcome.PASS:
            raise TLCError(TLCErrorKind.EVALUATION, f"TLC ended with {result.outcome.name} {result.violated}".strip())
        reached = _furthest(Path(str(dump) + ".dump"), len(runs))
    verdicts = [Verdict(r, to_steps(r.events), reached[i] - 1) for i, r in enumerate(runs)]
    return verdicts, result


def _furthest(dump: Path, count: int) -> list[int]:
    """The largest `l` among the dumped states of each trace (0: none)."""
    best = [0] * count
    l_value = t_value = None
    for line in dump.read_text().splitlines():
        if line.startswith("State "):
            l_value = t_value = None
        elif m := _DUMP_L.match(line):
            l_value = int(m.group(1))
        elif m := _DUMP_T.match(line):
            t_value = int(m.group(1))
        if l_value is not None and t_value is not None:
            best[t_value - 1] = max(best[t_value - 1], l_value)
    return best


@dataclass
class Report:
    verdicts: list[Verdict]
    seconds: float
    tlc_runs: int

    @property
    def accepted(self) -> int:
        return sum(v.accepted for v in self.verdicts)

    @property
    def rejected(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.accepted]


def validate_traces(
    count: int,
    *,
    seed: int = 0,
    configs: Sequence[RunConfig] = CONFIGS,
    cores: CoreTypes | None = None,
    batch: int = 40,
    on_verdict: Callable[[Verdict], None] | None = None,
) -> Report:
    """`count` randomized runs spread over `configs` (seeds seed, seed+1, ...), checked in batches."""
    started = time.monotonic()
    verdicts: list[Verdict] = []
    tlc_runs = 0
    for i, config in enumerate(configs):
        n = count // len(configs) + (1 if i < count % len(configs) else 0)
        seeds = [seed + i * 100_000 + k for k in range(n)]
        runs = [simulate(config, s, cores) for s in seeds]
        for start in range(0, len(runs), batch):
            got, _ = check_traces(config, runs[start : start + batch])
            tlc_runs += 1
            for v in got:
                if on_verdict is not None:
                    on_verdict(v)
            verdicts += got
    return Report(verdicts, time.monotonic() - started, tlc_runs)


def summary(report: Report) -> str:
    """Per configuration: traces accepted, then every rejection with its first unmatched event."""
    lines = []
    for config in dict.fromkeys(v.run.config for v in report.verdicts):
        mine = [v for v in report.verdicts if v.run.config == config]
        steps = sum(len(v.steps) for v in mine)
        accepted = sum(v.accepted for v in mine)
        lines.append(f"{config.name}: {accepted}/{len(mine)} traces accepted ({steps:,} steps)")
    lines += [v.describe() for v in report.rejected]
    lines.append(
        f"{report.accepted}/{len(report.verdicts)} traces accepted by ledger.tla in {report.seconds:.1f}s "
        f"({report.tlc_runs} TLC runs)"
    )
    return "\n".join(lines)
