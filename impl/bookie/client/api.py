"""The BookKeeper client API: create, add, close, open (with or without recovery), read, delete.

This is a shell: it drives the pure cores (writer, recovery, read-LAC, reader) with
real I/O. Bookies are reached through a `BookieTransport` (the pipelined transport in
production; anything that answers requests in tests), metadata through
impl.metadata.ledger_store, bookie choice through the registry and `placement`, with
randomness from a seeded random.Random owned here, never by a core.

Each running core has a `_Driver`: one input at a time, in order, so transport
callbacks from any thread (or inline) are serialised; a thread finding another one
running the core's steps leaves its input to that thread instead of waiting. Every core
is driven through its one entry point, `step(event)` (docs/architecture.md, "One way to
drive a core"): `Start()`, `Add`, `Close()`, and the answers to its outputs
(`BookieAnswered`, `ReplacementChosen`/`NoReplacement`, `MetadataResult`).

A client given a tracer (impl/trace.py; `BookKeeperClient(tracer=...)`, `connect_bookkeeper(tracer=...)`)
hands it to every writer and recovery op it creates, and records each ledger it creates
(`LedgerCreated`) there; one given none traces nothing.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from impl.bookie.channel import after_answers
from impl.bookie.client.errors import LedgerClientError, NoSuchEntryError, PlacementError, UnauthorizedError
from impl.bookie.client.io_loop import on_io_loop_thread
from impl.bookie.client.ledger_update import MetadataResult, UpdateMetadata
from impl.bookie.client.metadata_writes import apply_change
from impl.bookie.client.placement import BookieInfo, choose_ensemble, choose_replacement, describe_frames
from impl.bookie.client.read_lac import ReadLacDone, ReadLacFailed, ReadLacOp
from impl.bookie.client.reader import LedgerEntry, ReadCompleted, ReadFailed, ReadOp
from impl.bookie.client.recovery import RecoveryDone, RecoveryFailed, RecoveryOp
from impl.bookie.client.writer import (
    Add,
    AddCompleted,
    AddFailed,
    BookieAnswered,
    ChooseReplacement,
    Close,
    CloseFailed,
    LedgerWriter,
    NoReplacement,
    ReplacementChosen,
    Send,
    Start,
    WriterClosed,
)
from impl.futures import settle
from impl.metadata import transitions
from impl.metadata.ledger import BookieId, DigestType, LedgerMetadata, LedgerState
from impl.metadata.ledger_store import LedgerMetadataStore
from impl.metadata.registry import BookieRegistry
from impl.metadata.store import MetadataError, MetadataStore

if TYPE_CHECKING:
    from impl.trace import Tracer

__all__ = ["BookKeeperClient", "BookieTransport", "LedgerEntry", "ReadHandle", "WriteHandle"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0

AddCallback = Callable[[int | LedgerClientError], None]  # the confirmed entry id, or why the add failed
ReadCallback = Callable[["list[LedgerEntry] | LedgerClientError"], None]  # the entries read, or why not
_Sent = tuple[BookieId, Any, Callable[[Any], None]]  # a request to send: bookie, request, whom to tell its answer


class BookieTransport(Protocol):
    """May also offer `send_many(sends)`, `send` for each (bookie, request, on_answer) in one call
    (the pipelined transport does: many requests per frame); the drivers use it when present."""

    def send(self, bookie: BookieId, request: Any, on_answer: Callable[[Any], None]) -> None:
        """Send `request`; call `on_answer(response)` exactly once, or `on_answer(None)` when the
        bookie did not answer in time (the transport owns the timeout). May call back inline."""


class _Core(Protocol):
    """What a driver needs of a client core (writer, recovery, read-LAC, reader): its one entry point."""

    def step(self, event: Any) -> list[Any]: ...


class _Answer:
    """Whom the transport tells the answer to one Send: queues the core's step of it (BookieAnswered).
    One slotted object per request in flight (a closure over the same took six for the collector)."""

    __slots__ = ("driver", "bookie", "request", "response")

    def __init__(self, driver: _Driver, bookie: BookieId, request: Any) -> None:
        self.driver = driver
        self.bookie = bookie
        self.request = request
        self.response: Any = None

    def __call__(self, response: Any) -> None:
        self.response = response
        self.driver.feed(self.step)

    def step(self) -> list[Any]:
        return self.driver.core.step(BookieAnswered(self.bookie, self.request, self.response))


class _Driver:
    """Runs one core's steps one at a time, in the order they were fed, from any thread.

    A thread that feeds while another thread runs steps only queues its step and returns:
    the running thread takes it (no thread waits for another's steps, so bookie stream
    threads delivering answers never queue up behind each other). The Sends of all the steps
    taken in one round leave together, through the transport's `send_many` when it has one
    (one hand-over per bookie, many requests per stream message). A step fed while its thread
    answers a stream message waits for the message's other answers (`after_answers`): the steps
    of all of them are one round, so one hand-over, not one per answer."""

    def __init__(self, client: BookKeeperClient, core: _Core, on_event: Callable[[Any], None]) -> None:
        self.client = client
        self.core = core
        self.on_event = on_event
        self._lock = threading.Lock()  # guards the queue and the draining flag only, never held in a step
        self._queue: deque[Callable[[], list[Any]]] = deque()
        self._draining = False

    def feed(self, step: Callable[[], list[Any]]) -> None:
        with self._lock:
            self._queue.append(step)
            if self._draining:
                return  # a running frame (this thread's or another's) will run this step
            self._draining = True
            # Answers of one stream message: their steps run together, once the message is answered.
            if after_answers(self._run):
                return
        self._run()

    def _run(self) -> None:
        """Take the queued steps (and those queued meanwhile) until none is left; `_draining` is set."""
        with self._lock:
            steps, self._queue = self._queue, deque()
        try:
            while True:
                sends: list[_Sent] = []
                try:
                    while steps:
                        for output in steps.popleft()():
                            if isinstance(output, Send):
                                bookie, request = output.bookie, output.request
                                sends.append((bookie, request, _Answer(self, bookie, request)))
                            else:
                                self._perform(output)
                finally:
                    if sends:
                        self._send(sends)  # an inline answer only queues its step: taken next round
                with self._lock:
                    if not self._queue:
                        self._draining = False
                        return
                    steps, self._queue = self._queue, steps
        except BaseException:
            with self._lock:
                self._queue.extendleft(reversed(steps))  # the steps after a failed one stay queued
                self._draining = False  # the next feed runs them
            raise

    def _send(self, sends: list[_Sent]) -> None:
        transport = self.client.transport
        send_many = getattr(transport, "send_many", None)
        if send_many is not None:
            send_many(sends)
        else:
            for bookie, request, on_answer in sends:
                transport.send(bookie, request, on_answer)

    def _perform(self, output: Any) -> None:
        core = self.core
        if isinstance(output, ChooseReplacement):
            try:
                replacement = self.client.choose_replacement(output.exclude, output.failed)
            except (PlacementError, MetadataError) as e:
                # An unreachable registry (e.g. the session closed under a closing client) leaves
                # no replacement either; the core fails the affected adds with this reason.
                self.feed(partial(core.step, NoReplacement(output.failed, f"{type(e).__name__}: {e}")))
            else:
                self.feed(partial(core.step, ReplacementChosen(output.failed, replacement)))
        elif isinstance(output, UpdateMetadata):
            try:
                result = apply_change(self.client.ledgers, output.change)
            except MetadataError as e:
                result = MetadataResult(output.change, False, None, f"{type(e).__name__}: {e}")
            self.feed(partial(core.step, result))
        else:
            self.on_event(output)


def _wait(future: Future[Any], timeout_s: float, what: str) -> Any:
    if not future.done() and on_io_loop_thread():
        # Every bookie stream of the transport is served by this thread: waiting here for a bookie
        # answer would stall them all until the timeout. Completion callbacks must hand such work on.
        raise RuntimeError(f"{what}: a blocking client call on the bookie I/O thread (from a completion callback)")
    try:
        return future.result(timeout=timeout_s)
    except TimeoutError as e:
        if future.done():
            raise
        raise TimeoutError(f"{what} did not finish within {timeout_s}s; check that the bookies are up") from e


class BookKeeperClient:
    def __init__(
        self,
        ledgers: LedgerMetadataStore,
        registry: BookieRegistry,
        transport: BookieTransport,
        *,
        seed: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        recovery_read_ahead: int = 1,
        owned_store: MetadataStore | None = None,
        tracer: Tracer | None = None,
        largest_entry: int | None = None,
    ) -> None:
        """`owned_store`: a metadata session the client opened for itself (connect_bookkeeper with a URL);
        `close()` closes it. A store passed in `ledgers` and `registry` otherwise stays the caller's.
        `tracer`: the recorder (impl/trace.py) of this client's writers and recovery ops; None: untraced.
        `largest_entry`: the largest entry body this client may add (a broker's: its max message size
        plus its allowance); ensembles and replacements leave out bookies whose published frame limit
        is below it. None: any bookie."""
        if recovery_read_ahead < 1:
            raise ValueError(f"recovery_read_ahead must be at least 1, got {recovery_read_ahead}")
        self.recovery_read_ahead = recovery_read_ahead  # entries read at once during recovery
        self.ledgers = ledgers
        self.registry = registry
        self.transport = transport
        self.timeout_s = timeout_s
        self._random = random.Random(seed)
        self._random_lock = threading.Lock()
        self._owned_store = owned_store
        self.tracer = tracer
        self.largest_entry = largest_entry
        self._too_small: frozenset[BookieId] = frozenset()  # the bookies skipped last time, logged once

    def close(self) -> None:
        """Release the transport (e.g. close the bookie connections) and the metadata session the client
        opened itself; a store given by the caller stays open. Closing twice is harmless."""
        try:
            close = getattr(self.transport, "close", None)
            if close is not None:
                close()
        finally:
            owned, self._owned_store = self._owned_store, None
            if owned is not None:
                owned.close()

    def __enter__(self) -> BookKeeperClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ---- placement (the shell's randomness) ----------------------------------------------------

    def _registry_view(self) -> tuple[list[BookieInfo], list[BookieId]]:
        membership = self.registry.membership()
        view = []
        for bookie_id in sorted(membership.writable | membership.readonly):
            try:
                info = self.registry.bookie_info(bookie_id)
            except MetadataError:
                continue  # unregistered meanwhile
            view.append(
                BookieInfo(bookie_id, info.rack, bookie_id in membership.readonly, info.netty_max_frame_size_bytes)
            )
        preference = [b.bookie_id for b in view]
        with self._random_lock:
            self._random.shuffle(preference)
        return view, preference

    def choose_replacement(self, ensemble: tuple[BookieId, ...], failed: BookieId) -> BookieId:
        view, preference = self._registry_view()
        return choose_replacement(view, ensemble, failed, len(ensemble), preference, self.largest_entry)

    # ---- the API ---------------------------------------------------------------------------------

    def create_ledger(
        self,
        ensemble: int,
        write_quorum: int,
        ack_quorum: int,
        digest: str = "crc32c",
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> WriteHandle:
        try:
            digest_type = DigestType(digest)
        except ValueError as e:
            choices = ", ".join(d.value for d in DigestType)
            raise ValueError(f"unknown digest {digest!r}; choose one of {choices}") from e
        view, preference = self._registry_view()
        placement = choose_ensemble(view, ensemble, write_quorum, preference, self.largest_entry)
        too_small = frozenset(b.bookie_id for b in placement.too_small)
        if too_small and too_small != self._too_small:  # once per change, not once per ledger
            log.warning(
                "new ledgers skip bookies whose frame limit (nettyMaxFrameSizeBytes) is below this client's "
                "largest entry of %d bytes: %s",
                self.largest_entry,
                describe_frames(placement.too_small),
            )
        self._too_small = too_small
        metadata = transitions.create(
            ensemble,
            write_quorum,
            ack_quorum,
            placement.ensemble,
            digest_type,
            password,
            ctime=time.time_ns() // 1_000_000,
            custom_metadata=custom_metadata,
        )
        ledger_id = self.ledgers.create(metadata)
        if self.tracer is not None:
            # For trace validation of processes writing many ledgers: which ledger, its first ensemble.
            self.tracer(
                "LedgerCreated",
                {
                    "ledger": ledger_id,
                    "ensemble": list(placement.ensemble),
                    "quorums": [ensemble, write_quorum, ack_quorum],
                },
            )
        return WriteHandle(self, ledger_id, metadata)

    def open_ledger(self, ledger_id: int, password: bytes = b"", recovery: bool = True) -> ReadHandle:
        metadata, _ = self.ledgers.read(ledger_id)
        if metadata.password != password:
            raise UnauthorizedError(ledger_id, "wrong password: nothing was fenced; open with the ledger's password")
        if recovery and metadata.state is not LedgerState.CLOSED:
            future: Future[LedgerMetadata] = Future()

            def on_event(event: Any) -> None:
                if isinstance(event, RecoveryDone):
                    future.set_result(event.metadata)
                elif isinstance(event, RecoveryFailed):
                    future.set_exception(event.error)

            op = RecoveryOp(ledger_id, metadata, read_ahead=self.recovery_read_ahead, tracer=self.tracer)
            _Driver(self, op, on_event).feed(partial(op.step, Start()))
            metadata = _wait(future, self.timeout_s, f"recovery of ledger {ledger_id}")
        return ReadHandle(self, ledger_id, metadata)

    def delete_ledger(self, ledger_id: int) -> None:
        """Delete the ledger's metadata (bookies garbage-collect its entries)."""
        self.ledgers.delete(ledger_id)

    # ---- reads shared by both handles -------------------------------------------------------------

    def _read(self, ledger_id: int, metadata: LedgerMetadata, first: int, last: int) -> list[LedgerEntry]:
        future: Future[list[LedgerEntry]] = Future()
        self._read_with_callback(ledger_id, metadata, first, last, partial(settle, future))
        return _wait(future, self.timeout_s, f"read of ledger {ledger_id} entries {first}..{last}")

    def _read_with_callback(
        self, ledger_id: int, metadata: LedgerMetadata, first: int, last: int, callback: ReadCallback
    ) -> None:
        """Start the read; `callback(entries)` or `callback(error)` once it is done, on the transport's
        thread (or this one, when the transport answers inline). Nothing waits: the transport owns the
        timeouts, so the read always ends."""

        def on_event(event: Any) -> None:
            if isinstance(event, ReadCompleted):
                callback(list(event.entries))
            elif isinstance(event, ReadFailed):
                callback(event.error)

        op = ReadOp(ledger_id, metadata, first, last)
        _Driver(self, op, on_event).feed(partial(op.step, Start()))

    def _read_lac(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        future: Future[int] = Future()

        def on_event(event: Any) -> None:
            if isinstance(event, ReadLacDone):
                future.set_result(event.lac)
            elif isinstance(event, ReadLacFailed):
                future.set_exception(event.error)

        op = ReadLacOp(ledger_id, metadata, fence=False)
        _Driver(self, op, on_event).feed(partial(op.step, Start()))
        return _wait(future, self.timeout_s, f"read-LAC of ledger {ledger_id}")


def _check_range(ledger_id: int, first: int, last: int, limit: int) -> None:
    if last > limit:
        raise NoSuchEntryError(ledger_id, f"entry {last} is beyond the last confirmed entry {limit}; read up to it")
    if not 0 <= first <= last:
        raise ValueError(f"bad range {first}..{last}: need 0 <= first <= last")


class WriteHandle:
    """A ledger being written: add/add_async, close, read of confirmed entries."""

    def __init__(self, client: BookKeeperClient, ledger_id: int, metadata: LedgerMetadata) -> None:
        self.client = client
        self.ledger_id = ledger_id
        self.writer = LedgerWriter(ledger_id, metadata, tracer=client.tracer)
        self._waiters: dict[int, AddCallback] = {}  # entry id -> whom to tell its outcome
        self._closes: list[Future[LedgerMetadata]] = []  # close() calls waiting for the writer's answer
        self._closes_lock = threading.Lock()
        self._driver = _Driver(client, self.writer, self._on_event)

    @property
    def last_add_confirmed(self) -> int:
        return self.writer.last_add_confirmed

    @property
    def metadata(self) -> LedgerMetadata:
        return self.writer.metadata

    def add_async(self, data: bytes) -> Future[int]:
        future: Future[int] = Future()
        self.add_with_callback(data, partial(settle, future))
        return future

    def add_with_callback(self, data: bytes, callback: AddCallback) -> None:
        """`add_async` without a future, for callers with thousands of adds a second: `callback(entry_id)`
        once the add is confirmed (in entry order) or `callback(error)`; it runs on a transport thread
        (or the caller's, e.g. when the writer refuses the add), so it must not block."""
        self.add_many_with_callback([(data, callback)])

    def add_many_with_callback(self, adds: list[tuple[bytes, AddCallback]]) -> None:
        """`add_with_callback` for each, in order, in one step of the writer (one hand-over, not one each)."""
        payloads = [(bytes(data), callback) for data, callback in adds]

        def step() -> list[Any]:
            outputs: list[Any] = []
            for payload, callback in payloads:
                added = self.writer.step(Add(payload))
                first = added[0] if added else None
                if isinstance(first, AddFailed) and first.entry_id is None:
                    callback(first.error)  # refused: the writer is fenced, failed or closed
                    continue
                self._waiters[self.writer.last_add_pushed] = callback
                outputs += added
            return outputs

        self._driver.feed(step)

    def add(self, data: bytes) -> int:
        return _wait(self.add_async(data), self.client.timeout_s, f"add to ledger {self.ledger_id}")

    def close(self) -> LedgerMetadata:
        """Close the ledger at the entries this handle acknowledged: write CLOSED with the LAC and the
        length there; adds still pending fail as closed. Returns the closed metadata as stored.

        Also after the handle failed (fenced by another client's recovery, no bookie left to replace
        a failed one), as BookKeeper's handle closes itself then. Raises MetadataVersionError when the
        ledger is stored CLOSED at another end (another client recovered it further), and
        MetadataUpdateError when the metadata store failed (close again later). Once it has answered,
        every later close answers the same."""
        future: Future[LedgerMetadata] = Future()
        with self._closes_lock:
            self._closes.append(future)
        self._driver.feed(partial(self.writer.step, Close()))
        return _wait(future, self.client.timeout_s, f"close of ledger {self.ledger_id}")

    def read(self, first: int, last: int) -> list[LedgerEntry]:
        _check_range(self.ledger_id, first, last, self.writer.last_add_confirmed)
        return self.client._read(self.ledger_id, self.writer.metadata, first, last)

    def read_with_callback(self, first: int, last: int, callback: ReadCallback) -> None:
        """`read` without waiting: see `BookKeeperClient._read_with_callback` (a bad range raises here)."""
        _check_range(self.ledger_id, first, last, self.writer.last_add_confirmed)
        self.client._read_with_callback(self.ledger_id, self.writer.metadata, first, last, callback)

    def _on_event(self, event: Any) -> None:
        if isinstance(event, AddCompleted):
            self._waiters.pop(event.entry_id)(event.entry_id)
        elif isinstance(event, AddFailed) and event.entry_id is not None:
            waiter = self._waiters.pop(event.entry_id, None)
            if waiter is not None:
                waiter(event.error)
        elif isinstance(event, WriterClosed | CloseFailed):
            with self._closes_lock:
                closes, self._closes = self._closes, []
            for future in closes:
                if isinstance(event, WriterClosed):
                    future.set_result(event.metadata)
                else:
                    future.set_exception(event.error)


class ReadHandle:
    """A ledger opened for reading; after a recovering open its metadata is CLOSED.

    Its end: `last_add_confirmed`, the last entry known to be readable (a closed ledger's last entry;
    for a ledger still open, what was learnt so far). `read_last_confirmed()` asks the bookies for
    more while the ledger is open and returns the new value; `is_closed` says whether it can still grow.
    """

    def __init__(self, client: BookKeeperClient, ledger_id: int, metadata: LedgerMetadata) -> None:
        self.client = client
        self.ledger_id = ledger_id
        self.metadata = metadata
        self._lac = metadata.last_entry_id if metadata.is_closed else -1

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def is_closed(self) -> bool:
        return self.metadata.is_closed

    @property
    def length(self) -> int:
        """Bytes of payload up to the last entry of a closed ledger (0 while it is open: not known yet)."""
        return self.metadata.length

    def read_last_confirmed(self) -> int:
        """The closed ledger's last entry, or (still open) the largest LAC the bookies report."""
        if not self.metadata.is_closed:
            self._lac = max(self._lac, self.client._read_lac(self.ledger_id, self.metadata))
        return self._lac

    def read(self, first: int, last: int) -> list[LedgerEntry]:
        _check_range(self.ledger_id, first, last, self._lac)
        return self.client._read(self.ledger_id, self.metadata, first, last)

    def read_with_callback(self, first: int, last: int, callback: ReadCallback) -> None:
        """`read` without waiting: see `BookKeeperClient._read_with_callback` (a bad range raises here)."""
        _check_range(self.ledger_id, first, last, self._lac)
        self.client._read_with_callback(self.ledger_id, self.metadata, first, last, callback)
