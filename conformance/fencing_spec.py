"""spec/fencing.tla against the implementation: the action mapping and the abstraction function.

What runs is the production code: one `ManagedLedgerCore` per broker (impl/broker/
managed_ledger_core.py), the in-memory metadata store (sessions, the ephemeral ownership
node, the versioned ledger-list node, ledger metadata through `LedgerMetadataStore` and the
transitions), one `BookieCore`, a `LedgerWriter` per ledger a broker created and a
`RecoveryOp` per recovery. The harness performs the managed ledger's outputs as its shell
(impl/broker/managed_ledger.py) does, each to completion within the spec step (fencing.tla
abstracts BookKeeper: an add is one step, recovery one fence-and-close step). Ledgers are
E=Qw=Qa=1 on the one bookie: what reached it is what reached Qa.

The brokers' ownership beliefs are the harness's model of a broker (as metadata_spec.py's
clients are): the store decides sessions, expiry and the ephemeral node; the broker believes
what it last did. The subscription (Consume) is a counter of consumed messages.

Mapping (spec action [lastAction params] -> what the harness does):

  ExpireSession [broker]           MemoryStore.expire_session() of its session; the broker is not told
  Reconnect [broker]               MemoryServer.connect(): a new session for the broker
  AcquireOwnership [broker]        create the ownership node, ephemeral (NodeExists: refused)
  RevalidateOwnership [broker, lost]
                                   node absent: create it again; else the broker unloads the topic:
                                   ManagedLedgerCore.close(), a new core for the next open
  ReadLedgerList [broker, version] core.open(); ReadLedgerList -> get(list node) -> on_ledger_list
  RecoverLastLedger [broker, ledger]
                                   the held RecoverLastLedger: a RecoveryOp run to its end (StartRecovery
                                   CW, fencing read-LAC, reads, write-back, RecoveryClose CW) ->
                                   on_ledger_recovered (an empty last ledger leaves the core's list; its
                                   DeleteLedgers follows the list write, as in fencing.tla); an empty
                                   snapshot: nothing (see below)
  CreateLedgerAndWriteList [broker, ledger, expectedVersion, badVersion]
                                   the held CreateLedger: the next ledger id created (metadata OPEN,
                                   a LedgerWriter) -> on_ledger_created -> WriteLedgerList, the
                                   conditional write (create when absent) -> on_list_written /
                                   on_list_bad_version
  AddEntry [broker, ledger, msg, fenced]
                                   core.add(msg) -> SendAdd -> LedgerWriter.add -> the bookie ->
                                   writer.receive -> on_add_completed, or on_add_failed (fenced)
  AddEntryAckLost [broker, ledger, msg]
                                   core.add(msg) -> SendAdd -> LedgerWriter.add -> the bookie stores
                                   it; the reply is dropped (never given to the writer), and the broker
                                   unloads the topic as after RevalidateOwnership (lost), keeping its
                                   ownership belief; the producer gives the message up
  Rollover [broker, from, to, expectedVersion, closeOk, badVersion]
                                   time passes beyond the ledger's age limit: core.tick(now) ->
                                   CloseLedger -> writer close (WriterClose CW) -> on_ledger_closed /
                                   on_ledger_close_failed -> CreateLedger -> WriteLedgerList as above
  TrimConsumedLedger [broker, ledger, badVersion]
                                   core.trim(slowest = the consumed position, capped at the end of the
                                   snapshot's head ledger: the spec trims one ledger a step) ->
                                   WriteLedgerList -> on_list_written -> DeleteLedgers (metadata
                                   deleted; the bookie keeps its data and fence until garbage collection)
  Consume                          the harness's subscription consumes the next entry of the topic's
                                   log (the listed ledgers' entries up to each closed end)
  CloseFencedManagedLedger [broker]
                                   core.close(); a new core for the next open

Harness choices where the cores do more than the spec (each documented, none hides a state):
  - the core reads an empty list and goes to RECOVERED at once (nothing to recover): the spec's
    RecoverLastLedger(b) with ledger 0 is then the harness's step, and until it the abstraction
    reports `reading`;
  - a DeleteLedgers of an orphan (a ledger created for a list write that failed) is not performed:
    fencing.tla keeps the orphan open;
  - unloading an open managed ledger (RevalidateOwnership, lost) outputs a writer close of its
    current ledger; fencing.tla's unload leaves the ledger as it is, so the close is not performed
    (as if the broker lost its connections first).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from conformance.replay import Candidate, Names
from conformance.tla_values import Function, ModelValue, Record, Value
from impl.bookie.client.errors import LedgerFencedError
from impl.bookie.client.ledger_update import UpdateMetadata
from impl.bookie.client.metadata_writes import apply_change
from impl.bookie.client.recovery import RecoveryDone, RecoveryFailed, RecoveryOp
from impl.bookie.client.writer import AddCompleted, AddFailed, CloseFailed, LedgerWriter, Send, WriterClosed
from impl.bookie.core import AppendJournal, BookieCore, ReadEntry, Reply, StoreEntry
from impl.bookie.entry_format import decode_entry
from impl.bookie.protocol import AddResponse, ErrorCode, Request, Response
from impl.broker.ledger_list import LedgerList, Position
from impl.broker.managed_ledger_core import (
    CloseLedger,
    CompleteAdd,
    CreateLedger,
    DeleteLedgers,
    FailAdd,
    ManagedLedgerConfig,
    ManagedLedgerCore,
    ManagedLedgerState,
    Output,
    ReadLedgerList,
    RecoverLastLedger,
    SendAdd,
    TrimDone,
    WriteLedgerList,
)
from impl.metadata.layout import ledger_path
from impl.metadata.ledger import Fragment, LedgerMetadata, LedgerState
from impl.metadata.ledger_store import LedgerMetadataStore, NoSuchLedger
from impl.metadata.memory import MemoryServer, MemoryStore
from impl.metadata.serde import deserialize
from impl.metadata.store import BadVersion, MetadataError, NodeExists, NoNode

SPEC = "fencing.tla"
TOPIC = "tenant/ns/persistent/topic"
LIST_PATH = "/managed-ledgers/tenant/ns/persistent/topic"
OWNER_PATH = "/namespace/tenant/ns/0x00000000_0xffffffff"
BOOKIE = "bookie-1:3181"
PASSWORD = b"fencing"
CONFIG = ManagedLedgerConfig(ensemble=1, write_quorum=1, ack_quorum=1, max_ledger_age_s=1.0, password=PASSWORD)


class FencingHarnessError(Exception):
    """The cores did something the spec step has no room for (reported as a refusal of the step)."""


def payload(msg: int) -> bytes:
    return f"message-{msg}".encode()


@dataclass
class Broker:
    store: MemoryStore  # its current metadata session
    ml: ManagedLedgerCore
    believes: bool = False  # the broker thinks it owns the bundle
    writers: dict[int, LedgerWriter] = field(default_factory=dict)  # ledgers it created, open for writing
    held: list[Output] = field(default_factory=list)  # outputs waiting for their spec step
    recover_step_due: bool = False  # read an empty list: the spec's RecoverLastLedger(b, 0) is still due


@dataclass
class FencingWorld:
    server: MemoryServer
    bookkeeper: LedgerMetadataStore  # ledger metadata, on a session of the harness's own
    bookie: BookieCore
    brokers: dict[str, Broker]
    max_ledgers: int
    max_messages: int
    bodies: dict[tuple[int, int], bytes] = field(default_factory=dict)  # the bookie's ledger storage
    next_ledger: int = 1
    created: set[int] = field(default_factory=set)
    deleted_end: dict[int, int] = field(default_factory=dict)  # deleted ledger -> its lastEntry (spec's)
    acked: list[tuple[int, int, str, Position]] = field(default_factory=list)  # msg, ledger, broker, position
    next_msg: int = 1
    lost_acks: int = 0
    consumed: int = 0
    consumed_at: Position | None = None  # the log position of the last entry consumed
    trimmed: int = 0
    expiries: int = 0
    now: float = 0.0
    _request_id: int = 0

    # ---- the bookie -----------------------------------------------------------------------------
    def bookie_handles(self, request: Request) -> Response:
        self._request_id += 1
        pending = list(self.bookie.handle(request, self._request_id))
        replies: list[Reply] = []
        while pending:
            out = pending.pop(0)
            if isinstance(out, AppendJournal):
                pending.extend(self.bookie.on_durable(out.token))
            elif isinstance(out, StoreEntry):
                self.bodies[(out.ledger_id, out.entry_id)] = out.body
            elif isinstance(out, ReadEntry):
                replies.append(out.reply(self.bodies.get((out.ledger_id, out.entry_id))))
            else:
                replies.append(out)
        if len(replies) != 1:
            raise FencingHarnessError(f"the bookie answered {replies} to one request")
        return replies[0].response

    # ---- BookKeeper client cores, run to completion --------------------------------------------------
    def _run_client(self, client: LedgerWriter | RecoveryOp, outputs: list[Any]) -> list[Any]:
        """Perform a client core's sends and metadata updates until it has none left; return its other outputs."""
        results: list[Any] = []
        queue = list(outputs)
        while queue:
            out = queue.pop(0)
            if isinstance(out, Send):
                queue += client.receive(out.bookie, out.request, self.bookie_handles(out.request))
            elif isinstance(out, UpdateMetadata):
                queue += client.on_metadata_result(apply_change(self.bookkeeper, out.change))
            else:
                results.append(out)
        return results

    def recover(self, ledger_id: int) -> LedgerMetadata:
        metadata, _ = self.bookkeeper.read(ledger_id)
        op = RecoveryOp(ledger_id, metadata)
        for out in self._run_client(op, op.start()):
            if isinstance(out, RecoveryDone):
                return out.metadata
            if isinstance(out, RecoveryFailed):
                raise FencingHarnessError(f"recovery of ledger {ledger_id} failed: {out.error}")
        raise FencingHarnessError(f"recovery of ledger {ledger_id} did not finish")

    # ---- performing a managed ledger's outputs (its shell) -------------------------------------------
    def perform(self, name: str, outputs: list[Output]) -> None:
        broker = self.brokers[name]
        queue = list(outputs)
        while queue:
            out = queue.pop(0)
            core = broker.ml
            if isinstance(out, ReadLedgerList):
                try:
                    data, stat = broker.store.get(LIST_PATH)
                    queue += core.on_ledger_list(data, stat.version)
                except NoNode:
                    queue += core.on_ledger_list(None, None)
            elif isinstance(out, RecoverLastLedger | CreateLedger):
                broker.held.append(out)  # the spec's next step (RecoverLastLedger, CreateLedgerAndWriteList)
            elif isinstance(out, WriteLedgerList):
                queue += self._write_list(broker, out)
            elif isinstance(out, SendAdd):
                queue += self._send_add(broker, out)
            elif isinstance(out, CloseLedger):
                queue += self._close_ledger(broker, out.ledger_id)
            elif isinstance(out, DeleteLedgers):
                # Deleted by a fenced (or closed) core: orphans of a list write that failed.
                self._delete(
                    out.ledger_ids, orphans=core.state in (ManagedLedgerState.FENCED, ManagedLedgerState.CLOSED)
                )
            elif isinstance(out, CompleteAdd):
                self.acked.append((out.token, out.position.ledger_id, name, out.position))
                self.next_msg = out.token + 1
            elif isinstance(out, TrimDone):
                pass  # counted at the deletion
            elif isinstance(out, FailAdd):
                pass  # the producer is told; the message is published again as the same next message
            # Opened, OpenFailed, NotifyConfirmed: nothing for the harness to do

    def create_ledger(self, broker: Broker) -> list[Output]:
        ledger_id = self.next_ledger
        if ledger_id > self.max_ledgers:
            raise FencingHarnessError(f"no ledger id left (MaxLedgers = {self.max_ledgers})")
        metadata = LedgerMetadata(1, 1, 1, (Fragment(0, (BOOKIE,)),), password=PASSWORD)
        self.bookkeeper.create_with_id(ledger_id, metadata)
        self.next_ledger += 1
        self.created.add(ledger_id)
        broker.writers[ledger_id] = LedgerWriter(ledger_id, metadata)
        return broker.ml.on_ledger_created(ledger_id, self.now)

    def _write_list(self, broker: Broker, out: WriteLedgerList) -> list[Output]:
        store = broker.store
        try:
            if out.expected_version is None:
                store.create(LIST_PATH, out.data)
                version = 0
            else:
                version = store.set(LIST_PATH, out.data, out.expected_version).version
        except (BadVersion, NodeExists, NoNode) as e:
            return broker.ml.on_list_bad_version(type(e).__name__)
        except MetadataError as e:
            return broker.ml.on_list_write_failed(f"{type(e).__name__}: {e}")
        return broker.ml.on_list_written(version)

    def _send_add(self, broker: Broker, out: SendAdd) -> list[Output]:
        writer = broker.writers[out.ledger_id]
        for result in self._run_client(writer, writer.add(out.data)):
            if isinstance(result, AddCompleted):
                return broker.ml.on_add_completed(out.ledger_id, result.entry_id)
            if isinstance(result, AddFailed):
                fenced = isinstance(result.error, LedgerFencedError)
                return broker.ml.on_add_failed(out.ledger_id, out.entry_id, fenced, str(result.error))
        raise FencingHarnessError(f"the add to ledger {out.ledger_id} neither completed nor failed")

    def _close_ledger(self, broker: Broker, ledger_id: int) -> list[Output]:
        writer = broker.writers.pop(ledger_id)
        try:
            results = self._run_client(writer, writer.close())
        except NoSuchLedger as e:  # deleted by a trim meanwhile
            return broker.ml.on_ledger_close_failed(ledger_id, False, str(e))
        for result in results:
            if isinstance(result, WriterClosed):
                md = result.metadata
                return broker.ml.on_ledger_closed(ledger_id, md.last_entry_id, md.length, self.now)
            if isinstance(result, CloseFailed):
                return broker.ml.on_ledger_close_failed(ledger_id, False, str(result.error))
        raise FencingHarnessError(f"the writer close of ledger {ledger_id} reported nothing")

    def _delete(self, ledger_ids: tuple[int, ...], *, orphans: bool) -> None:
        if orphans:
            return  # an orphan's deletion: fencing.tla keeps the orphan (see the module's header)
        for ledger_id in ledger_ids:
            if ledger_id in self.deleted_end:
                continue  # deleted already (a stale snapshot listed it)
            metadata, _ = self.bookkeeper.read(ledger_id)
            self.bookkeeper.delete(ledger_id)
            end = metadata.last_entry_id + 1 if metadata.state is LedgerState.CLOSED else 0
            self.deleted_end[ledger_id] = end
            self.trimmed += end

    # ---- queries ------------------------------------------------------------------------------------
    def alive(self, name: str) -> bool:
        session = self.server.sessions.get(self.brokers[name].store.session_id)
        return session is not None and session.alive

    def log(self) -> list[Position]:
        """The topic's log as a reader of the list sees it: each listed ledger up to its closed end."""
        node = self.server.nodes.get(LIST_PATH)
        positions: list[Position] = []
        for ledger_id in _listed(node.data) if node is not None else ():
            metadata = _metadata(self.server.nodes[_ledger_path(ledger_id)].data)
            if metadata.state is LedgerState.CLOSED:
                entries: list[int] = list(range(metadata.last_entry_id + 1))
            else:
                state = self.bookie.ledgers.get(ledger_id)
                entries = sorted(state.entries) if state is not None else []
            positions += [Position(ledger_id, e) for e in entries]
        return positions

    def messages(self, ledger_id: int) -> tuple[int, ...]:
        """The messages the bookie stores for a ledger, in entry order."""
        state = self.bookie.ledgers.get(ledger_id)
        if state is None:
            return ()
        return tuple(_message(self.bodies[(ledger_id, e)], ledger_id, e) for e in sorted(state.entries))


