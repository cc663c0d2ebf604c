"""Merging the logs of a real run into one sequence of ledger.tla steps (`linearize`).

In a real run no process sees a global order, so each records its own (conformance/trace_files.py):

- each bookie (`pulsar-ref bookie --trace FILE`): `BookieHandles` for every add and read it
  handles, under its core lock, so in its handling order, with the request's identity
  (ledger, ledger.tla's `kind`, entry) and the ledger's entries and fenced flag after it;
- each client: its cores' events (`WriterSendsAdd`, `WriterReceivesAddResponse`,
  `RecoveryStarts`, `RecoveryReceives*Response`, `RecoveryCloses`, ...), in the core's order
  (a core emits under its driver's lock), each reply with the bookie that answered.

In ledger.tla a delivery is one atomic step: the bookie handles the request and the client
handles the reply. `linearize` merges the logs into one sequence of such steps: a client's
reply event is matched with the handling it answers (the first unmatched one of the same bookie,
kind and entry; the kind names the client: `add` is the writer's, the others the one recovery
client's), a handling no client event answers becomes `ReplyLost` (the bookie handled it, the
reply never reached a core), and the steps are topologically sorted so that each bookie's steps
keep its handling order and each client's steps keep the client's order (a send precedes its
delivery, being earlier in the same client's order). When those orders contradict each other
(a cycle: e.g. bookie b1 handled X before Y, but the clients saw Y's reply before X's through
other steps), the run cannot be linearized from its logs and `linearize` says so with the
cycle. Real runs do that: a bookie answers EFENCED at once while an earlier add's OK waits for
its journal, so the writer sees the later answer first. When the cycle runs through an answer
the client ignored (its logged state unchanged), `linearize(relaxed=True)` takes that answer as
a lost reply (`ReplyLost` at its handling), which conformance/process_traces.py's `check_runs`
does and reports for such runs. The sequence then goes through trace_validation's `to_steps` /
`to_tla` / `check_traces`.

What the ordering assumes: the metadata store is written by one client only in the real-process
runs (the writer never changes its ensemble or closes); cross-client metadata steps are ordered by
the store's version, which their events carry (`version`, `written`; conformance/cluster_traces.py's
broker runs need it), and a writer's ensemble change by `MessageLost` steps for the adds no bookie
logged (`_lost_requests`); one recovery client; no request is sent twice to one bookie
(FIFO matching otherwise); a bookie restarts only where the run says (`restarts`), which becomes
ledger.tla's `BookieCrashes` (checked against the journal the new process replayed) and
`BookieRestarts`.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.ledger_cluster import LEDGER_ID
from conformance.trace_files import Record
from conformance.trace_validation import Event
from impl.bookie.client.distribution import write_set

WRITER, RECOVERER = "w", "r1"  # the spec names of the two clients

# client event -> ledger.tla's kind of the request it answers
DELIVERIES = {
    "WriterReceivesAddResponse": "add",
    "RecoveryReceivesAddResponse": "recoveryAdd",
    "RecoveryReceivesReadLacResponse": "readLac",
    "RecoveryReceivesReadResponse": "read",
}
KIND_CLIENT = {"add": WRITER, "recoveryAdd": RECOVERER, "readLac": RECOVERER, "read": RECOVERER}
_BOOKIE_PARAMS = ("bookie", "failed", "replacement")  # client event params that name a bookie
_NOT_STEPS = {"TraceFileOpened", "LedgerCreated"}  # records of the drivers, not protocol steps
METADATA_STEPS = {"WriterChangesEnsemble", "WriterCloses", "RecoveryStarts", "RecoveryCloses"}  # the CW steps


class MergeError(Exception):
    """The logs of a run cannot be merged into one sequence of ledger.tla steps."""


class CycleError(MergeError):
    """The per-process orders contradict each other: no linearization with atomic deliveries."""


@dataclass
class _Step:
    """One step of the merged trace: a client event, a bookie handling, or both (a delivery)."""

    order: tuple[int, int, int]  # tie-break among ready steps: (clock, source rank, position)
    client: Record | None = None
    client_name: str = ""
    handling: Record | None = None
    bookie: str = ""
    ignored: bool = False  # a delivery whose answer left the client's logged state unchanged
    env: list[Event] | None = None  # a bookie's crash (with its replayed journal) or restart

    def describe(self) -> str:
        parts = []
        if self.env:
            parts.append(f"bookie {self.bookie} {self.env[-1].name}")
        if self.handling is not None:
            h = self.handling["params"]
            parts.append(
                f"bookie {self.bookie} handles {h['kind']} of entry {h['entry']} (its line {self.handling['seq']})"
            )
        if self.client is not None:
            parts.append(f"client {self.client_name} {self.client['name']} (its line {self.client['seq']})")
        return " + ".join(parts)


@dataclass
class Linearization:
    events: list[Event]  # for trace_validation.to_steps
    lost: list[str] = field(default_factory=list)  # ignored answers taken as lost replies (see `relaxed`)


def linearize(
    bookie_logs: Mapping[str, Sequence[Record]],
    client_logs: Mapping[str, Sequence[Record]],
    ledger_id: int,
    names: dict[str, str] | None = None,
    *,
    relaxed: bool = False,
    restarts: Mapping[str, Sequence[int]] | None = None,
) -> Linearization:
    """The run's steps in one order that keeps every bookie's handling order and every client's order.

    `bookie_logs`: spec bookie name -> its TraceFile records; `client_logs`: spec client name
    ("w", "r1") -> its records; `names`: real bookie id (host:port) -> spec name, for the bookie
    parameters of client events. The events use ledger id LEDGER_ID. Raises CycleError when the
    orders contradict each other, MergeError when a client event answers a request no bookie
    logged or a bookie handled a request no client step sent.

    `relaxed`: while the orders form a cycle, take an *ignored* answer on it (one its client's
    logged state did not change at: an add answer not counted, a stale recovery answer; first one
    at an edge only its client's order imposes, the later of the two) as a lost reply instead: ledger.tla's
    `ReplyLost` at its handling, out of the client's order, the client event dropped. Each is
    listed in `lost`. A cycle through no ignored answer is still a CycleError.

    `restarts`: bookie -> indexes of its records where a restarted process of this run begins (its
    `TraceFileOpened`): there the bookie's order gets `BookieCrashes` (with the records the new
    process replayed from its journal, the state the crash must have kept) and `BookieRestarts`,
    and every request it handles afterwards was sent after the crash."""
    graph = _Graph(bookie_logs, client_logs, ledger_id, names or {}, restarts or {})
    order = graph.order()
    lost: list[str] = []
    while isinstance(order, tuple):
        candidates = graph.late_answers(order) if relaxed else []
        if not candidates:
            raise graph.cycle_error(order)
        i = candidates[0]
        graph.detach(i)
        lost.append(graph.steps[i].describe())
        order = graph.order()
    return Linearization(graph.events(order), lost)


class _Graph:
    """The steps of a run and the order constraints among them."""

    def __init__(
        self,
        bookie_logs: Mapping[str, Sequence[Record]],
        client_logs: Mapping[str, Sequence[Record]],
        ledger_id: int,
        names: dict[str, str],
        restarts: Mapping[str, Sequence[int]],
    ) -> None:
        self.ledger_id, self.names = ledger_id, names
        self.steps: list[_Step] = []
        self.detached: set[int] = set()
        steps = self.steps
        waiting: dict[tuple[str, str, int], deque[int]] = {}  # (bookie, kind, entry) -> unmatched handlings
        bookie_chains: list[list[int]] = []
        after_crash: list[tuple[int, int]] = []  # (crash step, a handling after it)
        crashes: dict[str, list[int]] = {}  # bookie -> its crash steps
        for rank, (bookie, records) in enumerate(sorted(bookie_logs.items())):
            chain: list[int] = []
            crash: int | None = None
            replaying: list[Event] | None = None  # the replayed records of a restart, until its first request
            foreign = False  # restarted (not by this run) after handling requests of the ledger
            for k, r in enumerate(records):
                p = r["params"]
                if k > 0 and r["name"] == "TraceFileOpened" and k not in restarts.get(bookie, ()):
                    foreign = foreign or bool(chain)  # another run's restart: before the ledger, harmless
                    replaying = None
                    continue
                if k in restarts.get(bookie, ()):
                    if r["name"] != "TraceFileOpened":
                        raise MergeError(f"bookie {bookie}'s line {k} is no process start: {r['name']}")
                    if replaying is not None:  # the previous process handled nothing (e.g. a failed start)
                        replaying.append(Event("BookieCrashes", {"bookie": bookie}))
                    replaying = []
                    steps.append(_Step((r.get("ns", 0), rank, len(chain)), bookie=bookie, env=replaying))
                    crash = len(steps) - 1
                    crashes.setdefault(bookie, []).append(crash)
                    steps.append(_Step((r.get("ns", 0), rank, len(chain) + 1), bookie=bookie))
                    steps[-1].env = [Event("BookieRestarts", {"bookie": bookie})]
                    chain += [crash, crash + 1]
                    continue
                if r["name"] == "BookieReplays" and p["ledger"] == ledger_id:
                    if replaying is not None:
                        replaying.append(Event("BookieReplays", {**p, "bookie": bookie, "ledger": LEDGER_ID}))
                    continue
                if r["name"] != "BookieHandles" or p["ledger"] != ledger_id:
                    continue
                if p.get("fence") is False and p["kind"] in ("read", "readLac"):
                    continue  # an unfenced read (a reader, not recovery) changes nothing: no ledger.tla step
                if foreign:
                    raise MergeError(
                        f"bookie {bookie} restarted during the run (its line {k}) but the run names no restart"
                    )
                if replaying is not None:
                    replaying.append(Event("BookieCrashes", {"bookie": bookie}))
                    replaying = None
                if crash is not None:
                    after_crash.append((crash, len(steps)))
                steps.append(_Step((r.get("ns", 0), rank, len(chain)), handling=r, bookie=bookie))
                chain.append(len(steps) - 1)
                waiting.setdefault((bookie, p["kind"], p["entry"]), deque()).append(len(steps) - 1)
            if replaying is not None:  # restarted, then handled nothing of the ledger
                replaying.append(Event("BookieCrashes", {"bookie": bookie}))
            bookie_chains.append(chain)
        self.client_chains: dict[str, list[int]] = {}
        for rank, (client, records) in enumerate(sorted(client_logs.items()), start=len(bookie_logs)):
            chain = []
            state: tuple[Any, ...] = ("writing", False, -1)  # the writer's logged (state, fenced, lac)
            for r in records:
                if r["name"] in _NOT_STEPS:
                    continue
                p = r["params"]
                kind = DELIVERIES.get(r["name"])
                if kind is None:
                    steps.append(_Step((r.get("ns", 0), rank, len(chain)), client=r, client_name=client))
                    chain.append(len(steps) - 1)
                    state = (p["state"], p["fenced"], p["lac"]) if "state" in p and "fenced" in p else state
                    continue
                bookie = names.get(p["bookie"], p["bookie"])
                entry = -1 if kind == "readLac" else p["entry"]
                pending = waiting.get((bookie, kind, entry))
                if not pending:
                    raise MergeError(
                        f"client {client} line {r['seq']} {r['name']} answers a {kind} of entry {entry} "
                        f"that bookie {bookie} never logged handling"
                    )
                i = pending.popleft()
                s = steps[i]
                # A delivery is ordered like the client saw it (the clock of the answer), where free.
                s.client, s.client_name, s.order = r, client, (r.get("ns", 0), rank, len(chain))
                if r["name"] == "WriterReceivesAddResponse":
                    after = (p["state"], p["fenced"], p["lac"])
                    s.ignored = not p["counted"] and after == state
                    state = after
                elif r["name"] == "RecoveryReceivesAddResponse":
                    s.ignored = not p["counted"]
                else:
                    s.ignored = bool(p["stale"])
                chain.append(i)
            self.client_chains[client] = _changes_at_decision(steps, chain) if client == WRITER else chain
        self.bookie_edges = [(a, b) for chain in bookie_chains for a, b in zip(chain, chain[1:], strict=False)]
        self.metadata_edges = self._metadata_order()
        self.sender_edges: list[tuple[int, int]] = []
        for left in waiting.values():
            for i in left:
                self.sender_edges.append((self._sender_of(i), i))
        # A request a restarted bookie handles was sent after the crash (one sent before went down with
        # the connection): else ledger.tla's BookieCrashes would drop it.
        self.sender_edges += [(crash, self._sender_of(i)) for crash, i in after_crash]
        self._lost_requests(client_logs.get(WRITER, []), waiting, crashes)
        self._lost_reads(waiting)

    def _lost_requests(
        self,
        writer_log: Sequence[Record],
        unanswered: dict[tuple[str, str, int], deque[int]],
        crashes: dict[str, list[int]],
    ) -> None:
        """ledger.tla's writer changes its ensemble only once the request that timed out is no longer in
        flight. A real writer times out on a bookie that died or never answered: its adds to that bookie
        either were handled with the answer lost (`ReplyLost` at the handling, which must then come
        before the change) or reached no bookie log at all: those become `MessageLost` steps, after the
        send and before the change, and before the bookie's crash when it restarted later (a crash
        drops the requests queued at it). Which adds the writer sent where follows from its log:
        `WriterSendsAdd` goes to the entry's write set in the current ensemble, a change re-sends the
        pending entries to the replacement (ledger.tla's WriterChangesEnsemble)."""
        created = next((r for r in writer_log if r["name"] == "LedgerCreated" and "quorums" in r["params"]), None)
        chain = self.client_chains.get(WRITER, [])
        if created is None or not any(self.steps[i].client["name"] == "WriterChangesEnsemble" for i in chain):  # type: ignore[index]
            return
        e, qw = created["params"]["quorums"][:2]
        ensemble = [self.names.get(b, b) for b in created["params"]["ensemble"]]
        sends: list[tuple[str, int, int]] = []  # (bookie, entry, sending step)
        changes: list[tuple[int, str]] = []  # (step, failed bookie)
        pushed = -1
        for i in chain:
            r = self.steps[i].client
            assert r is not None
            p = r["params"]
            if r["name"] == "WriterSendsAdd":
                pushed = p["entry"]
                sends += [(ensemble[k], pushed, i) for k in write_set(pushed, e, qw)]
            elif r["name"] == "WriterChangesEnsemble":
                failed, replacement = (
                    self.names.get(p["failed"], p["failed"]),
                    self.names.get(p["replacement"], p["replacement"]),
                )
                changes.append((i, failed))
                if p["outcome"] == "OPEN" and failed in ensemble:
                    ensemble = [replacement if b == failed else b for b in ensemble]
                    sends += [
                        (replacement, x, i)
                        for x in range(p["first"], pushed + 1)
                        if replacement in [ensemble[k] for k in write_set(x, e, qw)]
                    ]
        handled = Counter(
            (s.bookie, s.handling["params"]["entry"])
            for s in self.steps
            if s.handling is not None and s.handling["params"]["kind"] == "add"
        )
        position = {i: n for n, i in enumerate(chain)}
        for bookie, entry, i in reversed(sends):  # the later sends of a key are the unhandled ones
            if handled[(bookie, entry)] > 0:
                handled[(bookie, entry)] -= 1
                continue
            change = next((c for c, b in changes if b == bookie and position[c] > position[i]), None)
            if change is None:
                continue  # still in flight when the trace ends (or dropped by a crash): no step
            sent = self.steps[i]
            event = Event("MessageLost", {"kind": "add", "client": WRITER, "bookie": bookie, "entry": entry})
            self.steps.append(_Step((sent.order[0], sent.order[1], sent.order[2]), bookie=bookie, env=[event]))
            lost = len(self.steps) - 1
            self.sender_edges += [(i, lost), (lost, change)]
            later = [c for c in crashes.get(bookie, []) if self.steps[c].order[0] > sent.order[0]]
            self.sender_edges += [(lost, later[0])] if later else []
        for (bookie, kind, _), left in unanswered.items():
            for h in left if kind == "add" else ():
                sender = position.get(self._sender_of(h), -1)
                change = next((c for c, b in changes if b == bookie and position[c] > sender), None)
                if change is not None:
                    self.sender_edges.append((h, change))  # its reply lost before the writer gave up on it

    def _lost_reads(self, unanswered: dict[tuple[str, str, int], deque[int]]) -> None:
        """ledger.tla's recovery asks the next bookie only once the read that timed out is no longer in
        flight: handled with the answer lost (`ReplyLost` at the handling, before the timeout) or never
        handled (a `MessageLost` step after the read was sent and before the timeout)."""
        for i in self.client_chains.get(RECOVERER, []):
            r = self.steps[i].client
            if r is None or r["name"] != "RecoveryReadTimedOut":
                continue
            entry, bookie = r["params"]["entry"], self.names.get(r["params"]["timed_out"], r["params"]["timed_out"])
            handled = unanswered.get((bookie, "read", entry))
            if handled:
                self.sender_edges.append((handled[0], i))
                continue
            chain = [j for j in self.client_chains[RECOVERER] if j not in self.detached]
            sent = _sender(self.steps, chain, "read", entry, bookie, self.names)
            if sent is None:
                raise MergeError(f"client {RECOVERER} timed out on a read of entry {entry} it never sent to {bookie}")
            event = Event("MessageLost", {"kind": "read", "client": RECOVERER, "bookie": bookie, "entry": entry})
            self.steps.append(_Step(self.steps[sent].order, bookie=bookie, env=[event]))
            self.sender_edges += [(sent, len(self.steps) - 1), (len(self.steps) - 1, i)]

    def _metadata_order(self) -> list[tuple[int, int]]:
        """Edges that put the metadata steps of different clients in the store's version order.

        Each metadata step's event carries `version` (the ledger metadata's store version after
        the step: the one it wrote when `written`, else the one its check read) . Written
        versions are totally ordered by the store; a step that wrote nothing read version v, so it
        comes after v's writer and before v+1's. One client's steps are ordered by its own log."""
        found: list[tuple[int, bool, int, str]] = []  # (version, written, step, client)
        for client, chain in self.client_chains.items():
            for i in chain:
                r = self.steps[i].client
                if r is not None and r["name"] in METADATA_STEPS:
                    found.append((r["params"].get("version", -1), bool(r["params"].get("written")), i, client))
        if len({client for *_, client in found}) < 2:
            return []
        unknown = [self.steps[i].describe() for v, _, i, _ in found if v < 0]
        if unknown:
            raise MergeError(f"metadata steps of two clients, and no store version logged for: {'; '.join(unknown)}")
        writes: dict[int, int] = {}
        for v, written, i, _ in found:
            if written:
                if v in writes:
                    raise MergeError(
                        f"two steps wrote metadata version {v}: {self.steps[writes[v]].describe()}, "
                        f"{self.steps[i].describe()}"
                    )
                writes[v] = i
        missing = [v for v in range(1, max(v for v, *_ in found) + 1) if v not in writes]
        if missing:
            raise MergeError(f"metadata version(s) {missing} written by no logged step")
        edges = [(writes[v], writes[v + 1]) for v in writes if v + 1 in writes]
        for v, written, i, _ in found:
            if not written:
                edges += [(writes[v], i)] if v in writes else []
                edges += [(i, writes[v + 1])] if v + 1 in writes else []
        return edges

    def _sender_of(self, i: int) -> int:
        """A handling no client event answers still comes after the client step that sent its request
        (a delivery is after it already: later in the same client's order)."""
        p = self.steps[i].handling["params"]  # type: ignore[index]
        client = KIND_CLIENT[p["kind"]]
        chain = [j for j in self.client_chains.get(client, []) if j not in self.detached]
        sender = _sender(self.steps, chain, p["kind"], p["entry"], self.steps[i].bookie, self.names)
        if sender is None:
            raise MergeError(
                f"bookie {self.steps[i].bookie} handled a {p['kind']} of entry {p['entry']} that no step of "
                f"client {client} sent"
            )
        return sender

    def late_answers(self, cycle: tuple[int, ...]) -> list[int]:
        """The ignored answers on the cycle, best first: those at an edge only their client's order
        imposes (the later one of the pair first: the answer that came late), then the others."""
        imposed = set(self.bookie_edges) | set(self.sender_edges) | set(self.metadata_edges)
        out: list[int] = []
        for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True):
            if (a, b) not in imposed:
                out += [i for i in (b, a) if self.steps[i].ignored and i not in self.detached]
        out += [i for i in cycle if self.steps[i].ignored and i not in self.detached]
        return list(dict.fromkeys(out))

    def detach(self, i: int) -> None:
        """Take delivery `i` as a lost reply: out of its client's order, after the request's sender."""
        self.detached.add(i)
        self.sender_edges.append((self._sender_of(i), i))

    def order(self) -> list[int] | tuple[int, ...]:
        client_edges = []
        for chain in self.client_chains.values():
            kept = [i for i in chain if i not in self.detached]
            client_edges += list(zip(kept, kept[1:], strict=False))
        return _topological(self.steps, self.bookie_edges + self.sender_edges + self.metadata_edges + client_edges)

    def events(self, order: list[int]) -> list[Event]:
        return [ev for i in order for ev in _events(self.steps[i], self.ledger_id, self.names, i in self.detached)]

    def cycle_error(self, cycle: tuple[int, ...]) -> CycleError:
        return CycleError(
            "the run cannot be linearized from its logs: the bookies' handling orders and the clients' "
            "orders form a cycle (each step must come before the next): "
            + " -> ".join(self.steps[i].describe() for i in [*cycle, cycle[0]])
        )


