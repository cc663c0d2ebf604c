"""The managed ledger of one topic: the shell around `ManagedLedgerCore` (managed_ledger_core.py).

A topic is a chain of BookKeeper ledgers listed in a versioned metadata node (ledger_list.py).
The core decides; this shell performs: metadata reads and conditional writes, ledger creation,
recovery, adds, closes and deletes through the BookKeeper client, and it delivers completions.
Every input reaches the core as a typed event through `ManagedLedgerCore.step`: the broker's
requests (Open, Add, Tick, Trim, Fence, Close, ...) and the answers to the outputs performed
(LedgerListRead, LedgerCreated, AddCompleted, LedgerClosed, ...).

Threading. One lock guards the core. Calls from the broker (`add_async`, `trim`, `close`, ...)
run the core step and perform its outputs on the calling thread. The answers of the outputs
performed under the lock wait in `_inbox` and are stepped before the lock is let go. BookKeeper
completions arrive on transport threads, which hold the ledger writer's own lock: they only queue
their event (`_inbox`) and hand the draining to this managed ledger's worker thread, so no blocking call
(a writer close, a metadata write) ever runs on a transport thread. Metadata writes and ledger
creation happen while the lock is held, one at a time, in the order the core asked for them.
Completions (add futures, listeners, trim results) are delivered after the lock is released,
strictly in the core's order; callbacks may call back into the managed ledger.

Reads do not go through the core: they take a snapshot of the list (`TopicView`) and serve
entries from the entry cache of recent adds, else from the bookies (no lock held); a ledger whose
offload the list records is read from its offloaded copy (`offloaders`; docs/storage-lifecycle.md),
as Pulsar's managed ledger does, so that consumers, readers and seeks cannot tell.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Literal

from impl.bookie.client.api import BookKeeperClient, LedgerEntry, ReadHandle, WriteHandle
from impl.bookie.client.errors import (
    BadRequestError,
    LedgerClientError,
    LedgerFencedError,
    MetadataVersionError,
    PlacementError,
)
from impl.broker.cursor import ManagedCursor, NonDurableCursor
from impl.broker.entry_cache import EntryCacheManager
from impl.broker.ledger_host import CallLater, Cancellable
from impl.broker.ledger_list import LedgerInfo, LedgerList, OffloadContext, Position, TopicView
from impl.broker.managed_ledger_core import (
    Add,
    AddCompleted,
    AddFailed,
    Close,
    CloseLedger,
    CompleteAdd,
    CreateLedger,
    DeleteLedgers,
    DeleteOffloaded,
    Event,
    FailAdd,
    Fence,
    LastLedgerRecovered,
    LastLedgerRecoveryFailed,
    LedgerClosed,
    LedgerCloseFailed,
    LedgerCreated,
    LedgerCreateFailed,
    LedgerListBadVersion,
    LedgerListRead,
    LedgerListReadFailed,
    LedgerListWriteFailed,
    LedgerListWritten,
    ManagedLedgerConfig,
    ManagedLedgerCore,
    ManagedLedgerState,
    NotifyConfirmed,
    OffloadContextWritten,
    Open,
    Opened,
    OpenFailed,
    Output,
    ReadLedgerList,
    RecoverLastLedger,
    RetentionChanged,
    SendAdd,
    SetOffloadContext,
    Tick,
    TopicDeleted,
    Trim,
    TrimDone,
    WriteLedgerList,
)
from impl.broker.managed_ledger_errors import (
    CursorFencedError,
    InvalidPositionError,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerNotReadyError,
    NoSuchCursorError,
)
from impl.broker.offload.api import OffloadedLedger
from impl.broker.offload.errors import OffloadError
from impl.broker.offload.registry import Offloaders
from impl.futures import settle
from impl.metadata.layout import MANAGED_LEDGERS_ROOT, cursor_path, parse_managed_ledger_path
from impl.metadata.ledger import LedgerState
from impl.metadata.ledger_store import NoSuchLedger
from impl.metadata.naming import TopicName
from impl.metadata.store import (
    BadVersion,
    MetadataError,
    MetadataStore,
    NodeExists,
    NoNode,
    SessionState,
    parent_of,
)

__all__ = [
    "CursorFencedError",
    "InvalidPositionError",
    "LedgerInfo",
    "ManagedCursor",
    "ManagedLedger",
    "ManagedLedgerClosedError",
    "ManagedLedgerConfig",
    "ManagedLedgerError",
    "ManagedLedgerFencedError",
    "ManagedLedgerNotReadyError",
    "ManagedLedgerState",
    "NoSuchCursorError",
    "NonDurableCursor",
    "Position",
    "after_deliveries",
]

log = logging.getLogger(__name__)

Step = Callable[[], list[Output]]  # one step of the core under the lock: it calls `step` with its event(s)
AddCallback = Callable[["Position | ManagedLedgerError"], None]  # where the entry is, or why it is not
ReadCallback = Callable[["list[tuple[Position, bytes]] | ManagedLedgerError"], None]  # the entries, or why not
DEFAULT_TIMEOUT_S = 60.0
OPEN_ATTEMPTS = 5  # an open that lost the list to the previous owner's rollover reads it again


# Completions a thread delivers before it does what they put off (`after_deliveries`), when more keep
# coming: what waits for the end of a round does not wait for ever.
DELIVERIES_PER_ROUND = 256

_delivering = threading.local()  # `deferred`: the work put off to the end of the round this thread delivers


def after_deliveries(work: Callable[[], None]) -> bool:
    """Put `work` off until this thread has delivered the round of completions it is delivering (the
    adds a step of the managed ledger confirmed, in order), or until a callback of the round hands new
    adds to a managed ledger, whichever comes first; return True. False (and nothing done) outside a
    round. The broker's Pulsar listener uses it to wake its event loop once for all the receipts of a
    step, not once for each: a wake-up per receipt is a thread hand-over per message."""
    deferred: list[Callable[[], None]] | None = getattr(_delivering, "deferred", None)
    if deferred is None:
        return False
    deferred.append(work)
    return True


def _run_deferred() -> None:
    deferred: list[Callable[[], None]] = _delivering.deferred
    while deferred:
        work = deferred.pop(0)
        try:
            work()
        except Exception:
            log.exception("work put off to the end of a round of managed-ledger completions failed")


def thread_timer(delay_s: float, action: Callable[[], None]) -> Cancellable:
    """Run `action` on a timer thread in `delay_s` seconds (real time)."""
    timer = threading.Timer(delay_s, action)
    timer.daemon = True
    timer.start()
    return timer


class ManagedLedger:
    def __init__(
        self,
        name: str,
        store: MetadataStore,
        bookkeeper: BookKeeperClient,
        config: ManagedLedgerConfig,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        executor: Executor | None = None,
        call_later: CallLater | None = None,
        cache: EntryCacheManager | None = None,
    ) -> None:
        if "://" in name:  # a topic name, persistent://tenant/ns/topic, as everywhere else
            name = TopicName.parse(name).managed_ledger_name  # InvalidTopicName for a bad one
        self.path = f"{MANAGED_LEDGERS_ROOT}/{name}"
        parse_managed_ledger_path(self.path)  # InvalidName for anything but tenant/ns/persistent/topic
        self.name = name
        self.store = store
        self.bookkeeper = bookkeeper
        self.config = config
        self.clock = clock
        self.wall_clock = wall_clock
        self.call_later = call_later or thread_timer
        self.timeout_s = DEFAULT_TIMEOUT_S
        self._core = ManagedLedgerCore(name, config)
        self._lock = threading.Lock()
        self._inbox: deque[Event] = deque()  # answers and completions, stepped in order under the lock
        self._deliveries: deque[Callable[[], None]] = deque()
        self._deliver_lock = threading.RLock()
        # Drains run one at a time whatever the executor (a try-lock), so a pool shared by
        # many managed ledgers is fine; by default each has one thread of its own.
        self._own_worker = executor is None
        self._worker: Executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"ml-{name}")
        # At most one drain waits on the worker: completions arrive by the thousand per second, and
        # a submit each (a work item, a future, a wake-up) cost more than the step they carry.
        self._drain_scheduled = False
        self._schedule_lock = threading.Lock()
        self._writers: dict[int, WriteHandle] = {}
        self._readers: dict[int, ReadHandle] = {}
        self._handles_lock = threading.Lock()
        self._tokens = itertools.count()
        self._adds: dict[int, AddCallback] = {}  # token -> whom to tell the add's outcome
        self._trims: deque[Future[list[int]]] = deque()
        self._listeners: list[Callable[[Position], None]] = []
        self._notify_position: Position | None = None  # confirmed, the listeners not yet told
        self._notify_lock = threading.Lock()
        self._cursors: dict[str, ManagedCursor] = {}
        self._cursors_lock = threading.Lock()
        self._open_error: ManagedLedgerError | None = None
        # Where offloaded ledgers are read back and deleted (the broker's; None: offload is off, and a
        # ledger offloaded earlier cannot be read here).
        self.offloaders: Offloaders | None = None
        self._offloaded: dict[int, tuple[str, OffloadedLedger]] = {}  # ledger -> (uid, its opened copy)
        self._offload_answers: dict[int, Future[OffloadContextWritten]] = {}
        self._list_conflict = False  # a conditional write of the list met another broker's write
        # The broker's cache (one bound for all its topics), else one of our own of config.cache_bytes.
        self.cache = (cache if cache is not None else EntryCacheManager(config.cache_bytes)).new_cache()
        # The store has no way to remove a listener: hold this managed ledger weakly, so that a
        # broker that loads and unloads many topics on one session does not keep them all alive.
        me = weakref.ref(self)

        def on_session_state(state: SessionState) -> None:
            ml = me()
            if ml is not None:
                ml._on_session_state(state)

        store.add_session_listener(on_session_state)

    # ---- open (takeover) ----------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        name: str,
        store: MetadataStore,
        bookkeeper: BookKeeperClient,
        config: ManagedLedgerConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        wall_clock: Callable[[], float] = time.time,
        executor: Executor | None = None,
        call_later: CallLater | None = None,
        cache: EntryCacheManager | None = None,
    ) -> ManagedLedger:
        """Take the topic over: read the list, recover (fence) its last ledger, drop empty ledgers,
        create a new ledger, conditional-write the list, recover the durable cursors.

        `name`: the topic (persistent://tenant/ns/topic) or its managed ledger name (tenant/ns/persistent/topic).

        `clock` measures ledger age (rollover); `wall_clock` stamps closed ledgers (retention);
        `executor` runs the steps that BookKeeper completions trigger (default: a thread of its own);
        `call_later(delay_s, action)` runs an action later, on `clock`'s time (cursors' rate-limited
        flushes; default: a timer thread), so that tests can move time by hand. `cache`: the broker's
        entry cache manager (impl/broker/entry_cache.py); default: one of `config.cache_bytes` of its own.
        When the list changed between our read and our write (the previous owner rolled over), the
        open starts again from the read, up to OPEN_ATTEMPTS times; then ManagedLedgerFencedError,
        naming what changed.
        """
        for attempt in range(1, OPEN_ATTEMPTS + 1):
            ml = cls(
                name, store, bookkeeper, config or ManagedLedgerConfig(), clock, wall_clock, executor, call_later, cache
            )
            ml._step(Open())
            if ml._open_error is None:
                break
            ml._stop_worker()
            ml.cache.close()
            if not ml._list_conflict or attempt == OPEN_ATTEMPTS:
                raise ml._open_error
            # The previous owner wrote the list between our read and our write (it rolled over). Its
            # current ledger is the last one listed now: read again and recover (fence) that one.
            log.info(
                "managed ledger %s: open attempt %d lost the list: %s; reading it again", name, attempt, ml._open_error
            )
        try:
            ml._recover_cursors()
        except BaseException:
            ml.close()
            raise
        return ml

    def _recover_cursors(self) -> None:
        try:
            children = self.store.children(self.path)
        except MetadataError as e:
            raise ManagedLedgerError(self.name, f"cannot list its cursors ({e}); retry the open") from e
        for child in children:
            cursor = ManagedCursor.recover(self, child)
            self._cursors[cursor.name] = cursor

    def _on_session_state(self, state: SessionState) -> None:
        # A broker whose metadata session expired must never write again (BookKeeper issue
        # 4462): its ownership node is gone and another broker may be taking the topic over,
        # while the bookies would still accept our adds until that broker's recovery fences them.
        if state is SessionState.EXPIRED:
            reason = "its metadata session expired: another broker may own the topic now"
            self._queue(Fence(reason))

    # ---- the core loop ----------------------------------------------------------------------

    def _run(self, step: Callable[[], list[Output]]) -> None:
        """Run one core step on this thread (exceptions propagate before anything is performed)."""
        try:
            with self._lock:
                self._perform_all(step())
                self._process_inbox()
        finally:
            self._drain()  # steps queued by others while we held the lock (even if ours raised)

    def _step(self, event: Event) -> None:
        """Step the core with `event` on this thread (see `_run`)."""
        self._run(functools.partial(self._core.step, event))

    def _queue(self, event: Event) -> None:
        """From a BookKeeper callback thread: queue the event; the worker steps the core with it."""
        self._inbox.append(event)
        with self._schedule_lock:
            if self._drain_scheduled:
                return  # the scheduled drain has not started yet: it will see this event
            self._drain_scheduled = True
        try:
            self._worker.submit(self._scheduled_drain)
        except RuntimeError:  # the worker is shut down: the ledger is closed
            with self._schedule_lock:
                self._drain_scheduled = False

    def _scheduled_drain(self) -> None:
        with self._schedule_lock:
            self._drain_scheduled = False  # before looking at the inbox: a step queued from now on schedules again
        self._drain()

    def _drain(self) -> None:
        while self._inbox:
            if not self._lock.acquire(blocking=False):
                break  # the holder processes the inbox before it releases, then drains again
            try:
                self._process_inbox()
            finally:
                self._lock.release()
        self._deliver()

    def _process_inbox(self) -> None:
        while self._inbox:
            event = self._inbox.popleft()
            self._perform_all(self._core.step(event))

    def _deliver(self) -> None:
        # Re-entrant: a callback that waits for another completion delivers it itself, in order.
        while self._deliveries:
            if not self._deliver_lock.acquire(blocking=False):
                return
            outermost = getattr(_delivering, "deferred", None) is None
            if outermost:
                _delivering.deferred = []
            try:
                delivered = 0
                while self._deliveries:
                    callback = self._deliveries.popleft()
                    try:
                        callback()
                    except Exception:
                        log.exception("managed ledger %s: a completion callback failed", self.name)
                    delivered += 1
                    if outermost and delivered % DELIVERIES_PER_ROUND == 0:
                        _run_deferred()  # completions keep coming: what waits for the round goes now
            finally:
                if outermost:
                    _run_deferred()
                    _delivering.deferred = None
                self._deliver_lock.release()

    def _notify_after_round(self) -> None:
        if not after_deliveries(self._notify):
            self._notify()

    def _notify(self) -> None:
        """Tell the listeners the last confirmed position, once for every entry confirmed since the last
        time: the entries of one step complete one by one, and a subscription woken for each would read
        each on its own (a thread hand-over per entry)."""
        with self._notify_lock:
            position, self._notify_position = self._notify_position, None
        listeners = list(self._listeners)
        if position is not None:
            for listener in listeners:
                try:
                    listener(position)
                except Exception:
                    log.exception("managed ledger %s: a listener failed", self.name)

    @contextlib.contextmanager
    def _state(self) -> Iterator[ManagedLedgerCore]:
        """The core, for a consistent look (no outputs)."""
        try:
            with self._lock:
                yield self._core
        finally:
            self._drain()

    def retention(self) -> tuple[float, float]:
        """(minutes, MB) of consumed data kept (0: none, inf: unlimited)."""
        with self._state() as core:
            return core.config.retention_minutes, core.config.retention_size_mb

    def set_retention(self, minutes: float, size_mb: float) -> None:
        """Keep this much of what every cursor consumed from the next trim on (a changed policy)."""
        with self._state() as core:
            core.step(RetentionChanged(minutes, size_mb))
            self.config = core.config

    def _wait(self, future: Future[Any], what: str) -> Any:
        deadline = time.monotonic() + self.timeout_s
        while True:
            self._deliver()
            try:
                return future.result(timeout=0.05)
            except FutureTimeout:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"managed ledger {self.name}: {what} did not finish within {self.timeout_s}s; "
                        "check the bookies and the metadata store"
                    ) from None

    # ---- performing the core's outputs -------------------------------------------------------

    def _perform_all(self, outputs: list[Output]) -> None:
        """In the core's order; a run of adds to one ledger goes to its writer in one hand-over."""
        i = 0
        while i < len(outputs):
            output = outputs[i]
            if not isinstance(output, SendAdd):
                self._perform(output)
                i += 1
                continue
            j = i + 1
            while j < len(outputs) and isinstance(nxt := outputs[j], SendAdd) and nxt.ledger_id == output.ledger_id:
                j += 1
            self._send_adds([a for a in outputs[i:j] if isinstance(a, SendAdd)])
            i = j

    def _perform(self, output: Output) -> None:
        if isinstance(output, SendAdd):
            self._send_adds([output])
        elif isinstance(output, CompleteAdd):
            self.cache.put(output.position, output.data)
            self._deliveries.append(functools.partial(self._adds.pop(output.token), output.position))
        elif isinstance(output, FailAdd):
            self._deliveries.append(functools.partial(self._adds.pop(output.token), output.error))
        elif isinstance(output, NotifyConfirmed):
            # One notification for all the entries a round of deliveries confirms (see `_notify`).
            with self._notify_lock:
                notify = self._notify_position is None
                self._notify_position = output.position
            if notify:
                self._deliveries.append(self._notify_after_round)
        elif isinstance(output, ReadLedgerList):
            try:
                data, stat = self.store.get(self.path)
                self._inbox.append(LedgerListRead(data, stat.version))
            except NoNode:
                self._inbox.append(LedgerListRead(None, None))
            except MetadataError as e:
                self._inbox.append(LedgerListReadFailed(str(e)))
        elif isinstance(output, RecoverLastLedger):
            self._recover_last_ledger(output.ledger_id)
        elif isinstance(output, CreateLedger):
            self._create_ledger()
        elif isinstance(output, WriteLedgerList):
            self._write_list(output)
        elif isinstance(output, CloseLedger):
            self._close_ledger(output.ledger_id)
        elif isinstance(output, DeleteLedgers):
            self._delete_ledgers(output.ledger_ids)
        elif isinstance(output, Opened):
            pass
        elif isinstance(output, OpenFailed):
            self._open_error = output.error
        elif isinstance(output, OffloadContextWritten):
            answer = self._offload_answers.pop(output.ledger_id, None)
            if answer is not None:
                answer.set_result(output)
            if output.outcome == "written":
                with self._handles_lock:  # read the offloaded copy from now on
                    self._readers.pop(output.ledger_id, None)
        elif isinstance(output, DeleteOffloaded):
            self._delete_offloaded_in_background(output.ledgers)
        elif isinstance(output, TrimDone):
            if self._trims:
                trim = self._trims.popleft()
                ids = list(output.ledger_ids)
                self._deliveries.append(lambda: trim.set_result(ids))
        else:  # pragma: no cover - a new output kind without a performer is a bug
            raise TypeError(f"no performer for {output!r}")

    def _send_adds(self, adds: list[SendAdd]) -> None:
        """Adds to one ledger; each completion (or failure) comes back as a step of the core."""
        handle = self._writers[adds[0].ledger_id]
        handle.add_many_with_callback([(add.data, self._on_add_outcome(add.ledger_id, add.entry_id)) for add in adds])

    def _on_add_outcome(self, ledger_id: int, entry_id: int) -> Callable[[int | LedgerClientError], None]:
        def done(outcome: int | LedgerClientError) -> None:
            if isinstance(outcome, LedgerClientError):
                fenced = isinstance(outcome, LedgerFencedError)
                refused = isinstance(outcome, BadRequestError) and outcome.entry_id == entry_id
                if refused:
                    log.warning("managed ledger %s: %s", self.name, outcome)
                self._queue(AddFailed(ledger_id, entry_id, fenced, str(outcome), refused=refused))
            else:
                self._queue(AddCompleted(ledger_id, outcome))

        return done

    def _recover_last_ledger(self, ledger_id: int) -> None:
        try:
            handle = self.bookkeeper.open_ledger(ledger_id, self.config.password, recovery=True)
        except NoSuchLedger:
            # Listed but gone (an orphan deleted by a failed owner): recover it as empty, as Pulsar does.
            self._inbox.append(LastLedgerRecovered(ledger_id, -1, 0))
            return
        except (LedgerClientError, MetadataError, TimeoutError) as e:
            self._inbox.append(LastLedgerRecoveryFailed(ledger_id, f"{type(e).__name__}: {e}"))
            return
        with self._handles_lock:
            self._readers[ledger_id] = handle
        md = handle.metadata
        self._inbox.append(LastLedgerRecovered(ledger_id, md.last_entry_id, md.length))

    def _create_ledger(self) -> None:
        c = self.config
        try:
            handle = self.bookkeeper.create_ledger(
                c.ensemble,
                c.write_quorum,
                c.ack_quorum,
                digest=c.digest,
                password=c.password,
                custom_metadata={"application": b"pulsar", "pulsar/managed-ledger": self.name.encode()},
            )
        except (PlacementError, LedgerClientError, MetadataError, TimeoutError) as e:
            self._inbox.append(LedgerCreateFailed(f"{type(e).__name__}: {e}"))
            return
        with self._handles_lock:
            self._writers[handle.ledger_id] = handle
        self._inbox.append(LedgerCreated(handle.ledger_id, self.clock()))

    def _write_list(self, output: WriteLedgerList) -> None:
        try:
            if output.expected_version is None:
                self.store.ensure_path(parent_of(self.path))
                self.store.create(self.path, output.data)
                version = 0
            else:
                version = self.store.set(self.path, output.data, output.expected_version).version
        except (BadVersion, NodeExists, NoNode) as e:
            self._list_conflict = True
            self._inbox.append(LedgerListBadVersion(self._describe_list_change(output.expected_version, e)))
            return
        except MetadataError as e:
            self._inbox.append(LedgerListWriteFailed(f"{type(e).__name__}: {e}"))
            return
        self._inbox.append(LedgerListWritten(version))

    def _describe_list_change(self, expected: int | None, error: MetadataError) -> str:
        """What another broker did to the list, for the error message: its version now, the ledgers it
        added and removed since the version we expected."""
        try:
            data, stat = self.store.get(self.path)
            now = LedgerList.decode(data)
        except NoNode:
            return f"{type(error).__name__}: the list node is gone (expected version {expected})"
        except (MetadataError, ValueError) as e:
            return f"{type(error).__name__}, expected version {expected} (cannot read it again: {e})"
        ours = {i.ledger_id for i in self._core.ledgers}
        theirs = [i.ledger_id for i in now.ledgers]
        added = [i for i in theirs if i not in ours]
        removed = sorted(ours - set(theirs))
        changes = []
        if added:
            changes.append(f"ledgers {added} added")
        if removed:
            changes.append(f"ledgers {removed} removed")
        what = ", ".join(changes) or "the same ledgers"
        where = "created" if expected is None else f"version {expected}"
        return f"{type(error).__name__}: expected {where}, found version {stat.version} with {what}"

    def _close_ledger(self, ledger_id: int) -> None:
        handle = self._writers.get(ledger_id)
        if handle is None:
            return
        try:
            # Another broker taking the topic over recovers our current ledger first (IN_RECOVERY, then
            # CLOSED). A writer close would still succeed then (over IN_RECOVERY, or at the same end),
            # and the rollover would go on to write the list before the new owner does, again and
            # again: the takeover starved (issue 26). Our ledger in anyone's recovery means we stop.
            seen, _ = self.bookkeeper.ledgers.read(ledger_id)
            if seen.state is not LedgerState.OPEN:
                if seen.state is LedgerState.IN_RECOVERY:
                    why = "another broker is recovering it (IN_RECOVERY), taking the topic over"
                else:
                    why = f"another broker recovered it (CLOSED at entry {seen.last_entry_id}), taking the topic over"
                self._inbox.append(LedgerCloseFailed(ledger_id, True, why))
                return
            # A writer that failed (no bookie to replace a failed one) closes at the entries it
            # acknowledged, as BookKeeper's handle does; the adds after them go to the next ledger.
            md = handle.close()
        except MetadataVersionError as e:
            # Stored CLOSED at another end: another broker recovered the ledger (a takeover).
            why = f"another broker recovered it, taking the topic over ({e})"
            self._inbox.append(LedgerCloseFailed(ledger_id, True, why))
            return
        except (LedgerClientError, MetadataError, TimeoutError) as e:
            self._inbox.append(LedgerCloseFailed(ledger_id, False, f"{type(e).__name__}: {e}"))
            return
        # Read the closed ledger through its closed metadata from now on (the writer is done).
        with self._handles_lock:
            self._writers.pop(ledger_id, None)
            self._readers[ledger_id] = ReadHandle(self.bookkeeper, ledger_id, md)
        self._inbox.append(LedgerClosed(ledger_id, md.last_entry_id, md.length, self.wall_clock()))

    def _delete_ledgers(self, ledger_ids: tuple[int, ...]) -> None:
        for ledger_id in ledger_ids:
            try:
                self.bookkeeper.delete_ledger(ledger_id)
            except NoSuchLedger:
                pass  # deleted already
            except MetadataError as e:
                # Off the list already: a leftover ledger wastes space but breaks nothing.
                log.warning("managed ledger %s: could not delete ledger %d: %s", self.name, ledger_id, e)
            with self._handles_lock:
                self._writers.pop(ledger_id, None)
                self._readers.pop(ledger_id, None)
        self.cache.evict_ledgers(set(ledger_ids))

    # ---- the API -------------------------------------------------------------------------------

    @property
    def state(self) -> ManagedLedgerState:
        return self._core.state

    @property
    def fence_reason(self) -> str:
        return self._core.fence_reason

    def add_async(self, data: bytes) -> Future[Position]:
        """Append `data`; the future completes with its Position, futures complete in add order.

        Fails with ManagedLedgerFencedError once another broker took the topic over (for good),
        ManagedLedgerClosedError after close().
        """
        future: Future[Position] = Future()
        self.add_with_callback(data, functools.partial(settle, future))
        return future

    def add_with_callback(self, data: bytes, callback: AddCallback) -> None:
        """`add_async` without a future (the broker publishes thousands a second): `callback(position)`
        or `callback(error)`, in add order, after the lock is released; it must not block."""
        self.add_many_with_callback([(data, callback)])

    def add_many_with_callback(self, adds: list[tuple[bytes, AddCallback]]) -> None:
        """`add_with_callback` for each, in order, in one step of the core (one lock round, and one
        hand-over to the ledger writer for the adds it sends)."""
        entries = []
        for data, callback in adds:
            if not isinstance(data, bytes | bytearray | memoryview):
                raise TypeError(f"an entry is bytes, not {type(data).__name__}")
            entries.append((next(self._tokens), bytes(data), callback))
        for token, _, callback in entries:
            self._adds[token] = callback

        def step() -> list[Output]:
            now = self.clock()
            outputs: list[Output] = []
            for token, payload, _ in entries:
                outputs += self._core.step(Add(token, payload, now))
            return outputs

        if getattr(_delivering, "deferred", None):
            # A callback of a round hands over new adds (the broker's next step, sent when the last add of
            # the previous one completes): what the round put off (the receipts' wake-up) goes first, and
            # does not wait for the new adds' encoding and hand-over to the bookies.
            _run_deferred()
        self._run(step)

    def add(self, data: bytes) -> Position:
        position: Position = self._wait(self.add_async(data), "an add")
        return position

    def tick(self) -> None:
        """Roll an idle ledger over once it reached the maximum age (call it periodically)."""
        self._run(lambda: self._core.step(Tick(self.clock())))

    def view(self) -> TopicView:
        with self._state() as core:
            return core.view()

    def last_confirmed(self) -> Position | None:
        return self.view().last_confirmed()

    def first_position(self) -> Position | None:
        return self.view().first_position()

    def next_position(self, p: Position) -> Position | None:
        """Where the entry after `p` is (or will be written); None if nothing can follow `p`."""
        return self.view().next_position(p)

    def add_listener(self, callback: Callable[[Position], None]) -> None:
        """`callback(last confirmed position)` after new entries are confirmed (after their futures)."""
        with self._lock:
            self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[Position], None]) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._listeners.remove(callback)

    def read(self, start: Position | None, max_entries: int) -> list[tuple[Position, bytes]]:
        """Up to `max_entries` confirmed entries from `start` (None = the earliest available) on."""
        return self._read(start, max_entries, cached_only=False)[0]

    def read_cached(self, start: Position | None, max_entries: int) -> tuple[list[tuple[Position, bytes]], bool]:
        """As `read`, from the entry cache alone: it stops at the first entry not cached, so it never waits
        for a bookie. The entries, and whether it stopped at such an entry (confirmed, to read with `read`)."""
        return self._read(start, max_entries, cached_only=True)

    def read_with_callback(self, start: Position | None, max_entries: int, callback: ReadCallback) -> None:
        """As `read`, without waiting for a bookie (Pulsar's asyncReadEntries): `callback(entries)`, or
        `callback(ManagedLedgerError)` when the bookies could not serve them. The entries the cache holds
        from `start` on come at once (inline); at the first one it does not hold, the read goes to the
        bookies for the run of entries of that ledger after it, and the callback comes on the bookie
        client's thread once they answered, so a caller serving consumers is never held by a bookie. A
        read of an offloaded ledger still waits (inline). Raises as `read` when the ledger is unusable."""
        wanted, offloaded = self._wanted(start, max_entries)
        cached: list[tuple[Position, bytes]] = []
        for position in wanted:
            data = self.cache.get(position)
            if data is None:
                break
            cached.append((position, data))
        if cached or not wanted:
            callback(cached)  # the misses after these are the next read's (no wait for them now)
            return
        ledger_id, first = wanted[0].ledger_id, wanted[0].entry_id
        run = [p for p in wanted if p.ledger_id == ledger_id]  # first..last, as the bookies answer them
        last = run[-1].entry_id
        if ledger_id in offloaded:
            try:
                callback(self._collect(wanted, offloaded, cached_only=False)[0])
            except ManagedLedgerError as e:
                callback(e)
            return

        def done(outcome: list[LedgerEntry] | LedgerClientError) -> None:
            if isinstance(outcome, BaseException):
                callback(self._read_error(ledger_id, first, last, outcome))
            else:
                callback([(p, e.payload) for p, e in zip(run, outcome, strict=True)])

        try:
            self._handle(ledger_id).read_with_callback(first, last, done)
        except NoSuchLedger:  # trimmed while we read: nothing, as `read`
            callback([])
        except (LedgerClientError, MetadataError, TimeoutError) as e:
            callback(self._read_error(ledger_id, first, last, e))

    def _read_error(self, ledger_id: int, first: int, last: int, e: BaseException) -> ManagedLedgerError:
        return ManagedLedgerError(
            self.name,
            f"read of ledger {ledger_id} entries {first}..{last} failed ({type(e).__name__}: {e}); "
            "retry when the bookies are back",
        )

    def _wanted(
        self, start: Position | None, max_entries: int
    ) -> tuple[list[Position], dict[int, OffloadContext | None]]:
        """The positions of up to `max_entries` confirmed entries from `start`, and the offloaded ledgers."""
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        with self._state() as core:
            core.check_usable()
            view = core.view()
            offloaded = {i.ledger_id: i.offload for i in core.ledgers if i.offloaded}
        return list(itertools.islice(view.positions(start), max_entries)), offloaded

    def _read(
        self, start: Position | None, max_entries: int, cached_only: bool
    ) -> tuple[list[tuple[Position, bytes]], bool]:
        return self._collect(*self._wanted(start, max_entries), cached_only)

    def _collect(
        self, wanted: list[Position], offloaded: dict[int, OffloadContext | None], cached_only: bool
    ) -> tuple[list[tuple[Position, bytes]], bool]:
        """The entries at `wanted` from the cache, the bookies or the offloaded copies (`_wanted`'s
        answer); with `cached_only`, up to the first miss and whether there was one."""
        result: list[tuple[Position, bytes]] = []
        i = 0
        while i < len(wanted):
            cached = self.cache.get(wanted[i])
            if cached is not None:
                result.append((wanted[i], cached))
                i += 1
                continue
            if cached_only:
                return result, True
            # A run of misses in one ledger: one bookie read for the whole run.
            j = i
            while j + 1 < len(wanted) and wanted[j + 1].ledger_id == wanted[i].ledger_id:
                j += 1
            ledger_id = wanted[i].ledger_id
            try:
                context = offloaded.get(ledger_id)
                if context is not None:
                    entries = self._read_offloaded(ledger_id, context, wanted[i].entry_id, wanted[j].entry_id)
                else:
                    entries = self._read_from_bookies(ledger_id, wanted[i].entry_id, wanted[j].entry_id)
            except NoSuchLedger:
                break  # trimmed while we read
            except (LedgerClientError, MetadataError, TimeoutError) as e:
                raise self._read_error(ledger_id, wanted[i].entry_id, wanted[j].entry_id, e) from e
            result += [(Position(ledger_id, entry_id), payload) for entry_id, payload in entries]
            i = j + 1
        return result, False

    def _read_offloaded(
        self, ledger_id: int, context: OffloadContext, first: int, last: int
    ) -> list[tuple[int, bytes]]:
        """Entries of an offloaded ledger from its copy; from the bookies while their copy is still there
        and the offloaded one cannot be read (deleted or damaged behind the broker's back)."""
        try:
            with self._handles_lock:
                opened = self._offloaded.get(ledger_id)
            if opened is None or opened[0] != context.uid:
                if self.offloaders is None:
                    raise OffloadError(f"ledger {ledger_id} is offloaded and this broker has no offloader")
                offloader = self.offloaders.for_context(context.driver_name, context.driver_metadata)
                opened = (context.uid, offloader.read_offloaded(ledger_id, context.uid))
                with self._handles_lock:
                    self._offloaded[ledger_id] = opened
            return opened[1].read(first, last)
        except OffloadError as e:
            with self._handles_lock:
                self._offloaded.pop(ledger_id, None)
            if context.bookkeeper_deleted:
                raise ManagedLedgerError(
                    self.name,
                    f"read of offloaded ledger {ledger_id} entries {first}..{last} failed ({type(e).__name__}: {e}); "
                    "its bookie copy is deleted: restore the object or the tiered store",
                ) from e
            log.warning("managed ledger %s: %s; reading ledger %d from the bookies", self.name, e, ledger_id)
            return self._read_from_bookies(ledger_id, first, last)

    def evict_read(self, position: Position) -> None:
        """Every active reader has read up to `position`: those entries leave the cache (Pulsar's
        eviction by the slowest active cursor's read position). A reader that goes back (a seek, a
        redelivery after a restart) reads them from the bookies."""
        self.cache.evict_through(position)

    def _read_from_bookies(self, ledger_id: int, first: int, last: int) -> list[tuple[int, bytes]]:
        return [(e.entry_id, e.payload) for e in self._handle(ledger_id).read(first, last)]

    def _handle(self, ledger_id: int) -> WriteHandle | ReadHandle:
        """The ledger's handle to read from: its writer's, else one opened (once; a metadata read)."""
        with self._handles_lock:
            handle: WriteHandle | ReadHandle | None = self._readers.get(ledger_id) or self._writers.get(ledger_id)
        if handle is None:
            opened = self.bookkeeper.open_ledger(ledger_id, self.config.password, recovery=False)
            with self._handles_lock:
                self._readers[ledger_id] = opened
            handle = opened
        return handle

    # ---- cursors ------------------------------------------------------------------------------

    def cursor_path(self, cursor: str) -> str:
        tenant, namespace, topic = parse_managed_ledger_path(self.path)
        return cursor_path(tenant, namespace, topic, cursor)

    def open_cursor(self, name: str, initial: Literal["earliest", "latest"] = "latest") -> ManagedCursor:
        """The durable cursor `name`: recovered if it exists, else created at `initial`."""
        if initial not in ("earliest", "latest"):
            raise ValueError(f"initial position is 'earliest' or 'latest', not {initial!r}")
        with self._state() as core:
            core.check_usable()
        with self._cursors_lock:
            cursor = self._cursors.get(name)
            if cursor is None:
                cursor = ManagedCursor.open_or_create(self, name, initial)
                self._cursors[name] = cursor
            return cursor

    def delete_cursor(self, name: str) -> None:
        with self._state() as core:
            core.check_usable()
        with self._cursors_lock:
            cursor = self._cursors.get(name)
            if cursor is None:
                raise NoSuchCursorError(self.name, f"has no cursor {name!r}; known: {sorted(self._cursors)}")
            cursor.delete_storage()
            del self._cursors[name]

    def cursors(self) -> dict[str, ManagedCursor]:
        with self._cursors_lock:
            return dict(self._cursors)

    def new_non_durable_cursor(self, start: Position | None = None, after: bool = False) -> NonDurableCursor:
        """A reader's cursor from `start` (None = the earliest entry), or right after it (`after`:
        a start of None then reads the first entry ever added); nothing is persisted."""
        with self._state() as core:
            core.check_usable()
        return NonDurableCursor(self, start, after)

    def fence(self, reason: str) -> None:
        """Fence from outside (a cursor lost its ledger to another broker, the session expired)."""
        self._step(Fence(reason))

    def check_usable(self) -> None:
        with self._state() as core:
            core.check_usable()

    # ---- trimming, stats, close, delete ------------------------------------------------------

    def slowest_mark_delete(self) -> Position | None:
        positions = [c.mark_delete_position for c in self.cursors().values()]
        return min((p for p in positions if p is not None), default=None)

    def trim(self) -> list[int]:
        """Delete the closed ledgers every durable cursor has passed (keeping the retention);
        returns their ids. Ledgers go from the list first (conditional write), then from BookKeeper."""
        future: Future[list[int]] = Future()
        has_cursors = bool(self.cursors())
        slowest = self.slowest_mark_delete()

        def step() -> list[Output]:
            outputs = self._core.step(Trim(self.wall_clock(), slowest, has_cursors))
            self._trims.append(future)
            return outputs

        self._run(step)
        result: list[int] = self._wait(future, "trimming")
        if self._core.state is ManagedLedgerState.FENCED and not result:
            raise ManagedLedgerFencedError(self.name, self._core.fence_reason)
        return result

    # ---- tiered storage (impl/broker/offload/) ---------------------------------------------------

    def ledger_infos(self) -> tuple[list[LedgerInfo], int | None, int | None]:
        """(the list as this broker sees it, the current ledger, the list's version)."""
        with self._state() as core:
            return list(core.ledgers), core.current, core.version

    def set_offload_context(self, ledger_id: int, context: OffloadContext) -> OffloadContextWritten:
        """Write the list with the ledger's offload context (conditional write, after any list change in
        flight). The answer's outcome: written, refused, badversion or unknown (see OffloadContextWritten)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            answer: Future[OffloadContextWritten] = Future()
            self._run(functools.partial(self._set_offload_context_step, ledger_id, context, answer))
            written: OffloadContextWritten = self._wait(answer, "an offload record")
            if written.outcome != "busy":
                return written
            if time.monotonic() > deadline:
                return OffloadContextWritten(ledger_id, "refused", None, "the ledger list stayed busy (rollovers)")
            time.sleep(0.01)

    def _set_offload_context_step(
        self, ledger_id: int, context: OffloadContext, answer: Future[OffloadContextWritten]
    ) -> list[Output]:
        self._offload_answers[ledger_id] = answer
        return self._core.step(SetOffloadContext(ledger_id, context))

    def source_ledger(self, info: LedgerInfo) -> BookieCopy:
        """A closed ledger of the list as its offloader reads it: from the bookies."""
        return BookieCopy(self, info.ledger_id, info.entries - 1)

    def delete_bookie_copy(self, ledger_id: int) -> None:
        """Delete the ledger from BookKeeper (its offloaded copy is recorded): readers read the copy."""
        with contextlib.suppress(NoSuchLedger):  # deleted already (by a previous owner, or before a crash)
            self.bookkeeper.delete_ledger(ledger_id)
        with self._handles_lock:
            self._readers.pop(ledger_id, None)

    def _delete_offloaded_in_background(self, ledgers: tuple[LedgerInfo, ...]) -> None:
        """Trimmed or deleted ledgers' offloaded copies (off the list already): a failure leaks an object."""
        offloaders = self.offloaders

        def delete() -> None:
            for info in ledgers:
                if info.offload is None:
                    continue
                try:
                    if offloaders is None:
                        raise OffloadError("this broker has no offloader")
                    offloader = offloaders.for_context(info.offload.driver_name, info.offload.driver_metadata)
                    offloader.delete_offloaded(info.ledger_id, info.offload.uid)
                except OffloadError as e:
                    log.warning("managed ledger %s: offloaded ledger %d left behind: %s", self.name, info.ledger_id, e)
            with self._handles_lock:
                for info in ledgers:
                    self._offloaded.pop(info.ledger_id, None)

        threading.Thread(target=delete, name=f"offload-delete-{self.name}", daemon=True).start()

    def stats(self) -> dict[str, Any]:
        """Internal stats, like Pulsar's: ledgers with entries and sizes, cursors, backlog."""
        with self._state() as core:
            view = core.view()
            ledgers: list[dict[str, Any]] = [
                {
                    "ledger_id": i.ledger_id,
                    "entries": view.entries_in(i.ledger_id),
                    # Confirmed bytes, as Pulsar's TOTAL_SIZE counts them: with the bytes of adds still in
                    # flight, size/entries (the backlog estimate's mean entry) was inflated during a burst.
                    "size": core.confirmed_bytes if i.ledger_id == core.current else i.size,
                    "timestamp": i.timestamp,
                    "offload": i.offload.to_json() if i.offload is not None else None,
                }
                for i in core.ledgers
            ]
            state, reason, pending, version = (
                core.state.value,
                core.fence_reason,
                len(core.pending) + len(core.queued),
                core.version,
            )
            current = core.current
        last = view.last_confirmed()
        return {
            "name": self.name,
            "state": state,
            "fence_reason": reason,
            "list_version": version,
            "current_ledger": current,
            "last_confirmed": str(last) if last else None,
            "entries": sum(int(ledger["entries"] or 0) for ledger in ledgers),
            "size": sum(int(ledger["size"] or 0) for ledger in ledgers),
            "pending_adds": pending,
            "ledgers": ledgers,
            "cache": {
                "entries": len(self.cache),
                "bytes": self.cache.size,
                "hits": self.cache.hits,
                "misses": self.cache.misses,
            },
            "cursors": {name: c.stats() for name, c in sorted(self.cursors().items())},
        }

    def close(self) -> None:
        """Unload the topic: pending adds fail as closed, the current ledger is closed. Idempotent."""
        self._step(Close())
        for cursor in self.cursors().values():
            cursor.close()
        self._stop_worker()
        self.cache.close()

    def _stop_worker(self) -> None:
        if self._own_worker:
            self._worker.shutdown(wait=False)

    def delete(self) -> None:
        """Delete the topic's data: every ledger, every cursor, and the node."""
        with self._state() as core:
            core.check_usable()
            ledger_ids = [i.ledger_id for i in core.ledgers]
            offloaded = tuple(i for i in core.ledgers if i.offload is not None)
            version = core.version
        for cursor in list(self.cursors().values()):
            cursor.delete_storage()
        self._cursors.clear()
        self.close()
        try:
            self.store.delete(self.path, version if version is not None else -1)
        except BadVersion as e:
            raise ManagedLedgerFencedError(self.name, "the ledger list changed under us while deleting it") from e
        except NoNode:
            pass
        self._delete_ledgers(tuple(ledger_ids))
        if offloaded:
            self._delete_offloaded_in_background(offloaded)
        with self._state() as core:
            core.step(TopicDeleted())

    def stored_list(self) -> LedgerList:
        """The list as stored in the metadata node now (for tools and tests)."""
        data, _ = self.store.get(self.path)
        return LedgerList.decode(data)


class BookieCopy:
    """A closed ledger read from the bookies (what an offloader copies: offload.api.SourceLedger)."""

    def __init__(self, ml: ManagedLedger, ledger_id: int, last_entry_id: int) -> None:
        self._ml = ml
        self.ledger_id = ledger_id
        self.last_entry_id = last_entry_id

    def read(self, first: int, last: int) -> list[tuple[int, bytes]]:
        return self._ml._read_from_bookies(self.ledger_id, first, last)
