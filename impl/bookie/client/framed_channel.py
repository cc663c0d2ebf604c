"""A framed connection to a bookie (impl/bookie/framed.py) on the transport's IoLoop: the client's default.

The same contract as the gRPC stream it replaced (bench/history/pulsar.md): `send_many` from any thread queues
requests and wakes the loop at most once until the loop has taken them; the loop writes whatever is
queued as frames of up to MAX_BATCH requests, straight to the socket; each reply's callback runs on the
loop thread, in reply order, once: with the reply, a stream-level error code, or the ConnectionError that
ended the connection. A connection that ended is opened again by the next `send_many`, so a restarted
bookie is reached at once.
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


class FramedBookieChannel:
    """One framed connection to a bookie, driven by an IoLoop; `send_many` from any thread."""

    def __init__(self, address: str, io: IoLoop) -> None:
        self.address = address
        host, _, port = address.rpartition(":")
        self._host, self._port = host, int(port)
        self.io = io
        self._tags = itertools.count(1)
        self._callbacks: dict[int, Callback] = {}
        self._lock = threading.Lock()  # guards _callbacks, _queue, _woken, _failed, _closing
        self._queue: deque[bytes] = deque()  # request frames (wire.request_frame)
        self._woken = False  # a flush is due on the loop and has not yet found the queue empty
        self._failed: ConnectionError | None = None
        self._closing = False
        self._protocol: _Connection | None = None  # the connection, once open (loop thread only)
        self._connecting: asyncio.Future[None] | None = None
        io.call(self._start)

    # ---- any thread ---------------------------------------------------------------------------------

    def send_many(self, requests: Sequence[tuple[Request, Callback]], encoded: dict[int, bytes] | None = None) -> None:
        """Queue requests in order; each callback runs once, on the loop thread (or inline, with a
        ConnectionError, once the channel is closed)."""
        if not requests:
            return
        tagged = [(next(self._tags), request, callback) for request, callback in requests]
        messages = [wire.request_frame(tag, request, encoded) for tag, request, _ in tagged]
        closed: ConnectionError | None = None
        reopen = wake = False
        with self._lock:
            if self._closing:
                closed = self._failed or ConnectionError(f"connection to bookie {self.address} closed")
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
        try:
            _, protocol = await loop.create_connection(lambda: _Connection(self), self._host, self._port)
        except OSError as exc:
            self._connecting = None
            self._fail(ConnectionError(f"bookie {self.address}: {exc}"))
            return
        self._connecting = None
        if self._closing:
            protocol.transport.close()
            return
        self._protocol = protocol
        self._flush()

    def _flush(self) -> None:
        """Write everything queued, as frames of up to MAX_BATCH requests (once connected)."""
        protocol = self._protocol
        if protocol is None:
            return  # written once connected (`_connect` flushes)
        frames: list[bytes] = []
        with self._lock:
            queued = self._queue
            while queued:
                batch: list[bytes] = []
                size = 0
                while queued and len(batch) < MAX_BATCH and size < MAX_BATCH_BYTES:
                    element = queued.popleft()
                    batch.append(element)
                    size += len(element)
                frames.append(framed.frame(batch))
            self._woken = False
        if frames:
            protocol.transport.write(frames[0] if len(frames) == 1 else b"".join(frames))

    def _ended(self, protocol: _Connection, error: ConnectionError) -> None:
        if self._protocol is protocol:
            self._protocol = None
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
        if self._protocol is not None:
            self._protocol.transport.close()
            self._protocol = None
        self._fail(ConnectionError(f"connection to bookie {self.address} closed"))


class _Connection(asyncio.Protocol):
    """The socket's side: the preface first, then replies cut into frames and answered."""

    transport: asyncio.Transport

    def __init__(self, channel: FramedBookieChannel) -> None:
        self.channel = channel
        self.reader = framed.FrameReader()
        self.error: ConnectionError | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.write(framed.PREFACE)

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
