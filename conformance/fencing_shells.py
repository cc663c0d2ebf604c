"""The shells of the ownership and cursor cores in fencing.tla's replay (conformance/fencing_spec.py).

The replay drives the production pure cores; what is here only performs their outputs, as the
broker's shells do, against the harness's in-memory metadata store and cursor storage:

`OwnershipShell` is one broker's impl/broker/ownership.py (`OwnershipCache`) around an
`OwnershipCore`: it performs the core's node creations, checks and watches on the session each
output names, and feeds the answers back until the core asks for nothing more. What differs is
when the store's notifications reach the core. fencing.tla's broker is not told that its session
expired (`ExpireSession`); it reconnects (`Reconnect`) and learns what it lost only when it
revalidates (`RevalidateOwnership`). So the shell queues the store's news (the EXPIRED
notification of the core's session, the new session) and hands them to the core before its next
ownership input: `notify()`. The core decides the rest.

`SubscriptionShell` is impl/broker/cursor.py (`ManagedCursor`) around the subscription's
`ManagedCursorCore`: it keeps the cursor's node and cursor ledgers in memory and performs every
output at once, within the step (fencing.tla does not model the cursor's persistence; cursor.tla
does, against the same core: conformance/cursor_spec.py). The cursor has the broker's configuration:
an acknowledgement takes effect at once and is persisted by a rate-limited flush (a timer, at most
once per `cursor_persist_interval_s`); no time passes for the cursor in this replay, so a flush timer
due now fires at once and one due later never does (what fencing.tla calls `consumed` is the
position in effect, which the managed ledger's trimming reads). Between its steps the world holds it as a
`CursorSnapshot`, pickled: a value, which the replay's copies of the world share instead of copying
it (it changes only at `Consume`, and the replay copies the world for every candidate of every step).
"""

from __future__ import annotations

import pickle
from collections import deque
from dataclasses import dataclass, field

from impl.broker import cursor_core as cursor
from impl.broker import ownership_core as own
from impl.broker.ledger_list import Position, TopicView
from impl.broker.managed_ledger_core import ManagedLedgerConfig
from impl.metadata.memory import MemoryStore
from impl.metadata.store import MetadataError, SessionExpired

NOW = 0.0  # the cores' clock: nothing the spec does depends on the cursor's or the ownership's time


class FencingHarnessError(Exception):
    """The cores did something the spec step has no room for (reported as a refusal of the step)."""


def alive(store: MemoryStore) -> bool:
    session = store.server.sessions.get(store.session_id)
    return session is not None and session.alive