def _changes_at_decision(steps: list[_Step], chain: list[int]) -> list[int]:
    """The writer's chain with each ensemble change (and its close) moved back to where it was decided.

    The core decides a change (its new fragment starts at its LAC + 1, the `first` its event
    carries) and goes on taking answers and adds while the conditional write is in flight; its event
    comes when the write's result does. ledger.tla's change is one step at the decision, so the
    change goes back over the answers and sends logged during the write that moved the LAC to
    `first` or past it (an add held during the write is then sent to the new ensemble, as the core
    does once the write succeeds), with the LAC it had then."""
    out = list(chain)
    for n in range(len(out)):
        r = steps[out[n]].client
        if r is not None and r["name"] == "WriterCloses":
            _close_at_decision(steps, out, n)
        if r is None or r["name"] != "WriterChangesEnsemble":
            continue
        q = n
        while q > 0:
            prev = steps[out[q - 1]].client
            if prev is None or prev["name"] not in ("WriterReceivesAddResponse", "WriterSendsAdd"):
                break
            if prev["params"]["lac"] < r["params"]["first"]:
                break  # the LAC was still below the fragment's start: the change came after this
            q -= 1
        if q < n:  # its logged LAC is the one after the write's result; at the decision it was first - 1
            steps[out[n]].client = {**r, "params": {**r["params"], "lac": r["params"]["first"] - 1}}
            out.insert(q, out.pop(n))
    return out


