"""The bookie's port: framed connections served here, gRPC connections relayed to the bookie's gRPC server.

A connection that begins with `framed.PREFACE` is the framed protocol (impl/bookie/framed.py): its thread
reads frames and submits each frame's requests to the bookie in order (`Bookie.submit_many`), and the
replies are written by whichever thread produces them (the journal's writer after its fsync, this thread
for reads and refusals), in one send each when the socket takes it, so an add crosses two threads of the
bookie (the reader, the journal's writer), not the four of a gRPC stream. A reply the socket cannot take at
once (the client reads slowly) is queued for a writer thread of the connection, so the journal's writer
never waits for a client.

Any other connection is a gRPC client (the unary calls, the `Batches` and `Channel` streams): it is
relayed byte for byte to the bookie's gRPC server, which listens on a loopback port of its own.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence

from google.protobuf.message import DecodeError

from impl.bookie import bookie_pb2 as pb
from impl.bookie import framed, wire
from impl.bookie.protocol import ErrorCode, Request, Response
from impl.bookie.replies import MAX_REPLY_BATCH_BYTES, StreamReply

log = logging.getLogger(__name__)

PREFACE_TIMEOUT_S = 10.0  # a connection that sends nothing for this long is closed
RECV_SIZE = 256 * 1024
# A connection whose client leaves this much of its replies unread gets no more of its frames taken until it
# reads them: a client that only sends cannot make the bookie hold its replies without bound (the replies to
# one frame of requests may go over it).
MAX_BACKLOG_BYTES = 32 * 1024 * 1024

SubmitMany = Callable[[Sequence[tuple[Request, Callable[[Response], None]]]], None]  # Bookie.submit_many


class BookieListener:
    """Accepts on host:port (0: any free port, see `.port`); `close()` stops accepting and ends every
    connection. `submit_many` is the bookie's (`Bookie.submit_many`); `grpc_port` the gRPC server's."""

    def __init__(self, submit_many: SubmitMany, grpc_port: int, host: str = "127.0.0.1", port: int = 0) -> None:
        self.submit_many = submit_many
        self.grpc_port = grpc_port
        self._sock = socket.create_server((host, port))
        self.host = host
        self.port = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="bookie-listener", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections = list(self._connections)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._sock.close()
        for conn in connections:
            _shut(conn)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    _shut(conn)
                    return
                self._connections.add(conn)
            threading.Thread(target=self._serve, args=(conn,), name="bookie-connection", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(PREFACE_TIMEOUT_S)
            first = _receive_exactly(conn, len(framed.PREFACE))
            conn.settimeout(None)
            if first == framed.PREFACE:
                _FramedConnection(conn, self.submit_many).serve()
            elif first:
                self._relay_to_grpc(conn, first)
        except OSError as exc:  # the peer went away, or the listener closed it
            log.debug("bookie connection ended: %s", exc)
        finally:
            with self._lock:
                self._connections.discard(conn)
            _shut(conn)

    def _relay_to_grpc(self, conn: socket.socket, first: bytes) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.grpc_port))
        with self._lock:
            if self._closed:
                upstream.close()
                return
            self._connections.add(upstream)
        try:
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream.sendall(first)
            back = threading.Thread(target=_copy, args=(upstream, conn), name="bookie-grpc-relay", daemon=True)
            back.start()
            _copy(conn, upstream)
            back.join()
        finally:
            with self._lock:
                self._connections.discard(upstream)
            _shut(upstream)


class _FramedConnection:
    """One framed client: reads frames on the connection's thread; replies from any thread (`deliver_many`)."""

    def __init__(self, conn: socket.socket, submit_many: SubmitMany) -> None:
        self.conn = conn
        self.submit_many = submit_many
        self._send_lock = threading.Lock()
        self._backlog: deque[bytes] = deque()  # replies the socket did not take at once, for the writer
        self._backlog_bytes = 0
        self._writer: threading.Thread | None = None
        self._writable = threading.Condition(self._send_lock)
        self._ended = False

    def serve(self) -> None:
        reader = framed.FrameReader()
        submit_many = self.submit_many
        try:
            while True:
                data = self.conn.recv(RECV_SIZE)
                if not data:
                    return
                for body in reader.feed(data):
                    self._wait_for_reader()
                    requests: list[tuple[Request, Callable[[Response], None]]] = []
                    refused: list[bytes] = []
                    for msg in pb.StreamReqBatch.FromString(body).requests:
                        request = wire.request_from_pb(msg)
                        if request is None:
                            refused.append(wire.response_frame(msg.tag, ErrorCode.EBADREQ))
                        else:
                            requests.append((request, StreamReply(self, msg.tag)))
                    if refused:
                        self._send(framed.frame(refused))
                    if requests:
                        submit_many(requests)
        except framed.FrameTooLong as exc:
            log.warning("bookie connection closed: %s", exc)
        except DecodeError as exc:
            log.warning("bookie connection closed: a frame that is not a StreamReqBatch (%s)", exc)
        finally:
            self._end()

    def _end(self) -> None:
        """No more replies: the client is gone or the connection broke."""
        with self._send_lock:
            self._ended = True
            self._backlog.clear()
            self._backlog_bytes = 0
            self._writable.notify_all()

    # ---- replies, from any thread ---------------------------------------------------------------------

    def deliver_many(self, replies: Sequence[tuple[int, Response]]) -> None:
        parts = (wire.response_frame(tag, response) for tag, response in replies)
        for data in framed.frames(parts, MAX_REPLY_BATCH_BYTES):
            self._send(data)

    def _send(self, data: bytes) -> None:
        with self._send_lock:
            if self._ended:
                return  # the client is gone: nobody waits for this reply
            if not self._backlog:
                try:
                    sent = self.conn.send(data, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    sent = 0
                except OSError:
                    return  # the connection broke; its reader ends it
                if sent == len(data):
                    return
                data = data[sent:]
            self._backlog.append(data)
            self._backlog_bytes += len(data)
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_backlog, name="bookie-replies", daemon=True)
                self._writer.start()
            self._writable.notify_all()

    def _wait_for_reader(self) -> None:
        """Hold off taking the next frame of requests while the client leaves too many replies unread."""
        with self._send_lock:
            while self._backlog_bytes > MAX_BACKLOG_BYTES and not self._ended:
                self._writable.wait()

    def _write_backlog(self) -> None:
        """The replies the socket could not take at once, in order, waiting for the client as long as needed."""
        while True:
            with self._send_lock:
                while not self._backlog and not self._ended:
                    self._writable.wait()
                if self._ended:
                    return
                data = self._backlog[0]
            try:
                self.conn.sendall(data)
            except OSError:  # the connection broke: the reader, waiting for it to drain, must not wait on
                self._end()
                return
            with self._send_lock:
                if self._ended:
                    return  # the reader ended meanwhile and dropped the backlog
                self._backlog.popleft()
                self._backlog_bytes -= len(data)
                self._writable.notify_all()


def _receive_exactly(conn: socket.socket, size: int) -> bytes:
    """`size` bytes, or fewer if the peer closed first."""
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _copy(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(RECV_SIZE):
            target.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
