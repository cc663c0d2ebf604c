"""Bookie streams on one asyncio event loop thread (grpc.aio): the client's low-latency I/O shell.

The threaded `impl.bookie.channel.BookieChannel` costs several Python thread hand-overs per
stream message in each direction (the caller's queue to gRPC's request-consuming thread,
which then waits for the write to complete on gRPC's polling thread; each response woken
from the polling thread onto the stream thread), each a GIL and scheduler round trip. With
three bookies and one add per message (an add rate below what fills batches) those hops,
not the bookies, set the client's add latency and most of its CPU. Here one event loop
thread serves every bookie stream of a transport: a caller's `send_many` queues requests
and wakes the loop at most once until the loop has taken them; the loop writes whatever is
queued as one `Batches` message and reads replies, calling each request's callback on the
loop thread (in reply order, like the stream thread did).

Callbacks must not block: a callback that waits for another bookie answer would stall every
bookie stream of the transport (`IoLoop.on_loop_thread` lets blocking API calls refuse).
Same answer contract as `BookieChannel.send_many`: each callback runs exactly once, with the
reply, a stream-level error code, or the ConnectionError that ended the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import grpc.aio

from impl.bookie import wire
from impl.bookie.channel import MAX_BATCH, MAX_BATCH_BYTES, Callback, answer_batch, settle_callback
from impl.bookie.protocol import Request

log = logging.getLogger(__name__)

_LOOP_THREADS: set[int] = set()  # thread idents of running IoLoops
CLOSE_GRACE_S = 1.0  # how long a closing IoLoop waits for its tasks (channel closes) before cancelling them


def on_io_loop_thread() -> bool:
    """True on the thread of any running IoLoop (where blocking on a bookie answer would deadlock), or of
    any other thread that answers bookie requests (`answering_thread`)."""
    return threading.get_ident() in _LOOP_THREADS


@contextlib.contextmanager
def answering_thread() -> Iterator[None]:
    """Count the current thread, while inside, as one that answers bookie requests (as an IoLoop's does):
    the client's blocking calls refuse to wait there."""
    _LOOP_THREADS.add(threading.get_ident())
    try:
        yield
    finally:
        _LOOP_THREADS.discard(threading.get_ident())


class IoLoop:
    """An asyncio event loop on a daemon thread, shared by the channels of one transport."""

    def __init__(self, name: str = "bookie-io") -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        _LOOP_THREADS.add(threading.get_ident())
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            _LOOP_THREADS.discard(threading.get_ident())
            pending = asyncio.all_tasks(self.loop)
            if pending:
                # Let closing work finish first (a gRPC channel's close, a stream's cancellation): gRPC
                # delivers the completions of a call to its loop from a poller shared by every loop of
                # the process, and one for a closed loop raises in whichever loop handles it.
                self.loop.run_until_complete(asyncio.wait(pending, timeout=CLOSE_GRACE_S))
                for task in pending:
                    task.cancel()
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    @property
    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def call(self, callback: Any, *args: Any) -> None:
        """Run `callback(*args)` on the loop: at once when already there, else at its next turn."""
        if self.is_current:
            callback(*args)
        else:
            self.loop.call_soon_threadsafe(callback, *args)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the loop (its tasks are cancelled) and wait for its thread, unless called on it."""
        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            return  # closed meanwhile
        if not self.is_current:
            self._thread.join(timeout_s)


class AioBookieChannel:
    """One `Batches` stream to a bookie, driven by an IoLoop; `send_many` from any thread."""

    def __init__(self, address: str, io: IoLoop) -> None:
        self.address = address
        self.io = io
        self._tags = itertools.count(1)
        self._callbacks: dict[int, Callback] = {}
        self._lock = threading.Lock()  # guards _callbacks, _queue, _woken, _failed
        self._queue: deque[bytes] = deque()  # request frames (wire.request_frame)
        self._woken = False  # the writer was woken and has not yet found the queue empty
        self._failed: ConnectionError | None = None
        self._closing = False
        self._wake: asyncio.Event | None = None
        self._grpc: grpc.aio.Channel | None = None
        self._call: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        io.call(self._start)  # never blocks: the first send_many's wake-up runs after this

    # ---- any thread ---------------------------------------------------------------------------------

    def send_many(self, requests: Sequence[tuple[Request, Callback]], encoded: dict[int, bytes] | None = None) -> None:
        """Queue requests in order; each callback runs once, on the loop thread (or inline, with a
        ConnectionError, once the channel is closed). A stream that ended (its waiting requests got
        the ConnectionError) is opened again on a fresh gRPC channel by the next call, as the threaded
        channel does, so a restarted bookie is reached at once."""
        if not requests:
            return
        tagged = [(next(self._tags), request, callback) for request, callback in requests]
        messages = [wire.request_frame(tag, request, encoded) for tag, request, _ in tagged]
        closed: ConnectionError | None = None
        reopen = wake = False
        with self._lock:
            if self._closing:
                closed = self._failed or ConnectionError(f"stream to bookie {self.address} closed")
            else:
                reopen = self._failed is not None
                self._failed = None
                for tag, _, callback in tagged:
                    self._callbacks[tag] = callback
                self._queue.extend(messages)
                wake = not self._woken
                self._woken = True
        if closed is not None:
            for _, _, callback in tagged:
                settle_callback(callback, closed)
            return
        if reopen:
            self.io.call(self._start)  # before the wake-up: the loop runs them in this order
        if wake or reopen:
            self.io.call(self._kick)

    def close(self) -> None:
        """End the stream; requests still waiting get a ConnectionError. Does not block."""
        with self._lock:
            self._closing = True  # from now on send_many answers ConnectionError at once
        try:
            self.io.call(self._close)
        except RuntimeError:  # the loop is gone: nothing can answer any more
            self._fail(ConnectionError(f"stream to bookie {self.address} closed"))

    # ---- the loop thread ----------------------------------------------------------------------------

    def _start(self) -> None:
        """Open the gRPC channel and the stream (again, after the previous stream ended)."""
        if self._wake is None:
            self._wake = asyncio.Event()
        if self._closing:
            return
        self._grpc = grpc.aio.insecure_channel(self.address, options=wire.CHANNEL_OPTIONS)
        self._call = wire.batches_stream(self._grpc)()
        self._tasks = [asyncio.ensure_future(self._writer()), asyncio.ensure_future(self._reader())]

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _writer(self) -> None:
        assert self._wake is not None
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while True:
                    with self._lock:
                        if not self._queue:
                            self._woken = False
                            break
                        batch: list[bytes] = []
                        size = 0
                        while self._queue and len(batch) < MAX_BATCH and size < MAX_BATCH_BYTES:
                            frame = self._queue.popleft()
                            batch.append(frame)
                            size += len(frame)
                    await self._call.write(b"".join(batch))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the call ended (the reader reports why); stop writing
            log.debug("bookie %s: stream write failed: %s", self.address, exc)

    async def _reader(self) -> None:
        error = ConnectionError(f"stream to bookie {self.address} closed")
        try:
            async for batch in self._call:
                answer_batch(self._lock, self._callbacks, batch.responses)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else exc
            error = ConnectionError(f"bookie {self.address}: {code}")
        except asyncio.CancelledError:
            pass
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self._call = None
        if self._grpc is not None:  # the next stream gets a fresh channel: no reconnect backoff
            channel, self._grpc = self._grpc, None
            asyncio.ensure_future(channel.close())
        self._fail(error)

    def _fail(self, error: ConnectionError) -> None:
        """The stream ended: every waiting request gets `error`; the next send_many opens a new stream."""
        with self._lock:
            if self._failed is None:
                self._failed = error
            failed, self._callbacks = self._callbacks, {}
            self._queue.clear()
            self._woken = False
        for callback in failed.values():
            settle_callback(callback, error)

    def _close(self) -> None:
        with self._lock:
            self._closing = True
        if self._call is not None:
            self._call.cancel()
        self._fail(ConnectionError(f"stream to bookie {self.address} closed"))
        if self._grpc is not None:
            channel, self._grpc = self._grpc, None
            asyncio.ensure_future(channel.close())