@dataclass
class OwnershipShell:
    """One broker's OwnershipCache, over the harness's store (see the module docstring)."""

    core: own.OwnershipCore
    current: MemoryStore  # the broker's newest session
    stores: dict[int, MemoryStore] = field(default_factory=dict)  # the core's session number -> its store
    next_token: int = 0

    @staticmethod
    def of(name: str, store: MemoryStore, core_type: type[own.OwnershipCore] = own.OwnershipCore) -> OwnershipShell:
        core = core_type(name, store.session_id)
        return OwnershipShell(core, store, {core.session: store})

    def reconnect(self, store: MemoryStore) -> None:
        """The broker's metadata client has a new session; the core hears of it with notify()."""
        self.current = store

    def owns(self, path: str) -> bool:
        """The core believes it owns the bundle whose ownership node is `path` (fencing.tla's believesOwner)."""
        return self.core.is_owned(path)

    def _token(self) -> int:
        self.next_token += 1
        return self.next_token

    # ---- the store's news, handed to the core ---------------------------------------------
    def notify(self) -> list[own.BundlesLost]:
        """Deliver what the store reported since the core's last input (the core's session expired, the
        new session); returns the losses the core reported."""
        lost: list[own.BundlesLost] = []
        core = self.core
        if not core.expired and not alive(self.stores[core.session]):
            lost += self.drive(own.SessionExpiredEvent(core.session))[1]
        if core.expired and self.current is not self.stores[core.session]:
            token = self._token()
            self.stores[core.session + 1] = self.current
            results, more = self.drive(own.Reconnect(token, self.current.session_id))
            lost += more
            self._result(token, results)
        return lost

    # ---- requests ------------------------------------------------------------------------------
    def acquire(self, bundle: own.Bundle) -> bool:
        token = self._token()
        results, lost = self.drive(own.Acquire(token, bundle))
        if lost:
            raise FencingHarnessError(f"acquiring {bundle.path}, the ownership core reported a loss: {lost}")
        return bool(self._result(token, results))

    @staticmethod
    def _result(token: int, results: list[own.CompleteRequest | own.FailRequest]) -> bool | str | None:
        for result in results:
            if result.token == token:
                if isinstance(result, own.FailRequest):
                    raise result.error
                return result.result
        raise FencingHarnessError(f"the ownership core did not answer request {token}")

    # ---- the loop: step the core, perform its outputs, feed back their answers --------------------
    def drive(self, event: own.Event) -> tuple[list[own.CompleteRequest | own.FailRequest], list[own.BundlesLost]]:
        results: list[own.CompleteRequest | own.FailRequest] = []
        lost: list[own.BundlesLost] = []
        work = deque(self.core.step(event))
        while work:
            out = work.popleft()
            if isinstance(out, own.CompleteRequest | own.FailRequest):
                results.append(out)
            elif isinstance(out, own.BundlesLost):
                lost.append(out)
            elif isinstance(out, own.Unverified):
                pass  # a line in OwnershipCache's log
            else:
                work.extend(self.core.step(self._perform(out)))
        return results, lost

    def _store(self, session: int) -> MemoryStore:
        store = self.stores.get(session)
        if store is None:
            raise SessionExpired(f"session {session} of the ownership core is long gone", None)
        return store

    def _perform(self, out: own.Output) -> own.Event:
        """One output against the store, on the session it names; its answer."""
        if isinstance(out, own.CreateOwnershipNode):
            try:
                store = self._store(out.session)
                if out.with_parents:
                    store.ensure_path(out.bundle.path.rsplit("/", 1)[0])
                store.create(out.bundle.path, out.data, ephemeral=True)
            except MetadataError as error:
                return own.NodeCreateFailed(out.token, out.session, error)
            return own.NodeCreated(out.token, out.session)
        if isinstance(out, own.CheckOwnershipNode):
            try:
                stat = self._store(out.session).exists(out.path)
            except MetadataError as error:
                return own.NodeCreateFailed(out.token, out.session, error)
            return own.NodeChecked(out.token, out.session, None if stat is None else stat.ephemeral_owner)
        if isinstance(out, own.WatchOwnNode):
            # The watch is not armed: it would never fire in fencing.tla's behaviours, where an ownership
            # node is deleted only with its session, whose watches die with it (OwnNodeChanged never comes).
            try:
                stat = self._store(out.session).exists(out.path)
            except MetadataError as error:
                return own.WatchFailed(out.path, out.session, error, out.token)
            return own.NodeWatched(out.path, out.session, None if stat is None else stat.ephemeral_owner, out.token)
        # ReadOwnNode, DeleteOwnNode (release, unload) and ReadOwner (lookups): no fencing.tla action asks for them
        raise FencingHarnessError(f"the ownership core asked for {out!r}, which fencing.tla has no step for")


