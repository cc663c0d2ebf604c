"""spec/cursor.tla against the durable cursor's pure core (impl/broker/cursor_core.py).

What runs is the production code: a `ManagedCursorCore` per broker (a fresh one each time the
broker opens the cursor, as a broker loading the topic builds it), configured as the spec is
(`cursor_persist_interval_s = 0`: every acknowledgement written through; `cursor_max_entries =
MaxEntries`), fed with typed events through `step`. The harness is its shell: it keeps the cursor's
metadata node (the data the core wrote and its version), the cursor ledgers (entries as the core
encoded them, fenced, deleted), the ownership node, the consumer's acknowledgements and each
broker's dispatcher position, and performs the core's outputs, one I/O of a core at a time, when
the spec performs it.

Mapping (spec action [lastAction params] -> what the harness does):

  OpenCursor [broker, ledger, version]
                          a fresh core: step(Open(None)) -> ReadCursorNode, answered at once with
                          step(NodeRead(node data, version)) -> RecoverCursorLedger (kept in flight)
  SessionExpires [broker] the ownership node is gone; the broker's core is not told
  RecoverCursorLedger [broker, ledger, gone, md]
                          the ledger is fenced and its last entry read: step(CursorLedgerRecovered);
                          a deleted one: step(CursorLedgerRecoveryFailed(no_such_ledger=True))
                          -> CreateCursorLedger
  CreateCursorLedger [broker, ledger, md]
                          the next ledger id: step(CursorLedgerCreated) -> AppendCursorState (its
                          first entry: stored at once, nobody else knows the ledger) ->
                          step(CursorStateAppended) -> WriteCursorNode (kept in flight)
  WriteCursorNode [broker, ledger, written, applied, lost]
                          the conditional write of the node: step(CursorNodeWritten(version)) ->
                          DeleteCursorLedger(old) (done at once), Opened (delivery resumes after the
                          core's mark-delete), the queued append; or
                          step(CursorNodeWriteFailed(BadVersion)) -> DeleteCursorLedger(orphan), and
                          OpenFailed or the cursor FENCED; with LostNodeAnswers, the answer lost after
                          the write applied or with the request: step(CursorNodeWriteFailed(OTHER))
  Deliver [broker, msg]   the broker's dispatcher delivers its next message (the core is not involved)
  Acknowledge [broker, msg]
                          step(MarkDelete(position of msg)) -> AppendCursorState, or queued behind the
                          I/O in flight
  AppendCursorState [broker, ledger, md, fenced]
                          the append: step(CursorStateAppended) (-> the next append, or a switch:
                          CreateCursorLedger) or, the ledger fenced, step(CursorStateAppendFailed(fenced))

The abstraction reads the spec's per-broker variables from the core (`status`, `io`, `state`,
`_writing`, `_candidate`, `ledger_id`, `ledger_entries`, `node_version`, `_switch`) and the shared
ones from the harness (the node's data is decoded: its cursor ledger and mark-delete). Message m of
the topic is `Position(TOPIC_LEDGER, m - 1)`; mark-delete 0 is before the first message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from conformance.replay import Candidate, Names
from conformance.tla_values import Function, ModelValue, Record, Value
from impl.broker.cursor_core import (
    AppendCursorState,
    CompleteRequest,
    CreateCursorLedger,
    CursorLedgerCreated,
    CursorLedgerRecovered,
    CursorLedgerRecoveryFailed,
    CursorNodeWriteFailed,
    CursorNodeWritten,
    CursorState,
    CursorStateAppended,
    CursorStateAppendFailed,
    CursorStatus,
    DeleteCursorLedger,
    FailRequest,
    FenceManagedLedger,
    Io,
    ManagedCursorCore,
    MarkDelete,
    NodeError,
    NodeRead,
    Open,
    Opened,
    OpenFailed,
    Output,
    PersistFailed,
    ReadCursorNode,
    RecoverCursorLedger,
    WriteCursorNode,
)
from impl.broker.ledger_list import Position, TopicView
from impl.broker.managed_ledger_core import ManagedLedgerConfig
from impl.metadata.store import ANY_VERSION

SPEC = "cursor.tla"
TOPIC = "persistent://public/default/cursor-spec"
SUBSCRIPTION = "sub"
TOPIC_LEDGER = 7  # the topic's one data ledger (its id space is not the cursor ledgers')
NOW = 0.0  # write-through: the core reads no time that matters
NONE = "none"

# ManagedCursorCore.io -> cursor.tla's io (reading the node and writing a new ledger's first entry are
# performed within the step that asks for them, so the spec never sees them in flight)
IO = {
    Io.IDLE: "idle",
    Io.RECOVERING_LEDGER: "recover",
    Io.CREATING_LEDGER: "create",
    Io.WRITING_NODE: "node",
    Io.APPENDING: "append",
}
STATUS = {
    CursorStatus.CLOSED: "closed",
    CursorStatus.OPENING: "opening",
    CursorStatus.OPEN: "open",
    CursorStatus.FENCED: "fenced",
}


_Io = TypeVar("_Io", RecoverCursorLedger, CreateCursorLedger, AppendCursorState, WriteCursorNode)


class CursorHarnessError(Exception):
    """The spec step has no counterpart here (no such I/O in flight, nothing to deliver, ...)."""


def position(md: int) -> Position:
    """The topic position of mark-delete `md` (messages 1..md acknowledged; 0: none)."""
    return Position(TOPIC_LEDGER, md - 1)


def md_of(p: Position) -> int:
    return p.entry_id + 1 if p.ledger_id == TOPIC_LEDGER else 0


def md_of_data(data: bytes) -> int:
    return md_of(CursorState.decode(data).mark_delete)


@dataclass
class CursorLedger:
    entries: list[bytes]  # encoded CursorState, as appended
    fenced: bool = False
    deleted: bool = False


@dataclass
class CursorWorld:
    brokers: list[str]
    view: TopicView  # the topic: messages 1..MaxMsgs, all confirmed
    node_data: bytes
    node_version: int
    ledgers: list[CursorLedger]  # ledger id = index + 1
    cores: dict[str, ManagedCursorCore | None]
    in_flight: dict[str, Output | None]  # the one I/O each core asked for, not performed yet
    read_pos: dict[str, int]
    owner: str | None = None
    expiries: int = 0
    acked: int = 0
    tokens: int = 0
    failed: list[str] = field(default_factory=list)  # requests failed (for a reader of a mismatch)

    def ledger(self, ledger_id: int) -> CursorLedger:
        if not 1 <= ledger_id <= len(self.ledgers):
            raise CursorHarnessError(f"no cursor ledger {ledger_id}")
        return self.ledgers[ledger_id - 1]

    def core(self, broker: str) -> ManagedCursorCore:
        core = self.cores[broker]
        if core is None:
            raise CursorHarnessError(f"{broker} has no cursor")
        return core

    def take(self, broker: str, kind: type[_Io]) -> _Io:
        out = self.in_flight[broker]
        if not isinstance(out, kind):
            raise CursorHarnessError(f"{broker} has no {kind.__name__} in flight (it has {out!r})")
        self.in_flight[broker] = None
        return out

    def perform(self, broker: str, outputs: list[Output]) -> None:
        """The core's outputs as its shell performs them: the I/O it asks for is kept in flight (one at a
        time), except what the spec does within the same step (reading the node, a new ledger's first
        entry), which is answered at once; deletions are done at once."""
        core = self.core(broker)
        work = list(outputs)
        while work:
            out = work.pop(0)
            if isinstance(out, ReadCursorNode):
                work += core.step(NodeRead(self.node_data, self.node_version, NOW))
            elif isinstance(out, AppendCursorState) and core.io is Io.WRITING_FIRST_ENTRY:
                ledger = self.ledger(out.ledger_id)
                if ledger.entries:
                    raise CursorHarnessError(f"the first entry of ledger {out.ledger_id} is not its first")
                ledger.entries.append(out.data)
                work += core.step(CursorStateAppended(out.ledger_id, NOW))
            elif isinstance(out, RecoverCursorLedger | CreateCursorLedger | AppendCursorState | WriteCursorNode):
                if self.in_flight[broker] is not None:
                    raise CursorHarnessError(f"{broker} asked for {out!r} with {self.in_flight[broker]!r} in flight")
                self.in_flight[broker] = out
            elif isinstance(out, DeleteCursorLedger):
                self.ledger(out.ledger_id).deleted = True
            elif isinstance(out, Opened):
                self.read_pos[broker] = md_of(core.state.mark_delete)  # delivery resumes after the mark-delete
            elif isinstance(out, FailRequest):
                self.failed.append(f"{broker}: {out.error}")
            elif isinstance(out, CompleteRequest | OpenFailed | FenceManagedLedger | PersistFailed):
                pass  # the request's, the open's and the managed ledger's business; a line in the log
            else:
                raise CursorHarnessError(f"{broker}'s core asked for {out!r}, which the spec has no step for")


class CursorMapping:
    spec = SPEC
    symmetric: frozenset[ModelValue] = frozenset()  # no SYMMETRY in the models

    def __init__(self, constants: Mapping[str, Value], *, cores: type[ManagedCursorCore] | None = None) -> None:
        self.core_type = cores or ManagedCursorCore  # tests swap in a broken core
        brokers = constants["Brokers"]
        assert isinstance(brokers, frozenset)
        self.brokers = sorted(b.name for b in brokers if isinstance(b, ModelValue))
        self.max_msgs, max_entries = _bound(constants, "MaxMsgs"), _bound(constants, "MaxEntries")
        self.max_ledgers, self.max_expiries = _bound(constants, "MaxLedgers"), _bound(constants, "MaxExpiries")
        self.config = ManagedLedgerConfig(cursor_max_entries=max_entries, cursor_persist_interval_s=0)
        self.lost_answers = constants["LostNodeAnswers"] is True  # a failure of the environment, not a bug
        # The mutation switches are bugs the core does not have: their counterexamples are regression
        # traces, which it must refuse; the witness is the protocol's own behaviour, to be followed.
        mutations = ("NoRecovery", "PersistOnDelivery", "BlindNodeWrite", "DeleteAfterLostAnswer")
        self.counterexamples_are_followed = all(constants[k] is False for k in mutations) and (
            constants.get("Mutation", "none") == "none"  # issue 47's mutations: bugs too
        )

    def _new_core(self) -> ManagedCursorCore:
        return self.core_type(TOPIC, SUBSCRIPTION, self.config)

    def initial(self, state: Mapping[str, Value]) -> tuple[CursorWorld, Names]:
        first = CursorState(position(0))
        world = CursorWorld(
            self.brokers,
            view=TopicView(((TOPIC_LEDGER, self.max_msgs),)),
            node_data=self._new_core().node(1, first),  # the cursor as its creator left it
            node_version=0,
            ledgers=[CursorLedger([first.encode()])],
            cores={b: None for b in self.brokers},
            in_flight={b: None for b in self.brokers},
            read_pos={b: 0 for b in self.brokers},
        )
        return world, {}

    def candidates(self, world: CursorWorld, names: Names, action: str) -> list[Candidate]:
        run = getattr(self, f"_{action}", None)
        if run is None:
            raise KeyError(f"cursor.tla action {action} has no mapping")
        if action == "SessionExpires":
            return [Candidate(action, {}, run)]
        if action == "WriteCursorNode":  # (answer lost, applied): answered, or lost after or before applying
            outcomes = [(False, True)] + ([(True, True), (True, False)] if self.lost_answers else [])
            candidates = []
            for b in self.brokers:
                for lost, applied in outcomes:
                    params: dict[str, Value] = {"broker": ModelValue(b), "lost": lost}
                    label = f"{action} {b}"
                    if lost:
                        params["applied"] = applied
                        label += f" (answer lost, {'applied' if applied else 'not applied'})"
                    candidates.append(Candidate(label, params, _bind(run, b, lost, applied)))
            return candidates
        if action == "Acknowledge":
            return [
                Candidate(f"{action} {b} {m}", {"broker": ModelValue(b), "msg": m}, _bind(run, b, m))
                for b in self.brokers
                for m in range(1, self.max_msgs + 1)
            ]
        return [Candidate(f"{action} {b}", {"broker": ModelValue(b)}, _bind(run, b)) for b in self.brokers]

    # ---- actions ------------------------------------------------------------------------------
    def _OpenCursor(self, world: CursorWorld, broker: str) -> None:
        if world.owner not in (None, broker):
            raise CursorHarnessError(f"{world.owner} owns the topic")
        old = world.cores[broker]
        if old is not None and old.status not in (CursorStatus.CLOSED, CursorStatus.FENCED):
            raise CursorHarnessError(f"{broker}'s cursor is {old.status.value}")
        world.owner = broker
        core = world.cores[broker] = self._new_core()
        world.in_flight[broker] = None
        world.read_pos[broker] = 0
        world.perform(broker, core.step(Open(None, NOW)))

    def _SessionExpires(self, world: CursorWorld) -> None:
        if world.owner is None or world.expiries >= self.max_expiries:
            raise CursorHarnessError("no owner, or no expiry left")
        world.owner = None
        world.expiries += 1

    @staticmethod
    def _RecoverCursorLedger(world: CursorWorld, broker: str) -> None:
        out = world.take(broker, RecoverCursorLedger)
        ledger = world.ledger(out.ledger_id)
        if ledger.deleted:
            event: CursorLedgerRecoveryFailed | CursorLedgerRecovered = CursorLedgerRecoveryFailed(
                out.ledger_id, True, "no such ledger", NOW
            )
        else:
            ledger.fenced = True
            event = CursorLedgerRecovered(out.ledger_id, ledger.entries[-1] if ledger.entries else None, NOW)
        world.perform(broker, world.core(broker).step(event))

    def _CreateCursorLedger(self, world: CursorWorld, broker: str) -> None:
        if len(world.ledgers) >= self.max_ledgers:
            raise CursorHarnessError("no cursor ledger left to create")
        world.take(broker, CreateCursorLedger)
        world.ledgers.append(CursorLedger([]))
        world.perform(broker, world.core(broker).step(CursorLedgerCreated(len(world.ledgers), NOW)))

    @staticmethod
    def _WriteCursorNode(world: CursorWorld, broker: str, lost: bool, applied: bool) -> None:
        """The conditional write; `lost`: the answer is lost (a connection loss), after the write applied
        (`applied`) or with the request."""
        out = world.take(broker, WriteCursorNode)
        matches = out.expected_version in (ANY_VERSION, world.node_version)
        if lost and applied and not matches:
            raise CursorHarnessError(f"{broker}'s write expects version {out.expected_version}: it cannot apply")
        event: CursorNodeWritten | CursorNodeWriteFailed
        if out.expected_version is None:
            event = CursorNodeWriteFailed(NodeError.NODE_EXISTS, "the cursor node exists", NOW)
        elif matches and (applied or not lost):
            world.node_data, world.node_version = out.data, world.node_version + 1
            event = CursorNodeWritten(world.node_version, NOW)
        else:
            event = CursorNodeWriteFailed(NodeError.BAD_VERSION, f"version {world.node_version}", NOW)
        if lost:
            event = CursorNodeWriteFailed(
                NodeError.OTHER, "connection lost: the write may or may not have applied", NOW
            )
        world.perform(broker, world.core(broker).step(event))

    def _Deliver(self, world: CursorWorld, broker: str) -> None:
        core = world.core(broker)
        if core.status is not CursorStatus.OPEN or world.read_pos[broker] >= self.max_msgs:
            raise CursorHarnessError(f"{broker} has nothing to deliver")
        world.read_pos[broker] += 1

    @staticmethod
    def _Acknowledge(world: CursorWorld, broker: str, msg: int) -> None:
        core = world.core(broker)
        if msg > world.read_pos[broker]:
            raise CursorHarnessError(f"{broker} has not delivered message {msg}")
        world.tokens += 1
        world.acked = max(world.acked, msg)
        world.perform(broker, core.step(MarkDelete(world.tokens, position(msg), world.view, NOW)))

    @staticmethod
    def _AppendCursorState(world: CursorWorld, broker: str) -> None:
        out = world.take(broker, AppendCursorState)
        ledger = world.ledger(out.ledger_id)
        event: CursorStateAppended | CursorStateAppendFailed
        if ledger.fenced:
            event = CursorStateAppendFailed(out.ledger_id, True, "the cursor ledger is fenced", NOW)
        else:
            ledger.entries.append(out.data)
            event = CursorStateAppended(out.ledger_id, NOW)
        world.perform(broker, world.core(broker).step(event))

    # ---- the abstraction ----------------------------------------------------------------------
    def abstract(self, world: CursorWorld, names: Names) -> dict[str, Value]:
        node = json.loads(world.node_data)

        def per_broker(value: Callable[[ManagedCursorCore | None], Value]) -> Value:
            return Function.of({ModelValue(b): value(world.cores[b]) for b in self.brokers})

        def switch(core: ManagedCursorCore | None) -> Value:
            s = core._switch if core is not None else None
            if s is None:
                return Record.of({"old": 0, "new": 0, "md": 0})
            return Record.of({"old": s.old_ledger, "new": s.new_ledger or 0, "md": md_of(s.state.mark_delete)})

        def io(core: ManagedCursorCore | None) -> Value:
            if core is None:
                return "idle"
            return IO.get(core.io, core.io.value)

        return {
            "owner": ModelValue(world.owner) if world.owner is not None else NONE,
            "expiries": world.expiries,
            "node": Record.of(
                {
                    "ledger": int(node["cursor_ledger"]),
                    "md": md_of(CursorState.from_json(node["state"]).mark_delete),
                    "version": world.node_version,
                }
            ),
            "ledgers": tuple(
                Record.of(
                    {
                        "entries": tuple(md_of_data(e) for e in ledger.entries),
                        "fenced": ledger.fenced,
                        "deleted": ledger.deleted,
                    }
                )
                for ledger in world.ledgers
            ),
            "acked": world.acked,
            "status": per_broker(lambda c: STATUS.get(c.status, c.status.value) if c is not None else "closed"),
            "io": per_broker(io),
            "md": per_broker(lambda c: md_of(c.state.mark_delete) if c is not None else 0),
            "writing": per_broker(
                lambda c: md_of(c._writing.state.mark_delete) if c is not None and c._writing is not None else 0
            ),
            "candidate": per_broker(
                lambda c: md_of(c._candidate.mark_delete) if c is not None and c._candidate is not None else -1
            ),
            "curLedger": per_broker(lambda c: c.ledger_id or 0 if c is not None else 0),
            "nEntries": per_broker(lambda c: c.ledger_entries if c is not None else 0),
            "version": per_broker(lambda c: c.node_version if c is not None else 0),
            "switch": per_broker(switch),
            "readPos": Function.of({ModelValue(b): n for b, n in world.read_pos.items()}),
        }


def _bound(constants: Mapping[str, Value], name: str) -> int:
    value = constants[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"cursor.tla's {name} must be an integer, got {value!r}")
    return value


def _bind(run: Callable[..., None], *args: object) -> Callable[[CursorWorld], None]:
    return lambda world: run(world, *args)
