"""A framed connection to a bookie (impl/bookie/framed.py) on the transport's IoLoop: the client's default.

The same contract as the gRPC stream it replaced (bench/history/pulsar.md): `send_many` from any thread,
each reply's callback run on the loop thread, in reply order, once: with the reply, a stream-level error
code, or the ConnectionError that ended the connection. A connection that ended is opened again by the
next `send_many`, so a restarted bookie is reached at once.

Sending to an idle connection (nothing in flight on it) takes no thread hand-over: the caller's thread
writes its frames to the socket itself, under the channel's lock, so a lone request (a steady rate below
what fills batches) leaves at once. A busy connection's sends are queued for the loop, which writes
whatever gathered meanwhile in one call, off the caller's thread: at full speed that is fewer system calls
and more of them beside the caller's Python (bench/history/pulsar.md). So is what the socket does not take
at once, and what is sent while the connection is being opened; callers queue behind it until the loop has
written it all, so frames leave in the order they were sent.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import threading
from collections import deque
from collections.abc import Sequence

from google.protobuf.message import DecodeError

from impl.bookie import bookie_pb2 as pb
from impl.bookie import framed, wire
from impl.bookie.channel import MAX_BATCH, MAX_BATCH_BYTES, Callback, answer_batch, settle_callback
from impl.bookie.client.io_loop import IoLoop
from impl.bookie.protocol import Request

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0  # a connection attempt that takes longer fails what waits on it (TimeoutError)


class FramedBookieChannel:
    """One framed connection to a bookie, driven by an IoLoop; `send_many` from any thread."""

    def __init__(self, address: str, io: IoLoop) -> None:
        self.address = address
        host, _, port = address.rpartition(":")
        self._host, self._port = host, int(port)
        self.io = io
        self._tags = itertools.count(1)
        self._callbacks: dict[int, Callback] = {}
        # _lock guards _callbacks, _queue, _sock, _loop_writes, _woken, _failed, _closing, and each send: the
        # bytes of two callers never interleave, and nothing overtakes what is queued.
        self._lock = threading.Lock()
        self._queue: deque[bytes] = deque()  # frames for the loop to write: before the connection is up, or
        self._loop_writes = False  # while the transport still holds unsent bytes (the socket was full)
        self._sock: socket.socket | None = None  # the connected socket, written directly when nothing waits
        self._woken = False  # a `_flush` is due on the loop and has not yet run
        self._failed: ConnectionError | None = None
        self._closing = False
        self._protocol: _Connection | None = None  # the connection, once open (loop thread only)
        self._connecting: asyncio.Future[None] | None = None
        io.call(self._start)

    # ---- any thread ---------------------------------------------------------------------------------

    def send_many(self, requests: Sequence[tuple[Request, Callback]], encoded: dict[int, bytes] | None = None) -> None:
        """Send requests in order; each callback runs once, on the loop thread (or inline, with a
        ConnectionError, once the channel is closed). On an idle connection the caller's thread writes them
        itself: no wake-up of the loop for a send."""
        if not requests:
            return
        tagged = [(next(self._tags), request, callback) for request, callback in requests]
        elements = [wire.request_frame(tag, request, encoded) for tag, request, _ in tagged]
        data = b"".join(framed.frames(elements, MAX_BATCH_BYTES, MAX_BATCH))
        closed: ConnectionError | None = None
        reopen = wake = False
        with self._lock:
            if self._closing:
                closed = self._failed or ConnectionError(f"connection to bookie {self.address} closed")
            else:
                reopen = self._failed is not None
                self._failed = None
                idle = not self._callbacks  # nothing in flight: no other send to gather this one with
                for tag, _, callback in tagged:
                    self._callbacks[tag] = callback
                sock = self._sock
                if sock is not None and idle and not self._loop_writes and not self._queue:
                    try:
                        sent = sock.send(data)
                    except BlockingIOError:
                        sent = 0
                    except OSError:  # the connection broke: the loop hears of it and fails these requests
                        sent = len(data)
                    if sent < len(data):
                        self._queue.append(data[sent:])  # the rest, for the loop, before anything sent later
                        self._loop_writes = wake = True
                        self._woken = True
                else:
                    self._queue.append(data)
                    wake = not self._woken
                    self._woken = True
        if closed is not None:
            for _, _, callback in tagged:
                settle_callback(callback, closed)
            return
        if reopen:
            self.io.call(self._start)  # before the flush: the loop runs them in this order
        if wake or reopen:
            self.io.call(self._flush)

    def close(self) -> None:
        """Close the connection; requests still waiting get a ConnectionError. Does not block."""
        with self._lock:
            self._closing = True  # from now on send_many answers ConnectionError at once
        try:
            self.io.call(self._close)
        except RuntimeError:  # the loop is gone: nothing can answer any more
            self._fail(ConnectionError(f"connection to bookie {self.address} closed"))

    # ---- the loop thread ----------------------------------------------------------------------------

    def _start(self) -> None:
        if self._closing or self._protocol is not None or self._connecting is not None:
            return
        self._connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket()
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, (self._host, self._port)), CONNECT_TIMEOUT_S)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.send(framed.PREFACE)  # a fresh socket's buffer takes 4 bytes
            _, protocol = await loop.create_connection(lambda: _Connection(self), sock=sock)
        except OSError as exc:
            sock.close()
            self._connecting = None
            self._fail(ConnectionError(f"bookie {self.address}: {exc}"))
            return
        self._connecting = None
        if self._closing:
            protocol.transport.close()
            return
        # The transport tells the protocol when its buffer is empty again (`resume_writing`), so that
        # callers may write to the socket themselves again.
        protocol.transport.set_write_buffer_limits(high=0, low=0)
        self._protocol = protocol
        with self._lock:
            self._sock = sock
            self._loop_writes = True  # until what was queued meanwhile is written
            self._woken = True
        self._flush()

    def _flush(self) -> None:
        """Write what is queued (the loop thread); callers write directly again once the socket took it all."""
        protocol = self._protocol
        if protocol is None:
            return  # written once connected (`_connect` flushes)
        transport = protocol.transport
        with self._lock:
            self._woken = False
            if self._queue:
                queued = b"".join(self._queue)
                self._queue.clear()
                transport.write(queued)
            if self._loop_writes and transport.get_write_buffer_size() == 0:
                self._loop_writes = False

    def _ended(self, protocol: _Connection, error: ConnectionError) -> None:
        if self._protocol is protocol:
            self._protocol = None
            with self._lock:
                self._sock = None
                self._loop_writes = False
        self._fail(error)

    def _fail(self, error: ConnectionError) -> None:
        """The connection ended: every waiting request gets `error`; the next send_many opens a new one."""
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
            self._sock = None
        if self._protocol is not None:
            self._protocol.transport.close()
            self._protocol = None
        self._fail(ConnectionError(f"connection to bookie {self.address} closed"))


class _Connection(asyncio.Protocol):
    """The socket's reading side: replies cut into frames and answered; and when the loop's writes end."""

    transport: asyncio.Transport

    def __init__(self, channel: FramedBookieChannel) -> None:
        self.channel = channel
        self.reader = framed.FrameReader()
        self.error: ConnectionError | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def resume_writing(self) -> None:
        """The transport's buffer is empty again (its high mark is 0)."""
        self.channel._flush()

    def data_received(self, data: bytes) -> None:
        channel = self.channel
        try:
            for body in self.reader.feed(data):
                answer_batch(channel._lock, channel._callbacks, pb.StreamRespBatch.FromString(body).responses)
        except (framed.FrameTooLong, DecodeError) as exc:
            self.error = ConnectionError(f"bookie {channel.address}: a reply that is not a frame ({exc})")
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        error = self.error or ConnectionError(f"connection to bookie {self.channel.address} closed: {exc or 'EOF'}")
        self.channel._ended(self, error)
