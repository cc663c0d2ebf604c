"""Cursors: a subscription's position on the topic (spec/fencing.tla `consumed`), the shells.

The position and the durable cursor's protocol are the pure core impl/broker/cursor_core.py
(`CursorState`, `ManagedCursorCore`: mark-delete, individually deleted ranges, persisting to the
cursor ledger at a limited rate, switching cursor ledgers, the fenced flush, recovery on open).

`ManagedCursor` is the durable cursor's shell: it turns the calls of the broker (acks, seeks, close),
the flush timer and the results of BookKeeper and the metadata store into the core's inputs, and
performs the core's outputs (the cursor ledger's creation, adds, recovery, close and deletion, the
writes of the cursor's node, the timer), feeding each result back, until the core asks for nothing
more. A caller waits for its request (`token`) to complete: with `cursor_persist_interval_s` = 0 an
acknowledgement returns once persisted; else at once, and the flush timer persists the newest state
within the interval (one cursor-ledger add for all the acks of an interval; `close()` writes what is
left). A crash loses at most the last interval's acks, whose messages are then delivered again
(at-least-once, never a loss).

`NonDurableCursor` (a reader) keeps the same state in memory only.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, Literal

from impl.bookie.client.api import WriteHandle
from impl.bookie.client.errors import LedgerClientError, LedgerFencedError, PlacementError
from impl.broker import cursor_core as core
from impl.broker.cursor_core import CURSOR_FORMAT, CursorState, ManagedCursorCore, Range, initial_state
from impl.broker.ledger_list import Position
from impl.broker.managed_ledger_core import ManagedLedgerState
from impl.broker.managed_ledger_errors import InvalidPositionError, ManagedLedgerError
from impl.metadata.layout import cursor_name_from_child
from impl.metadata.ledger_store import NoSuchLedger
from impl.metadata.store import BadVersion, MetadataError, NodeExists, NoNode

if TYPE_CHECKING:
    from impl.broker.ledger_host import Cancellable, LedgerHost

__all__ = ["CURSOR_FORMAT", "CursorState", "ManagedCursor", "NonDurableCursor", "Range", "initial_state"]

log = logging.getLogger(__name__)


class _CursorBase:
    """What durable and non-durable cursors share: the queries of the state, and the read position."""

    def __init__(self, ml: LedgerHost, name: str) -> None:
        self.ml = ml
        self.name = name
        self._lock = threading.RLock()
        self.read_position: Position | None = None  # None: right after the mark-delete position

    def _current(self) -> CursorState:
        """The state in effect (under the lock)."""
        raise NotImplementedError

    @property
    def mark_delete_position(self) -> Position | None:
        with self._lock:
            return self._current().mark_delete

    @property
    def individually_deleted(self) -> list[Range]:
        with self._lock:
            return list(self._current().individually_deleted)

    def is_acknowledged(self, position: Position) -> bool:
        with self._lock:
            return self._current().is_acknowledged(position)

    def acknowledged_among(self, positions: list[Position]) -> set[Position]:
        """Of `positions`, the acknowledged ones: one look under the lock for a read's entries."""
        with self._lock:
            state = self._current()
            mark, ranges = state.mark_delete, state.individually_deleted
            if not ranges:  # the usual case: one compare per position, not a call of is_acknowledged
                return {p for p in positions if p <= mark}
            return {p for p in positions if state.is_acknowledged(p)}

    def backlog(self) -> int:
        view = self.ml.view()
        with self._lock:
            return self._current().backlog(view)

    def first_unacknowledged_from(self, position: Position | None = None) -> Position | None:
        view = self.ml.view()
        with self._lock:
            return self._current().first_unacknowledged_from(position, view)

    def read_entries(self, max_entries: int) -> list[tuple[Position, bytes]]:
        """Read from the read position on, skipping acknowledged entries; advances the read position."""
        view = self.ml.view()  # not under the lock (see stats)
        with self._lock:
            start = self.read_position
            mark_delete = self._current().mark_delete
            if start is None or start <= mark_delete:
                start = view.next_position(mark_delete)
        if start is None:
            return []
        batch = self.ml.read(start, max_entries)
        after = self.ml.next_position(batch[-1][0]) if batch else None  # not under the lock (see stats)
        with self._lock:
            if batch:  # past the whole batch, even if every entry in it was acknowledged already
                self.read_position = after
            state = self._current()
            return [(p, d) for p, d in batch if not state.is_acknowledged(p)]

    def seek(self, position: Position | None) -> None:
        """Move the read position (None: back to right after the mark-delete position)."""
        with self._lock:
            self.read_position = position

    def stats(self) -> dict[str, Any]:
        # The view first, as backlog() takes it: the managed ledger may run add completions on the calling
        # thread, and those must not run under this cursor's lock (one may wait for the topic's lock while
        # an unsubscribe holds it and waits for this one).
        view = self.ml.view()
        with self._lock:
            state = self._current()
            return {
                "mark_delete": str(state.mark_delete),
                "individually_deleted": [f"[{a},{b}]" for a, b in state.individually_deleted],
                "backlog": state.backlog(view),
                "read_position": str(self.read_position) if self.read_position else None,
            }