@dataclass
class SubscriptionShell:
    """The subscription's ManagedCursor: its node and cursor ledgers in memory, every output performed at once."""

    core: cursor.ManagedCursorCore
    node: tuple[bytes, int] | None = None  # the cursor's metadata node: data, version
    ledgers: dict[int, list[bytes]] = field(default_factory=dict)  # cursor ledgers (their own ids) -> entries
    next_ledger: int = 1
    next_token: int = 0
    flush_at: float | None = None  # the flush timer the core set

    @staticmethod
    def opened(
        ml_name: str,
        name: str,
        config: ManagedLedgerConfig,
        core_type: type[cursor.ManagedCursorCore] = cursor.ManagedCursorCore,
    ) -> SubscriptionShell:
        """A new cursor at the topic's start (before its first entry), opened: its node and cursor ledger created."""
        shell = SubscriptionShell(core_type(ml_name, name, config))
        start = cursor.initial_state(TopicView(()), "earliest")
        if not any(isinstance(o, cursor.Opened) for o in shell.perform(shell.core.step(cursor.Open(start, NOW)))):
            raise FencingHarnessError(f"the cursor did not open: {shell.core.status.value}")
        return shell

    @property
    def mark_delete(self) -> Position:
        return self.core.state.mark_delete

    def mark_delete_to(self, position: Position, view: TopicView) -> None:
        """The consumer's cumulative acknowledgement: done once the core completes it."""
        self.next_token += 1
        token = self.next_token
        done = self.perform(self.core.step(cursor.MarkDelete(token, position, view, NOW)))
        if cursor.CompleteRequest(token) not in done:
            raise FencingHarnessError(f"the cursor did not complete the acknowledgement of {position}: {done}")

    def perform(self, outputs: list[cursor.Output]) -> list[cursor.Output]:
        """Perform the core's I/O at once, feeding back each answer; returns its reports."""
        reports: list[cursor.Output] = []
        work = deque(outputs)
        while work:
            out = work.popleft()
            answer: cursor.Event | None = None
            if isinstance(out, cursor.ReadCursorNode):
                data, version = self.node if self.node is not None else (None, -1)
                answer = cursor.NodeRead(data, version, NOW)
            elif isinstance(out, cursor.CreateCursorLedger):
                ledger_id, self.next_ledger = self.next_ledger, self.next_ledger + 1
                self.ledgers[ledger_id] = []
                answer = cursor.CursorLedgerCreated(ledger_id, NOW)
            elif isinstance(out, cursor.AppendCursorState):
                self.ledgers[out.ledger_id].append(out.data)
                answer = cursor.CursorStateAppended(out.ledger_id, NOW)
            elif isinstance(out, cursor.WriteCursorNode):
                answer = self._write_node(out)
            elif isinstance(out, cursor.DeleteCursorLedger):
                self.ledgers.pop(out.ledger_id, None)
            elif isinstance(out, cursor.SetFlushTimer):
                self.flush_at = out.at  # due now: it fires at once; later: never (module docstring)
                if out.at <= NOW:
                    self.flush_at = None
                    answer = cursor.Tick(NOW)
            elif isinstance(out, cursor.CancelFlushTimer):
                self.flush_at = None
            elif isinstance(out, cursor.Opened | cursor.CompleteRequest | cursor.CloseCursorLedger):
                reports.append(out)
            else:  # a failure, a fence or a recovery: no spec step has it
                raise FencingHarnessError(f"the cursor asked for {out!r}, which fencing.tla has no step for")
            if answer is not None:
                work.extend(self.core.step(answer))
        return reports

    def _write_node(self, out: cursor.WriteCursorNode) -> cursor.Event:
        if out.expected_version is None:
            if self.node is not None:
                return cursor.CursorNodeWriteFailed(cursor.NodeError.NODE_EXISTS, "the cursor node exists", NOW)
            self.node = (out.data, 0)
        elif self.node is None:
            return cursor.CursorNodeWriteFailed(cursor.NodeError.NO_NODE, "no cursor node", NOW)
        elif out.expected_version != self.node[1]:
            return cursor.CursorNodeWriteFailed(cursor.NodeError.BAD_VERSION, f"version {self.node[1]}", NOW)
        else:
            self.node = (out.data, self.node[1] + 1)
        return cursor.CursorNodeWritten(self.node[1], NOW)


@dataclass(frozen=True)
class CursorSnapshot:
    """The subscription's shell between two of its steps (see the module docstring)."""

    data: bytes  # the pickled SubscriptionShell, its core included
    mark_delete: Position  # its core's mark-delete position (`core.state.mark_delete`)

    @staticmethod
    def of(shell: SubscriptionShell) -> CursorSnapshot:
        return CursorSnapshot(pickle.dumps(shell, protocol=pickle.HIGHEST_PROTOCOL), shell.mark_delete)

    def thaw(self) -> SubscriptionShell:
        shell = pickle.loads(self.data)
        assert isinstance(shell, SubscriptionShell)
        return shell

    def acknowledged(self, position: Position, view: TopicView) -> CursorSnapshot:
        """The snapshot after the consumer's cumulative acknowledgement of `position`."""
        shell = self.thaw()
        shell.mark_delete_to(position, view)
        return CursorSnapshot.of(shell)


__all__ = ["CursorSnapshot", "FencingHarnessError", "OwnershipShell", "SubscriptionShell", "alive"]
