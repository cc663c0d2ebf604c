"""spec/storage.tla against the storage lifecycle core (impl/broker/storage_lifecycle.py).

What runs is the production core: a `StorageLifecycle` per broker (the one that loaded the topic last),
fed with typed events through `step`; its trim decision is `trimmable`, the managed ledger's own. The
harness is its shell: the metadata store (the ledger list and the compaction cursor, each with its
version, written by compare-and-set), the bookies (which ledgers still have their bookie copy), the
tiered store (objects by (ledger, uid), partial while uploading), the compacted ledgers, the
subscription's persisted mark-delete and who owns the topic. Ledger i of the spec is ledger id i with
one entry, Position(i, 0), of 1 MB (retention `Retain` ledgers = retention_size_mb Retain); entry i's
key is storage.tla's Key(i). The uid of an offload is its broker's name.

Mapping (spec action [lastAction params] -> what the harness does):

  Acquire [broker]            the takeover's write of the list (version + 1); a new core for the broker,
                              step(Load(list, version, compaction cursor)); its uploads and writes are
                              abandoned
  Ack [position]              the subscription's persisted mark-delete moves one entry
  Trim [broker, outcome]      step(TrimRequested(slowest = min(subscription, compaction horizon))) ->
                              WriteList, performed with the outcome (ok / badversion: the store's
                              compare-and-set; lost_applied / lost_not_applied: a fault, answered
                              WriteUnknown), the answer fed back, its deletions performed
  OffloadStart [broker, ledger]  step(OffloadRequested(ledger, uid)) -> Upload: a partial object
  OffloadUploaded [broker]    the object completes; step(Uploaded) -> WriteList, held until the record
  OffloadRecord [broker, outcome]  the held WriteList performed with the outcome, the answer fed back
  DeleteBookieCopy [broker]   the deletion lag passes: step(DeletionLagPassed) -> DeleteBookieCopy
  CompactStart [broker, horizon] step(CompactRequested(Position(h, 0))) -> ReadForCompaction, read from
                              the compacted ledger and through the list (refused if anything is
                              missing) -> CompactionRead -> WriteCompactedLedger (the next id) ->
                              CompactedLedgerWritten -> WriteCompactionCursor, held until the swap
  CompactSwap [broker, outcome]  the held cursor write performed with the outcome, the answer fed back

The abstraction reads `known` and `op` from the cores (a fenced core or none: not loaded) and the
rest from the harness's shell state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from conformance.replay import Candidate, Names
from conformance.tla_values import Function, ModelValue, Record, Value
from impl.broker.ledger_list import LedgerInfo, Position
from impl.broker.managed_ledger_core import MB
from impl.broker.storage_lifecycle import (
    BadVersion,
    CompactedLedgerWritten,
    CompactionCursor,
    CompactionRead,
    CompactRequested,
    CursorWritten,
    DeleteBookieCopy,
    DeleteBookieLedgers,
    DeleteCompactedLedger,
    DeleteObject,
    DeletionLagPassed,
    Fenced,
    KeyedEntry,
    LifecycleConfig,
    LifecycleState,
    ListedLedger,
    ListWritten,
    Load,
    OffloadRequested,
    Output,
    ReadForCompaction,
    ScheduleBookieDeletion,
    Stage,
    StorageLifecycle,
    TrimRequested,
    Upload,
    Uploaded,
    WriteCompactedLedger,
    WriteCompactionCursor,
    WriteList,
    WriteUnknown,
)

SPEC = "storage.tla"
NO_UID = "none"
OUTCOMES = ("ok", "badversion", "lost_applied", "lost_not_applied")


class StorageHarnessError(Exception):
    """The spec step has no counterpart here (nothing held, a guard the shell cannot meet, ...)."""


def pos(index: int) -> Position:
    return Position(index, 0)


@dataclass
class StorageWorld:
    brokers: list[str]
    num_ledgers: int
    num_keys: int
    list_version: int
    listed: tuple[ListedLedger, ...]
    cursor: CompactionCursor
    sub: int = 0
    bookies: set[int] = field(default_factory=set)
    objects: dict[tuple[int, str], str] = field(default_factory=dict)  # (ledger, uid) -> partial | complete
    compacted: dict[int, tuple[KeyedEntry, ...]] = field(default_factory=dict)  # every one created
    compacted_exists: set[int] = field(default_factory=set)
    cores: dict[str, StorageLifecycle] = field(default_factory=dict)
    held: dict[str, WriteList | WriteCompactionCursor] = field(default_factory=dict)  # writes awaiting their step
    uploading: dict[str, tuple[int, str]] = field(default_factory=dict)
    lag: dict[str, int] = field(default_factory=dict)  # broker -> ledger whose deletion lag is running
    owner: str = ""
    moves: int = 0
    faults: int = 0

    def key(self, index: int) -> str:
        return str((index - 1) % self.num_keys + 1)

    def read(self, ledger: int) -> str:
        """storage.tla's Read(l): through the list's offload record, else from the bookies."""
        uid = next((x.offload_uid for x in self.listed if x.ledger_id == ledger), None)
        if uid is not None:
            return {"complete": "data", "partial": "partial"}.get(self.objects.get((ledger, uid), ""), "missing")
        return "data" if ledger in self.bookies else "missing"


class StorageMapping:
    spec = SPEC
    symmetric: frozenset[ModelValue] = frozenset()  # no SYMMETRY in the models
    counterexamples_are_followed = False  # every violating model is a mutation the core must refuse

    def __init__(self, constants: Mapping[str, Value], *, cores: type[StorageLifecycle] | None = None) -> None:
        self.core_type = cores or StorageLifecycle
        brokers = constants["Brokers"]
        assert isinstance(brokers, frozenset)
        self.brokers = sorted(b.name for b in brokers if isinstance(b, ModelValue))
        ints = {}
        for name in ("NumLedgers", "NumKeys", "Retain", "MaxMoves", "MaxFaults", "MaxCompactions"):
            value = constants[name]
            assert isinstance(value, int)
            ints[name] = value
        self.n, self.keys, self.retain = ints["NumLedgers"], ints["NumKeys"], ints["Retain"]
        self.max_moves, self.max_faults, self.max_comps = ints["MaxMoves"], ints["MaxFaults"], ints["MaxCompactions"]
        deletes = constants["Deletes"]
        assert isinstance(deletes, frozenset)
        self.deletes = frozenset(int(d) for d in deletes if isinstance(d, int))  # empty payloads: tombstones
        self.config = LifecycleConfig(retention_size_mb=self.retain, deletion_lag_s=60)

    # ---- setting up ---------------------------------------------------------------------------
    def _new_core(self, world: StorageWorld, broker: str) -> None:
        core = self.core_type(f"persistent://t/ns/topic@{broker}", self.config)
        self._perform(world, broker, core.step(Load(world.listed, world.list_version, world.cursor)))
        world.cores[broker] = core
        world.held.pop(broker, None)
        world.uploading.pop(broker, None)
        world.lag.pop(broker, None)

    def initial(self, state: Mapping[str, Value]) -> tuple[StorageWorld, Names]:
        owner = state["owner"]
        assert isinstance(owner, ModelValue)
        world = StorageWorld(
            self.brokers,
            self.n,
            self.keys,
            list_version=1,
            listed=tuple(ListedLedger(LedgerInfo(i, 1, MB, 0.0)) for i in range(1, self.n + 1)),
            cursor=CompactionCursor(1),
            bookies=set(range(1, self.n + 1)),
            owner=owner.name,
        )
        self._new_core(world, owner.name)
        return world, {}

    # ---- the shell ----------------------------------------------------------------------------
    def _perform(self, world: StorageWorld, broker: str, outputs: list[Output]) -> None:
        for out in outputs:
            if isinstance(out, (WriteList, WriteCompactionCursor)):
                if broker in world.held:
                    raise StorageHarnessError(f"{broker} has two writes out")
                world.held[broker] = out
            elif isinstance(out, Upload):
                world.objects[(out.ledger_id, out.uid)] = "partial"
                world.uploading[broker] = (out.ledger_id, out.uid)
            elif isinstance(out, DeleteObject):
                world.objects.pop((out.ledger_id, out.uid), None)
            elif isinstance(out, ScheduleBookieDeletion):
                world.lag[broker] = out.ledger_id
            elif isinstance(out, DeleteBookieCopy):
                world.bookies.discard(out.ledger_id)
            elif isinstance(out, DeleteBookieLedgers):
                world.bookies.difference_update(out.ledger_ids)
            elif isinstance(out, DeleteCompactedLedger):
                world.compacted_exists.discard(out.ledger_id)
            elif isinstance(out, ReadForCompaction):
                self._read_for_compaction(world, broker, out)
            elif isinstance(out, WriteCompactedLedger):
                if len(world.compacted) >= self.max_comps:
                    raise StorageHarnessError("no compacted ledger left to create")
                new = len(world.compacted) + 1
                world.compacted[new] = out.entries
                world.compacted_exists.add(new)
                self._perform(world, broker, world.cores[broker].step(CompactedLedgerWritten(new)))
            elif isinstance(out, Fenced):
                pass
            else:  # pragma: no cover - the Output union is closed
                raise StorageHarnessError(f"unknown output {out!r}")

    def _read_for_compaction(self, world: StorageWorld, broker: str, out: ReadForCompaction) -> None:
        entries: list[KeyedEntry] = []
        if out.previous is not None:
            if out.previous not in world.compacted_exists:
                raise StorageHarnessError(f"compacted ledger {out.previous} is gone: the read fails")
            entries += world.compacted[out.previous]
        first = out.after.ledger_id + 1 if out.after is not None else 1
        for i in range(first, out.upto.ledger_id + 1):
            if world.read(i) != "data":
                raise StorageHarnessError(f"entry {i} cannot be read: the compaction's read fails")
            value = None if i in self.deletes else f"value-{i}".encode()
            entries.append(KeyedEntry(pos(i), world.key(i), value))
        self._perform(world, broker, world.cores[broker].step(CompactionRead(tuple(entries))))

    def _write(self, world: StorageWorld, broker: str, outcome: str) -> None:
        """Perform the broker's held conditional write with the spec's outcome; feed the answer back."""
        write = world.held.pop(broker, None)
        if write is None:
            raise StorageHarnessError(f"{broker} has no write out")
        if isinstance(write, WriteList):
            matches = write.expected_version == world.list_version
        else:
            matches = write.expected_version == world.cursor.version
        if outcome in ("ok", "lost_applied") and not matches or outcome == "badversion" and matches:
            raise StorageHarnessError(f"the store does not answer {outcome} to this write")
        if outcome.startswith("lost"):
            if world.faults >= self.max_faults:
                raise StorageHarnessError("no fault left")
            world.faults += 1
        applied = outcome in ("ok", "lost_applied")
        if applied and isinstance(write, WriteList):
            world.list_version += 1
            world.listed = write.ledgers
        elif applied and isinstance(write, WriteCompactionCursor):
            world.cursor = CompactionCursor(world.cursor.version + 1, write.horizon, write.ledger_id)
        new_version = world.list_version if isinstance(write, WriteList) else world.cursor.version
        if outcome == "ok":
            answer: object = ListWritten(new_version) if isinstance(write, WriteList) else CursorWritten(new_version)
        elif outcome == "badversion":
            answer = BadVersion()
        else:
            answer = WriteUnknown("the metadata session expired before the answer")
        self._perform(world, broker, world.cores[broker].step(answer))  # type: ignore[arg-type]

    def _core(self, world: StorageWorld, broker: str) -> StorageLifecycle:
        core = world.cores.get(broker)
        if core is None:
            raise StorageHarnessError(f"{broker} never loaded the topic")
        return core

    # ---- actions ------------------------------------------------------------------------------
    def candidates(self, world: StorageWorld, names: Names, action: str) -> list[Candidate]:
        run = getattr(self, f"_{action}", None)
        if run is None:
            raise KeyError(f"storage.tla action {action} has no mapping")
        if action == "Ack":
            return [Candidate("Ack", {}, _bind(run))]
        out: list[Candidate] = []
        for b in self.brokers:
            base: dict[str, Value] = {"broker": ModelValue(b)}
            if action in ("Trim", "OffloadRecord", "CompactSwap"):
                out += [Candidate(f"{action} {b} {o}", {**base, "outcome": o}, _bind(run, b, o)) for o in OUTCOMES]
            elif action == "OffloadStart":
                out += [
                    Candidate(f"{action} {b} ledger {i}", {**base, "ledger": i}, _bind(run, b, i))
                    for i in range(1, self.n + 1)
                ]
            elif action == "CompactStart":
                out += [
                    Candidate(f"{action} {b} to {h}", {**base, "horizon": h}, _bind(run, b, h))
                    for h in range(1, self.n + 1)
                ]
            else:
                out.append(Candidate(f"{action} {b}", base, _bind(run, b)))
        return out

    def _Acquire(self, world: StorageWorld, broker: str) -> None:
        if world.moves >= self.max_moves or broker == world.owner:
            raise StorageHarnessError(f"{broker} cannot take the topic over")
        world.moves += 1
        world.owner = broker
        world.list_version += 1  # the takeover's write of the list (fencing.tla)
        self._new_core(world, broker)

    def _Ack(self, world: StorageWorld) -> None:
        if world.sub >= self.n:
            raise StorageHarnessError("everything is acknowledged")
        world.sub += 1

    def _Trim(self, world: StorageWorld, broker: str, outcome: str) -> None:
        core = self._core(world, broker)
        slowest = min(world.sub, world.cursor.horizon.ledger_id if world.cursor.horizon else 0)
        mark = pos(slowest) if slowest else Position(1, -1)
        self._perform(world, broker, core.step(TrimRequested(0.0, mark, True)))
        self._write(world, broker, outcome)

    def _OffloadStart(self, world: StorageWorld, broker: str, ledger: int) -> None:
        if ledger not in world.bookies:
            raise StorageHarnessError(f"ledger {ledger} has no bookie copy to upload")
        self._perform(world, broker, self._core(world, broker).step(OffloadRequested(ledger, broker)))

    def _OffloadUploaded(self, world: StorageWorld, broker: str) -> None:
        if broker not in world.uploading:
            raise StorageHarnessError(f"{broker} uploads nothing")
        ledger, uid = world.uploading.pop(broker)
        world.objects[(ledger, uid)] = "complete"
        self._perform(world, broker, self._core(world, broker).step(Uploaded(ledger, uid)))

    def _OffloadRecord(self, world: StorageWorld, broker: str, outcome: str) -> None:
        if not isinstance(world.held.get(broker), WriteList):
            raise StorageHarnessError(f"{broker} has no offload record out")
        self._write(world, broker, outcome)

    def _DeleteBookieCopy(self, world: StorageWorld, broker: str) -> None:
        ledger = world.lag.pop(broker, None)
        if ledger is None or ledger not in world.bookies:
            raise StorageHarnessError(f"{broker} has no bookie copy to delete")
        self._perform(world, broker, self._core(world, broker).step(DeletionLagPassed(ledger)))

    def _CompactStart(self, world: StorageWorld, broker: str, horizon: int) -> None:
        self._perform(world, broker, self._core(world, broker).step(CompactRequested(pos(horizon))))

    def _CompactSwap(self, world: StorageWorld, broker: str, outcome: str) -> None:
        if not isinstance(world.held.get(broker), WriteCompactionCursor):
            raise StorageHarnessError(f"{broker} has no compaction swap out")
        self._write(world, broker, outcome)

    # ---- the abstraction ----------------------------------------------------------------------
    def abstract(self, world: StorageWorld, names: Names) -> dict[str, Value]:
        ledgers = range(1, self.n + 1)

        def uid(x: ListedLedger | None) -> Value:
            return ModelValue(x.offload_uid) if x is not None and x.offload_uid is not None else NO_UID

        def offloaded(listed: tuple[ListedLedger, ...]) -> tuple[Value, ...]:
            by_id = {x.ledger_id: x for x in listed}
            return tuple(uid(by_id.get(i)) for i in ledgers)

        def index(p: Position | None) -> int:
            return p.ledger_id if p is not None else 0

        def known(b: str) -> Record:
            core = world.cores.get(b)
            if core is None or core.state is not LifecycleState.LOADED:
                return Record.of({"loaded": False})
            return Record.of(
                {
                    "loaded": True,
                    "version": core.version,
                    "ledgers": frozenset(x.ledger_id for x in core.ledgers),
                    "offloaded": offloaded(core.ledgers),
                    "cversion": core.compaction.version,
                    "cledger": core.compaction.ledger_id or 0,
                    "chorizon": index(core.compaction.horizon),
                }
            )

        def op(b: str) -> Record:
            core = world.cores.get(b)
            o = core.op if core is not None else None
            if o is None:
                return Record.of({"kind": "none"})
            if o.kind == "offload":
                stage = {Stage.UPLOADING: "uploading", Stage.RECORDING: "uploaded", Stage.RECORDED: "recorded"}
                return Record.of({"kind": "offload", "ledger": o.ledger_id or 0, "stage": stage[o.stage]})
            return Record.of(
                {"kind": o.kind, "ledger": o.ledger_id or 0, "horizon": index(o.horizon), "prev": o.previous or 0}
            )

        return {
            "ml": Record.of(
                {
                    "version": world.list_version,
                    "ledgers": frozenset(x.ledger_id for x in world.listed),
                    "offloaded": offloaded(world.listed),
                }
            ),
            "cnode": Record.of(
                {
                    "version": world.cursor.version,
                    "ledger": world.cursor.ledger_id or 0,
                    "horizon": index(world.cursor.horizon),
                }
            ),
            "sub": world.sub,
            "bookies": frozenset(world.bookies),
            "tiered": Function.of(
                {(i, ModelValue(b)): world.objects.get((i, b), "none") for i in ledgers for b in self.brokers}
            ),
            "cdata": tuple(
                frozenset(e.position.ledger_id for e in world.compacted.get(c, ()))
                for c in range(1, self.max_comps + 1)
            ),
            "cexists": frozenset(world.compacted_exists),
            "ncomp": len(world.compacted),
            "owner": ModelValue(world.owner),
            "known": Function.of({ModelValue(b): known(b) for b in self.brokers}),
            "op": Function.of({ModelValue(b): op(b) for b in self.brokers}),
            "moves": world.moves,
            "faults": world.faults,
        }


def _bind(run: Callable[..., None], *args: object) -> Callable[[StorageWorld], None]:
    return lambda world: run(world, *args)
