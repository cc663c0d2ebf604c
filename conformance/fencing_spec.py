"""spec/fencing.tla against the implementation: the action mapping and the abstraction function.

What runs is the production code: per broker an `OwnershipCore` (impl/broker/ownership_core.py)
and a `ManagedLedgerCore` (impl/broker/managed_ledger_core.py), the subscription's
`ManagedCursorCore` (impl/broker/cursor_core.py), the in-memory metadata store (sessions, the
ephemeral ownership node, the versioned ledger-list node, ledger metadata through
`LedgerMetadataStore` and the transitions), one bookie (a `SimBookie`, conformance/sim_bookie.py:
the production `BookieCore` over a journal and ledger storage in memory), a `LedgerWriter` per
ledger a broker created and a `RecoveryOp` per recovery. The harness is their shell: it performs
the managed ledger's outputs as impl/broker/managed_ledger.py does, the ownership core's as
impl/broker/ownership.py does and the cursor's as impl/broker/cursor.py does
(conformance/fencing_shells.py), each to completion within the spec step (fencing.tla abstracts
BookKeeper: an add is one step, recovery one fence-and-close step). Ledgers are E=Qw=Qa=1 on the
one bookie: what reached it is what reached Qa.

Mapping (spec action [lastAction params] -> what the harness does):

  ExpireSession [broker]           MemoryStore.expire_session() of its session: the store deletes the
                                   ownership node; the EXPIRED notification waits for the broker's next
                                   ownership input (the spec's broker is not told)
  Reconnect [broker]               MemoryServer.connect(): the broker's metadata client has a new session
                                   (the managed ledger uses it from now on); the ownership core hears of
                                   it with the notification
  AcquireOwnership [broker]        the notifications, then OwnershipCore.step(Acquire) -> CreateOwnershipNode
                                   (ephemeral, on the core's session) -> NodeCreated -> WatchOwnNode ->
                                   NodeWatched -> CompleteRequest(True); NodeExists -> CheckOwnershipNode ->
                                   CompleteRequest(False): refused
  RevalidateOwnership [broker, lost]
                                   the notifications: SessionExpiredEvent -> BundlesLost (the core drops
                                   the bundle), Reconnect(new session). lost: BundlesLost unloads the topic
                                   (ManagedLedgerCore step(Close), a new core for the next open), as the
                                   broker's `_bundles_lost`. Not lost (the node is free): the core cannot
                                   re-create a node from a belief it dropped, so the broker acquires the
                                   bundle afresh (step(Acquire), as a lookup does) and the harness keeps
                                   the topic loaded across the loss, which the broker does not do (see
                                   "Where the harness is not the broker's shell" below)
  ReadLedgerList [broker, version] core.step(Open) -> ReadLedgerList -> get(list node) -> LedgerListRead
  RecoverLastLedger [broker, ledger]
                                   the held RecoverLastLedger: a RecoveryOp run to its end (StartRecovery
                                   CW, fencing read-LAC, reads, write-back, RecoveryClose CW) ->
                                   LastLedgerRecovered (an empty last ledger leaves the core's list; its
                                   DeleteLedgers follows the list write, as in fencing.tla); an empty
                                   snapshot: nothing (see below)
  CreateLedgerAndWriteList [broker, ledger, expectedVersion, badVersion]
                                   the held CreateLedger: the next ledger id created (metadata OPEN,
                                   a LedgerWriter) -> LedgerCreated -> WriteLedgerList, the
                                   conditional write (create when absent) -> LedgerListWritten /
                                   LedgerListBadVersion
  AddEntry [broker, ledger, msg, fenced]
                                   core.step(Add(msg)) -> SendAdd -> LedgerWriter.add -> the bookie ->
                                   writer.receive -> AddCompleted, or AddFailed (fenced)
  AddEntryAckLost [broker, ledger, msg]
                                   core.step(Add(msg)) -> SendAdd -> LedgerWriter.add -> the bookie stores
                                   it; the reply is dropped (never given to the writer), and the broker
                                   closes the topic (a new core for the next open), keeping its
                                   ownership; the producer gives the message up
  Rollover [broker, from, to, expectedVersion, closeOk, badVersion]
                                   time passes beyond the ledger's age limit (the broker's own clock):
                                   core.step(Tick(now)) -> CloseLedger -> writer close (WriterClose CW)
                                   -> LedgerClosed / LedgerCloseFailed -> CreateLedger -> WriteLedgerList
                                   as above
  (MultiStepRollover: Pulsar's rollover in steps, adds queued meanwhile)
  QueueAddEntry [broker, msg, phase]
                                   core.step(Add(msg)): queued by a core whose rollover is under way, or
                                   sent behind the queued adds in flight, which then waits with them; the
                                   producer has published it
  RolloverCloseLedger [broker, ledger, closeOk]
                                   Tick(now) past the age limit -> CloseLedger -> writer close ->
                                   LedgerClosed (-> CreateLedger, held) / LedgerCloseFailed (FENCED)
  RolloverCreateLedger [broker, ledger]
                                   the held CreateLedger: the next ledger created -> LedgerCreated ->
                                   WriteLedgerList, held
  RolloverWriteList [broker, ledger, expectedVersion, queued, badVersion]
                                   the held conditional write -> LedgerListWritten: the core sends its
                                   queued adds to the new ledger, and they wait in flight (held) for
                                   WriteQueuedAdd / LedgerListBadVersion: FENCED, they fail
  WriteQueuedAdd [broker, ledger, msg, fenced]
                                   the first add in flight reaches the bookie -> AddCompleted, or
                                   AddFailed fenced (FENCED: the other adds fail, their sends dropped)
  TrimConsumedLedger [broker, ledger, badVersion]
                                   core.step(Trim(slowest = the cursor core's mark-delete position, capped at
                                   the end of the snapshot's head ledger: the spec trims one ledger a
                                   step)) -> WriteLedgerList -> LedgerListWritten -> DeleteLedgers: the
                                   metadata deleted, then the bookie's garbage collection of the ledger
                                   (BookieCore's ForgetLedger, its entries dropped from storage: the
                                   spec's deletion empties the ledger), so that a stale writer's add is
                                   refused because the bookie remembers the deletion, not by a fence it
                                   would have forgotten (DeletedLedgerRefusesAdds)
  Consume                          the consumer acknowledges the next entry of the topic's log (the
                                   listed ledgers' entries up to each closed end) cumulatively:
                                   ManagedCursorCore.step(MarkDelete(position, the log's TopicView)) ->
                                   CompleteRequest (in effect at once; persisted by the rate-limited
                                   flush, whose timer fires only if due at once: see fencing_shells.py)
  CloseFencedManagedLedger [broker]
                                   core.step(Close); a new core for the next open

The abstraction reads `believesOwner` from each OwnershipCore (`is_owned`), `ml` from each
ManagedLedgerCore, `consumed` from the cursor core's mark-delete position (the entries of the log
at or before it, plus the trimmed ones), and the rest from the store, the bookie and the harness's
counters (`expiries`, `acked`, `nextMsg`, `lostAcks`, `trimmed`).

Harness choices where the cores do more than the spec (each documented, none hides a state):
  - the core reads an empty list and goes to RECOVERED at once (nothing to recover): the spec's
    RecoverLastLedger(b) with ledger 0 is then the harness's step, and until it the abstraction
    reports `reading`;
  - a DeleteLedgers of an orphan (a ledger created for a list write that failed) is not performed:
    fencing.tla keeps the orphan open;
  - unloading an open managed ledger (RevalidateOwnership, lost) outputs a writer close of its
    current ledger; fencing.tla's unload leaves the ledger as it is, so the close is not performed
    (as if the broker lost its connections first);
  - time passes for a broker only in its own rollover steps (each broker has its clock), so another
    broker's rollover does not age its ledger (the core would roll over at its next add, which
    fencing.tla's AddEntry never does);
  - an add the core sends after a rollover's list write (or behind such adds) is in flight until its
    WriteQueuedAdd step: fencing.tla stores the queued adds one a step, so that a takeover can come
    between them;
  - the subscription is one cursor, opened once at the start: fencing.tla's `Consume` belongs to no
    broker (cursor.tla has the cursor's takeover and persistence), so its cursor ledgers and node are
    the harness's and their ids are not the topic's ledger ids.

Where the harness is not the broker's shell (spec/conformance.md, "fencing.tla and the ownership core"):
  - RevalidateOwnership with the node free keeps the topic loaded across the loss the core reports
    (`FencingWorld.kept_loaded` counts it); the broker unloads its topics on every loss;
  - the broker renews its session only after a loss (impl/broker/broker.py `_bundles_lost`); the
    harness reconnects any broker, as the spec's `Reconnect` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from conformance.fencing_shells import CursorSnapshot, FencingHarnessError, OwnershipShell, SubscriptionShell, alive
from conformance.replay import Candidate, Names
from conformance.sim_bookie import SimBookie
from conformance.tla_values import Function, ModelValue, Record, Value
from impl.bookie.client import writer as bk_writer
from impl.bookie.client.errors import LedgerFencedError
from impl.bookie.client.ledger_update import UpdateMetadata
from impl.bookie.client.metadata_writes import apply_change
from impl.bookie.client.recovery import RecoveryDone, RecoveryFailed, RecoveryOp
from impl.bookie.client.writer import CloseFailed, LedgerWriter, Send, WriterClosed
from impl.bookie.core import ForgetLedger
from impl.bookie.entry_format import decode_entry
from impl.bookie.protocol import AddResponse, ErrorCode
from impl.broker.bundles import FULL_RANGE, NamespaceBundle
from impl.broker.cursor_core import ManagedCursorCore
from impl.broker.ledger_list import LedgerList, Position, TopicView
from impl.broker.managed_ledger_core import (
    Add,
    AddCompleted,
    AddFailed,
    Close,
    CloseLedger,
    CompleteAdd,
    CreateLedger,
    DeleteLedgers,
    FailAdd,
    LastLedgerRecovered,
    LedgerClosed,
    LedgerCloseFailed,
    LedgerCreated,
    LedgerListBadVersion,
    LedgerListRead,
    LedgerListWriteFailed,
    LedgerListWritten,
    ManagedLedgerConfig,
    ManagedLedgerCore,
    ManagedLedgerState,
    Open,
    Output,
    Phase,
    ReadLedgerList,
    RecoverLastLedger,
    SendAdd,
    Tick,
    Trim,
    TrimDone,
    WriteLedgerList,
)
from impl.broker.ownership_core import BundlesLost, OwnershipCore
from impl.metadata.layout import ledger_path
from impl.metadata.ledger import Fragment, LedgerMetadata, LedgerState
from impl.metadata.ledger_store import LedgerMetadataStore, NoSuchLedger
from impl.metadata.memory import MemoryServer, MemoryStore
from impl.metadata.naming import NamespaceName
from impl.metadata.serde import deserialize
from impl.metadata.store import BadVersion, MetadataError, NodeExists, NoNode

SPEC = "fencing.tla"
TOPIC = "tenant/ns/persistent/topic"
LIST_PATH = "/managed-ledgers/tenant/ns/persistent/topic"
BUNDLE = NamespaceBundle(NamespaceName("tenant", "ns"), 0, FULL_RANGE)  # the topic's bundle: all of the namespace
OWNER_PATH = BUNDLE.path  # /namespace/tenant/ns/0x00000000_0xffffffff
SUBSCRIPTION = "sub"
BOOKIE = "bookie-1:3181"
PASSWORD = b"fencing"
CONFIG = ManagedLedgerConfig(ensemble=1, write_quorum=1, ack_quorum=1, max_ledger_age_s=1.0, password=PASSWORD)


def payload(msg: int) -> bytes:
    return f"message-{msg}".encode()


@dataclass
class Broker:
    ownership: OwnershipShell  # its OwnershipCore, and its metadata sessions
    ml: ManagedLedgerCore
    writers: dict[int, LedgerWriter] = field(default_factory=dict)  # ledgers it created, open for writing
    held: list[Output] = field(default_factory=list)  # outputs waiting for their spec step
    recover_step_due: bool = False  # read an empty list: the spec's RecoverLastLedger(b, 0) is still due
    # Its clock: time passes for a broker only in its own rollover (a ledger ages past its limit), so that
    # another broker's rollover never ages this one's ledger and turns its next add into a rollover.
    now: float = 0.0

    def adds_held(self) -> bool:
        """Adds it sent wait in flight (a rollover's queued adds: WriteQueuedAdd performs them one a step)."""
        return any(isinstance(out, SendAdd) for out in self.held)

    @property
    def store(self) -> MemoryStore:
        """Its newest metadata session (the managed ledger's)."""
        return self.ownership.current

    def holds(self, session_id: int) -> bool:
        """`session_id` is one of this broker's sessions."""
        return self.ownership.current.session_id == session_id or any(
            s.session_id == session_id for s in self.ownership.stores.values()
        )


@dataclass
class FencingWorld:
    server: MemoryServer
    bookkeeper: LedgerMetadataStore  # ledger metadata, on a session of the harness's own
    bookie: SimBookie  # the one bookie: its core, journal and ledger storage (conformance/sim_bookie.py)
    brokers: dict[str, Broker]
    subscription: CursorSnapshot  # the subscription's cursor (SubscriptionShell): fencing.tla's `consumed`
    max_ledgers: int
    max_messages: int
    next_ledger: int = 1
    created: set[int] = field(default_factory=set)
    deleted_end: dict[int, int] = field(default_factory=dict)  # deleted ledger -> its lastEntry (spec's)
    deleted_fence: dict[int, bool] = field(default_factory=dict)  # deleted ledger -> fenced when collected
    acked: list[tuple[int, int, str, Position]] = field(default_factory=list)  # msg, ledger, broker, position
    next_msg: int = 1
    lost_acks: int = 0
    trimmed: int = 0
    expiries: int = 0
    kept_loaded: int = 0  # RevalidateOwnership re-creating the node: a loss the topic was kept loaded across

    # ---- BookKeeper client cores, run to completion --------------------------------------------------
    def _run_client(self, client: LedgerWriter | RecoveryOp, outputs: list[Any]) -> list[Any]:
        """Perform a client core's sends and metadata updates until it has none left; return its other outputs."""
        results: list[Any] = []
        queue = list(outputs)
        while queue:
            out = queue.pop(0)
            if isinstance(out, Send):
                queue += client.step(bk_writer.BookieAnswered(out.bookie, out.request, self.bookie.answer(out.request)))
            elif isinstance(out, UpdateMetadata):
                queue += client.step(apply_change(self.bookkeeper, out.change))
            else:
                results.append(out)
        return results

    def recover(self, ledger_id: int) -> LedgerMetadata:
        metadata, _ = self.bookkeeper.read(ledger_id)
        op = RecoveryOp(ledger_id, metadata)
        for out in self._run_client(op, op.step(bk_writer.Start())):
            if isinstance(out, RecoveryDone):
                return out.metadata
            if isinstance(out, RecoveryFailed):
                raise FencingHarnessError(f"recovery of ledger {ledger_id} failed: {out.error}")
        raise FencingHarnessError(f"recovery of ledger {ledger_id} did not finish")

    # ---- performing a managed ledger's outputs (its shell) -------------------------------------------
    def perform(self, name: str, outputs: list[Output], *, hold_adds: bool = False) -> None:
        """Perform the outputs and what the core answers to them. `hold_adds`: the adds it sends wait for their
        own spec step (WriteQueuedAdd: a rollover's queued adds, sent when its list write succeeds); so does
        every add sent behind one waiting already."""
        broker = self.brokers[name]
        queue = list(outputs)
        while queue:
            out = queue.pop(0)
            core = broker.ml
            if isinstance(out, ReadLedgerList):
                try:
                    data, stat = broker.store.get(LIST_PATH)
                    queue += core.step(LedgerListRead(data, stat.version))
                except NoNode:
                    queue += core.step(LedgerListRead(None, None))
            elif isinstance(out, RecoverLastLedger | CreateLedger):
                broker.held.append(out)  # the spec's next step (RecoverLastLedger, CreateLedgerAndWriteList)
            elif isinstance(out, WriteLedgerList):
                queue += self._write_list(broker, out)
            elif isinstance(out, SendAdd):
                if hold_adds or broker.adds_held():
                    broker.held.append(out)  # in flight until WriteQueuedAdd
                else:
                    queue += self.send_add(broker, out)
            elif isinstance(out, CloseLedger):
                queue += self._close_ledger(broker, out.ledger_id)
            elif isinstance(out, DeleteLedgers):
                # Deleted by a fenced (or closed) core: orphans of a list write that failed.
                self._delete(
                    out.ledger_ids, orphans=core.state in (ManagedLedgerState.FENCED, ManagedLedgerState.CLOSED)
                )
            elif isinstance(out, CompleteAdd):
                self.acked.append((out.token, out.position.ledger_id, name, out.position))
                self.next_msg = max(self.next_msg, out.token + 1)  # a queued add was published already
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
        return broker.ml.step(LedgerCreated(ledger_id, broker.now))

    def _write_list(self, broker: Broker, out: WriteLedgerList) -> list[Output]:
        store = broker.store
        try:
            if out.expected_version is None:
                store.create(LIST_PATH, out.data)
                version = 0
            else:
                version = store.set(LIST_PATH, out.data, out.expected_version).version
        except (BadVersion, NodeExists, NoNode) as e:
            return broker.ml.step(LedgerListBadVersion(type(e).__name__))
        except MetadataError as e:
            return broker.ml.step(LedgerListWriteFailed(f"{type(e).__name__}: {e}"))
        return broker.ml.step(LedgerListWritten(version))

    def send_add(self, broker: Broker, out: SendAdd) -> list[Output]:
        writer = broker.writers[out.ledger_id]
        for result in self._run_client(writer, writer.step(bk_writer.Add(out.data))):
            if isinstance(result, bk_writer.AddCompleted):
                return broker.ml.step(AddCompleted(out.ledger_id, result.entry_id))
            if isinstance(result, bk_writer.AddFailed):
                fenced = isinstance(result.error, LedgerFencedError)
                return broker.ml.step(AddFailed(out.ledger_id, out.entry_id, fenced, str(result.error)))
        raise FencingHarnessError(f"the add to ledger {out.ledger_id} neither completed nor failed")

    def _close_ledger(self, broker: Broker, ledger_id: int) -> list[Output]:
        writer = broker.writers.pop(ledger_id)
        try:
            results = self._run_client(writer, writer.step(bk_writer.Close()))
        except NoSuchLedger as e:  # deleted by a trim meanwhile
            return broker.ml.step(LedgerCloseFailed(ledger_id, False, str(e)))
        for result in results:
            if isinstance(result, WriterClosed):
                md = result.metadata
                return broker.ml.step(LedgerClosed(ledger_id, md.last_entry_id, md.length, broker.now))
            if isinstance(result, CloseFailed):
                return broker.ml.step(LedgerCloseFailed(ledger_id, False, str(result.error)))
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
            self._collect(ledger_id)

    def _collect(self, ledger_id: int) -> None:
        """The bookie's garbage collection of a ledger whose metadata is gone, as impl/bookie/server.py's
        `collect_garbage` does it: the core forgets the ledger (ForgetLedger: its fence goes with it, and it
        refuses the ledger's adds from now on, `BookieCore.deleted`) and ledger storage drops its entries.
        fencing.tla's deletion empties the ledger at once; its `fenced` flag stays as it was, which the
        harness keeps in `deleted_fence`."""
        state = self.bookie.core.ledgers.get(ledger_id)
        self.deleted_fence[ledger_id] = bool(state and state.fenced)
        self.bookie.core.step(ForgetLedger(ledger_id))
        for key in [k for k in self.bookie.storage if k[0] == ledger_id]:
            del self.bookie.storage[key]

    # ---- queries ------------------------------------------------------------------------------------
    def alive(self, name: str) -> bool:
        return alive(self.brokers[name].store)

    def consumed(self) -> int:
        """The entries of the log at or before the cursor's mark-delete position, and those trimmed."""
        md = self.subscription.mark_delete
        count = self.trimmed
        if md.ledger_id < 0:
            return count  # before the topic's first entry
        node = self.server.nodes.get(LIST_PATH)
        for ledger_id in _listed(node.data) if node is not None else ():
            if ledger_id < md.ledger_id:
                count += len(self._entries(ledger_id))
            elif ledger_id == md.ledger_id:
                count += sum(1 for e in self._entries(ledger_id) if e <= md.entry_id)
        return count

    def view(self) -> TopicView:
        """The log as the cursor is given it (ledger, entries): what the broker's dispatcher reads."""
        counts: dict[int, int] = {}
        for p in self.log():
            counts[p.ledger_id] = counts.get(p.ledger_id, 0) + 1
        return TopicView(tuple(counts.items()))

    def log(self) -> list[Position]:
        """The topic's log as a reader of the list sees it: each listed ledger up to its closed end."""
        node = self.server.nodes.get(LIST_PATH)
        return [
            Position(ledger_id, e)
            for ledger_id in (_listed(node.data) if node is not None else ())
            for e in self._entries(ledger_id)
        ]

    def _entries(self, ledger_id: int) -> Sequence[int]:
        """A listed ledger's entries a reader sees: up to its closed end, or all those stored while open."""
        metadata = _metadata(self.server.nodes[_ledger_path(ledger_id)].data)
        if metadata.state is LedgerState.CLOSED:
            return range(metadata.last_entry_id + 1)
        state = self.bookie.core.ledgers.get(ledger_id)
        return sorted(state.entries) if state is not None else ()

    def messages(self, ledger_id: int) -> tuple[int, ...]:
        """The messages the bookie stores for a ledger, in entry order."""
        state = self.bookie.core.ledgers.get(ledger_id)
        if state is None:
            return ()
        return tuple(_message(self.bookie.storage[ledger_id, e], ledger_id, e) for e in sorted(state.entries))


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

    def __init__(
        self,
        constants: Mapping[str, Value],
        *,
        cores: type[ManagedLedgerCore] | None = None,
        ownership: type[OwnershipCore] | None = None,
        cursor: type[ManagedCursorCore] | None = None,
    ) -> None:
        # tests swap in a broken core
        self.core_type = cores or ManagedLedgerCore
        self.ownership_type = ownership or OwnershipCore
        self.cursor_type = cursor or ManagedCursorCore
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
            constants["FenceOnRecovery"] is True
            and constants["FenceOnBadVersion"] is True
            and constants.get("QueuedAddsAwaitListWrite", True) is True
            and constants.get("Mutation", "none") == "none"  # issue 47's one-rule mutations: bugs too
        )
        # Rollover as one step, or as Pulsar's steps with adds queued meanwhile (the `Rollover...` actions).
        self.multi_step_rollover = constants.get("MultiStepRollover", False) is True

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
            SimBookie(),
            {
                b.name: Broker(OwnershipShell.of(b.name, server.connect(), self.ownership_type), self._core())
                for b in self.brokers
            },
            CursorSnapshot.of(SubscriptionShell.opened(TOPIC, SUBSCRIPTION, CONFIG, self.cursor_type)),
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
        if action == "RevalidateOwnership":  # its two branches, told apart by the ownership node
            return [
                Candidate(
                    f"{action} {b} ({'lost' if lost else 'node free: acquired again'})",
                    {"broker": b, "lost": lost},
                    _bind(self._RevalidateOwnership, b.name, lost),
                    _bind(self._ready_RevalidateOwnership, b.name, lost),
                )
                for b in self.brokers
                for lost in (True, False)
            ]

        return [
            Candidate(f"{action} {b}", {"broker": b}, _bind(run, b.name), _bind(ready, b.name) if ready else None)
            for b in self.brokers
        ]

    # ---- sessions and ownership ----------------------------------------------------------------------
    @staticmethod
    def _ExpireSession(world: FencingWorld, name: str) -> None:
        world.brokers[name].store.expire_session()  # the core is not told yet: see OwnershipShell.notify
        world.expiries += 1

    # (an action's `_ready_` check is its precondition, read-only; the action runs it first)
    @staticmethod
    def _ready_Reconnect(world: FencingWorld, name: str) -> None:
        if world.alive(name):
            raise FencingHarnessError(f"{name}'s session is alive: nothing to reconnect")

    def _Reconnect(self, world: FencingWorld, name: str) -> None:
        self._ready_Reconnect(world, name)
        world.brokers[name].ownership.reconnect(world.server.connect())

    @staticmethod
    def _ready_AcquireOwnership(world: FencingWorld, name: str) -> None:
        if world.brokers[name].ownership.owns(OWNER_PATH):
            raise FencingHarnessError(f"{name} already believes it owns the bundle")

    def _AcquireOwnership(self, world: FencingWorld, name: str) -> None:
        self._ready_AcquireOwnership(world, name)
        ownership = world.brokers[name].ownership
        self._lost(world, name, ownership.notify())
        if not ownership.acquire(BUNDLE):
            raise FencingHarnessError(f"{name} did not acquire the bundle: another broker holds its node")

    @staticmethod
    def _ready_RevalidateOwnership(world: FencingWorld, name: str, lost: bool) -> None:
        broker = world.brokers[name]
        if not broker.ownership.owns(OWNER_PATH) or not world.alive(name):
            raise FencingHarnessError(f"{name} has nothing to revalidate")
        node = world.server.nodes.get(OWNER_PATH)
        if node is not None and node.ephemeral_owner == broker.store.session_id:
            raise FencingHarnessError(f"{name} holds the ownership node")
        if lost != (node is not None):
            raise FencingHarnessError(f"the ownership node is {'free' if node is None else 'held'}")

    def _RevalidateOwnership(self, world: FencingWorld, name: str, lost: bool) -> None:
        """The store's news reach the broker's ownership core (its session expired, the new one); the core
        drops the bundle (BundlesLost). `lost`: another broker holds the node, the topic is unloaded.
        Else the broker acquires the bundle afresh, and the harness keeps its topic loaded meanwhile."""
        self._ready_RevalidateOwnership(world, name, lost)
        ownership = world.brokers[name].ownership
        self._lost(world, name, ownership.notify(), keep_loaded=not lost)
        if not lost and not ownership.owns(OWNER_PATH) and not ownership.acquire(BUNDLE):
            raise FencingHarnessError(f"{name} could not acquire the free bundle again")

    def _lost(self, world: FencingWorld, name: str, lost: list[BundlesLost], keep_loaded: bool = False) -> None:
        """The broker's reaction to its ownership core's BundlesLost: unload the topic (its `_bundles_lost`)."""
        if not any(b.path == OWNER_PATH for loss in lost for b in loss.bundles):
            return
        broker = world.brokers[name]
        if keep_loaded:  # RevalidateOwnership with the node free: not what the broker does (module docstring)
            world.kept_loaded += broker.ml.state is not ManagedLedgerState.CLOSED or broker.recover_step_due
            return
        self._unload(world, name)

    def _unload(self, world: FencingWorld, name: str) -> None:
        broker = world.brokers[name]
        broker.ml.step(Close())  # its writer close of the current ledger is not performed (see the header)
        broker.ml = self._core()
        broker.held.clear()
        broker.recover_step_due = False

    # ---- the managed ledger ---------------------------------------------------------------------------
    @staticmethod
    def _ready_ReadLedgerList(world: FencingWorld, name: str) -> None:
        if not world.brokers[name].ownership.owns(OWNER_PATH) or not world.alive(name):
            raise FencingHarnessError(f"{name} does not own the topic or has no session")

    def _ReadLedgerList(self, world: FencingWorld, name: str) -> None:
        self._ready_ReadLedgerList(world, name)
        broker = world.brokers[name]
        world.perform(name, broker.ml.step(Open()))
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
            world.perform(name, broker.ml.step(LastLedgerRecovered(out.ledger_id, -1, 0)))
            return
        world.perform(name, broker.ml.step(LastLedgerRecovered(out.ledger_id, md.last_entry_id, md.length)))

    def _ready_CreateLedgerAndWriteList(self, world: FencingWorld, name: str) -> None:
        broker = world.brokers[name]
        if not world.alive(name) or broker.recover_step_due or broker.ml.state is not ManagedLedgerState.RECOVERED:
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
        if _queueing(world.brokers[name]):
            raise FencingHarnessError(f"{name}'s adds are queued (QueueAddEntry)")

    def _AddEntry(self, world: FencingWorld, name: str) -> None:
        self._ready_AddEntry(world, name)
        broker = world.brokers[name]
        world.perform(name, broker.ml.step(Add(world.next_msg, payload(world.next_msg), broker.now)))

    @staticmethod
    def _ready_QueueAddEntry(world: FencingWorld, name: str) -> None:
        broker = world.brokers[name]
        if world.next_msg > world.max_messages:
            raise FencingHarnessError("no message left to publish")
        if broker.ml.state is not ManagedLedgerState.OPEN or not _queueing(broker):
            raise FencingHarnessError(f"{name} would send the add at once (AddEntry)")

    def _QueueAddEntry(self, world: FencingWorld, name: str) -> None:
        """An add during a rollover (or behind queued adds): the core queues it, or sends it behind the queued
        adds in flight; either way it waits for WriteQueuedAdd. The producer has published it."""
        self._ready_QueueAddEntry(world, name)
        broker = world.brokers[name]
        world.perform(name, broker.ml.step(Add(world.next_msg, payload(world.next_msg), broker.now)), hold_adds=True)
        world.next_msg += 1

    def _AddEntryAckLost(self, world: FencingWorld, name: str) -> None:
        self._ready_AddEntry(world, name)
        broker = world.brokers[name]
        outputs = broker.ml.step(Add(world.next_msg, payload(world.next_msg), broker.now))
        sends = [o for o in outputs if isinstance(o, SendAdd)]
        if len(sends) != 1 or len(outputs) != 1:
            raise FencingHarnessError(f"{name}'s managed ledger did not send the add: {outputs}")
        writer = broker.writers[sends[0].ledger_id]
        for out in writer.step(bk_writer.Add(sends[0].data)):
            if not isinstance(out, Send):
                raise FencingHarnessError(f"the writer did not send the add: {out}")
            reply = world.bookie.answer(out.request)
            if not isinstance(reply, AddResponse) or reply.code is not ErrorCode.EOK:  # the spec's step stores it
                raise FencingHarnessError(f"the bookie refused the add to ledger {sends[0].ledger_id}")
        world.next_msg += 1
        world.lost_acks += 1
        self._unload(world, name)

    _ready_Rollover = _ready_session

    def _Rollover(self, world: FencingWorld, name: str) -> None:
        self._ready_Rollover(world, name)
        broker = world.brokers[name]
        broker.now += CONFIG.max_ledger_age_s
        world.perform(name, broker.ml.step(Tick(broker.now)))
        if any(isinstance(out, CreateLedger) for out in broker.held):  # the rollover's CreateLedger: in the same step
            self._take(broker, CreateLedger)
            world.perform(name, world.create_ledger(broker))

    # ---- the rollover in Pulsar's steps (MultiStepRollover) ------------------------------------------
    def _ready_RolloverCloseLedger(self, world: FencingWorld, name: str) -> None:
        self._ready_session(world, name)
        broker = world.brokers[name]
        if broker.ml.state is not ManagedLedgerState.OPEN or _queueing(broker):
            raise FencingHarnessError(f"{name} cannot start a rollover now")

    def _RolloverCloseLedger(self, world: FencingWorld, name: str) -> None:
        """Time passes beyond the ledger's age limit: Tick -> CloseLedger -> the writer close -> LedgerClosed
        (the core asks for the next ledger: CreateLedger waits for RolloverCreateLedger) or LedgerCloseFailed."""
        self._ready_RolloverCloseLedger(world, name)
        broker = world.brokers[name]
        broker.now += CONFIG.max_ledger_age_s
        outputs = broker.ml.step(Tick(broker.now))
        if not any(isinstance(out, CloseLedger) for out in outputs):
            raise FencingHarnessError(f"{name}'s managed ledger did not roll over: {outputs}")
        world.perform(name, outputs)

    def _ready_RolloverCreateLedger(self, world: FencingWorld, name: str) -> None:
        self._ready_session(world, name)
        broker = world.brokers[name]
        if broker.ml.state is not ManagedLedgerState.OPEN:
            raise FencingHarnessError(f"{name}'s managed ledger is not open")
        self._held(broker, CreateLedger)

    def _RolloverCreateLedger(self, world: FencingWorld, name: str) -> None:
        """The held CreateLedger: the next ledger created -> LedgerCreated -> WriteLedgerList, which waits for
        RolloverWriteList."""
        self._ready_RolloverCreateLedger(world, name)
        broker = world.brokers[name]
        self._take(broker, CreateLedger)
        for out in world.create_ledger(broker):
            if isinstance(out, WriteLedgerList):
                broker.held.append(out)
            else:  # a core that sends adds now (none does: the adds wait for the list write) holds them too
                world.perform(name, [out], hold_adds=True)

    def _ready_RolloverWriteList(self, world: FencingWorld, name: str) -> None:
        self._ready_session(world, name)
        self._held(world.brokers[name], WriteLedgerList)

    def _RolloverWriteList(self, world: FencingWorld, name: str) -> None:
        """The held conditional write of the list -> LedgerListWritten (the core sends its queued adds to the
        new ledger: they wait in flight for WriteQueuedAdd) or LedgerListBadVersion (FENCED, they fail)."""
        self._ready_RolloverWriteList(world, name)
        broker = world.brokers[name]
        world.perform(name, [self._take(broker, WriteLedgerList)], hold_adds=True)

    def _ready_WriteQueuedAdd(self, world: FencingWorld, name: str) -> None:
        self._held(world.brokers[name], SendAdd)

    def _WriteQueuedAdd(self, world: FencingWorld, name: str) -> None:
        """The first add in flight reaches the bookie: AddCompleted (acknowledged), or AddFailed fenced (the core
        is FENCED and fails the others, whose sends are dropped)."""
        self._ready_WriteQueuedAdd(world, name)
        broker = world.brokers[name]
        world.perform(name, world.send_add(broker, self._take(broker, SendAdd)))
        if broker.ml.state is not ManagedLedgerState.OPEN:
            broker.held = [out for out in broker.held if not isinstance(out, SendAdd)]

    @staticmethod
    def _ready_Consume(world: FencingWorld) -> None:
        if world.consumed() >= world.trimmed + len(world.log()):
            raise FencingHarnessError("nothing to consume")

    def _Consume(self, world: FencingWorld) -> None:
        """The consumer acknowledges the log's next entry: a cumulative ack of the subscription's cursor."""
        self._ready_Consume(world)
        position = world.log()[world.consumed() - world.trimmed]
        world.subscription = world.subscription.acknowledged(position, world.view())

    def _ready_TrimConsumedLedger(self, world: FencingWorld, name: str) -> None:
        self._ready_session(world, name)
        if world.brokers[name].ml.phase is not Phase.IDLE:
            raise FencingHarnessError(f"{name}'s managed ledger changes its list already (a rollover)")

    def _TrimConsumedLedger(self, world: FencingWorld, name: str) -> None:
        self._ready_TrimConsumedLedger(world, name)
        broker = world.brokers[name]
        ml = broker.ml
        slowest = world.subscription.mark_delete  # the slowest (only) cursor's mark-delete position
        if ml.ledgers:
            head = ml.ledgers[0]
            if slowest.ledger_id > head.ledger_id:  # one ledger a step, as the spec
                slowest = Position(head.ledger_id, head.entries - 1)
        world.perform(name, ml.step(Trim(broker.now, slowest, cursors=True)))

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
            holders = [b for b in self.brokers if world.brokers[b.name].holds(owner.ephemeral_owner)]
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
            "believesOwner": per_broker(lambda n: world.brokers[n].ownership.owns(OWNER_PATH)),
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
            "consumed": world.consumed(),
            "trimmed": world.trimmed,
        }

    @staticmethod
    def _ledger(world: FencingWorld, ledger_id: int) -> Record:
        state = world.bookie.core.ledgers.get(ledger_id)
        fenced = bool(state and state.fenced)
        if ledger_id not in world.created:
            return Record.of({"state": "unused", "entries": (), "lastEntry": 0, "fenced": fenced})
        if ledger_id in world.deleted_end:  # collected by the bookie: its fence as it was then
            end, fenced = world.deleted_end[ledger_id], world.deleted_fence[ledger_id]
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
        # An open core's rollover between spec steps: CREATING (the old ledger closed) or WRITING_LIST, whose
        # new ledger is the spec's ml.current. Its queue: the adds not yet stored, those sent (in flight) first.
        phase, current = "idle", core.current or 0
        if core.state is ManagedLedgerState.OPEN and core.phase is Phase.CREATING:
            phase = "creating"
        elif core.state is ManagedLedgerState.OPEN and core.phase is Phase.WRITING_LIST and core.next_ledger:
            phase, current = "writing", core.next_ledger
        queue = tuple(p.token for p in core.pending if not p.completed) + tuple(p.token for p in core.queued)
        return Record.of(
            {
                "state": state,
                "version": 0 if core.version is None else core.version + 1,
                "ledgers": tuple(i.ledger_id for i in core.ledgers),
                "current": current,
                "phase": phase,
                "queue": queue,
            }
        )


def _queueing(broker: Broker) -> bool:
    """The broker's adds wait: a rollover is under way, or adds queued before are still in flight."""
    core = broker.ml
    return core.phase is not Phase.IDLE or bool(core.queued) or broker.adds_held()


def _bind(run: Callable[..., None], *args: object) -> Callable[[FencingWorld], None]:
    return lambda world: run(world, *args)


__all__ = ["BUNDLE", "OWNER_PATH", "SPEC", "FencingHarnessError", "FencingMapping", "FencingWorld"]