def _close_at_decision(steps: list[_Step], out: list[int], n: int) -> None:
    """Move the writer's close (at `out[n]`) back to its decision, as `_changes_at_decision` does for
    changes: answers taken while the close's write was in flight (logged in the core's transient
    "closing" state, none counted) come after ledger.tla's atomic close, in its outcome's state."""
    r = steps[out[n]].client
    assert r is not None
    q = n
    while q > 0:
        prev = steps[out[q - 1]].client
        if prev is None or prev["name"] != "WriterReceivesAddResponse" or prev["params"]["state"] != "closing":
            break
        after = {"state": r["params"]["state"], "fenced": r["params"]["fenced"]}
        steps[out[q - 1]].client = {**prev, "params": {**prev["params"], **after}}
        q -= 1
    out.insert(q, out.pop(n))


def _sender(
    steps: list[_Step], chain: list[int], kind: str, entry: int, bookie: str, names: dict[str, str]
) -> int | None:
    """The client step that sent a request (ledger.tla: the action that puts it into `msgs`): an add
    by `WriterSendsAdd`, or by the writer's ensemble change after it that made `bookie` the
    replacement; the fencing read-LAC by `RecoveryStarts`; a read of e by the step after which the
    recovery's next entry is e and the bookie it asked last is `bookie` (the covering read-LAC
    answer, the read that found e-1, or the negative answer or timeout before it); a write-back of e
    by the read answer that found e."""
    sent: int | None = None  # an add: its send, or the ensemble change that re-sent it to `bookie`
    for i in chain:
        ev = steps[i].client
        assert ev is not None
        name, p = ev["name"], ev["params"]
        if kind == "add" and name == "WriterSendsAdd" and p["entry"] == entry:
            sent = i
            continue
        if kind == "add" and sent is not None and name == "WriterChangesEnsemble" and p["outcome"] == "OPEN":
            if names.get(p["replacement"], p["replacement"]) == bookie and p["first"] <= entry:
                sent = i  # re-sent to the replacement
            continue
        if kind == "readLac" and name == "RecoveryStarts":
            return i
        if kind == "read" and p.get("phase") == "reading" and p.get("next") == entry and not p.get("end_found"):
            asked = p.get("asked")  # sequential reads: the step that asked this bookie
            if asked is None or names.get(asked, asked) == bookie:
                return i
        found = name == "RecoveryReceivesReadResponse" and p["found"] and not p["stale"]
        if kind == "recoveryAdd" and found and p["entry"] == entry:
            return i
    return sent