class NonDurableCursor(_CursorBase):
    """A reader: starts at `start` (None = the earliest entry), or right after it (`after`),
    remembers nothing across brokers."""

    def __init__(self, ml: LedgerHost, start: Position | None, after: bool = False) -> None:
        view = ml.view()
        if start is None:
            state = initial_state(view, "earliest")
        elif after:
            state = CursorState(start)  # start itself is consumed
        else:
            state = CursorState(start.before())  # everything before start is consumed
        super().__init__(ml, "")
        self._state = state
        self.read_position = None if after or start is None else start

    def _current(self) -> CursorState:
        return self._state

    def _apply(self, change: Callable[[CursorState, Any], bool]) -> None:
        """Run a state change against a fresh view; bad input raises InvalidPositionError."""
        self.ml.check_usable()
        view = self.ml.view()
        with self._lock:
            candidate = self._state.copy()
            try:
                changed = change(candidate, view)
            except ValueError as e:
                raise InvalidPositionError(self.ml.name, f"cursor {self.name!r}: {e}; nothing was changed") from e
            if changed:
                self._state = candidate

    def mark_delete(self, position: Position) -> None:
        """Cumulative ack: everything up to `position` is consumed."""
        self._apply(lambda s, v: s.mark_delete_to(position, v))

    def reset(self, start: Position | None) -> None:
        """Seek: read again from `start` (None: the topic's first entry), as if nothing after it was acknowledged."""
        view = self.ml.view()
        before = initial_state(view, "earliest").mark_delete if start is None else start.before()
        self._apply(lambda s, v: s.reset_to(before))
        with self._lock:
            self.read_position = None

    def delete(self, positions: Iterable[Position]) -> None:
        """Individual acks; contiguous acks advance the mark-delete position."""
        wanted = list(positions)
        self._apply(lambda s, v: s.delete(wanted, v))


MakeEvent = Callable[[float], core.Event]  # the input, given the time