CONFIG_DIGEST = LedgerMetadata(1, 1, 1, (Fragment(0, (BOOKIE,)),)).digest_type


# The abstraction decodes the same stored bytes again and again (each state is abstracted after
# every step): each decoding below is a function of its bytes alone, so it is done once per value.
@lru_cache(maxsize=4096)
def _message(body: bytes, ledger_id: int, entry_id: int) -> int:
    """The message an entry's body carries (digest and ids verified as a reader does)."""
    entry = decode_entry(body, CONFIG_DIGEST, PASSWORD, ledger_id, entry_id)
    return int(entry.payload.decode().rsplit("-", 1)[1])


_metadata = lru_cache(maxsize=4096)(deserialize)


@lru_cache(maxsize=4096)
def _listed(data: bytes) -> tuple[int, ...]:
    """The ledger ids of a stored ledger list."""
    return tuple(i.ledger_id for i in LedgerList.decode(data).ledgers)


_ledger_path = lru_cache(maxsize=None)(ledger_path)


class FencingMapping:
    spec = SPEC
    symmetric: frozenset[ModelValue] = frozenset()  # the ci models have no SYMMETRY

    def __init__(self, constants: Mapping[str, Value], *, cores: type[ManagedLedgerCore] | None = None) -> None:
        self.core_type = cores or ManagedLedgerCore  # tests swap in a broken core
        brokers = constants["Brokers"]
        assert isinstance(brokers, frozenset)
        self.brokers = sorted((b for b in brokers if isinstance(b, ModelValue)), key=str)
        max_ledgers, max_messages = constants["MaxLedgers"], constants["MaxMessages"]
        assert isinstance(max_ledgers, int) and isinstance(max_messages, int)
        self.max_ledgers, self.max_messages = max_ledgers, max_messages
        # A counterexample of the protocol's own configuration is a reachability witness, which the
        # implementation must follow; one of a mutation (no fencing, writing on after a bad
        # version: bugs the implementation fixed) is a regression trace, which it must refuse.
        self.counterexamples_are_followed = (
            constants["FenceOnRecovery"] is True and constants["FenceOnBadVersion"] is True
        )

    def _core(self) -> ManagedLedgerCore:
        return self.core_type(TOPIC, CONFIG)

    def initial(self, state: Mapping[str, Value]) -> tuple[FencingWorld, Names]:
        server = MemoryServer()
        setup = server.connect()  # the parents of the ownership and list nodes (created at install)
        for path in (OWNER_PATH, LIST_PATH):
            setup.ensure_path(path.rsplit("/", 1)[0])
        world = FencingWorld(
            server,
            LedgerMetadataStore(setup),
            BookieCore(),
            {b.name: Broker(server.connect(), self._core()) for b in self.brokers},
            self.max_ledgers,
            self.max_messages,
        )
        return world, {}

    def candidates(self, world: FencingWorld, names: Names, action: str) -> list[Candidate]:
        run = getattr(self, f"_{action}", None)
        if run is None:
            raise KeyError(f"fencing.tla action {action} has no mapping")
        ready = getattr(self, f"_ready_{action}", None)  # the action's read-only precondition
        if action == "Consume":
            return [Candidate("Consume", {}, run, ready)]

        def bind(step: Callable[[FencingWorld, str], None], name: str) -> Callable[[FencingWorld], None]:
            return lambda w: step(w, name)

        return [
            Candidate(f"{action} {b}", {"broker": b}, bind(run, b.name), bind(ready, b.name) if ready else None)
            for b in self.brokers
        ]

    # ---- sessions and ownership ----------------------------------------------------------------------
    @staticmethod
    def _ExpireSession(world: FencingWorld, name: str) -> None:
        world.brokers[name].store.expire_session()
        world.expiries += 1

    # (an action's `_ready_` check is its precondition, read-only; the action runs it first)
    @staticmethod
    def _ready_Reconnect(world: FencingWorld, name: str) -> None:
        if world.alive(name):
            raise FencingHarnessError(f"{name}'s session is alive: nothing to reconnect")

    def _Reconnect(self, world: FencingWorld, name: str) -> None:
        self._ready_Reconnect(world, name)
        world.brokers[name].store = world.server.connect()

    @staticmethod
    def _ready_AcquireOwnership(world: FencingWorld, name: str) -> None:
        if world.brokers[name].believes:
            raise FencingHarnessError(f"{name} already believes it owns the bundle")

    def _AcquireOwnership(self, world: FencingWorld, name: str) -> None:
        self._ready_AcquireOwnership(world, name)
        broker = world.brokers[name]
        broker.store.create(OWNER_PATH, name.encode(), ephemeral=True)  # NodeExists: refused
        broker.believes = True

    @staticmethod
    def _ready_RevalidateOwnership(world: FencingWorld, name: str) -> None:
        broker = world.brokers[name]
        if not broker.believes or not world.alive(name):
            raise FencingHarnessError(f"{name} has nothing to revalidate")
        node = world.server.nodes.get(OWNER_PATH)
        if node is not None and node.ephemeral_owner == broker.store.session_id:
            raise FencingHarnessError(f"{name} holds the ownership node")

    def _RevalidateOwnership(self, world: FencingWorld, name: str) -> None:
        self._ready_RevalidateOwnership(world, name)
        broker = world.brokers[name]
        node = world.server.nodes.get(OWNER_PATH)
        if node is None:
            broker.store.create(OWNER_PATH, name.encode(), ephemeral=True)
            return
        broker.believes = False
        self._unload(world, name)

    def _unload(self, world: FencingWorld, name: str) -> None:
        broker = world.brokers[name]
        broker.ml.close()  # its writer close of the current ledger is not performed (see the header)
        broker.ml = self._core()
        broker.held.clear()
        broker.recover_step_due = False

    # ---- the managed ledger ---------------------------------------------------------------------------
    @staticmethod
    def _ready_ReadLedgerList(world: FencingWorld, name: str) -> None:
        if not world.brokers[name].believes or not world.alive(name):
            raise FencingHarnessError(f"{name} does not own the topic or has no session")

    def _ReadLedgerList(self, world: FencingWorld, name: str) -> None:
        self._ready_ReadLedgerList(world, name)
        broker = world.brokers[name]
        world.perform(name, broker.ml.open())
        broker.recover_step_due = broker.ml.state is ManagedLedgerState.RECOVERED

    @staticmethod
    def _held(broker: Broker, kind: type) -> Any:
        for out in broker.held:
            if isinstance(out, kind):
                return out
        raise FencingHarnessError(f"the managed ledger has no {kind.__name__} to perform")

    def _take(self, broker: Broker, kind: type) -> Any:
        out = self._held(broker, kind)
        broker.held.remove(out)
        return out

    @staticmethod
    def _ready_session(world: FencingWorld, name: str) -> None:
        if not world.alive(name):
            raise FencingHarnessError(f"{name} has no session")

    def _ready_RecoverLastLedger(self, world: FencingWorld, name: str) -> None:
        self._ready_session(world, name)
        broker = world.brokers[name]
        if not broker.recover_step_due:
            self._held(broker, RecoverLastLedger)

    def _RecoverLastLedger(self, world: FencingWorld, name: str) -> None:
        self._ready_RecoverLastLedger(world, name)
        broker = world.brokers[name]
        if broker.recover_step_due:  # an empty list: nothing to recover
            broker.recover_step_due = False
            return
        out = self._take(broker, RecoverLastLedger)
        try:
            md = world.recover(out.ledger_id)
        except NoSuchLedger:  # listed but deleted: recovered as empty, as the shell does
            world.perform(name, broker.ml.on_ledger_recovered(out.ledger_id, -1, 0))
            return
        world.perform(name, broker.ml.on_ledger_recovered(out.ledger_id, md.last_entry_id, md.length))

    def _ready_CreateLedgerAndWriteList(self, world: FencingWorld, name: str) -> None:
        broker = world.brokers[name]
        if not world.alive(name) or broker.recover_step_due:
            raise FencingHarnessError(f"{name} cannot create a ledger now")
        self._held(broker, CreateLedger)

    def _CreateLedgerAndWriteList(self, world: FencingWorld, name: str) -> None:
        self._ready_CreateLedgerAndWriteList(world, name)
        broker = world.brokers[name]
        self._take(broker, CreateLedger)
        world.perform(name, world.create_ledger(broker))

    @staticmethod
    def _ready_AddEntry(world: FencingWorld, name: str) -> None:
        if world.next_msg > world.max_messages:
            raise FencingHarnessError("no message left to publish")

    def _AddEntry(self, world: FencingWorld, name: str) -> None:
        self._ready_AddEntry(world, name)
        broker = world.brokers[name]
        world.perform(name, broker.ml.add(world.next_msg, payload(world.next_msg), world.now))

    def _AddEntryAckLost(self, world: FencingWorld, name: str) -> None:
        self._ready_AddEntry(world, name)
        broker = world.brokers[name]
        outputs = broker.ml.add(world.next_msg, payload(world.next_msg), world.now)
        sends = [o for o in outputs if isinstance(o, SendAdd)]
        if len(sends) != 1 or len(outputs) != 1:
            raise FencingHarnessError(f"{name}'s managed ledger did not send the add: {outputs}")
        writer = broker.writers[sends[0].ledger_id]
        for out in writer.add(sends[0].data):
            if not isinstance(out, Send):
                raise FencingHarnessError(f"the writer did not send the add: {out}")
            reply = world.bookie_handles(out.request)
            if not isinstance(reply, AddResponse) or reply.code is not ErrorCode.EOK:  # the spec's step stores it
                raise FencingHarnessError(f"the bookie refused the add to ledger {sends[0].ledger_id}")
        world.next_msg += 1
        world.lost_acks += 1
        self._unload(world, name)

    _ready_Rollover = _ready_session

    def _Rollover(self, world: FencingWorld, name: str) -> None:
        self._ready_Rollover(world, name)
        broker = world.brokers[name]
        world.now += CONFIG.max_ledger_age_s
        world.perform(name, broker.ml.tick(world.now))
        if broker.held:  # the rollover's CreateLedger: in the same step
            self._take(broker, CreateLedger)
            world.perform(name, world.create_ledger(broker))

    @staticmethod
    def _ready_Consume(world: FencingWorld) -> None:
        if world.consumed >= world.trimmed + len(world.log()):
            raise FencingHarnessError("nothing to consume")

    def _Consume(self, world: FencingWorld) -> None:
        self._ready_Consume(world)
        world.consumed_at = world.log()[world.consumed - world.trimmed]
        world.consumed += 1

    _ready_TrimConsumedLedger = _ready_session

    def _TrimConsumedLedger(self, world: FencingWorld, name: str) -> None:
        self._ready_TrimConsumedLedger(world, name)
        broker = world.brokers[name]
        ml = broker.ml
        slowest = world.consumed_at
        if slowest is not None and ml.ledgers:
            head = ml.ledgers[0]
            if slowest.ledger_id > head.ledger_id:  # one ledger a step, as the spec
                slowest = Position(head.ledger_id, head.entries - 1)
        world.perform(name, ml.trim(world.now, slowest, cursors=True))

    @staticmethod
    def _ready_CloseFencedManagedLedger(world: FencingWorld, name: str) -> None:
        if world.brokers[name].ml.state is not ManagedLedgerState.FENCED:
            raise FencingHarnessError(f"{name}'s managed ledger is not fenced")

    def _CloseFencedManagedLedger(self, world: FencingWorld, name: str) -> None:
        self._ready_CloseFencedManagedLedger(world, name)
        self._unload(world, name)

    # ---- the abstraction --------------------------------------------------------------------------------
    def abstract(self, world: FencingWorld, names: Names) -> dict[str, Value]:
        server = world.server
        owner = server.nodes.get(OWNER_PATH)
        owner_name: Value = "none"
        if owner is not None:
            holders = [b for b in self.brokers if world.brokers[b.name].store.session_id == owner.ephemeral_owner]
            owner_name = holders[0] if holders else ModelValue(f"<session {owner.ephemeral_owner}>")
        node = server.nodes.get(LIST_PATH)
        if node is None:
            listed: Value = Record.of({"version": 0, "ledgers": ()})
        else:
            ids = _listed(node.data)
            listed = Record.of({"version": node.version + 1, "ledgers": ids})

        def per_broker(value: Callable[[str], Value]) -> Function:
            return Function.of({b: value(b.name) for b in self.brokers})

        return {
            "session": per_broker(lambda n: "alive" if world.alive(n) else "expired"),
            "believesOwner": per_broker(lambda n: world.brokers[n].believes),
            "ownerNode": owner_name,
            "expiries": world.expiries,
            "list": listed,
            # a function on 1..MaxLedgers is a sequence (as TLC prints it)
            "ledger": tuple(self._ledger(world, lid) for lid in range(1, self.max_ledgers + 1)),
            "nextLedger": world.next_ledger,
            "ml": per_broker(lambda n: self._ml(world.brokers[n])),
            "acked": tuple(
                Record.of({"msg": msg, "ledger": lid, "broker": ModelValue(b)}) for msg, lid, b, _ in world.acked
            ),
            "nextMsg": world.next_msg,
            "lostAcks": world.lost_acks,
            "consumed": world.consumed,
            "trimmed": world.trimmed,
        }

    @staticmethod
    def _ledger(world: FencingWorld, ledger_id: int) -> Record:
        state = world.bookie.ledgers.get(ledger_id)
        fenced = bool(state and state.fenced)
        if ledger_id not in world.created:
            return Record.of({"state": "unused", "entries": (), "lastEntry": 0, "fenced": fenced})
        if ledger_id in world.deleted_end:
            end = world.deleted_end[ledger_id]
            return Record.of({"state": "deleted", "entries": (), "lastEntry": end, "fenced": fenced})
        # the stored metadata, read from the store's tree as the ownership and list nodes are
        metadata = _metadata(world.server.nodes[_ledger_path(ledger_id)].data)
        closed = metadata.state is LedgerState.CLOSED
        return Record.of(
            {
                "state": "closed" if closed else "open",  # IN_RECOVERY is never seen between steps
                "entries": world.messages(ledger_id),
                "lastEntry": metadata.last_entry_id + 1 if closed else 0,
                "fenced": fenced,
            }
        )

    @staticmethod
    def _ml(broker: Broker) -> Record:
        core = broker.ml
        state = "reading" if broker.recover_step_due else core.state.value
        return Record.of(
            {
                "state": state,
                "version": 0 if core.version is None else core.version + 1,
                "ledgers": tuple(i.ledger_id for i in core.ledgers),
                "current": core.current or 0,
            }
        )


__all__ = ["SPEC", "FencingMapping", "FencingWorld"]