def _topological(steps: list[_Step], edges: list[tuple[int, int]]) -> list[int] | tuple[int, ...]:
    """Kahn's algorithm; among ready steps the earliest by the clock (then by log and position).
    A list: the order; a tuple: a cycle (each step must precede the next, the last the first)."""
    after: list[list[int]] = [[] for _ in steps]
    before = [0] * len(steps)
    for a, b in edges:
        after[a].append(b)
        before[b] += 1
    ready = [(s.order, i) for i, s in enumerate(steps) if before[i] == 0]
    heapq.heapify(ready)
    out: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(i)
        for j in after[i]:
            before[j] -= 1
            if before[j] == 0:
                heapq.heappush(ready, (steps[j].order, j))
    if len(out) == len(steps):
        return out
    left = set(range(len(steps))) - set(out)
    back: dict[int, int] = {}  # every step left has a predecessor left
    for a in sorted(left):
        for b in after[a]:
            if b in left:
                back.setdefault(b, a)
    path: list[int] = []
    seen: dict[int, int] = {}
    i = min(left)
    while i not in seen:
        seen[i] = len(path)
        path.append(i)
        i = back[i]
    return tuple(reversed(path[seen[i] :]))


def _events(step: _Step, ledger_id: int, names: dict[str, str], lost: bool = False) -> list[Event]:
    if step.env is not None:
        return list(step.env)
    out = []
    if step.handling is not None:
        p = step.handling["params"]
        out.append(
            Event(
                "BookieHandles",
                {
                    "bookie": step.bookie,
                    "ledger": LEDGER_ID if p["ledger"] == ledger_id else p["ledger"],
                    "kind": p["kind"],
                    "entry": p["entry"],
                    "entries": p["entries"],
                    "fenced": p["fenced"],
                },
            )
        )
    if step.client is not None and not lost:
        params = dict(step.client["params"])
        for key in _BOOKIE_PARAMS:
            if key in params:
                params[key] = names.get(params[key], params[key])
        out.append(Event(step.client["name"], {"client": step.client_name, **params}))
    elif step.handling is not None:  # handled, but no core saw (or heeded) the reply
        p = step.handling["params"]
        client = KIND_CLIENT[p["kind"]]
        out.append(
            Event("ReplyLost", {"kind": p["kind"], "client": client, "bookie": step.bookie, "entry": p["entry"]})
        )
    return out