class ManagedCursor(_CursorBase):
    """A durable cursor: the shell of a `ManagedCursorCore` (see the module docstring)."""

    def __init__(self, ml: LedgerHost, name: str) -> None:
        super().__init__(ml, name)
        self.path = ml.cursor_path(name)
        self._core = ManagedCursorCore(ml.name, name, ml.config)
        self._handles: dict[int, WriteHandle] = {}  # the cursor ledgers this broker writes
        self._requests: dict[int, Future[None]] = {}
        self._next_token = 0
        self._timer: Cancellable | None = None

    def _current(self) -> CursorState:
        return self._core.state

    @property
    def ledger_entries(self) -> int:
        """States appended to the current cursor ledger."""
        return self._core.ledger_entries

    @property
    def node_version(self) -> int:
        return self._core.node_version

    @property
    def properties(self) -> dict[str, str]:
        return self._core.properties

    @property
    def fenced_reason(self) -> str:
        return self._core.fence_reason

    # ---- open, create, recover ---------------------------------------------------------------

    @classmethod
    def open_or_create(cls, ml: LedgerHost, name: str, initial: Literal["earliest", "latest"]) -> ManagedCursor:
        """The cursor `name`: recovered if its node exists, else created at `initial`."""
        cursor = cls(ml, name)
        cursor._open(initial_state(ml.view(), initial))
        return cursor

    @classmethod
    def recover(cls, ml: LedgerHost, child: str) -> ManagedCursor:
        """Recover the cursor stored at child node `child` of the managed-ledger node."""
        cursor = cls(ml, cursor_name_from_child(child))
        cursor._open(None)
        return cursor

    def _open(self, initial: CursorState | None) -> None:
        results = self._drive(lambda now: core.Open(initial, now))
        for result in results:
            if isinstance(result, core.OpenFailed):
                raise result.error
        if not any(isinstance(r, core.Opened) for r in results):
            raise ManagedLedgerError(self.ml.name, f"cursor {self.name!r}: the open did not complete; retry it")

    # ---- requests ------------------------------------------------------------------------------

    def _request(self, make: Callable[[int, float], core.Event]) -> None:
        """Feed a request to the core and wait until it completes (whoever performs its write)."""
        future: Future[None] = Future()
        with self._lock:
            token = self._next_token
            self._next_token += 1
            self._requests[token] = future
        self._drive(lambda now: make(token, now))
        try:
            future.result(timeout=self.ml.timeout_s)
        except FutureTimeout as e:
            with self._lock:
                self._requests.pop(token, None)
            raise ManagedLedgerError(self.ml.name, f"cursor {self.name!r}: no answer in {self.ml.timeout_s:g} s") from e

    def mark_delete(self, position: Position, properties: Mapping[str, str] | None = None) -> None:
        """Cumulative ack: everything up to `position` is consumed (`properties`: stored with it)."""
        self.ml.check_usable()
        view = self.ml.view()
        self._request(lambda token, now: core.MarkDelete(token, position, view, now, properties))

    @property
    def mark_delete_properties(self) -> dict[str, str]:
        """The properties stored with the mark-delete position (Pulsar's markDelete properties)."""
        with self._lock:
            return dict(self._current().properties)

    def delete(self, positions: Iterable[Position]) -> None:
        """Individual acks; contiguous acks advance the mark-delete position."""
        self.ml.check_usable()
        wanted = tuple(positions)
        view = self.ml.view()
        self._request(lambda token, now: core.Delete(token, wanted, view, now))

    def reset(self, start: Position | None) -> None:
        """Seek: read again from `start` (None: the topic's first entry), as if nothing after it was acknowledged."""
        self.ml.check_usable()
        view = self.ml.view()
        self._request(lambda token, now: core.Reset(token, start, view, now))
        with self._lock:
            self.read_position = None

    def persist(self) -> None:
        """Write the current state now (acks persist on their own within the persist interval; this is
        for callers that want an explicit durability point, e.g. before handing the topic over)."""
        self.ml.check_usable()
        self._request(core.Persist)

    def close(self) -> None:
        """Write the state if acks are not yet persisted, then close the cursor ledger."""
        self._request(core.Close)

    def delete_storage(self) -> None:
        """Delete the cursor's node and ledger (delete_cursor / topic deletion)."""
        self._request(core.DeleteCursor)

    def _on_flush_timer(self) -> None:
        self._drive(core.Tick)

    # ---- the loop: step the core, perform its outputs, feed back their results ------------------

    def _drive(self, make: MakeEvent) -> list[core.Output]:
        """Step the core with one input and perform what it asks, feeding each result back, until it
        asks for nothing more. Returns the outputs for the caller (Opened, OpenFailed)."""
        results: list[core.Output] = []
        with self._lock:
            work = deque(self._core.step(make(self.ml.clock())))
        while work:
            out = work.popleft()
            answer = self._perform(out, results)
            if answer is not None:
                with self._lock:
                    work.extend(self._core.step(answer(self.ml.clock())))
        return results

    def _perform(self, out: core.Output, results: list[core.Output]) -> MakeEvent | None:
        """Perform one output; returns the input that answers it, if it has one."""
        ml = self.ml
        match out:
            case core.AppendCursorState(ledger_id, data):
                return self._append(ledger_id, data)
            case core.ReadCursorNode():
                return self._read_node()
            case core.RecoverCursorLedger(ledger_id):
                return self._recover_ledger(ledger_id)
            case core.CreateCursorLedger():
                return self._create_ledger()
            case core.WriteCursorNode(data, expected_version):
                return self._write_node(data, expected_version)
            case core.DeleteCursorNode(expected_version):
                try:
                    ml.store.delete(self.path, expected_version)
                except MetadataError as e:
                    error, reason = _node_error(e), str(e)
                    return lambda now: core.CursorNodeDeleteFailed(error, reason, now)
                return core.CursorNodeDeleted
            case core.DeleteCursorLedger(ledger_id):
                self._handles.pop(ledger_id, None)
                with contextlib.suppress(MetadataError):  # a leftover cursor ledger wastes space, nothing else
                    ml.bookkeeper.delete_ledger(ledger_id)
            case core.CloseCursorLedger(ledger_id):
                handle = self._handles.pop(ledger_id, None)
                if handle is not None:
                    with contextlib.suppress(LedgerClientError, MetadataError):  # the next owner recovers it
                        handle.close()
            case core.SetFlushTimer(at):
                with self._lock:
                    if self._timer is not None:
                        self._timer.cancel()
                    self._timer = ml.call_later(max(0.0, at - ml.clock()), self._on_flush_timer)
            case core.CancelFlushTimer():
                with self._lock:
                    timer, self._timer = self._timer, None
                if timer is not None:
                    timer.cancel()
            case core.FenceManagedLedger(reason):
                ml.fence(reason)
            case core.PersistFailed(reason):
                log.warning("cursor %r of %s: %s", self.name, ml.name, reason)
            case core.CompleteRequest(token):
                with self._lock:
                    future = self._requests.pop(token, None)
                if future is not None:
                    future.set_result(None)
            case core.FailRequest(token, error):
                with self._lock:
                    future = self._requests.pop(token, None)
                if future is not None:
                    future.set_exception(error)
            case core.Opened() | core.OpenFailed():
                results.append(out)
        return None

    def _append(self, ledger_id: int, data: bytes) -> MakeEvent:
        ml = self.ml
        if ml.state is ManagedLedgerState.FENCED:  # e.g. our metadata session expired: never write again
            reason = ml.fence_reason
            return lambda now: core.ManagedLedgerFenced(reason, now)
        handle = self._handles.get(ledger_id)
        if handle is None:
            return lambda now: core.CursorStateAppendFailed(ledger_id, False, "the cursor ledger is closed", now)
        try:
            handle.add(data)
        except LedgerFencedError as e:
            reason = str(e)
            return lambda now: core.CursorStateAppendFailed(ledger_id, True, reason, now)
        except (LedgerClientError, TimeoutError, RuntimeError) as e:
            reason = str(e)
            return lambda now: core.CursorStateAppendFailed(ledger_id, False, reason, now)
        return lambda now: core.CursorStateAppended(ledger_id, now)

    def _read_node(self) -> MakeEvent:
        try:
            data, stat = self.ml.store.get(self.path)
        except NoNode:
            return lambda now: core.NodeRead(None, -1, now)
        except MetadataError as e:
            reason = str(e)
            return lambda now: core.NodeReadFailed(reason, now)
        return lambda now: core.NodeRead(data, stat.version, now)

    def _recover_ledger(self, ledger_id: int) -> MakeEvent:
        ml = self.ml
        try:
            # Recovery fences the previous owner's cursor ledger: its later acks fail.
            handle = ml.bookkeeper.open_ledger(ledger_id, ml.config.password, recovery=True)
            last = handle.last_add_confirmed
            entry = handle.read(last, last)[0].payload if last >= 0 else None
        except NoSuchLedger as e:
            reason = str(e)
            return lambda now: core.CursorLedgerRecoveryFailed(ledger_id, True, reason, now)
        except (LedgerClientError, MetadataError, TimeoutError) as e:
            reason = str(e)
            return lambda now: core.CursorLedgerRecoveryFailed(ledger_id, False, reason, now)
        return lambda now: core.CursorLedgerRecovered(ledger_id, entry, now)

    def _create_ledger(self) -> MakeEvent:
        ml, c = self.ml, self.ml.config
        try:
            handle = ml.bookkeeper.create_ledger(
                c.ensemble,
                c.write_quorum,
                c.ack_quorum,
                digest=c.digest,
                password=c.password,
                custom_metadata={"application": b"pulsar", "pulsar/cursor": f"{ml.name}/{self.name}".encode()},
            )
        except (PlacementError, LedgerClientError, MetadataError, TimeoutError) as e:
            reason = str(e)
            return lambda now: core.CursorLedgerCreateFailed(reason, now)
        self._handles[handle.ledger_id] = handle
        return lambda now: core.CursorLedgerCreated(handle.ledger_id, now)

    def _write_node(self, data: bytes, expected_version: int | None) -> MakeEvent:
        store = self.ml.store
        try:
            if expected_version is None:
                store.create(self.path, data)
                version = 0
            else:
                version = store.set(self.path, data, expected_version).version
        except MetadataError as e:
            error, reason = _node_error(e), str(e)
            return lambda now: core.CursorNodeWriteFailed(error, reason, now)
        return lambda now: core.CursorNodeWritten(version, now)

    def stats(self) -> dict[str, Any]:
        result = super().stats()
        result["cursor_ledger"] = self._core.ledger_id
        result["properties"] = self.mark_delete_properties
        return result


def _node_error(e: MetadataError) -> core.NodeError:
    if isinstance(e, BadVersion):
        return core.NodeError.BAD_VERSION
    if isinstance(e, NoNode):
        return core.NodeError.NO_NODE
    if isinstance(e, NodeExists):
        return core.NodeError.NODE_EXISTS
    return core.NodeError.OTHER
