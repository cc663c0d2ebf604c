"""An HTTP/1.1 server: h11 parses and frames, asyncio moves the bytes, a thread pool runs the handlers.

Handlers may wait on the metadata store or the bookies, so they run on the pool, never on the
event loop. A connection serves its requests one after another (keep-alive). What the client
sends is bounded: the request line and headers by h11 (16 KiB), the body by `max_body`; a
request over either, or one h11 cannot parse, is answered 4xx with a JSON reason and the
connection closes. Nothing a client sends stops the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import h11

from impl.loop_server import LoopServer
from impl.web.http import Request, Response, reason_phrase

log = logging.getLogger(__name__)

MAX_HEADERS = 16 * 1024
MAX_BODY = 1024 * 1024  # Pulsar's admin bodies are small JSON documents
READ_CHUNK = 64 * 1024
IDLE_TIMEOUT_S = 60.0
LINGER_S = 1.0  # after refusing a request: how long to drain what the client still sends
LINGER_BYTES = 8 * 1024 * 1024


class WebServer:
    """Serve `app` (a Request -> Response callable) on host:port (0 = any free port)."""

    def __init__(
        self,
        app: Callable[[Request], Response],
        host: str = "127.0.0.1",
        port: int = 0,
        max_body: int = MAX_BODY,
        name: str = "web",
        threads: int = 8,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.app = app
        self.max_body = max_body
        self.name = name
        self.server = LoopServer(host, port, f"{name}-http", "HTTPS" if tls else "HTTP", tls)
        self.host, self.port = self.server.host, self.server.port
        self.loop = self.server.loop
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"{name}-http")

    @property
    def address(self) -> str:
        return self.server.address

    @property
    def url(self) -> str:
        return f"{'https' if self.server.tls else 'http'}://{self.address}"

    def start(self) -> None:
        self.server.start(self._connection)

    def stop(self) -> None:
        def cancel_connections() -> None:
            for task in asyncio.all_tasks(self.loop):
                if task is not asyncio.current_task():
                    task.cancel()

        self.server.stop(cancel_connections)
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADERS)
        try:
            while True:
                request = await self._read_request(conn, reader, writer)
                if request is None:
                    return
                response = await self.loop.run_in_executor(self.pool, self.app, request)
                if request.method == "HEAD":
                    response = Response(response.status, b"", response.content_type, response.headers)
                writer.write(_encode(conn, response, len(response.body)))
                await writer.drain()
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (ConnectionError, asyncio.CancelledError, TimeoutError, h11.LocalProtocolError):
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Request | None:
        """The next whole request, or None when the connection is done (answered with an error if bad)."""
        head: h11.Request | None = None
        body = bytearray()
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as e:
                status = e.error_status_hint if e.error_status_hint >= 400 else 400
                await self._refuse(conn, reader, writer, status, f"malformed HTTP request: {e}")
                return None
            if event is h11.NEED_DATA:
                data = await asyncio.wait_for(reader.read(READ_CHUNK), IDLE_TIMEOUT_S)
                conn.receive_data(data)
                if not data and head is None and conn.their_state is h11.IDLE:
                    return None
                continue
            if isinstance(event, h11.Request):
                head = event
                length = _content_length(event)
                if length is not None and length > self.max_body:
                    await self._refuse(
                        conn, reader, writer, 413, f"the body ({length} bytes) is over {self.max_body} bytes"
                    )
                    return None
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.max_body:
                    await self._refuse(conn, reader, writer, 413, f"the body is over {self.max_body} bytes")
                    return None
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in head.headers}
                target = head.target.decode("latin-1")
                return Request.of(
                    head.method.decode("ascii"), target, headers, bytes(body), self.server.tls is not None
                )
            elif isinstance(event, h11.ConnectionClosed):
                return None

    async def _refuse(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int, reason: str
    ) -> None:
        """Answer with the error, then read and drop what the client is still sending for a moment before
        closing: closing with unread data would reset the connection, and the client could lose the answer."""
        response = Response.error(status, reason)
        with contextlib.suppress(h11.LocalProtocolError, ConnectionError, OSError, TimeoutError):
            writer.write(_encode(conn, response, len(response.body), close=True))
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            dropped = 0
            while dropped < LINGER_BYTES:
                data = await asyncio.wait_for(reader.read(READ_CHUNK), LINGER_S)
                if not data:
                    break
                dropped += len(data)  # a slow or endless sender is cut off by LINGER_S or LINGER_BYTES


def _content_length(request: h11.Request) -> int | None:
    for name, value in request.headers:
        if name == b"content-length":
            return int(value)
    return None


def _encode(conn: h11.Connection, response: Response, length: int, close: bool = False) -> bytes:
    headers = [("Content-Length", str(length)), ("Server", "pulsar-ref")]
    if response.content_type:
        headers.append(("Content-Type", response.content_type))
    headers.extend(response.headers)
    if close:
        headers.append(("Connection", "close"))
    out = conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason_phrase(response.status)))
    assert out is not None
    if response.body:
        out += conn.send(h11.Data(data=response.body)) or b""
    out += conn.send(h11.EndOfMessage()) or b""
    return out
